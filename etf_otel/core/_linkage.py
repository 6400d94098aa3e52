"""Linkage and completeness checks across one conversation (docs/categories.md, linkage phase).

A conversation alternates model responses and tool results. After a response, its
dispatchable proposals await execution and a result; the next model request (or the end
of the turn) is the deadline. This module keeps just enough state to decide:

* ``orphaned_result``: a result or tool message whose id matches no proposal in scope;
* ``duplicate_result``: more than one result for one call id;
* ``unanswered_call``: a dispatched call with no result before the next request or the end.

Pure and bounded: at most ``max_pending`` proposals are tracked (the oldest are dropped
and counted), and nothing outlives the next request except the conversation itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from etf_otel.core._history import Drift, Shape
from etf_otel.core._refused import NO_REFUSED, RefusedIds
from etf_otel.core._vocabulary import ErrorCategory

__all__ = ["DEFAULT_MAX_PENDING", "MAX_CONCATENATED_CHARS", "Conversation", "Finding", "concatenated"]

DEFAULT_MAX_PENDING = 256

MAX_CONCATENATED_CHARS: Final = 4096
"""A longer id is not taken apart (``concatenated_ids`` costs its length times the proposals)."""

MAX_CONCATENATED_DIGESTED: Final = 1024
"""A longer id is taken apart into proposals only: each refused id tried is one keyed digest per position."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One linkage problem. ``call_id`` is set only when it is a preserved, proposed id.

    ``reason``: why a result is orphaned (``etf.linkage.orphan_reason``), when the caller that
    matched it knows; a bounded value, never an id. ``name``: the function name, for a protocol
    that links results by name (Gemini)."""

    category: ErrorCategory
    call_id: str | None = None
    reason: str | None = None
    name: str | None = None


class Conversation:
    """Linkage state of one conversation; share it between the stream and the host of that conversation.

    Plain data with no lock of its own: the instrumentation makes every call into it
    under one lock (:mod:`etf_otel.instrumentation._linkage`), so a stream and a host in
    different threads may share it. Code that calls it directly from several threads
    must serialize those calls itself.
    """

    __slots__ = ("_executed", "_max_pending", "_pending", "drift", "dropped", "refused", "response_ids", "shapes")

    keeps_shapes = False
    """Whether it keeps its latest response's :attr:`shapes` (a conversation whose requests' histories are read)."""

    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self._max_pending = max_pending
        self._pending: dict[str, int] = {}  # proposed id -> number of results seen
        self._executed: set[str] = set()
        self.dropped = 0
        """Proposals forgotten because more than ``max_pending`` were open at once."""
        self.response_ids: frozenset[str] = frozenset()
        """The preserved call ids of the latest response, proposed or not (at most ``max_pending``)."""
        self.refused: RefusedIds = NO_REFUSED
        """The keyed digests of the incoming ids the latest response's rules refused."""
        self.shapes: tuple[Shape, ...] = ()
        """The latest response's calls as a request's history is matched against them (when :attr:`keeps_shapes`)."""
        self.drift: tuple[Drift, ...] = ()
        """What the request that settles the latest response recorded as drift (taken by :meth:`take_drift`)."""

    def take_drift(self) -> tuple[Drift, ...]:
        """The drift the settling request recorded, once."""
        drift, self.drift = self.drift, ()
        return drift

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(self._pending)

    def proposed(self, call_ids: Iterable[str]) -> None:
        """Register the proposals of a response that is now dispatchable."""
        for call_id in call_ids:
            self._pending[call_id] = 0
            if len(self._pending) > self._max_pending:
                del self._pending[next(iter(self._pending))]
                self.dropped += 1

    def responded(self, call_ids: Iterable[str], refused: RefusedIds = NO_REFUSED) -> None:
        """A response ended, dispatchable or not: what a result answering it may have taken its ids from."""
        ids: dict[str, None] = {}
        for call_id in call_ids:
            if len(ids) < self._max_pending:
                ids[call_id] = None
        self.response_ids = frozenset(ids)
        self.refused = refused

    def result(self, call_id: object) -> Finding | None:
        """A host produced a result for ``call_id``; returns the problem, if any."""
        if not isinstance(call_id, str) or call_id not in self._pending:
            return Finding(ErrorCategory.ORPHANED_RESULT)
        seen = self._pending[call_id] = self._pending[call_id] + 1
        self._executed.add(call_id)
        if seen > 1:
            return Finding(ErrorCategory.DUPLICATE_RESULT, call_id)
        return None

    def next_request(self, tool_message_ids: Iterable[object] | None = None) -> list[Finding]:
        """The next model request starts: settle the previous response's proposals.

        With ``tool_message_ids`` (the ``tool_call_id`` of each ``role: "tool"`` message the
        request carries) the messages are what answers a call; without them, a host result
        is. Either way the pending proposals are cleared afterwards. :meth:`settle` also
        returns the proposals found answered.
        """
        return self.settle(tool_message_ids)[0]

    def settle(self, tool_message_ids: Iterable[object] | None = None) -> tuple[list[Finding], tuple[str, ...]]:
        """:meth:`next_request`, plus the pending proposals it found answered, in proposal order.

        The answered ids are always proposed, preserved ids (never an orphaned or unknown one):
        with the findings' ``unanswered_call`` ids they cover every proposal that was pending.
        """
        findings: list[Finding] = []
        if tool_message_ids is None:
            answered = self._executed
        else:
            answered = set()
            for call_id in tool_message_ids:
                if not isinstance(call_id, str) or call_id not in self._pending:
                    findings.append(Finding(ErrorCategory.ORPHANED_RESULT))
                elif call_id in answered:
                    findings.append(Finding(ErrorCategory.DUPLICATE_RESULT, call_id))
                else:
                    answered.add(call_id)
        findings.extend(
            Finding(ErrorCategory.UNANSWERED_CALL, call_id) for call_id in self._pending if call_id not in answered
        )
        settled = tuple(call_id for call_id in self._pending if call_id in answered)
        self._pending.clear()
        self._executed = set()
        return findings, settled

    def end(self) -> list[Finding]:
        """The turn is over: every proposal still without a result is unanswered."""
        return self.next_request(None)


def concatenated(call_id: str, proposals: Iterable[str], refused: RefusedIds = NO_REFUSED) -> bool:
    """Whether ``call_id`` is two or more of ``proposals`` and ``refused`` ids run together (the ``openai``
    SDK's accumulator merges the ids of one slot: ``call_1`` then ``call_2`` make ``call_1call_2``)."""
    size = len(call_id)
    if size > MAX_CONCATENATED_CHARS:
        return False
    ids = [proposal for proposal in set(proposals) if proposal and len(proposal) < size]
    lengths = sorted(length for length in refused.lengths if length < size) if size <= MAX_CONCATENATED_DIGESTED else []
    pieces = [-1] * (size + 1)  # the most ids that run together up to each position
    pieces[0] = 0
    for position in range(size):
        if pieces[position] < 0:
            continue
        ends = [position + len(proposal) for proposal in ids if call_id.startswith(proposal, position)]
        ends += [
            position + length
            for length in lengths
            if position + length <= size and call_id[position : position + length] in refused
        ]
        for end in ends:
            pieces[end] = max(pieces[end], pieces[position] + 1)
    return pieces[-1] >= 2
