"""The linkage of a request to the response it answers, by the evidence the request carries.

A follow-up request finds the response whose calls it answers in this order, first match wins
(docs/protocols.md, "Linkage across turns"):

1. the call ids of its last assistant turn: the recent response that proposed them;
2. ``previous_response_id`` (Responses): the response with that id;
3. the message prefix (the messages before the last assistant turn, as a SHA-256 fingerprint),
   only when exactly one recent request of this process had it.

Evidence that points to several conversations (two identical first requests, a provider that
numbers its ids ``call_0`` in every response) is no match; when nothing points to exactly one
response the request is not judged and its span says so (``etf.linkage.ambiguous``), never a
violation. Only the latest response of a conversation is settled: a request that continues an
older one (a retry, a branch) is not judged either.

Requests are read, never changed: only lists and tuples of messages are read, since reading
an iterator would consume what the SDK is about to send. No content is kept, only SHA-256
fingerprints and the call ids the responses proposed (which their spans carry anyway). Every
index is bounded (least recently used first out) and guarded by its own lock, so threads and
asyncio tasks may share one instrumentor.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any, Final, NamedTuple, TypeVar

from etf_otel import attributes as A
from etf_otel.core._history import Turn, judge_history
from etf_otel.core._linkage import Conversation, Finding, concatenated
from etf_otel.core._refused import NO_REFUSED, RefusedIds
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.integrations._conversation_memory import LazyMemory
from etf_otel.integrations._fingerprints import LruIndex, digests, fingerprint, plain
from etf_otel.protocols import field

__all__ = [
    "AMBIGUOUS",
    "DEFAULT_MAX_CONVERSATIONS",
    "ConversationIndex",
    "FollowUp",
    "Linked",
    "LinkedConversation",
    "LruIndex",
    "concatenated",
    "digests",
    "fingerprint",
    "last_position",
    "orphan_reason",
    "plain",
    "string_ids",
    "string_or_none",
]

DEFAULT_MAX_CONVERSATIONS: Final = 1024

MAX_PREFIX_TURNS: Final = 8
"""A request's prefix is tried as evidence before at most this many of its last assistant turns with calls."""

_K = TypeVar("_K")
_V = TypeVar("_V")

FollowUp = tuple[int, list[str | None]]
"""``(position of the last assistant message, the result ids the request carries after it)``."""


def last_position(messages: Sequence[Any], role: str) -> int | None:
    """The position of the last message with ``role``, ``None`` when there is none."""
    for position in range(len(messages) - 1, -1, -1):
        if field(messages[position], "role") == role:
            return position
    return None


def string_or_none(value: object) -> str | None:
    """A result's call id as the linkage takes it: a string, else ``None`` (``orphaned_result``)."""
    return value if isinstance(value, str) else None


class LinkedConversation(Conversation):
    keeps_shapes = True

    """A conversation that tells its index the call ids of its latest response, and why a result is orphaned.

    ``open_ids``: the proposals of its latest response while they await settlement (empty once
    settled). ``request_key`` / ``response_id``: its latest request's fingerprint and (Responses)
    its latest response's id, the other evidence a follow-up may carry. ``memory``: the call ids its
    responses and requests carried, as digests, for the pairing check's reasons; ``remembered``: how
    many turns of its latest request it holds (a stateless history repeats them: only the rest is new).
    """

    __slots__ = ("_index", "claimed", "indexed_ids", "memory", "open_ids", "remembered", "request_key", "response_id")

    def __init__(self, index: ConversationIndex | None) -> None:
        super().__init__()
        self._index = index
        self.open_ids: frozenset[str] = frozenset()
        self.indexed_ids: tuple[str, ...] = ()
        """The ids its index knows it by: those of its latest response with calls."""
        self.claimed = False
        """A request was judged against the latest response already (another one is a retry: not judged)."""
        self.request_key: bytes | None = None
        self.response_id: str | None = None
        self.memory = LazyMemory()
        self.remembered = 0

    def responded(self, call_ids: Iterable[str], refused: RefusedIds = NO_REFUSED) -> None:
        """A new latest response, dispatchable or not: the next request is judged against it."""
        ids = list(call_ids)
        super().responded(ids, refused)
        self.memory.responded(ids, refused)
        self.claimed = False

    def proposed(self, call_ids: Iterable[str]) -> None:
        ids = list(call_ids)
        super().proposed(ids)
        self.open_ids = frozenset(self.pending)
        self.claimed = False
        if self._index is not None:
            self._index.proposed(self, ids)

    def settle(self, tool_message_ids: Iterable[object] | None = None) -> tuple[list[Finding], tuple[str, ...]]:
        self.open_ids = frozenset()
        if tool_message_ids is None or self._index is None:
            return super().settle(tool_message_ids)
        ids = list(tool_message_ids)
        pending = frozenset(self.pending)
        findings, settled = super().settle(ids)
        orphans = [call_id for call_id in ids if not isinstance(call_id, str) or call_id not in pending]
        if not orphans:
            return findings, settled
        index, known, refused = self._index, pending | self.response_ids, self.refused
        reasons = iter([index.orphan_reason(call_id, known, refused) for call_id in orphans])
        return [
            replace(finding, reason=next(reasons)) if finding.category is ErrorCategory.ORPHANED_RESULT else finding
            for finding in findings
        ], settled


AMBIGUOUS: Final = LinkedConversation(None)
"""What an index holds for evidence that more than one live conversation has."""


class Linked(NamedTuple):
    """What a request's evidence decided.

    ``conversation``: the one its response joins (``None``: not linked at all); ``result_ids``:
    the results that settle that conversation's latest response (``None``: not judged);
    ``ambiguous``: it carried evidence that pointed to no single response; ``turns``: its history.
    """

    conversation: LinkedConversation | None
    result_ids: list[str | None] | None = None
    ambiguous: bool = False
    turns: Sequence[Turn] = ()


Candidate = tuple[LinkedConversation | None, Callable[[LinkedConversation], bool]]
"""What one piece of evidence found (``None``, a conversation or :data:`AMBIGUOUS`), and whether
the request continues that conversation's latest response."""


def _holds_request(held: LinkedConversation, key: bytes) -> bool:
    return held.request_key == key


class ConversationIndex:
    """The recent conversations of one instrumentor, by the evidence a follow-up may carry.

    The call ids of the latest responses of the ``capacity`` conversations that proposed last,
    request fingerprints and response ids (``capacity`` each), least recently used first out.
    ``rejected(call_id)`` tells whether the rules rejected a call with that id (``rejected_call``).
    """

    def __init__(self, capacity: int, rejected: Callable[[str], bool] | None = None) -> None:
        self._capacity = capacity
        self._holders: dict[str, dict[LinkedConversation, None]] = {}
        """Call id -> the conversations whose latest response proposed it, oldest first (an ordered set:
        a provider that numbers its ids ``call_0`` in every response puts every conversation under one id,
        and a proposal must not cost a pass over all of them)."""
        self._proposing: OrderedDict[LinkedConversation, None] = OrderedDict()
        self._by_request: LruIndex[bytes, LinkedConversation] = LruIndex(capacity)
        self._by_response: LruIndex[str, LinkedConversation] = LruIndex(capacity)
        self._rejected = rejected
        self._lock = threading.Lock()

    def new(self) -> LinkedConversation:
        return LinkedConversation(self)

    # --- what conversations tell it --------------------------------------------------------------------------

    def proposed(self, conversation: LinkedConversation, call_ids: Iterable[str]) -> None:
        """``conversation``'s latest response proposed ``call_ids``: they replace its earlier ones."""
        with self._lock:
            self._forget_ids(conversation)
            conversation.indexed_ids = ids = tuple(call_ids)
            for call_id in ids:
                self._holders.setdefault(call_id, {})[conversation] = None
            self._proposing[conversation] = None
            self._proposing.move_to_end(conversation)
            while len(self._proposing) > self._capacity:
                self._forget_ids(self._proposing.popitem(last=False)[0])

    def _forget_ids(self, conversation: LinkedConversation) -> None:
        for call_id in conversation.indexed_ids:
            holders = self._holders.get(call_id)
            if holders is not None:
                holders.pop(conversation, None)
                if not holders:
                    del self._holders[call_id]
        conversation.indexed_ids = ()

    def requested(self, conversation: LinkedConversation, key: bytes) -> None:
        conversation.request_key = key
        self._by_request.claim(key, conversation, _holds_request, AMBIGUOUS)

    def responded(self, conversation: LinkedConversation, response_id: str) -> None:
        conversation.response_id = response_id
        self._by_response.put(response_id, conversation)

    # --- evidence ---------------------------------------------------------------------------------------------

    def by_ids(self, call_ids: Sequence[str]) -> Candidate:
        """The conversation whose responses proposed ``call_ids`` (:data:`AMBIGUOUS` when several)."""
        found: LinkedConversation | None = None
        with self._lock:
            for call_id in call_ids:
                held = self._holder(call_id)
                if held is AMBIGUOUS:
                    return AMBIGUOUS, _never
                if held is None:
                    continue
                if found is not None and held is not found:
                    return AMBIGUOUS, _never
                found = held
        return found, lambda conversation: any(call_id in conversation.open_ids for call_id in call_ids)

    def _holder(self, call_id: str) -> LinkedConversation | None:
        """The one conversation still awaiting ``call_id`` (:data:`AMBIGUOUS` when several), else the
        latest that proposed it (an older response), else ``None``; the newest are read first."""
        holders = self._holders.get(call_id)
        if not holders:
            return None
        live = None
        for holder in reversed(holders):
            if call_id in holder.open_ids:
                if live is not None:
                    return AMBIGUOUS
                live = holder
        return live if live is not None else next(reversed(holders))

    def by_response(self, response_id: str) -> Candidate:
        return self._by_response.get(response_id), lambda conversation: conversation.response_id == response_id

    def by_request(self, key: bytes) -> Candidate:
        """The one conversation whose request had the fingerprint ``key`` (:data:`AMBIGUOUS` when several)."""
        return self._by_request.get(key), lambda conversation: conversation.request_key == key

    def first_match(self, candidates: Iterable[Candidate]) -> tuple[LinkedConversation | None, bool, int]:
        """The conversation whose latest response the first decisive evidence names, whether any evidence
        was ambiguous, and the position of the deciding candidate.

        ``None`` (not ambiguous): no evidence found anything, or it named an older response (a
        retry, a branch) or one another request was judged against already.
        """
        ambiguous = False
        for position, (found, latest) in enumerate(candidates):
            if found is AMBIGUOUS:
                ambiguous = True
            elif found is not None:
                with self._lock:
                    if not latest(found) or found.claimed:
                        return None, False, position
                    found.claimed = True
                return found, False, position
        return None, ambiguous, -1

    def link_history(
        self,
        turns: Sequence[Turn],
        item_digests: Sequence[bytes],
        previous: object = None,
        guarded: bool = False,
        adjacent: bool = False,
    ) -> Linked:
        """The conversation whose latest response a request's history answers, and the results that settle it.

        Evidence, first match wins: the call ids of each assistant turn, the latest first (a turn whose
        ids no response proposed, a framework's own round, is passed over); ``previous`` (a Responses
        ``previous_response_id``); else the items before each of the last :data:`MAX_PREFIX_TURNS`
        assistant turns with calls as an earlier request's whole input, only when that turn carries the
        conversation's calls. The results are the answered turn's (:func:`~etf_otel.core._history.judge_history`);
        what it records as drift waits on the conversation for the request's span.
        """
        with_calls = [
            position
            for position in range(len(turns) - 1, -1, -1)
            if turns[position].assistant and turns[position].calls
        ]
        by_prefix = with_calls[:MAX_PREFIX_TURNS]
        has_previous = isinstance(previous, str) and bool(previous)
        turn_ids = [ids for ids in _turn_ids(turns, with_calls) if ids]
        decided_by_ids = len(turn_ids)
        candidates: Iterable[Candidate] = (
            self.by_ids(ids) if at == 0 else _unless_older(self.by_ids(ids)) for at, ids in enumerate(turn_ids)
        )
        if has_previous:
            candidates = itertools.chain(candidates, (self.by_response(previous),))  # type: ignore[arg-type]
        else:
            candidates = itertools.chain(
                candidates, (self.by_request(fingerprint(item_digests[: turns[at].at])) for at in by_prefix)
            )
        found, ambiguous, decided = self.first_match(candidates)
        if found is None:
            return Linked(None, None, ambiguous)
        judgement = judge_history(
            turns,
            found.shapes,
            known=lambda call_id: self._known(found, call_id),
            rejected=lambda call_id: self._rejected_here(found, call_id),
            refused=(lambda call_id: self._rejected_here(found, call_id)) if guarded else _never_id,
            adjacent=adjacent,
        )
        by_prefix_turn = decided - decided_by_ids if not has_previous and decided >= decided_by_ids else None
        if judgement is None or (by_prefix_turn is not None and judgement.answered != by_prefix[by_prefix_turn]):
            if has_previous and decided == decided_by_ids:  # previous_response_id, no replayed calls: every result
                return Linked(found, [result.call_id for turn in turns for result in turn.results])
            found.claimed = False  # a prefix is evidence only when the turn after it carries the calls
            return Linked(None, None, ambiguous)
        found.drift = tuple(judgement.drift)
        return Linked(found, judgement.result_ids)

    def _rejected_here(self, conversation: LinkedConversation, call_id: str) -> bool:
        """Whether the rules rejected a call with ``call_id`` or refused it as an incoming id."""
        return call_id in conversation.refused or (self._rejected is not None and self._rejected(call_id))

    def _known(self, conversation: LinkedConversation, call_id: str) -> bool:
        """Whether ``call_id`` is the latest response's in another form: refused by its rules, its ids run together."""
        if call_id in conversation.response_ids or self._rejected_here(conversation, call_id):
            return True
        return concatenated(call_id, conversation.response_ids, conversation.refused)

    def orphan_reason(self, call_id: object, calls: frozenset[str], refused: RefusedIds) -> str:
        """Why ``call_id`` answers none of the proposals (one of ``ORPHAN_REASONS``), first match wins.

        ``calls``: the proposals and the other preserved call ids of the response it answers;
        ``refused``: the keyed digests of the incoming ids that response's rules refused.
        """
        return orphan_reason(call_id, calls, refused, self._rejected)


def orphan_reason(
    call_id: object, calls: Collection[str], refused: RefusedIds, rejected: Callable[[str], bool] | None = None
) -> str:
    """Why a result's ``call_id`` answers none of a response's proposals (one of ``ORPHAN_REASONS``), first
    match wins: its ids run together, a call the rules rejected (``calls`` holds every preserved id of the
    response; ``rejected`` tells of other responses), an incoming id they refused, else ``unknown``."""
    if not isinstance(call_id, str):
        return A.ORPHAN_UNKNOWN
    if concatenated(call_id, calls, refused):
        return A.ORPHAN_CONCATENATED_IDS
    if call_id in calls or (rejected is not None and rejected(call_id)):
        return A.ORPHAN_REJECTED_CALL
    if call_id in refused:
        return A.ORPHAN_REJECTED_INCOMING_ID
    return A.ORPHAN_UNKNOWN


def _never(conversation: LinkedConversation) -> bool:
    return False


def _never_id(call_id: str) -> bool:
    return False


def _unless_older(candidate: Candidate) -> Candidate:
    """Evidence from a turn before the last one with calls: the response it names is an earlier one of a
    stateless history unless it is the latest, so it decides only then (else the next evidence does)."""
    found, latest = candidate
    if found is None or found is AMBIGUOUS or latest(found):
        return candidate
    return None, _never


def _turn_ids(turns: Sequence[Turn], positions: Iterable[int]) -> Iterable[list[str]]:
    """The call ids of each turn at ``positions``, lazily (evidence read only until a match)."""
    for position in positions:
        yield [call.call_id for call in turns[position].calls if call.call_id is not None]


def string_ids(values: Iterable[object]) -> list[str]:
    """The non-empty strings of ``values``, in order (call ids as a request carries them)."""
    return [value for value in values if isinstance(value, str) and value]
