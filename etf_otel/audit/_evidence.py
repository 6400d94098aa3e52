"""What the audit learns from the whole input before any trace is checked: :class:`Evidence`.

Settlements and proposals cross traces: a request that settles the previous response is often a
trace of its own, and zero-code frameworks split one agent run over several traces. While the input
streams by, :class:`Evidence` collects, by call id and bounded by ``max_ids``:

* the settlements (``etf.linkage.answered_ids`` on an ``assemble_response`` span, ``unanswered_call``
  events, and ``refusal_answered`` drift events naming a preserved id: a call the rules rejected or the
  guard refused, answered with an error result, is answered): ``settled``; and the id-less proposals
  (identity by position) a request answered, by span id (``etf.linkage.answered_spans``): ``settled_spans``;
* where each call id was proposed (``assemble_tool_call`` spans) and which traces ran an execution
  carrying it: ``proposals``, ``executed_in``. An execution whose call id its own trace did not propose
  is matched to the one proposal of the input with that id (ids are matched only when unique): the
  trace checks **defer** it, and :meth:`Evidence.finish` judges it once every trace was checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from etf_otel import attributes as A
from etf_otel.audit._model import EXECUTING, AuditFinding, FindingKind, Role, SpanData, SpanRecord
from etf_otel.audit._request import REFUSAL_ANSWERED
from etf_otel.core._vocabulary import ErrorCategory

__all__ = ["DEFAULT_MAX_EVIDENCE_IDS", "Evidence"]

DEFAULT_MAX_EVIDENCE_IDS = 1_000_000
"""Call ids :class:`Evidence` keeps per kind of evidence; later ones are counted, not kept (their proposals
stay unjudged, their executions are judged in their own trace only)."""
_UNANSWERED: str = ErrorCategory.UNANSWERED_CALL.value
_SEVERAL = ("", "")
"""``proposals`` value of a call id proposed by more than one span: never matched across traces."""
_TRACES_KEPT = 2
"""Traces of ``executed_in`` kept per call id: enough to tell "only its own trace" from "another one"."""


@dataclass
class Evidence:
    """Settlements, proposals and executions, by call id, across every trace of the input (bounded).

    A settlement is a later request's ``etf.linkage.answered_ids`` (on its ``assemble_response``
    span), an ``unanswered_call`` event naming the call (on any span), or a ``refusal_answered``
    drift event naming it. ``settled`` maps each
    call id to the end of the latest span recording one; it settles a proposal whose span ended
    before that (a settlement can only cover calls proposed before it, in the same process, on
    the same clock). Call ids are matched across traces as they are: ids that repeat across
    conversations (a server numbering its calls ``call_0``, ``call_1``, ...) can hide a proposal
    behind another conversation's later settlement, never report one that has none. Past
    ``max_ids`` ids the rest are counted in ``dropped``: their proposals become ``unjudged``.
    """

    settled: dict[str, int] = field(default_factory=dict)
    settled_spans: dict[str, int] = field(default_factory=dict)
    """The span id of an id-less proposal a request answered, to the end of the latest span recording it."""
    max_ids: int = DEFAULT_MAX_EVIDENCE_IDS
    dropped: int = 0
    proposals: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Call id to the (trace, span) of its only proposal, or ``("", "")`` when several spans proposed it."""
    executed_in: dict[str, set[str]] = field(default_factory=dict)
    """Call id to (up to two of) the traces of executions carrying it."""
    deferred: list[SpanRecord] = field(default_factory=list)
    """Executions to judge against the proposal of another trace, in :meth:`finish`."""
    judged: dict[str, tuple[bool | None, str | None]] = field(default_factory=dict)
    """(valid?, category) of the proposals executed in another trace, by call id."""
    held: dict[str, AuditFinding] = field(default_factory=dict)
    """``unjudged`` findings of those proposals, by call id: dropped if a deferred execution ran them."""

    def note(self, call_id: str, at_ns: int, settled: dict[str, int] | None = None) -> None:
        """A span ending at ``at_ns`` recorded a settlement of ``call_id`` (of a span id, into ``settled_spans``)."""
        settled = self.settled if settled is None else settled
        seen = settled.get(call_id)
        if seen is None and len(settled) >= self.max_ids:
            self.dropped += 1
        elif seen is None or at_ns > seen:
            settled[call_id] = at_ns

    def add(self, span: SpanData, record: SpanRecord) -> None:
        """Note what one span records (``record`` is its :func:`~etf_otel.audit._model.to_record`)."""
        if record.role is Role.RESPONSE:
            ids = span.attributes.get(A.ETF_LINKAGE_ANSWERED_IDS)
            if isinstance(ids, list):
                for call_id in ids:
                    if isinstance(call_id, str) and call_id:
                        self.note(call_id, record.end_ns)
            spans = span.attributes.get(A.ETF_LINKAGE_ANSWERED_SPANS)
            if isinstance(spans, list):
                for span_id in spans:
                    if isinstance(span_id, str) and span_id:
                        self.note(span_id.lower(), record.end_ns, self.settled_spans)
        elif record.call_id is not None:
            if record.role is Role.CALL:
                self._propose(record.call_id, (record.trace_id, record.span_id))
            elif record.role in EXECUTING:
                traces = self.executed_in.get(record.call_id)
                if traces is None and len(self.executed_in) < self.max_ids:
                    self.executed_in[record.call_id] = {record.trace_id}
                elif traces is not None and len(traces) < _TRACES_KEPT:
                    traces.add(record.trace_id)
        self.add_events(record)

    def _propose(self, call_id: str, where: tuple[str, str]) -> None:
        seen = self.proposals.get(call_id)
        if seen is None:
            if len(self.proposals) < self.max_ids:
                self.proposals[call_id] = where
        elif seen != where:
            self.proposals[call_id] = _SEVERAL

    def add_events(self, record: SpanRecord) -> None:
        """Note the ``unanswered_call`` and ``refusal_answered`` events of ``record`` (all a trace checked on its
        own has). A refusal answered settles the call it names: the request carried an answer for it (an error
        result, the documented way to answer a refused call), so it is no ``execution_without_result``."""
        for category, call_id, _ in record.violations:
            if category == _UNANSWERED and call_id is not None:
                self.note(call_id, record.end_ns)
        for kind, call_id in record.drifts:
            if kind == REFUSAL_ANSWERED and call_id is not None:
                self.note(call_id, record.end_ns)

    def settles(self, call: SpanRecord) -> bool:
        """Whether a settlement recorded after ``call``'s span ended names its call id, or, for an id-less
        proposal, its span."""
        at_ns = self.settled.get(call.call_id) if call.call_id is not None else self.settled_spans.get(call.span_id)
        return at_ns is not None and at_ns >= call.end_ns

    def proposers(self, call_id: str) -> int:
        """How many spans of the input proposed ``call_id``: 0, 1, or 2 for several."""
        seen = self.proposals.get(call_id)
        return 0 if seen is None else 2 if seen == _SEVERAL else 1

    def proposed_elsewhere(self, call_id: str) -> bool | None:
        """For an execution its trace cannot match: ``True`` if one span of the input proposed ``call_id``,
        ``False`` if several did (ambiguous), ``None`` if none."""
        seen = self.proposals.get(call_id)
        return None if seen is None else seen != _SEVERAL

    def executed_elsewhere(self, call: SpanRecord) -> bool:
        """Whether ``call`` is the only proposal of its id and an execution in another trace carries the id."""
        call_id = call.call_id
        if call_id is None or self.proposals.get(call_id) != (call.trace_id, call.span_id):
            return False
        return any(trace_id != call.trace_id for trace_id in self.executed_in.get(call_id, ()))

    def finish(self) -> list[list[AuditFinding]]:
        """The findings of the deferred executions and of the proposals held, one batch per trace."""
        batches: dict[str, list[AuditFinding]] = {}
        ran: set[str] = set()
        for execution in self.deferred:
            call_id = execution.call_id
            if call_id is None:
                continue
            ran.add(call_id)
            valid, category = self.judged.get(call_id, (None, None))
            if valid is False:
                finding = AuditFinding.of(
                    FindingKind.EXECUTED_REJECTED,
                    execution.trace_id,
                    execution.span_id,
                    category=category,
                    call_id=call_id,
                )
                batches.setdefault(execution.trace_id, []).append(finding)
        for call_id, finding in self.held.items():
            if call_id not in ran:
                batches.setdefault(finding.trace_id, []).append(finding)
        return list(batches.values())
