"""Final validation: what a response's slots become when it ends.

Everything that can wait until the end of a response waits here, off the per-fragment
path: joining arguments, parsing them, finding duplicate ids, and counting transitions.
A slot is rejected for each identity rejection it recorded, then for ``missing_id``,
``missing_name``, ``invalid_arguments``, ``duplicate_call_id`` and, when the response never
ended properly, ``truncated_stream``.
"""

from __future__ import annotations

import json
import operator
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from etf_otel.core.identity import IdDecision
from etf_otel.core.results import Rejection, ToolCall
from etf_otel.core.slot_state import SlotState
from etf_otel.core.vocabulary import ErrorCategory, Transition, Verdict

__all__ = ["count_decisions", "final_calls", "is_json_object"]

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


def final_calls(
    slots: Sequence[SlotState], ended: bool, transitions: dict[tuple[int, int], Counter[Transition]]
) -> tuple[list[ToolCall], list[Rejection]]:
    """Validate each slot (in key order) into a call, with the rejections it carries."""
    duplicated = _duplicated_ids(slot.id for slot in slots)
    calls: list[ToolCall] = []
    rejections: list[Rejection] = []
    for slot in slots:
        categories = dict(slot.categories) if slot.categories else {}
        arguments = "".join(slot.arguments)
        if slot.id is None:
            categories[ErrorCategory.MISSING_ID] = None
        if slot.name is None:
            categories[ErrorCategory.MISSING_NAME] = None
        if slot.room < 0 or not is_json_object(arguments):
            categories[ErrorCategory.INVALID_ARGUMENTS] = None
        if duplicated and slot.id in duplicated:
            categories[ErrorCategory.DUPLICATE_CALL_ID] = None
        if not ended:
            categories[ErrorCategory.TRUNCATED_STREAM] = None
        if categories:
            rejections.extend(Rejection(slot.choice, slot.index, category) for category in categories)
        counted = transitions.get((slot.choice, slot.index)) if transitions else None
        calls.append(
            ToolCall(  # positional: the fields in their declared order
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
        )
    return calls, rejections


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
