"""OpenTelemetry instrumentor for the ``google-genai`` client: Gemini responses, streamed or not.

``GoogleGenAIInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_google_genai`` entry point) observes every Gemini response of ``client.models`` and
``client.aio.models``: ``generate_content_stream`` and ``generate_content``, the ``chats``
helpers built on them, the Developer API and Vertex AI clients. It wraps, when the application
imports ``google.genai``, the one place each model request passes:

* ``Models._generate_content_stream_with_continuation`` (and ``AsyncModels``'): the chunks of one
  request, including the further requests of automatic continuation (``finishReason:
  CONTINUATION`` with a ``continuationToken``), which continue the same response. Its chunks are
  observed through a transparent proxy (the SDK's own objects, its own exceptions: an in-band
  ``{"error": ...}`` raises in the SDK and fails the response).
* ``Models._generate_content_with_continuation`` (and ``AsyncModels``'): one complete body,
  judged as a body (``etf.response.streamed`` false) and returned as it is.

With automatic function calling, one ``generate_content_stream`` call makes a request per round
and yields the chunks of each: every request is its own response, and the functions the SDK runs
are executions (:mod:`~etf_otel.integrations.google_genai._executions`).

Linkage across turns (:mod:`~etf_otel.integrations.google_genai._linkage`): a request whose
``contents`` answer a model turn settles that turn's response, by id and name when its calls had
ids, by name and order when they had none.

``gen_ai.provider.name``: ``gcp.vertex_ai`` for a Vertex AI client, ``gcp.gemini`` otherwise,
unless ``provider_name=`` or ``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME`` says another.

Instrumenting never imports the SDK: the wrappers are put in place when the application imports
``google.genai`` (a post-import hook).
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import AsyncIterator, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import wrapt

from etf_otel.core._results import AssemblyResult
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._streams import observer_of
from etf_otel.instrumentation._switches import _disabled, _suppressed
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    Prepared,
    instrumented,
    rejected_by,
    remove_own_wrapper,
)
from etf_otel.integrations._request_pairing import checked, refused_by_provider
from etf_otel.integrations.google_genai import _executions as executions
from etf_otel.integrations.google_genai._linkage import GeminiConversation, GeminiConversations, without_content
from etf_otel.protocols import GEMINI

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DEVELOPER_PROVIDER", "VERTEX_PROVIDER", "GoogleGenAIInstrumentor", "instrument_google_genai"]

DEVELOPER_PROVIDER: Final = "gcp.gemini"
"""``gen_ai.provider.name`` of a Gemini Developer API client."""
VERTEX_PROVIDER: Final = "gcp.vertex_ai"
"""``gen_ai.provider.name`` of a Vertex AI client (``Client(vertexai=True, ...)``)."""

_SDK: Final = "google.genai"
_STREAM: Final = "_generate_content_stream_with_continuation"
_BODY: Final = "_generate_content_with_continuation"


class GoogleGenAIInstrumentor(ClientInstrumentor):
    """Instruments ``google-genai`` model calls (streamed or not, sync and ``aio``) with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    ``uninstrument()`` restores the client.
    """

    _conversations: GeminiConversations | None = None
    _generation = 0
    _installed: tuple[tuple[Any, str, Any], ...] = ()
    _lock: Final = threading.RLock()  # BaseInstrumentor makes one instance: no __init__ of ours

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("google-genai >= 1.0",)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, capacity = self._set_up(kwargs)
        self._conversations = GeminiConversations(capacity, rejected_by(instrumentation))
        with self._lock:
            self._generation += 1
            generation = self._generation
        wrapt.register_post_import_hook(lambda module: self._wrap(generation), _SDK)

    def _uninstrument(self, **kwargs: Any) -> None:
        with self._lock:
            self._generation += 1
            for owner, name, wrapper in self._installed:
                remove_own_wrapper(owner, wrapper, name)
            self._installed = ()
        self._instrumentation = None
        self._conversations = None

    def _wrap(self, generation: int) -> None:
        with self._lock, internal_errors_swallowed("instrumenting the google-genai SDK"):
            if generation != self._generation or self._installed:
                return
            models = sys.modules.get(f"{_SDK}.models")
            extra = sys.modules.get(f"{_SDK}._extra_utils")
            targets: list[tuple[Any, str, Any]] = [
                (getattr(models, "Models", None), _STREAM, self._stream),
                (getattr(models, "AsyncModels", None), _STREAM, self._stream),
                (getattr(models, "Models", None), _BODY, self._body),
                (getattr(models, "AsyncModels", None), _BODY, self._body_async),
                (extra, "get_function_response_parts", executions.function_response_parts),
                (extra, "get_function_response_parts_async", executions.function_response_parts_async),
                (extra, "invoke_function_from_dict_args", executions.invoke),
                (extra, "invoke_function_from_dict_args_async", executions.invoke_async),
            ]
            if any(owner is None or not callable(getattr(owner, name, None)) for owner, name, _ in targets):
                raise TypeError("the google-genai SDK does not have the layout this version of etf-otel knows")
            for owner, name, wrapper in targets:
                wrapt.wrap_function_wrapper(owner, name, wrapper)
                self._installed += ((owner, name, wrapper),)

    # --- a request ------------------------------------------------------------------------------

    def _prepare(self, models: Any, kwargs: dict[str, Any]) -> Prepared | None:
        """The decision for one model request: its provider and the conversation it continues."""
        conversations = self._conversations
        if self._instrumentation is None or conversations is None or _disabled() or _suppressed():
            return None
        client = getattr(models, "_api_client", None)
        provider = self._provider_override or (
            VERTEX_PROVIDER if getattr(client, "vertexai", False) is True else DEVELOPER_PROVIDER
        )
        linked = conversations.link(kwargs.get("contents"))
        prepared = Prepared(provider, linked.conversation, linked.result_ids, GEMINI, ambiguous=linked.ambiguous)
        return checked(prepared, linked, kwargs.get("contents"), self._instrumentation, target=None)  # no id limit

    def _refuse(self, prepared: Prepared | None, error: BaseException, provider_refused: bool) -> None:
        """A request that got no response: the span its response would have had (a refusal of the API, a
        ``400``; or the request guard's, then raised here before anything is sent)."""
        instrumentation = self._instrumentation
        if (
            prepared is not None
            and instrumentation is not None
            and (not provider_refused or refused_by_provider(error))
        ):
            with internal_errors_swallowed("recording a refused Gemini request"):
                prepared.refused(instrumentation, error, provider_refused)
        if not provider_refused:
            raise error

    def _decide(self, models: Any, kwargs: dict[str, Any]) -> Prepared | None:
        with internal_errors_swallowed("preparing a Gemini request"):
            return self._prepare(models, kwargs)
        return None

    def _stream(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """The chunks of one request (and its continuations), observed from the first chunk on.

        A request the API refuses (an ``APIError`` before any chunk: an HTTP error status, or an
        in-band error as the first event, which the SDK treats alike) raises as it would without
        etf-otel and is no response; any other failure (the SDK refusing the first chunk's shape,
        a cut connection) fails the response, as later failures do.
        """
        prepared = self._decide(instance, kwargs)
        if prepared is not None and prepared.refusal is not None:
            self._refuse(prepared, prepared.refusal, False)
        stream = wrapped(*args, **kwargs)
        if prepared is None or self._instrumentation is None:
            return stream
        if hasattr(stream, "__aiter__"):
            return self._observed_async(prepared, stream)
        return self._observed(prepared, stream)

    def _observe(self, prepared: Prepared, stream: Any, is_async: bool) -> Any:
        """``stream`` (the first chunk put back in front) observed, or ``None`` when it is not."""
        instrumentation = self._instrumentation
        if instrumentation is None:
            return None
        with internal_errors_swallowed("observing a Gemini stream"):
            response = executions.FollowedResponse()
            tapped = executions.tap_async(stream, response) if is_async else executions.tap(stream, response)
            observed = prepared.observe(instrumentation, tapped)
            observer = observer_of(observed)
            if observer is None:
                return None
            response.follow(observer)
            _remember_latest(prepared, observer)
            return observed
        return None

    def _observed(self, prepared: Prepared, stream: Any) -> Iterable[Any]:
        return _Observed(self, prepared, stream)

    def _first(self, prepared: Prepared, stream: Any) -> Iterator[Any]:
        """What the SDK iterates: the first chunk read (a refused request raises here), then the rest observed.

        The observed stream's own generator is returned, so each chunk passes one generator of etf-otel's.
        """
        iterator = iter(stream)
        try:
            first = [next(iterator)]
        except StopIteration:
            first = []
        except Exception as error:
            if _refused(error):
                self._refuse(prepared, error, True)
                raise
            iterator, first = _raising(error), []
        rest = itertools.chain(first, iterator)
        observed = self._observe(prepared, rest, is_async=False)
        return rest if observed is None else iter(observed)

    async def _observed_async(self, prepared: Prepared, stream: Any) -> AsyncIterator[Any]:
        iterator = stream.__aiter__()
        try:
            first = [await iterator.__anext__()]
        except StopAsyncIteration:
            first = []
        except Exception as error:
            if _refused(error):
                self._refuse(prepared, error, True)
                raise
            iterator, first = _raising_async(error), []
        rest = _chained(first, iterator)
        observed = self._observe(prepared, rest, is_async=True)
        chunks: Any = rest if observed is None else observed
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await chunks.aclose()

    def _record(self, prepared: Prepared | None, body: Any) -> None:
        """A complete body, judged as a body, its calls ready for the functions the SDK runs."""
        instrumentation = self._instrumentation
        if prepared is None or instrumentation is None or _disabled() or _suppressed():
            return
        with internal_errors_swallowed("recording a Gemini response body"):
            events = GEMINI.body_events(body)
            if events is None:
                return
            observer = instrumentation.observer(
                prepared.conversation,
                provider_name=prepared.provider_name,
                tool_message_ids=prepared.result_ids,
                protocol=GEMINI,
            )
            observer.linkage_ambiguous = prepared.ambiguous
            observer.pairing = prepared.pairing
            response = executions.FollowedResponse()
            response.follow(observer)
            _remember_latest(prepared, observer)
            observer.finish_whole(events)
            executions.mark_body(body, response)

    def _body(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._decide(instance, kwargs)
        if prepared is not None and prepared.refusal is not None:
            self._refuse(prepared, prepared.refusal, False)
        try:
            body = wrapped(*args, **kwargs)
        except Exception as error:
            self._refuse(prepared, error, True)
            raise
        self._record(prepared, body)
        return body

    async def _body_async(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._decide(instance, kwargs)
        if prepared is not None and prepared.refusal is not None:
            self._refuse(prepared, prepared.refusal, False)
        try:
            body = await wrapped(*args, **kwargs)
        except Exception as error:
            self._refuse(prepared, error, True)
            raise
        self._record(prepared, body)
        return body


class _Observed:
    """The stream a wrapped ``_generate_content_stream_with_continuation`` returns: nothing is read until
    the SDK iterates it (as with the SDK's own generator); then its iterator is the observed stream's."""

    __slots__ = ("_instrumentor", "_iterator", "_prepared", "_stream")

    def __init__(self, instrumentor: GoogleGenAIInstrumentor, prepared: Prepared, stream: Any) -> None:
        self._instrumentor, self._prepared, self._stream = instrumentor, prepared, stream
        self._iterator: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        if self._iterator is None:  # iterated again: the same chunks go on, as with a generator
            self._iterator = iter(())  # a refused request raises once, then it is over
            self._iterator = self._instrumentor._first(self._prepared, self._stream)
        return self._iterator


def _refused(error: Exception) -> bool:
    """An ``google.genai.errors.APIError`` (the SDK's error for a refused request)."""
    return any(cls.__name__ == "APIError" and cls.__module__ == "google.genai.errors" for cls in type(error).__mro__)


def _raising(error: Exception) -> Iterator[Any]:
    raise error
    yield  # pragma: no cover - a generator that raises at once


async def _raising_async(error: Exception) -> AsyncIterator[Any]:
    raise error
    yield  # pragma: no cover - an async generator that raises at once


async def _chained(first: list[Any], rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    for chunk in first:
        yield chunk
    try:
        async for chunk in rest:
            yield chunk
    finally:
        close = getattr(rest, "aclose", None)
        if callable(close):
            await close()


def _remember_latest(prepared: Prepared, observer: Any) -> None:
    """The conversation keeps its latest response (the next request is judged against its calls)."""
    conversation = prepared.conversation
    if isinstance(conversation, GeminiConversation):

        def latest(result: AssemblyResult, call_spans: Any) -> None:
            conversation.latest = without_content(result)

        observer.when_reported(latest)


def instrument_google_genai(**options: Unpack[InstrumentorOptions]) -> GoogleGenAIInstrumentor:
    """One line for manual use: instrument the ``google-genai`` client and return the instrumentor."""
    return instrumented(GoogleGenAIInstrumentor(), options)
