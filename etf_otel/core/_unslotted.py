"""Decisions for fragments that reach no slot through their key.

The identity table decides what an id does to a slot. A fragment without a usable key
(Chat ``missing_index``), or whose key names no open slot (Responses and Anthropic
``unknown_slot``), never reaches one, yet it still gets a decision so that its bounded
diagnostics (id kind, empty flag) are recorded and counted like every other fragment. A
compatibility rule that places or sets aside such a fragment gets its own transition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from etf_otel.core._identity import IdDecision, IdState, Incoming
from etf_otel.core._slot_state import SlotState
from etf_otel.core._vocabulary import ErrorCategory, IdKind, Transition

__all__ = ["COMPATIBILITY", "INFER_INDEX", "UNATTRIBUTABLE", "infer_index"]

_COMPATIBILITY_TRANSITIONS: Final = frozenset(
    {
        Transition.INFER_INDEX,
        Transition.BUFFER_EARLY,
        Transition.DROP_LATE,
        Transition.POSITIONAL,
        Transition.DROP_REPEAT,
        Transition.ABSENT_ARGUMENTS,
    }
)


def _decision(transition: Transition, category: ErrorCategory | None, incoming: Incoming) -> IdDecision:
    return IdDecision(
        transition=transition,
        category=category,
        next_state=IdState.NONE,
        adopts_id=False,
        id_kind=IdKind.STRING if incoming in (Incoming.EMPTY, Incoming.NEW) else IdKind(incoming.value),
        prior_id_present=False,
        id_empty=incoming is Incoming.EMPTY,
        compatibility=transition in _COMPATIBILITY_TRANSITIONS,
    )


_UNSLOTTED_CLASSES: Final = tuple(i for i in Incoming if i not in (Incoming.SAME, Incoming.DIFFERENT))

UNATTRIBUTABLE: Final[dict[ErrorCategory, dict[Incoming, IdDecision]]] = {
    category: {incoming: _decision(Transition.REJECT, category, incoming) for incoming in _UNSLOTTED_CLASSES}
    for category in (ErrorCategory.MISSING_INDEX, ErrorCategory.UNKNOWN_SLOT)
}
"""The rejection of a fragment merged nowhere, by category and incoming id class."""

INFER_INDEX: Final[dict[Incoming, IdDecision]] = {
    incoming: _decision(Transition.INFER_INDEX, None, incoming) for incoming in _UNSLOTTED_CLASSES
}
"""A fragment without index that ``infer_missing_index`` placed."""

COMPATIBILITY: Final[dict[Transition, IdDecision]] = {
    transition: _decision(transition, None, Incoming.ABSENT)
    for transition in (
        Transition.BUFFER_EARLY,
        Transition.DROP_LATE,
        Transition.POSITIONAL,
        Transition.DROP_REPEAT,
        Transition.ABSENT_ARGUMENTS,
    )
}
"""Argument fragments a protocol's compatibility rule admitted late or set aside (no id on them), and
the slots whose key is their identity (``positional``: counted per slot, not per fragment) or whose body
gave no arguments (``absent_arguments``, likewise)."""


def infer_index(own: Sequence[SlotState], id: object, incoming: Incoming) -> int | None:
    """The only index a fragment without one can belong to, given the slots ``own`` of its choice;
    ``None`` when that is ambiguous (``infer_missing_index``).

    * It carries a non-empty string id: the slot established with that same id if there is one;
      a new slot (the next free index) if no slot has that id and every slot has an established id.
    * It carries no usable id (absent, null or ``""``): the single slot if there is exactly one;
      index 0 if there is none yet.
    * Anything else (several candidate slots, an unsupported id type): ambiguous.
    """
    if incoming is Incoming.NEW:
        matching = [slot.index for slot in own if slot.id == id]
        if matching:
            return matching[0]
        if all(slot.id is not None for slot in own):
            return max((slot.index for slot in own), default=-1) + 1
        return None
    if incoming in (Incoming.ABSENT, Incoming.NULL, Incoming.EMPTY):
        if len(own) == 1:
            return own[0].index
        if not own:
            return 0
    return None
