"""Reading a field of a wire event or message, whether it is a plain dict or an SDK object.

Its own module, apart from :mod:`etf_otel.protocols._base`, because the adapters call
:func:`field` on every event that leaves their inlined paths: this module is compiled in the
optional accelerated build, while ``_base``'s ``typing.Protocol`` classes cannot be.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from etf_otel.core._identity import ABSENT

__all__ = ["field", "last_position", "typed_starts"]


def last_position(messages: Sequence[object], role: str) -> int | None:
    """The position of the last message with ``role``, ``None`` when there is none."""
    for position in range(len(messages) - 1, -1, -1):
        if field(messages[position], "role") == role:
            return position
    return None


def typed_starts(events: Sequence[object], start: str, ends: Callable[[dict[str, object]], bool]) -> list[int]:
    """Positions of each ``type: start`` event that follows an event ``ends`` accepts.

    The :attr:`WireProtocol.later_responses` of protocols whose responses open with one event type.
    """
    starts: list[int] = []
    ended = False
    for position, event in enumerate(events):
        if not isinstance(event, dict):
            continue
        if ended and event.get("type") == start:
            starts.append(position)
            ended = False
        elif ends(event):
            ended = True
    return starts


def field(obj: object, name: str) -> object:
    """``obj[name]`` for dicts, the attribute for SDK objects, :data:`ABSENT` when missing.

    pydantic models answer every declared attribute (``None`` when the payload lacked
    it), so presence is read from ``__pydantic_fields_set__`` and the model's extras.
    """
    if type(obj) is dict:
        return obj.get(name, ABSENT)
    fields_set = getattr(obj, "__pydantic_fields_set__", None)
    if fields_set is not None:
        if name in fields_set:
            return getattr(obj, name, ABSENT)
        extra = getattr(obj, "__pydantic_extra__", None)
        if extra and name in extra:
            return extra[name]
        return ABSENT
    if isinstance(obj, dict):
        return obj.get(name, ABSENT)
    return getattr(obj, name, ABSENT)
