"""The checks of one trace (docs/cli.md): :func:`check_trace`.

:func:`check_trace` is given every :class:`SpanRecord` of one trace and every :class:`LinkProbe`
linking into it, in any order, and returns the trace's findings. It runs in phases, each on the
:class:`TraceIndex` built once for the trace; the findings come out in the order of the phases:

1. :func:`telemetry_findings`: malformed spans (and MCP SERVER spans contradicting their CLIENT
   span), and parents or link targets that never arrived;
2. :func:`execution_findings`: each execution (``etf_otel.audit._executions``: one per MCP call)
   matched to its proposal (refused, orphaned, or executing a call that was not a valid proposal);
3. :func:`call_findings`: each proposal's executions (duplicated, only failed), or the lack of any
   evidence about it (``unjudged``);
4. :func:`tool_message_findings`: tool messages answering nothing of the response their evidence names;
5. :func:`recorded_violation_findings`: what the instrumentation recorded and the audit did not find;
6. ``request_findings`` (``etf_otel.audit._responses``): what requests recorded about their histories.

Findings map to docs/categories.md categories where one exists; ``missing_span`` and
``malformed_span`` are about the telemetry itself and have no category.

Settlement evidence crosses traces. When a request settles the previous response of its
conversation, the instrumentation records on the request's ``assemble_response`` span the
proposals it answered (``etf.linkage.answered_ids``) and one ``unanswered_call`` event per
proposal it did not. That request is often a trace of its own (no application span around the
turns), so :class:`Evidence` collects both, by call id, from every span of the input before any
trace is checked. A proposal is judged only on evidence: executed (an ``execute_tool`` span),
answered (a tool message of its trace, or a settlement's ``etf.linkage.answered_ids``),
unanswered (a settlement's ``unanswered_call`` event, reported where it was recorded, as
``unanswered_call``), or else ``unjudged`` (informational).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from etf_otel.audit._evidence import DEFAULT_MAX_EVIDENCE_IDS, Evidence
from etf_otel.audit._executions import conflict_findings, executions_of, orphan_detail
from etf_otel.audit._model import AuditFinding, FindingKind, Item, LinkProbe, Role, SpanRecord
from etf_otel.audit._responses import (
    rejection_findings,
    request_findings,
    unobserved_findings,
    unobserved_llm_calls,
)
from etf_otel.audit._tool_messages import tool_message_findings
from etf_otel.core._vocabulary import ErrorCategory, StreamState, Verdict

__all__ = [
    "DEFAULT_MAX_EVIDENCE_IDS",
    "Evidence",
    "TraceIndex",
    "call_findings",
    "check_trace",
    "execution_findings",
    "index_trace",
    "recorded_violation_findings",
    "telemetry_findings",
    "tool_message_findings",
]


_UNANSWERED: str = ErrorCategory.UNANSWERED_CALL.value
_ORPHANED: str = ErrorCategory.ORPHANED_RESULT.value
_DIVERGENT: str = ErrorCategory.DIVERGENT_ASSEMBLY.value
RECORDED_UNANSWERED_DETAIL = "recorded by the instrumentation"
"""``detail`` of an ``unanswered_call`` finding: the settlement's own event is the evidence."""
UNJUDGED_DETAIL = "no execution, no settlement recorded"
"""``detail`` of an ``unjudged`` finding."""
SEVERAL_DETAIL = "call id proposed by several spans of the input"
"""``detail`` of an ``unjudged`` execution: its id cannot name one proposal."""


def _response_of_calls(calls: list[SpanRecord], responses: list[SpanRecord]) -> dict[str, SpanRecord]:
    """Each call's ``assemble_response`` span.

    ``_telemetry`` makes a call span a child of its response span. Exports of earlier
    versions had them as siblings under one parent, the calls inside the response's time
    interval: that is the fallback (the latest-started candidate wins).
    """
    by_span = {response.span_id: response for response in responses}
    by_parent: dict[str | None, list[SpanRecord]] = {}
    for response in responses:
        by_parent.setdefault(response.parent_id, []).append(response)
    out: dict[str, SpanRecord] = {}
    for call in calls:
        best = by_span.get(call.parent_id) if call.parent_id is not None else None
        if best is None:
            for response in by_parent.get(call.parent_id, ()):
                if response.start_ns <= call.start_ns and call.end_ns <= response.end_ns:
                    if best is None or response.start_ns > best.start_ns:
                        best = response
        if best is not None:
            out[call.span_id] = best
    return out


@dataclass
class TraceIndex:
    """One trace, indexed once for every phase of :func:`check_trace`."""

    trace_id: str
    records: list[SpanRecord] = field(default_factory=list)
    probes: list[LinkProbe] = field(default_factory=list)
    present: set[str] = field(default_factory=set)
    """Span ids of the trace's records."""
    calls: list[SpanRecord] = field(default_factory=list)
    """``assemble_tool_call`` records, in input order."""
    calls_by_span: dict[str, SpanRecord] = field(default_factory=dict)
    by_call_id: dict[str, list[SpanRecord]] = field(default_factory=dict)
    """Calls with a call id, by that id, earliest started first."""
    response_of: dict[str, SpanRecord] = field(default_factory=dict)
    """Each call's ``assemble_response`` record, by the call's span id."""
    first_category_of_response: dict[str, str] = field(default_factory=dict)
    """The first category of the first rejected call of each response, by the response's span id."""
    answered: set[str] = field(default_factory=set)
    """Call ids answered by a tool message anywhere in the trace."""
    unobserved: list[SpanRecord] = field(default_factory=list)
    """Other instrumentations' LLM calls with no ``assemble_response`` near them (``_responses``)."""

    def judge(self, call: SpanRecord) -> tuple[bool | None, str | None]:
        """(valid proposal?, category if not); ``None`` when the span is too incomplete to say."""
        if call.verdict is None:
            return None, None
        if call.verdict == Verdict.REJECTED.value:
            return False, (call.categories[0] if call.categories else call.error_type) or "truncated_stream"
        response = self.response_of.get(call.span_id)
        if response is not None and response.dispatchable is False:
            if response.state != StreamState.COMPLETED.value:
                return False, ErrorCategory.TRUNCATED_STREAM.value
            # A sibling's rejection, or a fragment without index that belongs to no slot.
            return False, self.first_category_of_response.get(response.span_id, ErrorCategory.MISSING_INDEX.value)
        return True, None


def copy_rank(record: SpanRecord) -> tuple[int, int, bool]:
    """Which copy of a span exported more than once counts: the one that started first, then the one that
    ended first, then a failed one; the SQL engine orders its copies the same way (sql/audit_findings.sql).
    Copies equal in all three are told apart by input order here and arbitrarily there."""
    return record.start_ns, max(record.end_ns - record.start_ns, 0), not record.failed


def index_trace(trace_id: str, items: Iterable[Item]) -> TraceIndex:
    """Phase 0: split records from probes and index proposals, responses and answered call ids."""
    index = TraceIndex(trace_id)
    probes: set[tuple[str, str, str]] = set()
    kept: dict[str, SpanRecord] = {}
    for item in items:
        if isinstance(item, LinkProbe):
            key = (item.source_trace, item.source_span, item.target_span)
            if key not in probes:
                probes.add(key)
                index.probes.append(item)
        else:
            seen = kept.get(item.span_id)
            if seen is None or copy_rank(item) < copy_rank(seen):
                kept[item.span_id] = item
    index.present.update(kept)
    index.records.extend(kept.values())
    index.calls = [record for record in index.records if record.role is Role.CALL]
    index.calls_by_span = {call.span_id: call for call in index.calls}
    responses = [record for record in index.records if record.role is Role.RESPONSE]
    index.response_of = _response_of_calls(index.calls, responses)
    for call in index.calls:
        response = index.response_of.get(call.span_id)
        if response is not None and call.categories and response.span_id not in index.first_category_of_response:
            index.first_category_of_response[response.span_id] = call.categories[0]
    for call in sorted(index.calls, key=lambda record: record.start_ns):
        if call.call_id is not None:
            index.by_call_id.setdefault(call.call_id, []).append(call)
    for record in index.records:
        index.answered.update(record.tool_messages)
    index.unobserved = unobserved_llm_calls(index.records)
    return index


def telemetry_findings(index: TraceIndex) -> list[AuditFinding]:
    """Phase 1, the telemetry itself: malformed spans, and spans that never arrived."""
    trace_id, present = index.trace_id, index.present
    findings: list[AuditFinding] = []
    missing_seen: set[str] = set()
    for record in index.records:
        for problem in record.problems:
            findings.append(
                AuditFinding.of(FindingKind.MALFORMED_SPAN, trace_id, record.span_id, detail=f"missing {problem}")
            )
        if record.parent_id is not None and record.parent_id not in present and record.parent_id not in missing_seen:
            missing_seen.add(record.parent_id)
            findings.append(
                AuditFinding.of(
                    FindingKind.MISSING_SPAN, trace_id, record.parent_id, detail=f"parent of {record.span_id}"
                )
            )
        for link_trace, link_span in record.links:
            if link_trace == trace_id and link_span not in present and link_span not in missing_seen:
                missing_seen.add(link_span)
                findings.append(
                    AuditFinding.of(
                        FindingKind.MISSING_SPAN, trace_id, link_span, detail=f"link target of {record.span_id}"
                    )
                )
    missing_probes: set[tuple[str, str]] = set()
    for probe in index.probes:
        if probe.target_span not in present and (probe.source_trace, probe.target_span) not in missing_probes:
            missing_probes.add((probe.source_trace, probe.target_span))
            findings.append(
                AuditFinding.of(
                    FindingKind.MISSING_SPAN,
                    probe.source_trace,
                    probe.target_span,
                    detail=f"link target of {probe.source_span}, in trace {trace_id}",
                )
            )
    findings += conflict_findings(trace_id, index.records)
    return findings


def _target_of(index: TraceIndex, execution: SpanRecord) -> SpanRecord | None:
    """The proposal an execution ran: its first link's span, else the latest earlier call with its call id."""
    target: SpanRecord | None = None
    if execution.links:
        target = index.calls_by_span.get(execution.links[0][1])
    if target is None and execution.call_id is not None:
        candidates = index.by_call_id.get(execution.call_id)
        if candidates:
            earlier = [call for call in candidates if call.start_ns <= execution.start_ns]
            target = earlier[-1] if earlier else candidates[0]
    return target


def _unmatched(index: TraceIndex, execution: SpanRecord, evidence: Evidence | None) -> AuditFinding | None:
    """What an execution no proposal of its trace matches is (``None``: deferred to the proposal elsewhere).

    No call id: ``unidentified_execution``. An id one span of another trace proposed: judged against it
    (:meth:`Evidence.finish`); several: ``unjudged``. Otherwise ``response_not_observed`` when the trace has
    an LLM call etf-otel did not observe, else ``orphaned_execution``."""
    trace_id, span_id, call_id = execution.trace_id, execution.span_id, execution.call_id
    if call_id is None:
        detail = orphan_detail(execution, call_id)
        return AuditFinding.of(FindingKind.UNIDENTIFIED_EXECUTION, trace_id, span_id, detail=detail)
    elsewhere = evidence.proposed_elsewhere(call_id) if evidence is not None else None
    if elsewhere is True:
        assert evidence is not None
        evidence.deferred.append(execution)
        return None
    if elsewhere is False:
        return AuditFinding.of(FindingKind.UNJUDGED, trace_id, span_id, call_id=call_id, detail=SEVERAL_DETAIL)
    if index.unobserved:
        detail = f"{len(index.unobserved)} LLM call(s) of the trace not observed"
        return AuditFinding.of(FindingKind.RESPONSE_NOT_OBSERVED, trace_id, span_id, call_id=call_id, detail=detail)
    return AuditFinding.of(FindingKind.ORPHANED_EXECUTION, trace_id, span_id, call_id=call_id)


def execution_findings(
    index: TraceIndex, evidence: Evidence | None = None
) -> tuple[list[AuditFinding], dict[str, list[SpanRecord]]]:
    """Phase 2: every execution matched to its proposal; also returns the executions of each call's span."""
    findings: list[AuditFinding] = []
    executed: dict[str, list[SpanRecord]] = {}
    for execution in executions_of(index.trace_id, index.records, index.probes):
        target = _target_of(index, execution)
        call_id = execution.call_id or (target.call_id if target is not None else None)
        trace_id, span_id = execution.trace_id, execution.span_id
        if execution.refused:
            refusal = execution.error_type or ErrorCategory.ORPHANED_RESULT.value
            findings.append(
                AuditFinding.of(FindingKind.REFUSED_EXECUTION, trace_id, span_id, category=refusal, call_id=call_id)
            )
            continue
        if target is None and execution.links and execution.links[0][1] not in index.present:
            continue  # its proposal's span never arrived: reported as missing_span, cannot be judged
        if target is None:
            unmatched = _unmatched(index, execution, evidence)
            if unmatched is not None:
                findings.append(unmatched)
            continue
        valid, category = index.judge(target)
        if valid is False:
            findings.append(
                AuditFinding.of(FindingKind.EXECUTED_REJECTED, trace_id, span_id, category=category, call_id=call_id)
            )
        executed.setdefault(target.span_id, []).append(execution)
    return findings, executed


def call_findings(
    index: TraceIndex, executed: dict[str, list[SpanRecord]], evidence: Evidence | None = None
) -> list[AuditFinding]:
    """Phase 3: each proposal executed more than once, only with host errors, or judged on no evidence.

    A valid proposal that was never executed is answered by a tool message of the trace or a
    settlement's ``etf.linkage.answered_ids``; if a settlement recorded it unanswered, that event
    is the finding (:func:`recorded_violation_findings`); with neither it is ``unjudged``.
    """
    if evidence is None:
        evidence = Evidence()
        for record in index.records:
            evidence.add_events(record)
    findings: list[AuditFinding] = []
    for call in index.calls:
        runs = executed.get(call.span_id, [])
        for extra in runs[1:]:
            findings.append(
                AuditFinding.of(
                    FindingKind.DUPLICATE_EXECUTION,
                    extra.trace_id,
                    extra.span_id,
                    call_id=call.call_id,
                    detail=f"{len(runs)} executions",
                )
            )
        call_id = call.call_id
        settled = (call_id is not None and call_id in index.answered) or evidence.settles(call)
        elsewhere = call_id is not None and evidence.executed_elsewhere(call)
        if elsewhere and call_id is not None:
            evidence.judged[call_id] = index.judge(call)
        if not runs:
            if not settled and index.judge(call)[0] is True:
                unjudged = AuditFinding.of(
                    FindingKind.UNJUDGED, index.trace_id, call.span_id, call_id=call_id, detail=UNJUDGED_DETAIL
                )
                if elsewhere and call_id is not None:  # reported only if no execution of another trace ran it
                    evidence.held[call_id] = unjudged
                else:
                    findings.append(unjudged)
        elif all(run.error_type is not None for run in runs) and not settled:
            findings.append(
                AuditFinding.of(
                    FindingKind.EXECUTION_WITHOUT_RESULT,
                    runs[-1].trace_id,
                    runs[-1].span_id,
                    call_id=call_id,
                    detail=f"error.type {runs[-1].error_type}",
                )
            )
    return findings


def recorded_violation_findings(index: TraceIndex, found: list[AuditFinding]) -> list[AuditFinding]:
    """Phase 5: what the instrumentation already recorded, unless ``found`` has the same thing.

    An ``unanswered_call`` event naming a call is a settlement's evidence: it is reported as
    ``unanswered_call`` (on the span that recorded it), every other event as ``recorded_violation``."""
    by_span = {(finding.category, finding.span_id) for finding in found}
    by_call = {(finding.category, finding.call_id) for finding in found if finding.call_id is not None}
    findings: list[AuditFinding] = []
    for record in index.records:
        for category, call_id, reason in record.violations:
            if (category, record.span_id) in by_span or (call_id is not None and (category, call_id) in by_call):
                continue
            if category == _UNANSWERED and call_id is not None:  # a settlement's evidence: the finding itself
                finding = AuditFinding.of(
                    FindingKind.UNANSWERED_CALL,
                    index.trace_id,
                    record.span_id,
                    call_id=call_id,
                    detail=RECORDED_UNANSWERED_DETAIL,
                )
            else:
                finding = AuditFinding.of(
                    FindingKind.RECORDED_VIOLATION,
                    index.trace_id,
                    record.span_id,
                    category=category,
                    call_id=call_id,
                    reason=reason if category == _ORPHANED else None,
                    divergence=reason if category == _DIVERGENT else None,
                )
            findings.append(finding)
    return findings


def check_trace(trace_id: str, items: Iterable[Item], evidence: Evidence | None = None) -> list[AuditFinding]:
    """All findings of one trace, given every record of it and every probe linking into it.

    ``evidence`` is the settlement evidence of the whole input (``audit_spans`` collects it);
    without it only the trace's own ``unanswered_call`` events count as settlements."""
    index = index_trace(trace_id, items)
    findings = telemetry_findings(index)
    executions, executed = execution_findings(index, evidence)
    findings += executions
    findings += rejection_findings(index.trace_id, index.records, index.response_of, index.first_category_of_response)
    findings += unobserved_findings(index.trace_id, index.unobserved)
    findings += call_findings(index, executed, evidence)
    findings += tool_message_findings(index, evidence)
    findings += recorded_violation_findings(index, findings)
    findings += request_findings(index.trace_id, index.records)
    return findings
