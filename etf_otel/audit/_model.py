"""The audit's data model: spans as any source provides them, their compact records, and findings.

A **source** yields protocol-neutral :class:`SpanData`; :func:`to_record` reduces each span to the
:class:`SpanRecord` the checks need; :func:`items_of` adds a :class:`LinkProbe` for every link into
another trace, so that the link is checked with the trace it points into. Findings are
:class:`AuditFinding` values of a closed set of kinds, :class:`FindingKind`.

Pure: plain values only, no I/O and no OpenTelemetry SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from etf_otel import attributes as A
from etf_otel.audit._foreign import foreign_call_id, is_foreign_execution, is_llm_call
from etf_otel.audit._kinds import FIXED_CATEGORY, FindingKind
from etf_otel.audit._messages import ATTR_INPUT_MESSAGES, Round, event_message_ids, input_messages, rounds
from etf_otel.audit._request import Drift, Pairing, read_drifts, read_pairing
from etf_otel.audit._sources.sql_values import positional
from etf_otel.core._divergence import DivergenceKind
from etf_otel.core._vocabulary import OTHER, ErrorCategory, Verdict

DIVERGENCE_KINDS: Final = frozenset(kind.value for kind in DivergenceKind)  # sql/audit_findings.sql lists the same

__all__ = [
    "FIXED_CATEGORY",
    "AuditFinding",
    "FindingKind",
    "Item",
    "LinkProbe",
    "Role",
    "SpanData",
    "SpanRecord",
    "items_of",
    "span_events",
    "to_record",
]

EXECUTE_TOOL_PREFIX = A.SPAN_EXECUTE_TOOL + " "
ASSEMBLE_TOOL_CALL_PREFIX = A.SPAN_ASSEMBLE_TOOL_CALL + " "
STATUS_CODE_ERROR = 2
"""``SpanData.status_code`` of a span whose status is ERROR (OTLP ``STATUS_CODE_ERROR``)."""
MATCHED = ("explicit", "unique")
"""``etf.mcp.match`` values of a CLIENT span matched to a proposal: it must carry the call id."""


class Role(str, Enum):
    """What an etf-otel span is to the checks (``OTHER``: any span they only use for structure)."""

    CALL = "call"
    RESPONSE = "response"
    EXECUTION = "execution"
    LLM = "llm"
    """Another instrumentation's LLM call (``etf_otel.audit._foreign``): observed when a response is near it."""
    REMOTE_CALL = "remote_call"
    """An ``mcp`` SDK CLIENT span of a ``tools/call`` that etf-otel enriched (``etf.mcp.match`` or a call
    id): an execution only when no execution span of the tool server is its child (``audit.executions``)."""
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
    scope: str | None = None
    """The instrumentation scope's name (``etf_otel`` for etf-otel's own spans), when the source has it."""


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
    violations: tuple[tuple[str, str | None, str | None], ...] = ()
    """The recorded ``etf.integrity.violation`` events: (category, call id, ``etf.linkage.orphan_reason`` or
    ``etf.divergence.kind``)."""
    drifts: tuple[Drift, ...] = ()
    """The recorded ``etf.linkage.drift`` events: (kind, preserved call id) (``etf_otel.audit._request``)."""
    pairing: Pairing | None = None
    """What a request's span recorded about its pairing, when it was not consistent."""
    tool_messages: tuple[str, ...] = ()
    """Every id a tool message of the span answers (its ``gen_ai.tool.message`` events, then every round)."""
    told: tuple[str, ...] = ()
    """The ids of its ``gen_ai.tool.message`` events: always judged."""
    history: tuple[Round, ...] = ()
    """The rounds of its recorded messages, when one has a tool message: the checks find the answered turn."""
    problems: tuple[str, ...] = ()
    match: str | None = None
    """``etf.mcp.match`` of a :attr:`Role.REMOTE_CALL` (one of ``MCP_MATCH_VALUES``), for the finding's detail."""
    meta_rejected: tuple[str, ...] = ()  # etf.mcp.meta_rejected of an MCP SERVER execution: why it refused our _meta
    failed: bool = False
    """Its status is ERROR: of two copies of one span that started and ended together, the failed one is kept."""


@dataclass(slots=True)
class LinkProbe:
    """A link from a span of ``source_trace`` into ``target_trace``, checked with the target.

    ``execution`` is the linking ``execute_tool`` span (or :attr:`Role.REMOTE_CALL`), matched against
    the target trace's proposals; for any other span only the target's existence is checked.
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
    if span.attributes.get(A.GEN_AI_TOOL_NAME) == A.ADK_MERGED_TOOLS:  # ADK's summary of parallel runs
        return Role.OTHER
    if (
        name == A.SPAN_EXECUTE_TOOL
        or name.startswith(EXECUTE_TOOL_PREFIX)
        or span.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OPERATION_EXECUTE_TOOL
        or is_foreign_execution(span.attributes)
    ):
        return Role.EXECUTION
    # The SDK sets gen_ai.operation.name only on its SERVER span: without it, a tools/call span is
    # the CLIENT's, whatever the source (Phoenix and the ClickHouse rows the audit loads have no span kind).
    if span.attributes.get(A.MCP_METHOD_NAME) == A.MCP_METHOD_TOOLS_CALL and (
        _string(span.attributes.get(A.GEN_AI_TOOL_CALL_ID)) or _string(span.attributes.get(A.ETF_MCP_MATCH))
    ):
        return Role.REMOTE_CALL
    if is_llm_call(span.attributes):
        return Role.LLM
    return Role.OTHER


def _violation_detail(category: str, event_attributes: dict[str, object]) -> str | None:
    """The sub-kind a violation event names: the orphan reason of an ``orphaned_result``, the divergence kind
    of a ``divergent_assembly`` (each from its closed list; anything else is dropped)."""
    if category == ErrorCategory.DIVERGENT_ASSEMBLY.value:
        kind = event_attributes.get(A.ETF_DIVERGENCE_KIND)
        return kind if isinstance(kind, str) and kind in DIVERGENCE_KINDS else None
    reason = event_attributes.get(A.ETF_LINKAGE_ORPHAN_REASON)
    return reason if isinstance(reason, str) and reason in A.ORPHAN_REASONS else None


def _read_violations(span: SpanData, problems: list[str]) -> tuple[tuple[str, str | None, str | None], ...]:
    """The recorded ``etf.integrity.violation`` events (category, call id, orphan reason or divergence kind);
    notes those without a category."""
    violations: list[tuple[str, str | None, str | None]] = []
    for name, event_attributes in span.events:
        if name == A.EVENT_INTEGRITY_VIOLATION:
            category = _string(event_attributes.get(A.ETF_ERROR_CATEGORY))
            if category is None:
                problems.append(f"{A.EVENT_INTEGRITY_VIOLATION} event without {A.ETF_ERROR_CATEGORY}")
            else:
                call_id = _string(event_attributes.get(A.GEN_AI_TOOL_CALL_ID))
                violations.append((category, call_id, _violation_detail(category, event_attributes)))
    return tuple(violations)


def _read_call(record: SpanRecord, attributes: dict[str, object], problems: list[str]) -> None:
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
    if record.verdict == Verdict.PROPOSED.value and not (record.call_id or positional(attributes)):
        problems.append(A.GEN_AI_TOOL_CALL_ID)


def _read_response(record: SpanRecord, attributes: dict[str, object], problems: list[str]) -> None:
    record.state = _string(attributes.get(A.ETF_STREAM_STATE))
    dispatchable = attributes.get(A.ETF_STREAM_DISPATCHABLE)
    if isinstance(dispatchable, bool):
        record.dispatchable = dispatchable
    if record.state is None and dispatchable is None and _string(attributes.get(A.ERROR_TYPE)) is not None:
        return  # a request refused before any response (the provider's 400, the request guard): no stream
    if record.state is None:
        problems.append(A.ETF_STREAM_STATE)
    if not isinstance(dispatchable, bool):
        problems.append(A.ETF_STREAM_DISPATCHABLE)


def _read_execution(record: SpanRecord, span: SpanData) -> None:
    attributes = span.attributes
    record.call_id = _string(attributes.get(A.GEN_AI_TOOL_CALL_ID)) or foreign_call_id(attributes)
    record.error_type = _string(attributes.get(A.ERROR_TYPE))
    if record.error_type is None and span.status_code == STATUS_CODE_ERROR:
        record.error_type = OTHER
    record.refused = attributes.get(A.ETF_GUARD_REFUSED) is True
    rejected = attributes.get(A.ETF_MCP_META_REJECTED)
    if isinstance(rejected, list):
        record.meta_rejected = tuple(value for value in rejected if value in A.MCP_META_REJECTED_VALUES)


def _read_remote_call(record: SpanRecord, span: SpanData, problems: list[str]) -> None:
    _read_execution(record, span)
    match = span.attributes.get(A.ETF_MCP_MATCH)
    record.match = match if isinstance(match, str) and match in A.MCP_MATCH_VALUES else None
    if record.match in MATCHED and record.call_id is None:
        problems.append(A.GEN_AI_TOOL_CALL_ID)


def to_record(span: SpanData) -> SpanRecord:
    """Reduce a span to what the checks need, noting contract attributes that are missing."""
    attributes = span.attributes
    role = _role(span)
    record = SpanRecord(span.trace_id, span.span_id, span.parent_span_id, role, span.start_ns, span.end_ns)
    record.failed = span.status_code == STATUS_CODE_ERROR
    if span.links:
        record.links = tuple(span.links)
    problems: list[str] = []
    if span.events:
        record.violations = _read_violations(span, problems)
        record.drifts = read_drifts(span.events)
    if span.events or ATTR_INPUT_MESSAGES in attributes:
        record.told = tuple(event_message_ids(span.events))
        record.history = rounds(input_messages(attributes))
        answers = (answer for entry in record.history for answer in entry.answers)
        record.tool_messages = (*record.told, *answers)
    if A.ETF_REQUEST_PAIRING in attributes:
        record.pairing = read_pairing(attributes)
    if role is Role.CALL:
        _read_call(record, attributes, problems)
    elif role is Role.RESPONSE:
        _read_response(record, attributes, problems)
    elif role is Role.EXECUTION:
        _read_execution(record, span)
    elif role is Role.REMOTE_CALL:
        _read_remote_call(record, span, problems)
    record.problems = tuple(problems)
    return record


EXECUTING = frozenset({Role.EXECUTION, Role.REMOTE_CALL})
"""Roles whose first cross-trace link sends the record, as an execution, to the trace it links into."""


def items_of(record: SpanRecord) -> Iterator[tuple[str, Item]]:
    """``(trace to check it with, item)``: the record itself, plus probes for cross-trace links."""
    yield record.trace_id, record
    for index, (link_trace, link_span) in enumerate(record.links):
        if link_trace != record.trace_id:
            execution = record if index == 0 and record.role in EXECUTING else None
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
    reason: str | None = None
    """Why a result or tool message is orphaned (``etf.linkage.orphan_reason``, one of ``ORPHAN_REASONS``)."""
    divergence: str | None = None
    """How an execution differs from its proposal (``etf.divergence.kind``, one of ``DIVERGENCE_KINDS``)."""

    @classmethod
    def of(
        cls,
        kind: FindingKind,
        trace_id: str,
        span_id: str | None,
        *,
        category: str | None = None,
        call_id: str | None = None,
        detail: str | None = None,
        reason: str | None = None,
        divergence: str | None = None,
    ) -> AuditFinding:
        """A finding whose category is the kind's fixed one (:data:`FIXED_CATEGORY`) when it has one."""
        if kind in FIXED_CATEGORY:
            category = FIXED_CATEGORY[kind]
        return cls(kind, trace_id, span_id, category, call_id, detail, reason, divergence)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value, "category": self.category, "span_id": self.span_id}
        if self.call_id is not None:
            out["call_id"] = self.call_id
        if self.detail is not None:
            out["detail"] = self.detail
        if self.reason is not None:
            out["orphan_reason"] = self.reason
        if self.divergence is not None:
            out["divergence_kind"] = self.divergence
        return out
