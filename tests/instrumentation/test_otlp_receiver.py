"""The OTLP test receiver, fed by the official OpenTelemetry exporters over gRPC and HTTP.

Providers are created per test and never set globally; every exporter gets an explicit ``endpoint=`` and
``compression=`` so ``OTEL_EXPORTER_OTLP_*`` variables in the environment cannot redirect or break it.
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_spans_json
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, format_span_id, format_trace_id

from ..support.otlp_receiver import OtlpReceiver, ReceivedSpan

RESOURCE = Resource.create({"service.name": "etf-otel-tests"})


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[OtlpReceiver]:
    with OtlpReceiver(json_lines_path=tmp_path / "traces.jsonl") as r:
        yield r


def span_exporter(receiver: OtlpReceiver, transport: str) -> SpanExporter:
    if transport == "grpc":
        return GrpcSpanExporter(
            endpoint=receiver.grpc_endpoint, insecure=True, timeout=5, compression=grpc.Compression.Gzip
        )
    return HttpSpanExporter(endpoint=receiver.http_endpoint + "/v1/traces", timeout=5, compression=Compression.Gzip)


def emit_spans(*exporters: SpanExporter) -> list[ReadableSpan]:
    """A parent and a child span with attributes, an event, a link and an error status; returns what the SDK made."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    for exporter in (memory, *exporters):
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("etf_otel", "0.0.test")
    try:
        with tracer.start_as_current_span("parent") as parent:
            with tracer.start_as_current_span(
                "assemble_tool_call read_page",
                kind=SpanKind.CLIENT,
                links=[Link(parent.get_span_context(), {"link.kind": "sibling"})],
                attributes={
                    "gen_ai.tool.call.id": "call_a",
                    "etf.tool_call.index": 0,
                    "etf.score": 0.5,
                    "etf.id.prior_present": True,
                    "gen_ai.response.finish_reasons": ["tool_calls"],
                },
            ) as child:
                child.add_event("etf.identity.rejected", {"etf.id.kind": "null", "etf.id.empty": False})
                child.set_status(Status(StatusCode.ERROR, "initial_null"))
        return list(memory.get_finished_spans())
    finally:
        provider.shutdown()


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans}


@pytest.mark.parametrize(("transport", "expected_transport"), [("grpc", "grpc"), ("http", "http/protobuf")])
def test_official_span_exporter_arrives_decoded(
    receiver: OtlpReceiver, transport: str, expected_transport: str
) -> None:
    sdk_spans = {s.name: s for s in emit_spans(span_exporter(receiver, transport))}

    received = by_name(receiver.wait_for_spans(2, timeout=5))

    parent, child = received["parent"], received["assemble_tool_call read_page"]
    sdk_child = sdk_spans["assemble_tool_call read_page"].get_span_context()
    assert child.trace_id == format_trace_id(sdk_child.trace_id)
    assert child.span_id == format_span_id(sdk_child.span_id)
    assert child.parent_span_id == parent.span_id
    assert parent.parent_span_id == ""
    assert child.kind == "CLIENT"
    assert parent.kind == "INTERNAL"
    assert child.attributes == {
        "gen_ai.tool.call.id": "call_a",
        "etf.tool_call.index": 0,
        "etf.score": 0.5,
        "etf.id.prior_present": True,
        "gen_ai.response.finish_reasons": ["tool_calls"],
    }
    assert type(child.attributes["etf.tool_call.index"]) is int
    assert [(e.name, e.attributes) for e in child.events] == [
        ("etf.identity.rejected", {"etf.id.kind": "null", "etf.id.empty": False})
    ]
    assert [(link.trace_id, link.span_id, link.attributes) for link in child.links] == [
        (parent.trace_id, parent.span_id, {"link.kind": "sibling"})
    ]
    assert (child.status_code, child.status_message) == ("ERROR", "initial_null")
    assert child.scope_name == "etf_otel"
    assert child.scope_version == "0.0.test"
    assert child.resource["service.name"] == "etf-otel-tests"
    assert child.transport == expected_transport
    assert child.end_time_unix_nano >= child.start_time_unix_nano > 0


def test_both_paths_deliver_the_same_spans(receiver: OtlpReceiver) -> None:
    emit_spans(span_exporter(receiver, "grpc"), span_exporter(receiver, "http"))

    spans = receiver.wait_for_spans(4, timeout=5)

    grpc_spans = sorted((s for s in spans if s.transport == "grpc"), key=lambda s: s.span_id)
    http_spans = sorted((s for s in spans if s.transport == "http/protobuf"), key=lambda s: s.span_id)
    assert len(grpc_spans) == len(http_spans) == 2
    for g, h in zip(grpc_spans, http_spans, strict=True):
        assert g.proto == h.proto


def test_json_lines_file_has_one_otlp_json_line_per_request_with_hex_ids(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    sdk_spans = emit_spans(span_exporter(receiver, "grpc"))
    receiver.wait_for_spans(2, timeout=5)

    lines = (tmp_path / "traces.jsonl").read_text().splitlines()

    assert len(lines) == 2  # SimpleSpanProcessor: one export request per span
    documents = [json.loads(line) for line in lines]
    written = [span for doc in documents for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    by_written_name = {s["name"]: s for s in written}
    for sdk_span in sdk_spans:
        span = by_written_name[sdk_span.name]
        context = sdk_span.get_span_context()
        assert span["traceId"] == format_trace_id(context.trace_id)
        assert span["spanId"] == format_span_id(context.span_id)
    child = by_written_name["assemble_tool_call read_page"]
    assert child["parentSpanId"] == by_written_name["parent"]["spanId"]
    assert child["links"][0]["spanId"] == by_written_name["parent"]["spanId"]
    assert child["links"][0]["traceId"] == by_written_name["parent"]["traceId"]
    assert child["kind"] == 3  # OTLP/JSON encodes enums as integers
    # The official OTLP JSON encoder produces the same document for the same spans.
    official = [encode_spans_json([s]).to_dict() for s in sdk_spans]
    assert documents == official


def test_http_json_body_with_hex_ids_is_accepted(receiver: OtlpReceiver) -> None:
    sdk_spans = emit_spans()
    document = encode_spans_json(sdk_spans).to_dict()

    status, _ = post(receiver, "/v1/traces", gzip.compress(json.dumps(document).encode()), "application/json", "gzip")

    assert status == 200
    received = by_name(receiver.wait_for_spans(2, timeout=5))
    for sdk_span in sdk_spans:
        span = received[sdk_span.name]
        assert span.transport == "http/json"
        assert span.trace_id == format_trace_id(sdk_span.get_span_context().trace_id)
        assert span.span_id == format_span_id(sdk_span.get_span_context().span_id)
    child = received["assemble_tool_call read_page"]
    assert child.parent_span_id == received["parent"].span_id
    assert child.attributes["etf.tool_call.index"] == 0
    assert child.events[0].attributes == {"etf.id.kind": "null", "etf.id.empty": False}


def emit_metrics(exporter: MetricExporter) -> None:
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    try:
        meter = provider.get_meter("etf_otel")
        meter.create_counter("etf.streams").add(2, {"etf.stream.state": "truncated"})
        meter.create_histogram("gen_ai.execute_tool.duration", unit="s").record(0.25, {"gen_ai.tool.name": "read"})
        reader.force_flush()
    finally:
        provider.shutdown()


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_official_metric_exporter_arrives_decoded(receiver: OtlpReceiver, transport: str) -> None:
    exporter: MetricExporter
    if transport == "grpc":
        exporter = GrpcMetricExporter(
            endpoint=receiver.grpc_endpoint, insecure=True, timeout=5, compression=grpc.Compression.NoCompression
        )
    else:
        exporter = HttpMetricExporter(
            endpoint=receiver.http_endpoint + "/v1/metrics", timeout=5, compression=Compression.Deflate
        )

    emit_metrics(exporter)
    receiver.wait_for_metric("gen_ai.execute_tool.duration", timeout=5)

    assert set(receiver.metric_names()) == {"etf.streams", "gen_ai.execute_tool.duration"}
    assert receiver.metric_points("etf.streams")[-1] == ({"etf.stream.state": "truncated"}, 2)
    attributes, histogram = receiver.metric_points("gen_ai.execute_tool.duration")[-1]
    assert attributes == {"gen_ai.tool.name": "read"}
    assert (histogram["count"], histogram["sum"]) == (1, 0.25)


def post(receiver: OtlpReceiver, path: str, body: bytes, content_type: str, encoding: str = "") -> tuple[int, bytes]:
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    request = urllib.request.Request(receiver.http_endpoint + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def test_http_logs_route_stores_log_requests(receiver: OtlpReceiver) -> None:
    request = ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add()
    record.body.string_value = "hello"

    status, _ = post(receiver, "/v1/logs", request.SerializeToString(), "application/x-protobuf")

    assert status == 200
    assert receiver.logs_requests == [request]


@pytest.mark.parametrize(
    ("path", "body", "content_type", "expected_status"),
    [
        ("/v1/nope", b"", "application/x-protobuf", 404),
        ("/v1/traces", b"{}", "text/plain", 415),
        ("/v1/traces", b"\xff\xff\xff", "application/x-protobuf", 400),
        ("/v1/traces", b"{not json", "application/json", 400),
    ],
)
def test_http_rejects_what_it_cannot_decode(
    receiver: OtlpReceiver, path: str, body: bytes, content_type: str, expected_status: int
) -> None:
    status, _ = post(receiver, path, body, content_type)

    assert status == expected_status
    assert receiver.trace_requests == []


def test_wait_for_spans_fails_with_what_arrived(receiver: OtlpReceiver) -> None:
    with pytest.raises(AssertionError, match="expected 1 spans"):
        receiver.wait_for_spans(1, timeout=0.05)


def test_endpoints_bind_loopback_on_ephemeral_ports(receiver: OtlpReceiver) -> None:
    host, port = receiver.grpc_endpoint.rsplit(":", 1)
    assert host == "127.0.0.1"
    assert int(port) > 0
    assert receiver.http_endpoint.startswith("http://127.0.0.1:")
