"""Every span, event, attribute and metric name etf-otel emits, in one place.

``gen_ai.*`` and ``error.type`` mirror the OpenTelemetry semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/ and .../general/recording-errors/);
they are copied here rather than imported from ``opentelemetry.semconv._incubating``,
which is private and moves between releases. ``etf.*`` names are this project's and are
fixed by docs/telemetry.md: dashboards and alerts depend on them.
"""

from __future__ import annotations

from typing import Final

from etf_otel.core._vocabulary import OTHER

__all__ = [
    "ADK_MERGED_TOOLS",
    "ENV_ALLOW",
    "ENV_CAPTURE_CONTENT",
    "ENV_DENY",
    "ENV_DISABLED_INSTRUMENTATIONS",
    "ENV_GUARD",
    "ENV_GUARD_REQUESTS",
    "ENV_MAX_CONVERSATIONS",
    "ENV_PROVIDER_NAME",
    "ERROR_TYPE",
    "ETF_CHOICE_INDEX",
    "ETF_DIVERGENCE_KIND",
    "ETF_ERROR_CATEGORY",
    "ETF_GUARD_REFUSED",
    "ETF_IDENTITY_REJECTED_DROPPED",
    "ETF_ID_BUFFERED_EARLY",
    "ETF_ID_DROPPED_LATE",
    "ETF_ID_DROPPED_REPEAT",
    "ETF_ID_EMPTY",
    "ETF_ID_INFERRED_INDEX",
    "ETF_ID_KEPT_EMPTY",
    "ETF_ID_KEPT_NULL",
    "ETF_ID_KIND",
    "ETF_ID_POSITIONAL",
    "ETF_ID_PRIOR_PRESENT",
    "ETF_ID_TRANSITION",
    "ETF_LINKAGE_AMBIGUOUS",
    "ETF_LINKAGE_ANSWERED_IDS",
    "ETF_LINKAGE_ANSWERED_IDS_DROPPED",
    "ETF_LINKAGE_ANSWERED_SPANS",
    "ETF_LINKAGE_ORPHAN_REASON",
    "ETF_MCP_MATCH",
    "ETF_MCP_META_REJECTED",
    "ETF_PAIRING_PROBLEM",
    "ETF_PAIRING_REASON",
    "ETF_PROTOCOL",
    "ETF_REQUEST_PAIRING",
    "ETF_REQUEST_PAIRING_PROBLEMS",
    "ETF_REQUEST_PAIRING_REASONS",
    "ETF_REQUEST_PAIRING_REFUSED",
    "ETF_RESPONSE_STREAMED",
    "ETF_STREAM_DISPATCHABLE",
    "ETF_STREAM_FRAGMENTS",
    "ETF_STREAM_SLOTS",
    "ETF_STREAM_STATE",
    "ETF_TOOL_CALL_ABSENT_ARGUMENTS",
    "ETF_TOOL_CALL_CATEGORIES",
    "ETF_TOOL_CALL_FRAGMENTS",
    "ETF_TOOL_CALL_ID_SOURCE",
    "ETF_TOOL_CALL_ID_TRUNCATED",
    "ETF_TOOL_CALL_INDEX",
    "ETF_TOOL_CALL_NAME_TRUNCATED",
    "ETF_TOOL_CALL_VERDICT",
    "EVENT_IDENTITY_REJECTED",
    "EVENT_INTEGRITY_VIOLATION",
    "EVENT_LINKAGE_DRIFT",
    "EXECUTE_TOOL_DURATION_BUCKETS",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "INSTRUMENTATION_NAME",
    "MAX_RECORDED_CHARS",
    "MCP_MATCH_VALUES",
    "MCP_META_PROPOSAL",
    "MCP_META_REJECTED_VALUES",
    "MCP_META_TOOL_CALL_ID",
    "MCP_METHOD_NAME",
    "MCP_METHOD_TOOLS_CALL",
    "METRIC_EXECUTE_TOOL_DURATION",
    "METRIC_FRAGMENTS",
    "METRIC_IDENTITY_ERRORS",
    "METRIC_ID_TRANSITIONS",
    "METRIC_INTEGRITY_VIOLATIONS",
    "METRIC_LINKAGE_DRIFT",
    "METRIC_REQUEST_PAIRING_PROBLEMS",
    "METRIC_STREAMS",
    "METRIC_TOOL_CALLS",
    "OPERATION_EXECUTE_TOOL",
    "ORPHAN_CONCATENATED_IDS",
    "ORPHAN_REASONS",
    "ORPHAN_REJECTED_CALL",
    "ORPHAN_REJECTED_INCOMING_ID",
    "ORPHAN_UNKNOWN",
    "PAIRING_BROKEN",
    "PAIRING_REFUSED_UNEXPLAINED",
    "SPAN_ASSEMBLE_RESPONSE",
    "SPAN_ASSEMBLE_TOOL_CALL",
    "SPAN_EXECUTE_TOOL",
    "TOOL_CALL_ID_SOURCE_MCP_META",
    "TOOL_NAME_OTHER",
    "TOOL_TYPE_FUNCTION",
]

INSTRUMENTATION_NAME: Final = "etf_otel"
"""Tracer and meter name (docs/telemetry.md)."""

# --- spans --------------------------------------------------------------------------------
SPAN_ASSEMBLE_TOOL_CALL: Final = "assemble_tool_call"
SPAN_EXECUTE_TOOL: Final = "execute_tool"
SPAN_ASSEMBLE_RESPONSE: Final = "assemble_response"

# --- span events --------------------------------------------------------------------------
EVENT_IDENTITY_REJECTED: Final = "etf.identity.rejected"
EVENT_INTEGRITY_VIOLATION: Final = "etf.integrity.violation"
EVENT_LINKAGE_DRIFT: Final = "etf.linkage.drift"
"""A request's history differs from the proposals without breaking anything (``etf.divergence.kind``:
``id_replaced``, ``call_fabricated``, ``refusal_answered``): recorded on the request's response span, never a
violation (docs/categories.md, "Violation or drift")."""

# --- GenAI semantic conventions -------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
ERROR_TYPE: Final = "error.type"

OPERATION_EXECUTE_TOOL: Final = "execute_tool"
TOOL_TYPE_FUNCTION: Final = "function"
ADK_MERGED_TOOLS: Final = "(merged tools)"
"""``gen_ai.tool.name`` of Google ADK's ``execute_tool (merged)`` span: a summary ADK records after parallel
calls ran (each has its own ``execute_tool`` span), under the id of its merged response event, which no model
sent. The audit reads it as structure, not as an execution."""

# --- bounded diagnostics (docs/telemetry.md) ---------------------------------------------------
ETF_ID_KIND: Final = "etf.id.kind"
ETF_ID_PRIOR_PRESENT: Final = "etf.id.prior_present"
ETF_ID_EMPTY: Final = "etf.id.empty"
ETF_ID_TRANSITION: Final = "etf.id.transition"
ETF_ERROR_CATEGORY: Final = "etf.error.category"
ETF_TOOL_CALL_INDEX: Final = "etf.tool_call.index"
ETF_CHOICE_INDEX: Final = "etf.choice.index"
ETF_PROTOCOL: Final = "etf.protocol"
"""The wire protocol's name (``WireProtocol.name``): on ``assemble_response`` and ``etf.streams`` only."""

# --- tool call and stream attributes ---------------------------------------------------------
ETF_TOOL_CALL_FRAGMENTS: Final = "etf.tool_call.fragments"
ETF_TOOL_CALL_VERDICT: Final = "etf.tool_call.verdict"
ETF_TOOL_CALL_CATEGORIES: Final = "etf.tool_call.categories"
MAX_RECORDED_CHARS: Final = 256
"""The longest string etf-otel records as an attribute value (ids, names, ``error.type``, ...):
a longer one is recorded cut to this many characters. Linkage inside the process keeps the whole value."""
ETF_TOOL_CALL_ID_TRUNCATED: Final = "etf.tool_call.id_truncated"
"""``true`` beside a ``gen_ai.tool.call.id`` (or ``etf.linkage.answered_ids``) of which at least one
id was longer than :data:`MAX_RECORDED_CHARS` and is recorded cut; absent otherwise."""
ETF_TOOL_CALL_NAME_TRUNCATED: Final = "etf.tool_call.name_truncated"
"""``true`` beside a ``gen_ai.tool.name`` longer than :data:`MAX_RECORDED_CHARS`, recorded cut
(as is the span name that repeats it); absent otherwise."""
ETF_IDENTITY_REJECTED_DROPPED: Final = "etf.identity.rejected.dropped"
ETF_ID_KEPT_NULL: Final = "etf.id.kept_null"
ETF_ID_KEPT_EMPTY: Final = "etf.id.kept_empty"
ETF_ID_INFERRED_INDEX: Final = "etf.id.inferred_index"
ETF_ID_BUFFERED_EARLY: Final = "etf.id.buffered_early"
ETF_ID_DROPPED_LATE: Final = "etf.id.dropped_late"
ETF_ID_DROPPED_REPEAT: Final = "etf.id.dropped_repeat"
ETF_ID_POSITIONAL: Final = "etf.id.positional"
ETF_TOOL_CALL_ABSENT_ARGUMENTS: Final = "etf.tool_call.absent_arguments"
"""``1`` on the call of a complete body that had no ``arguments`` key, read as ``{}`` by the compatibility
rule ``absent_arguments_in_body`` (transition ``absent_arguments``); absent otherwise."""
ETF_STREAM_STATE: Final = "etf.stream.state"
ETF_STREAM_SLOTS: Final = "etf.stream.slots"
ETF_STREAM_FRAGMENTS: Final = "etf.stream.fragments"
ETF_STREAM_DISPATCHABLE: Final = "etf.stream.dispatchable"
ETF_RESPONSE_STREAMED: Final = "etf.response.streamed"
"""``true`` on the ``assemble_response`` span of a streamed response, ``false`` on a complete body
(``create()`` without ``stream``): no fragments, the same rules."""
ETF_GUARD_REFUSED: Final = "etf.guard.refused"
ETF_DIVERGENCE_KIND: Final = "etf.divergence.kind"

# --- settlement evidence (docs/telemetry.md) -----------------------------------------------------
ETF_LINKAGE_ANSWERED_IDS: Final = "etf.linkage.answered_ids"
"""On the ``assemble_response`` span of a request that settled the previous response of its
conversation: the previous response's proposals that request answered (preserved, proposed ids only)."""
ETF_LINKAGE_ANSWERED_IDS_DROPPED: Final = "etf.linkage.answered_ids_dropped"
ETF_LINKAGE_ANSWERED_SPANS: Final = "etf.linkage.answered_spans"
"""Beside ``etf.linkage.answered_ids``: the previous response's id-less proposals (identity by position, no id
to name them) the request answered, by the span ids of their ``assemble_tool_call`` spans (16 lowercase hex
digits, at most as many as ``etf.linkage.answered_ids`` keeps)."""
"""Answered proposals beyond the bound of ``etf.linkage.answered_ids`` (only when non-zero)."""
ETF_LINKAGE_AMBIGUOUS: Final = "etf.linkage.ambiguous"
"""``true`` on the ``assemble_response`` span of a request that carried results but whose evidence
(call ids, ``previous_response_id``, message prefix) pointed to no single earlier response: that
request was not judged (no linkage violation)."""
ETF_LINKAGE_ORPHAN_REASON: Final = "etf.linkage.orphan_reason"
"""On an ``orphaned_result`` violation event and audit finding: why the result's id matches no
proposal, one of :data:`ORPHAN_REASONS`."""
ORPHAN_CONCATENATED_IDS: Final = "concatenated_ids"
"""The id is two or more of the response's proposal ids run together (the ``openai`` SDK's accumulator)."""
ORPHAN_REJECTED_CALL: Final = "rejected_call"
"""The id of a call the identity rules rejected."""
ORPHAN_REJECTED_INCOMING_ID: Final = "rejected_incoming_id"
"""An incoming id the rules refused to establish (such as a conflicting second id of a call)."""
ORPHAN_UNKNOWN: Final = "unknown"
"""None of the above (an id the model or the application made up)."""
ORPHAN_REASONS: Final = (ORPHAN_CONCATENATED_IDS, ORPHAN_REJECTED_CALL, ORPHAN_REJECTED_INCOMING_ID, ORPHAN_UNKNOWN)

# --- the request before it is sent: pairing (docs/telemetry.md, docs/protocols.md) ------------------
ETF_REQUEST_PAIRING: Final = "etf.request.pairing"
"""On the ``assemble_response`` span of a request: :data:`PAIRING_BROKEN` when the provider's pairing rules
refuse its history, :data:`PAIRING_REFUSED_UNEXPLAINED` when the provider refused it for pairing and the check
found nothing; absent when consistent."""
PAIRING_BROKEN: Final = "broken"
PAIRING_REFUSED_UNEXPLAINED: Final = "refused_unexplained"
ETF_REQUEST_PAIRING_PROBLEMS: Final = "etf.request.pairing_problems"
"""The problems of a broken request, each once, sorted (``result_without_call``, ``call_without_result``,
``duplicate_result``, ``duplicate_call_id``, ``id_rejected_by_target``)."""
ETF_REQUEST_PAIRING_REASONS: Final = "etf.request.pairing_reasons"
"""Why, each once, sorted (``history_trimmed``, ``id_rewritten``, ``concatenated_ids``, ``unknown``)."""
ETF_REQUEST_PAIRING_REFUSED: Final = "etf.request.pairing_refused"
"""``true`` when the provider refused a request the check had found broken: the refusal was predicted."""
ETF_PAIRING_PROBLEM: Final = "etf.pairing.problem"
"""Metric label of ``etf.request.pairing_problems``: one problem kind."""
ETF_PAIRING_REASON: Final = "etf.pairing.reason"
"""Metric label of ``etf.request.pairing_problems``: that problem's reason."""

# --- tool hosts in other processes: MCP (docs/mcp.md) ------------------------------------------
MCP_META_TOOL_CALL_ID: Final = "io.github.etf-otel/tool_call_id"
"""``params._meta`` key of a ``tools/call`` request: the preserved id of the proposal it executes.
MCP reserves unprefixed ``_meta`` keys; a reverse-DNS prefix keeps this one ours."""
MCP_META_PROPOSAL: Final = "io.github.etf-otel/proposal"
"""``params._meta`` key: the proposal's ``assemble_tool_call`` span as a W3C ``traceparent`` string,
the link target of the remote execution."""
MCP_METHOD_NAME: Final = "mcp.method.name"
"""Set by the ``mcp`` SDK on its CLIENT and SERVER spans."""
MCP_METHOD_TOOLS_CALL: Final = "tools/call"
ETF_MCP_MATCH: Final = "etf.mcp.match"
"""On the ``mcp`` SDK's CLIENT span of a ``tools/call``: how the call was matched to a proposal,
one of :data:`MCP_MATCH_VALUES`."""
MCP_MATCH_VALUES: Final = ("explicit", "unique", "ambiguous", "unmatched")
ETF_TOOL_CALL_ID_SOURCE: Final = "etf.tool_call.id_source"
"""On an execution span in another process: where its ``gen_ai.tool.call.id`` came from
(``mcp_meta``), the explicit opt-in of docs/telemetry.md for ids the host did not see proposed."""
TOOL_CALL_ID_SOURCE_MCP_META: Final = "mcp_meta"
ETF_MCP_META_REJECTED: Final = "etf.mcp.meta_rejected"
"""On the SERVER span of a ``tools/call``: why an etf-otel ``_meta`` value was not used, a list of
:data:`MCP_META_REJECTED_VALUES` (bounded; the value itself is never recorded)."""
MCP_META_REJECTED_VALUES: Final = (
    "call_id_not_string",
    "call_id_empty",
    "call_id_too_long",
    "call_id_not_printable",
    "proposal_unparsed",
)

# --- metrics (docs/telemetry.md) ------------------------------------------------------------------
METRIC_FRAGMENTS: Final = "etf.tool_call.fragments"
METRIC_ID_TRANSITIONS: Final = "etf.tool_call.id_transitions"
METRIC_IDENTITY_ERRORS: Final = "etf.tool_call.identity_errors"
METRIC_INTEGRITY_VIOLATIONS: Final = "etf.integrity.violations"
METRIC_LINKAGE_DRIFT: Final = "etf.linkage.drift"
METRIC_TOOL_CALLS: Final = "etf.tool_calls"
METRIC_STREAMS: Final = "etf.streams"
METRIC_REQUEST_PAIRING_PROBLEMS: Final = "etf.request.pairing_problems"
"""Broken requests' problems, by ``etf.pairing.problem``, ``etf.pairing.reason`` and ``gen_ai.provider.name``."""
METRIC_EXECUTE_TOOL_DURATION: Final = "gen_ai.execute_tool.duration"

EXECUTE_TOOL_DURATION_BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
"""Explicit seconds buckets: the SDK's defaults assume milliseconds."""

TOOL_NAME_OTHER: Final = OTHER
"""The metric value for tool names past the cap of distinct names."""

# --- configuration -------------------------------------------------------------------------
ENV_CAPTURE_CONTENT: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENV_DISABLED_INSTRUMENTATIONS: Final = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
ENV_PROVIDER_NAME: Final = "OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME"
"""``provider_name``: the ``gen_ai.provider.name`` of every response (docs/configuration.md)."""
ENV_ALLOW: Final = "OTEL_INSTRUMENTATION_ETF_ALLOW"
"""``allow``: compatibility rule names, comma-separated; an unknown name is ignored with a warning."""
ENV_DENY: Final = "OTEL_INSTRUMENTATION_ETF_DENY"
"""``deny``: compatibility rule names to turn off (a default one too), comma-separated; wins over ``allow``."""
ENV_GUARD: Final = "OTEL_INSTRUMENTATION_ETF_GUARD"
"""``guard``: ``true`` or ``false``, the default of the hosts a setup wraps."""
ENV_GUARD_REQUESTS: Final = "ETF_OTEL_GUARD_REQUESTS"
"""``guard_requests``: ``true`` makes an instrumented SDK refuse a request whose pairing is broken
(``RequestPairingError``) before it is sent (AGENT-STACKS 11.8 names this variable)."""
ENV_MAX_CONVERSATIONS: Final = "OTEL_INSTRUMENTATION_ETF_MAX_CONVERSATIONS"
"""``max_conversations``: the conversations each instrumentor's indexes remember (a positive integer)."""
