"""The protocol-neutral slot model: per-response assembly state and final validation.

A protocol adapter (Chat Completions here; the Responses API and Anthropic Messages
through :class:`~etf_otel.core._lifecycle.LifecycleSlots`) turns its wire events into
these calls on :class:`ResponseSlots`:

* :meth:`~ResponseSlots.fragment`: an update to the slot ``(choice, index)``, carrying any of an id,
  a name and an argument delta (missing values are :data:`ABSENT`);
* :meth:`~ResponseSlots.unindexed`: an update whose index was missing or unusable;
* :meth:`~ResponseSlots.close`: the protocol says the slot is complete (optional);
* :meth:`~ResponseSlots.finish_reason`: the provider's reason for ending a choice (kept for telemetry;
  it does not end anything by itself);
* :meth:`~ResponseSlots.end`: the response ended properly. When that is, is the protocol's rule (Chat
  Completions: ``[DONE]``, or a finish reason on every choice that has tool calls), so the adapter
  decides and the slot model only records it.

:meth:`~ResponseSlots.finish` then validates every slot (docs/identity-rules.md) and returns an immutable
:class:`AssemblyResult`. Slots live only inside one ``ResponseSlots``: nothing is shared across
responses, so no id can leak from one response into another.

The per-fragment path is kept to a few dictionary operations; everything that can be computed once per
call (joining arguments, parsing JSON, counting transitions) happens in :meth:`~ResponseSlots.finish`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from etf_otel.core._identity import (
    ABSENT,
    CompatibilityRule,
    IdDecision,
    IdentityRules,
    IdState,
    classify,
    incoming_key,
)
from etf_otel.core._refused import MAX_REFUSED_KEPT, Digest, RefusedIds, id_digest
from etf_otel.core._results import AssemblyResult, RejectedFragment, Rejection
from etf_otel.core._slot_state import SlotState, compact, other_arguments
from etf_otel.core._unslotted import COMPATIBILITY, INFER_INDEX, UNATTRIBUTABLE, infer_index
from etf_otel.core._validation import CallSnapshot, count_decisions, final_calls
from etf_otel.core._vocabulary import ErrorCategory, ResponseEnd, StreamState, Transition

__all__ = [
    "DEFAULT_MAX_ARGUMENT_CHARS",
    "DEFAULT_MAX_DIAGNOSTICS",
    "MAX_REJECTED_KEPT",
    "ResponseSlots",
]

DEFAULT_MAX_ARGUMENT_CHARS: Final = 8 * 1024 * 1024
"""Arguments longer than this (in characters) are ``invalid_arguments`` and stop growing: the cap keeps
memory per response bounded when a stream is hostile or runaway."""

DEFAULT_MAX_DIAGNOSTICS: Final = 65_536
"""Fragments of one response that keep an individual diagnostic; later ones are only counted. Together with
the argument cap this bounds the memory of a response whatever its length: the metrics and span counters
still see every fragment."""

MAX_REJECTED_KEPT: Final = 64
"""Rejected fragments of one slot kept for span events (the rest are counted)."""

_STRICT_RULES: Final = IdentityRules.for_rules()


class ResponseSlots:
    """Assembly state of one response; not shared across responses.

    Not thread-safe by itself: one response is one stream, consumed by one task. Feed it
    from the adapter, then call :meth:`finish` once.
    """

    __slots__ = (
        "_clock",
        "_diagnostics",
        "_checks_when_cut",
        "_end",
        "_errors",
        "_final_snapshot",
        "_finish_reasons",
        "_fragment_count",
        "_max_argument_chars",
        "_max_diagnostics",
        "_overflow",
        "_refused",
        "_response_rejections",
        "_result",
        "_initial_row",
        "_rules",
        "_slots",
        "_spliced",
    )

    def __init__(
        self,
        rules: IdentityRules | None = None,
        *,
        clock: Callable[[], int] | None = None,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
        max_diagnostics: int = DEFAULT_MAX_DIAGNOSTICS,
        checks_when_cut: bool = True,
    ) -> None:
        self._rules = rules if rules is not None else _STRICT_RULES
        self._initial_row = self._rules.initial_row
        self._clock = clock
        self._max_argument_chars = max_argument_chars
        self._max_diagnostics = max_diagnostics
        self._overflow: dict[tuple[int, int | None, IdDecision, ErrorCategory | None], int] = {}
        self._slots: dict[tuple[int, int], SlotState] = {}
        self._diagnostics: list[tuple[int, int | None, int, IdDecision, ErrorCategory | None]] = []
        self._response_rejections: dict[Rejection, None] = {}
        self._refused: dict[Digest, None] = {}
        """Keyed digests of the incoming ids the rules refused (``rejected_incoming_id``), never the ids."""
        self._errors: dict[tuple[IdDecision, ErrorCategory], int] = {}
        """Rejected fragments by (decision, category): counted when they happen, which is rare."""
        self._finish_reasons: dict[int, str] = {}
        self._end: ResponseEnd | None = None
        self._spliced = False
        self._final_snapshot: tuple[CallSnapshot, ...] | None = None
        self._checks_when_cut = checks_when_cut
        """Whether a response that never ended (or failed) still gets the assembly checks.

        Chat Completions runs them (its results name ``invalid_arguments`` beside
        ``truncated_stream``); Responses and Anthropic skip them, as their rules say."""
        self._fragment_count = 0
        self._result: AssemblyResult | None = None

    @property
    def rules(self) -> IdentityRules:
        return self._rules

    @property
    def finished(self) -> bool:
        return self._result is not None

    @property
    def fragment_count(self) -> int:
        """Fragments counted so far: lets a viewer place an event that is no fragment (a close) between two."""
        return self._fragment_count

    def _open(self, choice: int, index: int) -> SlotState:
        slot = SlotState(
            choice, index, self._clock() if self._clock else None, self._initial_row, self._max_argument_chars
        )
        self._slots[choice, index] = slot
        return slot

    def unindexed(
        self,
        choice: int,
        id: object = ABSENT,  # the wire field is called id
        name: object = ABSENT,
        arguments: object = ABSENT,
        *,
        inferable: bool = True,
    ) -> None:
        """A fragment without a usable index: ``missing_index``, unless it can be inferred.

        With ``infer_missing_index`` enabled an ``inferable`` fragment (an object that just
        lacks a usable index) joins a slot only when exactly one slot of this choice can be
        meant (:func:`~etf_otel.core._unslotted.infer_index`); otherwise it is rejected and merged nowhere, and
        it blocks the response.
        """
        incoming = classify(IdState.NONE, None, id)
        if inferable and self._rules.allows(CompatibilityRule.INFER_MISSING_INDEX):
            index = infer_index([slot for slot in self._slots.values() if slot.choice == choice], id, incoming)
            if index is not None:
                self._fragment_count += 1
                self._diagnose(choice, index, INFER_INDEX[incoming], None)
                self._fragment_count -= 1  # fragment() counts this fragment again
                self.fragment(choice, index, id, name, arguments)
                return
        self.unattributable(choice, id, ErrorCategory.MISSING_INDEX)

    def unattributable(
        self,
        choice: int,
        id: object = ABSENT,  # the wire field is called id
        category: ErrorCategory = ErrorCategory.UNKNOWN_SLOT,
    ) -> None:
        """A fragment that belongs to no slot: counted, merged nowhere, and it blocks the response."""
        self._fragment_count += 1
        decision = UNATTRIBUTABLE[category][classify(IdState.NONE, None, id)]
        self._diagnose(choice, None, decision, category)
        self._count_error(decision, category)
        if isinstance(id, str) and id:  # an id that reached no slot was refused with its fragment
            self._refuse(id)
        self._response_rejections[Rejection(choice, None, category)] = None

    def _diagnose(self, choice: int, index: int | None, decision: IdDecision, category: ErrorCategory | None) -> None:
        """Keep the diagnostic of the current fragment, or only count it past the cap."""
        if self._fragment_count <= self._max_diagnostics:
            self._diagnostics.append((choice, index, self._fragment_count, decision, category))
        else:
            key = (choice, index, decision, category)
            self._overflow[key] = self._overflow.get(key, 0) + 1

    def _count_error(self, decision: IdDecision, category: ErrorCategory) -> None:
        key = (decision, category)
        self._errors[key] = self._errors.get(key, 0) + 1

    def fragment(
        self,
        choice: int,
        index: int,
        id: object = ABSENT,
        name: object = ABSENT,
        arguments: object = ABSENT,
    ) -> None:
        """Apply one fragment to slot ``(choice, index)``, creating the slot if new.

        This runs once per streamed fragment, so its common path calls no helper: only a
        rejected fragment, a runaway argument list or a diagnostics overflow leaves it.
        """
        count = self._fragment_count = self._fragment_count + 1
        slot = self._slots.get((choice, index))
        if slot is None:
            slot = self._open(choice, index)
        slot.fragments += 1
        decision = slot.row[incoming_key(slot.id, id)]
        category = decision.category
        if decision.adopts_id:
            slot.id = id  # type: ignore[assignment]  # adopts_id implies a non-empty str
        slot.row = decision.next_row

        if name is not None and name is not ABSENT:
            name_category: ErrorCategory | None = None
            if type(name) is str:
                if name and name != slot.name:
                    if slot.name is None:
                        slot.name = name
                    else:
                        name_category = ErrorCategory.NAME_CONFLICT
            else:
                name_category = ErrorCategory.MISSING_NAME
            if name_category is not None:
                if category is None:
                    category = name_category
                else:  # both the id and the name were rejected: the slot keeps both categories
                    slot.add_category(category)
                    slot.add_category(name_category)

        if type(arguments) is str:
            room = slot.room = slot.room - len(arguments)
            if room >= 0:
                parts = slot.arguments
                parts.append(arguments)
                if len(parts) >= slot.compact_at:
                    compact(parts, slot)
            elif room + len(arguments) >= 0:  # this piece crossed the cap: all pieces are dropped
                slot.arguments.clear()
        elif arguments is not None and arguments is not ABSENT and other_arguments(slot, arguments, self._rules):
            self._diagnose(choice, index, COMPATIBILITY[Transition.ABSENT_ARGUMENTS], None)  # a body's {}

        if count <= self._max_diagnostics:
            self._diagnostics.append((choice, index, count, decision, category))
        else:
            self._diagnose(choice, index, decision, category)
        if category is not None:
            self._reject(slot, count, decision, category, id)

    def _reject(
        self, slot: SlotState, fragment: int, decision: IdDecision, category: ErrorCategory, id: object
    ) -> None:
        """Record a rejected fragment: its category, its refused id's digest, and its bounded description
        while room is left."""
        self._count_error(decision, category)
        if isinstance(id, str) and id and id != slot.id:  # a conflicting id: the slot keeps its own
            self._refuse(id)
        slot.add_category(category)
        slot.rejected_count += 1
        if slot.rejected_count > MAX_REJECTED_KEPT:
            return
        rejected = RejectedFragment(
            fragment=fragment,
            category=category,
            id_kind=decision.id_kind,
            prior_id_present=decision.prior_id_present,
            id_empty=decision.id_empty,
            transition=decision.transition,
            time_ns=self._clock() if self._clock else None,
        )
        if slot.rejected is None:
            slot.rejected = [rejected]
        else:
            slot.rejected.append(rejected)

    def _refuse(self, call_id: str) -> None:
        """Keep the keyed digest of an incoming id the rules refused (at most ``MAX_REFUSED_KEPT``)."""
        if len(self._refused) < MAX_REFUSED_KEPT:
            self._refused[id_digest(call_id)] = None

    def close(self, choice: int, index: int) -> None:
        """The protocol marked slot ``(choice, index)`` complete; it ends its span there."""
        slot = self._slots.get((choice, index))
        if slot is not None and slot.closed_ns is None and self._clock is not None:
            slot.closed_ns = self._clock()

    def finish_reason(self, choice: int, reason: str) -> None:
        """The protocol's finish reason for ``choice`` (the last one wins; it may come early or twice).

        Recording a reason does not end the response: when a response has ended properly is
        the protocol's rule, and its adapter says so with :meth:`end`.
        """
        self._finish_reasons[choice] = reason

    def end(self, how: ResponseEnd = ResponseEnd.COMPLETE) -> None:
        """The response ended with a terminal event of its protocol.

        When a provider sends several, the most severe wins (failed, then incomplete, then
        complete): a stream that said it failed and then that it completed contradicts
        itself, and dispatching its calls would trust the better news.
        """
        if self._end is None or _SEVERITY[how] > _SEVERITY[self._end]:
            self._end = how

    @property
    def ended(self) -> ResponseEnd | None:
        return self._end

    def splice(self) -> None:
        """A second response started in this stream: this one never ended and is not dispatchable."""
        self._spliced = True

    def final_snapshot(self, calls: Sequence[CallSnapshot]) -> None:
        """The provider's final list of calls ``(id, name, arguments)``, a cross-check only.

        Called only when the provider made a claim: an empty final output (servers send
        ``[]`` after streaming the calls) is no claim, so the adapter does not call this; a
        non-empty output with no call in it claims there were none.
        """
        self._final_snapshot = tuple(calls)

    @property
    def finish_reasons(self) -> Mapping[int, str]:
        """The finish reasons recorded so far, by choice."""
        return self._finish_reasons

    def choices_with_slots(self) -> set[int]:
        """The choices (scopes) that have at least one slot."""
        return {choice for choice, _ in self._slots}

    def finish(self) -> AssemblyResult:
        """Validate every slot and return the result. Idempotent: later calls return it again."""
        if self._result is not None:
            return self._result
        end = None if self._spliced else self._end
        slots = [slot for _, slot in sorted(self._slots.items())]  # by (choice, index); keys are unique
        by_decision, transitions = count_decisions(self._diagnostics, self._overflow)
        calls, rejections, dispatchable = final_calls(
            slots,
            end,
            transitions,
            self._final_snapshot,
            response_rejections=self._response_rejections,
            checks_when_cut=self._checks_when_cut,
        )
        for call_id, _, _ in self._final_snapshot or ():  # a call the final list claims and no slot has
            if isinstance(call_id, str) and call_id and all(slot.id != call_id for slot in slots):
                self._refuse(call_id)
        self._result = AssemblyResult(
            state=_STATE_OF_END[end],
            finish_reasons=tuple(self._finish_reasons[choice] for choice in sorted(self._finish_reasons)),
            calls=tuple(calls),
            rejections=tuple(rejections),
            fragments=self._fragment_count,
            dispatchable=dispatchable,
            _diagnostics=tuple(self._diagnostics),
            _overflow=tuple(self._overflow.items()),
            _decision_counts=tuple(by_decision.items()),
            _identity_errors=tuple(self._errors.items()),
            refused_ids=RefusedIds(frozenset(self._refused)),
        )
        # Release the per-fragment state: memory per response ends with the response.
        self._slots = {}
        self._diagnostics = []
        self._overflow = {}
        return self._result


_SEVERITY: Final = {ResponseEnd.COMPLETE: 0, ResponseEnd.INCOMPLETE: 1, ResponseEnd.FAILED: 2}

_STATE_OF_END: Final = {
    ResponseEnd.COMPLETE: StreamState.COMPLETED,
    ResponseEnd.INCOMPLETE: StreamState.COMPLETED,  # completed, with incomplete_response on every call
    ResponseEnd.FAILED: StreamState.FAILED,
    None: StreamState.TRUNCATED,
}
