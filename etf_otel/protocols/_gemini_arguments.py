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
from collections.abc import Iterator
from typing import Final

from etf_otel.core._identity import ABSENT
from etf_otel.core._validation import same_arguments
from etf_otel.protocols._base import field

__all__ = [
    "CALLS",
    "CANDIDATES",
    "CONTENTS",
    "ENTRIES",
    "NOT_AN_OBJECT",
    "PARTS",
    "RESPONSES",
    "Leaves",
    "SdkClasses",
    "call_parts",
    "canonical_json",
    "is_error",
    "parse_path",
    "read",
    "repeated_call",
    "sdk_field",
    "unset",
    "whole_call",
]

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


class SdkClasses(dict[type, bool]):
    """Class -> whether its objects may be read from their ``__dict__`` for ``names``: the inlined paths' test.

    The ``google-genai`` SDK's models declare every field with the default ``None`` and forbid
    extra fields, so an object's ``__dict__`` holds each field, the payload's value or ``None``
    when the payload lacked it; :func:`field` tells those two apart through
    ``__pydantic_fields_set__`` on every read. Where the rules read a missing field as they read
    ``null`` (every field but a call's ``id`` and an entry's ``nullValue``), that test tells
    nothing: the inlined paths read ``__dict__`` and ask ``__pydantic_fields_set__`` only for those
    two. A class qualifies (learned once, on its first object) when it is a pydantic model that
    declares each of ``names`` with no default or the default ``None``, declares none of
    ``undeclared`` (the camelCase names :func:`read` tries first, ``error``), and takes no extra
    fields (which could hold those). Any other class, and any object of a qualifying class that
    lacks a field in its ``__dict__``, is read with :func:`field`.
    """

    __slots__ = ("names", "undeclared")

    def __init__(self, names: tuple[str, ...], undeclared: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.names = names
        self.undeclared = undeclared

    def __missing__(self, kind: type) -> bool:
        declared = getattr(kind, "model_fields", None)
        config = getattr(kind, "model_config", None)
        try:
            known = (
                isinstance(declared, dict)
                and isinstance(config, dict)
                and config.get("extra") != "allow"
                and not any(name in declared for name in self.undeclared)
                and all(name in declared and _none_by_default(declared[name]) for name in self.names)
            )
        except Exception:  # not pydantic's FieldInfo: nothing is known, field() reads it
            known = False
        self[kind] = known
        return known


def _none_by_default(info: object) -> bool:
    """A pydantic field whose value, when the payload lacks it, is ``None`` or missing (no default)."""
    if info.is_required():  # type: ignore[attr-defined]
        return True
    return info.default is None and info.default_factory is None  # type: ignore[attr-defined]


ENTRIES: Final = SdkClasses(
    ("json_path", "string_value", "number_value", "bool_value", "null_value", "will_continue"),
    ("jsonPath", "stringValue", "numberValue", "boolValue", "nullValue", "willContinue"),
)
"""``partialArgs`` entry classes (the SDK's ``PartialArg``) :meth:`Leaves.apply` reads from ``__dict__``."""


# The SDK classes the Gemini adapter's feed reads from ``__dict__``, by role.
RESPONSES: Final = SdkClasses(
    ("response_id", "prompt_feedback", "candidates"), ("responseId", "promptFeedback", "error")
)
CANDIDATES: Final = SdkClasses(("index", "content", "finish_reason"), ("finishReason",))
CONTENTS: Final = SdkClasses(("parts",))
PARTS: Final = SdkClasses(("function_call",), ("functionCall",))
CALLS: Final = SdkClasses(("id", "name", "args", "partial_args", "will_continue"), ("partialArgs", "willContinue"))


def sdk_field(obj: object, name: str) -> object:
    """``obj``'s field ``name`` from its ``__dict__`` (an SDK class read inline); :data:`ABSENT`: not there."""
    try:
        return obj.__dict__.get(name, ABSENT)
    except AttributeError:
        return ABSENT


def unset(value: object) -> object:
    """A protobuf string field as the identity table sees it: ``null`` and ``""`` are :data:`ABSENT`."""
    return ABSENT if value is None or value == "" else value


def is_error(event: object) -> bool:
    """An in-band error object that is no plain dict (the adapter's feed reads those inline): an ``error``."""
    error = field(event, "error")
    return error is not ABSENT and error is not None


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


_INVALID: Final = object()


def _value(string: object, number: object, boolean: object, null: object) -> tuple[object, bool]:
    """The one value an entry writes, and whether it is a string; :data:`_INVALID` when there is not exactly one.

    Each argument is the entry's field, :data:`ABSENT` when it lacks it. A ``null`` string,
    number or bool value counts as absent (proto3); ``nullValue`` is present as JSON ``null``
    or ``"NULL_VALUE"``.
    """
    count = 0
    value: object = _INVALID
    if string is not ABSENT and string is not None:
        count += 1
        value = string if isinstance(string, str) else _INVALID
    if number is not ABSENT and number is not None:
        count += 1
        value = _number(number)
    if boolean is not ABSENT and boolean is not None:
        count += 1
        value = boolean if isinstance(boolean, bool) else _INVALID
    if null is not ABSENT:
        count += 1
        value = None if null is None or null == "NULL_VALUE" else _INVALID
    if count != 1:
        return _INVALID, False
    return value, type(value) is str


def _entry_fields(entry: object) -> tuple[object, ...]:
    """An entry's path, its four values and ``willContinue``, read with :func:`read`."""
    return tuple(read(entry, camel, snake) for camel, snake in _ENTRY_KEYS)


def _dict_entry_fields(entry: dict[str, object]) -> tuple[object, ...]:
    """A plain dict entry's path, its four values and ``willContinue`` (camelCase keys, else snake_case)."""
    fields = []
    for camel, snake in _ENTRY_KEYS:
        value = entry.get(camel, ABSENT)
        fields.append(entry.get(snake, ABSENT) if value is ABSENT else value)
    return tuple(fields)


_ENTRY_KEYS: Final = (
    ("jsonPath", "json_path"),
    ("stringValue", "string_value"),
    ("numberValue", "number_value"),
    ("boolValue", "bool_value"),
    ("nullValue", "null_value"),
    ("willContinue", "will_continue"),
)


def _number(value: object) -> object:
    """A finite JSON number (an integer of any size is one; a bool is none)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _INVALID
    return value if isinstance(value, int) or math.isfinite(value) else _INVALID


def call_parts(candidate: object) -> Iterator[object]:
    """The ``functionCall`` of each part of ``candidate.content`` that has one, in order."""
    parts = field(field(candidate, "content"), "parts")
    for part in parts if isinstance(parts, list) else ():
        call = read(part, "functionCall", "function_call")
        if call is not ABSENT and call is not None:
            yield call


def whole_call(call_id: object, name: object, args: object) -> tuple[str, str, str] | None:
    """What two whole calls must share for ``drop_repeated_call``: a non-empty id, the name, the arguments."""
    if type(call_id) is not str or type(name) is not str or not isinstance(args, dict):
        return None
    text = canonical_json(args)
    return (call_id, name, text) if isinstance(text, str) else None


def repeated_call(earlier_calls: list[tuple[str, str, str, int]], whole: tuple[str, str, str]) -> int | None:
    """The ordinal of an earlier whole call (of the candidate) with this id, name and (JSON-equal) arguments."""
    call_id, name, text = whole
    for earlier_id, earlier_name, earlier_text, key in earlier_calls:
        if earlier_id == call_id and earlier_name == name and same_arguments(earlier_text, text):
            return key
    return None


class Leaves:
    """The arguments object one streamed call is building from its ``partialArgs`` entries.

    ``room`` bounds the characters it holds (paths and values); past it the arguments are
    invalid and nothing more is kept.
    """

    __slots__ = ("_last_path", "_last_text", "_open", "_root", "invalid", "room", "seen")

    def __init__(self, room: int) -> None:
        self._root: dict[str, object] = {}
        self._last_text: str | None = None
        """The last path parsed, and its segments: a streamed string's pieces repeat it."""
        self._last_path: Path = ()
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
        """One entry, its fields read inline: this runs once per streamed piece of arguments."""
        if type(entry) is dict:
            text, string, number, boolean, null, will_continue = _dict_entry_fields(entry)
        elif ENTRIES[type(entry)]:
            try:
                values = entry.__dict__
                text, string, number, boolean, null = (
                    values["json_path"],
                    values["string_value"],
                    values["number_value"],
                    values["bool_value"],
                    values["null_value"],
                )
                will_continue = values["will_continue"]
                if null is None and "null_value" not in entry.__pydantic_fields_set__:  # type: ignore[attr-defined]
                    null = ABSENT
            except (AttributeError, KeyError):  # a field missing from __dict__ (pydantic's model_construct)
                text, string, number, boolean, null, will_continue = _entry_fields(entry)
        else:
            text, string, number, boolean, null, will_continue = _entry_fields(entry)
        path: Path | None = None
        if type(text) is str:
            if text == self._last_text:  # the next piece of a streamed string: parsed already
                path = self._last_path
            else:
                path = parse_path(text)
                if path is not None:
                    self._last_text, self._last_path = text, path
        value, is_string = _value(string, number, boolean, null) if path is not None else (_INVALID, False)
        if path is None or value is _INVALID or not path:
            self.invalid = True  # no usable path, no single typed value, or a leaf over the root object
            return
        self.room -= len(path) + (len(value) if type(value) is str else 8)
        if self.room < 0:
            self.invalid = True
            self._root, self._open = {}, set()
            return
        if path in self._open:
            if not is_string:
                self.invalid = True  # an open string continued with another type
                return
            self._append(path, value)  # type: ignore[arg-type]  # a str: is_string
            if will_continue is not True:
                self._open.discard(path)
            return
        if not self._place(path, value):
            self.invalid = True  # written again once closed, under a leaf, over a container, or a gap
            return
        if is_string and will_continue is True:
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
