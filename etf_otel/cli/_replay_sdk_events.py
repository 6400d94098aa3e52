"""The events each SDK hands its own assembler, built from a recording as the SDK builds them.

``etf-otel replay --assembler NAME`` feeds a library's assembler what that library's stream would
hand it: typed events built as its SSE decoder builds them, nothing after the point where its
transport stops (``[DONE]``, an ``error`` event) or raises.
"""

from __future__ import annotations

from collections.abc import Iterable

from etf_otel import protocols
from etf_otel.protocols._chat_completions import DONE

__all__ = ["sdk_chunks", "sdk_message_events", "sdk_response_events", "until_done"]


def sdk_chunks(chunks: Iterable[object]) -> list[object]:
    """The chunks the ``openai`` SDK would hand on: built like its SSE decoder, none after ``[DONE]``."""
    from openai.types.chat import ChatCompletionChunk

    out: list[object] = []
    for chunk in chunks:
        if chunk == DONE:
            break
        if isinstance(chunk, dict):
            out.append(ChatCompletionChunk.construct(**chunk))
        elif not isinstance(chunk, str):
            out.append(chunk)
    return out


def until_done(chunks: Iterable[object]) -> list[object]:
    out: list[object] = []
    for chunk in chunks:
        if chunk == DONE:
            break
        out.append(chunk)
    return out


def sdk_response_events(events: Iterable[object]) -> list[object]:
    """The events the ``openai`` SDK's Responses stream hands its state: built like its SSE decoder does."""
    from openai._models import construct_type
    from openai.types.responses import ResponseStreamEvent

    out: list[object] = []
    for event in events:
        if event == DONE:
            break
        if isinstance(event, dict):
            out.append(construct_type(type_=ResponseStreamEvent, value=event))
        elif not isinstance(event, str):
            out.append(event)
    return out


def sdk_message_events(events: Iterable[object]) -> list[object]:
    """The events the ``anthropic`` SDK's stream hands ``MessageStream``: ``ping`` dropped, none from ``error`` on."""
    from anthropic._models import construct_type
    from anthropic.types import RawMessageStreamEvent

    out: list[object] = []
    for event in events:
        kind = protocols.field(event, "type") if event is not None and not isinstance(event, str) else None
        if kind == "error":
            break  # the SDK's transport raises APIStatusError here: the accumulator never sees it
        if kind == "ping":
            continue
        if isinstance(event, dict):
            out.append(construct_type(type_=RawMessageStreamEvent, value=event))
        elif not isinstance(event, str):
            out.append(event)
    return out
