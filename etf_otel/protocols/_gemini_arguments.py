"""Gemini's typed arguments: whole ``args`` objects, and ``partialArgs`` leaves addressed by JSONPath.

A streamed Gemini call (Vertex ``streamFunctionCallArguments``) carries no argument text: each
``partialArgs`` entry writes one typed leaf, ``{jsonPath, stringValue | numberValue | boolValue
| nullValue, willContinue?}``. :class:`Leaves` builds the arguments object from them by the rules
of docs/protocols.md:

* a path is ``$`` followed by ``.name``, ``['name']`` (or ``["name"]``) and ``[n]`` segments;
  containers are created on the way (a numeric segment makes an array), and an array index may
  append or revisit an element, never leave a gap;
* a string leaf stays open while its pieces say ``willContinue: true`` and each later piece at
  that path is appended; the first piece without it closes the string;
* a number, a boolean or a null is set once;
* anything else (no or a bad path, zero or several values, a value of the wrong type, a path
  written again once closed, a leaf under a leaf or over a container, a gap) makes the arguments
  invalid, and so does a string still open when the call is finalized.

Nothing here parses or repairs text: the arguments are built from typed values only.
"""

from __future__ import annotations

import json
import math
import re
from typing import Final

from etf_otel.core._identity import ABSENT
from etf_otel.protocols._base import field

__all__ = ["NOT_AN_OBJECT", "Leaves", "canonical_json", "parse_path", "read"]

NOT_AN_OBJECT: Final = object()
"""What arguments that are no JSON object turn into: no string, so the slot's arguments are invalid."""

_SEGMENT: Final = re.compile(
    r"""\.([A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_\u0080-\U0010ffff]*)"""  # .name
    r"""|\['((?:[^'\\]|\\.)*)'\]"""  # ['name']
    r"""|\["((?:[^"\\]|\\.)*)"\]"""  # ["name"]
    r"""|\[(0|[1-9][0-9]*)\]"""  # [n]
)
_ESCAPE: Final = re.compile(r"\\(.)", re.DOTALL)

Path = tuple[str | int, ...]


def read(obj: object, camel: str, snake: str) -> object:
    """A field of a wire object by its JSON name, else by the SDK's ``model_dump()`` name (:data:`ABSENT`: neither)."""
    value = field(obj, camel)
    return field(obj, snake) if value is ABSENT else value


def parse_path(path: object) -> Path | None:
    """The segments of ``path`` (names as ``str``, array positions as ``int``); ``None`` when it is no such path."""
    if type(path) is not str or not path.startswith("$"):
        return None
    segments: list[str | int] = []
    at = 1
    while at < len(path):
        match = _SEGMENT.match(path, at)
        if match is None:
            return None
        shorthand, single, double, number = match.groups()
        if number is not None:
            segments.append(int(number))
        else:
            quoted = single if single is not None else double
            segments.append(shorthand if quoted is None else _ESCAPE.sub(r"\1", quoted))
        at = match.end()
    return tuple(segments)


def canonical_json(value: object) -> object:
    """``value`` as compact JSON text, or :data:`NOT_AN_OBJECT` when it holds what JSON lacks (NaN, sets, cycles)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return NOT_AN_OBJECT


_VALUE_FIELDS: Final = (
    ("stringValue", "string_value"),
    ("numberValue", "number_value"),
    ("boolValue", "bool_value"),
    ("nullValue", "null_value"),
)
_INVALID: Final = object()


def _value(entry: object) -> tuple[object, bool]:
    """The one value an entry writes, and whether it is a string; :data:`_INVALID` when there is not exactly one.

    A ``null`` string, number or bool value counts as absent (proto3); ``nullValue`` is present
    as JSON ``null`` or ``"NULL_VALUE"``.
    """
    found: list[object] = []
    for position, (camel, snake) in enumerate(_VALUE_FIELDS):
        value = read(entry, camel, snake)
        if value is ABSENT or (value is None and position < 3):
            continue
        found.append(_typed(position, value))
    if len(found) != 1:
        return _INVALID, False
    return found[0], type(found[0]) is str


def _typed(position: int, value: object) -> object:
    if position == 0:
        return value if isinstance(value, str) else _INVALID
    if position == 1:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return _INVALID
        return value if math.isfinite(value) else _INVALID
    if position == 2:
        return value if isinstance(value, bool) else _INVALID
    return None if value is None or value == "NULL_VALUE" else _INVALID


class Leaves:
    """The arguments object one streamed call is building from its ``partialArgs`` entries.

    ``room`` bounds the characters it holds (paths and values); past it the arguments are
    invalid and nothing more is kept.
    """

    __slots__ = ("_open", "_root", "invalid", "room", "seen")

    def __init__(self, room: int) -> None:
        self._root: dict[str, object] = {}
        self._open: set[Path] = set()
        """Paths of strings whose last piece said ``willContinue: true``."""
        self.invalid = False
        self.room = room
        self.seen = False
        """Whether any entry arrived: without one, the call's arguments are its ``args``."""

    def apply(self, entries: object) -> None:
        """The ``partialArgs`` of one part: a list of entries, each applied in order."""
        if entries is ABSENT or entries is None:
            return
        if not isinstance(entries, list):
            self.seen = self.invalid = True
            return
        self.seen = self.seen or bool(entries)
        for entry in entries:
            if self.invalid:
                return
            self._entry(entry)

    def _entry(self, entry: object) -> None:
        path = parse_path(read(entry, "jsonPath", "json_path"))
        value, is_string = _value(entry) if path is not None else (_INVALID, False)
        if path is None or value is _INVALID or not path:
            self.invalid = True  # no usable path, no single typed value, or a leaf over the root object
            return
        self.room -= len(path) + (len(value) if type(value) is str else 8)
        if self.room < 0:
            self.invalid = True
            self._root, self._open = {}, set()
            return
        will_continue = read(entry, "willContinue", "will_continue") is True
        if path in self._open:
            if not is_string:
                self.invalid = True  # an open string continued with another type
                return
            self._append(path, value)  # type: ignore[arg-type]  # a str: is_string
            if not will_continue:
                self._open.discard(path)
            return
        if not self._place(path, value):
            self.invalid = True  # written again once closed, under a leaf, over a container, or a gap
            return
        if is_string and will_continue:
            self._open.add(path)

    def _place(self, path: Path, value: object) -> bool:
        """Write a new leaf at ``path``, creating containers on the way; ``False`` when the tree forbids it."""
        node: object = self._root
        for position, segment in enumerate(path):
            last = position == len(path) - 1
            fresh: object = value if last else ({} if isinstance(path[position + 1], str) else [])
            if isinstance(segment, str):
                if not isinstance(node, dict):
                    return False
                if segment not in node:
                    node[segment] = fresh
                elif last or not isinstance(node[segment], (dict, list)):
                    return False  # a leaf over a container, or under a leaf
                node = node[segment]
            else:
                if not isinstance(node, list) or segment > len(node):
                    return False  # an index into an object, or a gap
                if segment == len(node):
                    node.append(fresh)
                elif last or not isinstance(node[segment], (dict, list)):
                    return False
                node = node[segment]
        return True

    def _append(self, path: Path, piece: str) -> None:
        node: object = self._root
        for segment in path[:-1]:
            node = node[segment]  # type: ignore[index]  # _place built this path
        node[path[-1]] += piece  # type: ignore[index]

    def arguments(self) -> object:
        """The object as JSON text, or :data:`NOT_AN_OBJECT` when the entries made it invalid or a string is open."""
        if self.invalid or self._open:
            return NOT_AN_OBJECT
        return canonical_json(self._root)
