"""The calls the latest response of a context proposed, for executors that never see the call id.

An agent that runs its tools on an MCP server calls ``call_tool(name, arguments)``: the
preserved id the model streamed stays in the agent, and the MCP integration has to find it
again (docs/mcp.md, "Matching"). It looks among the calls of the latest response finalized
in the same context (the same thread, or the same asyncio task and the tasks it starts
afterwards): the response whose calls the agent is now executing. A context variable keeps
it, so concurrent conversations in different tasks never see each other's calls.

Tracking is off until an integration that needs it turns it on (:func:`track`): only then
is each call's canonical argument hash computed, once per call when its response ends.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from etf_otel.instrumentation._registry import ProposalRecord, arguments_value_hash, canonical_value_hash
from etf_otel.instrumentation._safety import internal_errors_swallowed

if TYPE_CHECKING:
    from etf_otel.core._results import ToolCall
    from etf_otel.instrumentation._telemetry import Telemetry

__all__ = ["LatestResponse", "OpenCall", "arguments_hash", "latest", "note", "setups", "track", "tracking", "untrack"]


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


_LATEST: Final[ContextVar[LatestResponse | None]] = ContextVar("etf_otel_latest_response", default=None)
_EMPTY_ARGUMENTS_HASH: Final = canonical_value_hash({})
_SETUPS: Final[weakref.WeakSet[Telemetry]] = weakref.WeakSet()

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


def note(telemetry: Telemetry, calls: Iterable[ToolCall]) -> None:
    """A response of ``telemetry``'s setup ended in this context with ``calls`` (only while tracked).

    Never raises: it runs while a response is reported, where nothing may reach the application.
    """
    if not _users:
        return
    with internal_errors_swallowed("noting a response's calls"):
        proposals = telemetry.proposals
        ended = tuple(
            OpenCall(call.id, call.name, arguments_value_hash(call.arguments), proposals.get(call.id))
            for call in calls
            if call.id is not None
        )
        _LATEST.set(LatestResponse(telemetry, ended))
        _SETUPS.add(telemetry)


def setups() -> list[Telemetry]:
    """Every live setup that noted a response while tracked: where a call id is looked up from a
    context that finalized no response (a framework running its tools in another task or thread)."""
    return list(_SETUPS)


def latest() -> LatestResponse | None:
    """The latest response finalized in this context while tracked, ``None`` when there is none."""
    return _LATEST.get()


def arguments_hash(arguments: object) -> int | None:
    """The canonical hash of arguments as ``call_tool`` is handed them: ``None`` sends none, the empty object."""
    if arguments is None:
        return _EMPTY_ARGUMENTS_HASH
    if isinstance(arguments, str):
        return arguments_value_hash(arguments)
    return canonical_value_hash(arguments)
