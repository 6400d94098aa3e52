"""What the client integrations share (private to :mod:`etf_otel.integrations`).

* The instrumentors (``openai``, ``anthropic``): their setup (:class:`ClientInstrumentor`), the
  removal of their own wrapper from a chain of wrappers (:func:`remove_own_wrapper`), and the
  linkage of a request to the conversation it continues by the prefix of its messages
  (:class:`PrefixConversations`, built on :class:`LruIndex`, :func:`digests` and
  :func:`fingerprint`).
* The divergence checks of the SDKs' own accumulators (the ``*_state`` modules): the stream
  manager that instruments its stream on entering the ``with`` block
  (:class:`ObservedStreamManager`, :func:`observed_stream_manager`) and the comparison at the
  end of the events (:func:`then_compare`).

Requests are read, never changed: only lists and tuples of messages are read, since reading
an iterator would consume what the SDK is about to send.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import wrapt
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from etf_otel.core._linkage import Conversation
from etf_otel.instrumentation._config import environment_max_conversations
from etf_otel.instrumentation._convenience import _instrumentation
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._streams import observer_of
from etf_otel.instrumentation._switches import _disabled
from etf_otel.protocols._base import field

if TYPE_CHECKING:  # wrapt < 2.5 proxies are not subscriptable at run time
    ObjectProxy = wrapt.ObjectProxy[Any]
else:
    ObjectProxy = wrapt.ObjectProxy

DEFAULT_MAX_CONVERSATIONS: Final = 1024

_K = TypeVar("_K")
_V = TypeVar("_V")

FollowUp = tuple[int, list[str | None]]
"""``(position of the last assistant message, the result ids the request carries after it)``."""

Method = tuple[str, str, Callable[..., Any]]
"""``(class name, method name, wrapper)``: a method of an SDK module that an instrumentor wraps."""


# --- the instrumentors ------------------------------------------------------------------------------------------


class ClientInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """What the client instrumentors share: the :class:`Instrumentation` their ``instrument()`` options build.

    ``instrument(tracer_provider=None, meter_provider=None, provider_name=None, allow=None,
    guard=None, capture_content=None, max_conversations=None)``: an option left out (or
    ``None``) takes its environment variable (:mod:`etf_otel.instrumentation._config`), read
    once, in ``instrument()``; a given option wins over it.
    """

    _instrumentation: Instrumentation | None = None
    _provider_override: str | None = None

    @property
    def instrumentation(self) -> Instrumentation | None:
        """The shared setup; use ``.host(...)`` on it so executions link to their assemblies."""
        return self._instrumentation

    def _set_up(self, options: dict[str, Any]) -> tuple[Instrumentation, int]:
        """The setup ``instrument(**options)`` describes (options over environment), and its ``max_conversations``.

        A configured provider name (option or environment) overrides the one detected per client.
        """
        instrumentation = Instrumentation(
            options.get("tracer_provider"),
            options.get("meter_provider"),
            provider_name=options.get("provider_name"),
            allow=options.get("allow"),
            guard=options.get("guard"),
            capture_content=options.get("capture_content"),
        )
        self._instrumentation = instrumentation
        self._provider_override = instrumentation.provider_name
        capacity: int | None = options.get("max_conversations")
        if capacity is None:
            capacity = environment_max_conversations() or DEFAULT_MAX_CONVERSATIONS
        return instrumentation, capacity


def wrap_methods(module: str | ModuleType, methods: Sequence[Method]) -> None:
    """Wrap each ``(class name, method name, wrapper)`` of ``module`` (wrapt)."""
    for cls, name, wrapper in methods:
        wrapt.wrap_function_wrapper(module, f"{cls}.{name}", wrapper)


def unwrap_methods(module: ModuleType, methods: Sequence[Method]) -> None:
    """Undo :func:`wrap_methods` (:func:`remove_own_wrapper` on each method)."""
    for cls, name, wrapper in methods:
        remove_own_wrapper(getattr(module, cls), wrapper, name)


def remove_own_wrapper(owner: Any, wrapper: Any, name: str = "create") -> None:
    """Remove our wrapper from ``owner.<name>`` (a class or a module) wherever it sits in a chain of
    wrapt wrappers.

    ``opentelemetry.instrumentation.utils.unwrap`` removes the outermost wrapper, which is
    another instrumentation's when it wrapped the method after us.
    """
    outer: Any = None
    current: Any = vars(owner).get(name)
    while isinstance(current, (wrapt.FunctionWrapper, wrapt.BoundFunctionWrapper)):
        if current._self_wrapper == wrapper:
            if outer is None:
                setattr(owner, name, current.__wrapped__)
            else:
                outer.__wrapped__ = current.__wrapped__
            return
        outer, current = current, current.__wrapped__


# --- linkage across turns ------------------------------------------------------------------------------------------


class LruIndex(Generic[_K, _V]):
    """A bounded map, least recently used first out (e.g. a request's fingerprint to its conversation)."""

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


def plain(value: Any) -> Any:
    """A dict as it is; an SDK object as the fields it was given (``model_dump(exclude_unset=True)``)."""
    if type(value) is dict:
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(exclude_unset=True, warnings=False)
    return value


_CANONICAL_JSON: Final = json.JSONEncoder(sort_keys=True, default=str, separators=(",", ":"))
"""One shared encoder: ``json.dumps`` with options builds a new encoder on every call."""


def digests(items: Sequence[Any]) -> list[bytes]:
    """One SHA-256 per message or input item (canonical JSON), so a prefix and the whole share the work."""
    encode = _CANONICAL_JSON.encode
    return [hashlib.sha256(encode(plain(item)).encode("utf-8", "surrogatepass")).digest() for item in items]


def fingerprint(digests: Sequence[bytes]) -> bytes:
    """The SHA-256 of a run of items, from their :func:`digests` (no content is kept)."""
    return hashlib.sha256(b"".join(digests)).digest()


def last_position(messages: Sequence[Any], role: str) -> int | None:
    """The position of the last message with ``role``, ``None`` when there is none."""
    for position in range(len(messages) - 1, -1, -1):
        if field(messages[position], "role") == role:
            return position
    return None


def string_or_none(value: object) -> str | None:
    """A result's call id as the linkage takes it: a string, else ``None`` (``orphaned_result``)."""
    return value if isinstance(value, str) else None


class PrefixConversations:
    """Conversations recognised by the messages of their requests (at most ``capacity`` remembered).

    A follow-up request repeats an earlier request's messages, then the assistant message,
    then the results: the messages before the last assistant message must be exactly the
    messages of an earlier request. ``split`` reads a request's :data:`FollowUp` (``None``
    when it has no assistant message: it starts a conversation).
    """

    def __init__(self, capacity: int, split: Callable[[Sequence[Any]], FollowUp | None]) -> None:
        self._index: LruIndex[bytes, Conversation] = LruIndex(capacity)
        self._split = split

    def link(self, messages: object) -> tuple[Conversation | None, list[str | None] | None]:
        """The conversation a request continues (a new one when none matches) and the results it carries.

        Only a list or tuple is read: messages given as an iterator (a generator) would be
        consumed before the SDK sends them, so that request gets no linkage.
        """
        if not isinstance(messages, (list, tuple)):
            return None, None
        message_digests = digests(messages)
        conversation: Conversation | None = None
        result_ids: list[str | None] | None = None
        follow_up = self._split(messages)
        if follow_up is not None:
            position, result_ids = follow_up
            conversation = self._index.get(fingerprint(message_digests[:position]))
        if conversation is None:
            conversation, result_ids = Conversation(), None
        self._index.put(fingerprint(message_digests), conversation)
        return conversation, result_ids


# --- the SDKs' own accumulators ------------------------------------------------------------------------------------


class ObservedStreamManager(ObjectProxy):
    """A stream manager (sync or async) whose stream is instrumented on entering the ``with`` block."""

    def __init__(self, manager: Any, instrument: Callable[[Any], Any]) -> None:
        super().__init__(manager)
        self._self_instrument = instrument

    def __enter__(self) -> Any:
        return self._self_instrument(self.__wrapped__.__enter__())

    def __exit__(self, *exc_info: Any) -> Any:
        return self.__wrapped__.__exit__(*exc_info)

    async def __aenter__(self) -> Any:
        return self._self_instrument(await self.__wrapped__.__aenter__())

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self.__wrapped__.__aexit__(*exc_info)


def observed_stream_manager(
    manager: Any,
    instrument_stream: Callable[..., Any],
    instrumentation: Instrumentation | None,
    record_response: bool | None,
    config: dict[str, Any],
) -> Any:
    """``manager`` whose stream gets ``instrument_stream(stream, instrumentation=..., record_response=...)``."""
    if _disabled():
        return manager
    etf = _instrumentation(instrumentation, config)
    return ObservedStreamManager(
        manager, lambda stream: instrument_stream(stream, instrumentation=etf, record_response=record_response)
    )


def fresh_stream_state(
    stream: Any, is_fresh_state: Callable[[Any], bool], record_response: bool | None
) -> tuple[Any, Any, bool] | None:
    """A fresh SDK stream's ``_state``, ``_iterator`` and whether to record the response; ``None`` if not fresh.

    ``record_response`` ``None``: record unless the raw stream is already observed by etf-otel.
    """
    state = getattr(stream, "_state", None)
    iterator = getattr(stream, "_iterator", None)
    if iterator is None or not is_fresh_state(state):
        return None
    if record_response is None:
        record_response = observer_of(getattr(stream, "_raw_stream", None)) is None
    return state, iterator, record_response


def compare_now(observed: Any, finish: str) -> None:
    """End the response: the observed ``finish`` method compares (or records that it raised)."""
    try:
        getattr(observed, finish)()
    except Exception:  # recorded as assembler_raised; the application meets it when it asks for the result
        return


def _then_compare(iterator: Iterator[Any], observed: Any, finish: str) -> Iterator[Any]:
    yield from iterator
    compare_now(observed, finish)


async def _async_then_compare(iterator: AsyncIterator[Any], observed: Any, finish: str) -> AsyncIterator[Any]:
    async for event in iterator:
        yield event
    compare_now(observed, finish)


def then_compare(iterator: Any, observed: Any, finish: str) -> Any:
    """``iterator``'s events (sync or async) unchanged; once they are exhausted, :func:`compare_now`."""
    if hasattr(iterator, "__anext__"):
        return _async_then_compare(iterator, observed, finish)
    return _then_compare(iterator, observed, finish)
