"""OpenTelemetry instrumentor for the ``anthropic`` client's Messages, streamed or not.

``AnthropicInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``etf_otel_anthropic`` entry point of the ``opentelemetry_instrumentor`` group) observes every
response of ``POST /v1/messages`` whatever the call shape: ``messages.create`` streamed or not,
``messages.stream(...)``, ``beta.messages.create`` / ``beta.messages.stream``, the raw and
streaming-response forms, sync and async. It wraps the two places all of them pass
(:mod:`etf_otel.integrations._sdk_hooks`), when the application imports ``anthropic``. A stream
the application gets is a transparent proxy of the SDK's own (the ``MessageStream`` helpers read
it as they would read the SDK's); a complete ``Message`` is judged by the same rules and
returned as it is.

``Anthropic``, ``AsyncAnthropic`` and the Bedrock, Vertex and Foundry clients share the SDK's
base client, so all of them are covered (the instrumentor reads the request before a Bedrock or
Vertex client rewrites its path). ``gen_ai.provider.name`` is the one the client states for its
own telemetry (``anthropic``, ``aws.bedrock`` for the Bedrock clients, ``gcp.vertex_ai`` for
Vertex), unless ``provider_name=`` or ``OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME`` overrides it.

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

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Final

from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._instrumentor_base import (
    ClientInstrumentor,
    InstrumentorOptions,
    Prepared,
    dependency_met,
    instrumented,
    rejected_by,
)
from etf_otel.integrations._prefix_conversations import PrefixConversations
from etf_otel.integrations._request_pairing import TargetOf, checked
from etf_otel.integrations._sdk_hooks import SdkHooks, request_body, request_route
from etf_otel.protocols import ANTHROPIC_MESSAGES

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "FALLBACK_PROVIDER",
    "AnthropicInstrumentor",
    "instrument_anthropic",
    "provider_of_client",
]


FALLBACK_PROVIDER: Final = "anthropic"
"""``gen_ai.provider.name`` of a client that states none for its own telemetry."""

_DEPENDENCY = "anthropic >= 2.10"

_MESSAGES_PATH: Final = "/messages"


def provider_of_client(client: object) -> str:
    """The ``gen_ai.provider.name`` of an ``anthropic`` client.

    The value the client states for its own telemetry (``aws.bedrock`` for the Bedrock
    clients, ``gcp.vertex_ai`` for Vertex), else ``anthropic``.
    """
    name = getattr(client, "_gen_ai_provider_name", None)
    return name if isinstance(name, str) and name else FALLBACK_PROVIDER


class AnthropicInstrumentor(ClientInstrumentor):
    """Instruments ``anthropic`` Messages (every call shape, streamed or not) with etf-otel.

    ``instrument(**options)`` (:class:`~etf_otel.integrations._instrumentor_base.InstrumentorOptions`);
    an option left ``None`` takes its environment variable, else its default.
    ``uninstrument()`` restores the client.
    """

    _hooks: SdkHooks | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return (_DEPENDENCY,)

    def _instrument(self, **kwargs: Any) -> None:
        instrumentation, capacity = self._set_up(kwargs)
        self._conversations = PrefixConversations(
            capacity, ANTHROPIC_MESSAGES, rejected_by(instrumentation), guarded=bool(instrumentation.guard)
        )
        self._target = TargetOf()
        self._hooks = SdkHooks("anthropic", self._prepare, self._observe, _checked_version, refused=self._refused)
        self._hooks.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._hooks is not None:
            self._hooks.uninstall()
            self._hooks = None
        self._instrumentation = None

    def _prepare(self, client: Any, options: Any) -> Prepared | None:
        """The decision for one request of ``client``; ``None`` for anything but ``POST /v1/messages``."""
        route = request_route(options)
        if self._instrumentation is None or route is None or _disabled():
            return None
        method, path = route
        if method != "post" or not path.endswith(_MESSAGES_PATH):
            return None
        provider = self._provider_override or provider_of_client(client)
        body = request_body(options)
        linked = self._conversations.link(body.get("messages"))
        prepared = Prepared(
            provider, linked.conversation, linked.result_ids, ANTHROPIC_MESSAGES, ambiguous=linked.ambiguous
        )
        target = self._target(getattr(client, "base_url", ""))
        return checked(prepared, linked, body, self._instrumentation, target=target)

    def _refused(self, prepared: Prepared, error: BaseException, provider_refused: bool) -> None:
        if self._instrumentation is not None:
            prepared.refused(self._instrumentation, error, provider_refused)

    def _observe(self, parsed: Any, prepared: Prepared, is_stream: bool) -> Any:
        """What the application gets for ``parsed``: a stream observed, a ``Message`` recorded and returned."""
        instrumentation = self._instrumentation
        return parsed if instrumentation is None else prepared.observe_parsed(instrumentation, parsed, is_stream)


def _checked_version() -> bool:
    return dependency_met(_DEPENDENCY, "the anthropic client is not instrumented")


def instrument_anthropic(**options: Unpack[InstrumentorOptions]) -> AnthropicInstrumentor:
    """One line for manual use: instrument the ``anthropic`` client and return the instrumentor."""
    return instrumented(AnthropicInstrumentor(), options)
