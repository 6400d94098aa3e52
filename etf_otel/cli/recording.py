"""Reading recorded streamed responses: JSON lines or raw SSE captures.

Two formats are accepted, detected from the first non-blank line:

* JSON lines: one chunk object per line; a line ``"[DONE]"`` or ``[DONE]`` is the sentinel;
* SSE text: ``data: {...}`` events (parsed by ``sseclient-py``), ``data: [DONE]``.

Input that cannot be read as either (not UTF-8, not JSON, a chunk that is not an
object) raises :class:`RecordingError` with a one-line reason; the CLI turns that into
exit code 2. Odd *field* types inside a chunk are not input errors: they are the
assembler's business and become diagnostics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import sseclient

from etf_otel.errors import RecordingError
from etf_otel.protocols.chat_completions import DONE

__all__ = ["RecordingError", "read_chunks"]

_SSE_FIELDS = ("data:", "event:", "id:", "retry:", ":")
_JSON_TYPE_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def read_chunks(path: str | Path) -> Iterator[object]:
    """Yield the chunks of a recording in order (``"[DONE]"`` for the sentinel)."""
    try:
        handle = open(path, "rb")  # closed by the generator's finally
    except OSError as error:
        raise RecordingError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        first = _first_line(handle, path)
        handle.seek(0)
        if first is None:
            return
        if first.startswith(_SSE_FIELDS):
            yield from _read_sse(handle, path)
        else:
            yield from _read_json_lines(handle, path)
    finally:
        handle.close()


def _first_line(handle: IO[bytes], path: str | Path) -> str | None:
    for raw in handle:
        line = _decode(raw, path).lstrip("\ufeff").strip()
        if line:
            return line
    return None


def _decode(raw: bytes, path: str | Path, where: str = "") -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordingError(f"{path}{where}: not UTF-8 text") from None


def _chunk(text: str, path: str | Path, where: str) -> object:
    if text == DONE or text == '"[DONE]"':
        return DONE
    try:
        chunk = json.loads(text)
    except (ValueError, RecursionError):
        raise RecordingError(f"{path}{where}: not JSON") from None
    if not isinstance(chunk, dict):
        raise RecordingError(
            f"{path}{where}: chunk is a JSON {_JSON_TYPE_NAMES.get(type(chunk), 'value')}, not an object"
        )
    return chunk


def _read_json_lines(handle: IO[bytes], path: str | Path) -> Iterator[object]:
    for number, raw in enumerate(handle, start=1):
        where = f":{number}"
        line = _decode(raw, path, where).lstrip("\ufeff").strip()
        if line:
            yield _chunk(line, path, where)


def _read_sse(handle: IO[bytes], path: str | Path) -> Iterator[object]:
    number = 0
    try:
        for event in sseclient.SSEClient(handle).events():
            number += 1
            data = event.data.strip()
            if data:
                yield _chunk(data, path, f": SSE event {number}")
    except UnicodeDecodeError:
        raise RecordingError(f"{path}: SSE event {number + 1}: not UTF-8 text") from None
