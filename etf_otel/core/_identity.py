"""The slot identity state machine (docs/identity-rules.md).

A slot is one tool call being assembled. Its identity state is one of:

* ``NONE``: no id has arrived yet;
* ``EMPTY``: only ``""`` has arrived (a placeholder, not an identity);
* ``ESTABLISHED``: a non-empty string id is set and can never be cleared or replaced.

Each incoming ``id`` value is classified (``absent``, ``null``, ``empty``, a ``new``
non-empty string, the ``same`` or a ``different`` string than the established one, or
an unsupported JSON type) and the pair ``(state, class)`` is looked up in
:data:`STRICT_TABLE`:

=============  ==============  ==================  ==========================
state          incoming        transition          category
=============  ==============  ==================  ==========================
NONE / EMPTY   absent          await
NONE / EMPTY   ``""``          await
NONE           non-empty str   establish
EMPTY          non-empty str   replace_empty
NONE / EMPTY   null            reject              initial_null
ESTABLISHED    absent          keep_omitted
ESTABLISHED    null            keep_null
ESTABLISHED    identical str   keep_identical
ESTABLISHED    different str   reject              id_conflict
ESTABLISHED    ``""``          reject              empty_after_established
any            number, bool,   reject              unsupported_id_type
               array, object
=============  ==============  ==================  ==========================

A rejection leaves the state and the id unchanged. The compatibility rule
``empty_continuation`` replaces exactly one row (``ESTABLISHED`` + ``""``) with the
transition ``keep_empty``; nothing else can be relaxed. The rules are opt-in but for
:data:`DEFAULT_RULES` (``absent_arguments_in_body``), on unless denied. The table is data so that
tests can walk every row, and the decision itself is one dictionary lookup: it runs
once per streamed fragment.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from etf_otel.core._vocabulary import ErrorCategory, IdKind, Transition

__all__ = [
    "ABSENT",
    "BODY_WITHOUT_ARGUMENTS",
    "DEFAULT_RULES",
    "STRICT_TABLE",
    "CompatibilityRule",
    "IdDecision",
    "IdState",
    "IdentityRules",
    "Incoming",
    "classify",
    "incoming_key",
]


class _Absent:
    """Marker for a key that is missing from a fragment, as opposed to ``null``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Final = _Absent()
"""The value adapters pass for a field the fragment did not carry."""


class _BodyWithoutArguments:
    """Marker for the arguments of a call a complete body gave no ``arguments`` key at all."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BODY_WITHOUT_ARGUMENTS"


BODY_WITHOUT_ARGUMENTS: Final = _BodyWithoutArguments()
"""What a complete body's lowering (``etf_otel.protocols._bodies``) passes as the arguments of a call
without an ``arguments`` key: ``{}`` under ``absent_arguments_in_body``, else absent. Never in a stream."""


class IdState(Enum):
    NONE = "none"
    EMPTY = "empty"
    ESTABLISHED = "established"


class Incoming(Enum):
    """Classes of incoming id values that the table distinguishes."""

    ABSENT = "absent"
    NULL = "null"
    EMPTY = "empty"
    NEW = "new"
    SAME = "same"
    DIFFERENT = "different"
    NUMBER = "number"
    BOOLEAN = "boolean"
    ARRAY = "array"
    OBJECT = "object"


class CompatibilityRule(str, Enum):
    """Named, opt-in accommodations of real providers' deviations (docs/identity-rules.md)."""

    EMPTY_CONTINUATION = "empty_continuation"
    """``id: ""`` after an established id is no update (transition ``keep_empty``)."""
    INFER_MISSING_INDEX = "infer_missing_index"
    """A fragment without index joins a slot only when that is unambiguous (``infer_index``)."""
    BUFFER_EARLY_DELTAS = "buffer_early_deltas"
    """Responses: argument events sent before ``output_item.added`` opened their ``output_index``
    wait for it, then join that slot (``buffer_early``); never opened, they stay ``unknown_slot``."""
    DROP_POST_DONE_DELTA = "drop_post_done_delta"
    """Responses: a delta after ``arguments.done`` that would change arguments already equal to the
    done snapshot is counted and dropped (``drop_late``), not merged."""
    DROP_REPEATED_CALL = "drop_repeated_call"
    """Gemini: a whole call repeating an earlier whole call's non-empty id, name and arguments is
    counted and set aside (``drop_repeat``), not a second slot."""
    REQUIRE_CALL_ID = "require_call_id"
    """Gemini: a strict option, not an accommodation: every id-less call is ``missing_id`` (by
    default an id-less candidate's calls are identified by position)."""
    ABSENT_ARGUMENTS_IN_BODY = "absent_arguments_in_body"
    """On by default (:data:`DEFAULT_RULES`), complete bodies only: a Chat Completions ``function`` or a
    Responses ``function_call`` item without an ``arguments`` key (an OpenAI-compatible gateway's call whose
    parameters are all optional) has the arguments ``{}`` (``absent_arguments``), not ``invalid_arguments``.
    A stream's missing or ``""`` arguments are not touched."""


DEFAULT_RULES: Final = frozenset({CompatibilityRule.ABSENT_ARGUMENTS_IN_BODY})
"""The rules on unless denied (``deny``, ``--deny``); every other rule is off unless allowed."""


@dataclass(frozen=True, slots=True, eq=False)
class IdDecision:
    """One row of the table, shared by every fragment that hits it.

    Besides the transition it carries the bounded diagnostic values of docs/telemetry.md,
    so recording a diagnostic is storing a reference to this object. Equality and hash
    are identity (``eq=False``): counting decisions per response must not hash enums.
    """

    transition: Transition
    category: ErrorCategory | None
    next_state: IdState
    adopts_id: bool
    id_kind: IdKind
    prior_id_present: bool
    id_empty: bool
    compatibility: bool = False
    """A transition counted on the call span (``etf.id.kept_null``, ...)."""
    next_row: Mapping[str, IdDecision] = field(default_factory=dict, repr=False)
    """The decisions for the slot's next state, keyed by ``Incoming`` value: the hot path
    follows this link instead of hashing a ``(state, incoming)`` pair per fragment."""

    @property
    def rejected(self) -> bool:
        return self.category is not None


_COMPATIBILITY_TRANSITIONS: Final = frozenset({Transition.KEEP_NULL, Transition.KEEP_EMPTY, Transition.INFER_INDEX})

_KIND_OF_CLASS: Final = {
    Incoming.ABSENT: IdKind.ABSENT,
    Incoming.NULL: IdKind.NULL,
    Incoming.EMPTY: IdKind.STRING,
    Incoming.NEW: IdKind.STRING,
    Incoming.SAME: IdKind.STRING,
    Incoming.DIFFERENT: IdKind.STRING,
    Incoming.NUMBER: IdKind.NUMBER,
    Incoming.BOOLEAN: IdKind.BOOLEAN,
    Incoming.ARRAY: IdKind.ARRAY,
    Incoming.OBJECT: IdKind.OBJECT,
}

_UNSUPPORTED: Final = (Incoming.NUMBER, Incoming.BOOLEAN, Incoming.ARRAY, Incoming.OBJECT)

# (state, incoming) -> (transition, category, next state, adopts id)
_Row = tuple[Transition, ErrorCategory | None, IdState, bool]

_STRICT_ROWS: Final[dict[tuple[IdState, Incoming], _Row]] = {
    (IdState.NONE, Incoming.ABSENT): (Transition.AWAIT, None, IdState.NONE, False),
    (IdState.NONE, Incoming.EMPTY): (Transition.AWAIT, None, IdState.EMPTY, False),
    (IdState.NONE, Incoming.NEW): (Transition.ESTABLISH, None, IdState.ESTABLISHED, True),
    (IdState.NONE, Incoming.NULL): (Transition.REJECT, ErrorCategory.INITIAL_NULL, IdState.NONE, False),
    (IdState.EMPTY, Incoming.ABSENT): (Transition.AWAIT, None, IdState.EMPTY, False),
    (IdState.EMPTY, Incoming.EMPTY): (Transition.AWAIT, None, IdState.EMPTY, False),
    (IdState.EMPTY, Incoming.NEW): (Transition.REPLACE_EMPTY, None, IdState.ESTABLISHED, True),
    (IdState.EMPTY, Incoming.NULL): (Transition.REJECT, ErrorCategory.INITIAL_NULL, IdState.EMPTY, False),
    (IdState.ESTABLISHED, Incoming.ABSENT): (Transition.KEEP_OMITTED, None, IdState.ESTABLISHED, False),
    (IdState.ESTABLISHED, Incoming.NULL): (Transition.KEEP_NULL, None, IdState.ESTABLISHED, False),
    (IdState.ESTABLISHED, Incoming.SAME): (Transition.KEEP_IDENTICAL, None, IdState.ESTABLISHED, False),
    (IdState.ESTABLISHED, Incoming.DIFFERENT): (
        Transition.REJECT,
        ErrorCategory.ID_CONFLICT,
        IdState.ESTABLISHED,
        False,
    ),
    (IdState.ESTABLISHED, Incoming.EMPTY): (
        Transition.REJECT,
        ErrorCategory.EMPTY_AFTER_ESTABLISHED,
        IdState.ESTABLISHED,
        False,
    ),
    **{
        (state, incoming): (Transition.REJECT, ErrorCategory.UNSUPPORTED_ID_TYPE, state, False)
        for state in IdState
        for incoming in _UNSUPPORTED
    },
}

_RULE_ROWS: Final[dict[CompatibilityRule, dict[tuple[IdState, Incoming], _Row]]] = {
    CompatibilityRule.EMPTY_CONTINUATION: {
        (IdState.ESTABLISHED, Incoming.EMPTY): (Transition.KEEP_EMPTY, None, IdState.ESTABLISHED, False),
    },
    CompatibilityRule.INFER_MISSING_INDEX: {},
    CompatibilityRule.BUFFER_EARLY_DELTAS: {},  # the Responses adapter applies it: no identity row changes
    CompatibilityRule.DROP_POST_DONE_DELTA: {},  # likewise
    CompatibilityRule.DROP_REPEATED_CALL: {},  # the Gemini adapter applies it
    CompatibilityRule.REQUIRE_CALL_ID: {},  # likewise, at the end of the response
    CompatibilityRule.ABSENT_ARGUMENTS_IN_BODY: {},  # the slots apply it to a body's calls
}

_UNSET_ROWS: Final[dict[tuple[IdState, Incoming], _Row]] = {
    (IdState.NONE, Incoming.NULL): (Transition.AWAIT, None, IdState.NONE, False),
    (IdState.NONE, Incoming.EMPTY): (Transition.AWAIT, None, IdState.NONE, False),
    (IdState.ESTABLISHED, Incoming.NULL): (Transition.KEEP_OMITTED, None, IdState.ESTABLISHED, False),
    (IdState.ESTABLISHED, Incoming.EMPTY): (Transition.KEEP_OMITTED, None, IdState.ESTABLISHED, False),
}
"""A protocol whose ``null`` and ``""`` ids mean "not set" (protobuf JSON: Gemini) reads them as an absent
id, while the diagnostics keep the kind that arrived: no ``initial_null``, no ``empty_after_established``."""


def _build(rows: Mapping[tuple[IdState, Incoming], _Row]) -> dict[tuple[IdState, Incoming], IdDecision]:
    table = {
        (state, incoming): IdDecision(
            transition=transition,
            category=category,
            next_state=next_state,
            adopts_id=adopts,
            id_kind=_KIND_OF_CLASS[incoming],
            prior_id_present=state is IdState.ESTABLISHED,
            id_empty=incoming is Incoming.EMPTY,
            compatibility=transition in _COMPATIBILITY_TRANSITIONS,
        )
        for (state, incoming), (transition, category, next_state, adopts) in rows.items()
    }
    by_state = _rows_by_state(table)
    for decision in table.values():
        object.__setattr__(decision, "next_row", by_state[decision.next_state])
    return table


def _rows_by_state(table: Mapping[tuple[IdState, Incoming], IdDecision]) -> dict[IdState, dict[str, IdDecision]]:
    by_state: dict[IdState, dict[str, IdDecision]] = {state: {} for state in IdState}
    for (state, incoming), decision in table.items():
        by_state[state][incoming.value] = decision
    return by_state


STRICT_TABLE: Final[Mapping[tuple[IdState, Incoming], IdDecision]] = _build(_STRICT_ROWS)
"""Every ``(state, incoming)`` pair the strict rules can meet, with its decision."""

_ABSENT, _NULL, _EMPTY, _NEW, _SAME, _DIFFERENT, _NUMBER, _ARRAY, _OBJECT = (
    Incoming.ABSENT.value,
    Incoming.NULL.value,
    Incoming.EMPTY.value,
    Incoming.NEW.value,
    Incoming.SAME.value,
    Incoming.DIFFERENT.value,
    Incoming.NUMBER.value,
    Incoming.ARRAY.value,
    Incoming.OBJECT.value,
)

_CLASS_OF_TYPE: Final[dict[type, Incoming]] = {
    type(None): Incoming.NULL,
    bool: Incoming.BOOLEAN,
    int: Incoming.NUMBER,
    float: Incoming.NUMBER,
    list: Incoming.ARRAY,
    tuple: Incoming.ARRAY,
    dict: Incoming.OBJECT,
}


def incoming_key(current_id: str | None, incoming: object) -> str:
    """The table class of ``incoming`` (an ``Incoming`` value) for a slot holding ``current_id``.

    ``current_id`` is the established id, or ``None`` while the slot has none (states
    ``NONE`` and ``EMPTY`` classify alike). This is the only classifier: the per-fragment
    path of the slot model calls it and then reads the table row, so the table is the one
    source of every decision. It returns the enum's value rather than the member because
    rows are keyed by those strings (hashing an ``Enum`` member runs Python code).
    """
    if type(incoming) is str:
        if not incoming:
            return _EMPTY
        if current_id is None:
            return _NEW
        return _SAME if incoming == current_id else _DIFFERENT
    if incoming is ABSENT:
        return _ABSENT
    if incoming is None:
        return _NULL
    found = _CLASS_OF_TYPE.get(type(incoming))
    if found is not None:
        return found.value
    if isinstance(incoming, str):  # a str subclass: the same classes as a str
        return incoming_key(current_id, str(incoming))
    if isinstance(incoming, (int, float)):
        return _NUMBER
    if isinstance(incoming, (list, tuple)):
        return _ARRAY
    return _OBJECT


def classify(state: IdState, current_id: str | None, incoming: object) -> Incoming:
    """Return the table class of ``incoming`` given the slot's state and id."""
    return Incoming(incoming_key(current_id if state is IdState.ESTABLISHED else None, incoming))


class IdentityRules:
    """The strict table plus the compatibility rules a user enabled by name, and the
    :data:`DEFAULT_RULES` the user did not deny (``deny`` wins over ``rules``).

    Instances are immutable and shared between responses and threads: building the
    tables costs tens of microseconds, so :meth:`for_rules` caches one per rule set.
    """

    __slots__ = ("initial_row", "rows", "rules", "table", "unset_ids")

    def __init__(
        self,
        rules: Iterable[CompatibilityRule | str] = (),
        *,
        unset_ids: bool = False,
        deny: Iterable[CompatibilityRule | str] = (),
    ) -> None:
        enabled = _enabled(rules, deny)
        rows = dict(_STRICT_ROWS)
        for rule in sorted(enabled, key=lambda r: r.value):
            rows.update(_RULE_ROWS[rule])
        if unset_ids:
            rows.update(_UNSET_ROWS)
        self.rules: frozenset[CompatibilityRule] = enabled
        self.unset_ids = unset_ids
        """Whether ``null`` and ``""`` ids are "not set" (a protocol's reading, not a user's rule)."""
        self.table: Mapping[tuple[IdState, Incoming], IdDecision] = _build(rows)
        self.rows: Mapping[IdState, Mapping[str, IdDecision]] = _rows_by_state(self.table)
        """The decisions of each state, keyed by ``Incoming`` value (what the slot model reads)."""
        self.initial_row: Mapping[str, IdDecision] = self.rows[IdState.NONE]
        """The decisions for a new slot, keyed by ``Incoming`` value (see ``IdDecision.next_row``)."""

    @classmethod
    def for_rules(
        cls,
        rules: Iterable[CompatibilityRule | str] = (),
        *,
        unset_ids: bool = False,
        deny: Iterable[CompatibilityRule | str] = (),
    ) -> IdentityRules:
        """The shared instance for ``rules`` and ``deny`` (built once per distinct set of rules it enables)."""
        return _cached_rules(_enabled(rules, deny), unset_ids)

    def allows(self, rule: CompatibilityRule) -> bool:
        return rule in self.rules

    def decide(self, state: IdState, current_id: str | None, incoming: object) -> IdDecision:
        """Decide what ``incoming`` does to a slot in ``state`` holding ``current_id``."""
        established = current_id if state is IdState.ESTABLISHED else None
        return self.rows[state][incoming_key(established, incoming)]

    def __repr__(self) -> str:
        names = ", ".join(sorted(rule.value for rule in self.rules))
        return f"IdentityRules([{names}])"


def _enabled(
    rules: Iterable[CompatibilityRule | str], deny: Iterable[CompatibilityRule | str]
) -> frozenset[CompatibilityRule]:
    """The rules enabled: those given and the defaults, less those denied."""
    denied = frozenset(CompatibilityRule(rule) for rule in deny)
    return frozenset(CompatibilityRule(rule) for rule in rules).union(DEFAULT_RULES).difference(denied)


@functools.lru_cache(maxsize=16)
def _cached_rules(rules: frozenset[CompatibilityRule], unset_ids: bool) -> IdentityRules:
    return IdentityRules(rules, unset_ids=unset_ids, deny=DEFAULT_RULES.difference(rules))
