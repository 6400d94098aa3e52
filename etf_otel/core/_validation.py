"""Final validation: what a response's slots become when it ends.

Everything that can wait until the end of a response waits here, off the per-fragment
path: joining arguments, parsing them, finding duplicate ids, and counting transitions.
A slot is rejected for each identity rejection it recorded, then for ``missing_id``,
``missing_name``, ``invalid_arguments``, ``duplicate_call_id`` and, when the response never
ended properly, ``truncated_stream``. A call that passed all of these inside a response that is
not dispatchable is rejected with the response's blocking category: ``proposed`` means "may run".
"""

from __future__ import annotations

import json
import operator
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from etf_otel.core._identity import IdDecision
from etf_otel.core._results import Rejection, ToolCall
from etf_otel.core._slot_state import INCOMPLETE, POSITIONAL, SlotState
from etf_otel.core._vocabulary import ErrorCategory, ResponseEnd, Transition, Verdict

__all__ = ["CallSnapshot", "count_decisions", "final_calls", "is_json_object", "resolved_arguments", "same_arguments"]

_PROPOSED, _REJECTED = Verdict.PROPOSED, Verdict.REJECTED  # globals: reading them off the enum class is slower

_DECISION: Final = operator.itemgetter(3)
"""The decision of a diagnostics entry ``(choice, index, fragment, decision, category)``."""

Diagnostic = tuple[int, "int | None", int, IdDecision, "ErrorCategory | None"]
Overflow = dict[tuple[int, "int | None", IdDecision, "ErrorCategory | None"], int]


def count_decisions(
    diagnostics: Sequence[Diagnostic], overflow: Overflow
) -> tuple[Counter[IdDecision], dict[tuple[int, int], Counter[Transition]]]:
    """How often each decision was taken, and the compatibility transitions of each slot.

    Compatibility transitions (``keep_null``, ``keep_empty``, ``infer_index``) are counted
    per slot for its span; they are rare, so the per-slot pass runs only when one occurred.
    """
    transitions: dict[tuple[int, int], Counter[Transition]] = {}
    by_decision = Counter(map(_DECISION, diagnostics))  # one pass, at C speed
    for (_, _, decision, _), count in overflow.items():
        by_decision[decision] += count
    if any(decision.compatibility for decision in by_decision):
        compatible = Counter([(entry[0], entry[1], entry[3]) for entry in diagnostics if entry[3].compatibility])
        for (choice, index, decision, _), count in overflow.items():
            if decision.compatibility:
                compatible[choice, index, decision] += count
        for (choice, index, decision), count in compatible.items():  # compatible decisions always have an index
            counter = transitions.get((choice, index))  # type: ignore[arg-type]
            if counter is None:
                counter = transitions[choice, index] = Counter()  # type: ignore[index]
            counter[decision.transition] += count
    return by_decision, transitions


CallSnapshot = tuple[object, object, object]
"""One call of a provider's final list: ``(id, name, arguments)`` as the wire carried them."""


def final_calls(
    slots: Sequence[SlotState],
    end: ResponseEnd | None,
    transitions: dict[tuple[int, int], Counter[Transition]],
    final_snapshot: Sequence[CallSnapshot] | None = None,
    *,
    response_rejections: Iterable[Rejection] = (),
    checks_when_cut: bool = True,
) -> tuple[list[ToolCall], list[Rejection], bool]:
    """Validate each slot (in key order) into a call, and decide whether the response is dispatchable.

    Returns the calls, the rejections of the response, and whether it is dispatchable. The
    rejections are what blocked it: ``response_rejections`` (fragments that belong to no slot),
    then each call's own, then the final snapshot's (a call it lists that no slot proposed), then
    the response's own when it has no slot and did not complete.

    This is the one place the verdict vocabulary is decided: ``proposed`` only for the calls of
    a dispatchable response. A call whose own checks passed inside a response that is not
    dispatchable is ``rejected`` with the response's blocking category (its first rejection:
    ``unknown_slot``, ``missing_index``, a sibling's category, ...).
    """
    duplicated = _duplicated_ids(slot.id for slot in slots)
    mismatched, stray = _final_snapshot_check(slots, final_snapshot)
    end_category = _END_CATEGORY[end]
    checks = checks_when_cut or end is ResponseEnd.COMPLETE or end is ResponseEnd.INCOMPLETE
    judged: list[tuple[SlotState, str, dict[ErrorCategory, None]]] = []
    rejections = list(response_rejections)
    for slot in slots:
        arguments, contradicted = resolved_arguments(slot)
        categories = dict(slot.categories) if slot.categories else {}
        if checks:
            contradicted = contradicted or bool(mismatched and slot.key in mismatched)
            _check(slot, arguments, categories, contradicted, bool(duplicated and slot.id in duplicated))
        if end_category is not None:
            categories[end_category] = None
        if categories:
            rejections.extend(Rejection(slot.choice, slot.index, category) for category in categories)
        judged.append((slot, arguments, categories))
    if stray:
        rejections.append(Rejection(None, None, ErrorCategory.SNAPSHOT_MISMATCH))
    if not slots and end_category is not None:  # nothing to carry the end's category but the response
        rejections.append(Rejection(None, None, end_category))
    dispatchable = end is ResponseEnd.COMPLETE and bool(slots) and not rejections
    if rejections:  # then not dispatchable, and none of its calls is proposed
        blocking = rejections[0].category
        for _, _, categories in judged:
            if not categories:
                categories[blocking] = None
    calls = [_call(slot, arguments, categories, transitions) for slot, arguments, categories in judged]
    return calls, rejections, dispatchable


def _check(
    slot: SlotState, arguments: str, categories: dict[ErrorCategory, None], contradicted: bool, duplicated: bool
) -> None:
    """The assembly checks of one slot, added to ``categories`` in their documented order."""
    if slot.id is None and not slot.status & POSITIONAL:
        categories[ErrorCategory.MISSING_ID] = None
    if slot.name is None:
        categories[ErrorCategory.MISSING_NAME] = None
    if slot.room < 0 or not is_json_object(arguments):
        categories[ErrorCategory.INVALID_ARGUMENTS] = None
    if contradicted:
        categories[ErrorCategory.SNAPSHOT_MISMATCH] = None
    if slot.status & INCOMPLETE:
        categories[ErrorCategory.INCOMPLETE_RESPONSE] = None
    if duplicated:
        categories[ErrorCategory.DUPLICATE_CALL_ID] = None


_END_CATEGORY: Final = {
    ResponseEnd.COMPLETE: None,
    ResponseEnd.INCOMPLETE: ErrorCategory.INCOMPLETE_RESPONSE,
    ResponseEnd.FAILED: ErrorCategory.TRUNCATED_STREAM,
    None: ErrorCategory.TRUNCATED_STREAM,
}


def _call(
    slot: SlotState,
    arguments: str,
    categories: dict[ErrorCategory, None],
    transitions: dict[tuple[int, int], Counter[Transition]],
) -> ToolCall:
    counted = transitions.get((slot.choice, slot.index)) if transitions else None
    return ToolCall(  # positional: the fields in their declared order
        slot.choice,
        slot.index,
        slot.id,
        slot.name,
        arguments,
        _REJECTED if categories else _PROPOSED,
        tuple(categories),
        slot.fragments,
        tuple(slot.rejected) if slot.rejected else (),
        slot.rejected_count,
        tuple(sorted(counted.items(), key=lambda item: item[0].value)) if counted else (),
        slot.opened_ns,
        slot.closed_ns,
    )


def resolved_arguments(slot: SlotState) -> tuple[str, bool]:
    """The slot's arguments, and whether a snapshot of the provider contradicts them.

    Non-empty deltas are the arguments and every claim must equal them; without deltas the
    first claim is, and later claims must equal it; with neither, the first placeholder
    (Anthropic ``{}``), else ``""``. A placeholder is never joined with deltas.
    """
    deltas = "".join(slot.arguments)
    claims = slot.claims
    if not claims:
        return (deltas if deltas or slot.placeholder is None else slot.placeholder), False
    if deltas:
        return deltas, any(not same_arguments(deltas, claim) for claim in claims)
    first = claims[0]
    return first, any(not same_arguments(first, claim) for claim in claims[1:])


def same_arguments(left: str, right: str) -> bool:
    """Equal JSON values when both sides parse (key order and whitespace aside), else identical text."""
    if left == right:
        return True
    try:
        return _json_equal(_DECODER.decode(left), _DECODER.decode(right))
    except (ValueError, RecursionError):
        return False


def _json_equal(left: object, right: object) -> bool:
    """JSON value equality: unlike Python's ``==``, ``true`` is not ``1`` and ``1`` is ``1.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    if isinstance(left, dict):
        return (
            isinstance(right, dict)
            and left.keys() == right.keys()
            and all(_json_equal(value, right[key]) for key, value in left.items())
        )
    if isinstance(left, list):
        return isinstance(right, list) and len(left) == len(right) and all(map(_json_equal, left, right))
    if isinstance(left, (int, float)):
        return isinstance(right, (int, float)) and left == right
    return left == right


def _final_snapshot_check(
    slots: Sequence[SlotState], snapshot: Sequence[CallSnapshot] | None
) -> tuple[set[tuple[int, int]], bool]:
    """The slots the provider's final list contradicts, and whether it lists a call no slot proposed.

    ``None`` is no claim. Otherwise every listed call must match a slot by id with an equal
    name and equal arguments, and every slot with an id must be listed.
    """
    if snapshot is None:
        return set(), False
    by_id = {slot.id: slot for slot in slots if slot.id is not None}
    listed: set[str] = set()
    mismatched: set[tuple[int, int]] = set()
    stray = False
    for call_id, name, arguments in snapshot:
        slot = by_id.get(call_id) if isinstance(call_id, str) else None
        if slot is None:
            stray = True
            continue
        listed.add(slot.id)  # type: ignore[arg-type]  # by_id holds slots with an id
        own, _ = resolved_arguments(slot)
        if name != slot.name or not isinstance(arguments, str) or not same_arguments(own, arguments):
            mismatched.add(slot.key)
    mismatched.update(slot.key for call_id, slot in by_id.items() if call_id not in listed)
    return mismatched, stray


def _duplicated_ids(ids: Iterable[str | None]) -> set[str]:
    """Ids established on more than one slot (a set only when there are any)."""
    present = [id_ for id_ in ids if id_ is not None]
    if len(set(present)) == len(present):
        return set()
    return {id_ for id_, count in Counter(present).items() if count > 1}


def _reject_constant(token: str) -> object:
    raise ValueError(token)


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
"""Shared like ``json``'s own default decoder: ``json.loads(text, parse_constant=...)``
builds a decoder and its scanner on every call."""


_JSON_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_SCAN_JSON: Final = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__
"""The C scanner under ``JSONDecoder.decode``, called directly: no Python frames per call."""


def is_json_object(text: str) -> bool:
    """True when ``text`` is exactly one JSON object (no NaN/Infinity, which JSON lacks)."""
    start = 0 if text[:1] == "{" else _JSON_WHITESPACE.match(text).end()  # type: ignore[union-attr]
    if text[start : start + 1] != "{":
        return False
    try:
        _, end = _SCAN_JSON(text, start)
    except (StopIteration, ValueError, RecursionError):
        return False
    return end == len(text) or _JSON_WHITESPACE.match(text, end).end() == len(text)  # type: ignore[union-attr]
