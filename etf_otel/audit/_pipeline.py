"""Whole audits: spans from any source through the checks into a report.

1. a **source** yields protocol-neutral :class:`SpanData` (``etf_otel.audit._sources.otlp_json``
   reads OTLP JSON files, ``etf_otel.audit._sources.phoenix`` a Phoenix server; anything else only
   has to build ``SpanData``);
2. :class:`Partitioner` groups the compact :class:`SpanRecord` of each span by trace (bounded memory),
   while :class:`Evidence` collects the settlement evidence of every trace (bounded too);
3. :func:`check_trace` decides the findings of one trace; :class:`AuditReport` aggregates.

:func:`audit_spans` runs these; :func:`sql_audit` instead runs the same checks as SQL in a ClickHouse
engine (``etf_otel.audit._sources.sql``) and aggregates its findings into the same report. Neither
prints: the command line (``etf_otel.cli._audit``) renders the report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from etf_otel.audit._checks import Evidence, check_trace
from etf_otel.audit._foreign import is_etf_span
from etf_otel.audit._model import SpanData, SpanRecord, items_of, to_record
from etf_otel.audit._partition import Partitioner
from etf_otel.audit._report import AuditReport
from etf_otel.audit._sources.sql import DEFAULT_DATABASE, DEFAULT_TABLE, Engine, TimeWindow, sql_findings

__all__ = ["audit_spans", "sql_audit"]


def audit_spans(
    spans: Iterable[SpanData],
    *,
    report: AuditReport | None = None,
    partitioner: Partitioner | None = None,
    on_group: Callable[[int, int], None] | None = None,
    strict: bool = False,
) -> AuditReport:
    """Check every trace in ``spans`` (any order) and return the aggregated report.

    ``on_group(done, total)`` is called after each group of traces is checked (for a progress bar).
    ``strict`` makes ``history_drift`` a finding (:attr:`AuditReport.strict`; a given ``report`` keeps its own
    setting unless this is true).
    """
    report = report if report is not None else AuditReport()
    report.strict = report.strict or strict
    partitioner = partitioner if partitioner is not None else Partitioner()
    evidence = Evidence()  # settlements cross traces: collected before any trace is checked
    try:
        for span in spans:
            record = to_record(span)
            evidence.add(span, record)
            if is_etf_span(span.name, span.attributes, [name for name, _ in span.events], span.scope):
                report.etf_spans += 1
            if not record.links:
                partitioner.add(record.trace_id, record)
            else:
                for trace_id, item in items_of(record):
                    partitioner.add(trace_id, item)
        total = max(partitioner.buckets, 1)
        for done, group in enumerate(partitioner.groups(), start=1):
            for trace_id, items in group:
                findings = check_trace(trace_id, items, evidence)
                records = [item for item in items if isinstance(item, SpanRecord)]
                report.duplicate_spans += len(records) - len({record.span_id for record in records})
                if records:
                    report.add_trace(findings)
                else:  # only probes: a link into a trace none of whose spans arrived
                    report.add_findings(findings)
            if on_group is not None:
                on_group(done, total)
        for batch in evidence.finish():  # executions matched to a proposal of another trace
            report.add_findings(batch)
    finally:
        partitioner.close()
    return report


def sql_audit(
    engine: Engine,
    *,
    database: str = DEFAULT_DATABASE,
    table: str = DEFAULT_TABLE,
    window: TimeWindow | None = None,
    report: AuditReport | None = None,
    strict: bool = False,
) -> AuditReport:
    """Run ``audit_findings.sql`` on ``engine`` and aggregate the rows into the Python audit's report
    (``strict`` as in :func:`audit_spans`)."""
    report = report if report is not None else AuditReport()
    report.strict = report.strict or strict
    found = sql_findings(engine, database=database, table=table, window=window)
    report.spans, report.traces = found.spans, found.traces
    report.duplicate_spans, report.etf_spans = found.duplicate_spans, found.etf_spans
    # One add_findings per checked trace, as audit_spans does per check_trace call.
    for batch in found.groups:
        report.add_findings(batch)
    return report
