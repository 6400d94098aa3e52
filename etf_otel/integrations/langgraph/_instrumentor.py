"""OpenTelemetry instrumentor for LangChain and LangGraph agents: tool runs and ``ChatOpenAI``'s assembly.

``LangChainInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_langchain`` entry point) wraps, when the application imports them:

* ``langchain_core.tools.base.BaseTool.run`` / ``arun``: a run given a call id (what
  ``ToolNode`` and ``tool.invoke(tool_call)`` do) is an execution of the preserved call
  (:mod:`etf_otel.integrations.langgraph._tools`);
* ``langchain_openai.chat_models.base.BaseChatOpenAI._stream`` / ``_astream``: LangChain's sum of
  every streamed Chat Completions response is compared with the rules
  (:mod:`etf_otel.integrations.langgraph._models`).

The model calls themselves are recorded by the ``openai`` instrumentor (its own entry point).
Nothing is imported here that the application does not import (post-import hooks).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Collection
from functools import partial
from typing import TYPE_CHECKING, Any

import wrapt

from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    instrumented,
    remove_own_wrapper,
)
from etf_otel.integrations._tool_runs import ToolRuns
from etf_otel.integrations.langgraph._models import ModelWrappers
from etf_otel.integrations.langgraph._tools import ToolWrappers

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["LangChainInstrumentor", "instrument_langgraph"]

_TOOLS = "langchain_core.tools.base"
_MODELS = "langchain_openai.chat_models.base"
_LOCK = threading.RLock()


class LangChainInstrumentor(ClientInstrumentor):
    """Instruments LangChain's tool runs and ``ChatOpenAI``'s streamed assembly with etf-otel.

    ``instrument(tracer_provider=None, meter_provider=None, guard=None, ...)``, the options of
    :class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`; ``guard`` (or
    ``OTEL_INSTRUMENTATION_ETF_GUARD``) answers a run that is not a valid proposal with an
    error result instead of running it. ``uninstrument()`` restores LangChain.
    """

    _generation = 0
    _runs: ToolRuns | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("langchain-core >= 1.0",)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, _ = self._set_up(kwargs)
        runs = ToolRuns(instrumentation)
        self._runs = runs
        tools = ToolWrappers(runs)
        models = ModelWrappers(instrumentation)
        self._wrapped = [
            (_TOOLS, "BaseTool", "run", tools.run),
            (_TOOLS, "BaseTool", "arun", tools.arun),
            (_MODELS, "BaseChatOpenAI", "_stream", models.stream),
            (_MODELS, "BaseChatOpenAI", "_astream", models.astream),
            (_MODELS, "BaseChatOpenAI", "_generate", models.generate),
            (_MODELS, "BaseChatOpenAI", "_agenerate", models.agenerate),
        ]
        with _LOCK:
            self._generation += 1
            generation = self._generation
        for module in (_TOOLS, _MODELS):
            wrapt.register_post_import_hook(partial(self._wrap_when_imported, generation, module), module)

    def _wrap_when_imported(self, generation: int, name: str, module: Any) -> None:
        """Wrap ``module``'s methods once the application imports it (at once if it already has).

        A hook of an ``instrument()`` that ``uninstrument()`` has undone since does nothing.
        """
        with _LOCK, internal_errors_swallowed("instrumenting LangChain"):
            if generation != self._generation:
                return
            for owner_module, cls, method, wrapper in self._wrapped:
                if owner_module == name:
                    wrapt.wrap_function_wrapper(module, f"{cls}.{method}", wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        with _LOCK:
            self._generation += 1
            for module, cls, method, wrapper in self._wrapped:
                loaded = sys.modules.get(module)
                if loaded is not None:
                    remove_own_wrapper(getattr(loaded, cls), wrapper, method)
        if self._runs is not None:
            self._runs.close()
            self._runs = None
        self._instrumentation = None


def instrument_langgraph(**options: Unpack[InstrumentorOptions]) -> LangChainInstrumentor:
    """One line for manual use: instrument LangChain's tool runs and ``ChatOpenAI``, return the instrumentor."""
    return instrumented(LangChainInstrumentor(), options)
