"""Amazon Bedrock Converse events in the dict form botocore yields, and their event-stream frames.

Each event is an object with one key, the event type. :data:`MISSING` leaves a key out entirely
(as opposed to sending ``null``, which botocore would drop but a raw recording keeps). The text
block at index 0 has no ``contentBlockStart``, as on the wire. :func:`frames` encodes events as the
``application/vnd.amazon.eventstream`` messages ``converse_stream`` answers with (standard library
only, CRC-32 by :func:`zlib.crc32`); the scripted server sends them on ``/model/{id}/converse-stream``.

A typical stream::

    stream(tool_call(1, "tooluse_a", "get_weather", '{"city":', '"Paris"}'))
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from etf_otel.testing._wire import MISSING, flatten, without_missing

__all__ = [
    "MISSING",
    "MODEL",
    "block_start",
    "block_stop",
    "body",
    "error_frame",
    "exception",
    "frame",
    "frames",
    "input_delta",
    "message_start",
    "message_stop",
    "metadata",
    "stream",
    "text_delta",
    "tool_call",
    "tool_start",
    "tool_use",
]

MODEL = "us.anthropic.claude-test-v1:0"


def message_start(role: Any = "assistant") -> dict[str, Any]:
    return {"messageStart": without_missing(role=role)}


def block_start(index: Any, start: Any) -> dict[str, Any]:
    """A ``contentBlockStart`` with any ``start`` (``{"toolUse": ...}``, ``{"toolResult": ...}``, ...)."""
    return {"contentBlockStart": without_missing(start=start, contentBlockIndex=index)}


def tool_start(index: Any, tool_use_id: Any, name: Any, type: Any = MISSING) -> dict[str, Any]:
    """A client call's start (``type: "server_tool_use"`` makes it a provider-run tool)."""
    return block_start(index, {"toolUse": without_missing(toolUseId=tool_use_id, name=name, type=type)})


def input_delta(index: Any, text: Any) -> dict[str, Any]:
    """A piece of a call's input (``text`` :data:`MISSING`: ``toolUse: {}``)."""
    return {
        "contentBlockDelta": without_missing(delta={"toolUse": without_missing(input=text)}, contentBlockIndex=index)
    }


def text_delta(index: Any, text: str = "Let me check.") -> dict[str, Any]:
    return {"contentBlockDelta": without_missing(delta={"text": text}, contentBlockIndex=index)}


def block_stop(index: Any) -> dict[str, Any]:
    return {"contentBlockStop": without_missing(contentBlockIndex=index)}


def message_stop(stop_reason: Any = "tool_use") -> dict[str, Any]:
    return {"messageStop": without_missing(stopReason=stop_reason)}


def metadata() -> dict[str, Any]:
    usage = {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19}
    return {"metadata": {"usage": usage, "metrics": {"latencyMs": 120}}}


def exception(
    kind: str = "modelStreamErrorException", message: str = "Model produced invalid sequence"
) -> dict[str, Any]:
    """A modelled exception as botocore lowers the frame (``:exception-type`` as its key)."""
    return {kind: {"message": message}}


def tool_call(index: int, tool_use_id: Any, name: Any, *pieces: Any) -> list[dict[str, Any]]:
    """A client call whole: its start, each input piece, its stop."""
    return [tool_start(index, tool_use_id, name), *(input_delta(index, piece) for piece in pieces), block_stop(index)]


def stream(*blocks: Any, stop_reason: Any = "tool_use", text: str | None = "Let me check.") -> list[dict[str, Any]]:
    """``messageStart``, a text block at 0 (unless ``text`` is ``None``), ``blocks``, ``messageStop``, ``metadata``.

    ``stop_reason`` :data:`MISSING` leaves the end out: no ``messageStop``, no ``metadata`` (a cut stream)."""
    events: list[Any] = [message_start()]
    if text is not None:
        events += [text_delta(0, text), block_stop(0)]
    events += flatten(blocks)
    if stop_reason is not MISSING:
        events += [message_stop(stop_reason), metadata()]
    return events


def tool_use(tool_use_id: Any, name: Any, input: Any) -> dict[str, Any]:  # the wire field is called input
    """A ``toolUse`` content block of a complete body or of a request's assistant message."""
    return {"toolUse": without_missing(toolUseId=tool_use_id, name=name, input=input)}


def body(*content: Any, stop_reason: Any = "tool_use", text: str | None = "Let me check.") -> dict[str, Any]:
    """What ``converse`` returns (without botocore's ``ResponseMetadata``)."""
    blocks = ([{"text": text}] if text is not None else []) + list(content)
    usage = {"inputTokens": 12, "outputTokens": 7, "totalTokens": 19}
    return without_missing(
        output={"message": {"role": "assistant", "content": blocks}},
        stopReason=stop_reason,
        usage=usage,
        metrics={"latencyMs": 120},
    )


# --- event-stream framing ------------------------------------------------------------------------------------------

_STRING: Final = 7


def _headers(headers: Mapping[str, str]) -> bytes:
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode("utf-8"), value.encode("utf-8")
        encoded += struct.pack(">B", len(raw_name)) + raw_name + struct.pack(">BH", _STRING, len(raw_value)) + raw_value
    return encoded


def frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (lengths and their CRC-32), headers, payload, message CRC-32."""
    encoded = _headers(headers)
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def error_frame(code: str, message: str) -> bytes:
    """An unmodelled error message (``:message-type: error``), empty payload."""
    return frame({":error-code": code, ":error-message": message, ":message-type": "error"}, b"")


def _event_frame(event: Mapping[str, Any], padding: bool) -> bytes:
    ((kind, payload),) = event.items()
    members = dict(payload)
    if padding:
        members["p"] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"[: 3 + len(kind) % 30]  # Bedrock pads every payload
    data = json.dumps(members, separators=(",", ":")).encode("utf-8")
    if kind == "error" and isinstance(payload, Mapping):
        return error_frame(str(payload.get("code", "")), str(payload.get("message", "")))
    if kind.endswith("Exception"):
        headers = {":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"}
    else:
        headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, data)


def frames(events: Iterable[Mapping[str, Any]], padding: bool = True) -> bytes:
    """``events`` (dict form, one key each) as event-stream messages: an ``...Exception`` key becomes an
    exception message, ``error`` an unmodelled error, anything else an event (its payload padded with the
    member ``p``, as Bedrock's are, unless ``padding`` is false)."""
    return b"".join(_event_frame(event, padding) for event in events)
