"""The Responses API part of the ``openai`` instrumentor (docs/protocols.md).

:class:`~etf_otel.integrations.openai.OpenAIInstrumentor` wraps, for the sync and async
clients:

* ``responses.create``: a ``stream=True`` call that returns the SDK's ``Stream`` /
  ``AsyncStream`` gets the same transparent proxy as Chat Completions, observed with the
  ``"responses"`` protocol. ``responses.stream(input=..., model=...)`` builds its
  ``ResponseStreamManager`` around ``create(stream=True)`` and is covered through it: the
  helper's raw stream is the proxy, its own events and types are untouched, and nothing
  else is wrapped, so each response is observed once.
* ``responses.retrieve``: ``responses.stream(response_id=...)`` replays a stored
  response through ``retrieve(stream=True)`` (from its first event; ``starting_after``
  is applied by the helper on the client side). Such a stream is observed too. A direct
  ``retrieve(stream=True, starting_after=n)`` starts mid-response and is left alone: its
  first events are missing, so the rules could only call it broken.

Linkage across turns. The results of a response are the
``function_call_output`` items of the next request, matched by ``call_id`` (an ``fc_``
item id there is an ``orphaned_result``). The next request is recognised in one of two ways:

* it names ``previous_response_id``: the response with that id, taken from the
  ``response.created`` event as it passed through the stream, and every
  ``function_call_output`` of the new input answers it;
* otherwise by prefix, like the Chat Completions fingerprints: the new ``input`` repeats
  an earlier request's input items, then that response's output items (``function_call``,
  ``reasoning``, assistant messages, ...), then the outputs. Each run of output items is
  tried, the latest first, as the end of an earlier request's input (a SHA-256 of the
  items; no content is kept); the ``function_call_output`` items after it answer.

Only the latest response of a conversation can be settled: a request that continues an
older one (a retry, a branch) is not checked, rather than compared with proposals that
were never its own. Both indexes keep at most ``max_conversations`` entries (least
recently used first out).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from wrapt import BoundFunctionWrapper, FunctionWrapper, wrap_function_wrapper

from etf_otel.core.linkage import Conversation
from etf_otel.instrumentation.safety import internal_errors_swallowed
from etf_otel.instrumentation.setup import Instrumentation
from etf_otel.protocols.base import field

__all__ = [
    "PROTOCOL",
    "ResponsesWrappers",
    "is_sdk_stream",
    "output_run_starts",
    "remove_own_wrapper",
    "result_call_ids",
]

PROTOCOL: Final = "responses"
"""The wire protocol name the streams are observed with (``etf.protocol``)."""

_MODULE: Final = "openai.resources.responses.responses"
_CREATED: Final = "response.created"

# Items that a response outputs and the next request repeats; everything else in an input
# (user, system and developer messages, ``*_call_output`` items, references) is not.
_OUTPUT_TYPES: Final = frozenset({"reasoning", "mcp_list_tools", "mcp_approval_request", "compaction"})


# --- shared with the Chat Completions wrappers (etf_otel.integrations.openai imports them) --------------


def is_sdk_stream(result: object) -> bool:
    """Whether ``result`` is the SDK's ``Stream`` / ``AsyncStream`` (not a raw or parsed response wrapper).

    ``with_raw_response.create(stream=True)`` goes through the wrapped ``create`` too but
    returns the HTTP response, which the application parses itself: it is left alone.
    """
    from openai import AsyncStream, Stream

    return isinstance(result, (Stream, AsyncStream))


def remove_own_wrapper(cls: type, wrapper: Any, name: str = "create") -> None:
    """Remove our wrapper from ``cls.<name>`` wherever it sits in a chain of wrapt wrappers.

    ``opentelemetry.instrumentation.utils.unwrap`` removes the outermost wrapper, which is
    another instrumentation's when it wrapped the method after us.
    """
    outer: Any = None
    current: Any = cls.__dict__.get(name)
    while isinstance(current, (FunctionWrapper, BoundFunctionWrapper)):
        if current._self_wrapper == wrapper:
            if outer is None:
                setattr(cls, name, current.__wrapped__)
            else:
                outer.__wrapped__ = current.__wrapped__
            return
        outer, current = current, current.__wrapped__


# --- input items ------------------------------------------------------------------------------------------

_K = TypeVar("_K")
_V = TypeVar("_V")


class _Lru(Generic[_K, _V]):
    """A bounded map, least recently used first out."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _K) -> _V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: _K, value: _V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


_CANONICAL_JSON: Final = json.JSONEncoder(sort_keys=True, default=str, separators=(",", ":"))


def _plain(value: Any) -> Any:
    if type(value) is dict:
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(exclude_unset=True, warnings=False)
    return value


def _digests(items: Sequence[Any]) -> list[bytes]:
    """One SHA-256 per input item (canonical JSON; SDK objects as the fields they were given)."""
    encode = _CANONICAL_JSON.encode
    return [hashlib.sha256(encode(_plain(item)).encode("utf-8", "surrogatepass")).digest() for item in items]


def _fingerprint(digests: Sequence[bytes]) -> bytes:
    return hashlib.sha256(b"".join(digests)).digest()


def _is_output_item(item: object) -> bool:
    kind = field(item, "type")
    if field(item, "role") == "assistant":
        return True
    return isinstance(kind, str) and (kind in _OUTPUT_TYPES or kind.endswith("_call"))


def input_items(value: object) -> list[Any]:
    """The ``input`` of a request as a list of items: a string is one user message."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, (list, tuple)):
        return list(value)
    return []  # omitted (``omit``), or a shape this integration does not read


def output_run_starts(items: Sequence[Any]) -> list[int]:
    """Positions where a run of output items begins (never 0: an empty prefix links nothing)."""
    starts: list[int] = []
    previous = True
    for position, item in enumerate(items):
        output = _is_output_item(item)
        if output and not previous:
            starts.append(position)
        previous = output
    return starts


def result_call_ids(items: Sequence[Any]) -> list[str | None]:
    """The ``call_id`` of every ``function_call_output`` item, in order (``None`` when not a string)."""
    ids: list[str | None] = []
    for item in items:
        if field(item, "type") == "function_call_output":
            call_id = field(item, "call_id")
            ids.append(call_id if isinstance(call_id, str) else None)
    return ids


class _Thread:
    """One conversation and what its latest request and response were (the only ones it can settle)."""

    __slots__ = ("conversation", "request_key", "response_id")

    def __init__(self) -> None:
        self.conversation = Conversation()
        self.request_key: bytes | None = None
        self.response_id: str | None = None


@dataclass(slots=True)
class _Prepared:
    """What one request decided before it was sent."""

    thread: _Thread | None  # the conversation it continues, None for a new one
    result_ids: list[str | None] | None
    request_key: bytes | None
    provider_name: str | None


class ResponsesWrappers:
    """The wrappers of ``Responses`` / ``AsyncResponses`` and the conversations they link."""

    def __init__(
        self,
        instrumentation: Instrumentation,
        provider_for: Callable[[Any], str | None],
        max_conversations: int,
    ) -> None:
        self._instrumentation: Instrumentation | None = instrumentation
        self._provider_for = provider_for
        self._by_input: _Lru[bytes, _Thread] = _Lru(max_conversations)
        self._by_response: _Lru[str, _Thread] = _Lru(max_conversations)
        self._wrapped = False

    # --- patching ---------------------------------------------------------------------------

    def wrap(self) -> None:
        """Wrap the Responses resources; an ``openai`` without the Responses API is left as it is."""
        try:
            import openai.resources.responses.responses  # noqa: F401 - only checks that it exists
        except ImportError:
            return
        wrap_function_wrapper(_MODULE, "Responses.create", self._create)
        wrap_function_wrapper(_MODULE, "AsyncResponses.create", self._async_create)
        wrap_function_wrapper(_MODULE, "Responses.retrieve", self._retrieve)
        wrap_function_wrapper(_MODULE, "AsyncResponses.retrieve", self._async_retrieve)
        self._wrapped = True

    def unwrap(self) -> None:
        self._instrumentation = None
        if not self._wrapped:
            return
        import openai.resources.responses.responses as responses

        remove_own_wrapper(responses.Responses, self._create)
        remove_own_wrapper(responses.AsyncResponses, self._async_create)
        remove_own_wrapper(responses.Responses, self._retrieve, "retrieve")
        remove_own_wrapper(responses.AsyncResponses, self._async_retrieve, "retrieve")
        self._wrapped = False

    # --- the wrappers -----------------------------------------------------------------------

    def _create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs)
        result = wrapped(*args, **kwargs)
        return result if prepared is None else self._observe(result, prepared)

    async def _async_create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare(instance, kwargs)
        result = await wrapped(*args, **kwargs)
        return result if prepared is None else self._observe(result, prepared)

    def _retrieve(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare_replay(instance, kwargs)
        result = wrapped(*args, **kwargs)
        return result if prepared is None else self._observe(result, prepared)

    async def _async_retrieve(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        prepared = self._prepare_replay(instance, kwargs)
        result = await wrapped(*args, **kwargs)
        return result if prepared is None else self._observe(result, prepared)

    # --- linkage ----------------------------------------------------------------------------

    def _prepare(self, instance: Any, kwargs: dict[str, Any]) -> _Prepared | None:
        """Which conversation a ``create`` request continues and the results it carries, before it is sent."""
        with internal_errors_swallowed("preparing an openai Responses request"):
            if self._instrumentation is None or not kwargs.get("stream"):
                return None
            provider = self._provider_for(instance)
            items = input_items(kwargs.get("input"))
            digests = _digests(items)
            thread: _Thread | None = None
            result_ids: list[str | None] | None = None
            previous = kwargs.get("previous_response_id")
            if isinstance(previous, str) and previous:
                candidate = self._by_response.get(previous)
                if candidate is not None and candidate.response_id == previous:
                    thread, result_ids = candidate, result_call_ids(items)
            else:
                for start in reversed(output_run_starts(items)):
                    prefix = _fingerprint(digests[:start])
                    candidate = self._by_input.get(prefix)
                    if candidate is not None:
                        if candidate.request_key == prefix:
                            thread, result_ids = candidate, result_call_ids(items[start:])
                        break
            return _Prepared(thread, result_ids, _fingerprint(digests) if items else None, provider)
        return None

    def _prepare_replay(self, instance: Any, kwargs: dict[str, Any]) -> _Prepared | None:
        """A stored response streamed again from its first event: a new conversation, no results."""
        with internal_errors_swallowed("preparing an openai Responses replay"):
            if self._instrumentation is None or kwargs.get("stream") is not True:
                return None
            if isinstance(kwargs.get("starting_after"), int):
                return None  # starts mid-response
            return _Prepared(None, None, None, self._provider_for(instance))
        return None

    def _observe(self, result: Any, prepared: _Prepared) -> Any:
        """The proxy the application gets for an SDK stream of Responses events; anything else unchanged."""
        observed = result
        with internal_errors_swallowed("observing an openai Responses stream"):
            instrumentation = self._instrumentation
            if instrumentation is None or not is_sdk_stream(result):
                return result
            thread = prepared.thread
            if thread is None:
                thread = _Thread()
            observed = instrumentation.stream(
                result,
                conversation=thread.conversation,
                provider_name=prepared.provider_name,
                tool_message_ids=prepared.result_ids,  # None for a new conversation
                protocol=PROTOCOL,
            )
            if observed is result:
                return result  # not observed (disabled, suppressed): nothing to link either
            # The request reached the model: it is now the conversation's latest.
            thread.request_key = prepared.request_key
            thread.response_id = None
            if prepared.request_key is not None:
                self._by_input.put(prepared.request_key, thread)
            _watch_response_id(result, self._started(thread))
        return observed

    def _started(self, thread: _Thread) -> Callable[[str], None]:
        def started(response_id: str) -> None:
            thread.response_id = response_id
            self._by_response.put(response_id, thread)

        return started


def _announce(event: object, started: Callable[[str], None]) -> bool:
    """Tell ``started`` the response id of a ``response.created`` event; whether it was one."""
    with internal_errors_swallowed("reading a response id"):
        if getattr(event, "type", None) == _CREATED:
            response_id = field(field(event, "response"), "id")
            if isinstance(response_id, str) and response_id:
                started(response_id)
                return True
    return False


def _watch_response_id(stream: Any, started: Callable[[str], None]) -> None:
    """Call ``started`` with the response id when the SDK ``stream`` yields ``response.created``.

    Wraps that one instance's iterator (``_iterator``, made when the stream was built and
    not started yet): the SDK's own event objects pass through unchanged, as do its
    exceptions. The sync side delegates the rest of the stream with ``yield from`` once
    the id is known; the async side passes every event through one async generator.
    """
    iterator = getattr(stream, "_iterator", None)
    if iterator is None:
        return
    if hasattr(iterator, "__anext__"):

        async def watching_async() -> AsyncIterator[Any]:
            waiting = True
            async for event in iterator:
                if waiting and _announce(event, started):
                    waiting = False
                yield event

        stream._iterator = watching_async()
    else:

        def watching() -> Iterator[Any]:
            for event in iterator:
                if _announce(event, started):
                    yield event
                    yield from iterator
                    return
                yield event

        stream._iterator = watching()
