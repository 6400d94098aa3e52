"""Turning assembly results and executions into spans, events and metrics (docs/telemetry.md).

Spans and metric updates happen once per call and once per response, never per
fragment: the observer records plain diagnostics while the stream flows, and this module
emits everything when the response is finalized, with each ``assemble_tool_call`` span
back-dated to its slot's first fragment. Only the OpenTelemetry API is used; providers
are passed in or taken from the global defaults.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from typing import Final

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from etf_otel import attributes as A
from etf_otel._version import __version__
from etf_otel.core._history import Drift
from etf_otel.core._linkage import Conversation, Finding
from etf_otel.core._pairing_model import PairingCheck
from etf_otel.core._results import AssemblyResult, ToolCall
from etf_otel.core._vocabulary import VALUE_OF, ErrorCategory, StreamState, Verdict
from etf_otel.instrumentation import _counters
from etf_otel.instrumentation import _linkage as linkage
from etf_otel.instrumentation import _open_calls as open_calls
from etf_otel.instrumentation._counters import totals_for
from etf_otel.instrumentation._registry import ProposalRecord, ProposalRegistry, ToolNameCap, arguments_value_hash
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._span_attributes import (
    INCOMPLETE,
    answered_attributes,
    bounded,
    count_compatibility,
    drift_attributes,
    finding_attributes,
    pairing_attributes,
    put_call_id,
    put_tool_name,
    response_attributes,
    response_error,
)

__all__ = ["ProposalRecord", "Telemetry", "capture_content_enabled"]

DEFAULT_MAX_TOOL_NAMES = 64
DEFAULT_MAX_REJECTED_EVENTS = 16
DEFAULT_MAX_CONTENT_CHARS = 4096
DEFAULT_MAX_PROPOSALS = 4096
DEFAULT_MAX_ANSWERED_IDS = 64
"""Ids kept in ``etf.linkage.answered_ids`` per response span (the rest are counted)."""


def capture_content_enabled() -> bool:
    """Whether ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` opts in to content."""
    value = os.environ.get(A.ENV_CAPTURE_CONTENT, "").strip().lower()
    return value in ("true", "1", "yes", "span_only", "span_and_event")


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…[truncated]"


_PROPOSED: Final = Verdict.PROPOSED  # a module global: reading it off the enum class is slower

_RECORDING_A_CALL: Final = internal_errors_swallowed("recording a tool call")
"""Stateless, so one instance serves every call."""


class Telemetry:
    """Tracer, instruments and the bounded state shared by every wrapper of one setup."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        provider_name: str | None = None,
        capture_content: bool | None = None,
        max_tool_names: int = DEFAULT_MAX_TOOL_NAMES,
        max_rejected_events: int = DEFAULT_MAX_REJECTED_EVENTS,
        max_content_chars: int = DEFAULT_MAX_CONTENT_CHARS,
        max_proposals: int = DEFAULT_MAX_PROPOSALS,
        max_answered_ids: int = DEFAULT_MAX_ANSWERED_IDS,
    ) -> None:
        self.tracer = trace.get_tracer(
            A.INSTRUMENTATION_NAME, __version__, tracer_provider, schema_url="https://opentelemetry.io/schemas/1.37.0"
        )
        meter = metrics.get_meter(A.INSTRUMENTATION_NAME, __version__, meter_provider)
        self.provider_name = provider_name
        self.capture_content = capture_content_enabled() if capture_content is None else capture_content
        self.max_rejected_events = max_rejected_events
        self.max_content_chars = max_content_chars
        self.max_answered_ids = max_answered_ids
        self.tool_name_label = ToolNameCap(max_tool_names)
        self.proposals = ProposalRegistry(max_proposals)
        self.guarding = False
        """Whether a guarded host uses this setup: only then is each proposal's canonical value hashed."""
        self._base: dict[str, AttributeValue] = (
            {A.GEN_AI_PROVIDER_NAME: bounded(provider_name)} if provider_name else {}
        )

        self.counters = totals_for(meter_provider)
        self.execute_duration = meter.create_histogram(
            A.METRIC_EXECUTE_TOOL_DURATION,
            unit="s",
            description="Duration of tool executions.",
            explicit_bucket_boundaries_advisory=list(A.EXECUTE_TOOL_DURATION_BUCKETS),
        )

    # --- responses -------------------------------------------------------------------------

    def base_attributes(self, provider_name: str | None = None) -> dict[str, AttributeValue]:
        """Attributes every span and metric of one response carries (the provider, if known)."""
        if provider_name:
            return {A.GEN_AI_PROVIDER_NAME: bounded(provider_name)}
        return self._base

    # long: runs once per finalized response; every start attribute of its span in one pass (issue 7's budget)
    def record_response(
        self,
        result: AssemblyResult,
        state: StreamState,
        parent: Context | None,
        started_ns: int,
        conversation: Conversation | None = None,
        base: dict[str, AttributeValue] | None = None,
        findings: Sequence[Finding] = (),
        protocol: str | None = None,
        answered: Sequence[str] = (),
        ambiguous: bool = False,
        streamed: bool = True,
        drift: Sequence[Drift] = (),
        pairing: PairingCheck | None = None,
        answered_spans: Sequence[str] = (),
    ) -> tuple[dict[str, ProposalRecord], dict[tuple[int, int], SpanContext]]:
        """Emit the spans and metrics of one finalized response; returns its proposal records by id (its own, whatever
        another thread registers) and each call's span context by ``(choice, index)`` (an id-less call's link).
        ``findings`` (counted), ``answered`` and ``answered_spans`` (id-less, by span) settled the last response;
        ``ambiguous``: not judged; ``protocol``: span and ``etf.streams``; ``streamed``: ``False`` for a body;
        ``drift``, ``pairing``: that request's ``etf.linkage.drift`` events, its pairing check (counted already)."""
        ended_ns = time.time_ns()
        base = self._base if base is None else base
        registered: dict[str, ProposalRecord] = {}
        error_type = response_error(state, result.rejections)
        with internal_errors_swallowed("counting a response"):
            provider, incomplete = base.get(A.GEN_AI_PROVIDER_NAME), error_type == INCOMPLETE
            self.counters.add_response(result, state, provider, protocol, self.tool_name_label, incomplete)
        call_spans: dict[tuple[int, int], SpanContext] = {}
        attributes = response_attributes(result, state, base, protocol, error_type, streamed)
        settled = answered_attributes(answered, self.max_answered_ids, ambiguous, answered_spans)
        attributes.update(settled | pairing_attributes(pairing))
        stream_span = self.tracer.start_span(
            A.SPAN_ASSEMBLE_RESPONSE,
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=started_ns,
        )
        try:
            with internal_errors_swallowed("describing a response"):
                if error_type is not None:
                    stream_span.set_status(Status(StatusCode.ERROR))
                if (findings or drift) and stream_span.is_recording():
                    _add_linkage_events(stream_span, findings, drift)
            # The calls are children of the response span, itself a child of the current span:
            # one trace holds the response, its calls and (through links) their executions.
            in_response = trace.set_span_in_context(stream_span, parent)
            guard = _RECORDING_A_CALL
            for call in result.calls:
                with guard:
                    context = self._record_call(
                        call, result.dispatchable, in_response, started_ns, ended_ns, base, registered
                    )
                    if context is not None:
                        call_spans[call.choice, call.index] = context
        finally:
            stream_span.end(end_time=ended_ns)
            if conversation is not None:
                linkage.responded(conversation, result)
        return registered, call_spans

    # long: runs once per finalized call; one frame, start attributes in one pass (issue 7's budget)
    def _record_call(
        self,
        call: ToolCall,
        dispatchable: bool,
        parent: Context | None,
        started_ns: int,
        ended_ns: int,
        base: dict[str, AttributeValue],
        registered: dict[str, ProposalRecord],
    ) -> SpanContext | None:
        """One ``assemble_tool_call`` span, and the call's proposal record (also put in ``registered``); returns
        the span's context.

        Everything known before the span starts is passed as start attributes (one
        validation pass in the SDK, and samplers see it); only a rejected call (status,
        events) or content capture touches the span afterwards.
        """
        span: Span | None = None
        name = call.name  # whole in the proposal record; cut on the span (``shown``)
        shown = name
        try:
            attributes: dict[str, AttributeValue] = {
                A.ETF_CHOICE_INDEX: call.choice,
                A.ETF_TOOL_CALL_INDEX: call.index,
                A.ETF_TOOL_CALL_FRAGMENTS: call.fragments,
                A.ETF_TOOL_CALL_VERDICT: VALUE_OF[call.verdict],
            }
            if base:
                attributes.update(base)
            if name is not None:
                shown = put_tool_name(attributes, name)
            if call.id is not None:
                put_call_id(attributes, call.id)
            if call.transitions:
                count_compatibility(call.transitions, attributes)
            if call.categories:
                attributes[A.ETF_TOOL_CALL_CATEGORIES] = [category.value for category in call.categories]
                attributes[A.ERROR_TYPE] = call.categories[0].value
            span = self.tracer.start_span(
                f"{A.SPAN_ASSEMBLE_TOOL_CALL} {shown}" if shown else A.SPAN_ASSEMBLE_TOOL_CALL,
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                start_time=call.opened_ns if call.opened_ns is not None else started_ns,
            )
            if call.categories or self.capture_content:
                with internal_errors_swallowed("describing a tool call"):
                    self._describe_call(span, call)
        finally:
            try:
                if span is not None:
                    span.end(end_time=call.closed_ns if call.closed_ns is not None else ended_ns)
            finally:
                # Guard mode and links depend on this record: it is kept even when the span failed.
                if call.id is not None:
                    record = ProposalRecord(
                        span.get_span_context() if span is not None else None,
                        dispatchable and call.verdict is _PROPOSED,
                        call.verdict,
                        call.categories[0] if call.categories else None,  # a blocked call has its response's
                        name,
                        hash(call.arguments),
                        arguments_value_hash(call.arguments) if self.guarding or open_calls.tracking() else None,
                        call.index,
                    )
                    self.proposals.add(call.id, record)
                    registered[call.id] = record
        return span.get_span_context() if span is not None else None

    def _describe_call(self, span: Span, call: ToolCall) -> None:
        """A rejected call's status and events, and (opted in) its arguments."""
        if span.is_recording():
            if call.categories:
                span.set_status(Status(StatusCode.ERROR))
            shown = call.rejected_fragments[: self.max_rejected_events]
            for rejected in shown:
                span.add_event(
                    A.EVENT_IDENTITY_REJECTED,
                    {
                        A.ETF_ERROR_CATEGORY: rejected.category.value,
                        A.ETF_ID_KIND: rejected.id_kind.value,
                        A.ETF_ID_PRIOR_PRESENT: rejected.prior_id_present,
                        A.ETF_ID_EMPTY: rejected.id_empty,
                        A.ETF_ID_TRANSITION: rejected.transition.value,
                        A.ETF_TOOL_CALL_INDEX: call.index,
                        A.ETF_CHOICE_INDEX: call.choice,
                    },
                    timestamp=rejected.time_ns,
                )
            dropped = call.rejected_count - len(shown)
            if dropped:
                span.set_attribute(A.ETF_IDENTITY_REJECTED_DROPPED, dropped)
            if self.capture_content:
                span.set_attribute(A.GEN_AI_TOOL_CALL_ARGUMENTS, _truncate(call.arguments, self.max_content_chars))

    # --- linkage ---------------------------------------------------------------------------

    def count_findings(self, findings: Iterable[Finding], base: dict[str, AttributeValue] | None = None) -> None:
        """Count linkage findings on ``etf.integrity.violations``."""
        provider = (self._base if base is None else base).get(A.GEN_AI_PROVIDER_NAME)
        for finding in findings:
            self.counters.add(_counters.INTEGRITY_VIOLATIONS, (finding.category.value, provider))

    def count_drift(self, drift: Iterable[Drift], base: dict[str, AttributeValue] | None = None) -> None:
        """Count drift records on ``etf.linkage.drift`` (never on ``etf.integrity.violations``)."""
        provider = (self._base if base is None else base).get(A.GEN_AI_PROVIDER_NAME)
        for entry in drift:
            self.counters.add(_counters.LINKAGE_DRIFT, (entry.kind.value, provider))

    def record_findings(self, findings: Sequence[Finding], span: Span | None = None) -> None:
        """Count linkage findings and add one ``etf.integrity.violation`` event each to ``span``."""
        self.count_findings(findings)
        target = span if span is not None else trace.get_current_span()
        if target.is_recording():
            for finding in findings:
                target.add_event(A.EVENT_INTEGRITY_VIOLATION, finding_attributes(finding))

    def record_divergence(self, kinds: Sequence[str], span: Span | None = None, call_id: str | None = None) -> None:
        """Count a wrapped assembler's divergences from the rules (``divergent_assembly``); ``call_id``:
        the preserved id of the one call they are about (an execution's), named on each event."""
        target = span if span is not None else trace.get_current_span()
        for kind in kinds:
            self.counters.add(
                _counters.INTEGRITY_VIOLATIONS,
                (ErrorCategory.DIVERGENT_ASSEMBLY.value, self._base.get(A.GEN_AI_PROVIDER_NAME)),
            )
            if target.is_recording():
                attributes: dict[str, AttributeValue] = {
                    A.ETF_ERROR_CATEGORY: ErrorCategory.DIVERGENT_ASSEMBLY.value,
                    A.ETF_DIVERGENCE_KIND: kind,
                }
                if call_id:
                    put_call_id(attributes, call_id)
                target.add_event(A.EVENT_INTEGRITY_VIOLATION, attributes)

    # --- executions ------------------------------------------------------------------------

    def start_execution(
        self, call_id: str | None, name: str | None, record: ProposalRecord | None, record_unverified_id: bool
    ) -> Span:
        attributes: dict[str, AttributeValue] = {
            A.GEN_AI_OPERATION_NAME: A.OPERATION_EXECUTE_TOOL,
            A.GEN_AI_TOOL_TYPE: A.TOOL_TYPE_FUNCTION,
            **self._base,
        }
        if name:
            name = put_tool_name(attributes, name)
        if call_id and (record is not None or record_unverified_id):
            put_call_id(attributes, call_id)
        links = [Link(record.span_context)] if record is not None and record.span_context is not None else None
        return self.tracer.start_span(
            f"{A.SPAN_EXECUTE_TOOL} {name}" if name else A.SPAN_EXECUTE_TOOL,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )

    def end_execution(
        self,
        span: Span,
        name: str | None,
        started: float,
        error: BaseException | None,
        result: object = None,
        error_type: str | None = None,
        *,
        ended: tuple[float, int] | None = None,
    ) -> None:
        """End an execution's span and record its duration. ``ended``: ``(perf_counter(), time_ns())``
        when it ended earlier than now (an execution whose span waited for its call's span to link to)."""
        try:
            kind = self.record_execution_duration(
                name, started, error, error_type, ended_at=None if ended is None else ended[0]
            )
            if kind is not None:
                span.set_attribute(A.ERROR_TYPE, kind)
                span.set_status(Status(StatusCode.ERROR))
            elif self.capture_content and span.is_recording() and result is not None:
                span.set_attribute(A.GEN_AI_TOOL_CALL_RESULT, _truncate(str(result), self.max_content_chars))
        finally:
            span.end(end_time=None if ended is None else ended[1])

    def record_execution_duration(
        self,
        name: str | None,
        started: float,
        error: BaseException | None,
        error_type: str | None = None,
        *,
        ended_at: float | None = None,
    ) -> str | None:
        """Record an execution's duration (``etf.execute_tool.duration``; ``ended_at``: its ``perf_counter()``
        end when earlier than now); returns its ``error.type``, if it failed."""
        duration = (time.perf_counter() if ended_at is None else ended_at) - started
        metric_attributes: dict[str, AttributeValue] = {A.GEN_AI_TOOL_NAME: self.tool_name_label(name)}
        kind: str | None = None
        if error is not None or error_type is not None:
            kind = bounded(error_type or type(error).__qualname__)
            metric_attributes[A.ERROR_TYPE] = kind
        self.execute_duration.record(duration, metric_attributes)
        return kind


def _add_linkage_events(span: Span, findings: Sequence[Finding], drift: Sequence[Drift]) -> None:
    """A request's linkage on its response span: one violation event per finding, one drift event per record."""
    for finding in findings:
        span.add_event(A.EVENT_INTEGRITY_VIOLATION, finding_attributes(finding))
    for entry in drift:
        span.add_event(A.EVENT_LINKAGE_DRIFT, drift_attributes(entry))
