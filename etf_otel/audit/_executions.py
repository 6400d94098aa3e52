"""Which spans of a trace are executions, across a process boundary (docs/cli.md#executions-in-mcp-tool-servers).

A tool that runs in an MCP server leaves two spans for one execution: the ``mcp`` SDK's CLIENT
span of the ``tools/call`` in the agent and, when the server runs the SDK's middleware, its
SERVER span (``gen_ai.operation.name = execute_tool``), a child of the CLIENT span through the
trace context of ``_meta``. Exactly one of them is the execution:

* the SERVER span whenever it arrived: it ran the tool. Its call id is its own
  ``gen_ai.tool.call.id`` (read by our server instrumentation from ``_meta``), else its CLIENT
  parent's; with no link of its own it takes its parent's link too. When both carry a call id and
  they differ, the span's own is the one judged, and the disagreement is reported
  (:func:`conflict_findings`);
* the CLIENT span (:attr:`Role.REMOTE_CALL`) only when no execution span is its child in the
  trace it is judged in: a server without tracing, or whose spans were not exported. A SERVER
  span that takes its parent's link into another trace is judged there through the CLIENT span,
  since only the CLIENT span's link sends it there (``model.items_of`` works span by span).

Span kind is not needed: the SDK sets ``gen_ai.operation.name`` on its SERVER span only, and no
source (Phoenix, the ClickHouse rows) loses attributes, while several lose the kind.
"""

from __future__ import annotations

from dataclasses import replace

from etf_otel import attributes as A
from etf_otel.audit._model import AuditFinding, FindingKind, LinkProbe, Role, SpanRecord

__all__ = ["NO_ID_DETAIL", "conflict_findings", "executions_of", "orphan_detail"]

NO_ID_DETAIL = "no gen_ai.tool.call.id and no link"
"""``detail`` of an ``orphaned_execution`` that names no proposal at all."""
CONFLICT_DETAIL = "gen_ai.tool.call.id differs from its tools/call CLIENT span's"
"""``detail`` of the ``malformed_span`` of a SERVER span contradicting its CLIENT span. The CLIENT
span's id is not repeated: nothing says it was ever proposed, and the report names only
preserved ids and the id the finding's span carries."""


def orphan_detail(execution: SpanRecord, call_id: str | None) -> str | None:
    """Why an orphaned execution names nothing: no id, how its CLIENT span failed to match it, and
    why its server did not use the ``_meta`` it got."""
    if call_id:
        return None
    reasons: list[str] = []
    if execution.match is not None:
        reasons.append(f"{A.ETF_MCP_MATCH} {execution.match}")
    if execution.meta_rejected:
        reasons.append(f"{A.ETF_MCP_META_REJECTED} {','.join(execution.meta_rejected)}")
    return f"{NO_ID_DETAIL} ({'; '.join(reasons)})" if reasons else NO_ID_DETAIL


def _linked_elsewhere(record: SpanRecord, trace_id: str) -> bool:
    return bool(record.links) and record.links[0][0] != trace_id


def _resolved(execution: SpanRecord, client: SpanRecord) -> SpanRecord:
    """A SERVER execution completed by its CLIENT parent: the parent's id and link when it has none."""
    return replace(
        execution,
        call_id=execution.call_id or client.call_id,
        links=execution.links or client.links,
        match=client.match,
    )


def _same_call(inner: SpanRecord, outer: SpanRecord) -> bool:
    return inner.call_id is None or outer.call_id is None or inner.call_id == outer.call_id


def _nested(records: list[SpanRecord]) -> dict[tuple[str, str], SpanRecord]:
    """Execution spans with an execution child of the same call (a framework's span around ours), by trace and
    span id: one execution, recorded twice; the inner span is the one judged."""
    executions = {(record.trace_id, record.span_id): record for record in records if record.role is Role.EXECUTION}
    outer: dict[tuple[str, str], SpanRecord] = {}
    for record in executions.values():
        parent = executions.get((record.trace_id, record.parent_id)) if record.parent_id is not None else None
        if parent is not None and parent is not record and _same_call(record, parent):  # no span is its own parent
            outer[(parent.trace_id, parent.span_id)] = parent
    return outer


def _judged(records: list[SpanRecord], outer: dict[tuple[str, str], SpanRecord]) -> list[SpanRecord]:
    """``records`` without the outer spans of nested executions, each inner one completed by its outer one."""
    judged: list[SpanRecord] = []
    for record in records:
        if (record.trace_id, record.span_id) in outer:
            continue
        parent = outer.get((record.trace_id, record.parent_id)) if record.parent_id is not None else None
        judged.append(_completed(record, parent) if parent is not None else record)
    return judged


def _completed(inner: SpanRecord, outer: SpanRecord) -> SpanRecord:
    """The inner span of a nested execution, with its parent's call id, link and error when it has none."""
    return replace(
        inner,
        call_id=inner.call_id or outer.call_id,
        links=inner.links or outer.links,
        error_type=inner.error_type or outer.error_type,
        refused=inner.refused or outer.refused,
    )


def executions_of(trace_id: str, records: list[SpanRecord], probes: list[LinkProbe]) -> list[SpanRecord]:
    """The executions judged with ``trace_id``, earliest first: its own (unless their first link
    points into another trace, where they are judged) and those linking in, each counted once."""
    clients = {record.span_id: record for record in records if record.role is Role.REMOTE_CALL}
    children: set[tuple[str, str]] = set()
    executions: list[SpanRecord] = []
    own = [record for record in records if record.role is Role.EXECUTION]
    for record in _judged(own, _nested(own)):
        client = clients.get(record.parent_id) if record.parent_id is not None else None
        if client is not None:
            children.add((record.trace_id, client.span_id))
            record = _resolved(record, client)
        if not _linked_elsewhere(record, trace_id):
            executions.append(record)
    linked_in = [probe.execution for probe in probes if probe.execution is not None]
    linked_in = _judged(linked_in, _nested(linked_in))  # nested ones that both link here: one execution
    for execution in linked_in:
        if execution.role is Role.EXECUTION and execution.parent_id is not None:
            children.add((execution.trace_id, execution.parent_id))
    for client in clients.values():
        if not _linked_elsewhere(client, trace_id) and (client.trace_id, client.span_id) not in children:
            executions.append(client)
    for execution in linked_in:
        if execution.role is Role.EXECUTION or (execution.trace_id, execution.span_id) not in children:
            executions.append(execution)
    return sorted(executions, key=lambda record: record.start_ns)


def conflict_findings(trace_id: str, records: list[SpanRecord]) -> list[AuditFinding]:
    """SERVER spans whose call id contradicts their CLIENT parent's (``malformed_span``, on the SERVER span)."""
    clients = {record.span_id: record for record in records if record.role is Role.REMOTE_CALL}
    findings: list[AuditFinding] = []
    for record in records:
        client = clients.get(record.parent_id) if record.parent_id is not None else None
        if (
            record.role is Role.EXECUTION
            and client is not None
            and record.call_id is not None
            and client.call_id is not None
            and record.call_id != client.call_id
        ):
            findings.append(
                AuditFinding.of(
                    FindingKind.MALFORMED_SPAN,
                    trace_id,
                    record.span_id,
                    call_id=record.call_id,
                    detail=CONFLICT_DETAIL,
                )
            )
    return findings
