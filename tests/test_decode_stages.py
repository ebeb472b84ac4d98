"""The request path's parts, each alone (issue #41): prepare_request (the same prompt for the engine
and the batch path), the stream stages (reply events, thinking budget, stop rules, stats clock) and
the batch context's slot table."""
from __future__ import annotations

import threading

import pytest
from tiny_backend import TinyBackend

from engine.decode.generate import Steering
from engine.decode.metrics import GenerationStats
from engine.decode.prepare import prepare_request
from engine.decode.reply_events import ReplyEvents
from engine.decode.stop_rules import StopRules
from engine.decode.stream import StatsClock
from engine.decode.thinking_budget import ThinkingBudget
from engine.decode.timeline import NO_TIMELINE
from engine.errors import HearthError
from engine.kv.slots import MIN_SHARE, SlotTable
from engine.prompt.builder import PromptBuilder
from engine.prompt.messages import Message
from engine.reply_formats import layout_by_name
from engine.types import SamplingParams

QWEN3 = layout_by_name("qwen3")


class Detok:
    """What StopRules reads of the detokenizer: whether a character is cut."""

    def __init__(self, incomplete: bool = False) -> None:
        self.incomplete = incomplete


# -- stop rules --------------------------------------------------------------------------------

def test_stop_rules_end_at_max_tokens_finishing_a_cut_character():
    rules = StopRules(TinyBackend(n_ctx=100, eos=3), SamplingParams(max_tokens=4), prompt_len=10, cancel=None)
    assert rules.eos == frozenset({3}) and rules.room(0) == 90
    assert [rules.after(n, Detok()) for n in (1, 2, 3)] == [None, None, None]
    assert rules.after(4, Detok()) == "max_tokens"
    cut = StopRules(TinyBackend(n_ctx=100), SamplingParams(max_tokens=4), prompt_len=10, cancel=None)
    # three more tokens at most to finish a UTF-8 character, then the reply ends even if it is still cut
    assert [cut.after(n, Detok(incomplete=True)) for n in (4, 5, 6, 7)] == [None, None, None, "max_tokens"]


def test_stop_rules_stop_on_cancel_and_on_a_full_context():
    flag = threading.Event()
    rules = StopRules(TinyBackend(n_ctx=12), SamplingParams(max_tokens=100, ignore_eos=True), prompt_len=10,
                      cancel=flag)
    assert rules.eos == frozenset()  # ignore_eos: benchmarks decode past end of turn
    assert rules.after(1, Detok()) is None
    assert rules.after(3, Detok()) == "context_full"  # the newest token could not be fed back
    flag.set()
    assert rules.after(1, Detok()) == "cancelled"


# -- the thinking budget ----------------------------------------------------------------------

def test_a_thinking_budget_is_spent_once_and_closes_the_block():
    stats = GenerationStats()
    steer = Steering()
    budget = ThinkingBudget(TinyBackend(), QWEN3, SamplingParams(reasoning_budget=2), steer, stats)
    assert budget.closing  # the family's closing text, as tokens
    assert budget.spent(False, 100) is False  # answer tokens do not count
    assert [budget.spent(True, 100) for _ in range(3)] == [False, True, False]  # once per reply
    events = ReplyEvents(stats, 0.0, layout=QWEN3, opened=True, steer=steer)
    generated: list[int] = []
    list(budget.close(generated, lambda t: "x", events))
    assert generated == budget.closing and steer.forced == budget.closing
    assert stats.notes[-1] == "thinking budget of 2 tokens reached; closed the block"


def test_a_thinking_budget_without_room_or_a_way_to_close_is_not_applied():
    stats = GenerationStats()
    budget = ThinkingBudget(TinyBackend(), QWEN3, SamplingParams(reasoning_budget=1), Steering(), stats)
    assert budget.spent(True, 0) is False  # no room left for the closing text
    stats = GenerationStats()
    none = ThinkingBudget(TinyBackend(), QWEN3, SamplingParams(reasoning_budget=1), None, stats)
    assert none.budget is None and "this path cannot feed the closing text" in stats.notes[0]
    zero = ThinkingBudget(TinyBackend(), QWEN3, SamplingParams(reasoning_budget=0), Steering(), GenerationStats())
    assert zero.spent_at_start(True, 100) and not zero.spent_at_start(True, 100)


# -- reply events -----------------------------------------------------------------------------

def test_reply_events_split_reasoning_from_the_answer_and_mark_the_first_text():
    stats = GenerationStats()
    events = ReplyEvents(stats, 0.0, layout=QWEN3)
    out = [e for piece in ("<think>", "Let me see.", "</think>", "\n\nHi", " there") for e in events.feed(piece)]
    out += list(events.finish())
    assert [(e.kind, e.text) for e in out if e.text.strip()] == [("reasoning", "Let me see."), ("delta", "Hi"),
                                                                  ("delta", " there")]
    assert events.t_first_text is not None and events.t_first_answer is not None and stats.ttft_ms > 0
    tail, text, reason, made = events.settle("eos")
    assert (tail, text, reason, made) == ([], "Hi there", "eos", ())


# -- the stats clock -------------------------------------------------------------------------

def test_the_stats_clock_times_the_first_and_last_tokens():
    stats = GenerationStats()
    clock = StatsClock(stats, prompt_len=10, cached=4, t_start=0.0, t_prefill=None, timeline=NO_TIMELINE)
    assert (stats.prompt_tokens, stats.cached_tokens, stats.prefill_tokens) == (10, 4, 6)
    clock.tick(1)
    first = stats.prefill_ms
    clock.tick(2)
    assert stats.generated_tokens == 2 and stats.prefill_ms == first and stats.decode_ms >= 0
    events = ReplyEvents(stats, 0.0)
    list(events.finish())
    clock.finish("eos", 2, events, None, kv_used=12)
    assert stats.finish_reason == "eos" and stats.generated_tokens == 2 and stats.decode_ms >= 0


# -- the slot table --------------------------------------------------------------------------

def test_a_prompt_starts_from_the_longest_prefix_any_slot_holds():
    t = SlotTable(3)
    t.extend(0, [1, 2, 3, 4, 5])
    t.extend(1, [1, 2, 9])
    place = t.place([1, 2], [1, 2, 3, 4, 7])
    assert (place.dst, place.src, place.shared) == (1, 0, 4)  # a free slot; slot 0's prefix is copied
    t.copy(place.src, place.dst, place.shared)
    assert t.kv[1] == [1, 2, 3, 4] and t.held(1) == 4
    own = t.place([0, 2], [1, 2, 3, 4, 5])
    assert (own.dst, own.src, own.shared) == (0, 0, 4)  # never the last token: its logits start decoding
    t.cut(0, 2)
    assert t.kv[0] == [1, 2]


def test_a_prompt_waits_for_an_earlier_request_still_reading_the_same_prefix():
    t = SlotTable(2)
    long = list(range(100, 100 + 2 * MIN_SHARE))
    assert t.reading(long + [1], 0, [(0, long + [2])]) == (0, len(long))  # slot 0 holds none of it yet
    t.extend(0, long)
    assert t.reading(long + [1], 0, [(0, long + [2])]) is None  # already there: copy, do not wait
    assert t.reading(long[:MIN_SHARE - 1] + [1], 0, [(1, long)]) is None  # too short to wait for


# -- prepare_request -------------------------------------------------------------------------

def test_prepare_request_is_the_same_for_the_engine_and_the_batch_path(engine):
    msgs = [Message("system", "Be brief."), Message("user", "Hi")]
    params = SamplingParams(max_tokens=8)
    a = prepare_request(engine.prompts, engine.layout, params, messages=msgs)
    b = prepare_request(PromptBuilder(engine.backend, engine.template), engine.layout, params, messages=msgs)
    assert a.tokens == b.tokens == engine.prompt_tokens(msgs) and a.dropped == b.dropped == 0
    raw = prepare_request(engine.prompts, None, params, text="<|im_start|>user")
    assert raw.layout is None and raw.tokens == engine.backend.tokenize("<|im_start|>user", special=True)
    assert len(engine.backend.tokenize("<|im_start|>user", special=True)) < \
        len(engine.backend.tokenize("<|im_start|>user", special=False))  # raw text reads special tokens
    with pytest.raises(HearthError, match="the prompt is empty"):
        prepare_request(engine.prompts, None, params, text="")


def test_prepare_request_shows_tools_to_the_template_and_calls_none_under_none(bundled_path):
    from serving import qwen_tool_engine

    from engine.reply_formats.tools import Tool

    tool = Tool("get_time", {"type": "object", "properties": {}}, "The time now")
    msgs = [Message("user", "What time is it?")]
    with qwen_tool_engine(bundled_path, n_ctx=2048) as e:
        bare = prepare_request(e.prompts, e.layout, SamplingParams(), messages=msgs)
        auto = prepare_request(e.prompts, e.layout, SamplingParams(), messages=msgs, tools=e.plan_tools([tool]))
        none = prepare_request(e.prompts, e.layout, SamplingParams(), messages=msgs,
                               tools=e.plan_tools([tool], "none"))
        assert auto.tools is not None and none.tools is None  # "none": shown, never called
        assert none.tokens == auto.tokens and len(auto.tokens) > len(bare.tokens)  # the same prompt either way
        grammar = auto.constraint(e.backend)
        try:
            assert grammar is not None  # every call follows the tools' grammar
        finally:
            grammar.close()
        assert none.constraint(e.backend) is None
