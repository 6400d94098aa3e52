"""The calls the latest response of a context proposed, for executors that never see the call id.

An agent that runs its tools on an MCP server calls ``call_tool(name, arguments)``: the
preserved id the model streamed stays in the agent, and the MCP integration has to find it
again (docs/mcp.md, "Matching"). It looks among the calls of the latest response finalized
in the same context (the same thread, or the same asyncio task and the tasks it starts
afterwards): the response whose calls the agent is now executing. A context variable keeps
it, so concurrent conversations in different tasks never see each other's calls. A framework
that reads each response in a task of its own shares what those tasks finalize with the context
that started them (:func:`sharing_with_tasks`).

Tracking is off until an integration that needs it turns it on (:func:`track`): only then
is each call's canonical argument hash computed, once per call when its response ends.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from etf_otel.instrumentation._registry import ProposalRecord, arguments_value_hash, canonical_value_hash
from etf_otel.instrumentation._safety import internal_errors_swallowed

if TYPE_CHECKING:
    from etf_otel.core._results import ToolCall
    from etf_otel.instrumentation._telemetry import Telemetry

__all__ = [
    "LatestResponse",
    "OpenCall",
    "arguments_hash",
    "latest",
    "note",
    "setups",
    "sharing_with_tasks",
    "track",
    "tracking",
    "untrack",
]


@dataclass(frozen=True, slots=True)
class OpenCall:
    """One call of a finalized response: its preserved id, name and canonical argument hash."""

    call_id: str
    name: str | None
    value_hash: int | None
    record: ProposalRecord | None = None
    """Its record as its response registered it: the setup's registry keeps one per id, the latest,
    which is another conversation's when concurrent conversations were proposed the same ids."""


@dataclass(frozen=True, slots=True)
class LatestResponse:
    """The latest response finalized in a context, and the setup whose registry holds its records."""

    telemetry: Telemetry
    calls: tuple[OpenCall, ...]


@dataclass(slots=True)
class _Shared:
    """The latest response of a context and of every task it starts inside :func:`sharing_with_tasks`."""

    latest: LatestResponse | None


_LATEST: Final[ContextVar[LatestResponse | None]] = ContextVar("etf_otel_latest_response", default=None)
_SHARED: Final[ContextVar[_Shared | None]] = ContextVar("etf_otel_shared_latest_response", default=None)
_EMPTY_ARGUMENTS_HASH: Final = canonical_value_hash({})
_SETUPS: Final[weakref.WeakKeyDictionary[Telemetry, None]] = weakref.WeakKeyDictionary()
"""Every live setup that noted a response while tracked, the one that noted last at the end."""
_setups_lock = threading.Lock()

_users = 0
_users_lock = threading.Lock()


def track() -> None:
    """One more integration needs the calls of each context's latest response."""
    global _users
    with _users_lock:
        _users += 1


def untrack() -> None:
    global _users
    with _users_lock:
        _users = max(0, _users - 1)


def tracking() -> bool:
    return _users > 0


def _open_call(call_id: str, call: ToolCall, record: ProposalRecord | None) -> OpenCall:
    """The call as noted; its argument hash is the one its record computed while tracked, never a second parse."""
    value_hash = record.value_hash if record is not None else None
    if value_hash is None:
        value_hash = arguments_value_hash(call.arguments)
    return OpenCall(call_id, call.name, value_hash, record)


def note(telemetry: Telemetry, calls: Iterable[ToolCall], records: Mapping[str, ProposalRecord]) -> None:
    """A response of ``telemetry``'s setup ended in this context with ``calls`` and their ``records``
    (what it registered; only while tracked).

    Never raises: it runs while a response is reported, where nothing may reach the application.
    """
    if not _users:
        return
    with internal_errors_swallowed("noting a response's calls"):
        ended = tuple(_open_call(call.id, call, records.get(call.id)) for call in calls if call.id is not None)
        noted = LatestResponse(telemetry, ended)
        _LATEST.set(noted)
        shared = _SHARED.get()
        if shared is not None:
            shared.latest = noted
        with _setups_lock:
            _SETUPS.pop(telemetry, None)
            _SETUPS[telemetry] = None


def setups() -> list[Telemetry]:
    """Every live setup that noted a response while tracked: where a call id is looked up from a
    context that finalized no response (a framework running its tools in another task or thread).

    The setup that noted a response last comes first: an id two setups proposed (an earlier
    setup still alive, a reused id) is the latest proposal's."""
    with _setups_lock:
        return list(reversed(list(_SETUPS)))


def latest() -> LatestResponse | None:
    """The latest response finalized in this context while tracked, ``None`` when there is none."""
    shared = _SHARED.get()
    return shared.latest if shared is not None else _LATEST.get()


@contextmanager
def sharing_with_tasks() -> Iterator[None]:
    """Inside, a response finalized in a task this context starts is this context's latest too.

    For a framework that reads each model response in a task of its own and runs the tools in
    another (pydantic-ai runs each step of an agent run in a task): entered in the context that
    drives the run, around it. Tasks started before keep what they had; a task that enters it
    shares with its own tasks only. On leaving, the context sees what it saw before.
    """
    token = _SHARED.set(_Shared(latest()))
    try:
        yield
    finally:
        with internal_errors_swallowed("leaving a shared context"):  # left in another context than entered
            _SHARED.reset(token)


def arguments_hash(arguments: object) -> int | None:
    """The canonical hash of arguments as ``call_tool`` is handed them: ``None`` sends none, the empty object."""
    if arguments is None:
        return _EMPTY_ARGUMENTS_HASH
    if isinstance(arguments, str):
        return arguments_value_hash(arguments)
    return canonical_value_hash(arguments)
