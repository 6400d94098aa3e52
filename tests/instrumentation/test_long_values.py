"""Every string etf-otel records is bounded; linkage in the process keeps the whole value.

A preserved id or a tool name can be as long as the provider makes it (1 MB here): spans,
events and metric labels carry at most ``MAX_RECORDED_CHARS`` characters of it, with a flag
saying it was cut (docs/telemetry.md, "Long values"), while the proposal registry, the
conversation and the host keep matching on the whole value.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from etf_otel import attributes as A
from etf_otel.core._linkage import Conversation
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.instrumentation import GuardRefusedError
from etf_otel.integrations.mcp._client import Match, _enrich_client_span
from etf_otel.integrations.openai import instrument_openai
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing.chat import chunk, finished, fragment
from tests.conftest import Captured

MAX = A.MAX_RECORDED_CHARS
BIG_ID = "call_" + "x" * (1 << 20)  # 1 MB and a bit
TWIN_ID = BIG_ID[:-1] + "y"  # the same first 256 characters, another id
LONG_NAME = "tool_" + "n" * 1000
USER: list[dict[str, Any]] = [{"role": "user", "content": "read page 1"}]

TWO_CALLS = finished(
    chunk(fragment(0, BIG_ID, "read_page", '{"page":'), fragment(1, "call-b", LONG_NAME, "{")),
    chunk(fragment(0, None, arguments="1}"), fragment(1, arguments="}")),
)


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as srv:
        yield srv


def by_id(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {str(span.attributes[A.GEN_AI_TOOL_CALL_ID]): span for span in spans if span.attributes}


def all_strings(span: ReadableSpan) -> Iterator[str]:
    """Every string the span carries: its name, attribute values and event attribute values."""
    yield span.name
    for attributes in (span.attributes, *(event.attributes for event in span.events)):
        for value in (attributes or {}).values():
            if isinstance(value, str):
                yield value
            elif isinstance(value, tuple):
                yield from (item for item in value if isinstance(item, str))


def test_a_1mb_id_through_the_openai_client_is_recorded_cut_and_the_host_still_links(
    captured: Captured, server: LocalChatServer
) -> None:
    instrumentor = instrument_openai(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider)
    try:
        assert instrumentor.instrumentation is not None
        ran: list[str] = []
        host = instrumentor.instrumentation.host(lambda call: ran.append(call["id"]) or "ok", guard=True)
        with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=30.0) as client:
            server.enqueue(Script(events=TWO_CALLS))
            stream = client.chat.completions.create(model="m", messages=USER, stream=True)  # type: ignore[call-overload]
            received = [c.id for item in stream for c in item.choices[0].delta.tool_calls or () if c.id]
        assert received == [BIG_ID, "call-b"]  # the application gets the whole id

        assert host({"id": BIG_ID, "name": "read_page", "arguments": '{"page":1}'}) == "ok"
        assert ran == [BIG_ID]
        with pytest.raises(GuardRefusedError) as refused:  # linkage compares the whole id, not its first 256
            host({"id": TWIN_ID, "name": "read_page", "arguments": '{"page":1}'})
        assert refused.value.category is ErrorCategory.ORPHANED_RESULT
    finally:
        instrumentor.uninstrument()

    calls = by_id(captured.spans(A.SPAN_ASSEMBLE_TOOL_CALL))
    assert set(calls) == {BIG_ID[:MAX], "call-b"}
    long_call = calls[BIG_ID[:MAX]]
    assert len(str(long_call.attributes[A.GEN_AI_TOOL_CALL_ID])) == MAX
    assert long_call.attributes[A.ETF_TOOL_CALL_ID_TRUNCATED] is True
    assert A.ETF_TOOL_CALL_NAME_TRUNCATED not in long_call.attributes
    assert A.ETF_TOOL_CALL_ID_TRUNCATED not in calls["call-b"].attributes

    # The long name: cut on the attribute and in the span name, flagged.
    named = calls["call-b"]
    assert named.attributes[A.GEN_AI_TOOL_NAME] == LONG_NAME[:MAX]
    assert named.attributes[A.ETF_TOOL_CALL_NAME_TRUNCATED] is True
    assert named.name == f"{A.SPAN_ASSEMBLE_TOOL_CALL} {LONG_NAME[:MAX]}"

    executed, twin = captured.spans(A.SPAN_EXECUTE_TOOL)
    assert executed.attributes[A.GEN_AI_TOOL_CALL_ID] == BIG_ID[:MAX]
    assert executed.attributes[A.ETF_TOOL_CALL_ID_TRUNCATED] is True
    assert long_call.context is not None
    assert [link.context.span_id for link in executed.links] == [long_call.context.span_id]
    assert twin.links == () or not twin.links
    assert twin.attributes.get(A.ETF_GUARD_REFUSED) is True

    for span in captured.spans():
        assert all(len(text) <= MAX + len(A.SPAN_ASSEMBLE_TOOL_CALL) + 1 for text in all_strings(span))
    labels = [attributes.get(A.GEN_AI_TOOL_NAME) for attributes, _ in captured.points(A.METRIC_TOOL_CALLS)]
    assert LONG_NAME[:MAX] in labels and LONG_NAME not in labels


def test_linkage_evidence_of_a_long_id_is_cut_and_flagged(captured: Captured) -> None:
    etf = captured.instrumentation()
    conversation = Conversation()
    list(etf.stream(iter(TWO_CALLS), conversation=conversation))
    # The next request answers the long id only: call-b is unanswered.
    list(etf.stream(iter(finished(chunk(content="done"))), conversation=conversation, tool_message_ids=[BIG_ID]))
    # And the one after answers nothing, so the long id of a third response is unanswered.
    list(etf.stream(iter(TWO_CALLS), conversation=conversation))
    list(etf.stream(iter(finished(chunk(content="done"))), conversation=conversation, tool_message_ids=["call-b"]))

    second, fourth = captured.spans(A.SPAN_ASSEMBLE_RESPONSE)[1::2]
    assert second.attributes[A.ETF_LINKAGE_ANSWERED_IDS] == (BIG_ID[:MAX],)
    assert second.attributes[A.ETF_TOOL_CALL_ID_TRUNCATED] is True
    assert fourth.attributes[A.ETF_LINKAGE_ANSWERED_IDS] == ("call-b",)
    assert A.ETF_TOOL_CALL_ID_TRUNCATED not in fourth.attributes
    (unanswered,) = [event.attributes for event in fourth.events if event.name == A.EVENT_INTEGRITY_VIOLATION]
    assert unanswered[A.ETF_ERROR_CATEGORY] == "unanswered_call"
    assert unanswered[A.GEN_AI_TOOL_CALL_ID] == BIG_ID[:MAX]
    assert unanswered[A.ETF_TOOL_CALL_ID_TRUNCATED] is True


def test_a_long_exception_name_and_provider_are_cut(captured: Captured) -> None:
    error = type("E" * 1000, (Exception,), {})
    etf = captured.instrumentation(provider_name="p" * 1000)

    def fails(call: Any) -> None:
        raise error

    with pytest.raises(error):
        etf.host(fails)({"id": "c", "name": "t", "arguments": "{}"})
    (span,) = captured.spans(A.SPAN_EXECUTE_TOOL)
    assert span.attributes[A.ERROR_TYPE] == "E" * MAX
    assert span.attributes[A.GEN_AI_PROVIDER_NAME] == "p" * MAX
    ((attributes, _),) = captured.points(A.METRIC_EXECUTE_TOOL_DURATION)
    assert attributes[A.ERROR_TYPE] == "E" * MAX


def test_the_mcp_client_span_records_a_long_id_and_name_cut() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("tools/call x") as span:
        _enrich_client_span(span, Match("unmatched", call_id=None), "n")  # no id: nothing cut, no flag
    with provider.get_tracer("t").start_as_current_span("tools/call y") as span:
        _enrich_client_span(span, Match("explicit", call_id=BIG_ID, record=_record()), LONG_NAME)
    plain, long = exporter.get_finished_spans()
    assert A.ETF_TOOL_CALL_ID_TRUNCATED not in (plain.attributes or {})
    assert long.attributes is not None
    assert long.attributes[A.GEN_AI_TOOL_CALL_ID] == BIG_ID[:MAX]
    assert long.attributes[A.ETF_TOOL_CALL_ID_TRUNCATED] is True
    assert long.attributes[A.GEN_AI_TOOL_NAME] == LONG_NAME[:MAX]
    assert long.attributes[A.ETF_TOOL_CALL_NAME_TRUNCATED] is True


def _record() -> Any:
    from etf_otel.core._vocabulary import Verdict
    from etf_otel.instrumentation._registry import ProposalRecord

    return ProposalRecord(None, True, Verdict.PROPOSED, None, LONG_NAME, 0)
