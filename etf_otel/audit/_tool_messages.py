"""Phase 4 of the trace checks (``etf_otel.audit._checks``): tool messages answering nothing of the response
they answer, found by the evidence the span carries, and why each is orphaned (``orphan_reason``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from etf_otel import attributes as A
from etf_otel.audit._evidence import Evidence
from etf_otel.audit._messages import scope
from etf_otel.audit._model import AuditFinding, FindingKind
from etf_otel.core._linkage import concatenated

if TYPE_CHECKING:
    from etf_otel.audit._checks import TraceIndex

__all__ = ["SEVERAL_TURN", "orphan_reason", "tool_message_findings"]

SEVERAL_TURN = "tool message: its assistant turn names a call id several spans proposed"
"""``detail`` of an ``unjudged`` tool message: the evidence points to no single response."""


def tool_message_findings(index: TraceIndex, evidence: Evidence | None = None) -> list[AuditFinding]:
    """Phase 4: tool messages answering nothing of the response they answer (each id reported once a trace).

    Which response a span's tool messages answer is decided by evidence, first match wins (the in-process
    linkage's order; the audit has no ``previous_response_id`` nor message fingerprints): the call ids of
    the span's answered turn (:func:`~etf_otel.audit._messages.scope`: the last assistant turn carrying a call
    id some span proposed) that spans of the input proposed, or else the calls of the span's own trace. An
    assistant turn naming a call id several spans proposed points to no single response: its tool messages
    are ``unjudged``, never a violation. An orphaned message says why (``orphan_reason``).
    """
    valid = {call.call_id for call in index.calls if call.call_id is not None and index.judge(call)[0] is not False}
    trace_ids = frozenset(index.by_call_id)
    orphaned: dict[str, AuditFinding] = {}
    answered: set[str] = set()
    unjudged: dict[str, AuditFinding] = {}
    for record in index.records:
        if not record.tool_messages:
            continue
        assistant_ids, read = scope(record.history, lambda call_id: _proposers(index, evidence, call_id) > 0)
        messages = [*record.told, *read]
        named = [call_id for call_id in assistant_ids if _proposers(index, evidence, call_id)]
        if any(_proposers(index, evidence, call_id) > 1 for call_id in named):
            for message_id in messages:
                unjudged.setdefault(
                    message_id,
                    AuditFinding.of(
                        FindingKind.UNJUDGED, index.trace_id, record.span_id, call_id=message_id, detail=SEVERAL_TURN
                    ),
                )
            continue
        if named:  # the proposals its assistant turn names; one of another trace is judged there
            calls, good = (
                frozenset(named),
                {call_id for call_id in named if call_id in valid or call_id not in trace_ids},
            )
        elif evidence is not None:  # no assistant turn (previous_response_id): a proposal of any trace answers,
            calls = trace_ids  # unless it is this trace's own call the rules rejected (judged here)
            good = valid | {m for m in messages if m in evidence.proposals and m not in trace_ids}
        else:
            calls, good = trace_ids, valid
        for message_id in messages:
            if message_id in good:
                answered.add(message_id)
            elif message_id not in orphaned:
                reason = orphan_reason(message_id, calls)
                orphaned[message_id] = AuditFinding.of(
                    FindingKind.ORPHANED_TOOL_MESSAGE, index.trace_id, record.span_id, call_id=message_id, reason=reason
                )
    left = [finding for message_id, finding in unjudged.items() if message_id not in answered | set(orphaned)]
    return [*orphaned.values(), *left]


def _proposers(index: TraceIndex, evidence: Evidence | None, call_id: str) -> int:
    """How many spans proposed ``call_id``: in the whole input when its evidence is known, else in the trace."""
    if evidence is not None and call_id in evidence.proposals:
        return evidence.proposers(call_id)
    return min(len(index.by_call_id.get(call_id, ())), 2)


def orphan_reason(message_id: str, calls: frozenset[str]) -> str:
    """Why a tool message answers none of the valid proposals ``calls`` holds (the audit never sees a
    refused incoming id: ``rejected_incoming_id`` comes only from what the instrumentation recorded)."""
    if concatenated(message_id, calls):
        return A.ORPHAN_CONCATENATED_IDS
    if message_id in calls:
        return A.ORPHAN_REJECTED_CALL
    return A.ORPHAN_UNKNOWN
