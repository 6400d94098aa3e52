"""``etf-otel audit``: check call-to-result linkage in exported traces (SPEC section 8).

The pipeline has three parts, so that another span source (for example a Phoenix server)
can feed the same checker:

1. a **source** yields protocol-neutral :class:`SpanData` (``etf_otel.audit.sources.otlp_json`` reads OTLP
   JSON files; anything else only has to build ``SpanData``);
2. :class:`Partitioner` groups the compact :class:`SpanRecord` of each span by trace;
3. :func:`check_trace` decides the findings of one trace; :class:`AuditReport` aggregates.

Scaling, and the only assumption about ordering: **none**. Spans of one trace may be spread
over any number of files, services and positions, in any order. The input is read once,
as a stream; each span is reduced to a small record (ids, a role and the few attributes the
checks need). Up to ``memory_spans`` records are grouped in memory. Beyond that the
records are spilled to ``buckets`` temporary files partitioned by trace id, and each
bucket is then checked on its own, so memory is bounded by the largest bucket (about
``spans / buckets`` records) plus the largest single trace, not by the input. Per-trace
state lives only while its bucket is checked. A link from one trace to a span of another
is delivered as a :class:`LinkProbe` to the bucket of the target trace, so cross-trace
links (an ``execute_tool`` span in a separate trace linking to its ``assemble_tool_call``)
are checked exactly too.

Findings (a closed set, :class:`FindingKind`) map to SPEC section 4 categories where one
exists; ``missing_span`` and ``malformed_span`` are about the telemetry itself and have
no category.

This module imports no OpenTelemetry SDK: it works on plain values.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import IO, Any

from etf_otel.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK
from etf_otel.core.vocabulary import OTHER, ErrorCategory, StreamState, Verdict
from etf_otel.instrumentation import attributes as A

__all__ = [
    "AuditFinding",
    "AuditReport",
    "FindingKind",
    "LinkProbe",
    "Partitioner",
    "SpanData",
    "SpanRecord",
    "add_audit_arguments",
    "audit_spans",
    "check_trace",
    "run_audit",
    "span_events",
    "to_record",
]


DEFAULT_MEMORY_SPANS = 200_000
"""Records grouped in memory before spilling to partitioned temporary files."""
DEFAULT_BUCKET_SPANS = 100_000
"""Target records per spill bucket (the memory bound of the second phase)."""
MAX_BUCKETS = 1024
FIRST_TRACES = 5
"""Trace ids listed per finding kind."""
MAX_TRACE_DETAILS = 1000
"""Traces whose findings are listed one by one in ``--json`` (the rest are counted)."""

EXECUTE_TOOL_PREFIX = A.SPAN_EXECUTE_TOOL + " "
ASSEMBLE_TOOL_CALL_PREFIX = A.SPAN_ASSEMBLE_TOOL_CALL + " "
EVENT_TOOL_MESSAGE = "gen_ai.tool.message"
ATTR_INPUT_MESSAGES = "gen_ai.input.messages"


class FindingKind(str, Enum):
    """What the audit found (closed set). ``category`` gives the SPEC section 4 category."""

    ORPHANED_EXECUTION = "orphaned_execution"
    """An ``execute_tool`` span whose call id and link match no ``assemble_tool_call`` of the trace."""
    DUPLICATE_EXECUTION = "duplicate_execution"
    """A proposal executed more than once (one finding per extra execution)."""
    UNANSWERED_CALL = "unanswered_call"
    """A proposal of a dispatchable response that was never executed nor answered by a tool message."""
    EXECUTION_WITHOUT_RESULT = "execution_without_result"
    """A call executed only with host errors (``error.type``), and no tool message answers it."""
    EXECUTED_REJECTED = "executed_rejected"
    """An execution of a rejected call, or of any call of a truncated or otherwise non-dispatchable response."""
    REFUSED_EXECUTION = "refused_execution"
    """Guard mode refused an execution (``etf.guard.refused``): the guard held, the attempt is reported."""
    ORPHANED_TOOL_MESSAGE = "orphaned_tool_message"
    """A ``role: tool`` message (``gen_ai.input.messages``, ``gen_ai.tool.message`` event) matching no proposal."""
    RECORDED_VIOLATION = "recorded_violation"
    """An ``etf.integrity.violation`` event the instrumentation recorded (not already found by the audit)."""
    MISSING_SPAN = "missing_span"
    """A parent or link points at a span that never arrived (started but never exported, or not in the input)."""
    MALFORMED_SPAN = "malformed_span"
    """An etf-otel span without an attribute the contract requires (SPEC section 6)."""


_FIXED_CATEGORY: dict[FindingKind, str | None] = {
    FindingKind.ORPHANED_EXECUTION: ErrorCategory.ORPHANED_RESULT.value,
    FindingKind.DUPLICATE_EXECUTION: ErrorCategory.DUPLICATE_RESULT.value,
    FindingKind.UNANSWERED_CALL: ErrorCategory.UNANSWERED_CALL.value,
    FindingKind.EXECUTION_WITHOUT_RESULT: ErrorCategory.UNANSWERED_CALL.value,
    FindingKind.ORPHANED_TOOL_MESSAGE: ErrorCategory.ORPHANED_RESULT.value,
    FindingKind.MISSING_SPAN: None,
    FindingKind.MALFORMED_SPAN: None,
}
"""Kinds with a fixed category; the others take theirs from the span or event."""


class Role(str, Enum):
    CALL = "call"
    RESPONSE = "response"
    EXECUTION = "execution"
    OTHER = "other"


# --- input and records -----------------------------------------------------------------------


@dataclass(slots=True)
class SpanData:
    """One exported span, protocol-neutral: what any span source has to provide.

    Ids are lowercase hex strings (``None`` for no parent); attribute values are plain
    Python values; ``events`` are ``(name, attributes)``; ``links`` are ``(trace_id, span_id)``.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_ns: int = 0
    end_ns: int = 0
    attributes: dict[str, object] = field(default_factory=dict)
    events: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    status_code: int = 0
    service: str | None = None


def span_events(
    raw: object, decode_attributes: Callable[[Any], dict[str, object]]
) -> list[tuple[str, dict[str, object]]]:
    """``SpanData.events`` from a source's list of event objects (each with a name and
    attributes); ``decode_attributes`` is the source's own reading of an attribute set."""
    events: list[tuple[str, dict[str, object]]] = []
    if isinstance(raw, list):
        for event in raw:
            if isinstance(event, dict):
                name = event.get("name")
                events.append((name if isinstance(name, str) else "", decode_attributes(event.get("attributes"))))
    return events


@dataclass(slots=True)
class SpanRecord:
    """The compact form of a span that the checks need (what is kept or spilled)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    role: Role
    start_ns: int = 0
    end_ns: int = 0
    call_id: str | None = None
    verdict: str | None = None
    categories: tuple[str, ...] = ()
    error_type: str | None = None
    state: str | None = None
    dispatchable: bool | None = None
    refused: bool = False
    links: tuple[tuple[str, str], ...] = ()
    violations: tuple[tuple[str, str | None], ...] = ()
    tool_messages: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(slots=True)
class LinkProbe:
    """A link from a span of ``source_trace`` into ``target_trace``, checked with the target.

    ``execution`` is the linking ``execute_tool`` span, matched against the target trace's
    proposals; for any other span only the target's existence is checked.
    """

    target_trace: str
    target_span: str
    source_trace: str
    source_span: str
    execution: SpanRecord | None = None


Item = SpanRecord | LinkProbe


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _role(span: SpanData) -> Role:
    name = span.name
    if name == A.SPAN_ASSEMBLE_TOOL_CALL or name.startswith(ASSEMBLE_TOOL_CALL_PREFIX):
        return Role.CALL
    if name == A.SPAN_ASSEMBLE_RESPONSE:
        return Role.RESPONSE
    if (
        name == A.SPAN_EXECUTE_TOOL
        or name.startswith(EXECUTE_TOOL_PREFIX)
        or span.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OPERATION_EXECUTE_TOOL
    ):
        return Role.EXECUTION
    return Role.OTHER


def _tool_message_ids(span: SpanData) -> list[str]:
    """Ids answered by ``role: tool`` messages recorded on a span, in the usual shapes."""
    ids: list[str] = []
    for name, event_attributes in span.events:
        if name == EVENT_TOOL_MESSAGE:
            value = _string(event_attributes.get(A.GEN_AI_TOOL_CALL_ID)) or _string(event_attributes.get("id"))
            if value:
                ids.append(value)
    messages = span.attributes.get(ATTR_INPUT_MESSAGES)
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except (ValueError, RecursionError):
            messages = None
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict) or message.get("role") != "tool":
                continue
            direct = _string(message.get("tool_call_id"))
            if direct:
                ids.append(direct)
            parts = message.get("parts")
            if isinstance(parts, list):
                for part in parts:
                    if isinstance(part, dict) and part.get("type") == "tool_call_response":
                        part_id = _string(part.get("id"))
                        if part_id:
                            ids.append(part_id)
    return ids


def to_record(span: SpanData) -> SpanRecord:
    """Reduce a span to what the checks need, noting contract attributes that are missing."""
    attributes = span.attributes
    role = _role(span)
    record = SpanRecord(span.trace_id, span.span_id, span.parent_span_id, role, span.start_ns, span.end_ns)
    if span.links:
        record.links = tuple(span.links)
    problems: list[str] = []
    if span.events:
        violations: list[tuple[str, str | None]] = []
        for name, event_attributes in span.events:
            if name == A.EVENT_INTEGRITY_VIOLATION:
                category = _string(event_attributes.get(A.ETF_ERROR_CATEGORY))
                if category is None:
                    problems.append(f"{A.EVENT_INTEGRITY_VIOLATION} event without {A.ETF_ERROR_CATEGORY}")
                else:
                    violations.append((category, _string(event_attributes.get(A.GEN_AI_TOOL_CALL_ID))))
        record.violations = tuple(violations)
    if span.events or ATTR_INPUT_MESSAGES in attributes:
        record.tool_messages = tuple(_tool_message_ids(span))
    if role is Role.CALL:
        record.call_id = _string(attributes.get(A.GEN_AI_TOOL_CALL_ID))
        verdict = attributes.get(A.ETF_TOOL_CALL_VERDICT)
        if verdict in (Verdict.PROPOSED.value, Verdict.REJECTED.value):
            record.verdict = str(verdict)
        else:
            problems.append(A.ETF_TOOL_CALL_VERDICT)
        raw = attributes.get(A.ETF_TOOL_CALL_CATEGORIES)
        if isinstance(raw, list):
            record.categories = tuple(value for value in raw if isinstance(value, str))
        record.error_type = _string(attributes.get(A.ERROR_TYPE))
        if record.verdict == Verdict.PROPOSED.value and record.call_id is None:
            problems.append(A.GEN_AI_TOOL_CALL_ID)
    elif role is Role.RESPONSE:
        record.state = _string(attributes.get(A.ETF_STREAM_STATE))
        if record.state is None:
            problems.append(A.ETF_STREAM_STATE)
        dispatchable = attributes.get(A.ETF_STREAM_DISPATCHABLE)
        if isinstance(dispatchable, bool):
            record.dispatchable = dispatchable
        else:
            problems.append(A.ETF_STREAM_DISPATCHABLE)
    elif role is Role.EXECUTION:
        record.call_id = _string(attributes.get(A.GEN_AI_TOOL_CALL_ID))
        record.error_type = _string(attributes.get(A.ERROR_TYPE))
        if record.error_type is None and span.status_code == 2:
            record.error_type = OTHER
        record.refused = attributes.get(A.ETF_GUARD_REFUSED) is True
    record.problems = tuple(problems)
    return record


def items_of(record: SpanRecord) -> Iterator[tuple[str, Item]]:
    """``(trace to check it with, item)``: the record itself, plus probes for cross-trace links."""
    yield record.trace_id, record
    for index, (link_trace, link_span) in enumerate(record.links):
        if link_trace != record.trace_id:
            execution = record if index == 0 and record.role is Role.EXECUTION else None
            yield link_trace, LinkProbe(link_trace, link_span, record.trace_id, record.span_id, execution)


# --- findings --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditFinding:
    """One problem in one trace. ``span_id`` is the span it is about (the missing one for ``missing_span``)."""

    kind: FindingKind
    trace_id: str
    span_id: str | None = None
    category: str | None = None
    call_id: str | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value, "category": self.category, "span_id": self.span_id}
        if self.call_id is not None:
            out["call_id"] = self.call_id
        if self.detail is not None:
            out["detail"] = self.detail
        return out


def _finding(
    kind: FindingKind,
    trace_id: str,
    span_id: str | None,
    *,
    category: str | None = None,
    call_id: str | None = None,
    detail: str | None = None,
) -> AuditFinding:
    if kind in _FIXED_CATEGORY:
        category = _FIXED_CATEGORY[kind]
    return AuditFinding(kind, trace_id, span_id, category, call_id, detail)


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


def check_trace(trace_id: str, items: Iterable[Item]) -> list[AuditFinding]:
    """All findings of one trace, given every record of it and every probe linking into it."""
    records: list[SpanRecord] = []
    probes: list[LinkProbe] = []
    for item in items:
        if isinstance(item, LinkProbe):
            probes.append(item)
        else:
            records.append(item)
    findings: list[AuditFinding] = []
    present = {record.span_id for record in records}

    # Telemetry itself: malformed spans, spans that never arrived.
    missing_seen: set[str] = set()
    missing_probes: set[tuple[str, str]] = set()
    for record in records:
        for problem in record.problems:
            findings.append(_finding(FindingKind.MALFORMED_SPAN, trace_id, record.span_id, detail=f"missing {problem}"))
        if record.parent_id is not None and record.parent_id not in present and record.parent_id not in missing_seen:
            missing_seen.add(record.parent_id)
            findings.append(
                _finding(FindingKind.MISSING_SPAN, trace_id, record.parent_id, detail=f"parent of {record.span_id}")
            )
        for link_trace, link_span in record.links:
            if link_trace == trace_id and link_span not in present and link_span not in missing_seen:
                missing_seen.add(link_span)
                findings.append(
                    _finding(FindingKind.MISSING_SPAN, trace_id, link_span, detail=f"link target of {record.span_id}")
                )
    for probe in probes:
        if probe.target_span not in present and (probe.source_trace, probe.target_span) not in missing_probes:
            missing_probes.add((probe.source_trace, probe.target_span))
            findings.append(
                _finding(
                    FindingKind.MISSING_SPAN,
                    probe.source_trace,
                    probe.target_span,
                    detail=f"link target of {probe.source_span}, in trace {trace_id}",
                )
            )

    # Proposals and the responses they came from.
    calls = [record for record in records if record.role is Role.CALL]
    calls_by_span = {call.span_id: call for call in calls}
    response_of = _response_of_calls(calls, [record for record in records if record.role is Role.RESPONSE])
    first_category_of_response: dict[str, str] = {}
    for call in calls:
        response = response_of.get(call.span_id)
        if response is not None and call.categories and response.span_id not in first_category_of_response:
            first_category_of_response[response.span_id] = call.categories[0]

    def judge(call: SpanRecord) -> tuple[bool | None, str | None]:
        """(valid proposal?, category if not); ``None`` when the span is too incomplete to say."""
        if call.verdict is None:
            return None, None
        if call.verdict == Verdict.REJECTED.value:
            return False, (call.categories[0] if call.categories else call.error_type) or "truncated_stream"
        response = response_of.get(call.span_id)
        if response is not None and response.dispatchable is False:
            if response.state != StreamState.COMPLETED.value:
                return False, ErrorCategory.TRUNCATED_STREAM.value
            # A sibling's rejection, or a fragment without index that belongs to no slot.
            return False, first_category_of_response.get(response.span_id, ErrorCategory.MISSING_INDEX.value)
        return True, None

    by_call_id: dict[str, list[SpanRecord]] = {}
    for call in sorted(calls, key=lambda record: record.start_ns):
        if call.call_id is not None:
            by_call_id.setdefault(call.call_id, []).append(call)

    answered: set[str] = set()
    for record in records:
        answered.update(record.tool_messages)

    # Executions: this trace's own (unless linked to another trace), and those linking in.
    executions = [
        record
        for record in records
        if record.role is Role.EXECUTION and not (record.links and record.links[0][0] != trace_id)
    ]
    executions.extend(probe.execution for probe in probes if probe.execution is not None)
    executed: dict[str, list[SpanRecord]] = {}
    for execution in sorted(executions, key=lambda record: record.start_ns):
        target: SpanRecord | None = None
        if execution.links:
            target = calls_by_span.get(execution.links[0][1])
        if target is None and execution.call_id is not None:
            candidates = by_call_id.get(execution.call_id)
            if candidates:
                earlier = [call for call in candidates if call.start_ns <= execution.start_ns]
                target = earlier[-1] if earlier else candidates[0]
        call_id = execution.call_id or (target.call_id if target is not None else None)
        if execution.refused:
            findings.append(
                _finding(
                    FindingKind.REFUSED_EXECUTION,
                    execution.trace_id,
                    execution.span_id,
                    category=execution.error_type or ErrorCategory.ORPHANED_RESULT.value,
                    call_id=call_id,
                )
            )
            continue
        if target is None and execution.links and execution.links[0][1] not in present:
            continue  # its proposal's span never arrived: reported as missing_span, cannot be judged
        if target is None:
            findings.append(
                _finding(
                    FindingKind.ORPHANED_EXECUTION,
                    execution.trace_id,
                    execution.span_id,
                    call_id=call_id,
                    detail=None if call_id else "no gen_ai.tool.call.id and no link",
                )
            )
            continue
        valid, category = judge(target)
        if valid is False:
            findings.append(
                _finding(
                    FindingKind.EXECUTED_REJECTED,
                    execution.trace_id,
                    execution.span_id,
                    category=category,
                    call_id=call_id,
                )
            )
        executed.setdefault(target.span_id, []).append(execution)

    for call in calls:
        runs = executed.get(call.span_id, [])
        for extra in runs[1:]:
            findings.append(
                _finding(
                    FindingKind.DUPLICATE_EXECUTION,
                    extra.trace_id,
                    extra.span_id,
                    call_id=call.call_id,
                    detail=f"{len(runs)} executions",
                )
            )
        answered_by_message = call.call_id is not None and call.call_id in answered
        if not runs:
            if judge(call)[0] is True and not answered_by_message:
                findings.append(_finding(FindingKind.UNANSWERED_CALL, trace_id, call.span_id, call_id=call.call_id))
        elif all(run.error_type is not None for run in runs) and not answered_by_message:
            findings.append(
                _finding(
                    FindingKind.EXECUTION_WITHOUT_RESULT,
                    runs[-1].trace_id,
                    runs[-1].span_id,
                    call_id=call.call_id,
                    detail=f"error.type {runs[-1].error_type}",
                )
            )

    # Tool messages answering nothing the trace proposed.
    proposed = {call.call_id for call in calls if call.call_id is not None and judge(call)[0] is not False}
    reported_messages: set[str] = set()
    for record in records:
        for message_id in record.tool_messages:
            if message_id not in proposed and message_id not in reported_messages:
                reported_messages.add(message_id)
                findings.append(
                    _finding(FindingKind.ORPHANED_TOOL_MESSAGE, trace_id, record.span_id, call_id=message_id)
                )

    # What the instrumentation already recorded, unless the audit found the same thing.
    by_span = {(finding.category, finding.span_id) for finding in findings}
    by_call = {(finding.category, finding.call_id) for finding in findings if finding.call_id is not None}
    for record in records:
        for category, call_id in record.violations:
            if (category, record.span_id) in by_span or (call_id is not None and (category, call_id) in by_call):
                continue
            findings.append(
                _finding(FindingKind.RECORDED_VIOLATION, trace_id, record.span_id, category=category, call_id=call_id)
            )
    return findings


# --- grouping by trace -------------------------------------------------------------------------


class Partitioner:
    """Groups items by trace: in memory up to ``memory_spans``, then spilled by trace id.

    Spill files hold pickled batches of records written by this process only.
    """

    def __init__(
        self,
        *,
        memory_spans: int = DEFAULT_MEMORY_SPANS,
        bucket_spans: int = DEFAULT_BUCKET_SPANS,
        expected_spans: Callable[[int], int] | None = None,
        directory: str | None = None,
    ) -> None:
        self._memory_spans = memory_spans
        self._bucket_spans = bucket_spans
        self._expected = expected_spans
        self._directory = directory
        self._traces: dict[str, list[Item]] = {}
        self._count = 0
        self._spill_dir: str | None = None
        self._buckets = 0
        self._pending: list[list[Item]] = []

    @property
    def spilled(self) -> bool:
        return self._spill_dir is not None

    @property
    def buckets(self) -> int:
        return self._buckets

    def add(self, trace_id: str, item: Item) -> None:
        self._count += 1
        if self._spill_dir is None:
            self._traces.setdefault(trace_id, []).append(item)
            if self._count > self._memory_spans:
                self._start_spill()
            return
        index = self._bucket(trace_id)
        batch = self._pending[index]
        batch.append(item)
        if len(batch) >= 4096:
            self._flush(index)

    def _bucket(self, trace_id: str) -> int:
        try:
            return int(trace_id[-8:], 16) % self._buckets
        except ValueError:
            return sum(trace_id.encode()) % self._buckets

    def _start_spill(self) -> None:
        expected = self._expected(self._count) if self._expected is not None else self._count * 4
        self._buckets = max(8, min(MAX_BUCKETS, -(-max(expected, self._count) // self._bucket_spans)))
        self._spill_dir = tempfile.mkdtemp(prefix="etf-otel-audit-", dir=self._directory)
        self._pending = [[] for _ in range(self._buckets)]
        traces, self._traces = self._traces, {}
        for trace_id, items in traces.items():
            index = self._bucket(trace_id)
            self._pending[index].extend(items)
        for index in range(self._buckets):
            self._flush(index)

    def _path(self, index: int) -> str:
        assert self._spill_dir is not None
        return os.path.join(self._spill_dir, f"bucket-{index:04d}.pickle")

    def _flush(self, index: int) -> None:
        batch = self._pending[index]
        if not batch:
            return
        with open(self._path(index), "ab") as out:
            pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
        self._pending[index] = []

    def groups(self) -> Iterator[list[tuple[str, list[Item]]]]:
        """Trace groups, one batch per bucket (all of memory when nothing was spilled)."""
        if self._spill_dir is None:
            in_memory, self._traces = self._traces, {}
            yield list(in_memory.items())
            return
        for index in range(self._buckets):
            self._flush(index)
        for index in range(self._buckets):
            traces: dict[str, list[Item]] = {}
            path = self._path(index)
            if os.path.exists(path):
                with open(path, "rb") as source:
                    for batch in _pickled_batches(source):
                        for item in batch:
                            key = item.target_trace if isinstance(item, LinkProbe) else item.trace_id
                            traces.setdefault(key, []).append(item)
                os.remove(path)
            yield list(traces.items())

    def close(self) -> None:
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None


def _pickled_batches(source: IO[bytes]) -> Iterator[list[Item]]:
    while True:
        try:
            batch = pickle.load(source)  # noqa: S301 - our own spill file
        except EOFError:
            return
        yield batch


# --- report -------------------------------------------------------------------------------------


@dataclass
class KindSummary:
    count: int = 0
    traces: int = 0
    first_traces: list[str] = field(default_factory=list)
    categories: dict[str, int] = field(default_factory=dict)


@dataclass
class AuditReport:
    """Counts, the first traces of each kind, and the findings of the first traces (bounded)."""

    files: int = 0
    records: int = 0
    skipped_records: int = 0
    spans: int = 0
    traces: int = 0
    traces_with_findings: int = 0
    kinds: dict[FindingKind, KindSummary] = field(default_factory=dict)
    details: dict[str, list[AuditFinding]] = field(default_factory=dict)
    details_dropped: int = 0
    max_details: int = MAX_TRACE_DETAILS

    @property
    def findings(self) -> int:
        return sum(summary.count for summary in self.kinds.values())

    def add_trace(self, findings: list[AuditFinding]) -> None:
        self.traces += 1
        self.add_findings(findings)

    def add_findings(self, findings: list[AuditFinding]) -> None:
        if not findings:
            return
        seen: set[tuple[FindingKind, str]] = set()
        traces: set[str] = set()
        for finding in findings:
            summary = self.kinds.get(finding.kind)
            if summary is None:
                summary = self.kinds[finding.kind] = KindSummary()
            summary.count += 1
            if finding.category is not None:
                summary.categories[finding.category] = summary.categories.get(finding.category, 0) + 1
            if (finding.kind, finding.trace_id) not in seen:
                seen.add((finding.kind, finding.trace_id))
                summary.traces += 1
                if len(summary.first_traces) < FIRST_TRACES and finding.trace_id not in summary.first_traces:
                    summary.first_traces.append(finding.trace_id)
            if finding.trace_id not in traces:
                traces.add(finding.trace_id)
                if finding.trace_id not in self.details:
                    if len(self.details) < self.max_details:
                        self.details[finding.trace_id] = []
                        self.traces_with_findings += 1
                    else:
                        self.details_dropped += 1
                        self.traces_with_findings += 1
            listed = self.details.get(finding.trace_id)
            if listed is not None:
                listed.append(finding)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.findings == 0,
            "input": {
                "files": self.files,
                "records": self.records,
                "skipped_records": self.skipped_records,
                "spans": self.spans,
                "traces": self.traces,
            },
            "findings": self.findings,
            "traces_with_findings": self.traces_with_findings,
            "by_kind": [
                {
                    "kind": kind.value,
                    "categories": dict(sorted(summary.categories.items())),
                    "count": summary.count,
                    "traces": summary.traces,
                    "first_traces": summary.first_traces,
                }
                for kind, summary in self._sorted_kinds()
            ],
            "traces_detail": [
                {"trace_id": trace_id, "findings": [finding.to_dict() for finding in findings]}
                for trace_id, findings in self.details.items()
            ],
            "traces_detail_dropped": self.details_dropped,
        }

    def _sorted_kinds(self) -> list[tuple[FindingKind, KindSummary]]:
        order = list(FindingKind)
        return sorted(self.kinds.items(), key=lambda item: order.index(item[0]))

    def emit(self, json_output: bool) -> int:
        """Print the report (``--json`` or the readable table) and return the exit code of SPEC 8."""
        if json_output:
            sys.stdout.write(json.dumps(self.to_dict()) + "\n")
        else:
            from rich.console import Console

            self.render(Console())
        return EXIT_FOUND if self.findings else EXIT_OK

    def render(self, console: Any) -> None:
        """A readable report with ``rich``: one table row per finding kind."""
        from rich.table import Table

        console.print(
            f"[bold]etf-otel audit[/bold]: {self.files} file(s), {self.spans} span(s), {self.traces} trace(s)"
            + (f", {self.skipped_records} non-trace record(s) skipped" if self.skipped_records else "")
        )
        if not self.kinds:
            console.print("[green]No linkage problems found.[/green]")
            return
        table = Table(title="Findings")
        table.add_column("kind", style="bold", no_wrap=True)
        table.add_column("category (SPEC §4)")
        table.add_column("count", justify="right")
        table.add_column("traces", justify="right")
        for kind, summary in self._sorted_kinds():
            categories = ", ".join(f"{name} ({count})" for name, count in sorted(summary.categories.items())) or "—"
            table.add_row(kind.value, categories, str(summary.count), str(summary.traces))
        console.print(table)
        console.print("First trace ids:")
        for kind, summary in self._sorted_kinds():
            more = summary.traces - len(summary.first_traces)
            console.print(f"  [bold]{kind.value}[/bold]", soft_wrap=True)
            for trace_id in summary.first_traces:
                console.print(f"    {trace_id}", soft_wrap=True)
            if more > 0:
                console.print(f"    … and {more} more", soft_wrap=True)
        console.print(
            f"[red]{self.findings} finding(s)[/red] in {self.traces_with_findings} trace(s). "
            "missing_span and malformed_span concern the telemetry itself (no SPEC category)."
        )


# --- driver --------------------------------------------------------------------------------------


def audit_spans(
    spans: Iterable[SpanData],
    *,
    report: AuditReport | None = None,
    partitioner: Partitioner | None = None,
    on_group: Callable[[int, int], None] | None = None,
) -> AuditReport:
    """Check every trace in ``spans`` (any order) and return the aggregated report."""
    report = report if report is not None else AuditReport()
    partitioner = partitioner if partitioner is not None else Partitioner()
    try:
        for span in spans:
            record = to_record(span)
            if not record.links:
                partitioner.add(record.trace_id, record)
            else:
                for trace_id, item in items_of(record):
                    partitioner.add(trace_id, item)
        total = max(partitioner.buckets, 1)
        for done, group in enumerate(partitioner.groups(), start=1):
            for trace_id, items in group:
                findings = check_trace(trace_id, items)
                if any(isinstance(item, SpanRecord) for item in items):
                    report.add_trace(findings)
                else:  # only probes: a link into a trace none of whose spans arrived
                    report.add_findings(findings)
            if on_group is not None:
                on_group(done, total)
    finally:
        partitioner.close()
    return report


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``etf-otel audit``: ``paths``, ``--phoenix``, ``--project``, ``--json``, ``--no-progress``."""
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="OTLP JSON trace exports: files (JSON lines or documents, optionally gzip) or directories",
    )
    parser.add_argument(
        "--phoenix",
        metavar="URL",
        help="read the spans from the Arize Phoenix server at URL (REST API) instead of files",
    )
    parser.add_argument(
        "--project", metavar="NAME", help="Phoenix project to read (default: 'default'); only with --phoenix"
    )
    parser.add_argument(
        "--engine",
        choices=("python", "chdb"),
        default="python",
        help="python: the streaming audit (default); chdb: load PATHs into the ClickHouse exporter's otel_traces"
        " table in embedded chDB and run the audit's SQL (etf-otel[chdb])",
    )
    parser.add_argument(
        "--clickhouse",
        metavar="URL",
        help="run the audit's SQL on the ClickHouse server at URL (http[s]://[user[:password]@]host[:port]), over"
        " the tables of the Collector's clickhouse exporter (etf-otel[clickhouse])",
    )
    parser.add_argument("--database", metavar="NAME", help="database of otel_traces (default: otel); with --clickhouse")
    parser.add_argument(
        "--since",
        metavar="TIME",
        help="SQL engines only: audit traces with a span starting at or after TIME (ISO 8601, UTC unless an offset"
        " is given, or a duration ago: 30m, 2h, 7d)",
    )
    parser.add_argument("--until", metavar="TIME", help="SQL engines only: ... and before TIME")
    parser.add_argument("--json", action="store_true", help="print one JSON document for machines")
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress bar on stderr (it is shown only when stderr is a terminal)",
    )


def run_audit(
    paths: list[str],
    *,
    json_output: bool,
    progress: bool,
    phoenix: str | None = None,
    project: str | None = None,
    engine: str = "python",
    clickhouse: str | None = None,
    database: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> int:
    """Audit the exports at ``paths`` (or a Phoenix server); prints the report, returns the exit code (SPEC 8)."""
    if engine != "python" or clickhouse is not None or database is not None or since is not None or until is not None:
        if phoenix is not None or project is not None:
            print("etf-otel audit: --phoenix takes no SQL option (--engine, --clickhouse, ...)", file=sys.stderr)
            return EXIT_BAD_INPUT
        from etf_otel.audit.sources.sql import run_sql_audit

        return run_sql_audit(
            paths,
            json_output=json_output,
            engine=engine,
            clickhouse=clickhouse,
            database=database,
            since=since,
            until=until,
        )
    if phoenix is not None or project is not None:
        from etf_otel.audit.sources.phoenix import run_phoenix_audit

        return run_phoenix_audit(phoenix, project, paths, json_output=json_output, progress=progress)
    if not paths:
        print("etf-otel audit: give at least one PATH, or --phoenix URL", file=sys.stderr)
        return EXIT_BAD_INPUT
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    from etf_otel.audit.sources.otlp_json import InputStats, OtlpInputError, expand_paths, iter_spans, total_bytes

    errors = Console(stderr=True)
    stats = InputStats()
    try:
        files = expand_paths(paths)
    except OtlpInputError as error:
        print(f"etf-otel audit: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    size = total_bytes(files)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[spans]} spans"),
        TimeRemainingColumn(),
        console=errors,
        transient=True,
        disable=not (progress and errors.is_terminal),
    )
    reading = bar.add_task("reading", total=size or None, spans=0)

    def advance(count: int) -> None:
        bar.update(reading, advance=count, spans=stats.spans)

    def expected(spans_so_far: int) -> int:
        done = stats.bytes_read or 1
        return int(spans_so_far * max(size, done) / done) + 1

    def read_progress(count: int) -> None:
        stats.bytes_read += count
        advance(count)

    checking = bar.add_task("checking", total=None, visible=False, spans=0)

    def on_group(done: int, total: int) -> None:
        bar.update(checking, completed=done, total=total, visible=True, spans=stats.spans)

    report = AuditReport()
    try:
        with bar:
            audit_spans(
                iter_spans(files, stats, read_progress),
                report=report,
                partitioner=Partitioner(expected_spans=expected),
                on_group=on_group,
            )
    except OtlpInputError as error:
        print(f"etf-otel audit: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        print(f"etf-otel audit: cannot use temporary storage: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report.files, report.records, report.skipped_records, report.spans = (
        stats.files,
        stats.records,
        stats.skipped_records,
        stats.spans,
    )
    if stats.spans == 0:
        print(f"etf-otel audit: no OTLP trace spans in {len(files)} input file(s)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return report.emit(json_output)
