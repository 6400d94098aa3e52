"""Streaming reader of OTLP JSON trace exports (the input of ``etf-otel audit``).

Accepted input, per file (plain or gzip, detected by its magic bytes, not its name):

* JSON lines, one ``ExportTraceServiceRequest`` per line, as written by the OTLP JSON file
  exporters (``opentelemetry-exporter-otlp-json-file``, the Collector's ``file`` exporter).
  Read one line at a time: memory is bounded by the longest line (one export batch).
* Whole JSON documents: one ``ExportTraceServiceRequest`` (possibly pretty-printed), several
  concatenated, or a JSON array of them. A document is parsed in one piece, so one document
  must fit in memory; exports larger than memory should be written as lines.

Directories are walked recursively in sorted order; hidden files (``.name``) are skipped.
Records of other signals (``resourceMetrics``, ``resourceLogs``), which a file exporter may
write beside traces, are skipped and counted. Field names may be lowerCamelCase (OTLP/JSON)
or snake_case (protobuf ``preserving_proto_field_name``); ids may be hex (OTLP/JSON) or
base64 (the plain protobuf JSON mapping). Anything else is an :class:`OtlpInputError`
carrying a one-line reason with the file and line.

Only the standard library is used: ``json`` decodes about as fast as this format can be
read, while going through ``google.protobuf.json_format`` was several times slower.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from etf_otel.audit._model import SpanData, span_events
from etf_otel.audit._sources.files import STDIN, expand_paths, open_input
from etf_otel.errors import OtlpInputError

__all__ = [
    "InputStats",
    "OtlpInputError",
    "decode_any_value",
    "iter_spans",
    "spans_of_request",
]

_OTHER_SIGNALS = ("resourceMetrics", "resource_metrics", "resourceLogs", "resource_logs")
_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


@dataclass
class InputStats:
    """What the reader went through (shown in the audit report)."""

    files: int = 0
    records: int = 0
    skipped_records: int = 0
    spans: int = 0
    bytes_read: int = 0
    paths: list[str] = field(default_factory=list)


def _first(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    value = mapping.get(camel)
    return mapping.get(snake) if value is None else value


def decode_any_value(value: Any) -> object:
    """An OTLP/JSON ``AnyValue`` as a Python value (``None`` for an empty value)."""
    if not isinstance(value, dict):
        return None
    for key, item in value.items():
        if key in ("stringValue", "string_value"):
            return item
        if key in ("boolValue", "bool_value"):
            return bool(item)
        if key in ("intValue", "int_value"):
            try:
                return int(item)
            except (TypeError, ValueError):
                return None
        if key in ("doubleValue", "double_value"):
            try:
                return float(item)
            except (TypeError, ValueError):
                return None
        if key in ("arrayValue", "array_value"):
            values = item.get("values") if isinstance(item, dict) else None
            return [decode_any_value(v) for v in values] if isinstance(values, list) else []
        if key in ("kvlistValue", "kvlist_value"):
            values = item.get("values") if isinstance(item, dict) else None
            return _decode_attributes(values)
        if key in ("bytesValue", "bytes_value"):
            return item
    return None


def _decode_attributes(attributes: Any) -> dict[str, object]:
    out: dict[str, object] = {}
    if not isinstance(attributes, list):
        return out
    for entry in attributes:
        if isinstance(entry, dict):
            key = entry.get("key")
            if isinstance(key, str):
                out[key] = decode_any_value(entry.get("value"))
    return out


def _decode_id(value: Any, size: int) -> str | None:
    """Hex id of ``size`` bytes; ``None`` if absent, empty or all zeros; raises if malformed."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        if len(value) == 2 * size:
            try:
                int(value, 16)
            except ValueError:
                pass
            else:
                text = value.lower()
                return None if text.strip("0") == "" else text
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == size:
            return None if raw == bytes(size) else raw.hex()
    raise ValueError(f"malformed {'trace' if size == 16 else 'span'} id {str(value)[:40]!r}")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _status_code(status: Any) -> int:
    if not isinstance(status, dict):
        return 0
    code = status.get("code")
    if isinstance(code, str):
        return _STATUS_CODES.get(code, _int(code))
    return _int(code)


def spans_of_request(request: Any) -> Iterator[SpanData]:
    """The spans of one decoded ``ExportTraceServiceRequest``; raises ``ValueError`` if malformed."""
    resource_spans = _first(request, "resourceSpans", "resource_spans")
    if not isinstance(resource_spans, list):
        raise ValueError("resourceSpans is not a list")
    for resource_entry in resource_spans:
        if not isinstance(resource_entry, dict):
            raise ValueError("resourceSpans entry is not an object")
        resource = resource_entry.get("resource")
        service = None
        if isinstance(resource, dict):
            service_name = _decode_attributes(resource.get("attributes")).get("service.name")
            service = service_name if isinstance(service_name, str) else None
        scope_spans = _first(resource_entry, "scopeSpans", "scope_spans")
        if scope_spans is None:
            scope_spans = _first(resource_entry, "instrumentationLibrarySpans", "instrumentation_library_spans")
        if scope_spans is None:
            continue
        if not isinstance(scope_spans, list):
            raise ValueError("scopeSpans is not a list")
        for scope_entry in scope_spans:
            if not isinstance(scope_entry, dict):
                raise ValueError("scopeSpans entry is not an object")
            spans = scope_entry.get("spans")
            if spans is None:
                continue
            if not isinstance(spans, list):
                raise ValueError("spans is not a list")
            for span in spans:
                yield _decode_span(span, service)


def _decode_span(span: Any, service: str | None) -> SpanData:
    if not isinstance(span, dict):
        raise ValueError("span is not an object")
    trace_id = _decode_id(_first(span, "traceId", "trace_id"), 16)
    span_id = _decode_id(_first(span, "spanId", "span_id"), 8)
    if trace_id is None or span_id is None:
        raise ValueError(f"span {str(span.get('name'))[:60]!r} without a valid traceId and spanId")
    links: list[tuple[str, str]] = []
    raw_links = span.get("links")
    if isinstance(raw_links, list):
        for link in raw_links:
            if isinstance(link, dict):
                link_trace = _decode_id(_first(link, "traceId", "trace_id"), 16)
                link_span = _decode_id(_first(link, "spanId", "span_id"), 8)
                if link_trace is not None and link_span is not None:
                    links.append((link_trace, link_span))
    events = span_events(span.get("events"), _decode_attributes)
    name = span.get("name")
    return SpanData(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=_decode_id(_first(span, "parentSpanId", "parent_span_id"), 8),
        name=name if isinstance(name, str) else "",
        start_ns=_int(_first(span, "startTimeUnixNano", "start_time_unix_nano")),
        end_ns=_int(_first(span, "endTimeUnixNano", "end_time_unix_nano")),
        attributes=_decode_attributes(span.get("attributes")),
        events=events,
        links=links,
        status_code=_status_code(span.get("status")),
        service=service,
    )


def _requests_of_value(value: Any, stats: InputStats) -> Iterator[Any]:
    """The trace requests in one decoded JSON value (an object or an array of objects)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, dict):
            raise ValueError("not an OTLP trace export (expected a JSON object with resourceSpans)")
        if "resourceSpans" in item or "resource_spans" in item:
            yield item
        elif any(key in item for key in _OTHER_SIGNALS):
            stats.skipped_records += 1
        else:
            raise ValueError("not an OTLP trace export (expected a JSON object with resourceSpans)")


def _read_mixed(source: IO[bytes], stats: InputStats) -> Iterator[SpanData]:
    """Standard input, line by line: OTLP JSON trace lines are read, any other line is skipped and counted.

    This is what ``opentelemetry-instrument`` with the ``otlp_json_file`` traces exporter writes:
    the application's own output and the exported spans interleaved on one stdout, so a line
    that is not a trace export (text, a metric or log record, broken JSON) is not an error here.
    """
    for line in source:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
            requests = list(_requests_of_value(value, stats))
        except (ValueError, RecursionError):
            stats.skipped_records += 1
            continue
        for request in requests:
            stats.records += 1
            for span in spans_of_request(request):
                stats.spans += 1
                yield span


def _read_file(
    path: str, stats: InputStats, advance: Callable[[int], None] | None, stdin: IO[bytes] | None = None
) -> Iterator[SpanData]:
    if path == STDIN:
        yield from _read_mixed(stdin if stdin is not None else sys.stdin.buffer, stats)
        return
    try:
        source, raw = open_input(path)
    except OSError as error:
        raise OtlpInputError(f"{path}: cannot open: {error.strerror or error}") from None
    position = 0

    def progressed() -> None:
        nonlocal position
        if advance is not None:
            now = raw.tell()
            advance(now - position)
            position = now

    try:
        with source, raw:
            line_number = 0
            first: bytes | None = None
            for line in source:
                line_number += 1
                if line.strip():
                    first = line
                    break
            if first is None:
                return
            try:
                value = json.loads(first)
            except (ValueError, RecursionError):
                value = None
            if isinstance(value, (dict, list)):
                # JSON lines: one request per line.
                yield from _lines(path, value, line_number, source, stats, progressed)
            else:
                # A whole document (pretty-printed, concatenated documents or an array).
                text = first + source.read()
                yield from _documents(path, text, line_number, stats)
            progressed()
    except OSError as error:  # gzip.BadGzipFile, EOFError-free truncation and I/O errors
        raise OtlpInputError(f"{path}: cannot read: {error}") from None
    except EOFError:
        raise OtlpInputError(f"{path}: compressed file ends unexpectedly (truncated gzip)") from None


def _lines(
    path: str,
    value: Any,
    line_number: int,
    source: IO[bytes],
    stats: InputStats,
    progressed: Callable[[], None],
) -> Iterator[SpanData]:
    while True:
        try:
            yield from _spans_of_value(value, stats)
        except ValueError as error:
            raise OtlpInputError(f"{path}:{line_number}: {error}") from None
        progressed()
        while True:
            line = source.readline()
            if not line:
                return
            line_number += 1
            if line.strip():
                break
        try:
            value = json.loads(line)
        except RecursionError:
            raise OtlpInputError(f"{path}:{line_number}: JSON nested too deeply") from None
        except ValueError as error:
            reason = "truncated JSON line" if not line.endswith(b"\n") or "Unterminated" in str(error) else "bad JSON"
            raise OtlpInputError(f"{path}:{line_number}: {reason}: {error}") from None


def _spans_of_value(value: object, stats: InputStats) -> Iterator[SpanData]:
    """The spans of one parsed JSON value (a request, or several), counted in ``stats``."""
    for request in _requests_of_value(value, stats):
        stats.records += 1
        for span in spans_of_request(request):
            stats.spans += 1
            yield span


def _documents(path: str, data: bytes, first_line: int, stats: InputStats) -> Iterator[SpanData]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OtlpInputError(f"{path}: not OTLP JSON (not UTF-8 text)") from None
    decoder = json.JSONDecoder()
    position = 0
    length = len(text)
    while True:
        while position < length and text[position] in " \t\r\n":
            position += 1
        if position >= length:
            return
        try:
            value, end = decoder.raw_decode(text, position)
        except RecursionError:
            raise OtlpInputError(f"{path}:{first_line}: JSON nested too deeply") from None
        except ValueError as error:
            line = first_line + text.count("\n", 0, getattr(error, "pos", position))
            raise OtlpInputError(f"{path}:{line}: not valid JSON (truncated or not OTLP JSON)") from None
        line = first_line + text.count("\n", 0, position)
        position = end
        try:
            yield from _spans_of_value(value, stats)
        except ValueError as error:
            raise OtlpInputError(f"{path}:{line}: {error}") from None


def iter_spans(
    paths: Iterable[str],
    stats: InputStats | None = None,
    advance: Callable[[int], None] | None = None,
    stdin: IO[bytes] | None = None,
) -> Iterator[SpanData]:
    """Every span of every input file, streamed. ``advance(n)`` reports bytes read from disk.

    ``stdin`` stands in for standard input (``-``): a copy of it, for a caller that reads twice.
    """
    stats = stats if stats is not None else InputStats()
    files = expand_paths(paths)
    stats.paths = files
    for path in files:
        stats.files += 1
        yield from _read_file(path, stats, advance, stdin)
