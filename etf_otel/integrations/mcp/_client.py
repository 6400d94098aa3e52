"""The agent's side of MCP: a ``call_tool`` carries the id of the proposal it executes (docs/mcp.md).

``ClientSession.call_tool(name, arguments)`` names no call id, so the call is matched to a
proposal of the latest response finalized in the same context
(:mod:`etf_otel.instrumentation._open_calls`):

* ``explicit``: the application said which call it executes (:func:`proposed_call`,
  :func:`call_proposed_tool`, or our ``_meta`` key passed by hand);
* ``unique``: exactly one dispatchable proposal has that tool name and canonically equal
  arguments (the JSON values compared, as the guard compares them);
* ``ambiguous``: several do: no id is sent, since any choice could pin the execution on the
  wrong proposal;
* ``unmatched``: none does.

A matched call sends the preserved id and the proposal's span (a W3C ``traceparent``) in
``params._meta`` under our keys, beside whatever ``meta`` the application passed. The SDK's
own CLIENT span (``MCP send tools/call {name}``) gets ``etf.mcp.match``, and for a matched call
``gen_ai.tool.call.id``, ``gen_ai.tool.name`` and a link to the proposal; it is enriched where
the SDK injects the trace context, the one moment its span is current and the ``_meta`` it
sends is built. In guard mode a call that is not a valid proposal is refused here, before
anything is sent, as a tool host's guard refuses it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from etf_otel import attributes as A
from etf_otel.core._linkage import Finding
from etf_otel.core._vocabulary import ErrorCategory, Phase
from etf_otel.instrumentation import _open_calls as open_calls
from etf_otel.instrumentation._host import call_fields
from etf_otel.instrumentation._registry import ProposalRecord
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._span_attributes import put_call_id, put_tool_name
from etf_otel.instrumentation._telemetry import Telemetry
from etf_otel.integrations.mcp._meta import format_proposal, parse_call_id

__all__ = ["Match", "call_proposed_tool", "match_call", "proposed_call"]

EXPLICIT, UNIQUE, AMBIGUOUS, UNMATCHED = A.MCP_MATCH_VALUES

_EXPLICIT_ID: Final[ContextVar[str | None]] = ContextVar("etf_otel_mcp_call_id", default=None)
_OUTBOUND: Final[ContextVar[_Outbound | None]] = ContextVar("etf_otel_mcp_outbound", default=None)
_CLIENT_SPAN_PREFIX: Final = f"MCP send {A.MCP_METHOD_TOOLS_CALL}"


@contextmanager
def proposed_call(call_id: str) -> Iterator[None]:
    """Every ``call_tool`` inside the block executes the proposal ``call_id`` (``explicit``)."""
    token = _EXPLICIT_ID.set(call_id)
    try:
        yield
    finally:
        _EXPLICIT_ID.reset(token)


async def call_proposed_tool(session: Any, call: Any, **kwargs: Any) -> Any:
    """``session.call_tool`` for one proposed call, as the application holds it.

    ``call`` is a :class:`~etf_otel.ToolCall`, an OpenAI tool-call dict or object, a Responses
    ``function_call`` item or an Anthropic ``tool_use`` block. Its arguments text is parsed as
    JSON (an MCP server takes an object); text that does not parse raises ``ValueError`` before
    anything is sent. ``kwargs`` go to ``call_tool``.
    """
    call_id, name, arguments = call_fields(call)
    if isinstance(arguments, str):
        arguments = json.loads(arguments) if arguments.strip() else None
    if call_id is None:
        return await session.call_tool(name, arguments, **kwargs)
    with proposed_call(call_id):
        return await session.call_tool(name, arguments, **kwargs)


@dataclass(frozen=True, slots=True)
class Match:
    """How one ``call_tool`` was matched to a proposal, and what the guard says of it."""

    kind: str
    call_id: str | None = None
    record: ProposalRecord | None = None
    telemetry: Telemetry | None = None
    refusal: ErrorCategory | None = None
    refused_index: int | None = None
    """The index in its response of the refused proposal the call repeats (for the refusal's message)."""


@dataclass(slots=True)
class _Outbound:
    """The match of the ``call_tool`` in progress, until the SDK's CLIENT span takes it."""

    match: Match
    name: str | None
    used: bool = field(default=False)


def _explicit_id(meta: object) -> tuple[bool, str | None]:
    """Whether the application named the call, and its id when that parses as the server would parse it.

    An id the application put in ``meta`` by hand wins over :func:`proposed_call` and is sent
    as it is, even when it does not parse (the server then says so).
    """
    if isinstance(meta, Mapping) and A.MCP_META_TOOL_CALL_ID in meta:
        return True, parse_call_id(meta[A.MCP_META_TOOL_CALL_ID])[0]
    explicit = _EXPLICIT_ID.get()
    if explicit is None:
        return False, None
    return True, parse_call_id(explicit)[0]


def _explicit_refusal(
    call_id: str,
    record: ProposalRecord | None,
    name: object,
    arguments: object,
    latest: open_calls.LatestResponse | None,
) -> ErrorCategory | None:
    """A tool host's guard on an explicit id: proposed, dispatchable, same name and argument value."""
    if record is None:
        return ErrorCategory.ORPHANED_RESULT
    if not record.dispatchable:
        return record.first_category or ErrorCategory.TRUNCATED_STREAM
    calls = latest.calls if latest is not None else ()
    proposed = next((call.value_hash for call in calls if call.call_id == call_id), record.value_hash)
    handed = open_calls.arguments_hash(arguments)
    if name != record.name or proposed is None or handed != proposed:  # unknown hash: fail closed
        return ErrorCategory.DIVERGENT_ASSEMBLY
    return None


def match_call(
    name: object, arguments: object, meta: object = None, *, guard: bool = False, telemetry: Telemetry | None = None
) -> Match:
    """Match a ``call_tool(name, arguments, meta=meta)`` in this context; ``guard`` decides its refusal.

    An explicit id is looked up in the proposals of the context's latest response's setup, else of
    ``telemetry`` (the instrumentor's own): a call named from a thread or task that finalized no
    response (a worker) is still the proposal its setup remembers.
    """
    latest = open_calls.latest()
    named, explicit = _explicit_id(meta)
    if named and explicit is None:  # named, but no id the server would take: nothing to match or link
        return Match(UNMATCHED, refusal=ErrorCategory.MISSING_ID if guard else None)
    if explicit is not None:
        setup = latest.telemetry if latest is not None else telemetry
        record = setup.proposals.get(explicit) if setup is not None else None
        refusal = _explicit_refusal(explicit, record, name, arguments, latest) if guard else None
        return Match(EXPLICIT, explicit, record, setup, refusal)
    if latest is None:
        return Match(UNMATCHED, refusal=ErrorCategory.ORPHANED_RESULT if guard else None)
    handed = open_calls.arguments_hash(arguments)
    registry = latest.telemetry.proposals
    same = [
        (call.call_id, registry.get(call.call_id))
        for call in latest.calls
        if call.name == name and handed is not None and call.value_hash == handed
    ]
    valid = [(call_id, record) for call_id, record in same if record is not None and record.dispatchable]
    if len(valid) == 1:
        return Match(UNIQUE, valid[0][0], valid[0][1], latest.telemetry)
    if valid:
        return Match(AMBIGUOUS, telemetry=latest.telemetry)
    refusal = index = None
    if guard:  # the category of a refused proposal it repeats, else no proposal at all
        refused = [record for _, record in same if record is not None]
        refusal = (refused[0].first_category or ErrorCategory.TRUNCATED_STREAM) if refused else None
        index = refused[0].call_index if refused else None
        refusal = refusal or ErrorCategory.ORPHANED_RESULT
    return Match(UNMATCHED, telemetry=latest.telemetry, refusal=refusal, refused_index=index)


def outgoing_meta(match: Match, meta: object) -> object:
    """The ``meta`` to send: the application's, plus our keys for a matched call (never changed in place)."""
    if match.call_id is None or not (meta is None or isinstance(meta, Mapping)):
        return meta
    merged: dict[str, Any] = dict(meta or {})
    merged.setdefault(A.MCP_META_TOOL_CALL_ID, match.call_id)
    span_context = match.record.span_context if match.record is not None else None
    if span_context is not None and span_context.is_valid:
        traceparent = format_proposal(span_context)
        if traceparent is not None:
            merged.setdefault(A.MCP_META_PROPOSAL, traceparent)
    return merged


@contextmanager
def outbound(match: Match, name: object) -> Iterator[None]:
    """The SDK's CLIENT span opened for the ``call_tool(name, ...)`` inside the block takes ``match``."""
    token = _OUTBOUND.set(_Outbound(match, name if isinstance(name, str) else None))
    try:
        yield
    finally:
        _OUTBOUND.reset(token)


def inject_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``inject_trace_context(out_meta)`` inside the SDK's CLIENT span: the span learns its match."""
    result = wrapped(*args, **kwargs)
    with internal_errors_swallowed("enriching an MCP call"):
        pending = _OUTBOUND.get()
        if pending is not None and not pending.used:
            span = trace.get_current_span()
            name = getattr(span, "name", None)  # the SDK span's name; API-only spans have none
            if name is None or (isinstance(name, str) and name.startswith(_CLIENT_SPAN_PREFIX)):
                pending.used = True
                _enrich_client_span(span, pending.match, pending.name)
    return result


def _enrich_client_span(span: trace.Span, match: Match, name: str | None) -> None:
    """The span names only an id this process assembled, as a tool host's ``execute_tool`` does: an
    explicit id no proposal has (perhaps one the rules rejected) still goes out in ``_meta``, where the
    server's opt-in records it, but here it is ``unmatched`` with no id."""
    if not span.is_recording():
        return
    if match.record is None and match.call_id is not None:
        match = Match(UNMATCHED, refusal=match.refusal)
    attributes: dict[str, AttributeValue] = {A.ETF_MCP_MATCH: match.kind}
    if match.call_id is not None:
        put_call_id(attributes, match.call_id)
        if name:
            put_tool_name(attributes, name)
    span.set_attributes(attributes)
    if match.record is not None and match.record.span_context is not None:
        span.add_link(match.record.span_context)


def record_refusal(telemetry: Telemetry, match: Match, name: str | None) -> None:
    """A refused ``call_tool`` as a tool host's guard records one: an ``execute_tool`` span, refused.

    Nothing reached a server, so there is no SDK span this could double.
    """
    with internal_errors_swallowed("recording a refused MCP call"):
        refusal = match.refusal
        if refusal is None:
            return
        span = telemetry.start_execution(match.call_id, name, match.record, False)
        try:
            span.set_attribute(A.ETF_GUARD_REFUSED, True)
            if refusal.phase is Phase.LINKAGE:
                telemetry.record_findings([Finding(refusal)], span)
        finally:
            telemetry.end_execution(span, name, time.perf_counter(), None, error_type=refusal.value)
