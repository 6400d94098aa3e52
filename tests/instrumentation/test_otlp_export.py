"""What etf-otel's telemetry looks like on the wire, through the official OTLP exporters.

The real ``openai`` client streams the case-study response (``id: null`` continuation) from
the local SSE server through the instrumentor; SDK providers created here (never global)
export with the official gRPC and HTTP OTLP exporters to a real OTLP receiver, which decodes
the requests with the generated protobuf messages a collector uses. The assertions are on
what arrived: span names, parentage, attributes with their types, events, links, metric
names and points (docs/telemetry.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import openai
import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from etf_otel import attributes as A
from etf_otel._version import __version__
from etf_otel.instrumentation._safety import set_strict
from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor, instrument_openai
from etf_otel.testing import DONE, LocalChatServer, Script
from etf_otel.testing.chat import chunk

from ..support.otlp_receiver import OtlpReceiver, ReceivedSpan

RESOURCE = Resource.create({"service.name": "etf-otel-export-tests"})
USER: list[Any] = [{"role": "user", "content": "read page 1"}]

NULL_CONTINUATION = [
    chunk(
        tool_calls=[
            {"index": 0, "id": "call-a", "type": "function", "function": {"name": "read_page", "arguments": '{"page":'}}
        ]
    ),
    chunk(tool_calls=[{"index": 0, "id": None, "function": {"arguments": "1}"}}]),
    chunk(finish_reason="tool_calls"),
    DONE,
]

CONFLICTING_ID = [
    chunk(
        tool_calls=[
            {"index": 0, "id": "call-x", "type": "function", "function": {"name": "save_report", "arguments": "{}"}}
        ]
    ),
    chunk(tool_calls=[{"index": 0, "id": "call-y", "function": {"arguments": ""}}]),
    chunk(finish_reason="tool_calls"),
    DONE,
]

EXPECTED_METRICS = {
    "etf.tool_call.fragments",
    "etf.tool_call.id_transitions",
    "etf.tool_call.identity_errors",
    "etf.tool_calls",
    "etf.streams",
    "gen_ai.execute_tool.duration",
}


def exporters(receiver: OtlpReceiver, transport: str) -> tuple[SpanExporter, MetricExporter]:
    """Official exporters with explicit endpoint and compression (environment variables must not matter)."""
    if transport == "grpc":
        return (
            GrpcSpanExporter(
                endpoint=receiver.grpc_endpoint, insecure=True, timeout=5, compression=grpc.Compression.Gzip
            ),
            GrpcMetricExporter(
                endpoint=receiver.grpc_endpoint, insecure=True, timeout=5, compression=grpc.Compression.NoCompression
            ),
        )
    return (
        HttpSpanExporter(endpoint=receiver.http_endpoint + "/v1/traces", timeout=5, compression=Compression.Gzip),
        HttpMetricExporter(
            endpoint=receiver.http_endpoint + "/v1/metrics", timeout=5, compression=Compression.NoCompression
        ),
    )


@pytest.fixture
def strict() -> Iterator[None]:
    previous = set_strict(True)
    try:
        yield
    finally:
        set_strict(previous)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as srv:
        yield srv


def run_agent(server: LocalChatServer, tracer_provider: TracerProvider, instrumentor: OpenAIInstrumentor) -> list[str]:
    """One agent turn: stream the case study, execute its call through the host wrapper; then a bad stream."""
    instrumentation = instrumentor.instrumentation
    assert instrumentation is not None
    host = instrumentation.host(lambda call: f"page {call.function.arguments}")
    tracer = tracer_provider.get_tracer("test-app")
    results: list[str] = []
    server.enqueue(Script(events=NULL_CONTINUATION), Script(events=CONFLICTING_ID))
    with (
        openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as client,
        tracer.start_as_current_span("agent turn"),
    ):
        with client.chat.completions.stream(model="m", messages=USER) as stream:
            for _ in stream:
                pass
            completion = stream.get_final_completion()
        for call in completion.choices[0].message.tool_calls or ():
            results.append(host(call))
        for _ in client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}], stream=True):
            pass
    return results


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_case_study_over_otlp(transport: str, receiver: OtlpReceiver, server: LocalChatServer, strict: None) -> None:
    span_exporter, metric_exporter = exporters(receiver, transport)
    tracer_provider = TracerProvider(resource=RESOURCE)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter, schedule_delay_millis=60_000))
    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=60_000)
    meter_provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    instrumentor = instrument_openai(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        results = run_agent(server, tracer_provider, instrumentor)
        assert tracer_provider.force_flush(10_000)
        assert meter_provider.force_flush(10_000)
    finally:
        instrumentor.uninstrument()
        tracer_provider.shutdown()
        meter_provider.shutdown()
    assert results == ['page {"page":1}']

    received = receiver.wait_for_spans(6)
    assert {span.transport for span in received} == {"grpc" if transport == "grpc" else "http/protobuf"}
    assert sorted(span.name for span in received) == [
        "agent turn",
        "assemble_response",
        "assemble_response",
        "assemble_tool_call read_page",
        "assemble_tool_call save_report",
        "execute_tool read_page",
    ]
    ours = [span for span in received if span.name != "agent turn"]
    assert {(span.scope_name, span.scope_version) for span in ours} == {(A.INSTRUMENTATION_NAME, __version__)}
    assert all(span.resource["service.name"] == "etf-otel-export-tests" for span in received)
    assert all(span.kind == "INTERNAL" for span in ours)

    def one(name: str) -> ReceivedSpan:
        (span,) = [span for span in received if span.name == name]
        return span

    (turn,) = receiver.spans("agent turn")
    good_response, bad_response = sorted(receiver.spans("assemble_response"), key=lambda s: s.start_time_unix_nano)
    assembled = one("assemble_tool_call read_page")
    executed = one("execute_tool read_page")
    rejected = one("assemble_tool_call save_report")

    # The case study: the id survives the null continuation, and the wire says so.
    assert assembled.attributes["gen_ai.tool.call.id"] == "call-a"
    assert assembled.attributes["etf.id.kept_null"] == 1
    assert assembled.attributes["etf.tool_call.fragments"] == 2
    assert assembled.attributes["etf.tool_call.verdict"] == "proposed"
    assert assembled.attributes["etf.tool_call.index"] == 0
    assert assembled.attributes["etf.choice.index"] == 0
    assert assembled.status_code == "UNSET"
    assert assembled.parent_span_id == good_response.span_id
    assert good_response.parent_span_id == turn.span_id
    assert {span.trace_id for span in received} == {turn.trace_id}
    assert good_response.attributes["etf.stream.state"] == "completed"
    assert good_response.attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert good_response.attributes["etf.stream.dispatchable"] is True
    assert assembled.start_time_unix_nano >= good_response.start_time_unix_nano
    assert assembled.end_time_unix_nano <= good_response.end_time_unix_nano

    assert executed.attributes["gen_ai.tool.call.id"] == "call-a"
    assert executed.attributes["gen_ai.operation.name"] == "execute_tool"
    assert executed.attributes["gen_ai.tool.type"] == "function"
    assert executed.attributes["gen_ai.tool.name"] == "read_page"
    assert [(link.trace_id, link.span_id) for link in executed.links] == [(assembled.trace_id, assembled.span_id)]

    # A rejection: status, error.type and the bounded event survive the encoding with their types.
    assert rejected.attributes["gen_ai.tool.call.id"] == "call-x"
    assert rejected.attributes["etf.tool_call.verdict"] == "rejected"
    assert rejected.attributes["error.type"] == "id_conflict"
    assert rejected.status_code == "ERROR"
    (event,) = rejected.events
    assert event.name == "etf.identity.rejected"
    assert event.attributes == {
        "etf.error.category": "id_conflict",
        "etf.id.kind": "string",
        "etf.id.prior_present": True,
        "etf.id.empty": False,
        "etf.id.transition": "reject",
        "etf.tool_call.index": 0,
        "etf.choice.index": 0,
    }
    assert bad_response.attributes["etf.stream.dispatchable"] is False
    for span in received:  # the rejected id never leaves the process
        assert "call-y" not in str(span.proto)

    # Metrics.
    receiver.wait_for_metric("gen_ai.execute_tool.duration")
    assert EXPECTED_METRICS <= set(receiver.metric_names())
    assert "etf.integrity.violations" not in receiver.metric_names()

    def last(name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
        """The last exported value per attribute set (cumulative temporality)."""
        out: dict[tuple[tuple[str, Any], ...], Any] = {}
        for attributes, value in receiver.metric_points(name):
            out[tuple(sorted(attributes.items()))] = value
        return out

    assert sum(last("etf.tool_call.fragments").values()) == 4
    transitions = last("etf.tool_call.id_transitions")
    openai = ("gen_ai.provider.name", "openai")  # 127.0.0.1 is no known host: the fallback provider
    assert transitions[(("etf.id.kind", "null"), ("etf.id.transition", "keep_null"), openai)] == 1
    assert transitions[(("etf.id.kind", "string"), ("etf.id.transition", "establish"), openai)] == 2
    assert transitions[(("etf.id.kind", "string"), ("etf.id.transition", "reject"), openai)] == 1
    identity_errors = last("etf.tool_call.identity_errors")
    assert identity_errors == {
        (
            ("etf.error.category", "id_conflict"),
            ("etf.id.empty", False),
            ("etf.id.kind", "string"),
            ("etf.id.prior_present", True),
            openai,
        ): 1
    }
    assert last("etf.tool_calls") == {
        (("etf.tool_call.verdict", "proposed"), openai, ("gen_ai.tool.name", "read_page")): 1,
        (("etf.tool_call.verdict", "rejected"), openai, ("gen_ai.tool.name", "save_report")): 1,
    }
    assert last("etf.streams") == {(("etf.protocol", "chat_completions"), ("etf.stream.state", "completed"), openai): 2}
    ((duration_attributes, histogram),) = last("gen_ai.execute_tool.duration").items()
    assert duration_attributes == (("gen_ai.tool.name", "read_page"),)
    assert histogram["count"] == 1
    assert tuple(histogram["explicit_bounds"]) == A.EXECUTE_TOOL_DURATION_BUCKETS
    for name in receiver.metric_names():
        for attributes, _ in receiver.metric_points(name):
            assert not any(str(value).startswith("call-") for value in attributes.values()), (name, attributes)
