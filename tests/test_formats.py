"""engine/formats' streaming parser: reasoning apart from the answer, nothing lost.

Exact events on small hand-written replies, every split of a tag across
tokens, a stream that stops inside a block, stray and malformed markup,
Harmony's channels, and a seeded property test over random replies and random
token boundaries: the events always add up to every character fed, and how the
reply was cut into tokens never changes what is reasoning and what is answer.
The real tokenizer paths are in test_formats_templates.py.
"""
from __future__ import annotations

import itertools
import random

import pytest

from engine.reply_formats import (FAMILIES, Event, ReasoningParser, force_close, layout_by_name, opens_in_prompt,
                                  parse_reply)
from engine.reply_formats.layouts import ThinkControl

QWEN = layout_by_name("qwen3")
R1 = layout_by_name("deepseek-r1")
SEED = layout_by_name("seed-oss")
GEMMA = layout_by_name("gemma-4")
OSS = layout_by_name("gpt-oss")


def run(layout, pieces, **kw):
    """Feed ``pieces`` as tokens; return (events, summary)."""
    parser = ReasoningParser(layout, clock=lambda: 0.0, **kw)
    events = []
    for i, piece in enumerate(pieces):
        events += parser.feed(i, piece)
    events += parser.finish()
    return events, parser.summary


def merged(events):
    """Consecutive events of one kind joined: what a reader of the stream sees."""
    return [Event(kind, "".join(e.text for e in group)) for kind, group in itertools.groupby(events, lambda e: e.kind)]


def test_a_think_block_is_split_from_the_answer_with_the_familys_newlines_as_markup():
    reply = "<think>\nLet me see.\n</think>\n\nHello!"
    events, s = run(QWEN, [reply])
    assert merged(events) == [("markup", "<think>\n"), ("reasoning", "Let me see."),
                              ("markup", "\n</think>\n\n"), ("text", "Hello!")]
    assert (s.reasoning, s.text, s.reasoning_unfinished, s.had_reasoning) == ("Let me see.", "Hello!", False, True)


@pytest.mark.parametrize("reply", [
    "<think>\nLet me see.\n</think>\n\nHello!",
    "<think>a</think>b",
    "\n\n<think>x\n\ny</think>\n\nz\n",
])
def test_a_tag_split_at_every_position_is_never_shown_half(reply):
    want = parse_reply(QWEN, reply)
    for cut in range(1, len(reply)):
        for pieces in ([reply[:cut], reply[cut:]], [reply[:cut], "", reply[cut:]]):
            events, s = run(QWEN, pieces)
            assert "".join(e.text for e in events) == reply
            assert (s.reasoning, s.text) == (want.reasoning, want.text)
            for e in events:   # no event ever carries part of a tag as content
                if e.kind != "markup":
                    assert "<think" not in e.text and "</think" not in e.text and not e.text.endswith("<")
    # and one character per token
    events, s = run(QWEN, list(reply))
    assert (s.reasoning, s.text) == (want.reasoning, want.text)
    assert s.reasoning_tokens + s.answer_tokens == len(reply)


def test_held_back_text_is_released_as_soon_as_it_cannot_be_a_tag():
    parser = ReasoningParser(QWEN)
    assert parser.feed(0, "<thi") == []
    assert parser.feed(1, "nk>") == [("markup", "<think>")]
    assert parser.feed(2, "a </") == [("reasoning", "a ")]   # "</" could start the close tag
    assert parser.feed(3, "b") == [("reasoning", "</b")]
    assert parser.feed(4, "\n\n") == []                        # newlines before a possible close tag wait
    assert parser.feed(5, "c") == [("reasoning", "\n\nc")]
    assert parser.in_reasoning
    assert parser.feed(6, "</think>") == [("markup", "</think>")]
    assert not parser.in_reasoning


def test_a_block_still_open_at_the_end_stays_reasoning_and_is_marked_unfinished():
    events, s = run(QWEN, ["<think>", "\nStill", " thinking", "\n"])
    assert merged(events) == [("markup", "<think>\n"), ("reasoning", "Still thinking"), ("markup", "\n")]
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("Still thinking", "", True)
    # cut inside the close tag: the half tag is the model's text, kept as reasoning
    events, s = run(QWEN, ["<think>", "abc", "</th"])
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("abc</th", "", True)
    assert "".join(e.text for e in events) == "<think>abc</th"


def test_a_reply_with_no_reasoning_is_just_an_answer():
    for reply in ("Hello <b>there</b>", "  indented", "<", "<th", "<thinking>x</thinking>", ""):
        events, s = run(QWEN, list(reply))
        assert (s.text, s.reasoning, s.had_reasoning, s.reasoning_unfinished) == (reply, "", False, False)
        assert all(e.kind == "text" for e in events)
        assert s.answer_tokens == len(reply) and s.reasoning_tokens == 0


def test_a_stray_close_tag_is_answer_text_never_dropped():
    _, s = run(QWEN, ["</think>", "Hello"])
    assert (s.text, s.reasoning, s.had_reasoning) == ("</think>Hello", "", False)
    # after a block, a second close (or open) tag is the answer talking about tags
    _, s = run(QWEN, ["<think>a</think>", "b</think>c <think>d"])
    assert (s.reasoning, s.text) == ("a", "b</think>c <think>d")


def test_a_prompt_opened_block_starts_the_reply_as_reasoning():
    # DeepSeek-R1 distills, Qwen3.5, V3.1 with thinking on: the prompt ends with "<think>\n"
    events, s = run(R1, ["Let", " me", " think.", "\n", "</think>", "\n\n", "42"], in_reasoning=True)
    assert merged(events) == [("reasoning", "Let me think."), ("markup", "\n</think>\n\n"), ("text", "42")]
    assert (s.reasoning_tokens, s.answer_tokens) == (5, 2)
    # a model that writes the open tag again anyway: it is markup, not reasoning
    _, s = run(R1, ["<think>", "\nhm", "</think>", "ok"], in_reasoning=True)
    assert (s.reasoning, s.text) == ("hm", "ok")
    # stopped before the close: all of it is unfinished reasoning
    _, s = run(R1, ["just thinking"], in_reasoning=True)
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("just thinking", "", True)


def test_seed_oss_tags_and_their_budget_reflections():
    reply = ("<seed:think>Plan.<seed:cot_budget_reflect>I have used 12 tokens.</seed:cot_budget_reflect>"
             "</seed:think>The answer.")
    _, s = run(SEED, list(reply))
    assert s.reasoning == "Plan.<seed:cot_budget_reflect>I have used 12 tokens.</seed:cot_budget_reflect>"
    assert s.text == "The answer."
    # a think tag of another family is just text for Seed
    _, s = run(SEED, ["<think>x</think>y"])
    assert (s.text, s.reasoning) == ("<think>x</think>y", "")


def test_gemma_4_thought_channel():
    _, s = run(GEMMA, ["<|channel>", "thought", "\n", "Plan", "\n", "<channel|>", "Hi"])
    assert (s.reasoning, s.text, s.reasoning_tokens, s.answer_tokens) == ("Plan", "Hi", 6, 1)


HARMONY = ["<|channel|>", "analysis", "<|message|>", "User", " greets", ".", "<|end|>",
           "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Hello", "!", "<|return|>"]


def test_harmony_analysis_is_reasoning_and_final_is_the_answer():
    events, s = run(OSS, HARMONY)
    assert merged(events) == [("markup", "<|channel|>analysis<|message|>"), ("reasoning", "User greets."),
                              ("markup", "<|end|><|start|>assistant<|channel|>final<|message|>"),
                              ("text", "Hello!"), ("markup", "<|return|>")]
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("User greets.", "Hello!", False)
    assert (s.reasoning_tokens, s.answer_tokens) == (7, 8)


def test_harmony_commentary_and_several_analysis_messages():
    pieces = ["<|channel|>analysis<|message|>", "first", "<|end|>",
              "<|start|>assistant<|channel|>commentary<|message|>", "Checking the docs.", "<|end|>",
              "<|start|>assistant<|channel|>analysis<|message|>", " second", "<|end|>",
              "<|start|>assistant<|channel|>final<|message|>", "Done."]
    _, s = run(OSS, pieces)
    assert (s.reasoning, s.text) == ("first second", "Checking the docs.Done.")


def test_harmony_stopped_inside_analysis_or_inside_a_header():
    _, s = run(OSS, HARMONY[:5])
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("User greets", "", True)
    events, s = run(OSS, HARMONY[:10])     # ends after "<|start|>assistant<|channel|>"
    assert (s.reasoning, s.text, s.reasoning_unfinished) == ("User greets.", "", False)
    assert events[-1] == ("markup", "<|start|>assistant<|channel|>")
    events, s = run(OSS, [*HARMONY[:9], "<|chan"])     # and inside one of the header's tokens
    assert (s.reasoning, s.text) == ("User greets.", "") and events[-1] == ("markup", "<|start|>assistant<|chan")
    # a header written as text pieces, cut after its first characters, is a header too
    events, s = run(OSS, [*HARMONY[:7], "<|", "st"])
    assert (s.reasoning, s.text) == ("User greets.", "") and merged(events)[-1] == ("markup", "<|end|><|st")


def test_malformed_harmony_is_shown_as_answer_text():
    # a header that ends without <|message|>
    _, s = run(OSS, ["<|channel|>", "analysis", "<|end|>", "Hello"])
    assert (s.reasoning, s.text) == ("", "<|channel|>analysis<|end|>Hello")
    # a model that skips the format altogether
    _, s = run(OSS, ["Just", " an", " answer", " <|"])
    assert (s.text, s.reasoning, s.had_reasoning) == ("Just an answer <|", "", False)
    # a header that never ends is not held forever
    long = ["<|channel|>"] + ["x"] * 600
    events, s = run(OSS, long)
    assert s.text == "".join(long) and events[0].kind == "text"
    # a body that runs into the next header without <|end|>
    _, s = run(OSS, ["<|channel|>analysis<|message|>think", "<|start|>assistant<|channel|>final<|message|>ok"])
    assert (s.reasoning, s.text) == ("think", "ok")


def test_harmony_prompt_opened_analysis():
    assert opens_in_prompt(OSS, "<|start|>assistant<|channel|>analysis<|message|>")
    assert not opens_in_prompt(OSS, "<|start|>assistant")
    _, s = run(OSS, ["thinking", "<|end|>", "<|start|>assistant<|channel|>final<|message|>", "A"], in_reasoning=True)
    assert (s.reasoning, s.text) == ("thinking", "A")


def test_no_layout_passes_everything_through():
    _, s = run(None, ["<think>", "x", "</think>", "y"])
    assert (s.text, s.reasoning, s.had_reasoning) == ("<think>x</think>y", "", False)


def test_force_close_ends_the_block_and_the_model_answers():
    assert force_close(QWEN) == "\n</think>\n\n"
    assert force_close(OSS) == "<|end|><|start|>assistant<|channel|>final<|message|>"
    parser = ReasoningParser(QWEN, in_reasoning=True)
    parser.feed(0, "a long thought")
    assert parser.in_reasoning
    parser.feed(1, force_close(QWEN))      # the closing goes through the parser like any token
    assert not parser.in_reasoning
    parser.feed(2, "Answer.")
    parser.finish()
    assert (parser.summary.reasoning, parser.summary.text) == ("a long thought", "Answer.")
    assert not parser.summary.reasoning_unfinished
    with pytest.raises(ValueError):
        force_close(QWEN.with_(force_close=""))


def test_opens_in_prompt_reads_the_rendered_prompt():
    assert opens_in_prompt(QWEN, "<|im_start|>assistant\n<think>\n")
    assert not opens_in_prompt(QWEN, "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not opens_in_prompt(QWEN, "<|im_start|>assistant\n")
    assert opens_in_prompt(GEMMA, "<|turn>model\n<|channel>thought\n")
    assert not opens_in_prompt(None, "<think>")


def test_time_marks_come_from_the_clock():
    ticks = iter(range(1, 100))
    parser = ReasoningParser(QWEN, clock=lambda: float(next(ticks)))
    for i, piece in enumerate(["<think>", "r", "</think>", "a"]):
        parser.feed(i, piece)
    parser.finish()
    s = parser.summary
    assert (s.t_reasoning_start, s.t_reasoning_end, s.t_answer_start) == (1.0, 2.0, 3.0)
    _, s = run(QWEN, ["plain"])
    assert (s.t_reasoning_start, s.t_reasoning_end) == (None, None) and s.t_answer_start == 0.0


def test_the_parser_refuses_misuse():
    parser = ReasoningParser(QWEN)
    with pytest.raises(RuntimeError):
        _ = parser.summary
    parser.finish()
    assert parser.finish() == []
    with pytest.raises(RuntimeError):
        parser.feed(0, "late")


def test_think_control_kwargs():
    switch = ThinkControl("switch", "enable_thinking", (True, False), True)
    assert switch.kwargs(False) == {"enable_thinking": False} and switch.off_value() is False
    effort = ThinkControl("effort", "reasoning_effort", ("low", "medium", "high"), "medium")
    assert effort.kwargs("high") == {"reasoning_effort": "high"} and effort.off_value() is None
    with pytest.raises(ValueError):
        effort.kwargs("extreme")
    assert ThinkControl("budget", "thinking_budget", (-1, 0), -1).kwargs(512) == {"thinking_budget": 512}
    assert ThinkControl("flag", "", ("/think", "/no_think")).kwargs("/no_think") == {}


# -- property: nothing lost, and token boundaries never matter -------------------------

ALPHABET = ["<think>", "</think>", "<", "</", "think", ">", "\n", "\n\n", " ", "a", "b", "日本", "🙂",
            "<seed:think>", "</seed:think>", "<|channel>", "thought", "<channel|>",
            "<|channel|>", "<|message|>", "<|end|>", "<|start|>", "assistant", "analysis", "final",
            "commentary", "<|return|>", "<|call|>", "<|"]
LAYOUTS = [None, *dict.fromkeys(f.layout for f in FAMILIES)]


def _shape(layout):
    if layout is None:
        return "<think>", "</think>"
    if layout.channels:
        return "<|channel|>analysis<|message|>", "<|end|><|start|>assistant<|channel|>final<|message|>"
    return layout.open, layout.close


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.name if lay else "none")
def test_nothing_is_lost_and_token_boundaries_never_matter(layout):
    rng = random.Random(23)
    for _ in range(300):
        reply = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 25)))
        if rng.random() < 0.5:   # most random replies never open a block; give half of them its shape
            opening, closing = _shape(layout)
            cut = rng.randrange(0, len(reply) + 1)
            reply = opening + reply[:cut] + closing + reply[cut:]
        opened = rng.random() < 0.3
        want = parse_reply(layout, reply, in_reasoning=opened)
        cuts = sorted(rng.sample(range(1, len(reply)), k=min(len(reply) - 1, rng.randrange(0, 12)))) \
            if len(reply) > 1 else []
        pieces = [reply[i:j] for i, j in zip([0, *cuts], [*cuts, len(reply)])]
        events, s = run(layout, pieces, in_reasoning=opened)
        assert "".join(e.text for e in events) == reply
        assert all(e.text for e in events)
        assert s.reasoning == "".join(e.text for e in events if e.kind == "reasoning")
        assert s.text == "".join(e.text for e in events if e.kind == "text")
        assert (s.reasoning, s.text, s.reasoning_unfinished, s.had_reasoning) == (
            want.reasoning, want.text, want.reasoning_unfinished, want.had_reasoning), (reply, pieces)
        assert s.reasoning_tokens + s.answer_tokens == len(pieces)
