"""OpenTelemetry instrumentor for the ``openai`` client's streamed Chat Completions and Responses.

``OpenAIInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``opentelemetry_instrumentor`` entry point) wraps ``chat.completions.create`` of the sync
and async clients, and the Responses API (:mod:`etf_otel.integrations.openai._responses`).
Only ``stream=True`` calls that return the SDK's ``Stream`` / ``AsyncStream`` are touched:
the returned stream is a transparent proxy that yields the SDK's own chunks while the
identity rules run beside it. ``chat.completions.stream(...)`` calls ``create`` internally
and is covered too.

The end sentinel. The SDK stops at ``data: [DONE]`` without yielding it, so a stream that
ends with ``[DONE]`` and no ``finish_reason`` (TGI, vllm-mlx) would look cut. The
iteration of that one SDK stream instance is wrapped before it starts
(:func:`feed_done_at_sentinel`) so that the sentinel reaches the rules as ``feed_done()``;
what the application iterates is unchanged.

Linkage across turns. A follow-up request of the same conversation carries the previous
request's messages, then the assistant message with ``tool_calls``, then one
``role: "tool"`` message per answered call. The response it answers is the one that proposed
the ``tool_calls[].id`` of that assistant message, else the one whose request had exactly the
messages before it, when only one did (:mod:`etf_otel.integrations._conversation`). The
tool messages after it (none at all when the app skipped them) are then checked against
that response's proposals before the request is sent, without changing it. At most
``max_conversations`` are remembered (least recently used first out). Only a list or tuple of
messages is read: messages given as an iterator (a generator) are left for the SDK to send,
and that request is not linked.

``gen_ai.provider.name``. A configured ``provider_name`` (option or
``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME``) wins. Otherwise the client says it
(:func:`provider_of_client`): the provider of a known host of its base URL
(:func:`detect_provider`), else ``azure.ai.openai`` for the Azure clients, else
:data:`FALLBACK_PROVIDER`, ``openai``: the GenAI conventions make the provider name the
discriminator of the telemetry flavour, "set based on the instrumentation's best knowledge"
and possibly "different from the actual upstream provider" behind a proxy or hosting
platform, and the OpenAI conventions say it "MUST be set to ``openai``" for this client.
The value stays one of a fixed few: the server's address never becomes a provider name
(it would be an unbounded metric label).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from etf_otel.instrumentation._observer import ResponseObserver
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._streams import observer_of
from etf_otel.integrations._conversation import FollowUp, PrefixConversations, string_ids
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    Method,
    Prepared,
    instrumented,
    rejected_by,
    unwrap_methods,
    wrap_methods,
)
from etf_otel.integrations.openai._responses import ResponsesWrappers, is_sdk_stream
from etf_otel.protocols import CHAT_COMPLETIONS, field
from etf_otel.protocols._chat_completions import DONE

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["FALLBACK_PROVIDER", "OpenAIInstrumentor", "detect_provider", "instrument_openai", "provider_of_client"]

_MODULE = "openai.resources.chat.completions"

# Hosts whose provider is unambiguous, with the GenAI ``gen_ai.provider.name`` value.
_PROVIDER_HOSTS = (
    ("api.openai.com", "openai"),
    (".openai.azure.com", "azure.ai.openai"),
    ("api.deepseek.com", "deepseek"),
    ("api.groq.com", "groq"),
    ("api.mistral.ai", "mistral_ai"),
    ("api.x.ai", "x_ai"),
    ("api.perplexity.ai", "perplexity"),
    ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("api.anthropic.com", "anthropic"),
)


FALLBACK_PROVIDER: Final = "openai"
"""``gen_ai.provider.name`` for a base URL of no known host (a self-hosted server, a proxy):
the provider whose wire API and telemetry flavour the ``openai`` client speaks."""

_AZURE_PROVIDER: Final = "azure.ai.openai"
_AZURE_CLIENTS: Final = frozenset({"AzureOpenAI", "AsyncAzureOpenAI"})


def detect_provider(base_url: object) -> str | None:
    """The ``gen_ai.provider.name`` for a client's base URL, or ``None`` when not certain."""
    host = (urlsplit(str(base_url)).hostname or "").lower()
    for suffix, provider in _PROVIDER_HOSTS:
        if host == suffix or (suffix.startswith(".") and host.endswith(suffix)):
            return provider
    return None


def provider_of_client(client: object) -> str:
    """The ``gen_ai.provider.name`` of an ``openai`` client: its known host, Azure, else :data:`FALLBACK_PROVIDER`."""
    detected = detect_provider(getattr(client, "base_url", ""))
    if detected is not None:
        return detected
    if any(cls.__name__ in _AZURE_CLIENTS and cls.__module__.startswith("openai") for cls in type(client).__mro__):
        return _AZURE_PROVIDER
    return FALLBACK_PROVIDER


def split_follow_up(messages: Sequence[Any]) -> FollowUp | None:
    """The Chat Completions follow-up of a request's messages (:attr:`WireProtocol.follow_up`)."""
    return CHAT_COMPLETIONS.follow_up(messages)


def turn_call_ids(message: Any) -> list[str]:
    """The ``tool_calls[].id`` of an assistant message (the evidence of the response it answers)."""
    calls = field(message, "tool_calls")
    return string_ids(field(call, "id") for call in calls) if isinstance(calls, (list, tuple)) else []


class OpenAIInstrumentor(ClientInstrumentor):
    """Instruments ``openai`` streamed Chat Completions and Responses with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    an option left ``None`` takes its environment variable, else its default (no provider
    override, no rule, no guard, 1024 conversations).
    ``uninstrument()`` restores the client. ``max_conversations`` bounds each index of
    conversations (Chat Completions prefixes, Responses input prefixes, Responses response ids).
    """

    _responses: ResponsesWrappers | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("openai >= 1.40",)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, capacity = self._set_up(kwargs)
        self._last_provider: tuple[object, object, str] | None = None
        self._conversations = PrefixConversations(
            capacity, split_follow_up, turn_call_ids, rejected_by(instrumentation)
        )
        wrap_methods(_MODULE, self._methods())
        self._responses = ResponsesWrappers(instrumentation, self._provider_for, capacity)
        self._responses.wrap()

    def _uninstrument(self, **kwargs: Any) -> None:
        import openai.resources.chat.completions as completions

        unwrap_methods(completions, self._methods())
        if self._responses is not None:
            self._responses.unwrap()
            self._responses = None
        self._instrumentation = None

    def _methods(self) -> list[Method]:
        return [("Completions", "create", self._create), ("AsyncCompletions", "create", self._async_create)]

    def _provider_of(self, client: object) -> str:
        """:func:`provider_of_client`, remembered for the last base URL object and client class seen.

        Usually the only ones; the client itself is not held, so it can be collected.
        """
        base_url = getattr(client, "base_url", "")
        cached = self._last_provider
        if cached is not None and cached[0] is base_url and cached[1] is type(client):
            return cached[2]
        provider = provider_of_client(client)
        self._last_provider = (base_url, type(client), provider)
        return provider

    def _provider_for(self, resource: Any) -> str:
        """``gen_ai.provider.name`` for a call on ``resource`` (an SDK resource such as ``Completions``)."""
        return self._provider_override or self._provider_of(resource._client)

    def _prepare(self, instance: Any, kwargs: dict[str, Any]) -> Prepared | None:
        """Everything the stream wrapper needs, decided before the request is sent."""
        with internal_errors_swallowed("preparing an openai request"):
            if self._instrumentation is None or not kwargs.get("stream"):
                return None
            provider = self._provider_for(instance)
            linked = self._conversations.link(kwargs.get("messages"))
            return Prepared(provider, linked.conversation, linked.result_ids, ambiguous=linked.ambiguous)
        return None

    def _observe(self, result: Any, prepared: Prepared) -> Any:
        """The proxy the application gets for an SDK stream of Chat Completions chunks; anything else unchanged."""
        observed = result
        with internal_errors_swallowed("observing an openai stream"):
            instrumentation = self._instrumentation
            if instrumentation is None or not is_sdk_stream(result):
                return result
            observed = prepared.observe(instrumentation, result)
            observer = observer_of(observed)
            if observer is not None:
                feed_done_at_sentinel(result, observer)
        return observed

    def _create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs)
        result = wrapped(*args, **kwargs)
        if prepared is None:
            return result
        return self._observe(result, prepared)

    async def _async_create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs)
        result = await wrapped(*args, **kwargs)
        if prepared is None:
            return result
        return self._observe(result, prepared)


def _sentinel_seen(feed_done: Callable[[], None]) -> None:
    with internal_errors_swallowed("observing the end sentinel"):
        feed_done()


def feed_done_at_sentinel(stream: Any, observer: ResponseObserver) -> None:
    """Call ``observer.assembler.feed_done`` when the SDK ``stream`` meets ``data: [DONE]``, which it swallows.

    Works on that one instance before its iteration starts; every event, type and exception
    the application sees stays the SDK's own.

    * Async: its SSE iteration (``_iter_events``) is wrapped, and each event's ``data`` is
      tested the way the SDK tests it (starting with ``[DONE]``).
    * Sync, at no cost per event: the SDK's loop over its SSE events ends early only at the
      sentinel (the one ``break`` of ``Stream.__stream__``), otherwise it exhausts them. So
      ``_iter_events`` is only remembered; when the stream is exhausted
      (:meth:`ResponseObserver.call_at_eof`), SSE events still pending mean the sentinel came.

    A stream whose iteration is not where this SDK version keeps it is left alone.
    """
    feed_done = observer.assembler.feed_done
    events = getattr(stream, "_iter_events", None)
    iterator = getattr(stream, "_iterator", None)
    read_events = getattr(events, "__func__", None)
    if "_iter_events" in vars(stream) or read_events is None or iterator is None:
        return  # already done for this stream, or another SDK layout
    # The replacement is stored on the stream, so it holds the stream weakly: a closure over the
    # bound method would make a reference cycle, and every response would wait for the collector.
    owner = weakref.ref(stream)

    def sse_events() -> Any:
        return read_events(owner())

    if hasattr(iterator, "__anext__"):

        async def iter_events_async() -> AsyncIterator[Any]:
            async for sse in sse_events():
                if sse.data.startswith(DONE):
                    _sentinel_seen(feed_done)
                yield sse

        stream._iter_events = iter_events_async
        return
    started: list[Any] = []

    def iter_events() -> Any:
        events_of_stream = sse_events()
        started.append(events_of_stream)
        return events_of_stream

    def at_eof() -> None:
        for events_of_stream in started:
            if inspect.getgeneratorstate(events_of_stream) == inspect.GEN_SUSPENDED:
                feed_done()
            events_of_stream.close()  # what dropping the SDK's loop did before

    stream._iter_events = iter_events
    observer.call_at_eof(at_eof)


def instrument_openai(**options: Unpack[InstrumentorOptions]) -> OpenAIInstrumentor:
    """One line for manual use: instrument the ``openai`` client and return the instrumentor."""
    return instrumented(OpenAIInstrumentor(), options)
