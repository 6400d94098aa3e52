"""OpenTelemetry instrumentor for the ``openai`` client's streamed Chat Completions.

``OpenAIInstrumentor().instrument()`` (or ``opentelemetry-instrument``, through the
``opentelemetry_instrumentor`` entry point) wraps ``chat.completions.create`` of the sync
and async clients. Only ``stream=True`` calls are touched: the returned stream is a
transparent proxy that yields the SDK's own chunks while the identity rules run beside
it. ``chat.completions.stream(...)`` calls ``create`` internally and is covered too.

Linkage across turns. A follow-up request of the same conversation carries the previous
request's messages, then the assistant message with ``tool_calls``, then one
``role: "tool"`` message per answered call. "Same conversation" is decided by that
prefix: the messages before the last assistant message must be exactly the messages of an
earlier streamed request (compared by a SHA-256 fingerprint; no content is kept). The
tool messages after it (none at all when the app skipped them) are then checked against
that response's proposals before the request is sent, without changing it. At most ``max_conversations`` are remembered
(least recently used first out).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from wrapt import BoundFunctionWrapper, FunctionWrapper, wrap_function_wrapper

from etf_otel.core.linkage import Conversation
from etf_otel.instrumentation.safety import internal_errors_swallowed
from etf_otel.instrumentation.setup import Instrumentation
from etf_otel.protocols.base import field

__all__ = ["OpenAIInstrumentor", "detect_provider", "instrument_openai"]

_MODULE = "openai.resources.chat.completions"
DEFAULT_MAX_CONVERSATIONS = 1024

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


def detect_provider(base_url: object) -> str | None:
    """The ``gen_ai.provider.name`` for a client's base URL, or ``None`` when not certain."""
    host = (urlsplit(str(base_url)).hostname or "").lower()
    for suffix, provider in _PROVIDER_HOSTS:
        if host == suffix or (suffix.startswith(".") and host.endswith(suffix)):
            return provider
    return None


def _plain(value: Any) -> Any:
    if type(value) is dict:
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(exclude_unset=True, warnings=False)
    return value


_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, default=str, separators=(",", ":"))
"""One shared encoder: ``json.dumps`` with options builds a new encoder on every call."""


def _message_digests(messages: Sequence[Any]) -> list[bytes]:
    """One SHA-256 per message, so a request's prefix and whole history share the work."""
    encode = _CANONICAL_JSON.encode
    return [hashlib.sha256(encode(_plain(m)).encode("utf-8", "surrogatepass")).digest() for m in messages]


def _fingerprint(digests: Sequence[bytes]) -> bytes:
    return hashlib.sha256(b"".join(digests)).digest()


def _role(message: Any) -> object:
    return field(message, "role")


class _ConversationIndex:
    """Bounded map from a request's message fingerprint to its conversation."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[bytes, Conversation] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> Conversation | None:
        with self._lock:
            conversation = self._items.get(key)
            if conversation is not None:
                self._items.move_to_end(key)
            return conversation

    def put(self, key: bytes, conversation: Conversation) -> None:
        with self._lock:
            self._items[key] = conversation
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


def split_follow_up(messages: Sequence[Any]) -> tuple[int, list[str | None]] | None:
    """``(position of the last assistant message, tool_call_ids of the tool messages after it)``.

    ``None`` when the request has no assistant message: it starts a conversation. An
    assistant message followed by no tool message at all answers none of its calls.
    """
    last_assistant = None
    for position in range(len(messages) - 1, -1, -1):
        if _role(messages[position]) == "assistant":
            last_assistant = position
            break
    if last_assistant is None:
        return None
    ids: list[str | None] = []
    for message in messages[last_assistant + 1 :]:
        if _role(message) == "tool":
            call_id = field(message, "tool_call_id")
            ids.append(call_id if isinstance(call_id, str) else None)
    return last_assistant, ids


class OpenAIInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instruments ``openai`` streamed Chat Completions with etf-otel.

    ``instrument(tracer_provider=None, meter_provider=None, provider_name=None, allow=(),
    capture_content=None, max_conversations=1024)``; ``uninstrument()`` restores the client.
    """

    _instrumentation: Instrumentation | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("openai >= 1.40",)

    @property
    def instrumentation(self) -> Instrumentation | None:
        """The shared setup; use ``.host(...)`` on it so executions link to their assemblies."""
        return self._instrumentation

    def _instrument(self, **kwargs: Any) -> None:
        self._instrumentation = Instrumentation(
            kwargs.get("tracer_provider"),
            kwargs.get("meter_provider"),
            allow=kwargs.get("allow", ()),
            capture_content=kwargs.get("capture_content"),
        )
        self._provider_override: str | None = kwargs.get("provider_name")
        self._last_provider: tuple[object, str | None] | None = None
        self._conversations = _ConversationIndex(kwargs.get("max_conversations", DEFAULT_MAX_CONVERSATIONS))
        wrap_function_wrapper(_MODULE, "Completions.create", self._create)
        wrap_function_wrapper(_MODULE, "AsyncCompletions.create", self._async_create)

    def _uninstrument(self, **kwargs: Any) -> None:
        import openai.resources.chat.completions as completions

        _remove_own_wrapper(completions.Completions, self._create)
        _remove_own_wrapper(completions.AsyncCompletions, self._async_create)
        self._instrumentation = None

    def _provider_of(self, base_url: object) -> str | None:
        """:func:`detect_provider`, remembered for the last base URL object seen (usually the only one)."""
        cached = self._last_provider
        if cached is not None and cached[0] is base_url:
            return cached[1]
        provider = detect_provider(base_url)
        self._last_provider = (base_url, provider)
        return provider

    def _prepare(self, instance: Any, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """Everything the stream wrapper needs, decided before the request is sent."""
        with internal_errors_swallowed("preparing an openai request"):
            if self._instrumentation is None or not kwargs.get("stream"):
                return None
            provider = self._provider_override or self._provider_of(getattr(instance._client, "base_url", ""))
            messages = list(kwargs.get("messages") or ())
            conversation: Conversation | None = None
            tool_ids: list[str | None] | None = None
            digests = _message_digests(messages)
            follow_up = split_follow_up(messages)
            if follow_up is not None:
                position, tool_ids = follow_up
                conversation = self._conversations.get(_fingerprint(digests[:position]))
            if conversation is None:
                conversation, tool_ids = Conversation(), None
            self._conversations.put(_fingerprint(digests), conversation)
            return {"conversation": conversation, "provider_name": provider, "tool_message_ids": tool_ids}
        return None

    def _create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs)
        result = wrapped(*args, **kwargs)
        if prepared is None or self._instrumentation is None:
            return result
        return self._instrumentation.stream(result, **prepared)

    async def _async_create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs)
        result = await wrapped(*args, **kwargs)
        if prepared is None or self._instrumentation is None:
            return result
        return self._instrumentation.stream(result, **prepared)


def _remove_own_wrapper(cls: type, wrapper: Any) -> None:
    """Remove our wrapper from ``cls.create`` wherever it sits in a chain of wrapt wrappers.

    ``opentelemetry.instrumentation.utils.unwrap`` removes the outermost wrapper, which is
    another instrumentation's when it wrapped ``create`` after us.
    """
    outer: Any = None
    current: Any = cls.__dict__.get("create")
    while isinstance(current, (FunctionWrapper, BoundFunctionWrapper)):
        if current._self_wrapper == wrapper:
            if outer is None:
                setattr(cls, "create", current.__wrapped__)  # noqa: B010 - cls is any class
            else:
                outer.__wrapped__ = current.__wrapped__
            return
        outer, current = current, current.__wrapped__


def instrument_openai(**kwargs: Any) -> OpenAIInstrumentor:
    """One line for manual use: instrument the ``openai`` client and return the instrumentor."""
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(**kwargs)
    return instrumentor
