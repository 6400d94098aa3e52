"""The ``application/vnd.amazon.eventstream`` framing of ``converse_stream``, read with the standard library.

Each message (BEDROCK.md 9.5; all integers big-endian):

* a 12-byte prelude: the total length of the message (u32, both CRCs included), the length of its
  headers (u32), and the CRC-32 of those 8 bytes (u32);
* the headers: name length (u8), name (UTF-8), value type (u8), the value (type 7, a string: u16
  length and UTF-8; booleans carry no value, integers 1, 2, 4 or 8 bytes, type 6 bytes and 7 strings
  a u16 length, 8 a timestamp of 8 bytes, 9 a UUID of 16); a name occurs at most once;
* the payload (the event's JSON members);
* the CRC-32 of every byte before it (u32).

:func:`decode` lowers each message to botocore's dict form: an event to ``{<:event-type>: payload}``,
a modelled exception to ``{<:exception-type>: payload}``, an unmodelled error to ``{"error": {"code":
<:error-code>, "message": <:error-message>}}``. Trailing bytes shorter than the message they start
are the end of the input (botocore drops them too). A message botocore would refuse (a CRC mismatch,
broken headers, a payload that is not a JSON object) becomes one ``{"error": {...}}`` event whose
code names the problem, and nothing after it is read: the SDK raises there, and the response failed.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Final

__all__ = ["MAX_HEADERS_BYTES", "MAX_PAYLOAD_BYTES", "PRELUDE_BYTES", "decode", "is_event_stream"]

PRELUDE_BYTES: Final = 12
_CRC_BYTES: Final = 4
MAX_HEADERS_BYTES: Final = 128 * 1024
MAX_PAYLOAD_BYTES: Final = 24 * 1024 * 1024
"""What botocore accepts at most per message."""

_FIXED: Final = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}
"""Header value types of a fixed size (bytes); 6 (bytes) and 7 (string) carry a u16 length."""
_STRING: Final = 7
_VARIABLE: Final = (6, 7)


class _Broken(Exception):
    """A message botocore would refuse; its argument is the code of the failure event."""


def _prelude(data: bytes, offset: int) -> tuple[int, int]:
    """``(total length, headers length)`` of the message at ``offset``, its prelude checked."""
    total, headers = struct.unpack_from(">II", data, offset)
    (crc,) = struct.unpack_from(">I", data, offset + 8)
    if zlib.crc32(data[offset : offset + 8]) != crc:
        raise _Broken("ChecksumMismatch")
    if headers > MAX_HEADERS_BYTES or headers > total - PRELUDE_BYTES - _CRC_BYTES:
        raise _Broken("InvalidHeadersLength")
    if total - PRELUDE_BYTES - _CRC_BYTES - headers > MAX_PAYLOAD_BYTES:
        raise _Broken("InvalidPayloadLength")
    return total, headers


def is_event_stream(data: bytes) -> bool:
    """Whether ``data`` starts with a valid event-stream prelude (raw ``converse_stream`` bytes)."""
    if len(data) < PRELUDE_BYTES:
        return False
    try:
        _prelude(data, 0)
    except _Broken:
        return False
    return True


def _headers(block: bytes) -> dict[str, object]:
    """The headers of one message; :class:`_Broken` when they overrun or repeat a name."""
    headers: dict[str, object] = {}
    at = 0
    try:
        while at < len(block):
            size = block[at]
            name = block[at + 1 : at + 1 + size].decode("utf-8")
            kind = block[at + 1 + size]
            at += 2 + size
            if kind in _VARIABLE:
                (length,) = struct.unpack_from(">H", block, at)
                raw = block[at + 2 : at + 2 + length]
                at += 2 + length
                value: object = raw.decode("utf-8") if kind == _STRING else raw
            elif kind in _FIXED:
                raw = block[at : at + _FIXED[kind]]
                at += _FIXED[kind]
                value = kind == 0 if kind in (0, 1) else raw
            else:
                raise _Broken("InvalidHeaderValueType")
            if name in headers:
                raise _Broken("DuplicateHeader")
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError):
        raise _Broken("InvalidHeaders") from None
    if at != len(block):
        raise _Broken("InvalidHeaders")
    return headers


def _payload(raw: bytes) -> dict[str, object]:
    try:
        value = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        raise _Broken("InvalidPayload") from None
    if not isinstance(value, dict):
        raise _Broken("InvalidPayload")
    return value


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _lower(headers: dict[str, object], payload: bytes) -> dict[str, object]:
    """One message in botocore's dict form."""
    message_type = headers.get(":message-type")
    if message_type == "error":
        code, text = headers.get(":error-code"), headers.get(":error-message")
        return {"error": {"code": _text(code), "message": _text(text)}}
    name = headers.get(":exception-type" if message_type == "exception" else ":event-type")
    if not isinstance(name, str) or not name:
        raise _Broken("InvalidEventType")
    return {name: _payload(payload)}


def _message(data: bytes, offset: int) -> tuple[dict[str, object], int] | None:
    """The message at ``offset`` and where the next one starts; ``None`` when the input ends inside it."""
    if len(data) - offset < PRELUDE_BYTES:
        return None
    total, size = _prelude(data, offset)
    end = offset + total
    if end > len(data):
        return None
    (crc,) = struct.unpack_from(">I", data, end - _CRC_BYTES)
    if zlib.crc32(data[offset : end - _CRC_BYTES]) != crc:
        raise _Broken("ChecksumMismatch")
    start = offset + PRELUDE_BYTES
    headers = _headers(data[start : start + size])
    return _lower(headers, data[start + size : end - _CRC_BYTES]), end


def decode(data: bytes) -> list[dict[str, object]]:
    """The messages of raw event-stream bytes in botocore's dict form, in order (see the module docstring)."""
    events: list[dict[str, object]] = []
    offset = 0
    while offset < len(data):
        try:
            found = _message(data, offset)
        except _Broken as broken:
            events.append({"error": {"code": str(broken), "message": "event-stream message refused"}})
            break
        if found is None:
            break
        event, offset = found
        events.append(event)
    return events
