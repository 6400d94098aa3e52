"""A follow-up finds the response it answers by what it carries: conversations that start alike stay apart.

Real clients of the three protocols against the scripted server (:mod:`tests.integrations.conversation_load`):
every first request is the same, every response proposes two calls with new ids, and each follow-up
answers its own calls (replayed as the SDK's users do, or named by ``previous_response_id``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from etf_otel import attributes as A
from etf_otel.integrations._conversation import AMBIGUOUS, ConversationIndex, concatenated
from etf_otel.integrations.anthropic import AnthropicInstrumentor
from etf_otel.integrations.openai import OpenAIInstrumentor
from etf_otel.testing import LocalChatServer
from tests.conftest import Captured
from tests.integrations.conversation_load import (
    PROTOCOLS,
    Responder,
    client_of,
    figures,
    first_request,
    follow_up,
    run_concurrent,
    turn,
)


@pytest.fixture
def scripted() -> Iterator[LocalChatServer]:
    with LocalChatServer(responder=Responder()) as server:
        yield server


def instrumented(captured: Captured, protocol: str, **options: Any) -> Any:
    instrumentor: Any = AnthropicInstrumentor() if protocol == "anthropic" else OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider, **options)
    return instrumentor


@pytest.fixture
def instrument(captured: Captured) -> Iterator[Any]:
    made: list[Any] = []

    def instrument_for(protocol: str, **options: Any) -> Any:
        made.append(instrumented(captured, protocol, **options))
        return made[-1]

    yield instrument_for
    for instrumentor in made:
        instrumentor.uninstrument()


def violations(span: ReadableSpan) -> list[dict[str, Any]]:
    return [dict(event.attributes or {}) for event in span.events if event.name == A.EVENT_INTEGRITY_VIOLATION]


def all_violations(captured: Captured) -> list[dict[str, Any]]:
    return [found for span in captured.spans("assemble_response") for found in violations(span)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a1_b1_a2_b2_with_identical_first_requests_records_no_violation(
    captured: Captured, scripted: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol)
    with client_of(scripted, protocol, "sync") as client:
        a1 = turn(client, protocol, first_request(protocol))
        b1 = turn(client, protocol, first_request(protocol))
        turn(client, protocol, follow_up(protocol, a1, a1.ids))
        turn(client, protocol, follow_up(protocol, b1, b1.ids))
    assert a1.ids != b1.ids
    assert all_violations(captured) == []
    assert figures(captured) == (0, 4)
    answered = [span.attributes.get(A.ETF_LINKAGE_ANSWERED_IDS) for span in captured.spans("assemble_response")]
    assert answered[2:] == [tuple(a1.ids), tuple(b1.ids)]


@pytest.mark.parametrize("mode", ["sync", "async"])  # threads with the sync client, asyncio tasks with the async one
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sixteen_concurrent_identical_conversations_each_answering_its_own_calls_record_no_violation(
    captured: Captured, scripted: LocalChatServer, instrument: Any, protocol: str, mode: str
) -> None:
    instrument(protocol)
    seen = run_concurrent(scripted, protocol, mode, 16)
    assert len({call_id for conversation in seen for call_id in conversation.ids}) == 32
    assert figures(captured) == (0, 32)  # no violation, every id answered
    assert "etf.integrity.violations" not in captured.metrics()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_follow_up_answering_one_of_two_calls_is_one_unanswered_call_for_that_conversation_only(
    captured: Captured, scripted: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol)
    with client_of(scripted, protocol, "sync") as client:
        first = [turn(client, protocol, first_request(protocol)) for _ in range(3)]
        for position, seen in enumerate(first):
            turn(client, protocol, follow_up(protocol, seen, seen.ids[:1] if position == 1 else seen.ids))
    found = all_violations(captured)
    assert found == [{A.ETF_ERROR_CATEGORY: "unanswered_call", A.GEN_AI_TOOL_CALL_ID: first[1].ids[1]}]
    assert captured.metric_sum(A.METRIC_INTEGRITY_VIOLATIONS) == 1


@pytest.mark.parametrize("protocol", ["chat", "anthropic"])
def test_identical_prefixes_without_call_ids_are_not_judged_and_say_so(
    captured: Captured, scripted: LocalChatServer, instrument: Any, protocol: str
) -> None:
    """Two identical first requests, then a follow-up whose assistant turn names ids nobody proposed:
    only the prefix is left, and two responses have it. The request is not judged."""
    instrument(protocol)
    with client_of(scripted, protocol, "sync") as client:
        first = [turn(client, protocol, first_request(protocol)) for _ in range(2)]
        first[0].ids = ["call_made_up"]
        turn(client, protocol, follow_up(protocol, first[0], ["call_made_up"]))
    last = captured.spans("assemble_response")[-1]
    assert last.attributes.get(A.ETF_LINKAGE_AMBIGUOUS) is True
    assert all_violations(captured) == []
    assert all(A.ETF_LINKAGE_AMBIGUOUS not in span.attributes for span in captured.spans("assemble_response")[:-1])


def test_a_retried_follow_up_is_not_judged_twice(
    captured: Captured, scripted: LocalChatServer, instrument: Any
) -> None:
    instrument("chat")
    with client_of(scripted, "chat", "sync") as client:
        seen = turn(client, "chat", first_request("chat"))
        turn(client, "chat", follow_up("chat", seen, seen.ids))
        turn(client, "chat", follow_up("chat", seen, seen.ids))  # the same request again
    assert all_violations(captured) == []


def test_a_conversation_pushed_out_by_the_bound_is_not_judged(
    captured: Captured, scripted: LocalChatServer, instrument: Any
) -> None:
    """``max_conversations=2``: the third conversation pushes the first out of every index."""
    instrumentor = instrument("chat", max_conversations=2)
    with client_of(scripted, "chat", "sync") as client:
        first = [turn(client, "chat", first_request("chat")) for _ in range(3)]
        turn(client, "chat", follow_up("chat", first[0], ["call_wrong"]))  # would be orphaned + 2 unanswered
        turn(client, "chat", follow_up("chat", first[2], ["call_wrong"]))
    assert [found[A.ETF_ERROR_CATEGORY] for found in all_violations(captured)] == [
        "orphaned_result",
        "unanswered_call",
        "unanswered_call",
    ]
    index: ConversationIndex = instrumentor._conversations.index
    assert len(index._holders) <= 2 * 2 and len(index._proposing) <= 2


def test_the_call_id_index_stays_bounded_under_many_conversations() -> None:
    index = ConversationIndex(4)
    for number in range(100):
        conversation = index.new()
        conversation.open_ids = frozenset({f"a{number}", f"b{number}"})
        index.proposed(conversation, [f"a{number}", f"b{number}"])
    assert len(index._proposing) == 4 and len(index._holders) == 8


def test_conversations_that_all_propose_the_same_id_are_held_once_each_and_judged_by_who_still_awaits_it() -> None:
    index = ConversationIndex(4)
    conversations = []
    for _ in range(100):  # a provider that numbers its ids call_0 in every response
        conversation = index.new()
        conversation.proposed(["call_0"])
        conversations.append(conversation)
    assert list(index._holders["call_0"]) == conversations[-4:]
    assert index.by_ids(["call_0"])[0] is AMBIGUOUS
    for conversation in conversations[-4:-1]:
        conversation.settle(["call_0"])
    assert index.by_ids(["call_0"])[0] is conversations[-1]  # the one still awaiting it
    conversations[-1].settle(["call_0"])
    assert index.by_ids(["call_0"])[0] is conversations[-1]  # none awaits it: the latest that proposed it
    conversations[-2].proposed(["call_0"])  # proposes again: held once, now the newest
    assert list(index._holders["call_0"]) == [*conversations[-4:-2], conversations[-1], conversations[-2]]
    assert index.by_ids(["call_0"])[0] is conversations[-2]


@pytest.mark.parametrize(
    ("call_id", "expected"),
    [("call_1call_2", True), ("call_1call_1", True), ("call_1", False), ("call_1call_", False), ("xcall_1", False)],
)
def test_concatenated_ids_are_two_or_more_proposals_run_together(call_id: str, expected: bool) -> None:
    assert concatenated(call_id, ["call_1", "call_2"]) is expected
