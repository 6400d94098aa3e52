"""OpenTelemetry instrumentor for the ``openai`` client's Chat Completions and Responses.

``OpenAIInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``opentelemetry_instrumentor`` entry point) observes every response of ``POST
/chat/completions`` and of the Responses API (:mod:`etf_otel.integrations.openai._responses`),
whatever the call shape: ``create`` streamed or not, ``with_raw_response`` and
``with_streaming_response`` then ``.parse()``, the ``.stream(...)`` and ``.parse(...)``
helpers, the low-level ``post``, the Azure client, sync and async. It wraps the two places all
of them pass (:mod:`etf_otel.integrations._sdk_hooks`), when the application imports
``openai``. A stream the application gets is a transparent proxy that yields the SDK's own
chunks while the identity rules run beside it; a complete body is judged by the same rules
and returned as it is.

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
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from etf_otel.instrumentation._observer import ResponseObserver
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._streams import observer_of
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    Prepared,
    instrumented,
    rejected_by,
)
from etf_otel.integrations._prefix_conversations import PrefixConversations
from etf_otel.integrations._request_pairing import TargetOf, checked
from etf_otel.integrations._sdk_hooks import SdkHooks, request_body, request_route
from etf_otel.integrations.openai._responses import ResponsesLinkage
from etf_otel.protocols import CHAT_COMPLETIONS, RESPONSES

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["FALLBACK_PROVIDER", "OpenAIInstrumentor", "detect_provider", "instrument_openai", "provider_of_client"]

_CHAT_PATH: Final = "/chat/completions"
_RESPONSES_PATH: Final = "/responses"

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


class OpenAIInstrumentor(ClientInstrumentor):
    """Instruments ``openai`` Chat Completions and Responses, streamed or not, with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    an option left ``None`` takes its environment variable, else its default (no provider
    override, no rule, no guard, 1024 conversations).
    ``uninstrument()`` restores the client. ``max_conversations`` bounds each index of
    conversations (Chat Completions prefixes, Responses input prefixes, Responses response ids).
    """

    _responses: ResponsesLinkage | None = None
    _hooks: SdkHooks | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("openai >= 1.40",)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, capacity = self._set_up(kwargs)
        self._last_provider: tuple[object, object, str] | None = None
        self._conversations = PrefixConversations(
            capacity, CHAT_COMPLETIONS, rejected_by(instrumentation), guarded=bool(instrumentation.guard)
        )
        self._responses = ResponsesLinkage(instrumentation, capacity)
        self._target = TargetOf()
        self._hooks = SdkHooks("openai", self._prepare, self._observe, refused=self._refused)
        self._hooks.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._hooks is not None:
            self._hooks.uninstall()
            self._hooks = None
        if self._responses is not None:
            self._responses.close()
            self._responses = None
        self._instrumentation = None

    def _provider_of(self, client: object) -> str:
        """``gen_ai.provider.name`` for a call of ``client``: the configured one, else
        :func:`provider_of_client`, remembered for the last base URL object and client class seen
        (usually the only ones; the client itself is not held, so it can be collected)."""
        if self._provider_override:
            return self._provider_override
        base_url = getattr(client, "base_url", "")
        cached = self._last_provider
        if cached is not None and cached[0] is base_url and cached[1] is type(client):
            return cached[2]
        provider = provider_of_client(client)
        self._last_provider = (base_url, type(client), provider)
        return provider

    def _prepare(self, client: Any, options: Any) -> Prepared | None:
        """The decision for one request of ``client``: a model call of which protocol, linked to what.

        Runs for every request the client makes: anything but the two model paths returns at once.
        """
        route = request_route(options)
        if self._instrumentation is None or route is None:
            return None
        method, path = route
        if path.endswith(_CHAT_PATH):
            if method != "post":
                return None  # stored completions (GET /chat/completions/...) are read back, not answers
            body = request_body(options)
            linked = self._conversations.link(body.get("messages"))
            prepared = Prepared(
                self._provider_of(client), linked.conversation, linked.result_ids, ambiguous=linked.ambiguous
            )
            target = self._target(getattr(client, "base_url", ""))
            return checked(prepared, linked, body, self._instrumentation, target=target)
        responses = self._responses
        if responses is None:
            return None
        if path.endswith(_RESPONSES_PATH) and method == "post":
            target = self._target(getattr(client, "base_url", ""))
            return responses.prepare(self._provider_of(client), request_body(options), target)
        if method == "get" and path.rsplit("/", 2)[-2:-1] == [_RESPONSES_PATH[1:]]:
            query = getattr(options, "params", None)
            return responses.prepare_replay(self._provider_of(client), query if isinstance(query, dict) else {})
        return None

    def _refused(self, prepared: Prepared, error: BaseException, provider_refused: bool) -> None:
        if self._instrumentation is not None:
            prepared.refused(self._instrumentation, error, provider_refused)

    def _observe(self, parsed: Any, prepared: Prepared, is_stream: bool) -> Any:
        """What the application gets for ``parsed``: a stream observed, a body recorded and returned as it is."""
        instrumentation = self._instrumentation
        if instrumentation is None:
            return parsed
        if prepared.protocol is RESPONSES:
            responses = self._responses
            return parsed if responses is None else responses.observe(parsed, prepared, is_stream)
        observed = prepared.observe_parsed(instrumentation, parsed, is_stream)
        observer = observer_of(observed) if is_stream else None
        if observer is not None:
            feed_done_at_sentinel(parsed, observer)
        return observed


def _sentinel_seen(feed_done: Callable[[], None]) -> None:
    with internal_errors_swallowed("observing the end sentinel"):
        feed_done()


def feed_done_at_sentinel(stream: Any, observer: ResponseObserver) -> None:
    """Call ``observer.assembler.feed_done`` when the SDK ``stream`` meets ``data: [DONE]``, which it swallows.

    Works on that one instance before its iteration starts; every event, type and exception
    the application sees stays the SDK's own.

    At no cost per event, sync and async alike: the SDK's loop over its SSE events ends early
    only at the sentinel (the one ``break`` of ``Stream.__stream__`` and of
    ``AsyncStream.__stream__``), otherwise it exhausts them. So the SSE iterator
    ``_iter_events`` returns is only remembered; when the stream is exhausted
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
    started: list[Any] = []

    def iter_events() -> Any:
        events_of_stream = read_events(owner())
        started.append(events_of_stream)
        return events_of_stream

    if hasattr(iterator, "__anext__"):

        def at_eof_async() -> None:
            if any(getattr(each, "ag_frame", None) is not None for each in started):  # suspended: not exhausted
                _sentinel_seen(feed_done)

        stream._iter_events = iter_events
        observer.call_at_eof(at_eof_async)
        # Held until the response is reported, however it ended: the SDK's loop had let go of it by
        # then, so letting go of it too leaves its closing to its finalizer, as without etf-otel,
        # and ends the reference cycle it makes through the stream.
        observer.when_reported(lambda result, call_spans: started.clear())
        return

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
