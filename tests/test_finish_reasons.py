"""The one table of how a reply can end (engine.metrics.FINISH_REASONS): the engine's
reasons, which are complete, and what the window and the OpenAI API say for each."""
from __future__ import annotations

from typing import get_args

from app.core.text_utils import FINISH_NOTES, finish_note
from engine.decode.metrics import FINISH_REASONS, is_complete, openai_finish_reason
from engine.serve.protocols.openai import Shaper
from engine.types import FinishReason


def test_the_table_names_every_reason_the_engine_gives():
    assert set(FINISH_REASONS) == set(get_args(FinishReason))


def test_only_a_natural_ending_is_complete():
    assert [r for r in FINISH_REASONS if is_complete(r)] == ["eos", "stop_string", "tool_calls"]
    assert not is_complete("cancelled") and not is_complete(None) and not is_complete("error")


def test_cancelled_is_cancelled_everywhere():
    # The API used to call a cancelled reply "stop" (a natural end) while the
    # scheduler's own record called it "cancelled": one answer now.
    assert openai_finish_reason("cancelled") == "cancelled"
    chat, text = Shaper("chat", "m"), Shaper("completion", "m")
    use = {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1}
    assert chat.whole("", "cancelled", use)["choices"][0]["finish_reason"] == "cancelled"
    assert text.whole("", "cancelled", use)["choices"][0]["finish_reason"] == "cancelled"
    assert chat.chunk(None, "cancelled")["choices"][0]["finish_reason"] == "cancelled"
    assert finish_note(is_complete("cancelled"), "cancelled", None) == FINISH_NOTES["cancelled"]


def test_the_openai_vocabulary_of_the_rest():
    assert {r: openai_finish_reason(r) for r in FINISH_REASONS} == {
        "eos": "stop", "stop_string": "stop", "max_tokens": "length", "context_full": "length",
        "cancelled": "cancelled", "tool_calls": "tool_calls"}
    assert openai_finish_reason(None) == openai_finish_reason("from_a_newer_version") == "stop"


def test_every_incomplete_ending_has_a_note_in_the_window():
    for reason in FINISH_REASONS:
        note = finish_note(is_complete(reason), reason, None)
        assert (note == "") == is_complete(reason)
        assert is_complete(reason) or note == FINISH_NOTES[reason]
