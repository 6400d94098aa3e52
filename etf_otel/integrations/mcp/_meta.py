"""The two etf-otel keys of a ``tools/call`` request's ``params._meta`` (docs/mcp.md).

Both sides of the process boundary read them here, so the client writes exactly what the
server accepts. MCP reserves unprefixed ``_meta`` keys for itself; ours carry the
reverse-DNS prefix ``io.github.etf-otel/`` (:data:`~etf_otel.attributes.MCP_META_TOOL_CALL_ID`,
:data:`~etf_otel.attributes.MCP_META_PROPOSAL`).

Whatever arrives is untrusted: a value is used only when it parses, bounded, and a value that
does not is named by a reason from a closed list, never recorded itself.
"""

from __future__ import annotations

from typing import Final

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["MAX_CALL_ID_CHARS", "format_proposal", "parse_call_id", "parse_proposal"]

MAX_CALL_ID_CHARS: Final = 256
"""The longest ``_meta`` call id a server records; providers' ids are far shorter."""

_MAX_TRACEPARENT_CHARS: Final = 64
_PROPAGATOR: Final = TraceContextTextMapPropagator()
_TRACEPARENT: Final = "traceparent"


def parse_call_id(value: object) -> tuple[str | None, str | None]:
    """``(call id, None)`` when ``value`` is usable, else ``(None, reason)`` (``MCP_META_REJECTED_VALUES``)."""
    if not isinstance(value, str):
        return None, "call_id_not_string"
    if not value:
        return None, "call_id_empty"
    if len(value) > MAX_CALL_ID_CHARS:
        return None, "call_id_too_long"
    if not value.isprintable():
        return None, "call_id_not_printable"
    return value, None


def parse_proposal(value: object) -> SpanContext | None:
    """The proposal's span context from a W3C ``traceparent`` string, ``None`` unless it is valid.

    The OpenTelemetry propagator parses it (version, lengths, hex, all-zero ids), as it parses
    the ``traceparent`` the SDK injects beside it.
    """
    if not isinstance(value, str) or len(value) > _MAX_TRACEPARENT_CHARS:
        return None
    span_context = trace.get_current_span(_PROPAGATOR.extract({_TRACEPARENT: value})).get_span_context()
    return span_context if span_context.is_valid else None


def format_proposal(span_context: SpanContext) -> str | None:
    """``span_context`` as a W3C ``traceparent`` string (the propagator's own format)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(NonRecordingSpan(span_context)))
    return carrier.get(_TRACEPARENT)
