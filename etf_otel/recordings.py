"""Reading recorded streamed responses (JSON lines or raw SSE) and next requests, from files or stdin.

The input is read once into memory, never seeked, so that pipes, ``/dev/stdin`` and ``-``
(standard input) work like files; at most :data:`MAX_INPUT_BYTES` are read. Raw bytes in a
registered protocol's binary framing (Bedrock's ``application/vnd.amazon.eventstream``, as a VCR
cassette holds a ``converse_stream`` body) are read by that protocol
(:attr:`~etf_otel.protocols.WireProtocol.binary_events`); otherwise two text formats are accepted,
told apart by the first non-blank line:

* JSON lines: one event object per line; a line ``"[DONE]"`` or ``[DONE]`` is the sentinel;
* SSE text: ``data: {...}`` events (parsed by ``sseclient-py``), ``data: [DONE]``. An
  ``event:`` name is checked against the ``type`` of its data (the Responses and Anthropic
  APIs send both): a recording whose two disagree is refused, since clients differ in
  which one they act on. The data is the event; the name never replaces it.

Either may be gzip-compressed (recognized by its magic bytes, not its name, as ``audit``
does); the decompressed text is bounded by :data:`MAX_INPUT_BYTES` too.

A recording is **one streamed response**. Two shapes that are not are refused rather than
judged: a complete (non-streamed) response body (:func:`complete_body`), and several
responses one after the other (:func:`later_responses`, ``cat a.sse b.sse``), which no
client would ever merge into one.

Input that cannot be read (missing, a directory, too large, not UTF-8, not JSON, an event
that is not an object, a broken gzip) raises :class:`RecordingError` with a one-line reason;
the CLI turns that into exit code 2. Odd *field* types inside an event are not input errors:
they are the assembler's business and become diagnostics.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Final

from etf_otel import protocols
from etf_otel.errors import RecordingError
from etf_otel.protocols import WireProtocol
from etf_otel.protocols._chat_completions import DONE

__all__ = [
    "MAX_INPUT_BYTES",
    "STDIN",
    "RecordingError",
    "body_protocol",
    "complete_body",
    "display_name",
    "later_responses",
    "parse_recording",
    "read_chunks",
    "read_document",
    "read_input",
]

MAX_INPUT_BYTES: Final = 256 * 1024 * 1024
"""The most a recording or a next request may hold (256 MiB); larger input is refused."""
STDIN: Final = "-"
"""The source name that reads standard input."""

_GZIP_MAGIC: Final = b"\x1f\x8b"
_SSE_FIELDS = ("data:", "event:", "id:", "retry:", ":")
_SSE_DEFAULT_EVENT = "message"
_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def display_name(source: str | Path) -> str:
    """How ``source`` is named in messages: ``<stdin>`` for ``-``, else the path, made printable."""
    if str(source) == STDIN:
        return "<stdin>"
    text = str(source)
    return text if text.isprintable() else text.encode("unicode_escape", "backslashreplace").decode("ascii")


def read_input(source: str | Path) -> bytes:
    """All of ``source`` (a path, or ``-`` for standard input), read once and never seeked."""
    name = display_name(source)
    if str(source) == STDIN:
        stdin = sys.stdin
        buffer: IO[bytes] | None = getattr(stdin, "buffer", None)
        if stdin is None or buffer is None:
            raise RecordingError(f"{name}: standard input is closed")
        if _isatty(stdin):
            raise RecordingError(f"{name}: standard input is a terminal; pipe or redirect the input into it")
        return _read_bounded(buffer, name)
    try:
        handle = open(source, "rb")
    except OSError as error:
        raise RecordingError(f"cannot read {name}: {error.strerror or error}") from None
    with handle:
        return _read_bounded(handle, name)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):
        return False


def _read_bounded(handle: IO[bytes], name: str) -> bytes:
    try:
        data = handle.read(MAX_INPUT_BYTES + 1)
    except (OSError, ValueError) as error:
        raise RecordingError(f"cannot read {name}: {getattr(error, 'strerror', None) or error}") from None
    if not isinstance(data, bytes):
        raise RecordingError(f"cannot read {name}: not a byte stream")
    if len(data) > MAX_INPUT_BYTES:
        raise RecordingError(f"{name}: larger than {MAX_INPUT_BYTES // 2**20} MiB")
    return _gunzip(data, name) if data.startswith(_GZIP_MAGIC) else data


def _gunzip(data: bytes, name: str) -> bytes:
    """``data`` decompressed (every member of it), at most :data:`MAX_INPUT_BYTES`."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as compressed:
            text = compressed.read(MAX_INPUT_BYTES + 1)
    except (OSError, EOFError, zlib.error):  # BadGzipFile is an OSError; a truncated member is EOFError
        raise RecordingError(f"{name}: broken gzip (truncated or corrupt)") from None
    if len(text) > MAX_INPUT_BYTES:
        raise RecordingError(f"{name}: larger than {MAX_INPUT_BYTES // 2**20} MiB once decompressed")
    return text


def read_chunks(source: str | Path) -> Iterator[object]:
    """Yield the events of a recording in order (``"[DONE]"`` for the sentinel).

    ``source`` is a path or ``-``; the input is read when iteration starts.
    """
    name = display_name(source)
    yield from parse_recording(read_input(source), name)


def parse_recording(data: bytes, name: str) -> Iterator[object]:
    """The events of a recording held in ``data``; ``name`` is used in error messages.

    A registered protocol with a binary framing of its own reads ``data`` first
    (:attr:`WireProtocol.binary_events`: Bedrock's raw event-stream bytes)."""
    for protocol in protocols.registered():
        events = protocol.binary_events(data)
        if events is not None:
            yield from events
            return
    first = _first_line(data, name)
    if first is None:
        return
    if first.startswith(_SSE_FIELDS):
        yield from _read_sse(data, name)
    else:
        yield from _read_json_lines(data, name)


def read_document(source: str | Path) -> object:
    """One JSON document (a next request), from a path or ``-``."""
    name = display_name(source)
    text = _decode(read_input(source), name).lstrip("\ufeff")
    if not text.strip():
        raise RecordingError(f"{name}: empty, not JSON")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise RecordingError(f"{name}: not JSON") from None


def _first_line(data: bytes, name: str) -> str | None:
    for number, raw in enumerate(io.BytesIO(data), start=1):
        line = _decode(raw, name, f":{number}").lstrip("\ufeff").strip()
        if line:
            return line
    return None


def _decode(raw: bytes, name: str, where: str = "") -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordingError(f"{name}{where}: not UTF-8 text") from None


def _event(text: str, name: str, where: str) -> object:
    if text == DONE or text == '"[DONE]"':
        return DONE
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        raise RecordingError(f"{name}{where}: not JSON") from None
    if not isinstance(event, dict):
        raise RecordingError(
            f"{name}{where}: event is a JSON {_JSON_TYPE_NAMES.get(type(event), 'value')}, not an object"
        )
    return event


def _read_json_lines(data: bytes, name: str) -> Iterator[object]:
    for number, raw in enumerate(io.BytesIO(data), start=1):
        where = f":{number}"
        line = _decode(raw, name, where).lstrip("\ufeff").strip()
        if line:
            yield _event(line, name, where)


def _read_sse(data: bytes, name: str) -> Iterator[object]:
    import sseclient  # the cli extra's SSE parser: `import etf_otel.recordings` must not need it

    number = 0
    try:
        for sse in sseclient.SSEClient(io.BytesIO(data)).events():
            number += 1
            payload = sse.data.strip()
            if not payload:
                continue
            where = f": SSE event {number}"
            event = _event(payload, name, where)
            if sse.event != _SSE_DEFAULT_EVENT and isinstance(event, dict):
                kind = event.get("type")
                if isinstance(kind, str) and kind != sse.event:
                    raise RecordingError(f"{name}{where}: its event: name differs from the type of its data")
            yield event
    except UnicodeDecodeError:
        raise RecordingError(f"{name}: SSE event {number + 1}: not UTF-8 text") from None


# --- one streamed response ------------------------------------------------------------------------------------------


def complete_body(event: object) -> str | None:
    """What ``event`` is when it is a complete, non-streamed response body, else ``None``.

    Each registered protocol says what its bodies look like (:attr:`WireProtocol.complete_body`),
    asked in registration order: Chat Completions ``object: "chat.completion"`` or ``choices``
    that all hold a ``message`` and no ``delta``; Responses ``object: "response"`` without a
    ``type``; Anthropic Messages ``type: "message"``.
    """
    found = body_protocol(event)
    return None if found is None else found.complete_body(event)


def body_protocol(event: object) -> WireProtocol | None:
    """The registered protocol ``event`` is a complete body of (see :func:`complete_body`), else ``None``."""
    if not isinstance(event, dict):
        return None
    for protocol in protocols.registered():
        if protocol.complete_body(event) is not None:
            return protocol
    return None


def later_responses(protocol: WireProtocol | str, events: Sequence[object]) -> list[int]:
    """Where each response after the first starts (positions in ``events``); ``[]`` for one response.

    A response ended by its terminal event and followed by another response's events, as the
    protocol's :attr:`WireProtocol.later_responses` tells them apart (for Chat Completions a
    chunk after a ``[DONE]``, for Responses a ``response.created`` after an end, for Anthropic
    a ``message_start`` after ``message_stop``). A second start *before* the first response
    ended is not counted here: that is a splice inside one stream, which the protocol's adapter
    judges (a truncated response). A name no protocol has is not checked (``[]``).
    """
    found = protocol if isinstance(protocol, WireProtocol) else protocols.PROTOCOLS.get(protocol)
    return [] if found is None else found.later_responses(events)
