"""The audit's report: counts per finding kind, the first traces of each, and bounded details.

A model only: :meth:`AuditReport.to_dict` is the ``--json`` document, :attr:`AuditReport.has_findings`
decides the exit status; printing it is the command line's job (``etf_otel.cli._audit``).

:data:`INFORMATIONAL` kinds (``unjudged``, ``unidentified_execution``, ``response_not_observed``,
``unobserved_llm_call``, ``history_drift``) are counted per kind like the others, but they are not problems:
they are left out of ``findings``, ``ok``, the exit status, ``traces_with_findings`` and ``traces_detail``. A
strict report (:attr:`AuditReport.strict`, ``etf-otel audit --strict``) counts the :data:`STRICT_KINDS` among
them as findings: drift breaks nothing, but a team that wants its histories to say exactly what the model
proposed can fail on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from etf_otel.audit._model import AuditFinding, FindingKind

__all__ = ["FIRST_TRACES", "INFORMATIONAL", "MAX_TRACE_DETAILS", "STRICT_KINDS", "AuditReport", "KindSummary"]

FIRST_TRACES = 5
"""Trace ids listed per finding kind."""
MAX_TRACE_DETAILS = 1000
"""Traces whose findings are listed one by one in ``--json`` (the rest are counted)."""
INFORMATIONAL: frozenset[FindingKind] = frozenset(
    {
        FindingKind.UNJUDGED,
        FindingKind.UNIDENTIFIED_EXECUTION,
        FindingKind.RESPONSE_NOT_OBSERVED,
        FindingKind.UNOBSERVED_LLM_CALL,
        FindingKind.HISTORY_DRIFT,
    }
)
"""Kinds that report what the input cannot tell, or what differs without breaking anything: not a problem,
they never fail the audit (unless it is strict: :data:`STRICT_KINDS`)."""
STRICT_KINDS: frozenset[FindingKind] = frozenset({FindingKind.HISTORY_DRIFT})
"""Informational kinds that a strict audit counts as findings (``--strict``)."""


@dataclass
class KindSummary:
    count: int = 0
    traces: int = 0
    first_traces: list[str] = field(default_factory=list)
    categories: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    """Orphaned results and tool messages by ``orphan_reason`` (``etf.linkage.orphan_reason``)."""
    divergences: dict[str, int] = field(default_factory=dict)
    """Executions that differ from their proposal by ``etf.divergence.kind``."""


@dataclass
class AuditReport:
    """Counts, the first traces of each kind, and the findings of the first traces (bounded)."""

    files: int = 0
    skipped_files: list[str] = field(default_factory=list)
    """Files found in a directory that are not trace exports, each with its reason."""
    records: int = 0
    skipped_records: int = 0
    spans: int = 0
    """Distinct spans: a span exported more than once counts once (``duplicate_spans`` counts the copies)."""
    duplicate_spans: int = 0
    etf_spans: int = 0
    """Spans etf-otel wrote (``_foreign.is_etf_span``): none at all means it was not installed or enabled."""
    traces: int = 0
    traces_with_findings: int = 0
    kinds: dict[FindingKind, KindSummary] = field(default_factory=dict)
    details: dict[str, list[AuditFinding]] = field(default_factory=dict)
    details_dropped: int = 0
    max_details: int = MAX_TRACE_DETAILS
    strict: bool = False
    """Count the :data:`STRICT_KINDS` (``history_drift``) as findings: ``etf-otel audit --strict``."""

    def informational(self, kind: FindingKind) -> bool:
        """Whether ``kind`` is counted without being a finding, in this report (strict or not)."""
        return kind in INFORMATIONAL and not (self.strict and kind in STRICT_KINDS)

    @property
    def findings(self) -> int:
        """Findings of every kind but the informational ones (:meth:`informational`)."""
        return sum(summary.count for kind, summary in self.kinds.items() if not self.informational(kind))

    @property
    def has_findings(self) -> bool:
        """Whether anything was found (the audit's exit status: docs/cli.md)."""
        return self.findings != 0

    @property
    def unobserved_llm_calls(self) -> int:
        """Other instrumentations' LLM calls with no ``assemble_response`` near them."""
        summary = self.kinds.get(FindingKind.UNOBSERVED_LLM_CALL)
        return summary.count if summary is not None else 0

    def add_trace(self, findings: list[AuditFinding]) -> None:
        self.traces += 1
        self.add_findings(findings)

    def add_findings(self, findings: list[AuditFinding]) -> None:
        """Count the findings of one checked trace (they may name other traces: see ``LinkProbe``)."""
        if not findings:
            return
        seen: set[tuple[FindingKind, str]] = set()
        traces: set[str] = set()
        for finding in findings:
            self._count(finding, first_of_kind_in_batch=(finding.kind, finding.trace_id) not in seen)
            seen.add((finding.kind, finding.trace_id))
            if self.informational(finding.kind):
                continue
            if finding.trace_id not in traces:
                traces.add(finding.trace_id)
                self._note_trace(finding.trace_id)
            listed = self.details.get(finding.trace_id)
            if listed is not None:
                listed.append(finding)

    def _count(self, finding: AuditFinding, *, first_of_kind_in_batch: bool) -> None:
        summary = self.kinds.get(finding.kind)
        if summary is None:
            summary = self.kinds[finding.kind] = KindSummary()
        summary.count += 1
        if finding.category is not None:
            summary.categories[finding.category] = summary.categories.get(finding.category, 0) + 1
        if finding.reason is not None:
            summary.reasons[finding.reason] = summary.reasons.get(finding.reason, 0) + 1
        if finding.divergence is not None:
            summary.divergences[finding.divergence] = summary.divergences.get(finding.divergence, 0) + 1
        if first_of_kind_in_batch:
            summary.traces += 1
            if len(summary.first_traces) < FIRST_TRACES and finding.trace_id not in summary.first_traces:
                summary.first_traces.append(finding.trace_id)

    def _note_trace(self, trace_id: str) -> None:
        """A trace with findings: listed in ``details`` while there is room, else counted as dropped."""
        if trace_id in self.details:
            return
        if len(self.details) < self.max_details:
            self.details[trace_id] = []
        else:
            self.details_dropped += 1
        self.traces_with_findings += 1

    def sorted_kinds(self) -> list[tuple[FindingKind, KindSummary]]:
        """The kinds found, in the order of :class:`FindingKind`."""
        order = list(FindingKind)
        return sorted(self.kinds.items(), key=lambda item: order.index(item[0]))

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {
            "ok": self.findings == 0,
            "input": {
                "files": self.files,
                "skipped_files": self.skipped_files,
                "records": self.records,
                "skipped_records": self.skipped_records,
                "spans": self.spans,
                "duplicate_spans": self.duplicate_spans,
                "etf_spans": self.etf_spans,
                "traces": self.traces,
            },
            "findings": self.findings,
            "unobserved_llm_calls": self.unobserved_llm_calls,
            "traces_with_findings": self.traces_with_findings,
            "by_kind": [
                {
                    "kind": kind.value,
                    "categories": dict(sorted(summary.categories.items())),
                    "count": summary.count,
                    "traces": summary.traces,
                    "first_traces": summary.first_traces,
                    **({"orphan_reasons": dict(sorted(summary.reasons.items()))} if summary.reasons else {}),
                    **({"divergence_kinds": dict(sorted(summary.divergences.items()))} if summary.divergences else {}),
                }
                for kind, summary in self.sorted_kinds()
            ],
            "traces_detail": [
                {"trace_id": trace_id, "findings": [finding.to_dict() for finding in findings]}
                for trace_id, findings in self.details.items()
            ],
            "traces_detail_dropped": self.details_dropped,
        }
