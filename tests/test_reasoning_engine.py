"""Thinking models through the engine, on the real bundled model wearing real families' templates.

The bundled SmolLM2 does not think, so a GBNF grammar fixes the reply's shape where a test
needs reasoning ("reply" scope: the grammar covers the tags too); the template, tokenizer,
llama.cpp, the detokenizer and the parser are all real. Greedy, so every figure is exact.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.backends.llama.backend import LlamaCppBackend
from engine.engine import Engine
from engine.errors import HearthError
from engine.reply_formats import force_close
from engine.decode.generate import drive, generate_step
from engine.decode.constraint import ConstrainedSampler
from engine.kv.prefix_cache import common_prefix_len
from engine.decode.sampling import make_sampler
from engine.prompt.messages import Message
from engine.types import SamplingParams

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"
ASK = [Message("user", "Say hi.")]
# The whole reply's shape: a block of three short words, then a one-word answer.
SHAPED = ('root ::= "<think>\\n" [a-z]{2,8} " " [a-z]{2,8} " " [a-z]{2,8} "\\n</think>\\n\\n" '
          '[A-Z] [a-z]{2,10} "."\n')
ANSWER = 'root ::= [A-Z] [a-z]{2,10} "."\n'


def wearing(bundled_path, name: str) -> Engine:
    b = LlamaCppBackend(bundled_path, n_ctx=2048, n_threads=1)
    b.chat_template = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    return Engine(b)


@pytest.fixture(scope="module")
def qwen3(bundled_path):
    e = wearing(bundled_path, "Qwen-Qwen3-0.6B")
    yield e
    e.close()


def run(engine: Engine, messages, params: SamplingParams, **kw):
    events = list(engine.stream(messages, params, **kw))
    assert [e.kind for e in events].count("final") == 1 and events[-1].kind == "final"
    return events[:-1], events[-1]


def greedy(**kw) -> SamplingParams:
    return SamplingParams(**{"temperature": 0.0, "max_tokens": 60, **kw})


def test_the_layout_is_known_once_from_the_template_and_vocabulary(qwen3, bundled_path):
    assert qwen3.layout is not None and qwen3.layout.name == "qwen3"
    assert qwen3.think is not None and qwen3.think.variable == "enable_thinking" and qwen3.think.default is True
    plain = Engine(LlamaCppBackend(bundled_path, n_ctx=256, n_threads=1))   # the bundled model's own template
    try:
        assert plain.layout is None and plain.think is None
        events = list(plain.stream(ASK, greedy(max_tokens=8)))
        assert {e.kind for e in events} <= {"delta", "final"} and events[-1].reasoning is None
        assert events[-1].text == "".join(e.text for e in events[:-1])
        assert events[-1].stats.answer_tokens == events[-1].stats.generated_tokens
    finally:
        plain.close()


def test_template_kwargs_reach_the_template(qwen3):
    off = qwen3.think.kwargs(False)
    assert qwen3.render(ASK, off).endswith("<think>\n\n</think>\n\n")
    assert not qwen3.render(ASK).endswith("</think>\n\n")
    _, final = run(qwen3, ASK, greedy(max_tokens=4), template_kwargs=off)
    assert final.stats.prompt_tokens == len(qwen3.prompt_tokens(ASK, off))
    assert final.stats.prompt_tokens > len(qwen3.prompt_tokens(ASK))


def test_a_thinking_reply_streams_its_reasoning_apart_from_its_answer(qwen3):
    events, final = run(qwen3, ASK, greedy(grammar=SHAPED, grammar_scope="reply"))
    reasoning = "".join(e.text for e in events if e.kind == "reasoning")
    answer = "".join(e.text for e in events if e.kind == "delta")
    assert final.reasoning == reasoning and final.text == answer and not final.reasoning_open
    assert reasoning.count(" ") == 2 and reasoning.replace(" ", "").isalpha()   # no tag, no newline
    assert answer[0].isupper() and answer.endswith(".") and answer[1:-1].isalpha()
    kinds = [e.kind for e in events]
    assert kinds.index("delta") > max(i for i, k in enumerate(kinds) if k == "reasoning")
    st = final.stats
    assert st.reasoning_tokens + st.answer_tokens == st.generated_tokens == len(final.token_ids)
    assert st.reasoning_tokens > st.answer_tokens > 0
    assert st.ttft_answer_ms >= st.ttft_ms > 0 and st.reasoning_ms > 0 and st.reasoning_at_ms > 0
    start, end = st.thinking_span_ms
    assert 0 < start < end <= st.ttft_answer_ms <= st.e2e_ms      # the timeline's thinking span
    d = st.as_dict()
    assert {"reasoning_tokens", "answer_tokens", "ttft_answer_ms", "reasoning_ms", "reasoning_tok_s",
            "answer_tok_s", "notes"} <= set(d)
    # Every generated character is in one of the two parts or is the layout's markup.
    raw = b"".join(qwen3.backend.token_bytes(t) for t in final.token_ids).decode("utf-8")
    assert raw == f"<think>\n{reasoning}\n</think>\n\n{answer}"


def test_a_reply_cut_inside_its_block_keeps_the_reasoning_marked_unfinished(qwen3):
    events, final = run(qwen3, ASK, greedy(grammar=SHAPED, grammar_scope="reply", max_tokens=10))
    assert final.finish_reason == "max_tokens" and final.reasoning_open
    assert final.text == "" and final.reasoning and "<" not in final.reasoning
    assert all(e.kind == "reasoning" for e in events)


def test_a_stop_string_applies_to_the_raw_reply_reasoning_included(qwen3):
    _, whole = run(qwen3, ASK, greedy(grammar=SHAPED, grammar_scope="reply"))
    second = whole.reasoning.split(" ")[1]
    _, cut = run(qwen3, ASK, greedy(grammar=SHAPED, grammar_scope="reply", stop=(second,)))
    assert cut.finish_reason == "stop_string" and cut.reasoning_open and cut.text == ""
    assert cut.reasoning == whole.reasoning.split(" ")[0] + " "      # the text before the stop string
    # A stop string that is a tag ends the reply there, as llama.cpp's server and vLLM do.
    _, at_close = run(qwen3, ASK, greedy(grammar=SHAPED, grammar_scope="reply", stop=("</think>",)))
    assert at_close.finish_reason == "stop_string" and at_close.reasoning == whole.reasoning


def _raw_greedy(engine: Engine, prefix: list[int], grammar: str | None, n: int) -> list[int]:
    """Greedy decoding from a raw token prefix on a fresh KV: the reference for a forced close."""
    b = engine.backend
    engine.reset()
    sampler = make_sampler(SamplingParams(temperature=0.0))
    constraint = b.grammar(grammar) if grammar else None
    pick = ConstrainedSampler(sampler, constraint) if constraint is not None else sampler
    out: list[int] = []
    try:
        for tok, _ in drive(b, generate_step(prefix, pick, list(prefix))):
            out.append(tok)
            if tok in b.eos_ids or len(out) >= n:
                break
    finally:
        if constraint is not None:
            constraint.close()
        engine.reset()
    return out


def _split_at_close(engine: Engine, tokens: list[int]) -> int:
    closing = engine.backend.tokenize(force_close(engine.layout), add_bos=False, special=True)
    for i in range(len(tokens) - len(closing) + 1):
        if tokens[i:i + len(closing)] == closing:
            return i + len(closing)
    raise AssertionError("the closing tokens are not in the reply")


def test_a_thinking_budget_closes_the_block_and_the_answer_is_what_the_raw_prefix_gives(qwen3):
    # An answer-scoped grammar writes the open tag and then the answer; the reasoning between
    # is the model's own (free), until the budget closes it.
    params = greedy(grammar='root ::= "<think>" ' + ANSWER.split("::= ", 1)[1], reasoning_budget=5)
    events, final = run(qwen3, ASK, params)
    assert final.stats.notes == ["thinking budget of 5 tokens reached; closed the block"]
    assert final.reasoning and not final.reasoning_open and final.finish_reason == "eos"
    assert final.text and final.text[0].isupper() and final.text.endswith(".")
    assert "".join(e.text for e in events if e.kind == "delta") == final.text
    j = _split_at_close(qwen3, final.token_ids)
    prompt = qwen3.prompt_tokens(ASK)
    # The same tokens fed as a raw prefix, then greedy under the answer's grammar: token for token.
    reference = _raw_greedy(qwen3, prompt + final.token_ids[:j], ANSWER, len(final.token_ids) - j)
    assert final.token_ids[j:] == reference
    assert final.stats.reasoning_tokens >= 5


def test_a_budget_on_a_prompt_opened_block_without_any_grammar(bundled_path):
    e = wearing(bundled_path, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    try:
        assert e.layout is not None and e.layout.prompt_opens and e.think is not None
        on = e.think.kwargs(True)       # this template's generation prompt opens the block with thinking on
        events, final = run(e, ASK, greedy(reasoning_budget=4, max_tokens=24), template_kwargs=on)
        assert final.stats.notes == ["thinking budget of 4 tokens reached; closed the block"]
        assert final.reasoning and not final.reasoning_open
        j = _split_at_close(e, final.token_ids)
        assert j == 4 + len(e.backend.tokenize(force_close(e.layout), add_bos=False, special=True))
        rest = len(final.token_ids) - j
        assert rest > 0
        reference = _raw_greedy(e, e.prompt_tokens(ASK, on) + final.token_ids[:j], None, rest)
        assert final.token_ids[j:] == reference
        # Budget 0: the block is closed before the model writes anything in it.
        _, zero = run(e, ASK, greedy(reasoning_budget=0, max_tokens=8), template_kwargs=on)
        assert zero.reasoning == "" and not zero.reasoning_open
        assert zero.token_ids[:len(e.backend.tokenize(force_close(e.layout), add_bos=False, special=True))] == \
            e.backend.tokenize(force_close(e.layout), add_bos=False, special=True)
    finally:
        e.close()


def test_the_reasoning_budget_is_validated():
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(HearthError, match="reasoning_budget"):
            SamplingParams(reasoning_budget=bad)
    with pytest.raises(HearthError, match="grammar_scope"):
        SamplingParams(grammar_scope="reasoning")
    assert SamplingParams(reasoning_budget=0).reasoning_budget == 0


def test_a_follow_up_after_a_thinking_turn_prefills_only_what_changed(qwen3):
    qwen3.reset()
    qwen3.cache.clear()
    _, first = run(qwen3, ASK, greedy(grammar=SHAPED, grammar_scope="reply"))
    p1 = qwen3.prompt_tokens(ASK)
    kv = p1 + first.token_ids        # what the KV holds after the reply (reasoning tokens included)
    turn2 = ASK + [Message("assistant", first.text, reasoning=first.reasoning), Message("user", "And bye?")]
    r1, r2 = qwen3.render(ASK), qwen3.render(turn2)
    assert first.reasoning not in r2        # Qwen3 drops an earlier turn's reasoning
    p2 = qwen3.prompt_tokens(turn2)
    common = common_prefix_len(kv, p2)
    _, second = run(qwen3, turn2, greedy(max_tokens=4))
    st = second.stats
    # The KV is reused up to where the prompts diverge: the whole first prompt...
    assert common == len(p1) and st.cached_tokens == common
    # ... and what is prefilled is exactly the visible answer as re-rendered, the template's
    # tokens and the new message.
    assert st.prefill_tokens == len(p2) - common
    assert r2.startswith(r1)
    new_text = qwen3.backend.tokenize(r2[len(r1):], add_bos=False, special=True)
    assert p2[common:] == new_text
    assert r2[len(r1):].startswith(first.text + "<|im_end|>") and r2.endswith("And bye?<|im_end|>\n"
                                                                             "<|im_start|>assistant\n")
    print(json.dumps({"first_prompt": len(p1), "reply_tokens": len(first.token_ids),
                      "reasoning_tokens": first.stats.reasoning_tokens, "second_prompt": len(p2),
                      "cached": st.cached_tokens, "prefilled": st.prefill_tokens}))


HARMONY = ('root ::= "<|channel|>analysis<|message|>" [a-z]{2,8} " " [a-z]{2,8} '
           '"<|end|><|start|>assistant<|channel|>final<|message|>" [A-Z] [a-z]{2,10} "."\n')


@pytest.fixture(scope="module")
def gpt_oss(bundled_path):
    e = wearing(bundled_path, "openai-gpt-oss-120b")
    yield e
    e.close()


def test_a_harmony_reply_streams_its_analysis_apart_from_its_final_answer(gpt_oss):
    """gpt-oss's channels through the real engine: the template's generation prompt ends at
    ``<|start|>assistant``; the analysis channel is reasoning, the final channel the answer,
    and no header, channel name or <|end|> reaches either (the tags are text pieces here)."""
    assert gpt_oss.layout.name == "gpt-oss" and gpt_oss.layout.channels
    events, final = run(gpt_oss, ASK, greedy(grammar=HARMONY, grammar_scope="reply", max_tokens=120))
    assert final.finish_reason == "eos" and not final.reasoning_open
    assert final.reasoning and final.reasoning.count(" ") == 1 and final.reasoning.replace(" ", "").isalpha()
    assert final.text[0].isupper() and final.text.endswith(".") and final.text[1:-1].isalpha()
    assert "".join(e.text for e in events if e.kind == "reasoning") == final.reasoning
    assert "".join(e.text for e in events if e.kind == "delta") == final.text
    raw = b"".join(gpt_oss.backend.token_bytes(t) for t in final.token_ids).decode("utf-8")
    assert raw == (f"<|channel|>analysis<|message|>{final.reasoning}<|end|><|start|>assistant"
                   f"<|channel|>final<|message|>{final.text}")
    st = final.stats
    assert st.reasoning_tokens + st.answer_tokens == st.generated_tokens and st.answer_tokens > 0


def test_a_harmony_reply_cut_in_its_analysis_is_reasoning_marked_unfinished(gpt_oss):
    _, whole = run(gpt_oss, ASK, greedy(grammar=HARMONY, grammar_scope="reply", max_tokens=120))
    b = gpt_oss.backend
    # the reply's first tokens up to two past the analysis header, as this reply tokenized them
    n = next(k for k in range(len(whole.token_ids)) if b"".join(b.token_bytes(t) for t in whole.token_ids[:k])
             .startswith(b"<|channel|>analysis<|message|>")) + 2
    events, final = run(gpt_oss, ASK, greedy(grammar=HARMONY, grammar_scope="reply", max_tokens=n))
    assert final.finish_reason == "max_tokens" and final.reasoning_open and final.text == ""
    assert final.reasoning and "<|" not in final.reasoning and "analysis" not in final.reasoning
    assert all(e.kind == "reasoning" for e in events)
