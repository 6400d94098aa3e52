"""Calls into a :class:`~etf_otel.core._linkage.Conversation`, serialized.

The linkage rules in the core are plain data and take no lock (the core has no threads),
yet one conversation is shared by a stream consumed in one thread and a tool host
running in another. Every call the instrumentation makes into a conversation goes
through here, under one lock: they happen once per response or execution, never per
fragment, so one process-wide lock costs nothing measurable and needs no per-conversation
state.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Final

from etf_otel.core._history import Drift, shapes
from etf_otel.core._linkage import Conversation, Finding
from etf_otel.core._results import AssemblyResult

__all__ = ["LOCK", "end", "next_request", "proposed", "responded", "result", "settle"]

_LOCK: Final = threading.Lock()
LOCK: Final = _LOCK
"""The lock every call into a conversation takes (an integration reading a conversation's own state too)."""


def proposed(conversation: Conversation, call_ids: Iterable[str]) -> None:
    with _LOCK:
        conversation.proposed(call_ids)


def responded(conversation: Conversation, response: AssemblyResult) -> None:
    """A response of ``conversation`` ended: its ids (and refused ids' digests), and its proposals if dispatchable."""
    call_ids = [call.id for call in response.calls if call.id is not None]
    kept = tuple(shapes(response)) if conversation.keeps_shapes else ()
    with _LOCK:
        conversation.responded(call_ids, response.refused_ids)
        conversation.shapes = kept
        if response.dispatchable:
            conversation.proposed(call_ids)


def result(conversation: Conversation, call_id: str | None) -> Finding | None:
    with _LOCK:
        return conversation.result(call_id)


def next_request(conversation: Conversation, tool_message_ids: Sequence[str | None] | None) -> list[Finding]:
    with _LOCK:
        return conversation.next_request(tool_message_ids)


def settle(
    conversation: Conversation, tool_message_ids: Sequence[str | None] | None
) -> tuple[list[Finding], tuple[str, ...], tuple[Drift, ...]]:
    """The findings and answered ids of settling ``conversation``'s latest response, and its request's drift."""
    with _LOCK:
        return (*conversation.settle(tool_message_ids), conversation.take_drift())


def end(conversation: Conversation) -> list[Finding]:
    with _LOCK:
        return conversation.end()
