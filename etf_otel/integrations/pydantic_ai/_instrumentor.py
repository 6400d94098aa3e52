"""OpenTelemetry instrumentor for ``pydantic_ai``: every tool an agent runs, an execution of a preserved call.

``PydanticAIInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_pydantic_ai`` entry point) hooks ``pydantic_ai.tool_manager.ToolManager`` and
``Agent.iter`` when the application imports them (never importing them here). Every run method
of an agent (``run``, ``run_sync``, ``run_stream``, ``run_stream_events``) enters ``Agent.iter``,
where the run's context is set to see the responses its steps' tasks read
(:func:`~etf_otel.instrumentation._open_calls.sharing_with_tasks`), and dispatches its function
tools through the tool manager:

* ``_raw_execute``: a tool about to run, with the ``ToolCallPart`` the framework assembled
  (``tool_call_id``, ``tool_name``, ``args``). It is recorded by
  :class:`~etf_otel.integrations._tool_runs.ToolRuns`: the proposal it answers (by id, else by
  content), divergence kinds where the framework's id, name or arguments differ. Where
  pydantic-ai's own instrumentation (``Agent.instrument_all()``, logfire) opened its
  ``execute_tool <name>`` span for the call, that span is the current one here: it is enriched
  (the preserved id, a link to the proposal, the divergence events), never doubled; otherwise an
  ``execute_tool`` span of ours is opened around the run.
* ``execute_tool_call``: a call whose validation failed (a name no tool has, such as a repeated
  name concatenated into ``get_weatherget_weather``, or arguments that do not parse) never
  reaches the tool; pydantic-ai answers the model with an error. It is recorded as an execution
  that failed, which names what the framework dispatched (the guard has nothing to refuse there),
  unless pydantic-ai's instrumentation recorded the validation failure itself (it does for a tool
  it knows).

Guard mode refuses a run that is not a valid proposal before the tool runs, through
pydantic-ai's own tool-error channel: the refusal reaches the framework as the tool's
``ModelRetry``, so the model receives an error result (charged to the tool's retry budget as
any retry is) and the run goes on.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import wrapt
from opentelemetry import trace

from etf_otel.instrumentation import _open_calls as open_calls
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

__all__ = ["PydanticAIInstrumentor", "instrument_pydantic_ai"]


_DEPENDENCY = "pydantic-ai-slim >= 2.60"
_AGENT: Final = "pydantic_ai.agent"
_MANAGER: Final = "pydantic_ai.tool_manager"
_LOCK = threading.RLock()


class _Refusing:
    """The toolset a refused run is handed to: its tool raises ``ModelRetry`` with the refusal.

    ``ToolManager._raw_execute`` then handles it as it handles any tool's ``ModelRetry`` (retry
    budget, the error result sent to the model, the raw exception for a caller that asked for one).
    """

    def __init__(self, message: str) -> None:
        self._message = message

    async def call_tool(self, name: str, tool_args: Any, ctx: Any, tool: Any) -> Any:
        from pydantic_ai.exceptions import ModelRetry

        raise ModelRetry(self._message)


def _refused(wrapped: Any, instance: Any, message: str) -> Any:
    """``wrapped`` (the bound ``_raw_execute``) on a copy of the manager whose toolset refuses the call.

    The copy shares the manager's retry state (``ctx``, ``failed_tools``): only where the tool is
    looked up differs, so pydantic-ai charges and answers the refusal as the tool's own ``ModelRetry``.
    """
    refusing = _Refusing(message)
    function = getattr(wrapped, "__func__", None)
    if function is None:  # another instrumentation's wrapper inside ours: refuse from here
        return lambda *args, **kwargs: refusing.call_tool("", {}, None, None)
    manager = copy.copy(instance)
    manager.toolset = refusing
    return function.__get__(manager, type(instance))


@asynccontextmanager
async def _iter(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> AsyncIterator[Any]:
    """``async with Agent.iter(...)``, which every run method enters, in the context that drives the run.

    pydantic-ai runs each step of the run (a model request, the tool calls) in a task of its own:
    inside the run, what a request's task finalized is shared with the run's context, and so with
    the tasks that run the tools, so a tool run finds the proposal of its own run even when
    concurrent runs were proposed the same ids.
    """
    with open_calls.sharing_with_tasks():
        async with wrapped(*args, **kwargs) as run:
            yield run


def _validated(args: Any, kwargs: Any) -> Any:
    return args[0] if args else kwargs.get("validated")


def _traced_by_pydantic_ai(validated: Any) -> bool:
    """Whether pydantic-ai's instrumentation records this run's tool spans (its context has a real tracer)."""
    tracer = getattr(getattr(validated, "ctx", None), "tracer", None)
    return tracer is not None and not isinstance(tracer, trace.NoOpTracer)


class PydanticAIInstrumentor(ClientInstrumentor):
    """Records the function tools ``pydantic_ai`` agents run as executions of the preserved calls.

    ``instrument(tracer_provider=None, meter_provider=None, guard=None, ...)``, the options of
    :class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`; ``guard`` (or
    ``OTEL_INSTRUMENTATION_ETF_GUARD``) refuses a run that is not a valid proposal. Instrument the
    ``openai`` / ``anthropic`` clients too: their responses hold the proposals. ``uninstrument()``
    restores pydantic-ai.
    """

    _runs: ToolRuns | None = None
    _generation = 0

    def instrumentation_dependencies(self) -> Collection[str]:
        return (_DEPENDENCY,)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, _ = self._set_up(kwargs)
        self._runs = ToolRuns(instrumentation)
        with _LOCK:
            self._generation += 1
            generation = self._generation
        for name in (_AGENT, _MANAGER):
            wrapt.register_post_import_hook(partial(self._wrap, generation), name)

    def _wrap(self, generation: int, module: Any) -> None:
        """Wrap a module's methods once the application imports it; a hook ``uninstrument()`` undid does nothing."""
        with _LOCK, internal_errors_swallowed("instrumenting pydantic-ai"):
            if generation != self._generation or not _checked_version():
                return
            for name, owner, method, wrapper in self._wrappers():
                if name == module.__name__:
                    wrapt.wrap_function_wrapper(module, f"{owner}.{method}", wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        with _LOCK:
            self._generation += 1
            for name, owner, method, wrapper in self._wrappers():
                module = sys.modules.get(name)
                if module is not None:
                    remove_own_wrapper(getattr(module, owner), wrapper, method)
        if self._runs is not None:
            self._runs.close()
            self._runs = None
        self._instrumentation = None

    def _wrappers(self) -> list[tuple[str, str, str, Any]]:
        """``(module, class, method, wrapper)`` of each method wrapped."""
        return [
            (_AGENT, "Agent", "iter", _iter),
            (_MANAGER, "ToolManager", "_raw_execute", self._raw_execute),
            (_MANAGER, "ToolManager", "execute_tool_call", self._execute_tool_call),
        ]

    def _start(self, validated: Any, span: trace.Span | None = None, runs_a_tool: bool = True) -> RunningTool | None:
        """The run of ``validated``'s call, started (``None``: not observed)."""
        runs = self._runs
        call = getattr(validated, "call", None)
        if runs is None or call is None or _disabled():
            return None
        return runs.start(call.tool_call_id, call.tool_name, call.args, span, guarded=runs_a_tool)

    async def _raw_execute(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``ToolManager._raw_execute(validated, ...)``: the tool runs (or is refused) here."""
        validated = _validated(args, kwargs)
        running = None
        with internal_errors_swallowed("observing a pydantic-ai tool run"):
            call_id = getattr(getattr(validated, "call", None), "tool_call_id", None)
            running = self._start(validated, framework_span(call_id))
        if running is None:
            return await wrapped(*args, **kwargs)
        if running.refusal is not None:
            wrapped = _refused(wrapped, instance, str(running.refused()))
        return await running.acall(wrapped, *args, **kwargs)

    async def _execute_tool_call(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``ToolManager.execute_tool_call(validated, ...)``: a dispatched call that failed validation
        is recorded here (one that passed is recorded where it runs, :meth:`_raw_execute`)."""
        validated = _validated(args, kwargs)
        running = None
        with internal_errors_swallowed("observing a pydantic-ai tool call"):
            failed = getattr(validated, "args_valid", True) is False and getattr(validated, "deferral", None) is None
            known = getattr(validated, "tool", None) is not None
            if failed and not (known and _traced_by_pydantic_ai(validated)):
                running = self._start(validated, runs_a_tool=False)  # pydantic-ai refuses it itself
        if running is None:
            return await wrapped(*args, **kwargs)
        return await running.acall(wrapped, *args, **kwargs)


def _checked_version() -> bool:
    return dependency_met(_DEPENDENCY, "pydantic-ai's tool runs are not recorded")


def instrument_pydantic_ai(**options: Unpack[InstrumentorOptions]) -> PydanticAIInstrumentor:
    """One line for manual use: record the tools pydantic-ai runs and return the instrumentor."""
    return instrumented(PydanticAIInstrumentor(), options)
