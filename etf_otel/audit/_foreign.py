"""Spans other instrumentations record, as the audit recognises them (docs/cli.md#executions-recorded-by-others).

The attribute names here are read, never emitted by etf-otel (so they are not in ``etf_otel.attributes``):

* OTel GenAI conventions (pydantic-ai ``instrument_all()``, logfire, util-genai based instrumentations):
  ``gen_ai.operation.name = execute_tool`` with ``gen_ai.tool.call.id``; LLM calls ``chat``,
  ``text_completion``, ``generate_content``;
* OpenInference: ``openinference.span.kind`` ``TOOL`` (call id ``tool_call.id`` when present) and ``LLM``;
* OpenLLMetry (traceloop): ``traceloop.span.kind = tool`` (usually no call id), LLM calls ``llm.request.type``
  ``chat`` or ``completion``.

An etf-otel span is one the instrumentation wrote: an ``assemble_*`` span, one with an ``etf.*`` attribute or
event, or one of the ``etf_otel`` instrumentation scope. Pure: plain values only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from etf_otel import attributes as A

__all__ = ["foreign_call_id", "is_etf_span", "is_foreign_execution", "is_llm_call"]

OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
OPENINFERENCE_TOOL: Final = "TOOL"
OPENINFERENCE_LLM: Final = "LLM"
OPENINFERENCE_TOOL_CALL_ID: Final = "tool_call.id"
TRACELOOP_SPAN_KIND: Final = "traceloop.span.kind"
TRACELOOP_TOOL: Final = "tool"
LLM_REQUEST_TYPE: Final = "llm.request.type"
LLM_REQUEST_TYPES: Final = frozenset({"chat", "completion"})
LLM_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})
ETF_PREFIX: Final = "etf."


def is_foreign_execution(attributes: Mapping[str, object]) -> bool:
    """A tool execution another instrumentation recorded under its own convention."""
    return (
        attributes.get(OPENINFERENCE_SPAN_KIND) == OPENINFERENCE_TOOL
        or attributes.get(TRACELOOP_SPAN_KIND) == TRACELOOP_TOOL
    )


def foreign_call_id(attributes: Mapping[str, object]) -> str | None:
    """The call id an OpenInference ``TOOL`` span carries, when it carries one."""
    value = attributes.get(OPENINFERENCE_TOOL_CALL_ID)
    return value if isinstance(value, str) and value else None


def is_llm_call(attributes: Mapping[str, object]) -> bool:
    """An LLM call another instrumentation recorded (etf-otel records its own as ``assemble_response``)."""
    return (
        attributes.get(A.GEN_AI_OPERATION_NAME) in LLM_OPERATIONS
        or attributes.get(OPENINFERENCE_SPAN_KIND) == OPENINFERENCE_LLM
        or attributes.get(LLM_REQUEST_TYPE) in LLM_REQUEST_TYPES
    )


def is_etf_span(name: str, attributes: Mapping[str, object], event_names: list[str], scope: str | None) -> bool:
    """Whether etf-otel wrote this span (its names, an ``etf.*`` attribute or event, or its scope)."""
    if name in (A.SPAN_ASSEMBLE_RESPONSE, A.SPAN_ASSEMBLE_TOOL_CALL) or name.startswith(
        A.SPAN_ASSEMBLE_TOOL_CALL + " "
    ):
        return True
    if scope is not None and (scope == A.INSTRUMENTATION_NAME or scope.startswith(A.INSTRUMENTATION_NAME + ".")):
        return True
    return any(key.startswith(ETF_PREFIX) for key in attributes) or any(
        event.startswith(ETF_PREFIX) for event in event_names
    )
