"""OpenTelemetry instrumentor for Google ADK: every tool an agent runs, an execution of a preserved call.

``ADKInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the ``etf_otel_adk``
entry point) hooks two modules when the application imports them (never importing them here):

* ``google.adk.flows.llm_flows.tools._caller._call_tool_async(tool, args, tool_context)``: where ADK
  runs a tool the model called (a ``FunctionTool``, sync or async, in ``Runner`` and ``InMemoryRunner``,
  streamed or not), after its before-tool callbacks. The call's id is ``tool_context.function_call_id``.
  Gemini 2.x and Vertex AI send calls without ids, and ADK then makes one up (``adk-<uuid>``) before it
  runs them: such a run is matched to its call by name and order in the latest response
  (:func:`~etf_otel.integrations._tool_runs.positional_proposal`), and the made-up id is recorded as
  drift ``id_invented``, never as the call's id. A call the wire carried with an id is matched by it.
* ``google.adk.telemetry.tracing.trace_tool_call``: when ADK's own tracing is on, its
  ``execute_tool <name>`` span is the current span while the tool runs; it is enriched (link, slot or
  preserved id, divergence and drift events), never doubled, and ADK's end-of-run write of its own id
  to ``gen_ai.tool.call.id`` on that span is left out (the span keeps the preserved id, or none).
  Without ADK's tracing an ``execute_tool`` span of ours is opened around the run.

ADK's ``execute_tool (merged)`` span (parallel calls, under a response event's id) is no execution: the
audit reads it as structure (:data:`~etf_otel.attributes.ADK_MERGED_TOOLS`).

Guard mode refuses a run that is not a valid proposal before the tool runs, through ADK's own tool-error
channel: the run returns ``{"error": ...}`` (the shape ADK answers an unknown tool with), which ADK's
after-tool callbacks see and sends to the model as the tool's response, and the agent goes on.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Collection
from contextlib import aclosing
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import wrapt
from opentelemetry import trace

from etf_otel import attributes as A
from etf_otel.instrumentation import _open_calls as open_calls
from etf_otel.instrumentation import _positional as positional
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._accumulators import ObjectProxy
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    dependency_met,
    instrumented,
    remove_own_wrapper,
)
from etf_otel.integrations._tool_runs import RunningTool, ToolRuns

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ADKInstrumentor", "instrument_adk"]

_DEPENDENCY: Final = "google-adk >= 2.14.1"
_CALLER: Final = "google.adk.flows.llm_flows.tools._caller"
_TRACING: Final = "google.adk.telemetry.tracing"
_RUNNERS: Final = "google.adk.runners"
_INVENTED_PREFIX: Final = "adk-"
"""ADK's ``AF_FUNCTION_CALL_ID_PREFIX``: the ids it makes up for calls the wire carried without one."""
_LOCK = threading.RLock()


class _KeepsCallId(ObjectProxy):
    """ADK's execution span as ``trace_tool_call`` is handed it: every write but ``gen_ai.tool.call.id``
    (ADK's id, possibly made up: the span already carries the preserved one, or none) goes through."""

    def set_attribute(self, key: str, value: Any) -> None:
        if key != A.GEN_AI_TOOL_CALL_ID:
            self.__wrapped__.set_attribute(key, value)


def _adk_span(name: str | None) -> trace.Span | None:
    """ADK's own ``execute_tool <name>`` span, when it is the current span and recording."""
    span = trace.get_current_span()
    if name and span.is_recording() and getattr(span, "name", None) == f"{A.SPAN_EXECUTE_TOOL} {name}":
        return span
    return None


class ADKInstrumentor(ClientInstrumentor):
    """Records the tools Google ADK runs as executions of the preserved calls.

    ``instrument(tracer_provider=None, meter_provider=None, guard=None, ...)``, the options of
    :class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`; ``guard`` (or
    ``OTEL_INSTRUMENTATION_ETF_GUARD``) refuses a run that is not a valid proposal. Instrument
    ``google-genai`` too (``etf_otel_google_genai``): its responses hold the proposals.
    ``uninstrument()`` restores ADK.
    """

    _runs: ToolRuns | None = None
    _generation = 0
    _enriched: dict[int, bool] = {}  # replaced per instrument(); BaseInstrumentor makes one instance
    """ADK's execution spans (by ``id()``) that got a proposal's identity, until ADK traces the run's end."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return (_DEPENDENCY,)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, _ = self._set_up(kwargs)
        self._runs = ToolRuns(instrumentation)
        self._enriched = {}
        with _LOCK:
            self._generation += 1
            generation = self._generation
        for module in (_CALLER, _TRACING, _RUNNERS):
            wrapt.register_post_import_hook(partial(self._wrap, generation), module)

    def _wrappers(self) -> dict[str, tuple[str, Any]]:
        """The function wrapped in each module, and its wrapper."""
        return {
            _CALLER: ("_call_tool_async", self._call_tool),
            _TRACING: ("trace_tool_call", self._trace_tool_call),
            _RUNNERS: ("Runner.run_async", self._run),
        }

    def _wrap(self, generation: int, module: Any) -> None:
        """Wrap ``module``'s function once the application imports it (a hook ``uninstrument()`` undid: nothing)."""
        with _LOCK, internal_errors_swallowed("instrumenting google-adk"):
            if generation != self._generation or not _checked_version():
                return
            name, wrapper = self._wrappers()[module.__name__]
            owner, _, attribute = name.rpartition(".")
            if not callable(getattr(vars(module).get(owner) if owner else module, attribute, None)):
                raise TypeError("google-adk does not have the layout this version of etf-otel knows")
            wrapt.wrap_function_wrapper(module, name, wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        with _LOCK:
            self._generation += 1
            for module_name, (name, wrapper) in self._wrappers().items():
                module = sys.modules.get(module_name)
                if module is not None:
                    owner, _, attribute = name.rpartition(".")
                    remove_own_wrapper(getattr(module, owner) if owner else module, wrapper, attribute)
        if self._runs is not None:
            self._runs.close()
            self._runs = None
        self._instrumentation = None

    async def _run(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> AsyncIterator[Any]:
        """``Runner.run_async``: ADK reads a model response in one task and runs its calls in others; the
        run's context shares what its tasks read (the latest response, its id-less calls)."""
        with open_calls.sharing_with_tasks(), positional.sharing_with_tasks():
            async with aclosing(wrapped(*args, **kwargs)) as events:
                async for event in events:
                    yield event

    async def _call_tool(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``_call_tool_async(tool, args, tool_context)``: the run recorded; a refused run returns ADK's error
        result instead of running the tool."""
        running = None
        if self._runs is not None and not _disabled():
            with internal_errors_swallowed("observing an ADK tool run"):
                running = self._start(*_call_fields(args, kwargs))
        if running is None:
            return await wrapped(*args, **kwargs)
        if running.refusal is not None:
            refused = running.refused()
            running.end()
            return {"error": str(refused)}
        return await running.acall(wrapped, *args, **kwargs)

    def _start(self, tool: Any, arguments: Any, tool_context: Any) -> RunningTool | None:
        runs = self._runs
        if runs is None:
            return None
        name = getattr(tool, "name", None)
        name = name if isinstance(name, str) else None
        call_id = getattr(tool_context, "function_call_id", None)
        call_id = call_id if isinstance(call_id, str) and call_id else None
        invented = call_id is not None and call_id.startswith(_INVENTED_PREFIX)
        span = _adk_span(name)
        running = runs.start(call_id, name, arguments, span, positional=invented)
        if span is not None and running.proposal is not None:
            self._enriched[id(span)] = True
        return running

    def _trace_tool_call(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """ADK records a run's end on its span: on a span we enriched, its id write is left out."""
        with internal_errors_swallowed("keeping the preserved id on ADK's span"):
            span = kwargs.get("span") or trace.get_current_span()
            if len(args) < 5 and self._enriched.pop(id(span), False):
                kwargs = {**kwargs, "span": _KeepsCallId(span)}
        return wrapped(*args, **kwargs)


def _call_fields(args: Any, kwargs: Any) -> tuple[Any, Any, Any]:
    """``(tool, args, tool_context)`` of a ``_call_tool_async`` call, however it was passed."""
    names = ("tool", "args", "tool_context")
    values = [args[i] if i < len(args) else kwargs.get(key) for i, key in enumerate(names)]
    return values[0], values[1], values[2]


def _checked_version() -> bool:
    return dependency_met(_DEPENDENCY, "Google ADK's tool runs are not recorded")


def instrument_adk(**options: Unpack[InstrumentorOptions]) -> ADKInstrumentor:
    """One line for manual use: record the tools Google ADK runs and return the instrumentor."""
    return instrumented(ADKInstrumentor(), options)
