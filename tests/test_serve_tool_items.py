"""How the Anthropic blocks and the Responses items of a tool exchange become Hearth's messages
(pure: no model), and how a reply's calls are written back."""
from __future__ import annotations

import pytest

from engine.prompt.messages import Message, ToolCall
from engine.serve.protocols.anthropic_blocks import block_id, tool_use, turn
from engine.serve.protocols.errors import ApiError
from engine.serve.protocols.responses_input import call_item, read_input

CALL = ToolCall("call_abc", "add", '{"a": 2, "b": 3}')


def test_a_user_turn_gives_its_tool_results_first_then_its_text():
    got = turn([{"type": "text", "text": "and then?"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                 "content": [{"type": "text", "text": "no such "}, {"type": "text", "text": "city"}]}],
               "messages[2].content", "user")
    assert got == [Message("tool", "5", tool_call_id="toolu_1"),
                   Message("tool", "Error: no such city", tool_call_id="toolu_2"), Message("user", "and then?")]
    assert turn([{"type": "tool_result", "tool_use_id": "t", "content": "5"}], "m", "user") == \
        [Message("tool", "5", tool_call_id="t")]


def test_an_assistant_turn_keeps_its_reasoning_text_and_calls():
    [m] = turn([{"type": "thinking", "thinking": "add them", "signature": ""}, {"type": "text", "text": "I'll add."},
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": "ü"}}], "m", "assistant")
    assert (m.reasoning, m.content) == ("add them", "I'll add.")
    assert m.tool_calls == (ToolCall("toolu_1", "add", '{"a": 2, "b": "ü"}'),)


def test_a_reply_call_is_a_tool_use_block_with_the_engines_id():
    assert tool_use(CALL) == {"type": "tool_use", "id": "toolu_abc", "name": "add", "input": {"a": 2, "b": 3}}
    assert block_id(ToolCall("Ab3dE5gH9", "add")) == "Ab3dE5gH9"  # Mistral's ids stay as its template wants


@pytest.mark.parametrize("blocks, role, field", [
    ([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}], "user", "m[0].content[0]"),
    ([{"type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": "yes"}], "user", "m[0].is_error"),
    ([{"type": "tool_use", "id": "t", "name": "f", "input": {}}], "user", "m[0]"),
    ([{"type": "tool_use", "name": "f", "input": {}}], "assistant", "m[0].id"),
])
def test_bad_blocks_name_their_field(blocks, role, field):
    with pytest.raises(ApiError) as e:
        turn(blocks, "m", role)
    assert e.value.param == field


def test_responses_items_become_one_assistant_turn_per_call_group():
    got = read_input([
        {"role": "user", "content": "add 2 and 3, and 4 and 5"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "two"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "add", "arguments": '{"a": 4, "b": 5}'},
        {"type": "function_call_output", "call_id": "c1", "output": "5"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "9"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "5 and 9. Once more?"}]},
        {"type": "function_call", "call_id": "c3", "name": "add", "arguments": "{}"},
    ])
    assert [m.role for m in got] == ["user", "assistant", "tool", "tool", "assistant"]
    assert got[1].reasoning == "two" and [c.id for c in got[1].tool_calls] == ["c1", "c2"]
    assert (got[2].tool_call_id, got[2].content, got[3].content) == ("c1", "5", "9")
    assert got[4].content == "5 and 9. Once more?" and [c.id for c in got[4].tool_calls] == ["c3"]


def test_a_reply_call_is_a_function_call_item():
    assert call_item(CALL, "fc_1") == {"type": "function_call", "id": "fc_1", "call_id": "call_abc", "name": "add",
                                       "arguments": '{"a": 2, "b": 3}', "status": "completed"}
