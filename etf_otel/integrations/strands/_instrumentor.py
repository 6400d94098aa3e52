"""OpenTelemetry instrumentor for Strands Agents: every tool an agent runs, an execution of a preserved call.

``StrandsInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_strands`` entry point) hooks ``strands.tools.executors._executor`` when the application
imports it (never importing it here). Strands' model calls need nothing of this module: its
``BedrockModel`` calls ``converse_stream`` / ``converse`` of a ``boto3`` client, which the Bedrock
instrumentor (``etf_otel_bedrock``) records, and whose request carries the results that settle the
previous response.

Every tool the agent loop dispatches, sequential or concurrent, in the foreground or in the
background, ends in the terminal of Strands' ``ExecuteToolStage`` middleware chain, built by
``_make_execute_tool_terminal`` and running the tool in ``_run_tool(ctx, ...)``:

* ``_make_execute_tool_terminal`` is given Strands' tracer for a run the loop dispatched, and none
  for a direct call (``agent.tool.NAME(...)``), which the application makes itself and no model
  proposed: only the terminals with a tracer are observed, and a direct call passes untouched (a
  guard never refuses it).
* ``_run_tool``: the tool about to run, with the ``toolUse`` block the framework assembled
  (``toolUseId``, ``name``, ``input``). It is recorded by
  :class:`~etf_otel.integrations._tool_runs.ToolRuns`: the proposal it answers (by id, else by
  content), divergence kinds where Strands' id, name or input differ. Where Strands' own tracing
  records the run (its tracer on a real provider), its ``execute_tool <name>`` span is the current
  span there: it is enriched (the preserved id, a link to the proposal, the divergence events), never
  doubled; otherwise an ``execute_tool`` span of ours is opened around the run. A name no tool has is
  answered by Strands with an error result: recorded as a failed run, never refused.

Guard mode refuses a run that is not a valid proposal before the tool runs, through Strands' own
tool-error channel: the run yields the error result a tool that raised would (``status: "error"``,
``"Error: ..."``), with the :class:`~etf_otel.errors.GuardRefusedError` as its exception, so
``AfterToolCallEvent`` hooks see it, the model receives the refusal as the tool's answer (Converse
requires one for every ``toolUse`` of the turn) and the agent goes on.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Collection
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import wrapt

from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    dependency_met,
    instrumented,
    remove_own_wrapper,
)
from etf_otel.integrations._tool_runs import RunningTool, ToolRuns, framework_span

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["StrandsInstrumentor", "instrument_strands"]

_DEPENDENCY: Final = "strands-agents >= 1.50"
_EXECUTOR: Final = "strands.tools.executors._executor"
_LOCK = threading.RLock()


async def _forwarded(inner: Any) -> AsyncIterator[Any]:
    """``inner``'s events; closing this closes ``inner`` at once (Strands ends its tool span in that
    cleanup, and closes its chain for it to run in its own context, not in a finalizer)."""
    try:
        async for event in inner:
            yield event
    finally:
        await inner.aclose()


def _tool_use(ctx: Any) -> dict[str, Any]:
    tool_use = getattr(ctx, "tool_use", None)
    return tool_use if isinstance(tool_use, dict) else {}


def _refusal_result(ctx: Any, running: RunningTool) -> Any:
    """The event a tool that raised the guard's refusal ends with in ``_run_tool`` (Strands' error result)."""
    from strands.types._events import ToolResultEvent

    error = running.refused()
    result: Any = {
        "toolUseId": str(_tool_use(ctx).get("toolUseId")),
        "status": "error",
        "content": [{"text": f"Error: {error}"}],
    }
    return ToolResultEvent(result, exception=error)


class StrandsInstrumentor(ClientInstrumentor):
    """Records the tools Strands Agents run as executions of the preserved calls.

    ``instrument(tracer_provider=None, meter_provider=None, guard=None, ...)``, the options of
    :class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`; ``guard`` (or
    ``OTEL_INSTRUMENTATION_ETF_GUARD``) refuses a run that is not a valid proposal. Instrument the
    Bedrock client too (``etf_otel_bedrock``): its responses hold the proposals. ``uninstrument()``
    restores Strands.
    """

    _runs: ToolRuns | None = None
    _generation = 0
    _dispatched: set[int] = set()  # replaced per instrument(); BaseInstrumentor makes one instance
    """The ids of the middleware contexts a loop-dispatched terminal is running now."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return (_DEPENDENCY,)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, _ = self._set_up(kwargs)
        self._runs = ToolRuns(instrumentation)
        self._dispatched = set()
        with _LOCK:
            self._generation += 1
            generation = self._generation
        wrapt.register_post_import_hook(partial(self._wrap, generation), _EXECUTOR)

    def _wrap(self, generation: int, module: Any) -> None:
        """Wrap the executor's functions once the application imports it (a hook ``uninstrument()`` undid:
        nothing)."""
        with _LOCK, internal_errors_swallowed("instrumenting strands"):
            if generation != self._generation or not _checked_version():
                return
            for name, _ in self._wrappers():
                if not callable(vars(module).get(name)):
                    raise TypeError("strands does not have the layout this version of etf-otel knows")
            for name, wrapper in self._wrappers():
                wrapt.wrap_function_wrapper(module, name, wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        with _LOCK:
            self._generation += 1
            module = sys.modules.get(_EXECUTOR)
            if module is not None:
                for name, wrapper in self._wrappers():
                    remove_own_wrapper(module, wrapper, name)
        if self._runs is not None:
            self._runs.close()
            self._runs = None
        self._instrumentation = None

    def _wrappers(self) -> list[tuple[str, Any]]:
        """``(function, wrapper)`` of each function of the executor module wrapped."""
        return [("_make_execute_tool_terminal", self._terminal), ("_run_tool", self._run_tool)]

    def _terminal(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``_make_execute_tool_terminal(...)``: the terminal of a run the loop dispatched (it has a tracer)
        marks its context while it runs; a direct call's terminal is returned as it is."""
        terminal = wrapped(*args, **kwargs)
        if kwargs.get("tracer") is None:
            return terminal
        return partial(self._dispatching, terminal)

    async def _dispatching(self, terminal: Any, ctx: Any) -> AsyncIterator[Any]:
        key = id(ctx)  # the context lives while its terminal runs: its id is not reused meanwhile
        self._dispatched.add(key)
        try:
            async for event in _forwarded(terminal(ctx)):
                yield event
        finally:
            self._dispatched.discard(key)

    def _run_tool(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``_run_tool(ctx, ...)``: a dispatched run observed; anything else the function's own generator."""
        ctx = args[0] if args else kwargs.get("ctx")
        if id(ctx) not in self._dispatched or self._runs is None or _disabled():
            return wrapped(*args, **kwargs)
        return self._observed(wrapped, args, kwargs, ctx)

    async def _observed(self, wrapped: Any, args: Any, kwargs: Any, ctx: Any) -> AsyncIterator[Any]:
        """The run's events as Strands yields them, recorded; a refused run yields only its error result."""
        running = None
        with internal_errors_swallowed("observing a Strands tool run"):
            running = self._start(ctx)
        if running is None:
            async for event in _forwarded(wrapped(*args, **kwargs)):
                yield event
            return
        if running.refusal is not None:
            refused = _refusal_result(ctx, running)
            running.end()
            yield refused
            return
        error: BaseException | None = None
        outcome: Any = None
        try:
            async for event in _forwarded(wrapped(*args, **kwargs)):
                if hasattr(event, "tool_result") and hasattr(event, "exception"):  # its ToolResultEvent
                    outcome = event
                yield event
        except BaseException as raised:  # an interrupt, a cancellation, the run closed early
            error = raised
            raise
        finally:
            if error is None and outcome is not None:
                error = outcome.exception  # a tool that raised: Strands made it an error result
            running.end(error, _content(outcome))

    def _start(self, ctx: Any) -> RunningTool | None:
        """The run of ``ctx``'s ``toolUse`` started (``None``: not observed)."""
        runs = self._runs
        if runs is None:
            return None
        tool_use = _tool_use(ctx)
        call_id = tool_use.get("toolUseId")
        call_id = call_id if isinstance(call_id, str) else None
        name = tool_use.get("name")
        known = getattr(ctx, "tool", None) is not None  # an unknown name: Strands answers an error itself
        return runs.start(
            call_id,
            name if isinstance(name, str) else None,
            tool_use.get("input"),
            framework_span(call_id),
            guarded=known,
        )


def _content(outcome: Any) -> object:
    """What the run answered (recorded only when content capture is on)."""
    result = getattr(outcome, "tool_result", None)
    return result.get("content") if isinstance(result, dict) else None


def _checked_version() -> bool:
    return dependency_met(_DEPENDENCY, "Strands' tool runs are not recorded")


def instrument_strands(**options: Unpack[InstrumentorOptions]) -> StrandsInstrumentor:
    """One line for manual use: record the tools Strands Agents run and return the instrumentor."""
    return instrumented(StrandsInstrumentor(), options)
