"""``core.divergence.compare``: every kind from the smallest pair of call lists that shows it.

The fuzz tests reach some of these kinds only by chance; these fix each one, so the pure
layer's coverage never depends on what hypothesis happened to draw.
"""

from __future__ import annotations

import pytest

from etf_otel.core._divergence import AssembledCall, DivergenceKind, compare
from etf_otel.core._results import ToolCall
from etf_otel.protocols._chat_completions import assemble
from etf_otel.testing.chat import chunk, finished, fragment


def rules_call(id: str | None = "call_1", name: str | None = "get_a", arguments: str = '{"a":1}') -> ToolCall:
    """The one call the rules assemble from a stream whose first fragment carries ``id`` (absent for ``None``)."""
    first = fragment(0, name=name, arguments=arguments) if id is None else fragment(0, id, name, arguments)
    (call,) = assemble(finished(chunk(first))).calls
    assert (call.id, call.name, call.arguments) == (id, name, arguments)
    return call


@pytest.mark.parametrize(
    ("ours", "theirs", "kinds"),
    [
        (rules_call(), ("call_1", "get_a", '{"a":1}'), []),
        (rules_call(), ("call_1", "get_a", {"a": 1}), []),  # parsed arguments compare as values
        (rules_call(), ("call_1call_1", "get_a", '{"a":1}'), [DivergenceKind.ID_CONCATENATED]),
        (rules_call(), ("call_2", "get_a", '{"a":1}'), [DivergenceKind.ID_REPLACED]),
        (rules_call(), (None, "get_a", '{"a":1}'), [DivergenceKind.ID_MISSING]),
        (rules_call(), ("", "get_a", '{"a":1}'), [DivergenceKind.ID_MISSING]),
        (rules_call(id=None), ("call_9", "get_a", '{"a":1}'), [DivergenceKind.ID_INVENTED]),
        (rules_call(id=None), ("", "get_a", '{"a":1}'), []),  # no id on either side
        (rules_call(), ("call_1", "get_aget_a", '{"a":1}'), [DivergenceKind.NAME_CONCATENATED]),
        (rules_call(), ("call_1", "get_b", '{"a":1}'), [DivergenceKind.NAME_DIFFERS]),
        (rules_call(), ("call_1", None, '{"a":1}'), [DivergenceKind.NAME_DIFFERS]),
        (rules_call(), ("call_1", "get_a", '{"a":2}'), [DivergenceKind.ARGUMENTS_DIFFER]),
        (rules_call(), ("call_1", "get_a", {"a": 2}), [DivergenceKind.ARGUMENTS_DIFFER]),
        (rules_call(arguments="{"), ("call_1", "get_a", {}), [DivergenceKind.ARGUMENTS_DIFFER]),
    ],
)
def test_each_kind(ours: ToolCall, theirs: AssembledCall, kinds: list[DivergenceKind]) -> None:
    assert compare([ours], [theirs]) == kinds


def test_call_counts_and_kinds_sorted() -> None:
    call = rules_call()
    assert compare([call], [("call_1", "get_a", '{"a":1}')] * 2) == [DivergenceKind.CALL_SPLIT]
    assert compare([call, call], [("call_2", "get_b", "")]) == [
        DivergenceKind.ARGUMENTS_DIFFER,
        DivergenceKind.CALLS_MERGED,
        DivergenceKind.ID_REPLACED,
        DivergenceKind.NAME_DIFFERS,
    ]
