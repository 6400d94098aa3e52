"""OpenTelemetry instrumentor for openai-agents' function tools (docs/frameworks.md, "openai-agents").

``OpenAIAgentsInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_openai_agents`` entry point) records every function tool an agent runs as an
execution of the call the rules preserved (:class:`~etf_otel.integrations._tool_runs.ToolRuns`):
the preserved id, a link to its ``assemble_tool_call`` span, and the ways the run differs from
it (the Chat Completions model keeps the *last* id a stream sent for a call). The model calls
need nothing here: the agent's ``openai`` client is observed by the ``openai`` instrumentor.

Where it hooks. The runner runs every function tool through one coroutine of ``agents.tool``,
``_invoke_function_tool_with_metadata(function_tool=, context=, arguments=)``, whose
:class:`ToolContext` carries the framework's ``tool_call_id`` and ``tool_name``; the runner's
module imported it by name, so every module of the framework that binds it gets the wrapper.
A tool that raises is, by default, answered to the model with an error result by the tool's
invoker, which calls
``maybe_invoke_function_tool_failure_error_function``: that call is wrapped too, only to learn
the error the run ended with.

Guard mode answers a refused run through that same channel: the tool's failure formatter turns
the :class:`~etf_otel.errors.GuardRefusedError` into the error result the model receives, the
tool's handled-error hook runs as for a tool that raised, and the run goes on. A tool whose
``failure_error_function`` is ``None`` (the application asked raising tools to end the run)
raises the refusal instead, as it would raise its own error.

An MCP server's tool is a function tool to the framework too. While etf-otel's MCP integration
is instrumented, it records that run on the ``mcp`` SDK's ``tools/call`` span (a span of ours
around it would be a second execution of the same call): the run is only matched here, and the
MCP integration told its preserved id (``proposed_call``).

The framework's own tracing is left as it is. Nothing is imported before the application
imports ``agents`` (a post-import hook).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Collection
from contextvars import ContextVar
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import wrapt

from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    instrumented,
    remove_own_wrapper,
)
from etf_otel.integrations._tool_runs import RunningTool, ToolRuns, find_proposal

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["OpenAIAgentsInstrumentor", "instrument_openai_agents"]

_PACKAGE: Final = "agents"
_TOOL_MODULE: Final = "agents.tool"
_INVOKE: Final = "_invoke_function_tool_with_metadata"
_FAILURE: Final = "maybe_invoke_function_tool_failure_error_function"
_MCP_INTEGRATION: Final = "etf_otel.integrations.mcp"
_LAYOUT: Final = (_INVOKE, _FAILURE, "_consume_function_tool_default_failure", "_FunctionToolInvocationResult")
"""What ``agents.tool`` must have: the runner's coroutine, and what a refusal is answered with."""
_LOCK: Final = threading.RLock()


class _Failure:
    """The error a tool raised that its invoker answered with an error result (the run returned)."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: BaseException | None = None


_failure: ContextVar[_Failure | None] = ContextVar("etf_otel_agents_tool_failure", default=None)


async def _note_failure(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``maybe_invoke_function_tool_failure_error_function``: remember the error for the run's span."""
    failure = _failure.get()
    error = kwargs.get("error")
    if failure is not None and isinstance(error, BaseException):
        failure.error = error
    return await wrapped(*args, **kwargs)


class OpenAIAgentsInstrumentor(ClientInstrumentor):
    """Records openai-agents' function tool runs as executions of the preserved calls.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`;
    ``guard`` refuses, through the tool's error result, a run that is not a valid proposal or
    differs from it). Instrument the ``openai`` client too (its own instrumentor): the runs are
    matched with the responses it records. ``uninstrument()`` restores the framework.
    """

    _generation = 0
    _runs: ToolRuns | None = None
    _installed: tuple[tuple[Any, str, Any], ...] = ()
    """The wrappers in place: ``(module, name, wrapper)``."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("openai-agents >= 0.24",)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, _ = self._set_up(kwargs)
        with _LOCK:
            self._runs = ToolRuns(instrumentation)
            self._generation += 1
            generation = self._generation
        wrapt.register_post_import_hook(partial(self._wrap_when_imported, generation), _PACKAGE)

    def _uninstrument(self, **kwargs: Any) -> None:
        with _LOCK:
            self._generation += 1
            for owner, name, wrapper in self._installed:
                remove_own_wrapper(owner, wrapper, name)
            self._installed = ()
            if self._runs is not None:
                self._runs.close()
                self._runs = None
        self._instrumentation = None

    def _wrap_when_imported(self, generation: int, package: Any) -> None:
        """Wrap the tool runner once the application imported ``agents`` (at once if it has).

        A hook of an ``instrument()`` that ``uninstrument()`` has undone since does nothing.
        """
        with _LOCK, internal_errors_swallowed("instrumenting openai-agents"):
            if generation != self._generation or self._installed:
                return
            tool = sys.modules.get(_TOOL_MODULE)
            if not all(callable(getattr(tool, name, None)) for name in _LAYOUT):
                raise TypeError("openai-agents does not have the layout this version of etf-otel knows")
            runner = getattr(tool, _INVOKE)
            targets: list[tuple[Any, str, Any]] = [(tool, _FAILURE, _note_failure)]
            targets += [(module, _INVOKE, self._invoke) for module in _binding(runner)]
            for owner, name, wrapper in targets:
                wrapt.wrap_function_wrapper(owner, name, wrapper)
                self._installed += ((owner, name, wrapper),)

    async def _invoke(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``_invoke_function_tool_with_metadata(function_tool=, context=, arguments=)``, recorded."""
        runs = self._runs
        context = kwargs.get("context")
        if runs is None or context is None or _disabled():
            return await wrapped(*args, **kwargs)
        call_id = getattr(context, "tool_call_id", None)
        call_id = call_id if isinstance(call_id, str) else None
        name = getattr(context, "tool_name", None)
        name = name if isinstance(name, str) else None
        if _recorded_by_mcp(kwargs.get("function_tool")):
            return await _through_mcp(wrapped, args, kwargs, call_id, name)
        running = runs.start(call_id, name, kwargs.get("arguments"))
        if running.refusal is not None:
            return await _refuse(running, running.refused(), kwargs)
        failure = _Failure()
        token = _failure.set(failure)
        try:
            outcome = await wrapped(*args, **kwargs)
        except BaseException as error:
            running.end(error)
            raise
        finally:
            _failure.reset(token)
        running.end(failure.error, getattr(outcome, "output", None) if failure.error is None else None)
        return outcome


def _recorded_by_mcp(function_tool: Any) -> bool:
    """A tool of an MCP server, while etf-otel's MCP integration is instrumented: it records the run."""
    with internal_errors_swallowed("telling an MCP server's tool"):
        if getattr(getattr(function_tool, "_tool_origin", None), "type", None) != "mcp":
            return False
        mcp = sys.modules.get(_MCP_INTEGRATION)
        return mcp is not None and bool(mcp.MCPInstrumentor().is_instrumented_by_opentelemetry)
    return False


async def _through_mcp(wrapped: Any, args: Any, kwargs: dict[str, Any], call_id: str | None, name: str | None) -> Any:
    """An MCP server's tool: the MCP integration records its ``tools/call`` as the execution (on the
    ``mcp`` SDK's spans) and guards it; it is told the preserved id, which it matches explicitly.

    A span of ours around the SDK's would be a second execution of the same call.
    """
    proposal = None
    with internal_errors_swallowed("finding the proposal of an MCP tool run"):
        proposal = find_proposal(call_id, name, kwargs.get("arguments"))
    if proposal is None:
        return await wrapped(*args, **kwargs)
    with sys.modules[_MCP_INTEGRATION].proposed_call(proposal.call_id):
        return await wrapped(*args, **kwargs)


def _binding(function: Any) -> list[Any]:
    """Every loaded module of the framework that binds ``function``: its runner imported it by name."""
    return [
        module
        for name, module in list(sys.modules.items())
        if (name == _PACKAGE or name.startswith(_PACKAGE + "."))
        and module is not None
        and getattr(module, "__dict__", {}).get(_INVOKE) is function
    ]


async def _refuse(running: RunningTool, error: GuardRefusedError, kwargs: dict[str, Any]) -> Any:
    """The refused run answered as a tool that raised :class:`GuardRefusedError`: the tool's error result.

    What the tool's invoker does with an exception (``agents.tool._FailureHandlingFunctionToolInvoker``):
    the failure formatter's message, the handled-error hook, then the runner's result with
    ``is_sdk_generated_error`` as the formatter says; no formatter: the error is raised.
    """
    token = _failure.set(None)
    try:
        tool = sys.modules[_TOOL_MODULE]
        function_tool, context = kwargs.get("function_tool"), kwargs.get("context")
        tool._consume_function_tool_default_failure(context)
        message = await getattr(tool, _FAILURE)(function_tool=function_tool, context=context, error=error)
        if message is None:
            raise error
        handled = getattr(getattr(function_tool, "on_invoke_tool", None), "_on_handled_error", None)
        if callable(handled):
            with internal_errors_swallowed("reporting a refused openai-agents tool run"):
                handled(function_tool, error, kwargs.get("arguments"), context)
        sdk_error = tool._consume_function_tool_default_failure(context)
        return tool._FunctionToolInvocationResult(message, is_sdk_generated_error=sdk_error)
    finally:
        _failure.reset(token)
        running.end(error)


def instrument_openai_agents(**options: Unpack[InstrumentorOptions]) -> OpenAIAgentsInstrumentor:
    """One line for manual use: record openai-agents' tool runs and return the instrumentor."""
    return instrumented(OpenAIAgentsInstrumentor(), options)
