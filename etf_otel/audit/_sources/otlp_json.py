"""Streaming reader of OTLP JSON trace exports (the input of ``etf-otel audit``).

Accepted input, per file or standard input alike (a file plain or gzip, detected by its magic
bytes, not its name):

* JSON lines, one ``ExportTraceServiceRequest`` per line, as written by the OTLP JSON file
  exporters (``opentelemetry-exporter-otlp-json-file``, the Collector's ``file`` exporter),
  with or without other lines between them: ``opentelemetry-instrument`` with the
  ``otlp_json_file`` exporter writes the spans and the application's own output to one stdout,
  piped or redirected to a file. A line that is not a trace export (text, broken JSON, a
  record of another signal) is skipped and counted. Read one line at a time: memory is bounded
  by the longest line (one export batch).
* Whole JSON documents: one ``ExportTraceServiceRequest`` (possibly pretty-printed), several
  concatenated, or a JSON array of them. A document is parsed in one piece, so one document
  must fit in memory; exports larger than memory should be written as lines.

An input holding no OTLP record at all is refused with what it is instead: the console
exporter's output (named, with what to use instead), a recording (``etf-otel replay``), text.

Directories are walked recursively in sorted order; hidden files (``.name``) are skipped.
Field names may be lowerCamelCase (OTLP/JSON) or snake_case (protobuf
``preserving_proto_field_name``); ids may be hex (OTLP/JSON) or base64 (the plain protobuf JSON
mapping). A malformed trace export is an :class:`OtlpInputError` carrying a one-line reason
with the file and line.

Only the standard library is used: ``json`` decodes about as fast as this format can be
read, while going through ``google.protobuf.json_format`` was several times slower.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from etf_otel.audit._model import SpanData
from etf_otel.audit._sources.files import STDIN, expand_inputs, open_input
from etf_otel.audit._sources.otlp_request import spans_of_request
from etf_otel.audit._sources.otlp_values import decode_any_value
from etf_otel.errors import OtlpInputError

__all__ = [
    "InputStats",
    "OtlpInputError",
    "decode_any_value",
    "iter_spans",
    "spans_of_request",
]

_OTHER_SIGNALS = ("resourceMetrics", "resource_metrics", "resourceLogs", "resource_logs")


@dataclass
class InputStats:
    """What the reader went through (shown in the audit report)."""

    files: int = 0
    records: int = 0
    skipped_records: int = 0
    spans: int = 0
    bytes_read: int = 0
    paths: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    """Files found in a directory that are not trace exports, each with its reason (the audit goes on)."""


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
        elif _recorded_object(item):
            raise ValueError(RECORDING_HINT)
        elif _console_span(item):
            raise ValueError(CONSOLE_HINT)
        else:
            raise ValueError("not an OTLP trace export (expected a JSON object with resourceSpans)")


CONSOLE_HINT = (
    "the console exporter's output (pretty-printed spans with 0x ids), which is not OTLP JSON: export with"
    " OTEL_TRACES_EXPORTER=otlp_json_file (opentelemetry-exporter-otlp-json-file) and audit what it writes"
)
"""The reason given for the console exporter's output (the launcher's ``--traces_exporter console``)."""
_CONSOLE_ID = re.compile(rb'^\s*"trace_id": "0x[0-9a-f]{32}",?\s*$', re.MULTILINE)
"""A line of a span as the SDK's ``ConsoleSpanExporter`` prints it (``span.to_json()``, ids as ``0x`` hex)."""


@dataclass
class _Seen:
    """What one input held, for the reason given when it holds no OTLP record at all."""

    otlp: bool = False
    console: bool = False
    first: tuple[int, bytes, object] | None = None
    """The first non-blank line: its number, bytes and decoded JSON value (``None`` if not JSON)."""


def _read_source(
    label: str, source: IO[bytes], stats: InputStats, progressed: Callable[[], None]
) -> Iterator[SpanData]:
    """One input (a file or standard input), read by the same rules whatever it is.

    JSON lines, as the OTLP JSON file exporters write them, whether or not the application's
    own output is mixed in (``opentelemetry-instrument`` with the ``otlp_json_file`` exporter
    writes both to one stdout, redirected to a file or piped): every line that is an OTLP JSON
    trace export is read, every other line (text, a metric or log record, broken JSON) is
    skipped and counted. A first line that opens a JSON value without closing it starts whole
    documents instead (pretty-printed, several in a row, or an array), unless no JSON value
    starts there at all (the application printed a brace): then lines again. An input with no
    OTLP record at all is an :class:`OtlpInputError` saying what its first line is.
    """
    seen = _Seen()
    line_number = 0
    for line in source:
        line_number += 1
        if line.strip():
            break
    else:
        return
    value = _decoded(line)
    seen.first = (line_number, line, value)
    if value is None and line.lstrip()[:1] in (b"{", b"["):
        data = line + source.read()
        try:
            yield from _documents(label, data, line_number, stats)
            return
        except _NoDocument:  # nothing read yet: the rest is read as lines
            source = io.BytesIO(data)
            source.readline()
    while True:
        yield from _spans_of_line(label, line_number, line, value, stats, seen)
        progressed()
        while True:
            line = source.readline()
            if not line:
                _refuse_unless_otlp(label, seen)
                return
            line_number += 1
            if line.strip():
                break
        value = _decoded(line)


def _decoded(line: bytes) -> object:
    """A line's JSON value, ``None`` if it is not JSON (or nested too deeply to decode)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _spans_of_line(
    label: str, line_number: int, line: bytes, value: object, stats: InputStats, seen: _Seen
) -> Iterator[SpanData]:
    """The spans of one line; a line that is not an OTLP export is skipped and counted."""
    if not isinstance(value, (dict, list)):
        stats.skipped_records += 1
        seen.console = seen.console or bool(_CONSOLE_ID.match(line))
        return
    requests: list[Any] = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict) and ("resourceSpans" in item or "resource_spans" in item):
            requests.append(item)
        else:
            seen.otlp = seen.otlp or (isinstance(item, dict) and any(key in item for key in _OTHER_SIGNALS))
            stats.skipped_records += 1
    for request in requests:
        seen.otlp = True
        stats.records += 1
        try:
            spans = list(spans_of_request(request))
        except ValueError as error:  # a trace export, malformed: never skipped
            raise OtlpInputError(f"{label}:{line_number}: {error}") from None
        for span in spans:
            stats.spans += 1
            yield span


def _refuse_unless_otlp(label: str, seen: _Seen) -> None:
    """An input that held no OTLP record at all: say what it is instead, from its first line."""
    if seen.otlp or seen.first is None:
        return
    if seen.console:
        raise OtlpInputError(f"{label}: {CONSOLE_HINT}")
    line_number, line, value = seen.first
    if _recorded_stream(line, value):
        raise OtlpInputError(f"{label}: {RECORDING_HINT}")
    reason = "not valid JSON" if value is None else "not an OTLP trace export (no resourceSpans)"
    raise OtlpInputError(f"{label}: no OTLP trace spans in it (line {line_number}: {reason})")


def _read_file(
    path: str, stats: InputStats, advance: Callable[[int], None] | None, stdin: IO[bytes] | None = None
) -> Iterator[SpanData]:
    if path == STDIN:
        yield from _read_source(STDIN, stdin if stdin is not None else sys.stdin.buffer, stats, lambda: None)
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
            yield from _read_source(path, source, stats, progressed)
            progressed()
    except OSError as error:  # gzip.BadGzipFile, EOFError-free truncation and I/O errors
        raise OtlpInputError(f"{path}: cannot read: {error}") from None
    except EOFError:
        raise OtlpInputError(f"{path}: compressed file ends unexpectedly (truncated gzip)") from None


RECORDING_HINT = (
    "a recorded response (a stream or a complete body), not an OTLP trace export: check it with etf-otel replay FILE"
)
"""The reason given for a recording passed to ``audit`` (``replay`` is the command that reads recordings)."""
_STREAM_KEYS = ("choices", "delta", "type", "object", "candidates")
"""Keys of a streamed event or a complete body (Chat Completions, Responses, Anthropic, Gemini), never of
a trace export."""


def _recorded_stream(first: bytes, value: object) -> bool:
    """Whether the first line is a recorded stream's: an SSE field, or a wire event as a JSON line."""
    line = first.lstrip()
    if line.startswith((b"data:", b"event:")):
        return True
    if value == "[DONE]":
        return True
    return _recorded_object(value)


def _recorded_object(value: object) -> bool:
    """Whether a decoded JSON value is a wire event or a complete response body rather than traces."""
    return isinstance(value, dict) and "resourceSpans" not in value and any(key in value for key in _STREAM_KEYS)


def _console_span(value: object) -> bool:
    """Whether a decoded JSON value is a span as the console exporter prints it."""
    context = value.get("context") if isinstance(value, dict) else None
    trace_id = context.get("trace_id") if isinstance(context, dict) else None
    return isinstance(trace_id, str) and trace_id.startswith("0x")


def _spans_of_value(value: object, stats: InputStats) -> Iterator[SpanData]:
    """The spans of one parsed JSON value (a request, or several), counted in ``stats``."""
    for request in _requests_of_value(value, stats):
        stats.records += 1
        for span in spans_of_request(request):
            stats.spans += 1
            yield span


class _NoDocument(Exception):
    """The first value of what looked like whole documents does not decode (nothing was read)."""


def _documents(path: str, data: bytes, first_line: int, stats: InputStats) -> Iterator[SpanData]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise OtlpInputError(f"{path}: not OTLP JSON (not UTF-8 text)") from None
    decoder = json.JSONDecoder()
    position = 0
    length = len(text)
    first = len(text) - len(text.lstrip(" \t\r\n"))
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
            if _CONSOLE_ID.search(data):  # the console exporter's spans, the application's output between them
                raise OtlpInputError(f"{path}: {CONSOLE_HINT}") from None
            if position == first:
                raise _NoDocument from None
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
    inputs = expand_inputs(paths)
    stats.paths = [path for path, _ in inputs]
    for path, found in inputs:
        stats.files += 1
        if not found:
            yield from _read_file(path, stats, advance, stdin)
            continue
        records = stats.records
        try:
            yield from _read_file(path, stats, advance, stdin)
        except OtlpInputError as error:
            if stats.records != records:  # a trace export broken further on is still an error
                raise
            stats.files -= 1  # found in a directory, not traces at all: skipped, named, and the audit goes on
            stats.skipped_files.append(str(error))
