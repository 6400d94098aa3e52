"""Responses as the audit judges them on their own: rejected ones, and LLM calls etf-otel did not observe.

* :func:`rejection_findings`: every ``assemble_response`` span with tool calls that the rules
  made non-dispatchable (``etf.stream.dispatchable = false``) is a ``recorded_rejection``, executed
  or not: the SDK handed the application what it assembled, and it may have acted on it. Its category is the one that
  blocked it, as for its calls' executions (``TraceIndex.judge``): ``truncated_stream`` for a response that
  did not complete, else the first category of its first rejected call, else ``missing_index``.
* :func:`unobserved_llm_calls`: another instrumentation's LLM span (``_foreign.is_llm_call``) is observed when
  an ``assemble_response`` span is its child or grandchild, its parent, or its sibling; otherwise it is an
  ``unobserved_llm_call`` (informational), and executions of its trace that no observed response proposed are
  ``response_not_observed`` rather than ``orphaned_execution``.
* :func:`request_findings`: what the instrumentation recorded about a request's history on its span
  (``etf_otel.audit._request``): one ``history_drift`` per ``etf.linkage.drift`` event (informational unless
  the audit is strict), its kind as ``detail`` and ``divergence``, the call id only when the event names one;
  one ``request_pairing`` per span whose request the provider's pairing rules refuse (or a refusal the
  instrumentation did not predict). Pairing problems are findings of their own, with no error category:
  their vocabulary (``etf.request.pairing_problems``) is not the categories', and one request has several.
"""

from __future__ import annotations

from etf_otel.audit._model import AuditFinding, FindingKind, Role, SpanRecord
from etf_otel.core._vocabulary import ErrorCategory, StreamState

__all__ = [
    "UNOBSERVED_DETAIL",
    "rejection_findings",
    "request_findings",
    "unobserved_findings",
    "unobserved_llm_calls",
]

UNOBSERVED_DETAIL = "no assemble_response under or beside it"
"""``detail`` of an ``unobserved_llm_call`` finding."""


def _blocking_category(response: SpanRecord, first_category: dict[str, str]) -> str:
    if response.state != StreamState.COMPLETED.value:
        return ErrorCategory.TRUNCATED_STREAM.value
    return first_category.get(response.span_id, ErrorCategory.MISSING_INDEX.value)


def rejection_findings(
    trace_id: str,
    records: list[SpanRecord],
    response_of: dict[str, SpanRecord],
    first_category: dict[str, str],
) -> list[AuditFinding]:
    """One ``recorded_rejection`` per non-dispatchable response, on its span; ``detail`` lists its calls' categories."""
    categories: dict[str, set[str]] = {}
    for record in records:
        response = response_of.get(record.span_id) if record.role is Role.CALL else None
        if response is not None and record.verdict is not None:
            categories.setdefault(response.span_id, set()).update(record.categories)
    findings: list[AuditFinding] = []
    for record in records:
        # a response with no judged call (text only) proposed nothing the rules could reject
        if record.role is Role.RESPONSE and record.dispatchable is False and record.span_id in categories:
            listed = sorted(categories.get(record.span_id, ()))
            findings.append(
                AuditFinding.of(
                    FindingKind.RECORDED_REJECTION,
                    trace_id,
                    record.span_id,
                    category=_blocking_category(record, first_category),
                    detail=f"calls: {', '.join(listed)}" if listed else None,
                )
            )
    return findings


def unobserved_llm_calls(records: list[SpanRecord]) -> list[SpanRecord]:
    """The trace's LLM spans of other instrumentations with no ``assemble_response`` near them."""
    llm_calls = [record for record in records if record.role is Role.LLM]
    if not llm_calls:
        return []
    parent_of = {record.span_id: record.parent_id for record in records}
    responses = [record for record in records if record.role is Role.RESPONSE]
    ids = {response.span_id for response in responses}  # an LLM span inside a response
    parents = {response.parent_id for response in responses if response.parent_id is not None}  # beside one
    above = set(parents)  # a response inside the LLM span, one or two levels down
    for parent in parents:
        grandparent = parent_of.get(parent)
        if grandparent is not None:
            above.add(grandparent)
    return [
        call
        for call in llm_calls
        if call.span_id not in above
        and not (call.parent_id is not None and (call.parent_id in ids or call.parent_id in parents))
    ]


def unobserved_findings(trace_id: str, unobserved: list[SpanRecord]) -> list[AuditFinding]:
    """One informational ``unobserved_llm_call`` per LLM span etf-otel did not observe."""
    return [
        AuditFinding.of(FindingKind.UNOBSERVED_LLM_CALL, trace_id, call.span_id, detail=UNOBSERVED_DETAIL)
        for call in unobserved
    ]


def request_findings(trace_id: str, records: list[SpanRecord]) -> list[AuditFinding]:
    """What the requests of the trace recorded about their histories: one ``history_drift`` per drift event,
    one ``request_pairing`` per broken or unexplained refused request."""
    findings: list[AuditFinding] = []
    for record in records:
        if record.pairing is not None:
            detail = record.pairing.detail
            findings.append(AuditFinding.of(FindingKind.REQUEST_PAIRING, trace_id, record.span_id, detail=detail))
        for kind, call_id in record.drifts:
            findings.append(
                AuditFinding.of(
                    FindingKind.HISTORY_DRIFT, trace_id, record.span_id, call_id=call_id, detail=kind, divergence=kind
                )
            )
    return findings
