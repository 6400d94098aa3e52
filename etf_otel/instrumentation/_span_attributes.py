"""The attributes of etf-otel's spans, built from assembly results (docs/telemetry.md).

Kept apart from :mod:`~etf_otel.instrumentation._telemetry`, which starts and ends the spans:
these functions only map results onto the bounded attribute values the contract names. Every
string an id, a name or a provider can make arbitrarily long is cut to ``MAX_RECORDED_CHARS``
(:func:`bounded`, :func:`put_call_id`, :func:`put_tool_name`); the process keeps the whole value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from opentelemetry.util.types import AttributeValue

from etf_otel import attributes as A
from etf_otel.core._history import Drift
from etf_otel.core._linkage import Finding
from etf_otel.core._pairing_model import PairingCheck
from etf_otel.core._results import AssemblyResult, Rejection
from etf_otel.core._vocabulary import VALUE_OF, ErrorCategory, StreamState, Transition
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.protocols import bounded_finish_reason

__all__ = [
    "COMPAT_SPAN_COUNTERS",
    "INCOMPLETE",
    "answered_attributes",
    "bounded",
    "count_compatibility",
    "drift_attributes",
    "finding_attributes",
    "pairing_attributes",
    "put_call_id",
    "put_tool_name",
    "response_attributes",
    "response_error",
]

COMPAT_SPAN_COUNTERS: Final[dict[Transition, str]] = {
    Transition.KEEP_NULL: A.ETF_ID_KEPT_NULL,
    Transition.KEEP_EMPTY: A.ETF_ID_KEPT_EMPTY,
    Transition.INFER_INDEX: A.ETF_ID_INFERRED_INDEX,
    Transition.BUFFER_EARLY: A.ETF_ID_BUFFERED_EARLY,
    Transition.DROP_LATE: A.ETF_ID_DROPPED_LATE,
    Transition.POSITIONAL: A.ETF_ID_POSITIONAL,
    Transition.DROP_REPEAT: A.ETF_ID_DROPPED_REPEAT,
    Transition.ABSENT_ARGUMENTS: A.ETF_TOOL_CALL_ABSENT_ARGUMENTS,
}
"""The call-span attribute counting each compatibility transition (docs/telemetry.md).

A transition missing here is left off the span (it is still counted on
``etf.tool_call.id_transitions``): a transition the telemetry has no name for never fails a span."""

_MAX: Final = A.MAX_RECORDED_CHARS


def bounded(text: str) -> str:
    """``text`` as recorded: cut to ``MAX_RECORDED_CHARS`` characters."""
    return text if len(text) <= _MAX else text[:_MAX]


def put_call_id(attributes: dict[str, AttributeValue], call_id: str) -> None:
    """``gen_ai.tool.call.id``, cut and flagged (``etf.tool_call.id_truncated``) when too long."""
    if len(call_id) <= _MAX:
        attributes[A.GEN_AI_TOOL_CALL_ID] = call_id
    else:
        attributes[A.GEN_AI_TOOL_CALL_ID] = call_id[:_MAX]
        attributes[A.ETF_TOOL_CALL_ID_TRUNCATED] = True


def put_tool_name(attributes: dict[str, AttributeValue], name: str) -> str:
    """``gen_ai.tool.name``, cut and flagged (``etf.tool_call.name_truncated``) when too long;
    returns the name as recorded, for the span name that repeats it."""
    if len(name) > _MAX:
        name = name[:_MAX]
        attributes[A.ETF_TOOL_CALL_NAME_TRUNCATED] = True
    attributes[A.GEN_AI_TOOL_NAME] = name
    return name


_TRUNCATED: Final = ErrorCategory.TRUNCATED_STREAM.value
INCOMPLETE: Final = ErrorCategory.INCOMPLETE_RESPONSE.value


def response_error(state: StreamState, rejections: Sequence[Rejection]) -> str | None:
    """The response span's ``error.type``, if any (docs/telemetry.md): ``truncated_stream`` unless
    ``completed``, else ``incomplete_response``, else the first rejection that belongs to no call
    (``missing_index``, ``unknown_slot``, ``snapshot_mismatch`` of the final list). A call's own
    categories stay on its span."""
    if state is not StreamState.COMPLETED:
        return _TRUNCATED
    if not rejections:
        return None
    unattached: ErrorCategory | None = None
    for rejection in rejections:
        if rejection.category is ErrorCategory.INCOMPLETE_RESPONSE:
            return INCOMPLETE
        if unattached is None and rejection.index is None:
            unattached = rejection.category
    return None if unattached is None else unattached.value


def response_attributes(
    result: AssemblyResult,
    state: StreamState,
    base: dict[str, AttributeValue],
    protocol: str | None,
    error_type: str | None,
    streamed: bool = True,
) -> dict[str, AttributeValue]:
    """The start attributes of an ``assemble_response`` span."""
    attributes: dict[str, AttributeValue] = {
        A.ETF_RESPONSE_STREAMED: streamed,
        A.ETF_STREAM_STATE: VALUE_OF[state],
        A.GEN_AI_RESPONSE_FINISH_REASONS: [bounded_finish_reason(reason) for reason in result.finish_reasons],
        A.ETF_STREAM_SLOTS: len(result.calls),
        A.ETF_STREAM_FRAGMENTS: result.fragments,
        A.ETF_STREAM_DISPATCHABLE: result.dispatchable,
        **base,
    }
    if protocol is not None:
        attributes[A.ETF_PROTOCOL] = protocol
    if error_type is not None:
        attributes[A.ERROR_TYPE] = error_type
    return attributes


def count_compatibility(transitions: Iterable[tuple[Transition, int]], attributes: dict[str, AttributeValue]) -> None:
    """A call's compatibility transition counts as span attributes (``etf.id.kept_null``, ...).

    A transition without a span name is skipped, anything unexpected is logged and dropped:
    the span is recorded anyway."""
    with internal_errors_swallowed("counting compatibility transitions"):
        for transition, count in transitions:
            counter = COMPAT_SPAN_COUNTERS.get(transition)
            if counter is not None and type(count) is int:
                attributes[counter] = count


def finding_attributes(finding: Finding) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {A.ETF_ERROR_CATEGORY: finding.category.value}
    if finding.call_id is not None:  # only ever a preserved, proposed id
        put_call_id(attributes, finding.call_id)
    if finding.reason is not None:  # one of A.ORPHAN_REASONS
        attributes[A.ETF_LINKAGE_ORPHAN_REASON] = finding.reason
    if finding.name is not None:  # a protocol that links by name (Gemini): the only key of an id-less call
        put_tool_name(attributes, finding.name)
    return attributes


def drift_attributes(drift: Drift) -> dict[str, AttributeValue]:
    """An ``etf.linkage.drift`` event: its kind, the proposal's preserved id (``id_replaced``) and the call's name."""
    attributes: dict[str, AttributeValue] = {A.ETF_DIVERGENCE_KIND: drift.kind.value}
    if drift.call_id is not None:  # only ever a preserved, proposed id
        put_call_id(attributes, drift.call_id)
    if drift.name is not None:
        put_tool_name(attributes, drift.name)
    return attributes


def answered_attributes(
    answered: Sequence[str], limit: int, ambiguous: bool = False, spans: Sequence[str] = ()
) -> dict[str, AttributeValue]:
    """The settlement evidence of a new request, for its ``assemble_response`` span (docs/telemetry.md).

    ``answered`` are the previous response's proposals the request answered (preserved, proposed
    ids only: :meth:`~etf_otel.core._linkage.Conversation.settle`); at most ``limit`` are kept,
    the rest counted. Nothing when the request answered nothing. ``ambiguous``: the request was
    not judged, its evidence pointing to no single response (``etf.linkage.ambiguous``). ``spans``: the span ids
    of the id-less proposals it answered (``etf.linkage.answered_spans``, at most ``limit``): no id names them,
    and the audit matches their settlement by span."""
    attributes: dict[str, AttributeValue] = {}
    if spans and limit > 0:
        attributes[A.ETF_LINKAGE_ANSWERED_SPANS] = list(spans[:limit])
    if not answered:
        return {**attributes, A.ETF_LINKAGE_AMBIGUOUS: True} if ambiguous else attributes
    kept = [bounded(call_id) for call_id in answered[: max(limit, 0)]]
    if kept:
        attributes[A.ETF_LINKAGE_ANSWERED_IDS] = kept
        if any(len(call_id) > _MAX for call_id in answered[: len(kept)]):
            attributes[A.ETF_TOOL_CALL_ID_TRUNCATED] = True
    if len(answered) > len(kept):
        attributes[A.ETF_LINKAGE_ANSWERED_IDS_DROPPED] = len(answered) - len(kept)
    return attributes


def pairing_attributes(check: PairingCheck | None) -> dict[str, AttributeValue]:
    """``etf.request.pairing = "broken"`` and its problems and reasons (each once, sorted); none when clean."""
    if check is None or not check.broken:
        return {}
    return {
        A.ETF_REQUEST_PAIRING: A.PAIRING_BROKEN,
        A.ETF_REQUEST_PAIRING_PROBLEMS: list(check.kinds),
        A.ETF_REQUEST_PAIRING_REASONS: list(check.reasons),
    }
