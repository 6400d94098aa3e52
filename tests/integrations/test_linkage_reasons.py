"""Why a result is orphaned, through the real clients of the three protocols against the scripted server.

A response whose slot gets a second, conflicting id (Chat: another ``id`` on the same index; Responses:
``output_item.done`` changing the ``call_id``; Anthropic: a second ``content_block_start`` at the same
index) keeps the first id and refuses the second. A follow-up that answers the refused id is an
``orphaned_result`` with reason ``rejected_incoming_id``, recognised by a keyed digest: the refused id
appears nowhere in the telemetry. A follow-up carrying the two ids run together (the ``openai`` SDK's
accumulator merges them so) is an ``orphaned_result`` with reason ``concatenated_ids``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from etf_otel import attributes as A
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import anthropic as M
from etf_otel.testing import chat as C
from etf_otel.testing import responses as R
from tests.conftest import Captured
from tests.integrations.conversation_load import PROTOCOLS, Seen, client_of, first_request, follow_up, turn
from tests.integrations.test_linkage_evidence import all_violations, instrumented

SECRET = "Zq81refused"
"""The refused id's distinctive part: searched for in every exported byte."""


def kept_and_refused(protocol: str) -> tuple[str, str]:
    prefix = "toolu_" if protocol == "anthropic" else "call_"
    return f"{prefix}kept", f"{prefix}{SECRET}"


def conflicting(protocol: str) -> Script:
    """One call whose identity is ``kept``; a later event of the same slot carries ``refused``."""
    kept, refused = kept_and_refused(protocol)
    if protocol == "chat":
        return Script(
            events=C.finished(
                C.chunk(C.fragment(0, kept, "read_page", '{"page":', type="function")),
                C.chunk(C.fragment(0, refused, arguments="1}")),
            )
        )
    if protocol.startswith("responses"):
        calls = R.call(0, refused, "read_page", ('{"page":', "1}"), item_id="fc_1", added_call_id=kept)
        return Script(events=R.stream(calls, id="resp_conflict"), named=True)
    events = M.stream(M.tool_call(0, kept, "read_page", '{"page":1}'), M.tool_call(0, refused, "read_page", "{}"))
    return Script(events=events, named=True)


def text(protocol: str) -> Script:
    if protocol == "chat":
        return Script(events=C.finished(C.chunk(content="done"), finish_reason="stop"))
    if protocol.startswith("responses"):
        return Script(events=R.stream(id="resp_text"), named=True)
    return Script(events=M.stream(M.text_block(0, "done"), stop_reason="end_turn"), named=True)


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as srv:
        yield srv


@pytest.fixture
def instrument(captured: Captured) -> Iterator[Any]:
    made: list[Any] = []

    def instrument_for(protocol: str) -> Any:
        made.append(instrumented(captured, protocol))
        return made[-1]

    yield instrument_for
    for instrumentor in made:
        instrumentor.uninstrument()


def etf_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """etf-otel's own log records (the SDKs' debug logs print the request bodies they send)."""
    return [record for record in caplog.records if record.name.split(".")[0] == "etf_otel"]


def exported_text(captured: Captured, caplog: pytest.LogCaptureFixture) -> str:
    """Every span (attributes, events, links, resource), every metric point and every etf-otel log record."""
    spans = [span.to_json() for span in captured.spans()]
    data = captured.reader.get_metrics_data()
    metrics = data.to_json() if data is not None else ""
    logs = [f"{record.getMessage()} {record.args!r} {record.exc_text or ''}" for record in etf_records(caplog)]
    return "\n".join([*spans, metrics, *logs])


def answer(captured: Captured, server: LocalChatServer, protocol: str, carried: str) -> list[dict[str, Any]]:
    """The conflicting response, then a follow-up whose assistant turn and result carry ``carried``."""
    server.enqueue(conflicting(protocol))
    server.enqueue(text(protocol))
    with client_of(server, protocol, "sync") as client:
        first = turn(client, protocol, first_request(protocol))
        seen = Seen(ids=[carried], response_id=first.response_id)
        turn(client, protocol, follow_up(protocol, seen, [carried]))
    first_span, second_span = captured.spans("assemble_response")
    assert first_span.attributes[A.ETF_STREAM_DISPATCHABLE] is False
    (call,) = captured.spans("assemble_tool_call")
    assert call.attributes[A.ERROR_TYPE] == "id_conflict"
    assert A.ETF_LINKAGE_AMBIGUOUS not in second_span.attributes
    return all_violations(captured)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_result_answering_the_refused_id_is_a_rejected_incoming_id_and_the_id_is_never_exported(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    instrument(protocol)
    _, refused = kept_and_refused(protocol)
    found = answer(captured, server, protocol, refused)
    assert found == [{A.ETF_ERROR_CATEGORY: "orphaned_result", A.ETF_LINKAGE_ORPHAN_REASON: "rejected_incoming_id"}]
    assert captured.metric_sum(A.METRIC_INTEGRITY_VIOLATIONS, etf__error__category="orphaned_result") == 1
    exported = exported_text(captured, caplog)
    assert "rejected_incoming_id" in exported and "id_conflict" in exported  # the search reads what was exported
    assert SECRET not in exported


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_result_answering_the_kept_and_refused_ids_run_together_is_concatenated_ids(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    instrument(protocol)
    kept, refused = kept_and_refused(protocol)
    found = answer(captured, server, protocol, kept + refused)
    assert found == [{A.ETF_ERROR_CATEGORY: "orphaned_result", A.ETF_LINKAGE_ORPHAN_REASON: "concatenated_ids"}]
    assert SECRET not in exported_text(captured, caplog)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_result_answering_the_kept_id_of_the_rejected_call_is_a_rejected_call(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol)
    kept, _ = kept_and_refused(protocol)
    found = answer(captured, server, protocol, kept)
    assert found == [{A.ETF_ERROR_CATEGORY: "orphaned_result", A.ETF_LINKAGE_ORPHAN_REASON: "rejected_call"}]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_result_answering_an_id_nobody_sent_is_unknown(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol)
    found = answer(captured, server, protocol, "call_invented")
    assert found == [{A.ETF_ERROR_CATEGORY: "orphaned_result", A.ETF_LINKAGE_ORPHAN_REASON: "unknown"}]


def test_the_openai_sdk_accumulator_merges_the_ids_of_one_slot_and_its_follow_up_is_concatenated_ids(
    captured: Captured, server: LocalChatServer, instrument: Any
) -> None:
    """The SDK's own ``chat.completions.stream`` helper, its final message replayed as the application does."""
    instrument("chat")
    kept, refused = kept_and_refused("chat")
    server.enqueue(conflicting("chat"))
    server.enqueue(text("chat"))
    user = [{"role": "user", "content": "read page 1"}]
    with client_of(server, "chat", "sync") as client:
        with client.chat.completions.stream(model="m", messages=user) as stream:
            message = stream.get_final_completion().choices[0].message
        (call,) = message.tool_calls
        assert call.id == kept + refused  # the SDK ran the two ids together
        assistant = {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_unset=True)]}
        tool = {"role": "tool", "tool_call_id": call.id, "content": "page"}
        with client.chat.completions.stream(model="m", messages=[*user, assistant, tool]) as stream:
            stream.get_final_completion()
    assert all_violations(captured) == [
        {A.ETF_ERROR_CATEGORY: "orphaned_result", A.ETF_LINKAGE_ORPHAN_REASON: "concatenated_ids"}
    ]


def clean(protocol: str) -> Script:
    """One valid call, ``call_first`` (``toolu_first``), on a response of its own id."""
    call_id = "toolu_first" if protocol == "anthropic" else "call_first"
    if protocol == "chat":
        return Script(events=C.finished(C.chunk(C.fragment(0, call_id, "read_page", '{"page":1}', type="function"))))
    if protocol.startswith("responses"):
        calls = R.call(0, call_id, "read_page", ('{"page":', "1}"), item_id="fc_0")
        return Script(events=R.stream(calls, id="resp_first"), named=True)
    return Script(events=M.stream(M.tool_call(0, call_id, "read_page", '{"page":1}')), named=True)


def history(protocol: str, turns: list[str], response_id: str | None) -> dict[str, Any]:
    """A request replaying one assistant turn per id of ``turns``, each answered (or, Responses with
    ``previous_response_id``, only the last answer)."""
    user = [{"role": "user", "content": "read page 1"}]
    if protocol == "responses-previous":
        output = {"type": "function_call_output", "call_id": turns[-1], "output": "text"}
        return {"input": [output], "previous_response_id": response_id}
    items: list[Any] = list(user)
    for call_id in turns:
        if protocol == "chat":
            calls = [{"id": call_id, "type": "function", "function": {"name": "read_page", "arguments": "{}"}}]
            items += [
                {"role": "assistant", "content": None, "tool_calls": calls},
                {"role": "tool", "tool_call_id": call_id, "content": "text"},
            ]
        elif protocol == "responses":
            items += [
                {"type": "function_call", "call_id": call_id, "name": "read_page", "arguments": "{}"},
                {"type": "function_call_output", "call_id": call_id, "output": "text"},
            ]
        else:
            use = {"type": "tool_use", "id": call_id, "name": "read_page", "input": {}}
            result = {"type": "tool_result", "tool_use_id": call_id, "content": "text"}
            items += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    if protocol.startswith("responses"):
        return {"input": items}
    return {"messages": items, **({"max_tokens": 100} if protocol == "anthropic" else {})}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refused_id_in_a_later_turn_is_recognised_too(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    """Turn 1 proposes a call and is answered; turn 2 refuses an id; turn 3 answers the refused id."""
    instrument(protocol)
    first_id = "toolu_first" if protocol == "anthropic" else "call_first"
    _, refused = kept_and_refused(protocol)
    for script in (clean(protocol), conflicting(protocol), text(protocol)):
        server.enqueue(script)
    with client_of(server, protocol, "sync") as client:
        first = turn(client, protocol, first_request(protocol))
        second = turn(client, protocol, history(protocol, [first_id], first.response_id))
        turn(client, protocol, history(protocol, [first_id, refused], second.response_id))
    assert all_violations(captured) == [
        {A.ETF_ERROR_CATEGORY: "orphaned_result", A.ETF_LINKAGE_ORPHAN_REASON: "rejected_incoming_id"}
    ]


@pytest.mark.parametrize("protocol", ["responses", "responses-previous"])
def test_a_call_only_the_final_response_lists_is_a_refused_id_too(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    """``response.completed`` lists a call the stream never opened: an application reading the final
    response answers it, and the result says the rules refused that id."""
    instrument(protocol)
    streamed = R.function_call(
        call_id="call_kept", name="read_page", arguments='{"page":1}', id="fc_1", status="completed"
    )
    stray = R.function_call(call_id=f"call_{SECRET}", name="read_page", arguments="{}", id="fc_2", status="completed")
    calls = R.call(0, "call_kept", "read_page", ('{"page":', "1}"), item_id="fc_1")
    server.enqueue(
        Script(events=R.stream(calls, end=R.completed(output=[streamed, stray], id="resp_s"), id="resp_s"), named=True)
    )
    server.enqueue(text(protocol))
    with client_of(server, protocol, "sync") as client:
        first = turn(client, protocol, first_request(protocol))
        turn(client, protocol, follow_up(protocol, Seen([f"call_{SECRET}"], first.response_id), [f"call_{SECRET}"]))
    assert captured.spans("assemble_response")[0].attributes[A.ETF_STREAM_DISPATCHABLE] is False
    assert all_violations(captured) == [
        {A.ETF_ERROR_CATEGORY: "orphaned_result", A.ETF_LINKAGE_ORPHAN_REASON: "rejected_incoming_id"}
    ]
