"""engine/formats on real parts: the families' real chat templates and real tokenizers.

- tests/fixtures/templates/*.jinja are the real templates as llama.cpp ships them
  (llama-cpp-python 0.3.36's sdist, vendor/llama.cpp/models/templates/); detect()
  must name each family from the template's text alone and read its Think switch,
  its default and whether its generation prompt opens the block by rendering it.
- The bundled SmolLM2 vocabulary has no <think> token, so the tags come as text
  pieces split over several real tokens, decoded by the real detokenizer.
- tests/fixtures/templates/vocab_streams.json holds real token ids and pieces that
  llama.cpp gives with the vocabulary-only GGUFs of the same sdist
  (models/ggml-vocab-gemma-4.gguf, whose <|channel>/<channel|> are special
  tokens; ggml-vocab-qwen35.gguf, where <think> is not). Those GGUFs are 6-16 MB
  and not in the repository; ``record_vocab_streams`` below made the file.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.prompt.chat_template import ChatTemplate
from engine.decode.detokenize import IncrementalDetokenizer
from engine.reply_formats import ReasoningParser, layout_by_name, detect, force_close, opens_in_prompt, parse_reply
from engine.reply_formats import template_variables

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"


def source(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")


# file -> (family, prompt opens with thinking on, Think kind, variable, default, closing text)
EXPECTED = {
    "Qwen-Qwen3-0.6B": ("qwen3", False, "switch", "enable_thinking", True, "\n</think>\n\n"),
    "Qwen3.5-4B": ("qwen3", True, "switch", "enable_thinking", True, "\n</think>\n\n"),
    # llama.cpp's copies of QwQ and the R1 Qwen distill add an enable_thinking switch that is off by default
    "Qwen-QwQ-32B": ("qwen3", True, "switch", "enable_thinking", False, "\n</think>\n\n"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("deepseek-r1", True, "switch", "enable_thinking", False,
                                                 "\n</think>\n\n"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("deepseek-r1", True, None, None, None, "\n</think>\n\n"),
    "deepseek-ai-DeepSeek-V3.1": ("deepseek-v3", True, "switch", "enable_thinking", False, "</think>"),
    "deepseek-ai-DeepSeek-V3.2": ("deepseek-v3", True, "switch", "enable_thinking", False, "</think>"),
    "GLM-4.6": ("glm", False, "switch", "enable_thinking", True, "</think>\n"),
    "GLM-4.7-Flash": ("glm", True, "switch", "enable_thinking", True, "</think>"),
    "MiniMax-M2": ("minimax-m2", True, None, None, None, "\n</think>\n\n"),
    "Kimi-K2-Thinking": ("kimi-k2-thinking", False, None, None, None, "</think>"),
    "ByteDance-Seed-OSS": ("seed-oss", False, "budget", "thinking_budget", -1, "</seed:think>\n"),
    "NVIDIA-Nemotron-Nano-v2": ("nemotron", True, "flag", "", "/think", "\n</think>\n\n"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("nemotron-3", True, "switch", "enable_thinking", True,
                                            "\n</think>\n"),
    "openai-gpt-oss-120b": ("gpt-oss", False, "effort", "reasoning_effort", "medium",
                            "<|end|><|start|>assistant<|channel|>final<|message|>"),
    "google-gemma-4-31B-it": ("gemma-4", False, "switch", "enable_thinking", False, "\n<channel|>"),
}
NOT_THINKING = ["Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct", "Kimi-K2-Instruct",
                "smollm2", "llama3", "mistral_inst", "qwen2_5"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_detect_names_each_family_from_its_real_template(name):
    family, opens, kind, variable, default, closing = EXPECTED[name]
    layout = detect(source(name))
    assert layout is not None
    assert (layout.name, layout.prompt_opens, layout.force_close) == (family, opens, closing)
    if kind is None:
        assert layout.think is None
    else:
        assert layout.think is not None
        assert (layout.think.kind, layout.think.variable, layout.think.default) == (kind, variable, default)


@pytest.mark.parametrize("name", NOT_THINKING)
def test_templates_without_reasoning_have_no_layout(name):
    assert detect(source(name)) is None


def _prompt(ct, layout, value):
    """The real template's generation prompt with the Think control set to ``value``."""
    user = {"role": "user", "content": "Wie spät ist es? 🙂"}
    if layout.think is not None and layout.think.kind == "flag":
        return ct.render([{"role": "system", "content": value}, user])
    return ct.render([user], **layout.think.kwargs(value))


@pytest.mark.parametrize("name", [n for n, e in EXPECTED.items() if e[2] in ("switch", "flag", "budget")])
def test_thinking_off_never_leaves_the_prompt_inside_a_block(name):
    layout = detect(source(name))
    ct = ChatTemplate(source(name))
    on, off = _prompt(ct, layout, layout.think.choices[0]), _prompt(ct, layout, layout.think.off_value())
    assert on != off
    assert opens_in_prompt(layout, on) == layout.prompt_opens
    assert not opens_in_prompt(layout, off)


def test_the_switch_is_read_from_the_variables_the_template_reads():
    assert "enable_thinking" in template_variables(source("Qwen-Qwen3-0.6B"))
    assert "reasoning_effort" in template_variables(source("openai-gpt-oss-120b"))
    assert {"thinking", "enable_thinking"} <= template_variables(source("deepseek-ai-DeepSeek-V3.1"))
    # gpt-oss: each effort changes the system prompt
    ct = ChatTemplate(source("openai-gpt-oss-120b"))
    layout = detect(source("openai-gpt-oss-120b"))
    prompts = {e: ct.render([{"role": "user", "content": "hi"}], **layout.think.kwargs(e))
               for e in layout.think.choices}
    assert all(f"Reasoning: {e}" in p for e, p in prompts.items())


def test_a_family_is_known_by_its_text_not_its_name():
    # the same template text under any name, and a name without the text
    assert detect(source("Qwen3.5-4B")).name == "qwen3"
    assert detect(source("Qwen-Qwen2.5-7B-Instruct").replace("Qwen", "Qwen3-Thinking")) is None


def test_the_vocabulary_names_a_layout_the_template_does_not():
    plain = source("qwen2_5")
    assert detect(plain) is None
    tokens = ["a", "<think>", "</think>", "<|im_start|>"]
    layout = detect(plain, tokens)
    assert layout is not None and (layout.open, layout.close) == ("<think>", "</think>")
    assert layout.tag_ids == {"<think>": 1, "</think>": 2}
    harmony = detect(None, ["x", "<|start|>", "<|channel|>", "<|message|>", "<|end|>"])
    assert harmony is not None and harmony.channels and harmony.tag_ids["<|channel|>"] == 2
    assert detect(None, ["a", "b"]) is None and detect("", ()) is None


def test_a_template_that_cannot_render_keeps_the_tables_layout():
    broken = "{{ raise_exception('no') }}<|im_start|><think>"
    layout = detect(broken)
    assert layout == layout_by_name("qwen3").with_(tag_ids={})


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_closing_text_closes_the_block_for_the_parser(name):
    layout = detect(source(name))
    opened = layout.prompt_opens
    start = "" if opened else ("<|channel|>analysis<|message|>" if layout.channels else layout.open)
    reply = start + "Erst nachdenken … 思考" + force_close(layout) + "Antwort."
    s = parse_reply(layout, reply, in_reasoning=opened)
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("Erst nachdenken … 思考", "Antwort.", False)


@pytest.mark.parametrize("name", ["Qwen-Qwen3-0.6B", "Qwen3.5-4B", "GLM-4.6", "GLM-4.7-Flash", "MiniMax-M2",
                                  "google-gemma-4-31B-it"])
def test_the_split_is_the_one_the_familys_own_template_makes(name):
    """These templates split a raw reply held in ``content`` themselves; ours must agree."""
    layout = detect(source(name))
    ct = ChatTemplate(source(name))
    raw = f"{layout.open}\nZuerst: 2+2.\nDann prüfen.\n{layout.close}\n\nEs ist 4. ✓"
    s = parse_reply(layout, raw)
    kw = layout.think.kwargs(True) if layout.think is not None else {}
    user = {"role": "user", "content": "2+2?"}
    as_raw = ct.render([user, {"role": "assistant", "content": raw}], add_generation_prompt=False, **kw)
    as_parts = ct.render([user, {"role": "assistant", "content": s.text, "reasoning_content": s.reasoning}],
                         add_generation_prompt=False, **kw)
    assert as_raw == as_parts
    assert s.text == "Es ist 4. ✓"


# -- real tokens ------------------------------------------------------------------------

def _stream(layout, ids, pieces, **kw):
    parser = ReasoningParser(layout, clock=lambda: 0.0, **kw)
    events = []
    for tid, piece in zip(ids, pieces, strict=True):
        events += parser.feed(tid, piece)
    events += parser.finish()
    return events, parser.summary


def test_bundled_model_tokens_split_the_tags_and_the_parser_still_finds_them(llama_backend):
    reply = "<think>Let me see: 日本 🙂</think>Hello"
    ids = llama_backend.tokenize(reply, special=True)
    assert len(llama_backend.tokenize("<think>", special=True)) > 1      # the tag really is split
    detok = IncrementalDetokenizer(llama_backend.token_bytes)
    pieces = [detok.push(i) for i in ids]
    pieces[-1] += detok.flush()
    assert "".join(pieces) == reply
    events, s = _stream(layout_by_name("qwen3"), ids, pieces)
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("Let me see: 日本 🙂", "Hello", False)
    assert "".join(e.text for e in events) == reply
    assert s.reasoning_tokens + s.answer_tokens == len(ids)
    assert s.answer_tokens == len(llama_backend.tokenize("Hello", special=True))
    # stopped after any token: never a half tag shown, always what was fed
    for n in range(1, len(ids)):
        fed = "".join(pieces[:n])
        events, s = _stream(layout_by_name("qwen3"), ids[:n], pieces[:n])
        assert "".join(e.text for e in events) == fed
        if not s.had_reasoning:                      # cut inside the open tag: the text is kept
            assert (s.text, s.reasoning) == (fed, "") and "<think>".startswith(fed)
        elif s.reasoning_unfinished:
            assert "<think>" + s.reasoning == fed and s.text == ""
        else:
            assert "<think>" + s.reasoning + "</think>" + s.text == fed


def test_the_bundled_models_own_template_has_no_reasoning_layout(llama_backend):
    assert detect(llama_backend.chat_template, llama_backend.vocab().tokens) is None


@pytest.fixture(scope="module")
def vocab_streams():
    return json.loads((TEMPLATES / "vocab_streams.json").read_text(encoding="utf-8"))


def test_gemma_4_real_special_tokens(vocab_streams):
    gemma = vocab_streams["gemma-4"]
    tokens = [""] * gemma["n_vocab"]
    for text, tid in gemma["special"].items():
        tokens[tid] = text
    layout = detect(source("google-gemma-4-31B-it"), tokens)
    assert layout.tag_ids == {"<|channel>": 100, "<channel|>": 101}
    stream = gemma["streams"]["thought"]
    assert stream["ids"][0] == 100 and 101 in stream["ids"]              # one token each
    events, s = _stream(layout, stream["ids"], stream["pieces"])
    assert (s.reasoning, s.text) == ("The user says hi; answer briefly.", "Hello! How can I help?")
    assert (s.reasoning_tokens, s.answer_tokens) == (stream["ids"].index(101) + 1,
                                                     len(stream["ids"]) - stream["ids"].index(101) - 1)
    assert "".join(e.text for e in events) == stream["text"]
    # a detokenizer that renders control tokens as nothing (llama.cpp's piece without special=True):
    # the layout's own tag tokens are spelled from their ids, so the split is the same
    blank = ["" if tid in (100, 101) else piece for tid, piece in zip(stream["ids"], stream["pieces"])]
    _, again = _stream(layout, stream["ids"], blank)
    assert (again.reasoning, again.text) == (s.reasoning, s.text)
    stream = gemma["streams"]["unfinished"]
    _, s = _stream(layout, stream["ids"], stream["pieces"])
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("Still thinking about 日本語 and emoji 🙂", "", True)
    stream = gemma["streams"]["no_thought"]
    _, s = _stream(layout, stream["ids"], stream["pieces"])
    assert (s.reasoning, s.text, s.had_reasoning) == ("", "Hello there.", False)


def test_qwen35_vocabulary_writes_think_as_text_pieces(vocab_streams):
    qwen = vocab_streams["qwen35"]
    assert "<think>" not in qwen["special"]            # the vocab-only GGUF has no think token
    stream = qwen["streams"]["think"]
    assert stream["pieces"][:3] == ["<th", "ink", ">\n"] and ">\n\n" in stream["pieces"]
    events, s = _stream(detect(source("Qwen3.5-4B")), stream["ids"], stream["pieces"])
    assert (s.reasoning, s.text) == ("Let me see.", "Hello!")
    assert "".join(e.text for e in events) == stream["text"]


def record_vocab_streams(models_dir: str) -> dict:  # pragma: no cover - how the fixture was made
    """Rebuild vocab_streams.json from llama.cpp's models/ directory (needs the sdist's GGUFs)."""
    import ctypes

    import llama_cpp as lc

    def load(name):
        params = lc.llama_model_default_params()
        params.vocab_only = True
        model = lc.llama_model_load_from_file(f"{models_dir}/{name}".encode(), params)
        return model, lc.llama_model_get_vocab(model)

    def stream(vocab, text):
        data = text.encode()
        buf = (lc.llama_token * (len(data) + 8))()
        n = lc.llama_tokenize(vocab, data, len(data), buf, len(buf), False, True)
        piece = ctypes.create_string_buffer(256)
        ids = list(buf[:n])
        pieces = [piece.raw[:lc.llama_token_to_piece(vocab, i, piece, 256, 0, True)].decode() for i in ids]
        return {"text": text, "ids": ids, "pieces": pieces}

    def special(vocab):
        flags = lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_USER_DEFINED
        out = {}
        for i in range(lc.llama_vocab_n_tokens(vocab)):
            text = (lc.llama_vocab_get_text(vocab, i) or b"").decode()
            if lc.llama_vocab_get_attr(vocab, i) & flags and "unused" not in text and "[PAD" not in text:
                out[text] = i
        return out

    lc.llama_backend_init()
    _, gemma = load("ggml-vocab-gemma-4.gguf")
    _, qwen = load("ggml-vocab-qwen35.gguf")
    return {
        "source": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/models/ggml-vocab-*.gguf, loaded with "
                  "llama_cpp (vocab_only=True); pieces from llama_token_to_piece(special=True)",
        "gemma-4": {"n_vocab": lc.llama_vocab_n_tokens(gemma), "special": special(gemma), "streams": {
            "thought": stream(gemma, "<|channel>thought\nThe user says hi; answer briefly.<channel|>"
                                     "Hello! How can I help?"),
            "unfinished": stream(gemma, "<|channel>thought\nStill thinking about 日本語 and emoji 🙂"),
            "no_thought": stream(gemma, "Hello there.")}},
        "qwen35": {"n_vocab": lc.llama_vocab_n_tokens(qwen), "special": special(qwen), "streams": {
            "think": stream(qwen, "<think>\nLet me see.\n</think>\n\nHello!")}},
    }


CHAT = [
    {"role": "system", "content": "Sei kurz. 🙂"},
    {"role": "user", "content": "Was ist 2+2?"},
    # both names, as transformers' _alias_reasoning_fields fills them in
    {"role": "assistant", "content": "4.", "reasoning_content": "2+2=4 — 简单", "thinking": "2+2=4 — 简单"},
    {"role": "user", "content": "Und 3+3?"},
]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_thinking_templates_render_as_transformers_does(name):
    from transformers.utils.chat_template_utils import render_jinja_template

    layout = detect(source(name))
    values = [None] if layout.think is None or layout.think.kind == "flag" else list(layout.think.choices)
    for value in values:
        kwargs = {} if value is None else layout.think.kwargs(value)
        expected, _ = render_jinja_template(conversations=[CHAT], chat_template=source(name),
                                            add_generation_prompt=True, **kwargs)
        assert ChatTemplate(source(name)).render(CHAT, **kwargs) == expected[0]


def _generate(engine, prompt: str, grammar: str, max_tokens: int = 80):
    """Greedy tokens from the bundled model under ``grammar``, with their pieces as the detokenizer gives them."""
    from engine.types import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, grammar=grammar)
    final = [e for e in engine.complete(prompt, params) if e.kind == "final"][0]
    detok = IncrementalDetokenizer(engine.backend.token_bytes)
    pieces = [detok.push(t) for t in final.token_ids]
    if pieces:
        pieces[-1] += detok.flush()
    assert "".join(pieces) == final.text
    return final, pieces


@pytest.mark.parametrize("name", ["Qwen-Qwen3-0.6B", "Qwen3.5-4B", "openai-gpt-oss-120b"])
def test_a_real_stream_in_each_layout_from_the_bundled_model(engine, name):
    """The family's template renders the prompt; a grammar fixes the reply's shape on the bundled model;
    the tokens, the detokenizer and the parser are real."""
    layout = detect(source(name))
    prompt = ChatTemplate(source(name)).render([{"role": "user", "content": "Say hi."}],
                                               **layout.think.kwargs(_on(layout)))
    opened = opens_in_prompt(layout, prompt)
    assert opened == layout.prompt_opens
    if layout.channels:
        start, close = '"<|channel|>analysis<|message|>"', f'"{layout.force_close}"'
    else:
        start = '""' if opened else json.dumps(layout.open + "\n")
        close = json.dumps("\n" + layout.close + "\n\n")
    grammar = f'root ::= {start} [a-z]{{2,8}} " " [a-z]{{2,8}} {close} [A-Z] [a-z]{{2,10}} "."\n'
    final, pieces = _generate(engine, prompt, grammar)
    events, s = _stream(layout, final.token_ids, pieces, in_reasoning=opened)
    assert "".join(e.text for e in events) == final.text
    assert s.reasoning.count(" ") == 1 and s.reasoning.replace(" ", "").isalpha()
    assert s.text[0].isupper() and s.text.endswith(".") and not s.reasoning_unfinished
    assert s.reasoning_tokens + s.answer_tokens == len(final.token_ids)
    # stopped after any token (max_tokens, Stop): greedy decoding makes that run this prefix
    opening = "<|channel|>analysis<|message|>" if layout.channels else ("" if opened else layout.open)
    ending = "<|end|>" if layout.channels else "\n" + layout.close   # a cut close tag stays the model's text
    seen_unfinished = False
    for n in range(1, len(final.token_ids)):
        events, cut = _stream(layout, final.token_ids[:n], pieces[:n], in_reasoning=opened)
        assert "".join(e.text for e in events) == "".join(pieces[:n])
        if cut.reasoning_unfinished:
            seen_unfinished |= bool(cut.reasoning)
            assert cut.text == "" and (s.reasoning + ending).startswith(cut.reasoning)
        elif not cut.had_reasoning:                   # still inside the open tag
            assert opening.startswith(cut.text) and cut.reasoning == ""
        else:
            assert cut.reasoning == s.reasoning and s.text.startswith(cut.text)
    assert seen_unfinished


def _on(layout):
    return "medium" if layout.think.kind == "effort" else layout.think.choices[0]
