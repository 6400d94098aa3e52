"""Gemini's ``partialArgs`` leaves: the JSONPath subset and every way an entry makes the arguments invalid.

Each case applies the entries before the one under test (the leaves so far, a string still
open) and then the entry, and checks the arguments the call would get.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from etf_otel.protocols._gemini_arguments import NOT_AN_OBJECT, Leaves, canonical_json, parse_path
from etf_otel.testing.gemini import leaf


@pytest.mark.parametrize(
    ("path", "segments"),
    [
        ("$", ()),
        ("$.a", ("a",)),
        ("$.a_1.b", ("a_1", "b")),
        ("$['a b']", ("a b",)),
        ('$["a.b"]', ("a.b",)),
        ("$['it\\'s']", ("it's",)),
        ("$.a[0][12]", ("a", 0, 12)),
        ("$.ville_été", ("ville_été",)),
        ("a", None),
        ("", None),
        ("$.", None),
        ("$..a", None),
        ("$.1a", None),
        ("$[01]", None),
        ("$[-1]", None),
        ("$[*]", None),
        ("$['a'", None),
        ("$.a b", None),
        (3, None),
        (None, None),
    ],
)
def test_the_json_path_subset(path: Any, segments: Any) -> None:
    assert parse_path(path) == segments


def arguments(*entries: Any, room: int = 10_000) -> object:
    leaves = Leaves(room)
    for entry in entries:
        leaves.apply(entry if isinstance(entry, list) or entry is None or isinstance(entry, str) else [entry])
    result = leaves.arguments()
    return json.loads(result) if isinstance(result, str) else result


@pytest.mark.parametrize(
    "entries",
    [
        [leaf("$.a", number=1), leaf("$.a", number=1)],  # a leaf written again once set
        [leaf("$.a", string="x"), leaf("$.a", string="y")],  # a string written again once closed
        [leaf("$.a", string="x", will_continue=True), leaf("$.a", number=1)],  # an open string continued by a number
        [leaf("$.a", number=1), leaf("$.a.b", number=1)],  # a leaf under a leaf
        [leaf("$.a", number=1), leaf("$.a[0]", number=1)],
        [leaf("$.a.b", number=1), leaf("$.a", number=1)],  # a leaf over a container
        [leaf("$.a[0]", number=1), leaf("$.a", number=1)],
        [leaf("$.a[0]", number=1), leaf("$.a[0].b", number=1)],  # under a leaf inside an array
        [leaf("$.a[1]", number=1)],  # a gap
        [leaf("$.a[0]", number=1), leaf("$.a[2]", number=1)],
        [leaf("$.a.b", number=1), leaf("$.a[0]", number=1)],  # an index into an object
        [leaf("$.a[0]", number=1), leaf("$.a.b", number=1)],  # a name into an array
        [leaf("$", number=1)],  # a leaf over the arguments object
        [leaf("a", number=1)],  # a bad path
        [{"stringValue": "x"}],  # no path
        [leaf("$.a")],  # no value
        [leaf("$.a", string="x", number=1)],  # two values
        [leaf("$.a", string=3)],  # values of the wrong type
        [leaf("$.a", number="3")],
        [leaf("$.a", number=True)],
        [leaf("$.a", number=float("inf"))],
        [leaf("$.a", boolean="true")],
        [leaf("$.a", null=0)],
        [leaf("$.a", null="NULL")],
        [leaf("$.a", string="x", will_continue=True)],  # a string still open at finalization
        ["not a list"],
        [[3]],  # an entry that is no object
    ],
)
def test_entries_that_make_the_arguments_invalid(entries: list[Any]) -> None:
    assert arguments(*entries) is NOT_AN_OBJECT


def test_strings_append_while_open_and_close_with_the_first_piece_without_will_continue() -> None:
    pieces = [leaf("$.q", string="a", will_continue=True), leaf("$.q", string="b", will_continue=True)]
    assert arguments(*pieces, leaf("$.q", string="")) == {"q": "ab"}
    assert arguments(*pieces, leaf("$.q", string="c"), leaf("$.q", string="d")) is NOT_AN_OBJECT


def test_arrays_append_and_revisit_their_containers() -> None:
    entries = [leaf("$.a[0].x", number=1), leaf("$.a[0].y", number=2), leaf("$.a[1]", string="s")]
    assert arguments(*entries) == {"a": [{"x": 1, "y": 2}, "s"]}
    assert arguments([leaf("$.m[0][0]", boolean=True), leaf("$.m[0][1]", null="NULL_VALUE")]) == {"m": [[True, None]]}


def test_nothing_or_an_empty_list_is_no_entry_and_invalid_arguments_stay_invalid() -> None:
    leaves = Leaves(100)
    leaves.apply(None)
    leaves.apply([])
    assert not leaves.seen and leaves.arguments() == "{}"
    leaves.apply([leaf("$", number=1), leaf("$.a", number=1)])
    assert leaves.seen and leaves.invalid and leaves.arguments() is NOT_AN_OBJECT


def test_the_leaves_are_bounded_by_the_argument_cap() -> None:
    assert arguments(leaf("$.a", string="x" * 50), room=100) == {"a": "x" * 50}
    assert arguments(leaf("$.a", string="x" * 50), leaf("$.b", string="y" * 50), room=100) is NOT_AN_OBJECT


def test_canonical_json_refuses_what_json_lacks() -> None:
    assert canonical_json({"b": 1, "a": "é"}) == '{"b":1,"a":"é"}'
    assert canonical_json({"a": float("nan")}) is NOT_AN_OBJECT and canonical_json({"a": {1, 2}}) is NOT_AN_OBJECT
