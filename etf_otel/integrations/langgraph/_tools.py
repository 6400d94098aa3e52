"""LangChain tool runs (``BaseTool.run`` / ``arun`` given a call id) recorded as executions (docs/frameworks.md).

``ToolNode`` (and ``tool.invoke(tool_call)``) hands a tool the ``ToolCall`` LangChain assembled:
``invoke`` turns it into ``run(args, tool_call_id=id)``. A run with a call id is recorded through
:class:`~etf_otel.integrations._tool_runs.ToolRuns` with the id, the tool's name and the
arguments it was handed (the arguments LangGraph injects, state, store, runtime, left out, as
LangChain leaves them out of its own callbacks). A run without a call id (the application
calling ``tool.invoke({"city": ...})``) answers no proposal and is left alone.

In guard mode a refused run does not run: it returns what a tool returns when its own
``handle_tool_error`` handles an error, a ``ToolMessage`` with ``status="error"`` for that call
id. ``ToolNode`` hands it to the graph as the call's result, whatever ``handle_tool_errors`` is,
so the model receives the refusal and the graph goes on.
"""

from __future__ import annotations

from typing import Any

from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._tool_runs import RunningTool, ToolRuns
from etf_otel.integrations.langgraph._openinference import attached, run_context

__all__ = ["REFUSAL_TEXT", "ToolWrappers"]

REFUSAL_TEXT = "Error: this tool call was refused by etf-otel's guard ({category}); it did not run."
"""The content of the error result a refused run returns to the model."""


def _call_id(kwargs: dict[str, Any]) -> str | None:
    call_id = kwargs.get("tool_call_id")
    return call_id if isinstance(call_id, str) and call_id else None


def _handed(instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    """The arguments the run was handed, injected ones left out."""
    tool_input = args[0] if args else kwargs.get("tool_input")
    if isinstance(tool_input, dict):
        filtered = getattr(instance, "_filter_injected_args", None)
        if callable(filtered):
            with internal_errors_swallowed("reading a LangChain tool's arguments"):
                return filtered(tool_input)
    return tool_input


def _refused(instance: Any, call_id: str, category: ErrorCategory) -> Any:
    """The error result a tool returns for ``call_id`` when its own error handling answers."""
    from langchain_core.messages import ToolMessage

    return ToolMessage(
        content=REFUSAL_TEXT.format(category=category.value),
        name=getattr(instance, "name", None),
        tool_call_id=call_id,
        status="error",
    )


def _result(output: Any) -> Any:
    return getattr(output, "content", output)


class ToolWrappers:
    """The wrappers of ``BaseTool.run`` and ``BaseTool.arun`` for one instrumentor's :class:`ToolRuns`."""

    def __init__(self, runs: ToolRuns) -> None:
        self._runs = runs

    def _start(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, RunningTool] | None:
        call_id = _call_id(kwargs)
        if call_id is None or _disabled():
            return None
        with internal_errors_swallowed("starting a LangChain tool run"):
            name = getattr(instance, "name", None)
            handed = _handed(instance, args, kwargs)
            running = self._runs.start(call_id, name if isinstance(name, str) else None, handed)
            return call_id, running
        return None

    def run(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        with attached(run_context()):
            return self._run(wrapped, instance, args, kwargs)

    async def arun(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        with attached(run_context()):
            return await self._arun(wrapped, instance, args, kwargs)

    def _run(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        started = self._start(instance, args, kwargs)
        if started is None:
            return wrapped(*args, **kwargs)
        call_id, running = started
        if running.refusal is not None:
            running.end()
            return _refused(instance, call_id, running.refusal)
        return running.call(wrapped, *args, result_of=_result, **kwargs)

    async def _arun(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        started = self._start(instance, args, kwargs)
        if started is None:
            return await wrapped(*args, **kwargs)
        call_id, running = started
        if running.refusal is not None:
            running.end()
            return _refused(instance, call_id, running.refusal)
        return await running.acall(wrapped, *args, result_of=_result, **kwargs)
