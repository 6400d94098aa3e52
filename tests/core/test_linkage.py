"""The linkage rules of one conversation, as plain data (docs/categories.md, linkage phase)."""

from __future__ import annotations

from etf_otel import Conversation, ErrorCategory, Finding
from etf_otel.core._history import Drift, DriftKind

E = ErrorCategory


def test_proposals_wait_for_a_result_and_the_next_request_settles_them() -> None:
    conversation = Conversation()
    conversation.proposed(["call-a", "call-b"])
    assert conversation.pending == ("call-a", "call-b")
    assert conversation.result("call-a") is None
    assert conversation.next_request() == [Finding(E.UNANSWERED_CALL, "call-b")]
    assert conversation.pending == ()


def test_a_second_result_for_one_call_is_a_duplicate_and_an_unknown_id_an_orphan() -> None:
    conversation = Conversation()
    conversation.proposed(["call-a"])
    assert conversation.result("call-a") is None
    assert conversation.result("call-a") == Finding(E.DUPLICATE_RESULT, "call-a")
    assert conversation.result("call-zzz") == Finding(E.ORPHANED_RESULT)
    assert conversation.result(None) == Finding(E.ORPHANED_RESULT)


def test_tool_messages_of_the_next_request_are_what_answers_a_call() -> None:
    conversation = Conversation()
    conversation.proposed(["call-a", "call-b", "call-c"])
    conversation.result("call-c")  # executed, yet the next request carries no message for it
    findings = conversation.next_request(["call-a", "call-a", "call-x", None])
    assert findings == [
        Finding(E.DUPLICATE_RESULT, "call-a"),
        Finding(E.ORPHANED_RESULT),
        Finding(E.ORPHANED_RESULT),
        Finding(E.UNANSWERED_CALL, "call-b"),
        Finding(E.UNANSWERED_CALL, "call-c"),
    ]


def test_the_end_of_the_turn_leaves_unexecuted_calls_unanswered() -> None:
    conversation = Conversation()
    conversation.proposed(["call-a", "call-b"])
    conversation.result("call-b")
    assert conversation.end() == [Finding(E.UNANSWERED_CALL, "call-a")]
    assert conversation.end() == []


def test_open_proposals_are_bounded_oldest_first() -> None:
    conversation = Conversation(max_pending=2)
    conversation.proposed(["call-1", "call-2", "call-3"])
    assert conversation.pending == ("call-2", "call-3")
    assert conversation.dropped == 1
    assert conversation.result("call-1") == Finding(E.ORPHANED_RESULT)


def test_ids_that_are_not_strings_are_orphaned_results_not_errors() -> None:
    conversation = Conversation()
    conversation.proposed(["call-a"])
    assert conversation.result(["call-a"]) == Finding(E.ORPHANED_RESULT)
    findings = conversation.next_request([["call-a"], {"id": 1}, 7, "call-a"])
    assert findings == [Finding(E.ORPHANED_RESULT)] * 3


def test_settling_returns_the_answered_proposals_in_proposal_order() -> None:
    conversation = Conversation()
    conversation.proposed(["call-a", "call-b", "call-c"])
    findings, answered = conversation.settle(["call-c", "call-zzz", "call-a", "call-a"])
    assert answered == ("call-a", "call-c")  # proposal order; the orphan and the duplicate add nothing
    assert findings == [
        Finding(E.ORPHANED_RESULT),
        Finding(E.DUPLICATE_RESULT, "call-a"),
        Finding(E.UNANSWERED_CALL, "call-b"),
    ]
    assert conversation.settle(["call-a"]) == ([Finding(E.ORPHANED_RESULT)], ())  # nothing pending any more


def test_settling_without_tool_messages_answers_with_host_results() -> None:
    conversation = Conversation(max_pending=2)
    conversation.proposed(["call-a", "call-b"])
    assert conversation.result("call-b") is None
    conversation.proposed(["call-c"])  # call-a forgotten: never reported, never answered
    assert conversation.settle() == ([Finding(E.UNANSWERED_CALL, "call-c")], ("call-b",))


def test_the_drift_a_settling_request_recorded_is_taken_once() -> None:
    conversation = Conversation()
    drift = (Drift(DriftKind.ID_REPLACED, "call_0", "read"),)
    conversation.drift = drift
    assert conversation.take_drift() == drift
    assert conversation.take_drift() == ()
