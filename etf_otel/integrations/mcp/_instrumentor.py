"""OpenTelemetry instrumentor for the ``mcp`` SDK: tool calls that cross a process boundary (docs/mcp.md).

``MCPInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_mcp`` entry point) instruments both sides, so one setup serves an agent, a tool
server, or a process that is both:

* the client (:mod:`etf_otel.integrations.mcp._client`): ``ClientSession.call_tool`` is
  matched to a proposal and carries its id in ``params._meta``; the SDK's CLIENT span says how
  it matched and links to the proposal; guard mode refuses what is not a valid proposal;
* the server (:mod:`etf_otel.integrations.mcp._server`): the SDK's SERVER span of a
  ``tools/call`` gets the id and the link from ``_meta``.

It only adds to what the SDK does: it opens no span beside the SDK's (except on a server
whose middleware has no ``OpenTelemetryMiddleware``, and for a call the guard refused, which
reaches no server), and injects no trace context (the SDK does, and the MCP instrumentations
of OpenInference and OpenLLMetry may again, at the transport, with the same context).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Collection
from functools import partial
from typing import TYPE_CHECKING, Any

import wrapt

from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation import _open_calls as open_calls
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled, _suppressed
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    instrumented,
    remove_own_wrapper,
)
from etf_otel.integrations.mcp._client import (
    Match,
    call_proposed_tool,
    inject_wrapper,
    match_call,
    outbound,
    outgoing_meta,
    proposed_call,
    record_refusal,
)
from etf_otel.integrations.mcp._server import fallback_wrapper, middleware_wrapper

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MCPInstrumentor", "call_proposed_tool", "instrument_mcp", "proposed_call"]

_SESSION = ("mcp.client.session", "ClientSession", "call_tool")
_DISPATCHER = ("mcp.shared.jsonrpc_dispatcher", None, "inject_trace_context")
_MIDDLEWARE = ("mcp.server._otel", "OpenTelemetryMiddleware", "__call__")
_RUNNER = ("mcp.server.runner", "ServerRunner", "_compose_server_middleware")
_LOCK = threading.RLock()


def _target(module: str, owner: str | None) -> Any:
    loaded = sys.modules[module]
    return loaded if owner is None else getattr(loaded, owner)


class MCPInstrumentor(ClientInstrumentor):
    """Instruments the ``mcp`` SDK's clients and servers with etf-otel.

    ``instrument(tracer_provider=None, meter_provider=None, guard=None, ...)``, the options of
    :class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`; ``guard`` (or
    ``OTEL_INSTRUMENTATION_ETF_GUARD``) refuses, on the client, a ``call_tool`` that is not a
    valid proposal. ``uninstrument()`` restores the SDK.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("mcp >= 2.3",)

    _generation = 0

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, _ = self._set_up(kwargs)
        self._guard = instrumentation.guard
        self._fallback = fallback_wrapper(instrumentation.telemetry.tracer)
        with _LOCK:
            self._generation += 1
            generation = self._generation
        for (module, owner, name), wrapper in self._wrappers():
            hook = partial(self._wrap_when_imported, generation, f"{owner}.{name}" if owner else name, wrapper)
            wrapt.register_post_import_hook(hook, module)
        open_calls.track()

    def _wrap_when_imported(self, generation: int, path: str, wrapper: Any, module: Any) -> None:
        """Wrap ``path`` of ``module`` once the application imports it (at once if it already has).

        Importing the SDK here would cost every process with the ``mcp`` extra installed half a
        second, and run other instrumentations' import hooks in apps that never use MCP. A hook
        of an ``instrument()`` that ``uninstrument()`` has undone since does nothing.
        """
        with _LOCK, internal_errors_swallowed("instrumenting the mcp SDK"):
            if generation == self._generation:
                wrapt.wrap_function_wrapper(module, path, wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        with _LOCK:
            self._generation += 1
            for (module, owner, name), wrapper in self._wrappers():
                if module in sys.modules:
                    remove_own_wrapper(_target(module, owner), wrapper, name)
        open_calls.untrack()
        self._instrumentation = None

    def _wrappers(self) -> list[tuple[tuple[str, str | None, str], Any]]:
        return [
            (_SESSION, self._call_tool),
            (_DISPATCHER, inject_wrapper),
            (_MIDDLEWARE, middleware_wrapper),
            (_RUNNER, self._fallback),
        ]

    def _match(self, args: Any, kwargs: dict[str, Any]) -> tuple[Match, str | None] | None:
        """The match of ``call_tool(*args, **kwargs)``, ``None`` when nothing is to be observed."""
        with internal_errors_swallowed("matching an MCP call"):
            if self._instrumentation is None or _disabled() or _suppressed():
                return None
            name = args[0] if args else kwargs.get("name")
            arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
            telemetry = self._instrumentation.telemetry
            match = match_call(name, arguments, kwargs.get("meta"), guard=self._guard, telemetry=telemetry)
            return match, name if isinstance(name, str) else None
        return None

    async def _call_tool(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        matched = self._match(args, kwargs)
        if matched is None:
            return await wrapped(*args, **kwargs)
        match, name = matched
        if match.refusal is not None:
            telemetry = match.telemetry
            if telemetry is None and self._instrumentation is not None:
                telemetry = self._instrumentation.telemetry
            if telemetry is not None:
                record_refusal(telemetry, match, name)
            index = match.record.call_index if match.record is not None else match.refused_index
            raise GuardRefusedError(match.refusal, tool=name, index=index)
        sent = dict(kwargs)
        with internal_errors_swallowed("adding the call id to an MCP call"):
            meta = outgoing_meta(match, kwargs.get("meta"))
            if meta is not None:
                sent["meta"] = meta
        with outbound(match, name):
            return await wrapped(*args, **sent)


def instrument_mcp(**options: Unpack[InstrumentorOptions]) -> MCPInstrumentor:
    """One line for manual use: instrument the ``mcp`` SDK and return the instrumentor."""
    return instrumented(MCPInstrumentor(), options)
