"""One setup of etf-otel: providers, configuration and the state its wrappers share.

Every wrapper made by one :class:`Instrumentation` records into the same
:class:`~etf_otel.instrumentation._telemetry.Telemetry`, so the ``execute_tool`` span of a
call links to the ``assemble_tool_call`` span that proposed it, and guard mode knows the
proposals. Each wrapper is a proxy by composition: it returns, raises and forwards exactly
what the wrapped object does; every telemetry step runs inside
:func:`~etf_otel.instrumentation._safety.internal_errors_swallowed`, so only the host's own
exceptions (and, in opt-in guard mode, :class:`~etf_otel.errors.GuardRefusedError`) ever
reach the application.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Sequence
from typing import Any, TypeVar, cast, overload

from opentelemetry import metrics, trace

from etf_otel.core._identity import CompatibilityRule, IdentityRules
from etf_otel.core._linkage import Conversation
from etf_otel.core._pairing_model import PairingCheck
from etf_otel.core._results import AssemblyResult
from etf_otel.instrumentation import _linkage as linkage
from etf_otel.instrumentation._assemblers import DEFAULT_ADAPTER, AssemblerAdapter, ChunkAssembler, ObservedAssembler
from etf_otel.instrumentation._config import environment_settings
from etf_otel.instrumentation._host import ObservedHost, ToolFunction, ToolHost
from etf_otel.instrumentation._observer import ResponseObserver
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._streams import ObservedAsyncStream, ObservedDualStream, ObservedStream
from etf_otel.instrumentation._switches import _disabled, _suppressed
from etf_otel.instrumentation._telemetry import Telemetry
from etf_otel.protocols import CHAT_COMPLETIONS, WireProtocol
from etf_otel.protocols import get as get_protocol

__all__ = ["Instrumentation"]

_T = TypeVar("_T")
_Stream = TypeVar("_Stream", bound="Iterable[Any] | AsyncIterable[Any]")
_Assembler = TypeVar("_Assembler", bound=ChunkAssembler)
_Host = TypeVar("_Host", bound="ToolHost | ToolFunction")


class Instrumentation:
    """One setup of etf-otel: providers, configuration and the state its wrappers share.

    Reuse one instance for the streams and hosts of an application, so that an
    ``execute_tool`` span can be linked to the ``assemble_tool_call`` span of its id.
    ``guard`` is the default of :meth:`host`; it changes nothing else.

    A keyword left ``None`` takes its environment variable, read once here
    (:mod:`etf_otel.instrumentation._config`): ``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME``,
    ``OTEL_INSTRUMENTATION_ETF_ALLOW``, ``OTEL_INSTRUMENTATION_ETF_DENY``, ``OTEL_INSTRUMENTATION_ETF_GUARD``,
    ``ETF_OTEL_GUARD_REQUESTS`` for ``guard_requests`` (off by default: the request guard), and
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` for ``capture_content``. A given
    keyword wins (``allow=()`` means no rule beyond the defaults, ``deny=()`` none denied,
    ``provider_name=""`` no provider). ``deny`` turns off a rule, one on by default too
    (``absent_arguments_in_body``), and wins over ``allow``.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        provider_name: str | None = None,
        allow: Iterable[CompatibilityRule | str] | None = None,
        guard: bool | None = None,
        capture_content: bool | None = None,
        deny: Iterable[CompatibilityRule | str] | None = None,
        guard_requests: bool | None = None,
    ) -> None:
        environment = environment_settings()
        if provider_name is None:
            provider_name = environment.provider_name
        if allow is None:
            allow = environment.allow or ()
        if deny is None:
            deny = environment.deny or ()
        if guard is None:
            guard = bool(environment.guard)
        self.guard_requests = bool(environment.guard_requests) if guard_requests is None else guard_requests
        """Whether the instrumented SDKs refuse a request whose pairing is broken (``RequestPairingError``)."""
        self.rules = IdentityRules.for_rules(allow, deny=deny)
        self.guard = guard
        self.provider_name = provider_name or None
        """The ``gen_ai.provider.name`` of this setup (keyword or environment), ``None`` when none."""
        self.telemetry = Telemetry(
            tracer_provider, meter_provider, provider_name=self.provider_name, capture_content=capture_content
        )
        self.telemetry.guarding = guard

    def observer(
        self,
        conversation: Conversation | None = None,
        *,
        provider_name: str | None = None,
        tool_message_ids: Sequence[str | None] | None = None,
        protocol: WireProtocol | str = CHAT_COMPLETIONS,
    ) -> ResponseObserver:
        """An observer for one response of ``protocol`` (a name of ``etf_otel.protocols.PROTOCOLS``)."""
        return ResponseObserver(
            self.telemetry,
            self.rules,
            conversation,
            provider_name=provider_name,
            tool_message_ids=tool_message_ids,
            protocol=protocol,
        )

    def stream(
        self,
        stream: _Stream,
        *,
        conversation: Conversation | None = None,
        provider_name: str | None = None,
        tool_message_ids: Sequence[str | None] | None = None,
        protocol: WireProtocol | str = CHAT_COMPLETIONS,
    ) -> _Stream:
        """Wrap a sync or async iterable of a ``protocol``'s events; returns it unchanged when disabled.

        ``tool_message_ids`` are the ``tool_call_id`` values of the tool messages the request
        that produced this stream carried; with a ``conversation`` they settle the previous
        response (``orphaned_result``, ``duplicate_result``, ``unanswered_call``).
        """
        if _disabled() or _suppressed():
            return stream
        try:
            observer = self.observer(
                conversation, provider_name=provider_name, tool_message_ids=tool_message_ids, protocol=protocol
            )
            observed: object
            if hasattr(stream, "__aiter__") and hasattr(stream, "__iter__"):  # LiteLLM's stream wrapper
                observed = ObservedDualStream(cast("Iterable[Any]", stream), observer)
            elif hasattr(stream, "__aiter__"):
                observed = ObservedAsyncStream(cast("AsyncIterable[Any]", stream), observer)
            else:
                observed = ObservedStream(cast("Iterable[Any]", stream), observer)
            return cast(_Stream, observed)  # a transparent proxy of stream
        except Exception:
            with internal_errors_swallowed("wrapping a stream"):
                raise
        return stream  # pragma: no cover - reached only when the wrapping itself failed

    def response(
        self,
        body: object,
        *,
        conversation: Conversation | None = None,
        provider_name: str | None = None,
        tool_message_ids: Sequence[str | None] | None = None,
        protocol: WireProtocol | str = CHAT_COMPLETIONS,
        linkage_ambiguous: bool = False,
        pairing: PairingCheck | None = None,
    ) -> AssemblyResult | None:
        """Record a complete (non-streamed) response body of ``protocol`` (parsed JSON or the SDK's object).

        Judged by the same rules as a stream of it (docs/protocols.md, "Complete bodies"), reported at
        once with ``etf.response.streamed = false``; the other arguments as for :meth:`stream`, and
        ``linkage_ambiguous``: the request carried results whose evidence pointed to no single
        response (``etf.linkage.ambiguous``, not judged); ``pairing``: what the check of that request found
        (``etf.request.pairing``). Returns
        the result, ``None`` when disabled or when ``body`` is no complete body of ``protocol`` (a
        background response not yet ended): nothing is recorded then.
        """
        if _disabled() or _suppressed():
            return None
        with internal_errors_swallowed("recording a response body"):
            wire = get_protocol(protocol)
            events = wire.body_events(body)
            if events is None:
                return None  # checked before the observer settles anything
            observer = self.observer(
                conversation, provider_name=provider_name, tool_message_ids=tool_message_ids, protocol=wire
            )
            observer.linkage_ambiguous = linkage_ambiguous
            observer.pairing = pairing
            return observer.finish_whole(events)
        return None

    # An assembler of the default shape.
    @overload
    def assembler(
        self,
        assembler: _Assembler,
        *,
        conversation: Conversation | None = None,
        adapter: None = None,
        protocol: WireProtocol | str = ...,
    ) -> _Assembler: ...

    # Any assembler, driven as an adapter says.
    @overload
    def assembler(
        self,
        assembler: _T,
        *,
        conversation: Conversation | None = None,
        adapter: AssemblerAdapter,
        protocol: WireProtocol | str = ...,
    ) -> _T: ...

    def assembler(
        self,
        assembler: _T,
        *,
        conversation: Conversation | None = None,
        adapter: AssemblerAdapter | None = None,
        protocol: WireProtocol | str = CHAT_COMPLETIONS,
    ) -> _T:
        """Wrap an assembler for one response; ``adapter`` names its methods (see :class:`AssemblerAdapter`).

        ``protocol`` is the wire protocol of the events it is fed: the identity rules run
        beside it through that protocol's adapter. Returns it unchanged when disabled.
        """
        if _disabled():
            return assembler
        observer = self.observer(conversation, protocol=protocol)
        observed = ObservedAssembler(assembler, observer, adapter=adapter or DEFAULT_ADAPTER)
        return cast(_T, observed)  # a transparent proxy of assembler

    @overload
    def host(
        self,
        host: _Host,
        *,
        conversation: Conversation | None = None,
        guard: bool | None = None,
        record_unverified_ids: bool = False,
    ) -> _Host: ...

    @overload
    def host(
        self,
        host: _T,
        *,
        method: str,
        conversation: Conversation | None = None,
        guard: bool | None = None,
        record_unverified_ids: bool = False,
    ) -> _T: ...

    def host(
        self,
        host: _T,
        *,
        method: str = "execute",
        conversation: Conversation | None = None,
        guard: bool | None = None,
        record_unverified_ids: bool = False,
    ) -> _T:
        """Wrap a tool host: an object with ``method`` (``execute``), or a callable taking the call.

        ``guard`` ``None`` takes this setup's default. Returns the host unchanged when disabled.
        """
        if _disabled():
            return host
        guard = self.guard if guard is None else guard
        if guard:  # from now on proposals keep the hash a guard compares parsed arguments with
            self.telemetry.guarding = True
        observed = ObservedHost(
            host,
            self.telemetry,
            method=method,
            conversation=conversation,
            guard=guard,
            record_unverified_ids=record_unverified_ids,
        )
        return cast(_T, observed)  # a transparent proxy of host

    def end_conversation(self, conversation: Conversation) -> None:
        """The turn is over: record every proposal that never got a result."""
        with internal_errors_swallowed("ending a conversation"):
            self.telemetry.record_findings(linkage.end(conversation))
