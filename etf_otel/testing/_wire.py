"""What the three builder modules share: the sentinel for a key left out, and splicing nested lists."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["MISSING", "flatten", "without_missing"]


class _Missing:
    """The type of :data:`MISSING`; its repr keeps test ids and failure messages readable."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()
"""Leave a key out of the event entirely, as opposed to sending ``null``: providers do both, and the
identity rules must tell them apart."""


def without_missing(fields: Mapping[str, Any] | None = None, /, **more: Any) -> dict[str, Any]:
    """``fields`` then ``more``, the keys whose value is :data:`MISSING` left out (order kept)."""
    merged = {**(fields or {}), **more}
    return {key: value for key, value in merged.items() if value is not MISSING}


def flatten(events: Iterable[Any]) -> list[Any]:
    """The events of ``events``, with every list in it spliced in, at any depth."""
    flat: list[Any] = []
    for event in events:
        flat.extend(flatten(event) if isinstance(event, list) else [event])
    return flat
