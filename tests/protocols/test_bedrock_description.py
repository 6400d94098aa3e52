"""What the layers above read from :data:`BEDROCK_CONVERSE` (BEDROCK.md 2.7, 9.5): the next request's
``toolResult`` blocks, its history, a body, a second response in a recording, how a slot and a call read."""

from __future__ import annotations

from typing import Any

from etf_otel.core._history import HistoryCall, HistoryResult, Turn, judge_history, shapes
from etf_otel.core._linkage import Conversation
from etf_otel.instrumentation._host import call_fields as host_call_fields
from etf_otel.protocols import BEDROCK_CONVERSE, PROTOCOLS, bounded_finish_reason, get
from etf_otel.protocols._bedrock_converse import assemble
from etf_otel.testing.bedrock import (
    body,
    exception,
    frames,
    input_delta,
    message_start,
    message_stop,
    metadata,
    stream,
    text_delta,
    tool_call,
    tool_start,
    tool_use,
)

P = BEDROCK_CONVERSE


def user(*blocks: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def result(tool_use_id: Any, status: Any = None) -> dict[str, Any]:
    block: dict[str, Any] = {"toolUseId": tool_use_id, "content": [{"text": "ok"}]}
    if status is not None:
        block["status"] = status
    return {"toolResult": block}


CALLS = assistant({"text": "Let me check."}, tool_use("tooluse_a", "f", {"a": 1}), tool_use("tooluse_b", "g", {}))
ANSWERED = [user({"text": "hi"}), CALLS, user(result("tooluse_a"), result("tooluse_b", "error"))]


def test_it_is_registered_by_name() -> None:
    assert get("bedrock_converse") is P
    assert PROTOCOLS["bedrock_converse"] is P
    assert P.heading == "Amazon Bedrock Converse"
    assert P.answers_adjacent


def test_its_nine_stop_reasons_are_known_and_others_are_bounded() -> None:
    assert len(P.finish_reasons) == 9
    assert bounded_finish_reason("guardrail_intervened") == "guardrail_intervened"
    assert bounded_finish_reason("malformed_tool_use") == "malformed_tool_use"
    assert bounded_finish_reason("tooluse_secret") == "_OTHER"


def test_result_ids_are_read_from_the_first_message_after_the_assistant_turn() -> None:
    assert P.result_ids({"messages": ANSWERED, "modelId": "m"}) == ["tooluse_a", "tooluse_b"]
    assert P.result_ids(ANSWERED) == ["tooluse_a", "tooluse_b"]
    split = [CALLS, user(result("tooluse_a")), user(result("tooluse_b"))]
    assert P.result_ids(split) == ["tooluse_a", None]  # Converse refuses results split over messages
    odd = [CALLS, {"role": "system", "content": [result("tooluse_a")]}, user(result(7), {"text": "x"}, "block")]
    assert P.result_ids(odd) == [None, None]
    history = [user(result("tooluse_old"))]
    assert P.result_ids(history) == ["tooluse_old"]  # no assistant turn: the first message answers


def test_result_ids_refuse_what_is_not_a_messages_list() -> None:
    for followup in ("text", {"messages": 3}, [CALLS, "not a message"], 7):
        assert P.result_ids(followup) is None


def test_follow_up_gives_the_end_of_the_earlier_request_and_the_answers() -> None:
    assert P.follow_up(ANSWERED) == (1, ["tooluse_a", "tooluse_b"])
    assert P.follow_up([CALLS, user(result({"id": 1}))]) == (0, [None])
    assert P.follow_up([user({"text": "hi"})]) is None
    assert P.follow_up([CALLS, "x"]) is None


def test_history_reads_calls_and_results_with_error_status() -> None:
    server = tool_use("tooluse_s", "nova_code_interpreter", {})
    server["toolUse"]["type"] = "server_tool_use"
    messages = [*ANSWERED[:1], assistant(server, *CALLS["content"], result("tooluse_s")), *ANSWERED[2:]]
    turns = P.history({"messages": messages})
    assert turns == [
        Turn(False, results=(), at=0),
        Turn(True, (HistoryCall("tooluse_a", "f", {"a": 1}), HistoryCall("tooluse_b", "g", {})), at=1),
        Turn(False, results=(HistoryResult("tooluse_a"), HistoryResult("tooluse_b", error=True)), at=2),
    ]
    no_input = P.history([assistant({"toolUse": {"toolUseId": "", "name": 7}}), {"content": None}])
    assert no_input == [Turn(True, (HistoryCall(None, None, None),), at=0), Turn(False, at=1)]
    assert P.history("text") is None


def test_a_follow_up_is_judged_on_the_message_right_after_the_answered_turn() -> None:
    response = assemble(stream(tool_call(1, "tooluse_a", "f", '{"a":1}'), tool_call(2, "tooluse_b", "g")))
    assert response.dispatchable
    turns = P.history(ANSWERED)
    assert turns is not None
    judgement = judge_history(turns, shapes(response), adjacent=P.answers_adjacent)
    assert judgement is not None
    assert (judgement.answered, judgement.result_ids, judgement.drift) == (1, ["tooluse_a", "tooluse_b"], [])
    late = [*ANSWERED[:2], user(result("tooluse_a")), user(result("tooluse_b"))]
    late_turns = P.history(late)
    assert late_turns is not None
    judged = judge_history(late_turns, shapes(response), adjacent=True)
    assert judged is not None
    conversation = Conversation()
    conversation.proposed([call.id for call in response.calls if call.id is not None])
    categories = [finding.category.value for finding in conversation.next_request(judged.result_ids)]
    assert sorted(categories) == ["orphaned_result", "unanswered_call"]


def test_a_complete_body_is_recognised_and_lowered_whole() -> None:
    document = body(tool_use("tooluse_a", "f", {}))
    assert P.complete_body(document) == "a complete Converse body (output, stopReason)"
    assert P.complete_body({"output": {}}) is None
    assert P.complete_body(message_start()) is None
    assert P.body_events(document) == [document]
    assert P.body_events({"output": {}}) == [{"output": {}}]
    assert P.body_events(message_start()) is None
    assert P.judges_bodies


def test_a_message_start_after_an_end_is_a_later_response() -> None:
    first = stream(tool_call(1, "tooluse_a", "f", "{}"))
    assert P.later_responses([*first, *first]) == [len(first)]
    failed = [message_start(), exception(), "x", message_start(), {"a": 1, "b": 2}]
    assert P.later_responses(failed) == [3]
    spliced = [message_start(), text_delta(0), message_start(), message_stop(), metadata()]
    assert P.later_responses(spliced) == []  # a splice inside one stream, for the adapter
    assert P.later_responses([{"a": 1, "b": 2}, {7: {}}]) == []


def test_slots_are_named_and_events_point_at_theirs() -> None:
    assert P.slot_label(0, 3) == "content block 3"
    assert P.slot_label(0, None) == "no open call"
    assert P.event_slot(input_delta(2, "{}")) == 2
    assert P.event_slot(tool_start(4, "tooluse_a", "f")) == 4
    for event in (message_start(), input_delta("2", "{}"), {"a": {}, "b": {}}, "x", {"messageStop": "y"}):
        assert P.event_slot(event) is None


def test_a_host_reads_a_tool_use_block() -> None:
    block = tool_use("tooluse_a", "f", {"a": 1})
    assert P.call_fields(block["toolUse"]) == ("tooluse_a", "f", {"a": 1})
    assert P.call_fields(block) == ("tooluse_a", "f", {"a": 1})
    assert P.call_fields({"id": "call_1", "name": "f", "input": {}}) is None
    # what a host is handed (Strands' tool_use dict): read as Bedrock's, not as an id-less Anthropic block
    assert host_call_fields(block["toolUse"]) == ("tooluse_a", "f", {"a": 1})
    assert host_call_fields({"id": "toolu_1", "name": "f", "input": {}}) == ("toolu_1", "f", {})


def test_detection_takes_exactly_one_known_key() -> None:
    assert P.recognizes({"contentBlockStop": {"contentBlockIndex": 0}})
    assert not P.recognizes({"contentBlockStop": {}, "type": "x"})
    assert not P.recognizes({"type": "content_block_stop"})
    assert not P.recognizes([{"messageStart": {}}])
    assert P.request_path == "/converse-stream"


def test_raw_event_stream_bytes_are_its_binary_recordings() -> None:
    events = stream(tool_call(1, "tooluse_a", "f", "{}"))
    decoded = P.binary_events(frames(events))
    assert decoded is not None and [next(iter(event)) for event in decoded] == [next(iter(e)) for e in events]
    assert P.binary_events(b'{"messageStart": {}}\n') is None
    assert P.binary_events(b"") is None
