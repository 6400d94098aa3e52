"""OpenTelemetry instrumentor for the Mistral SDK (``mistralai``): chat recorded as Chat Completions.

``MistralInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_mistral`` entry point) observes ``client.chat.complete``, ``client.chat.stream`` and their
``_async`` forms. The SDK sends every request through its own transport method, ``do_request`` /
``do_request_async`` of ``BaseSDK``, with the operation's id: that method is wrapped at class level
(every ``Mistral`` client, one created before instrumenting too), and only the two chat operations
are read; every other operation passes untouched. ``httpx`` is not touched globally.

* ``stream_chat``: the returned ``httpx.Response``'s byte stream is replaced, for that response only,
  by one that hands the same bytes on and reads the SSE events the SDK will decode
  (:mod:`etf_otel.integrations.mistral._wire`): the wire as Mistral sent it, the ``[DONE]`` the SDK
  swallows included.
* ``chat_completion_v1_chat_completions_post``: the JSON body, already read by the transport, is
  judged as a complete Chat Completions body.
* A request the transport raises for, or an error status, is no response; the request was linked
  all the same.

The request's ``messages`` (the JSON body the SDK serialized) link it to the response it answers,
as for the ``openai`` client. ``gen_ai.provider.name`` is ``mistral_ai`` unless ``provider_name=`` or
``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME`` says another. Instrumenting never imports ``mistralai``.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Collection, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

import wrapt
from opentelemetry import context as context_api

from etf_otel.core._targets import target_of
from etf_otel.instrumentation._observer import ERROR
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled, _suppressed
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    Prepared,
    instrumented,
    rejected_by,
    remove_own_wrapper,
)
from etf_otel.integrations._prefix_conversations import PrefixConversations
from etf_otel.integrations._request_pairing import checked, refuse_unsent
from etf_otel.integrations.mistral._wire import tap_types
from etf_otel.protocols import CHAT_COMPLETIONS

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["PROVIDER", "MistralInstrumentor", "instrument_mistral"]

PROVIDER: Final = "mistral_ai"
"""``gen_ai.provider.name`` of the Mistral API (the OpenTelemetry GenAI value)."""

_MODULE: Final = "mistralai.client.basesdk"
_OWNER: Final = "BaseSDK"
_STREAMED: Final = "stream_chat"
_WHOLE: Final = "chat_completion_v1_chat_completions_post"
_SDK_SPAN_CONTEXT: Final = "_tracing_span_context"


class MistralInstrumentor(ClientInstrumentor):
    """Instruments the ``mistralai`` SDK's chat with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    ``uninstrument()`` restores the SDK.
    """

    _conversations: PrefixConversations | None = None
    _generation = 0
    _installed: Any = None
    _taps: tuple[type, type] | None = None
    _lock: Final = threading.RLock()  # BaseInstrumentor makes one instance: no __init__ of ours

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("mistralai >= 2.0",)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, capacity = self._set_up(kwargs)
        guarded = bool(instrumentation.guard)
        self._conversations = PrefixConversations(
            capacity, CHAT_COMPLETIONS, rejected_by(instrumentation), guarded=guarded
        )
        with self._lock:
            self._generation += 1
            generation = self._generation
        wrapt.register_post_import_hook(lambda module: self._wrap(module, generation), _MODULE)

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._generation += 1
            if self._installed is not None:
                remove_own_wrapper(self._installed, self._call, "do_request")
                remove_own_wrapper(self._installed, self._acall, "do_request_async")
                self._installed = None
        self._instrumentation = None
        self._conversations = None

    def _wrap(self, module: ModuleType, generation: int) -> None:
        with self._lock, internal_errors_swallowed("instrumenting mistralai"):
            if generation != self._generation or self._installed is not None:
                return
            owner = getattr(module, _OWNER, None)
            httpx = getattr(module, "httpx", None)
            if owner is None or httpx is None or not callable(getattr(owner, "do_request", None)):
                raise TypeError("mistralai does not have the layout this version of etf-otel knows")
            self._taps = tap_types(httpx.SyncByteStream, httpx.AsyncByteStream)
            wrapt.wrap_function_wrapper(owner, "do_request", self._call)
            wrapt.wrap_function_wrapper(owner, "do_request_async", self._acall)
            self._installed = owner

    def _prepare(self, args: Any, kwargs: Any) -> tuple[Prepared, str] | None:
        """The decision for one request: ``None`` for anything but the two chat operations."""
        conversations = self._conversations
        if self._instrumentation is None or conversations is None or _disabled() or _suppressed():
            return None
        context = args[0] if args else kwargs.get("hook_ctx")
        operation = getattr(context, "operation_id", None)
        if operation not in (_STREAMED, _WHOLE):
            return None
        request = args[1] if len(args) > 1 else kwargs.get("request")
        body = json.loads(request.content) if request is not None and request.content else None
        linked = conversations.link(body.get("messages") if isinstance(body, dict) else None)
        provider = self._provider_override or PROVIDER
        prepared = Prepared(
            provider, linked.conversation, linked.result_ids, CHAT_COMPLETIONS, ambiguous=linked.ambiguous
        )
        target = target_of(str(getattr(request, "url", "")))  # api.mistral.ai: 9 characters of [a-zA-Z0-9]
        return checked(prepared, linked, body, self._instrumentation, target=target), operation

    def _refused(self, decided: tuple[Prepared, str], response: Any) -> None:
        """A 4xx answer: the span its response would have had, with the error the SDK raises for it
        (``SDKError``, ``HTTPValidationError`` for a 422); the body (read already) says whether it is a pairing
        refusal, and is never recorded."""
        instrumentation = self._instrumentation
        if instrumentation is None:
            return
        with internal_errors_swallowed("recording a Mistral request the provider refused"):
            decided[0].refused(instrumentation, _provider_refusal(response), True)

    def _observe(self, decided: tuple[Prepared, str], response: Any, is_async: bool) -> None:
        """The response of a chat request, as the transport returned it (a 200 only)."""
        instrumentation, taps = self._instrumentation, self._taps
        if instrumentation is None or taps is None or getattr(response, "status_code", None) != 200:
            return
        prepared, operation = decided
        with internal_errors_swallowed("observing a Mistral response"), _inside_sdk_span(response):
            if operation == _WHOLE:
                prepared.record(instrumentation, json.loads(response.content))
                return
            observer = instrumentation.observer(
                prepared.conversation,
                provider_name=prepared.provider_name,
                tool_message_ids=prepared.result_ids,
                protocol=CHAT_COMPLETIONS,
            )
            observer.linkage_ambiguous = prepared.ambiguous
            observer.pairing = prepared.pairing
            try:
                response.stream = taps[1 if is_async else 0](response.stream, observer)
            except BaseException:
                observer.finish(ERROR)
                raise

    def _call(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``BaseSDK.do_request(hook_ctx, request, ...)``: the request made as it would be, its answer observed."""
        decided = None
        with internal_errors_swallowed("preparing a Mistral request"):
            decided = self._prepare(args, kwargs)
        refuse_unsent(None if decided is None else decided[0], self._instrumentation, "Mistral")
        response = wrapped(*args, **kwargs)
        if decided is not None and _refusal(response):
            with internal_errors_swallowed("reading a Mistral refusal"):
                response.read()  # cached: the SDK reads the same bytes for its error
            self._refused(decided, response)
        elif decided is not None:
            self._observe(decided, response, is_async=False)
        return response

    async def _acall(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``BaseSDK.do_request_async``: as :meth:`_call`."""
        decided = None
        with internal_errors_swallowed("preparing a Mistral request"):
            decided = self._prepare(args, kwargs)
        refuse_unsent(None if decided is None else decided[0], self._instrumentation, "Mistral")
        response = await wrapped(*args, **kwargs)
        if decided is not None and _refusal(response):
            with internal_errors_swallowed("reading a Mistral refusal"):
                await response.aread()  # cached: the SDK reads the same bytes for its error
            self._refused(decided, response)
        elif decided is not None:
            self._observe(decided, response, is_async=True)
        return response


def _refusal(response: Any) -> bool:
    """A refusal of the request itself, as the other integrations take it (a ``400``), or Mistral's ``422`` for a
    request its schema refuses; an auth error or a rate limit is not the request's fault and gets no span here."""
    return getattr(response, "status_code", None) in (400, 422)


class _ProviderRefusal(Exception):
    """A 4xx answer, as the refused request's span names it: ``error.type`` is the class name of what the SDK
    raises for it (:class:`SDKError`, :class:`HTTPValidationError` for a 422), ``message`` the provider's own
    message, read only to tell a pairing refusal (never recorded)."""

    def __init__(self, response: Any) -> None:
        super().__init__()
        self.message: object = None
        with internal_errors_swallowed("reading a Mistral refusal's message"):
            body = json.loads(response.content)
            detail = body.get("message") if isinstance(body, dict) else None
            self.message = detail if isinstance(detail, str) else json.dumps(body)


class SDKError(_ProviderRefusal):
    """Named as ``mistralai``'s error for a 4xx."""


class HTTPValidationError(_ProviderRefusal):
    """Named as ``mistralai``'s error for a 422."""


def _provider_refusal(response: Any) -> _ProviderRefusal:
    return HTTPValidationError(response) if response.status_code == 422 else SDKError(response)


@contextlib.contextmanager
def _inside_sdk_span(response: Any) -> Iterator[None]:
    """The SDK's own chat span made current, when its tracing is on (``MISTRAL_SDK_TELEMETRY``): the response
    etf-otel records then nests under it, as the audit expects of an observed LLM call. The SDK keeps that
    span's context on the request (``_tracing_span_context``); any other layout leaves the context as it is."""
    extensions = getattr(getattr(response, "request", None), "extensions", None)
    sdk_context = extensions.get(_SDK_SPAN_CONTEXT) if isinstance(extensions, dict) else None
    token = context_api.attach(sdk_context) if isinstance(sdk_context, context_api.Context) else None
    try:
        yield
    finally:
        if token is not None:
            context_api.detach(token)


def instrument_mistral(**options: Unpack[InstrumentorOptions]) -> MistralInstrumentor:
    """One line for manual use: instrument the ``mistralai`` SDK's chat and return the instrumentor."""
    return instrumented(MistralInstrumentor(), options)
