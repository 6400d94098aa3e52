"""Bounded indexes and content-free fingerprints of requests, for the linkage of conversations.

No content is kept: a message or input item is known by the SHA-256 of its canonical JSON, a run of
them by the SHA-256 of their digests (:mod:`etf_otel.integrations._conversation` links requests with
them). Every index is bounded, least recently used first out, and guarded by its own lock.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

__all__ = ["LruIndex", "digests", "fingerprint", "plain"]

_K = TypeVar("_K")
_V = TypeVar("_V")


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
            self._put(key, value)

    def claim(self, key: _K, value: _V, taken: Callable[[_V, _K], bool], ambiguous: _V) -> None:
        """Map ``key`` to ``value``, or to ``ambiguous`` when another value still ``taken`` holds it."""
        with self._lock:
            held = self._items.get(key)
            if held is not None and held is not value and (held is ambiguous or taken(held, key)):
                value = ambiguous
            self._put(key, value)

    def __len__(self) -> int:
        return len(self._items)

    def _put(self, key: _K, value: _V) -> None:
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
