"""Calls without ids, as a tool host runs them: found by name and order in the latest response.

A protocol whose calls may have no id (Gemini 2.x and Vertex AI send none) identifies each call by
its slot, and the next request answers the k-th call named N with the k-th result named N. A tool
host handed such a call (the SDK's ``FunctionCall``, ``id`` ``None``) can be linked the same way:
the k-th execution named N in a context is the k-th id-less call named N of the latest response of
that protocol finalized in the same context (the same thread, or the same asyncio task). Its
``execute_tool`` span then links to that call's ``assemble_tool_call`` span and carries its slot, and
guard mode judges it by that call's verdict and arguments instead of refusing it as ``missing_id``.

Only responses of a protocol that links results by name and order (:attr:`WireProtocol.link`) are
noted, and only their id-less calls; a call with an id is found by its id, as always.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from opentelemetry.trace import SpanContext

from etf_otel.core._results import AssemblyResult
from etf_otel.core._vocabulary import Verdict
from etf_otel.instrumentation._registry import ProposalRecord, arguments_value_hash
from etf_otel.instrumentation._safety import internal_errors_swallowed

if TYPE_CHECKING:
    from etf_otel.instrumentation._telemetry import Telemetry

__all__ = ["PositionalCall", "note", "sharing_with_tasks", "take", "take_latest"]


@dataclass(slots=True)
class PositionalCall:
    """One id-less call of the latest response: its slot and the record a host is judged by."""

    choice: int
    index: int
    record: ProposalRecord
    taken: bool = False


@dataclass(slots=True)
class _Latest:
    telemetry: Telemetry
    calls: list[PositionalCall]
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(slots=True)
class _Shared:
    """The latest response of a context and of every task it starts inside :func:`sharing_with_tasks`."""

    latest: _Latest | None


_LATEST: Final[ContextVar[_Latest | None]] = ContextVar("etf_otel_positional_response", default=None)
_SHARED: Final[ContextVar[_Shared | None]] = ContextVar("etf_otel_positional_shared", default=None)


def _current() -> _Latest | None:
    shared = _SHARED.get()
    return shared.latest if shared is not None else _LATEST.get()


@contextmanager
def sharing_with_tasks() -> Iterator[None]:
    """Inside, a response finalized in a task this context starts is this context's latest too: for a
    framework that reads a response in one task and runs its calls in others (ADK), as
    :func:`~etf_otel.instrumentation._open_calls.sharing_with_tasks` does for calls with ids."""
    token = _SHARED.set(_Shared(_current()))
    try:
        yield
    finally:
        with internal_errors_swallowed("leaving a shared context"):  # left in another context than entered
            _SHARED.reset(token)


def note(
    telemetry: Telemetry,
    result: AssemblyResult,
    call_spans: Mapping[tuple[int, int], SpanContext],
    *,
    ids_dropped: bool = False,
) -> None:
    """A response of a protocol that links by name and order ended in this context (never raises).

    ``ids_dropped``: the client hands the application its calls without the ids the wire had (the
    ``ollama`` client's models keep none), so a host can find them only by name and order: every
    call is noted, not only the id-less ones."""
    with internal_errors_swallowed("noting a response's id-less calls"):
        calls = [
            PositionalCall(
                call.choice,
                call.index,
                ProposalRecord(
                    call_spans.get((call.choice, call.index)),
                    result.dispatchable and call.verdict is Verdict.PROPOSED,
                    call.verdict,
                    call.categories[0] if call.categories else None,
                    call.name,
                    hash(call.arguments),
                    arguments_value_hash(call.arguments) if telemetry.guarding else None,
                    call.index,
                ),
            )
            for call in result.calls
            if call.id is None or ids_dropped
        ]
        noted = _Latest(telemetry, calls) if calls else None
        _LATEST.set(noted)
        shared = _SHARED.get()
        if shared is not None:
            shared.latest = noted


def take(telemetry: Telemetry, name: str | None) -> PositionalCall | None:
    """The earliest id-less call named ``name`` of this context's latest response not run yet, now taken."""
    latest = _current()
    if latest is None or latest.telemetry is not telemetry or not name:
        return None
    with latest.lock:
        for call in latest.calls:
            if not call.taken and call.record.name == name:
                call.taken = True
                return call
    return None


def take_latest(name: str | None) -> tuple[Telemetry, PositionalCall] | None:
    """:func:`take` from this context's latest response whichever setup noted it, with that setup: a framework
    that runs id-less calls under ids of its own (ADK) has no setup of its own that read the response."""
    latest = _current()
    if latest is None:
        return None
    call = take(latest.telemetry, name)
    return (latest.telemetry, call) if call is not None else None
