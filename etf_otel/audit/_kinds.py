"""The closed set of what the audit finds, :class:`FindingKind`, and the kinds' fixed categories.

Its own module so that the data model (``etf_otel.audit._model``, which re-exports both) stays readable: the
kinds are the audit's vocabulary, shared by the Python engine, ``sql/audit_findings.sql`` and docs/cli.md.
Pure: no I/O, no OpenTelemetry.
"""

from __future__ import annotations

from enum import Enum

from etf_otel.core._vocabulary import ErrorCategory

__all__ = ["FIXED_CATEGORY", "FindingKind"]


class FindingKind(str, Enum):
    """What the audit found (closed set), named after the evidence: the span or message it is in.

    A kind is not a category. Each finding also carries the error category of docs/categories.md (the
    vocabulary of ``replay`` and the telemetry): fixed per kind in :data:`FIXED_CATEGORY`, else the span's
    or event's. The values are the ``kind`` of ``audit --json`` and of ``sql/audit_findings.sql``, one name
    each (docs/cli.md#findings; tests/cli/test_cli_contract.py checks they agree).
    """

    ORPHANED_EXECUTION = "orphaned_execution"
    """An execution (an ``execute_tool`` span, or one MCP ``tools/call``: ``audit.executions``) whose call id
    and link match no ``assemble_tool_call`` of the trace."""
    DUPLICATE_EXECUTION = "duplicate_execution"
    """A proposal executed more than once (one finding per extra execution)."""
    UNANSWERED_CALL = "unanswered_call"
    """A proposal a settlement recorded as unanswered (an ``unanswered_call`` event naming it), on that span."""
    EXECUTION_WITHOUT_RESULT = "execution_without_result"
    """A call executed only with host errors (``error.type``), and no tool message or settlement answers it."""
    EXECUTED_REJECTED = "executed_rejected"
    """An execution of a rejected call, or of any call of a truncated or otherwise non-dispatchable response."""
    RECORDED_REJECTION = "recorded_rejection"
    """A response the rules rejected (``etf.stream.dispatchable = false``), executed or not: the application
    may have acted on what its SDK assembled. On the ``assemble_response`` span, with its blocking category."""
    REFUSED_EXECUTION = "refused_execution"
    """Guard mode refused an execution (``etf.guard.refused``): the guard held, the attempt is reported."""
    ORPHANED_TOOL_MESSAGE = "orphaned_tool_message"
    """A ``role: tool`` message (``gen_ai.input.messages``, ``gen_ai.tool.message`` event) matching no proposal."""
    RECORDED_VIOLATION = "recorded_violation"
    """An ``etf.integrity.violation`` event the instrumentation recorded (not already found by the audit)."""
    REQUEST_PAIRING = "request_pairing"
    """A request the provider's pairing rules refuse, as the instrumentation recorded it on the request's span
    (``etf.request.pairing`` = ``broken``), or a pairing refusal it did not predict (``refused_unexplained``):
    the ``detail`` lists the problems, the reasons and whether the provider refused it."""
    MISSING_SPAN = "missing_span"
    """A parent or link points at a span that never arrived (started but never exported, or not in the input)."""
    MALFORMED_SPAN = "malformed_span"
    """An etf-otel span without an attribute the contract requires (docs/telemetry.md), or an MCP SERVER
    span whose call id contradicts its CLIENT span's."""
    UNJUDGED = "unjudged"
    """Informational, not a problem: a valid proposal neither executed nor settled by a later request
    (no ``etf.linkage.answered_ids`` naming it, no ``unanswered_call`` event): the input has no evidence either way;
    or an execution whose call id several traces proposed (ids are matched across traces only when unique)."""
    UNIDENTIFIED_EXECUTION = "unidentified_execution"
    """Informational: an execution with no call id and no link (an OpenLLMetry tool span): nothing names its call."""
    RESPONSE_NOT_OBSERVED = "response_not_observed"
    """Informational: an execution whose id no observed response proposed, in a trace with an unobserved LLM call."""
    UNOBSERVED_LLM_CALL = "unobserved_llm_call"
    """Informational: another instrumentation's LLM span with no ``assemble_response`` near it (``_responses``)."""
    HISTORY_DRIFT = "history_drift"
    """Informational unless the audit is strict: an ``etf.linkage.drift`` event, a request whose history is
    self-consistent but differs from what the model proposed (``id_replaced``, ``call_fabricated``,
    ``refusal_answered``). Drift breaks nothing the provider or the model sees, so it is counted, not failed on;
    ``--strict`` (``AuditReport.strict``) makes it count as a finding."""


FIXED_CATEGORY: dict[FindingKind, str | None] = {
    FindingKind.ORPHANED_EXECUTION: ErrorCategory.ORPHANED_RESULT.value,
    FindingKind.DUPLICATE_EXECUTION: ErrorCategory.DUPLICATE_RESULT.value,
    FindingKind.UNANSWERED_CALL: ErrorCategory.UNANSWERED_CALL.value,
    FindingKind.EXECUTION_WITHOUT_RESULT: ErrorCategory.UNANSWERED_CALL.value,
    FindingKind.ORPHANED_TOOL_MESSAGE: ErrorCategory.ORPHANED_RESULT.value,
    FindingKind.REQUEST_PAIRING: None,
    FindingKind.MISSING_SPAN: None,
    FindingKind.MALFORMED_SPAN: None,
    FindingKind.UNIDENTIFIED_EXECUTION: None,
    FindingKind.RESPONSE_NOT_OBSERVED: None,
    FindingKind.UNOBSERVED_LLM_CALL: None,
    FindingKind.HISTORY_DRIFT: None,
}
"""Kinds with a fixed category; the others take theirs from the span or event."""
