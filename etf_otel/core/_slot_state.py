"""The state of one slot while its response streams: what the slot model mutates per fragment.

A plain ``__slots__`` class rather than a dataclass: it is created once per call and
written on every fragment, and attribute writes on a plain class are the cheapest Python
offers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from etf_otel.core._identity import BODY_WITHOUT_ARGUMENTS, CompatibilityRule, IdDecision, IdentityRules
from etf_otel.core._results import RejectedFragment
from etf_otel.core._vocabulary import ErrorCategory

__all__ = ["ARGUMENTS_CLOSED", "CLOSED", "INCOMPLETE", "POSITIONAL", "SlotState", "compact"]

ARGUMENTS_CLOSED: Final = 1
"""No more argument fragments may join the slot (Responses ``arguments.done``, Anthropic block stop)."""
CLOSED: Final = 2
"""The slot is finished (Responses ``output_item.done``, Anthropic block stop)."""
INCOMPLETE: Final = 4
"""The provider marked the call itself incomplete (Responses item ``status: "incomplete"``)."""
POSITIONAL: Final = 8
"""The slot's key is its identity: an id-less call where the protocol makes ids optional (Gemini)."""

_COMPACT_EVERY: Final = 256
"""Argument pieces joined into one string every this many, so tiny fragments cost no object each."""


INVALID_ARGUMENTS: Final = -(2**62)
"""``SlotState.room`` once arguments that are not a string arrived: negative whatever comes after."""

NO_ARGUMENTS: Final = "{}"
"""The arguments of a call without parameters: what ``absent_arguments_in_body`` reads an absent key as."""


class SlotState:
    __slots__ = (
        "arguments",
        "categories",
        "choice",
        "claims",
        "closed_ns",
        "compact_at",
        "fragments",
        "id",
        "index",
        "name",
        "opened_ns",
        "placeholder",
        "rejected",
        "rejected_count",
        "room",
        "row",
        "status",
        "tail",
    )

    def __init__(
        self, choice: int, index: int, opened_ns: int | None, row: Mapping[str, IdDecision], room: int
    ) -> None:
        self.choice = choice
        self.index = index
        self.id: str | None = None
        self.row = row
        """Decisions for the slot's identity state; ``id`` is set exactly when it is ESTABLISHED."""
        self.name: str | None = None
        self.arguments: list[str] = []
        self.room = room
        """Argument characters this slot may still take; negative once its arguments are invalid."""
        self.fragments = 0
        self.categories: dict[ErrorCategory, None] | None = None
        """Created with the first category: most slots never get one."""
        self.rejected: list[RejectedFragment] | None = None
        self.rejected_count = 0
        self.tail = 0
        """Index in ``arguments`` from which pieces have not been compacted yet."""
        self.compact_at = _COMPACT_EVERY
        """Length of ``arguments`` at which the pieces from ``tail`` on are joined."""
        self.opened_ns = opened_ns
        self.closed_ns: int | None = None
        self.claims: list[str] | None = None
        """The provider's statements of the whole arguments (snapshots that are not placeholders)."""
        self.placeholder: str | None = None
        """The first placeholder snapshot (Responses ``""``, Anthropic ``{}``): used only when nothing else came."""
        self.status = 0
        """Lifecycle flags (:data:`ARGUMENTS_CLOSED`, :data:`CLOSED`, :data:`INCOMPLETE`); Chat never sets any."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.choice, self.index)

    def add_category(self, category: ErrorCategory) -> None:
        if self.categories is None:
            self.categories = {category: None}
        else:
            self.categories[category] = None


def compact(parts: list[str], slot: SlotState) -> None:
    """Join the pieces from ``slot.tail`` on into one: tiny fragments then cost no object each."""
    parts[slot.tail :] = ["".join(parts[slot.tail :])]
    slot.tail += 1
    slot.compact_at = slot.tail + _COMPACT_EVERY


def other_arguments(slot: SlotState, arguments: object, rules: IdentityRules) -> bool:
    """Apply arguments that are no string to ``slot``: invalid, but for a complete body's call without an
    arguments key (:data:`~etf_otel.core._identity.BODY_WITHOUT_ARGUMENTS`), which is absent, or ``{}``
    under ``absent_arguments_in_body`` when the slot holds no arguments yet: then ``True``, a decision
    (``absent_arguments``) to count."""
    if arguments is not BODY_WITHOUT_ARGUMENTS:
        slot.room = INVALID_ARGUMENTS  # what arrived so far is kept; nothing more is taken
        return False
    if slot.arguments or not rules.allows(CompatibilityRule.ABSENT_ARGUMENTS_IN_BODY):
        return False
    slot.room -= len(NO_ARGUMENTS)
    slot.arguments.append(NO_ARGUMENTS)
    return True
