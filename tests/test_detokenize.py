"""The detokenizer must reassemble every string byte for byte, never show
U+FFFD for a split character, and hold back possible stop-string starts."""
from __future__ import annotations

import random

import pytest

from engine.decode.detokenize import IncrementalDetokenizer

SAMPLES = [
    "plain ascii",
    "emoji 😀 and 🎉!",
    "ZWJ family 👨‍👩‍👧‍👦 and flag 🇯🇵 and skin tone 👍🏽",
    "中文字符测试，日本語のテキスト、한국어",
    "combining: e\u0301 a\u0308 n\u0303 and Z\u0351\u0352\u0353",
    "mixed 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 and \u200b zero width",
]


def _byte_tokens(chunks: list[bytes]):
    table = {i: c for i, c in enumerate(chunks)}
    return list(table), table.__getitem__


def _split_randomly(data: bytes, rng: random.Random) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, 4)
        out.append(data[i:i + n])
        i += n
    return out


@pytest.mark.parametrize("text", SAMPLES)
def test_single_byte_tokens_reassemble_exactly(text):
    # Byte-fallback style: one token per byte, the worst case for splitting.
    ids, lookup = _byte_tokens([bytes([b]) for b in text.encode()])
    d = IncrementalDetokenizer(lookup)
    deltas = [d.push(i) for i in ids] + [d.flush()]
    assert "".join(deltas) == text
    assert all("\ufffd" not in x for x in deltas)


@pytest.mark.parametrize("seed", range(20))
def test_random_splits_reassemble(seed):
    rng = random.Random(seed)
    text = " ".join(SAMPLES)
    ids, lookup = _byte_tokens(_split_randomly(text.encode(), rng))
    d = IncrementalDetokenizer(lookup)
    deltas = [d.push(i) for i in ids]
    assert "".join(deltas) + d.flush() == text
    assert d.text == text
    assert not any("\ufffd" in x for x in deltas)


def test_text_is_emitted_as_soon_as_valid():
    ids, lookup = _byte_tokens([b"a", b"\xf0\x9f", b"\x98", b"\x80", b"b"])
    d = IncrementalDetokenizer(lookup)
    assert [d.push(i) for i in ids] == ["a", "", "", "😀", "b"]


def test_dangling_bytes_at_end_are_dropped_not_replaced():
    # A stream cut inside a character (max tokens, Stop) must not end in U+FFFD.
    ids, lookup = _byte_tokens([b"ok", b"\xe4\xb8"])  # first two bytes of 中
    d = IncrementalDetokenizer(lookup)
    assert d.push(0) == "ok"
    assert not d.incomplete
    assert d.push(1) == ""
    assert d.incomplete
    assert d.flush() == ""
    assert d.text == "ok"


def test_invalid_bytes_inside_the_stream_still_show_as_replacement():
    # Bytes the model really wrote that are not UTF-8 stay visible as U+FFFD.
    ids, lookup = _byte_tokens([b"a", b"\xff", b"b"])
    d = IncrementalDetokenizer(lookup)
    assert "".join(d.push(i) for i in ids) + d.flush() == "a\ufffdb"


def test_stop_string_split_across_tokens_is_held_then_cut():
    ids, lookup = _byte_tokens([b"Hello ", b"wor", b"ld", b"<", b"|e", b"nd|>", b" never"])
    d = IncrementalDetokenizer(lookup, stop=["<|end|>"])
    out = [d.push(i) for i in ids]
    assert out == ["Hello ", "wor", "ld", "", "", "", ""]
    assert d.stopped and d.stop_string == "<|end|>"
    assert d.text == "Hello world"
    assert d.flush() == ""


def test_held_text_is_released_when_it_stops_matching():
    ids, lookup = _byte_tokens([b"a <", b"|x", b"yz"])
    d = IncrementalDetokenizer(lookup, stop=["<|end|>"])
    assert d.push(0) == "a "
    assert d.push(1) == "<|x"
    assert d.push(2) == "yz"
    assert not d.stopped


def test_holdback_released_at_flush():
    ids, lookup = _byte_tokens([b"value <|en"])
    d = IncrementalDetokenizer(lookup, stop=["<|end|>"])
    assert d.push(0) == "value "
    assert d.flush() == "<|en"
    assert d.text == "value <|en"


def test_earliest_of_several_stop_strings_wins():
    ids, lookup = _byte_tokens([b"one TWO three ONE"])
    d = IncrementalDetokenizer(lookup, stop=["ONE", "TWO"])
    assert d.push(0) == "one "
    assert d.stop_string == "TWO"


def test_stop_string_inside_multibyte_text():
    text = "答案是：😀结束。后面"
    ids, lookup = _byte_tokens([bytes([b]) for b in text.encode()])
    d = IncrementalDetokenizer(lookup, stop=["结束"])
    joined = "".join(d.push(i) for i in ids) + d.flush()
    assert joined == "答案是：😀"


def test_real_tokenizer_round_trips(llama_backend):
    # Real byte-level BPE ids from the bundled model: emoji and CJK split over tokens.
    text = " ".join(SAMPLES)
    ids = llama_backend.tokenize(text, special=False)
    assert len(ids) > len(text.split())
    d = IncrementalDetokenizer(llama_backend.token_bytes)
    deltas = [d.push(i) for i in ids]
    assert "".join(deltas) + d.flush() == text
    assert not any("\ufffd" in x for x in deltas)
    # At least one character really was split across tokens (else this test proves little).
    assert any(x == "" for x in deltas)
