"""Raw ``application/vnd.amazon.eventstream`` bytes read with the standard library (BEDROCK.md 9.5).

The messages are written here byte by byte (:func:`etf_otel.testing.bedrock.frame`, or by hand for
broken ones); when botocore is installed its own decoder must read the same bytes to the same dicts.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest

from etf_otel.protocols._bedrock_frames import MAX_HEADERS_BYTES, decode, is_event_stream
from etf_otel.testing.bedrock import error_frame, exception, frame, frames, input_delta, message_stop, stream, tool_call

EVENT = {":event-type": "messageStop", ":content-type": "application/json", ":message-type": "event"}


def unpadded(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {kind: {m: v for m, v in payload.items() if m != "p"} for kind, payload in event.items()} for event in events
    ]


def test_frames_decode_to_the_dict_form() -> None:
    events = stream(tool_call(1, "tooluse_a", "get_weather", "", '{"city":"Paris"}'))
    decoded = decode(frames(events))
    assert unpadded(decoded) == events
    assert all("p" in payload for event in decoded for payload in event.values())  # kept: the adapter ignores it


def test_exceptions_and_error_frames_are_lowered() -> None:
    data = frames([exception("throttlingException", "slow down")]) + error_frame("InternalFailure", "boom")
    assert unpadded(decode(data)) == [
        {"throttlingException": {"message": "slow down"}},
        {"error": {"code": "InternalFailure", "message": "boom"}},
    ]
    assert decode(frame({":message-type": "error"}, b"")) == [{"error": {"code": "", "message": ""}}]


def test_an_empty_payload_is_an_empty_object() -> None:
    assert decode(frame(EVENT, b"")) == [{"messageStop": {}}]


@pytest.mark.parametrize("cut", [1, 5, 12, 20])
def test_a_message_cut_short_ends_the_input(cut: int) -> None:
    data = frames([input_delta(1, "{}"), message_stop()])
    assert unpadded(decode(data[:-cut])) == [input_delta(1, "{}")]
    assert unpadded(decode(data + data[:cut])) == [input_delta(1, "{}"), message_stop()]  # a prelude cut short too


def test_nothing_is_no_event() -> None:
    assert decode(b"") == []


def broken(data: bytes) -> str:
    *before, last = decode(data)
    assert set(last) == {"error"}
    return str(last["error"]["code"])


def test_a_checksum_mismatch_fails_and_stops_the_reading() -> None:
    good = frame(EVENT, b'{"stopReason":"tool_use"}')
    bad_message = good[:-1] + bytes([good[-1] ^ 1])
    assert broken(bad_message + good) == "ChecksumMismatch"
    assert len(decode(bad_message + good)) == 1
    bad_prelude = good[:8] + bytes([good[8] ^ 1]) + good[9:]
    assert broken(good + bad_prelude) == "ChecksumMismatch"
    assert len(decode(good + bad_prelude)) == 2


def prelude(total: int, headers: int) -> bytes:
    head = struct.pack(">II", total, headers)
    return head + struct.pack(">I", zlib.crc32(head))


def test_lengths_botocore_refuses_fail() -> None:
    assert broken(prelude(16, 1) + b"\0" * 4) == "InvalidHeadersLength"
    assert broken(prelude(MAX_HEADERS_BYTES * 4, MAX_HEADERS_BYTES + 1)) == "InvalidHeadersLength"
    assert broken(prelude(64 * 1024 * 1024, 0)) == "InvalidPayloadLength"


def sealed(headers: bytes, payload: bytes = b"{}") -> bytes:
    """A message with hand-written ``headers`` and good checksums."""
    body = prelude(12 + len(headers) + len(payload) + 4, len(headers)) + headers + payload
    return body + struct.pack(">I", zlib.crc32(body))


def header(name: str, kind: int, value: bytes) -> bytes:
    raw = name.encode()
    return struct.pack(">B", len(raw)) + raw + struct.pack(">B", kind) + value


def string(name: str, value: str) -> bytes:
    raw = value.encode()
    return header(name, 7, struct.pack(">H", len(raw)) + raw)


def test_every_header_value_type_is_read() -> None:
    others = (
        header("t", 0, b"")
        + header("f", 1, b"")
        + header("b", 2, b"\x01")
        + header("s", 3, b"\x00\x01")
        + header("i", 4, b"\x00" * 4)
        + header("l", 5, b"\x00" * 8)
        + header("raw", 6, b"\x00\x02ab")
        + header("ts", 8, b"\x00" * 8)
        + header("id", 9, b"\x00" * 16)
    )
    assert decode(sealed(string(":event-type", "metadata") + others)) == [{"metadata": {}}]


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        (string(":event-type", "metadata") + header("x", 10, b""), "InvalidHeaderValueType"),
        (string(":event-type", "metadata") + string(":event-type", "metadata"), "DuplicateHeader"),
        (string(":event-type", "metadata") + header("ts", 8, b"\x00" * 3), "InvalidHeaders"),
        (string(":event-type", "metadata") + b"\x05ab", "InvalidHeaders"),
        (string(":event-type", "metadata") + header("s", 7, b"\x00\x02\xff\xfe"), "InvalidHeaders"),
        (string(":event-type", "metadata") + b"\x02\xff\xfe\x00", "InvalidHeaders"),
        (string(":content-type", "application/json"), "InvalidEventType"),
        (string(":event-type", ""), "InvalidEventType"),
    ],
    ids=["type", "duplicate", "short-value", "short-name", "string-not-utf8", "name-not-utf8", "no-type", "empty-type"],
)
def test_broken_headers_fail(headers: bytes, code: str) -> None:
    assert broken(sealed(headers)) == code


@pytest.mark.parametrize("payload", [b"{", b"[1]", b"\xff"])
def test_a_payload_that_is_not_a_json_object_fails(payload: bytes) -> None:
    assert broken(frame(EVENT, payload)) == "InvalidPayload"


def test_the_prelude_recognises_raw_bytes() -> None:
    data = frames([message_stop()])
    assert is_event_stream(data)
    assert is_event_stream(data[:12])
    assert not is_event_stream(data[:11])
    assert not is_event_stream(b'{"messageStart": {"role": "assistant"}}\n')
    assert not is_event_stream(prelude(16, 1))


def test_botocore_reads_the_same_bytes_to_the_same_dicts() -> None:
    eventstream = pytest.importorskip("botocore.eventstream")
    data = frames(stream(tool_call(1, "tooluse_a", "f", '{"a":1}')))
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(data)
    theirs = [message.to_response_dict() for message in buffer]
    assert len(theirs) == len(decode(data))
    for message, ours in zip(theirs, decode(data), strict=True):
        assert message["status_code"] == 200
        assert message["headers"][":event-type"] == next(iter(ours))
