"""What ``etf-otel replay`` reads: one recorded response (a stream or a complete body) and the next request.

Every way the input can be unusable ends here as a :class:`~etf_otel.errors.RecordingError`
with one line naming the file: the command prints it and exits 2.
"""

from __future__ import annotations

import dataclasses
import json

from etf_otel import protocols
from etf_otel.errors import RecordingError
from etf_otel.protocols import WireProtocol
from etf_otel.recordings import (
    STDIN,
    body_protocol,
    complete_body,
    display_name,
    later_responses,
    parse_recording,
    read_document,
    read_input,
)

__all__ = ["Recording", "load", "next_request"]


@dataclasses.dataclass(frozen=True)
class Recording:
    protocol: WireProtocol
    events: list[object]
    """The events replayed; for a complete body, the events it would have streamed as (``--html``)."""
    body: object = None
    """The complete (non-streamed) response body, when the file holds one."""


def load(source: str, name: str | None) -> Recording:
    """The recording's protocol and events; ``RecordingError`` when unusable.

    Detection looks at the first event only (a recording starts with its protocol's start
    event or chunk). A named protocol must recognize at least one event. A complete
    (non-streamed) body, on one line or pretty-printed, is judged as such. Several responses
    in a row are refused (docs/cli.md, "One response per recording").
    """
    label = display_name(source)
    data = read_input(source)
    try:
        events = list(parse_recording(data, label))
    except RecordingError:
        document = _whole_document(data)  # a pretty-printed body is no JSON lines
        if _is_traces(document):
            raise RecordingError(_traces_hint(label)) from None
        if body_protocol(document) is None:
            raise
        return _body(label, document, name)
    if not events:
        raise RecordingError(f"{label}: empty, no event to replay")
    if len(events) == 1 and body_protocol(events[0]) is not None:
        return _body(label, events[0], name)
    if name is None:
        protocol = protocols.detect(events[0]) if events else None
        if protocol is None:
            if _is_traces(events[0] if events else None):
                raise RecordingError(_traces_hint(label))
            supported = ", ".join(protocols.PROTOCOLS)
            raise RecordingError(f"{label}: not a recording of any supported protocol ({supported})")
    else:
        protocol = protocols.get(name)
        if not any(protocol.recognizes(event) for event in events):
            raise RecordingError(
                f"{label}: not a {protocol.name} recording: none of its events is one of that protocol's"
            )
    if body_protocol(events[0]) is not None:
        raise RecordingError(f"{label}: {complete_body(events[0])} followed by more events: replay reads one response")
    starts = later_responses(protocol, events)
    if starts:
        raise RecordingError(
            f"{label}: {len(starts) + 1} responses in one recording (the second starts at event {starts[0] + 1});"
            " replay reads one: split it"
        )
    return Recording(protocol, events)


def _body(label: str, document: object, name: str | None) -> Recording:
    """A complete body of its protocol (``--protocol``, when given, must be that one)."""
    found = body_protocol(document)
    assert found is not None
    description = found.complete_body(document)
    if name is not None and protocols.get(name) is not found:
        raise RecordingError(f"{label}: {description}, not a {protocols.get(name).name} response")
    events = found.body_events(document)
    if events is not None:
        return Recording(found, events, document)
    if not found.judges_bodies:
        raise RecordingError(f"{label}: {description}, not a stream: {found.name} judges streamed responses only")
    raise RecordingError(f"{label}: {description} that has not ended (a background response): nothing to judge")


def _whole_document(data: bytes) -> object:
    """``data`` as one JSON document (``None`` when it is not one)."""
    try:
        return json.loads(data.decode("utf-8").lstrip("\ufeff"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def _is_traces(document: object) -> bool:
    """Whether ``document`` is exported telemetry (OTLP JSON spans), not a recorded response."""
    if not isinstance(document, dict):
        return False
    return "resourceSpans" in document or "resourceMetrics" in document or {"traceId", "spanId"} <= document.keys()


def _traces_hint(label: str) -> str:
    path = "-" if label == display_name(STDIN) else label
    return f"{label}: exported traces (OTLP JSON), not a recorded response: check them with etf-otel audit {path}"


def next_request(source: str, protocol: WireProtocol) -> tuple[object, list[str | None]]:
    """The next request, and the call ids it answers; an id that is not a string answers nothing."""
    label = display_name(source)
    document = read_document(source)
    try:
        ids = protocol.result_ids(document)
    except (RecursionError, ValueError, TypeError, AttributeError, KeyError):
        ids = None
    if ids is None:
        raise RecordingError(f"{label}: not a {protocol.name} next request ({protocol.followup_shape})")
    return document, [call_id if isinstance(call_id, str) else None for call_id in ids]
