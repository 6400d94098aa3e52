"""``etf-otel audit``: check call-to-result linkage in exported traces (docs/cli.md).

Layers, each importing only those above it:

* :mod:`etf_otel.audit._model`: :class:`SpanData` (what any source provides), the compact records the
  checks keep, and :class:`AuditFinding` of a closed set of :class:`FindingKind`;
* :mod:`etf_otel.audit._sources`: readers yielding ``SpanData`` (OTLP JSON files, a Phoenix server) and
  the SQL form of the checks;
* :mod:`etf_otel.audit._executions` (which spans are executions, one per MCP ``tools/call`` across the
  process boundary), :mod:`etf_otel.audit._checks` (:func:`check_trace`), :mod:`etf_otel.audit._partition`
  (:class:`Partitioner`, bounded memory), :mod:`etf_otel.audit._report` (:class:`AuditReport`);
* :mod:`etf_otel.audit._pipeline`: :func:`audit_spans` and ``sql_audit``, a whole audit into a report.

Nothing here prints or exits: ``etf_otel.cli._audit`` is the command. Scaling, and the only assumption
about ordering: **none**. Spans of one trace may come in any order from any number of files; the input
is read once, as a stream, and memory is bounded by the partitioner and the cap on settlement
evidence (:mod:`etf_otel.audit._pipeline`), not by the input.
"""

from etf_otel.audit._checks import check_trace
from etf_otel.audit._model import AuditFinding, FindingKind, SpanData, span_events
from etf_otel.audit._partition import Partitioner
from etf_otel.audit._pipeline import audit_spans
from etf_otel.audit._report import AuditReport, KindSummary

__all__ = [
    "AuditFinding",
    "AuditReport",
    "FindingKind",
    "KindSummary",
    "Partitioner",
    "SpanData",
    "audit_spans",
    "check_trace",
    "span_events",
]
