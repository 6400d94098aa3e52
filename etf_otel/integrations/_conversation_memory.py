"""A conversation's :class:`~etf_otel.core._pairing_memory.PairingMemory`, fed when it is needed.

Remembering a call id costs a keyed digest (an HMAC). Most responses are never followed by a request the
pairing check reads (the first request of a conversation, a request without tool turns), and the ids of a
conversation's latest response are kept on it anyway, as its preserved ids (``response_ids``). So the ids of
the latest response are digested only when a check asks for the memory, or when the next response replaces
them; the memory itself is made on first use. A conversation that is never checked pays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from etf_otel.core._pairing_memory import PairingMemory
from etf_otel.core._refused import NO_REFUSED, RefusedIds

__all__ = ["LazyMemory"]


class LazyMemory:
    """One conversation's memory: the latest response's ids held until a check or the next response."""

    __slots__ = ("_latest", "_memory")

    def __init__(self) -> None:
        self._memory: PairingMemory | None = None
        self._latest: tuple[Sequence[str], RefusedIds] | None = None

    def responded(self, call_ids: Sequence[str], refused: RefusedIds = NO_REFUSED) -> None:
        """A new latest response: the previous one's ids go into the memory now, this one's when asked."""
        self._flush()
        self._latest = (call_ids, refused) if call_ids or refused else None

    def current(self) -> PairingMemory:
        """The memory, with every response so far in it."""
        self._flush()
        if self._memory is None:
            self._memory = PairingMemory()
        return self._memory

    def _flush(self) -> None:
        latest = self._latest
        if latest is not None:
            self._latest = None
            if self._memory is None:
                self._memory = PairingMemory()
            self._memory.responded(*latest)
