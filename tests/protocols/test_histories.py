"""Each protocol reads a next request into turns the same way (docs/protocols.md, "Linkage across turns")."""

from __future__ import annotations

from typing import Any

from anthropic.types import Message
from openai.types.chat import ChatCompletionMessage

from etf_otel.core._history import HistoryCall, HistoryResult, Turn
from etf_otel.protocols import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, GEMINI, RESPONSES
from etf_otel.protocols._gemini_description import results


def test_chat_messages_are_turns_in_order_with_calls_and_results() -> None:
    messages: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}, None]},
        {"role": "tool", "tool_call_id": "c1"},
        {"role": "tool", "tool_call_id": 7},
        {"role": "assistant", "content": "done"},
        {"role": "assistant", "tool_calls": [{"id": "", "function": {"name": "g"}}]},
    ]
    assert CHAT_COMPLETIONS.history({"messages": messages}) == [
        Turn(False, at=0),
        Turn(True, (HistoryCall("c1", "f", "{}"),), at=1),
        Turn(False, results=(HistoryResult("c1"),), at=2),
        Turn(False, results=(HistoryResult(None),), at=3),
        Turn(True, at=4),
        Turn(True, (HistoryCall(None, "g", None),), at=5),
    ]
    assert CHAT_COMPLETIONS.history("text") is None


def test_chat_reads_the_sdk_objects_an_application_sends_back() -> None:
    message = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    )
    assert CHAT_COMPLETIONS.history([message]) == [Turn(True, (HistoryCall("c1", "f", "{}"),), at=0)]


def test_responses_runs_of_output_items_are_one_assistant_turn() -> None:
    items: list[Any] = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "fc_2", "id": "fc_2", "name": "g"},
        {"type": "function_call_output", "call_id": "c1"},
        None,
        "text",
        {"type": "function_call_output", "call_id": "fc_2"},
        {"role": "assistant", "content": "done"},
    ]
    assert RESPONSES.history({"input": items}) == [
        Turn(False, at=0),
        Turn(True, (HistoryCall("c1", "f", "{}"), HistoryCall("fc_2", "g", None, item_id=True)), at=1),
        Turn(False, results=(HistoryResult("c1"),), at=4),
        Turn(False, results=(HistoryResult("fc_2"),), at=7),
        Turn(True, at=8),
    ]
    assert RESPONSES.history("hello") == [Turn(False)]
    assert RESPONSES.history(3) is None


def test_anthropic_messages_are_turns_and_only_the_next_message_answers() -> None:
    messages: list[Any] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "text"}, {"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        {"role": "assistant", "content": "text"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "g"}]},
    ]
    assert ANTHROPIC_MESSAGES.history({"messages": messages}) == [
        Turn(False, at=0),
        Turn(True, (HistoryCall("t1", "f", {}),), at=1),
        Turn(False, results=(HistoryResult("t1", error=True),), at=2),
        Turn(False, results=(HistoryResult("t1"),), at=3),
        Turn(True, at=4),
        Turn(True, (HistoryCall("t2", "g", None),), at=5),
    ]
    assert ANTHROPIC_MESSAGES.answers_adjacent and not CHAT_COMPLETIONS.answers_adjacent
    assert ANTHROPIC_MESSAGES.history(None) is None
    message = Message.model_validate(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "x",
            "content": [{"type": "tool_use", "id": "t9", "name": "f", "input": {"a": 1}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    assert ANTHROPIC_MESSAGES.history([{"role": "assistant", "content": message.content}]) == [
        Turn(True, (HistoryCall("t9", "f", {"a": 1}),), at=0)
    ]


def test_gemini_streamed_model_contents_are_one_turn_and_error_responses_are_marked() -> None:
    contents: list[Any] = [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "g", "id": "c2"}}, None]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"error": "no"}}}, {"text": "x"}]},
        {"role": "user", "parts": "not a list"},
    ]
    assert GEMINI.history({"contents": contents}) == [
        Turn(False, at=0),
        Turn(True, (HistoryCall(None, "f", {"a": 1}), HistoryCall("c2", "g", None)), at=1),
        Turn(False, results=(HistoryResult(None, "f", True),), at=3),
        Turn(False, at=4),
    ]
    assert GEMINI.history("text") is None


def test_gemini_results_are_scoped_by_the_turn_that_carries_the_calls() -> None:
    """A framework's own round after the answer, and a refused call answered with an error, are not judged."""
    from etf_otel.protocols._gemini_description import GEMINI as described

    assert described is GEMINI
    from etf_otel.testing import gemini as g

    result = _assemble(g.stream(g.chunk(g.call("get_time", {"zone": "CET"}))))
    contents: list[Any] = [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_time", "args": {"zone": "CET"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_time", "response": {"t": 1}}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "search_tools", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "search_tools", "response": {}}}]},
    ]
    assert [(response["name"], in_scope) for response, in_scope in results(contents, result)] == [("get_time", True)]
    assert GEMINI.link is not None and GEMINI.link(result, {"contents": contents}) == []


def _assemble(events: list[Any]) -> Any:
    assembler = GEMINI.assembler()
    for event in events:
        assembler.feed(event)
    return assembler.finish()


def test_responses_input_ending_with_an_output_item_and_gemini_without_a_matching_turn() -> None:
    assert RESPONSES.history([{"type": "function_call_output", "call_id": "c"}]) == [
        Turn(False, results=(HistoryResult("c"),), at=0)
    ]
    from etf_otel.testing import gemini as g

    result = _assemble(g.stream(g.chunk(g.call("get_time", {"zone": "CET"}))))
    contents: list[Any] = [
        {"role": "user", "parts": [{"functionResponse": {"name": "get_time", "response": {}}}, {"text": "t"}]},
    ]
    assert [in_scope for _, in_scope in results(contents, result)] == [True]  # no model turn: the first content
    assert results([{"role": "model", "parts": [{"text": "no call"}]}], _assemble(g.stream(g.chunk(g.text("x"))))) == []


def test_a_protocol_linked_by_ids_has_no_drift_of_its_own_linkage() -> None:
    """Its drift comes from the history's scope (etf_otel.core._history), never from ``link_drift``."""
    from etf_otel.testing import gemini as g

    assert CHAT_COMPLETIONS.link is None
    assert CHAT_COMPLETIONS.link_drift(_assemble(g.stream(g.chunk(g.text("x")))), {"messages": []}) == []
