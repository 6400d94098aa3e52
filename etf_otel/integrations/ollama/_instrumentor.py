"""OpenTelemetry instrumentor for Ollama's native ``/api/chat`` through the ``ollama`` client.

``OllamaInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_ollama`` entry point) observes every ``chat`` of ``ollama.Client`` and
``ollama.AsyncClient`` (and of the module-level ``ollama.chat``, a default client's), streamed or
not. It wraps ``_request``, the one method each client's calls pass with the response class, the
HTTP method and the path, at class level; every path but ``/api/chat`` passes through untouched.

Why there and not on the returned objects: the client's models keep neither a call's ``id`` nor its
``function.index`` (its pydantic models ignore fields they do not declare), so the ``ChatResponse``
the application gets cannot say which calls had ids. The wrapper hands ``_request`` a stand-in for
the response class that passes each parsed line (or the whole body) to the Ollama adapter as the
server wrote it, then builds the client's own object from it: the application gets the very objects
it would get without etf-otel.

* Streamed: the client's iterator is returned behind a transparent proxy that ends the response at
  the end of the iteration, on an error (the client raises ``ResponseError`` on an in-band
  ``{"error": ...}`` line: the response failed) or when it is closed.
* Not streamed: the body is judged as a complete one once the client parsed it.

Linkage across turns: the request's ``messages`` are read by :data:`~etf_otel.protocols.OLLAMA`
(``tool_calls`` of assistant messages, ``role: tool`` messages with the ``tool_name`` the client
sends). ``gen_ai.provider.name`` is ``ollama`` unless ``provider_name=`` or
``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME`` says another. Instrumenting never imports ``ollama``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, cast

import wrapt

from etf_otel.core._results import AssemblyResult
from etf_otel.instrumentation import _positional as positional
from etf_otel.instrumentation._observer import CLOSED, ERROR, ResponseObserver
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._streams import ObservedAsyncStream, ObservedStream
from etf_otel.instrumentation._switches import _disabled, _suppressed
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    Prepared,
    instrumented,
    rejected_by,
    remove_own_wrapper,
)
from etf_otel.integrations._request_pairing import checked, record_provider_refusal, refuse_unsent
from etf_otel.integrations.google_genai._linkage import without_content
from etf_otel.integrations.ollama._linkage import OllamaConversation, OllamaConversations
from etf_otel.protocols import OLLAMA

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext
    from typing_extensions import Unpack

__all__ = ["PROVIDER", "OllamaInstrumentor", "instrument_ollama"]

PROVIDER: Final = "ollama"
"""``gen_ai.provider.name`` of an Ollama server."""

_MODULE: Final = "ollama._client"
_METHOD: Final = "_request"
_CLASSES: Final = ("Client", "AsyncClient")
_PATH: Final = "/api/chat"


class _NoFeed:
    """The assembler the stream proxy sees: the parts were fed by :class:`_Reader` already."""

    __slots__ = ()

    def feed(self, event: object) -> None:
        """Nothing: the proxy's items are the client's objects, which lost the ids."""


class _FedByReader:
    """What the stream proxy asks of an observer (its assembler's ``feed`` and ``finish``), for a response
    whose raw parts :class:`_Reader` feeds."""

    __slots__ = ("assembler", "finish")

    def __init__(self, observer: ResponseObserver) -> None:
        self.assembler = _NoFeed()
        self.finish = observer.finish


class _Reader:
    """Stands in for the client's response class: each parsed part goes to ``feed``, then becomes the
    client's own object."""

    __slots__ = ("_cls", "_feed", "body")

    def __init__(self, cls: Callable[..., Any], feed: Callable[[object], None] | None) -> None:
        self._cls = cls
        self._feed = feed
        self.body: dict[str, Any] | None = None

    def __call__(self, **part: Any) -> Any:
        if self._feed is None:
            self.body = part
        else:
            self._feed(part)  # the observer's own feed never raises
        return self._cls(**part)


class OllamaInstrumentor(ClientInstrumentor):
    """Instruments ``ollama.Client.chat`` / ``ollama.AsyncClient.chat`` with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    ``uninstrument()`` restores the clients.
    """

    _conversations: OllamaConversations | None = None
    _generation = 0
    _installed: tuple[Any, ...] = ()
    _lock: Final = threading.RLock()  # BaseInstrumentor makes one instance: no __init__ of ours

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("ollama >= 0.4",)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, capacity = self._set_up(kwargs)
        self._conversations = OllamaConversations(capacity, rejected_by(instrumentation))
        with self._lock:
            self._generation += 1
            generation = self._generation
        wrapt.register_post_import_hook(lambda module: self._wrap(module, generation), _MODULE)

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._generation += 1
            for owner, wrapper in zip(self._installed, (self._call, self._acall), strict=False):
                remove_own_wrapper(owner, wrapper, _METHOD)
            self._installed = ()
        self._instrumentation = None
        self._conversations = None

    def _wrap(self, module: ModuleType, generation: int) -> None:
        with self._lock, internal_errors_swallowed("instrumenting ollama"):
            if generation != self._generation or self._installed:
                return
            owners = tuple(getattr(module, name, None) for name in _CLASSES)
            if any(owner is None or not callable(getattr(owner, _METHOD, None)) for owner in owners):
                raise TypeError("ollama does not have the layout this version of etf-otel knows")
            wrapt.wrap_function_wrapper(owners[0], _METHOD, self._call)
            wrapt.wrap_function_wrapper(owners[1], _METHOD, self._acall)
            self._installed = owners

    def _prepare(self, args: Any, kwargs: Mapping[str, Any]) -> Prepared | None:
        """The decision for one request: ``None`` for anything but a ``POST /api/chat``."""
        conversations = self._conversations
        if self._instrumentation is None or conversations is None or _disabled() or _suppressed():
            return None
        if len(args) < 3 or args[1] != "POST" or args[2] != _PATH:
            return None
        body = kwargs.get("json")
        linked = conversations.link(body.get("messages") if isinstance(body, Mapping) else None)
        provider = self._provider_override or PROVIDER
        prepared = Prepared(provider, linked.conversation, linked.result_ids, OLLAMA, ambiguous=linked.ambiguous)
        return checked(prepared, linked, body, self._instrumentation, target=None)  # self-hosted: no id limit

    def _start(self, args: Any, kwargs: Mapping[str, Any]) -> tuple[Prepared, Instrumentation, _Reader, Any] | None:
        """What one chat request is observed with: its decision, the reader that stands in for the
        response class, and (streamed) the observer of the response."""
        prepared = self._prepare(args, kwargs)
        instrumentation = self._instrumentation
        if prepared is None or instrumentation is None:
            return None
        refused = prepared.refusal is not None  # the guard refuses it unsent: no response to observe
        observer = _observer(prepared, instrumentation) if kwargs.get("stream") and not refused else None
        reader = _Reader(args[0], None if observer is None else observer.observe)
        return prepared, instrumentation, reader, observer

    def _call(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``Client._request(cls, method, path, ..., stream=...)``: the request made as it would be, observed."""
        started = None
        with internal_errors_swallowed("preparing an Ollama request"):
            started = self._start(args, kwargs)
        if started is None:
            return wrapped(*args, **kwargs)
        prepared, instrumentation, reader, observer = started
        refuse_unsent(prepared, instrumentation, "Ollama")
        try:
            result = wrapped(reader, *args[1:], **kwargs)
        except BaseException as error:
            if observer is not None:
                observer.finish(ERROR)
            elif isinstance(error, Exception):
                record_provider_refusal(prepared, instrumentation, error, "Ollama")
            raise
        return _observed(prepared, instrumentation, reader, observer, result, ObservedStream)

    async def _acall(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``AsyncClient._request``: as :meth:`_call`; a streamed answer is an async iterator."""
        started = None
        with internal_errors_swallowed("preparing an Ollama request"):
            started = self._start(args, kwargs)
        if started is None:
            return await wrapped(*args, **kwargs)
        prepared, instrumentation, reader, observer = started
        refuse_unsent(prepared, instrumentation, "Ollama")
        try:
            result = await wrapped(reader, *args[1:], **kwargs)
        except BaseException as error:
            if observer is not None:
                observer.finish(ERROR)
            elif isinstance(error, Exception):
                record_provider_refusal(prepared, instrumentation, error, "Ollama")
            raise
        return _observed(prepared, instrumentation, reader, observer, result, ObservedAsyncStream)


def _observed(
    prepared: Prepared,
    instrumentation: Instrumentation,
    reader: _Reader,
    observer: ResponseObserver | None,
    result: Any,
    proxy: Callable[[Any, ResponseObserver], Any],
) -> Any:
    """What the application gets: the client's stream behind a proxy that ends the response, or its
    object, once the body it was built from is recorded."""
    with internal_errors_swallowed("observing an Ollama response"):
        if observer is not None:
            return proxy(result, cast(ResponseObserver, _FedByReader(observer)))
        events = OLLAMA.body_events(reader.body)
        if events is not None:
            _observer(prepared, instrumentation).finish_whole(events)
    if observer is not None:  # the proxy could not be made: the response is over for the rules
        observer.finish(CLOSED)
    return result


def _observer(prepared: Prepared, instrumentation: Instrumentation) -> ResponseObserver:
    """The observer of one response; its conversation keeps the response, to judge the next request by."""
    observer = instrumentation.observer(
        prepared.conversation,
        provider_name=prepared.provider_name,
        tool_message_ids=prepared.result_ids,
        protocol=OLLAMA,
    )
    observer.linkage_ambiguous = prepared.ambiguous
    observer.pairing = prepared.pairing
    conversation = prepared.conversation
    if isinstance(conversation, OllamaConversation):
        observer.answered_spans, conversation.answered_spans = conversation.answered_spans, ()

        def latest(result: AssemblyResult, call_spans: Mapping[tuple[int, int], SpanContext]) -> None:
            conversation.latest = without_content(result)
            conversation.latest_spans = {key: format(span.span_id, "016x") for key, span in call_spans.items()}
            # the client's ToolCall objects lost their ids: a host finds every call by name and order
            positional.note(instrumentation.telemetry, result, call_spans, ids_dropped=True)

        observer.when_reported(latest)
    return observer


def instrument_ollama(**options: Unpack[InstrumentorOptions]) -> OllamaInstrumentor:
    """One line for manual use: instrument the ``ollama`` client's chat calls and return the instrumentor."""
    return instrumented(OllamaInstrumentor(), options)
