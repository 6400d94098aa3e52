"""The slot model for protocols whose calls open and close explicitly (Responses, Anthropic).

Chat Completions opens a slot implicitly with the first fragment at a new key and never
closes one. The OpenAI Responses API and Anthropic Messages announce a call with an
opening event that carries its identity, stream argument fragments that carry none, and
close the argument stream and the slot with events of their own; they also state the
whole arguments in snapshots. :class:`LifecycleSlots` adds those events to
:class:`~etf_otel.core._slots.ResponseSlots`, on one scope (choice ``0``):

* :meth:`~LifecycleSlots.open`: a slot appears with its identity (a repeated opening at
  the same key is an identity-bearing fragment for that slot and re-opens it);
* :meth:`~LifecycleSlots.ident`: a later identity-bearing event of an open slot;
* :meth:`~LifecycleSlots.delta`: an argument fragment, for an open argument stream only;
* :meth:`~LifecycleSlots.snapshot`: the provider's statement of the whole arguments
  (a *placeholder* such as ``""`` or Anthropic's ``{}`` means "nothing yet");
* :meth:`~LifecycleSlots.close_arguments` / :meth:`~LifecycleSlots.close_slot`;
* :meth:`~LifecycleSlots.mark_incomplete`: the provider marked the call incomplete.

A fragment or identity event that names no open slot is ``unknown_slot``: merged nowhere,
and it blocks the response. The identity table applies unchanged to every identity-bearing
event; nothing here decides identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from etf_otel.core._identity import ABSENT, BODY_WITHOUT_ARGUMENTS, CompatibilityRule, IdentityRules, incoming_key
from etf_otel.core._slot_state import (
    ARGUMENTS_CLOSED,
    CLOSED,
    INCOMPLETE,
    INVALID_ARGUMENTS,
    NO_ARGUMENTS,
    POSITIONAL,
    SlotState,
    compact,
)
from etf_otel.core._slots import DEFAULT_MAX_ARGUMENT_CHARS, DEFAULT_MAX_DIAGNOSTICS, ResponseSlots
from etf_otel.core._unslotted import COMPATIBILITY
from etf_otel.core._vocabulary import Transition

__all__ = ["SCOPE", "LifecycleSlots"]

SCOPE: Final = 0
"""The only scope of these protocols: they have no choices (``etf.choice.index`` is 0)."""

_NO_DELTAS: Final = CLOSED | ARGUMENTS_CLOSED
"""A slot with either flag takes no argument delta."""

_NO_ID: Final = incoming_key(None, ABSENT)
"""The table class of a fragment without an id (a delta), whatever the slot holds."""

MAX_CLAIMS: Final = 8
"""Different snapshots kept per slot; memory per response stays bounded whatever a stream repeats."""

_CONTRADICTION: Final = "\x00contradiction"
"""Stands for snapshots past :data:`MAX_CLAIMS`: no JSON text equals it, so the slot is a mismatch."""


class LifecycleSlots(ResponseSlots):
    """One response of a protocol with explicit open and close events."""

    __slots__ = ()

    def __init__(
        self,
        rules: IdentityRules | None = None,
        *,
        clock: Callable[[], int] | None = None,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
        max_diagnostics: int = DEFAULT_MAX_DIAGNOSTICS,
    ) -> None:
        # A response that never ended or failed skips the assembly checks (its calls are cut anyway).
        super().__init__(
            rules,
            clock=clock,
            max_argument_chars=max_argument_chars,
            max_diagnostics=max_diagnostics,
            checks_when_cut=False,
        )

    def slot(self, key: int, *, scope: int = SCOPE) -> SlotState | None:
        return self._slots.get((scope, key))

    def is_open(self, key: int) -> bool:
        """A slot is at ``key`` and it was not closed."""
        slot = self.slot(key)
        return slot is not None and not slot.status & CLOSED

    def open(
        self, key: int, id: object = ABSENT, name: object = ABSENT, *, scope: int = SCOPE
    ) -> None:  # the wire field is called id
        """The opening event of the call at ``key``; at a key that has a slot, it re-opens it.

        ``scope`` is the choice: Gemini's candidates each have their own slots."""
        self.fragment(scope, key, id, name)
        slot = self._slots[scope, key]
        slot.status &= INCOMPLETE
        slot.closed_ns = None  # its span ends at the last close

    def ident(self, key: int, id: object = ABSENT, name: object = ABSENT) -> None:  # the wire field is called id
        """A later identity-bearing event (Responses ``output_item.done``); ``unknown_slot`` unless open."""
        if self.is_open(key):
            self.fragment(SCOPE, key, id, name)
        else:
            self.unattributable(SCOPE, id)

    def delta(self, key: int, text: object) -> None:
        """An argument fragment; ``unknown_slot`` unless a slot is at ``key`` and its argument stream is open.

        What :meth:`fragment` does with a fragment that has no id and no name, inlined: this
        runs once per streamed delta, so it calls no helper on its common path.
        """
        slot = self._slots.get((SCOPE, key))
        if slot is None or slot.status & _NO_DELTAS:
            self.unattributable(SCOPE)
            return
        count = self._fragment_count = self._fragment_count + 1
        slot.fragments += 1
        decision = slot.row[_NO_ID]  # an absent id never adopts one
        slot.row = decision.next_row
        if type(text) is str:
            room = slot.room = slot.room - len(text)
            if room >= 0:
                parts = slot.arguments
                parts.append(text)
                if len(parts) >= slot.compact_at:
                    compact(parts, slot)
            elif room + len(text) >= 0:  # this piece crossed the cap: all pieces are dropped
                slot.arguments.clear()
        elif text is not None and text is not ABSENT:
            slot.room = INVALID_ARGUMENTS  # what arrived so far is kept; nothing more is taken
        # No rule set rejects an absent id (its column of the table has no category): nothing to reject.
        if count <= self._max_diagnostics:
            self._diagnostics.append((SCOPE, key, count, decision, None))
        else:
            self._diagnose(SCOPE, key, decision, None)

    def snapshot(self, key: int, text: object, *, placeholder: bool = False, scope: int = SCOPE) -> None:
        """The provider's statement of the slot's whole arguments (a no-op for a key with no slot).

        ``""`` is a placeholder wherever it appears. Arguments that are not a string are
        invalid, as a fragment of that kind would be.
        """
        slot = self.slot(key, scope=scope)
        if slot is None:
            return
        if text is BODY_WITHOUT_ARGUMENTS:  # a complete body's call without an arguments key
            if not self._rules.allows(CompatibilityRule.ABSENT_ARGUMENTS_IN_BODY):
                return  # absent, as the key was
            text = NO_ARGUMENTS
            self.admitted(key, Transition.ABSENT_ARGUMENTS, applied_next=True, scope=scope)
        if not isinstance(text, str) or len(text) > self._max_argument_chars:
            slot.room = INVALID_ARGUMENTS  # past the cap, as deltas that long would be
        elif placeholder or not text:
            if slot.placeholder is None:
                slot.placeholder = text
        elif slot.claims is None:
            slot.claims = [text]
        elif text not in slot.claims:  # repeated statements keep no memory
            if len(slot.claims) < MAX_CLAIMS:
                slot.claims.append(text)
            else:  # that many different statements cannot all agree: keep the bound, record the contradiction
                slot.claims[-1] = _CONTRADICTION

    def close_arguments(self, key: int) -> None:
        slot = self.slot(key)
        if slot is not None:
            slot.status |= ARGUMENTS_CLOSED

    def close_slot(self, key: int, *, scope: int = SCOPE) -> None:
        """The slot at ``key`` is finished: no fragment may join it until it is opened again."""
        slot = self.slot(key, scope=scope)
        if slot is not None:
            slot.status |= CLOSED | ARGUMENTS_CLOSED
            self.close(scope, key)

    def assembled(self, key: int, text: object, *, scope: int = SCOPE) -> None:
        """Arguments the adapter built itself from typed pieces (Gemini ``partialArgs``), as the slot's deltas.

        Counted as no fragment (the pieces were); text that is no string, or longer than the
        slot may still take, makes the arguments invalid."""
        slot = self.slot(key, scope=scope)
        if slot is None:
            return
        if isinstance(text, str) and len(text) <= slot.room:
            slot.room -= len(text)
            slot.arguments.append(text)
        else:
            slot.room = INVALID_ARGUMENTS

    def positional(self, key: int, *, scope: int = SCOPE) -> None:
        """The slot's identity is its key: an id-less call of a protocol where ids are optional (Gemini).

        ``missing_id`` is not raised for it, and the transition ``positional`` is counted once."""
        slot = self.slot(key, scope=scope)
        if slot is not None and not slot.status & POSITIONAL:
            slot.status |= POSITIONAL
            self.admitted(key, Transition.POSITIONAL, applied_next=True, scope=scope)

    def mark_incomplete(self, key: int) -> None:
        slot = self.slot(key)
        if slot is not None:
            slot.status |= INCOMPLETE

    def admitted(self, key: int, transition: Transition, *, applied_next: bool = False, scope: int = SCOPE) -> None:
        """Count a fragment a compatibility rule handled (``buffer_early``, ``drop_late``) on slot ``key``.

        ``applied_next``: the fragment is applied right after (a buffered delta), and counted
        then; a fragment set aside (``drop_late``) is counted here only.
        """
        self._fragment_count += 1
        self._diagnose(scope, key, COMPATIBILITY[transition], None)
        if applied_next:
            self._fragment_count -= 1
