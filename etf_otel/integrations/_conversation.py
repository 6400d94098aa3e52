"""The linkage of a request to the conversation it continues, by the prefix of its messages.

Requests are read, never changed: only lists and tuples of messages are read, since reading
an iterator would consume what the SDK is about to send. No content is kept, only SHA-256
fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

from etf_otel.core._linkage import Conversation
from etf_otel.protocols import field

__all__ = [
    "DEFAULT_MAX_CONVERSATIONS",
    "FollowUp",
    "LruIndex",
    "PrefixConversations",
    "digests",
    "fingerprint",
    "last_position",
    "plain",
    "string_or_none",
]

DEFAULT_MAX_CONVERSATIONS: Final = 1024

_K = TypeVar("_K")
_V = TypeVar("_V")

FollowUp = tuple[int, list[str | None]]
"""``(position of the last assistant message, the result ids the request carries after it)``."""


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
