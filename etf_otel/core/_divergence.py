"""Where a third-party assembler's output differs from what the identity rules preserve.

Pure comparison of two lists of calls for one response: the calls the rules produced
(:class:`~etf_otel.core._slots.ToolCall`) and the ``(id, name, arguments)`` triples a wrapped
assembler produced. The result is a list of bounded sub-kinds of ``divergent_assembly``;
the values themselves are never part of it.

Arguments are compared as text when the assembler produced text, and as parsed JSON when it
produced an already parsed value (LangChain's ``tool_calls[].args`` is a dict): then the
rules' arguments must parse to an equal value. Calls are paired by position (the rules'
calls are in slot order; an adapter lists the assembler's calls in its own order).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import Enum

from etf_otel.core._results import ToolCall

__all__ = ["AssembledCall", "DivergenceKind", "compare", "id_kind", "name_kind"]

AssembledCall = tuple[object, object, object]
"""``(id, name, arguments)`` as a wrapped assembler produced them."""


class DivergenceKind(str, Enum):
    ID_CONCATENATED = "id_concatenated"
    ID_REPLACED = "id_replaced"
    ID_MISSING = "id_missing"
    ID_INVENTED = "id_invented"
    NAME_CONCATENATED = "name_concatenated"
    NAME_DIFFERS = "name_differs"
    CALL_SPLIT = "call_split"
    CALLS_MERGED = "calls_merged"
    ARGUMENTS_DIFFER = "arguments_differ"
    ASSEMBLER_RAISED = "assembler_raised"


def id_kind(rules_id: str | None, their_id: object) -> DivergenceKind | None:
    """How an id someone else used differs from the preserved one (``None``: it does not)."""
    if their_id == rules_id or (not their_id and rules_id is None):
        return None
    if rules_id is None:
        return DivergenceKind.ID_INVENTED
    if not their_id:
        return DivergenceKind.ID_MISSING
    if isinstance(their_id, str) and len(their_id) > len(rules_id) and rules_id in their_id:
        return DivergenceKind.ID_CONCATENATED
    return DivergenceKind.ID_REPLACED


def name_kind(rules_name: str | None, their_name: object) -> DivergenceKind | None:
    """How a name someone else used differs from the preserved one (``None``: it does not)."""
    if their_name == rules_name or (not their_name and rules_name is None):
        return None
    if isinstance(their_name, str) and rules_name and len(their_name) > len(rules_name) and rules_name in their_name:
        return DivergenceKind.NAME_CONCATENATED
    return DivergenceKind.NAME_DIFFERS


def _arguments_differ(rules_arguments: str, their_arguments: object) -> bool:
    if their_arguments is None or isinstance(their_arguments, str):
        return (their_arguments or "") != rules_arguments
    try:
        parsed = json.loads(rules_arguments)
    except (ValueError, RecursionError):
        return True
    return bool(parsed != their_arguments)


def compare(rules: Sequence[ToolCall], theirs: Sequence[AssembledCall]) -> list[DivergenceKind]:
    """Sorted distinct divergence kinds between the rules' calls and a wrapped assembler's."""
    kinds: set[DivergenceKind] = set()
    if len(theirs) > len(rules):
        kinds.add(DivergenceKind.CALL_SPLIT)
    elif len(theirs) < len(rules):
        kinds.add(DivergenceKind.CALLS_MERGED)
    for ours, (their_id, their_name, their_arguments) in zip(rules, theirs, strict=False):
        for kind in (id_kind(ours.id, their_id), name_kind(ours.name, their_name)):
            if kind is not None:
                kinds.add(kind)
        if _arguments_differ(ours.arguments, their_arguments):
            kinds.add(DivergenceKind.ARGUMENTS_DIFFER)
    return sorted(kinds, key=lambda kind: kind.value)
