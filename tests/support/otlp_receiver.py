"""A real OTLP receiver for tests, built only from the official ``opentelemetry-proto`` messages.

Why not an in-memory exporter: the telemetry contract is what reaches a collector. Spans, attributes and
ids must survive the official OTLP exporters' encoding (gRPC and HTTP, protobuf and JSON, gzip), so the
tests that make claims about the wire read it back here, decoded by the same generated messages a
collector uses.

- gRPC: ``TraceService``, ``MetricsService`` and ``LogsService`` on ``127.0.0.1`` and an ephemeral port
  (:attr:`OtlpReceiver.grpc_endpoint`, the form the gRPC exporter takes with ``insecure=True``).
- HTTP: ``POST /v1/traces``, ``/v1/metrics``, ``/v1/logs`` (:attr:`OtlpReceiver.http_endpoint` plus the
  path, the form the HTTP exporters take as ``endpoint=``), bodies ``application/x-protobuf`` or
  ``application/json``, optionally ``Content-Encoding: gzip`` or ``deflate``.

OTLP/JSON is not protobuf's canonical JSON in one respect: trace and span ids are lowercase hex strings,
where ``json_format`` uses base64 for ``bytes``. Both directions are converted here: JSON bodies are
accepted with hex ids, and the optional ``json_lines_path`` file gets one OTLP/JSON line per received
trace request, with hex ids and integer enums, the format of the official OTLP JSON file exporter.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import os
import threading
import time
import zlib
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypeAlias, cast

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

__all__ = ["OtlpReceiver", "ReceivedEvent", "ReceivedLink", "ReceivedSpan", "otlp_json_dict"]

ExportRequest: TypeAlias = (
    "trace_service_pb2.ExportTraceServiceRequest"
    " | metrics_service_pb2.ExportMetricsServiceRequest"
    " | logs_service_pb2.ExportLogsServiceRequest"
)
AttributeValue: TypeAlias = "str | bool | int | float | bytes | list[Any] | dict[str, Any] | None"

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})

_HTTP_ROUTES: dict[str, tuple[type[Message], type[Message]]] = {
    "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse),
    "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest, metrics_service_pb2.ExportMetricsServiceResponse),
    "/v1/logs": (logs_service_pb2.ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse),
}


# ---------------------------------------------------------------------------------------------- decoded views


@dataclass(frozen=True)
class ReceivedEvent:
    name: str
    attributes: dict[str, AttributeValue]
    time_unix_nano: int


@dataclass(frozen=True)
class ReceivedLink:
    trace_id: str
    span_id: str
    attributes: dict[str, AttributeValue]


@dataclass(frozen=True)
class ReceivedSpan:
    """One received span, decoded to plain Python values; ids are lowercase hex (``""`` when absent).

    ``kind`` is the OTLP enum name without prefix (``"INTERNAL"``, ``"CLIENT"``, ...), ``status_code``
    likewise (``"UNSET"``, ``"OK"``, ``"ERROR"``). ``transport`` is ``"grpc"``, ``"http/protobuf"`` or
    ``"http/json"``. ``proto`` is the span message itself, for anything not decoded here.
    """

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    attributes: dict[str, AttributeValue]
    events: list[ReceivedEvent]
    links: list[ReceivedLink]
    status_code: str
    status_message: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    resource: dict[str, AttributeValue]
    scope_name: str
    scope_version: str
    transport: str
    proto: Span


def decode_any_value(value: AnyValue) -> AttributeValue:
    """An OTLP ``AnyValue`` as the Python value it carries (``None`` when empty)."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [decode_any_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return decode_attributes(value.kvlist_value.values)
    if which is None:
        return None
    return cast(AttributeValue, getattr(value, which))


def decode_attributes(attributes: Any) -> dict[str, AttributeValue]:
    """A repeated ``KeyValue`` field as a dict (the last value wins for a repeated key, as in collectors)."""
    return {kv.key: decode_any_value(kv.value) for kv in cast("list[KeyValue]", attributes)}


def _enum_suffix(name: str, prefix: str) -> str:
    return name[len(prefix) :] if name.startswith(prefix) else name


# ---------------------------------------------------------------------------------------------- OTLP/JSON ids


def _convert_ids(node: Any, convert: Callable[[str], str]) -> Any:
    """Rewrite every ``traceId``/``spanId``/``parentSpanId`` string in a JSON tree (spans, links, logs, exemplars)."""
    if isinstance(node, dict):
        return {
            key: convert(value) if key in _ID_KEYS and isinstance(value, str) else _convert_ids(value, convert)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_convert_ids(item, convert) for item in node]
    return node


def _base64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _hex_to_base64(value: str) -> str:
    # OTLP/JSON mandates hex; a value that is not hex is left for json_format to read as base64.
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return value
    return base64.b64encode(raw).decode("ascii")


def otlp_json_dict(message: Message) -> dict[str, Any]:
    """A message in OTLP/JSON form: camelCase keys, integer enums, hex trace and span ids."""
    as_dict = json_format.MessageToDict(message, use_integers_for_enums=True)
    return cast("dict[str, Any]", _convert_ids(as_dict, _base64_to_hex))


def parse_otlp_json(body: bytes, message_type: type[Message]) -> Message:
    """Parse an OTLP/JSON body (hex ids, unknown fields ignored as the OTLP spec requires)."""
    tree = _convert_ids(json.loads(body), _hex_to_base64)
    return json_format.ParseDict(tree, message_type(), ignore_unknown_fields=True)


# ---------------------------------------------------------------------------------------------- servers


class _TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self._receiver._store(request, "grpc")
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: grpc.ServicerContext
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        self._receiver._store(request, "grpc")
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _LogsServicer(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: grpc.ServicerContext
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        self._receiver._store(request, "grpc")
        return logs_service_pb2.ExportLogsServiceResponse()


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver
        super().__init__(("127.0.0.1", 0), _HttpHandler)


class _HttpHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        receiver = cast(_HttpServer, self.server).receiver
        route = _HTTP_ROUTES.get(self.path.split("?", 1)[0])
        if route is None:
            self._reply(404, "text/plain", b"unknown OTLP path")
            return
        request_type, response_type = route
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            elif encoding not in ("", "identity"):
                self._reply(415, "text/plain", f"unsupported Content-Encoding {encoding}".encode())
                return
            if content_type == "application/json":
                message = parse_otlp_json(body, request_type)
                transport = "http/json"
            elif content_type == "application/x-protobuf":
                message = request_type()
                message.ParseFromString(body)
                transport = "http/protobuf"
            else:
                self._reply(415, "text/plain", f"unsupported Content-Type {content_type}".encode())
                return
        except (OSError, EOFError, zlib.error, ValueError, DecodeError, json_format.ParseError, binascii.Error) as exc:
            self._reply(400, "text/plain", f"bad OTLP body: {exc}".encode())
            return
        receiver._store(cast(ExportRequest, message), transport)
        if transport == "http/json":
            self._reply(200, "application/json", b"{}")
        else:
            self._reply(200, "application/x-protobuf", response_type().SerializeToString())

    def _reply(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # Keep test output clean; failures surface through assertions on what was stored.


class OtlpReceiver:
    """An OTLP endpoint (gRPC and HTTP) on 127.0.0.1 that stores every export request it receives.

    Starts on construction; use as a context manager or call :meth:`close`. Thread-safe.
    """

    def __init__(self, json_lines_path: str | os.PathLike[str] | None = None) -> None:
        self._json_lines_path = json_lines_path
        self._cond = threading.Condition()
        self._traces: list[tuple[trace_service_pb2.ExportTraceServiceRequest, str]] = []
        self._metrics: list[tuple[metrics_service_pb2.ExportMetricsServiceRequest, str]] = []
        self._logs: list[tuple[logs_service_pb2.ExportLogsServiceRequest, str]] = []
        self._closed = False

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-receiver-grpc"))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceServicer(self), self._grpc)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsServicer(self), self._grpc)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_LogsServicer(self), self._grpc)
        self._grpc_port = int(self._grpc.add_insecure_port("127.0.0.1:0"))
        self._grpc.start()

        self._http = _HttpServer(self)
        self._http_thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, name="otlp-receiver-http", daemon=True
        )
        self._http_thread.start()

    # --------------------------------------------------------------------------------- endpoints

    @property
    def grpc_endpoint(self) -> str:
        """``127.0.0.1:PORT``, for ``OTLPSpanExporter(endpoint=..., insecure=True)`` (gRPC)."""
        return f"127.0.0.1:{self._grpc_port}"

    @property
    def http_endpoint(self) -> str:
        """``http://127.0.0.1:PORT``; append ``/v1/traces`` (or metrics, logs) for the HTTP exporters."""
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    # --------------------------------------------------------------------------------- storage

    def _store(self, request: ExportRequest, transport: str) -> None:
        with self._cond:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                self._traces.append((request, transport))
                if self._json_lines_path is not None:
                    line = json.dumps(otlp_json_dict(request), separators=(",", ":"))
                    with open(self._json_lines_path, "a", encoding="utf-8") as out:
                        out.write(line + "\n")
            elif isinstance(request, metrics_service_pb2.ExportMetricsServiceRequest):
                self._metrics.append((request, transport))
            else:
                self._logs.append((request, transport))
            self._cond.notify_all()

    @property
    def trace_requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        with self._cond:
            return [request for request, _ in self._traces]

    @property
    def metrics_requests(self) -> list[metrics_service_pb2.ExportMetricsServiceRequest]:
        with self._cond:
            return [request for request, _ in self._metrics]

    @property
    def logs_requests(self) -> list[logs_service_pb2.ExportLogsServiceRequest]:
        with self._cond:
            return [request for request, _ in self._logs]

    def clear(self) -> None:
        """Forget everything received so far (the JSON lines file is left as it is)."""
        with self._cond:
            self._traces.clear()
            self._metrics.clear()
            self._logs.clear()

    # --------------------------------------------------------------------------------- decoded views

    def spans(self, name: str | None = None) -> list[ReceivedSpan]:
        """Every span received, in arrival order, decoded; only those called ``name`` if given."""
        with self._cond:
            received = list(self._traces)
        out: list[ReceivedSpan] = []
        for request, transport in received:
            for resource_spans in request.resource_spans:
                resource = decode_attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        if name is None or span.name == name:
                            out.append(
                                _decode_span(
                                    span, resource, scope_spans.scope.name, scope_spans.scope.version, transport
                                )
                            )
        return out

    def metric_names(self) -> list[str]:
        """Names of every metric received, without repeats, in order of first arrival."""
        names: dict[str, None] = {}
        for request in self.metrics_requests:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        names.setdefault(metric.name, None)
        return list(names)

    def metric_points(self, name: str) -> list[tuple[dict[str, AttributeValue], Any]]:
        """``(attributes, value)`` for every data point of metric ``name`` in every request, in arrival order.

        Sum and gauge points give their number; histogram points a dict with ``count``, ``sum``,
        ``bucket_counts`` and ``explicit_bounds``. Cumulative exports repeat points: take the last one.
        """
        points: list[tuple[dict[str, AttributeValue], Any]] = []
        for request in self.metrics_requests:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        if metric.name != name:
                            continue
                        data = metric.WhichOneof("data")
                        if data in ("sum", "gauge"):
                            for point in getattr(metric, data).data_points:
                                number = getattr(point, point.WhichOneof("value") or "as_int")
                                points.append((decode_attributes(point.attributes), number))
                        elif data == "histogram":
                            for hist in metric.histogram.data_points:
                                value = {
                                    "count": hist.count,
                                    "sum": hist.sum,
                                    "bucket_counts": list(hist.bucket_counts),
                                    "explicit_bounds": list(hist.explicit_bounds),
                                }
                                points.append((decode_attributes(hist.attributes), value))
        return points

    # --------------------------------------------------------------------------------- waiting

    def wait_for_spans(self, n: int, timeout: float = 5.0) -> list[ReceivedSpan]:
        """Block until at least ``n`` spans arrived; return them all. Raises ``AssertionError`` on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                count = sum(len(ss.spans) for r, _ in self._traces for rs in r.resource_spans for ss in rs.scope_spans)
                remaining = deadline - time.monotonic()
                if count >= n or remaining <= 0:
                    break
                self._cond.wait(remaining)
        spans = self.spans()
        if len(spans) < n:
            raise AssertionError(f"expected {n} spans within {timeout}s, got {[s.name for s in spans]}")
        return spans

    def wait_for_metric(self, name: str, timeout: float = 5.0) -> None:
        """Block until a metric called ``name`` arrived. Raises ``AssertionError`` on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while name not in self._metric_names_locked():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"metric {name!r} not received within {timeout}s")
                self._cond.wait(remaining)

    def _metric_names_locked(self) -> set[str]:
        return {
            metric.name
            for request, _ in self._metrics
            for rm in request.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
        }

    # --------------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Stop both servers. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
        self._grpc.stop(grace=None).wait(5.0)
        self._http.shutdown()
        self._http.server_close()
        self._http_thread.join(5.0)

    def __enter__(self) -> OtlpReceiver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _decode_span(
    span: Span, resource: dict[str, AttributeValue], scope_name: str, scope_version: str, transport: str
) -> ReceivedSpan:
    return ReceivedSpan(
        name=span.name,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        kind=_enum_suffix(Span.SpanKind.Name(span.kind), "SPAN_KIND_"),
        attributes=decode_attributes(span.attributes),
        events=[ReceivedEvent(e.name, decode_attributes(e.attributes), e.time_unix_nano) for e in span.events],
        links=[
            ReceivedLink(link.trace_id.hex(), link.span_id.hex(), decode_attributes(link.attributes))
            for link in span.links
        ],
        status_code=_enum_suffix(Status.StatusCode.Name(span.status.code), "STATUS_CODE_"),
        status_message=span.status.message,
        start_time_unix_nano=span.start_time_unix_nano,
        end_time_unix_nano=span.end_time_unix_nano,
        resource=resource,
        scope_name=scope_name,
        scope_version=scope_version,
        transport=transport,
        proto=span,
    )
