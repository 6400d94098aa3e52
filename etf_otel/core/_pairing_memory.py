"""A conversation's memory of the call ids its earlier requests and responses carried, for the pairing check's
reasons (:mod:`etf_otel.core._pairing`): bounded, and without a single id in it.

Why a request breaks the provider's pairing rules needs what the conversation looked like before: a result
whose call an earlier request or response carried, and this request does not, was **trimmed** away with its
turn; an id that runs several known ids together was **concatenated**; an id that wraps a known one, or a
call and a result of one turn that disagree where only one of them is known, was **rewritten**.

The memory keeps each id as the keyed digest of :mod:`etf_otel.core._refused` (its length and 128 bits of an
HMAC under a per-process key): recognisable in this process, never reversible, never exported. At most
``max_ids`` calls and ``max_ids`` results are kept; the oldest are forgotten first and counted in
:attr:`PairingMemory.dropped` (a forgotten id makes a reason ``unknown``, never a problem). Plain data with no
lock: the live layer calls it under the lock that guards its conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from etf_otel.core._history import Turn
from etf_otel.core._linkage import MAX_CONCATENATED_DIGESTED, concatenated
from etf_otel.core._refused import NO_REFUSED, Digest, RefusedIds, id_digest

__all__ = ["DEFAULT_MAX_IDS", "PairingMemory"]

DEFAULT_MAX_IDS: Final = 1024
"""Call ids (and, apart, result ids) a conversation's memory keeps: 16 KB of digests each at most."""


class PairingMemory:
    """The call ids one conversation's earlier requests and responses carried, as keyed digests.

    The live layer keeps one per conversation: :meth:`responded` with the ids of each response it
    assembled (proposed or not, and the incoming ids its rules refused), :meth:`requested` with each request
    after it was checked. The pairing check asks :meth:`carried`, :meth:`answered`, :meth:`run_together` and
    :meth:`wraps`; nothing else reads it.
    """

    __slots__ = ("_calls", "_known", "_max_ids", "_results", "dropped")

    def __init__(self, max_ids: int = DEFAULT_MAX_IDS) -> None:
        self._max_ids = max(1, max_ids)
        self._calls: dict[Digest, None] = {}
        self._results: dict[Digest, None] = {}
        self._known: RefusedIds | None = None  # the calls as RefusedIds, built when a reason needs it
        self.dropped = 0
        """Digests forgotten because more than ``max_ids`` were kept at once."""

    def __len__(self) -> int:
        return len(self._calls) + len(self._results)

    def responded(self, call_ids: Iterable[str], refused: RefusedIds = NO_REFUSED) -> None:
        """A response carried ``call_ids`` (its calls, proposed or not) and its rules refused ``refused``."""
        for call_id in call_ids:
            self._keep(self._calls, id_digest(call_id))
        for digest in refused.digests:
            self._keep(self._calls, digest)

    def requested(self, turns: Sequence[Turn]) -> None:
        """A request carried ``turns``: its calls and results are the conversation's history from now on.

        Each id costs one digest. A stateless history repeats every earlier turn: passing only the turns
        the request added (after the earlier request's prefix) remembers the same at a fraction of the cost;
        a turn remembered again changes nothing but its age."""
        for turn in turns:
            for call in turn.calls:
                if call.call_id is not None:
                    self._keep(self._calls, id_digest(call.call_id))
            for result in turn.results:
                if result.call_id is not None:
                    self._keep(self._results, id_digest(result.call_id))

    def carried(self, call_id: str) -> bool:
        """Whether an earlier request or response of the conversation carried a call with this id."""
        return bool(self._calls) and id_digest(call_id) in self._calls

    def answered(self, call_id: str) -> bool:
        """Whether an earlier request of the conversation carried a result for this id."""
        return bool(self._results) and id_digest(call_id) in self._results

    def run_together(self, call_id: str) -> bool:
        """Whether ``call_id`` is two or more known call ids run together (``call_1call_2``)."""
        if not self._calls or len(call_id) > MAX_CONCATENATED_DIGESTED:
            return False
        return concatenated(call_id, (), self._digests())

    def wraps(self, call_id: str) -> bool:
        """Whether ``call_id`` is a known call id with more before or after it (``resp_9:call_0``)."""
        if not self._calls:
            return False
        size = len(call_id)
        for length in self._digests().lengths:
            if 0 < length < size and (
                id_digest(call_id[:length]) in self._calls or id_digest(call_id[size - length :]) in self._calls
            ):
                return True
        return False

    def _digests(self) -> RefusedIds:
        if self._known is None:
            self._known = RefusedIds(frozenset(self._calls))
        return self._known

    def _keep(self, kept: dict[Digest, None], digest: Digest) -> None:
        if digest in kept:  # seen again: the newest now, forgotten last
            del kept[digest]
            kept[digest] = None
            return
        kept[digest] = None
        if kept is self._calls:
            self._known = None
        if len(kept) > self._max_ids:
            del kept[next(iter(kept))]
            self.dropped += 1
