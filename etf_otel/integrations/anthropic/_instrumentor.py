"""OpenTelemetry instrumentor for the ``anthropic`` client's streamed Messages.

``AnthropicInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_anthropic`` entry point of the ``opentelemetry_instrumentor`` group) wraps, on
the sync and async ``Messages`` resources:

* ``messages.create(stream=True)``: when it returns the SDK's ``Stream`` / ``AsyncStream``,
  the application gets a transparent proxy of it that yields the SDK's own events while the
  identity rules (protocol ``anthropic_messages``) run beside them. Anything else it returns
  (a ``Message``, the raw response of ``with_raw_response``) is returned untouched.
* ``messages.stream(...)``: the SDK's own ``MessageStreamManager`` is returned; only the
  request it makes when the ``with`` block is entered is wrapped, so the ``MessageStream``
  (``text_stream``, ``get_final_message()``, ...) is the SDK's, reading an observed raw
  stream. The helper posts the request itself and never calls ``create``: one response is
  observed once.

``Anthropic``, ``AsyncAnthropic`` and the Bedrock, Vertex and Foundry clients share these
resource classes, so all of them are covered. ``gen_ai.provider.name`` is the one the
client states for its own telemetry (``anthropic``, ``aws.bedrock`` for the Bedrock clients,
``gcp.vertex_ai`` for Vertex), unless ``provider_name=`` or ``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME``
overrides it.

Linkage across turns (docs/protocols.md). The results of a response's calls must all be
``tool_result`` blocks of the **first** user message after the assistant message that
holds the calls. A follow-up request carries the earlier request's messages, the assistant
message, then that user message: the response it answers is the one that proposed the
``tool_use`` ids of that assistant message, else, as for the ``openai`` client, the one whose
request had exactly the messages before it, when only one did (a SHA-256 fingerprint; no
content is kept). The ``tool_use_id`` of each ``tool_result`` block after the assistant message is then
checked against that response's proposals before the request is sent, without changing it:
an id that was not proposed, or any result in a later message, is ``orphaned_result``; two
results for one id ``duplicate_result``; a proposal with no result in the first user message
``unanswered_call``. Only a list or tuple of messages is read: messages given as an iterator
(a generator) are left for the SDK to send, and that request is not linked.

Guard mode. ``instrumentor.instrumentation.host(host, guard=True)`` refuses a call that was
not a valid proposal with ``GuardRefusedError`` before the host runs. The Messages API
requires a ``tool_result`` for **every** ``tool_use`` block of the assistant message it is
sent back: for a refused call the application must either answer it with a ``tool_result``
block with ``"is_error": true`` in the same first user message as the other results, or drop
that assistant message (and every result of it) from the history. Otherwise the next request
fails with ``tool_use ids were found without tool_result blocks immediately after``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Generator, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _disabled
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
from etf_otel.protocols import ANTHROPIC_MESSAGES, field

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "FALLBACK_PROVIDER",
    "AnthropicInstrumentor",
    "instrument_anthropic",
    "provider_of_client",
    "split_follow_up",
]

_logger = logging.getLogger("etf_otel")

FALLBACK_PROVIDER: Final = "anthropic"
"""``gen_ai.provider.name`` of a client that states none for its own telemetry."""

_DEPENDENCY = "anthropic >= 2.10"

# The SDK's private attributes this module relies on; the integration tests pin them.
_SYNC_REQUEST = "_MessageStreamManager__api_request"
_ASYNC_REQUEST = "_AsyncMessageStreamManager__api_request"


def provider_of_client(client: object) -> str:
    """The ``gen_ai.provider.name`` of an ``anthropic`` client.

    The value the client states for its own telemetry (``aws.bedrock`` for the Bedrock
    clients, ``gcp.vertex_ai`` for Vertex), else ``anthropic``.
    """
    name = getattr(client, "_gen_ai_provider_name", None)
    return name if isinstance(name, str) and name else FALLBACK_PROVIDER


def split_follow_up(messages: Sequence[Any]) -> FollowUp | None:
    """The Anthropic Messages follow-up of a request's messages (:attr:`WireProtocol.follow_up`)."""
    return ANTHROPIC_MESSAGES.follow_up(messages)


def turn_call_ids(message: Any) -> list[str]:
    """The ``id`` of each ``tool_use`` block of an assistant message (the evidence of the response it answers)."""
    content = field(message, "content")
    if not isinstance(content, (list, tuple)):
        return []
    return string_ids(field(block, "id") for block in content if field(block, "type") == "tool_use")


class _ObservedRequest:
    """The awaitable an ``AsyncMessageStreamManager`` awaits on entry, giving the observed stream.

    Not a coroutine: a manager that is never entered leaves only the SDK's own request
    un-awaited, as it would without instrumentation.
    """

    __slots__ = ("_observe", "_request")

    def __init__(self, request: Awaitable[Any], observe: Callable[[Any], Any]) -> None:
        self._request = request
        self._observe = observe

    def __await__(self) -> Generator[Any, None, Any]:
        stream = yield from self._request.__await__()
        return self._observe(stream)


class AnthropicInstrumentor(ClientInstrumentor):
    """Instruments ``anthropic`` streamed Messages (``create(stream=True)`` and ``stream(...)``) with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    an option left ``None`` takes its environment variable, else its default.
    ``uninstrument()`` restores the client.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return (_DEPENDENCY,)

    def _instrument(self, **kwargs: Any) -> None:
        # Imported first: without the package, the launcher skips this entry point on the
        # ModuleNotFoundError, before anything was set up.
        import anthropic
        from anthropic.resources.messages import messages

        conflict = get_dependency_conflicts([_DEPENDENCY])
        if conflict is not None:
            # ``opentelemetry-instrument`` skips ``instrumentation_dependencies`` (it checks only
            # the distribution's ``instruments`` extra, which etf-otel does not declare).
            _logger.warning("etf-otel: %s; the anthropic client is not instrumented", conflict)
            return
        self._stream_types = (anthropic.Stream, anthropic.AsyncStream)
        instrumentation, capacity = self._set_up(kwargs)
        self._conversations = PrefixConversations(
            capacity, split_follow_up, turn_call_ids, rejected_by(instrumentation)
        )
        wrap_methods(messages, self._methods())

    def _uninstrument(self, **kwargs: Any) -> None:
        from anthropic.resources.messages import messages

        unwrap_methods(messages, self._methods())
        self._instrumentation = None

    def _methods(self) -> list[Method]:
        return [
            ("Messages", "create", self._create),
            ("AsyncMessages", "create", self._async_create),
            ("Messages", "stream", self._stream),
            ("AsyncMessages", "stream", self._async_stream),
        ]

    # --- before the request ---------------------------------------------------------------------------------

    def _prepare(self, instance: Any, kwargs: dict[str, Any]) -> Prepared | None:
        """Everything the stream wrapper needs, decided before the request is sent; ``None``: do not observe."""
        with internal_errors_swallowed("preparing an anthropic request"):
            if self._instrumentation is None or _disabled():
                return None
            provider = self._provider_override or provider_of_client(getattr(instance, "_client", None))
            linked = self._conversations.link(kwargs.get("messages"))
            return Prepared(
                provider, linked.conversation, linked.result_ids, ANTHROPIC_MESSAGES, ambiguous=linked.ambiguous
            )
        return None

    # --- the stream -------------------------------------------------------------------------------------------

    def _observed(self, result: Any, prepared: Prepared | None) -> Any:
        """``result`` observed when it is the SDK's stream; anything else, unchanged."""
        instrumentation = self._instrumentation
        if prepared is None or instrumentation is None or not isinstance(result, self._stream_types):
            return result
        return prepared.observe(instrumentation, result)

    def _create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs) if kwargs.get("stream") else None
        return self._observed(wrapped(*args, **kwargs), prepared)

    def _async_create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """Calls ``create`` now, as the SDK does (its argument check raises at the call, not at ``await``)."""
        if not kwargs.get("stream"):
            return wrapped(*args, **kwargs)
        prepared = self._prepare(instance, kwargs)
        coroutine = wrapped(*args, **kwargs)
        if prepared is None:
            return coroutine
        return self._awaited(coroutine, prepared)

    async def _awaited(self, coroutine: Awaitable[Any], prepared: Prepared) -> Any:
        return self._observed(await coroutine, prepared)

    # --- the stream helper ------------------------------------------------------------------------------------

    def _stream(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs)
        return self._observed_manager(wrapped(*args, **kwargs), prepared, _SYNC_REQUEST)

    def _async_stream(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs)
        return self._observed_manager(wrapped(*args, **kwargs), prepared, _ASYNC_REQUEST)

    def _observed_manager(self, manager: Any, prepared: Prepared | None, attribute: str) -> Any:
        """``manager`` whose request (``attribute``, sync or async), made on entering ``with``, is observed."""
        if prepared is not None:
            with internal_errors_swallowed("instrumenting a message stream manager"):
                request = getattr(manager, attribute)
                observe: Callable[[Any], Any] = lambda stream: self._observed(stream, prepared)  # noqa: E731
                if attribute == _ASYNC_REQUEST:
                    if not hasattr(request, "__await__"):
                        raise TypeError("the stream manager's request is not awaitable")
                    setattr(manager, attribute, _ObservedRequest(request, observe))
                else:
                    if not callable(request):
                        raise TypeError("the stream manager's request is not callable")
                    setattr(manager, attribute, lambda: observe(request()))
        return manager


def instrument_anthropic(**options: Unpack[InstrumentorOptions]) -> AnthropicInstrumentor:
    """One line for manual use: instrument the ``anthropic`` client and return the instrumentor."""
    return instrumented(AnthropicInstrumentor(), options)
