"""The tool host's side of MCP: which proposal a ``tools/call`` executes (docs/mcp.md, "Server").

The ``mcp`` SDK already opens one SERVER span per ``tools/call`` (``tools/call {name}``,
``gen_ai.operation.name = execute_tool``) in its ``OpenTelemetryMiddleware``, a child of the
client's span through the ``traceparent`` in ``_meta``. That span is the execution: it is
enriched here, from inside the middleware (the SDK's span is the current one when the
middleware calls the rest of the chain), never doubled. A server whose middleware list has no
``OpenTelemetryMiddleware`` gets one ``execute_tool {name}`` SERVER span of ours instead.

What is recorded is evidence, not trust. ``gen_ai.tool.call.id`` comes from
``_meta["io.github.etf-otel/tool_call_id"]``, an id this process never saw proposed: reading it
is the explicit opt-in the telemetry contract asks for ids from elsewhere, and
``etf.tool_call.id_source = "mcp_meta"`` says where it came from. The server cannot know
whether the id was proposed, answered already elsewhere or refused by a guard, so it records
no ``etf.integrity.violation``: every linkage category needs the proposals or the other
executions, and the audit, which sees all the processes' spans, judges them. A value that does
not parse is only named (``etf.mcp.meta_rejected``); the call goes on unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from etf_otel import attributes as A
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._span_attributes import bounded, put_call_id, put_tool_name
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations.mcp._meta import parse_call_id, parse_proposal

__all__ = ["enrich_execution", "fallback_wrapper", "middleware_wrapper"]

_TOOL_ERROR = "tool_error"


def enrich_execution(span: Span, meta: object) -> None:
    """Add what ``meta`` (a request's ``_meta``) says about the proposal to the execution ``span``."""
    if not span.is_recording():
        return
    attributes: dict[str, AttributeValue] = {A.GEN_AI_TOOL_TYPE: A.TOOL_TYPE_FUNCTION}
    rejected: list[str] = []
    if isinstance(meta, Mapping):
        if A.MCP_META_TOOL_CALL_ID in meta:
            call_id, reason = parse_call_id(meta[A.MCP_META_TOOL_CALL_ID])
            if call_id is not None:
                put_call_id(attributes, call_id)  # at most MAX_CALL_ID_CHARS already (parse_call_id)
                attributes[A.ETF_TOOL_CALL_ID_SOURCE] = A.TOOL_CALL_ID_SOURCE_MCP_META
            elif reason is not None:
                rejected.append(reason)
        if A.MCP_META_PROPOSAL in meta:
            proposal = parse_proposal(meta[A.MCP_META_PROPOSAL])
            if proposal is not None:
                span.add_link(proposal)
            else:
                rejected.append("proposal_unparsed")
    if rejected:
        attributes[A.ETF_MCP_META_REJECTED] = rejected
    span.set_attributes(attributes)


def _tools_call(context: object) -> bool:
    return getattr(context, "method", None) == A.MCP_METHOD_TOOLS_CALL


async def middleware_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``OpenTelemetryMiddleware.__call__(ctx, call_next)``: ``call_next`` first enriches the SDK's span."""
    if len(args) != 2 or kwargs or not _tools_call(args[0]) or _disabled():
        return await wrapped(*args, **kwargs)
    context, call_next = args

    async def enriched_call_next(inner: Any) -> Any:
        with internal_errors_swallowed("enriching an MCP execution"):
            enrich_execution(trace.get_current_span(), getattr(context, "meta", None))
        return await call_next(inner)

    return await wrapped(context, enriched_call_next)


def _has_sdk_span(middleware: object) -> bool:
    from mcp.server._otel import OpenTelemetryMiddleware

    return isinstance(middleware, list) and any(isinstance(item, OpenTelemetryMiddleware) for item in middleware)


def fallback_wrapper(tracer: trace.Tracer) -> Callable[..., Any]:
    """A wrapper of ``ServerRunner._compose_server_middleware``: our span where the SDK opens none."""

    def compose(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        composed = wrapped(*args, **kwargs)
        with internal_errors_swallowed("checking an MCP server's middleware"):
            if not _disabled() and not _has_sdk_span(getattr(getattr(instance, "server", None), "middleware", None)):
                return partial(_own_execution, tracer, composed)
        return composed

    return compose


def _is_tool_error(result: object) -> bool:
    if isinstance(result, Mapping):
        return result.get("isError") is True
    return getattr(result, "is_error", False) is True


async def _own_execution(tracer: trace.Tracer, call: Callable[[Any], Awaitable[Any]], context: Any) -> Any:
    """``call(context)`` inside an ``execute_tool {name}`` SERVER span when it is a ``tools/call``."""
    span = None
    with internal_errors_swallowed("starting an MCP execution"):
        if _tools_call(context):
            span = _start_own_span(tracer, context)
    if span is None:
        return await call(context)
    with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        try:
            result = await call(context)
        except BaseException as error:
            span.set_attribute(A.ERROR_TYPE, bounded(type(error).__qualname__))
            span.set_status(Status(StatusCode.ERROR))
            raise
        if _is_tool_error(result):
            span.set_attribute(A.ERROR_TYPE, _TOOL_ERROR)
            span.set_status(Status(StatusCode.ERROR))
        return result


def _start_own_span(tracer: trace.Tracer, context: Any) -> Span:
    from mcp.shared._otel import extract_trace_context

    params = getattr(context, "params", None)
    name = params.get("name") if isinstance(params, Mapping) else None
    attributes: dict[str, AttributeValue] = {
        A.GEN_AI_OPERATION_NAME: A.OPERATION_EXECUTE_TOOL,
        A.MCP_METHOD_NAME: A.MCP_METHOD_TOOLS_CALL,
    }
    if isinstance(name, str):
        name = put_tool_name(attributes, name)
    meta = getattr(context, "meta", None)
    span = tracer.start_span(
        f"{A.SPAN_EXECUTE_TOOL} {name}" if isinstance(name, str) else A.SPAN_EXECUTE_TOOL,
        context=extract_trace_context(meta if isinstance(meta, Mapping) else None),
        kind=SpanKind.SERVER,
        attributes=attributes,
    )
    with internal_errors_swallowed("enriching an MCP execution"):
        enrich_execution(span, meta)
    return span
