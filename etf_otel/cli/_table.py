"""Tables on a terminal: every word whole, or cut with a marker; only ids and arguments fold.

Left to itself, rich narrows every column of a table wider than the terminal and folds the
words that no longer fit (``get_weathe`` / ``r``, ``invalid_argu`` / ``ments``). :func:`fit`
decides the widths instead, from what each column holds, as the caller declared it:

* ``overflow="fold"``: ids and arguments. They may give room; they wrap at spaces and a longer
  word folds, which for an opaque id or a JSON text loses nothing (every character is shown);
* ``overflow="ellipsis", no_wrap=True``: tool names. They may give room too, but are never
  folded: shown whole, or cut with ``…``. They are served before the folding columns, since a
  name cut short is worse than an id folded once more;
* any other column (numbers, verdicts, categories, finding kinds): the closed vocabularies,
  always at their natural width, each line on one line.

The table is drawn compact (a rule under the header, columns apart by spaces, no box), so an
80-column terminal holds a call's row. Only when not even the narrowest widths fit (a very narrow
terminal) is every column that does not fold cut with ``…``, the widest first: still no word is
split.
A table whose caller set column widths itself (the demo) is left as it is.
"""

from __future__ import annotations

from typing import Final

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

__all__ = ["fit"]

FOLD_FLOOR: Final = 8
"""The narrowest a folding column (an id, arguments) is made while a wider one still fits."""
CUT_FLOOR: Final = 8
"""The narrowest a name column is made: seven characters and the ``…``."""


def fit(table: Table, console: Console) -> None:
    """Set the style and the column widths of ``table`` for ``console``'s width (see the module)."""
    columns = table.columns
    if not columns or any(column.width is not None for column in columns):
        return
    table.box = box.SIMPLE_HEAD
    table.show_edge = False
    table.pad_edge = False
    table.collapse_padding = True  # two spaces between columns; one when that is what makes it fit
    natural = [_natural_width(console, column) for column in columns]
    floors = [min(width, _floor(console, column)) for width, column in zip(natural, columns, strict=True)]
    spare = console.width - _extra_width(console, table) - sum(floors)
    if spare < 0:
        table.padding = (0, 0, 0, 0)
        spare = console.width - _extra_width(console, table) - sum(floors)
    if spare < 0:
        widths = _cut_to_fit(columns, natural, sum(natural) - (console.width - _extra_width(console, table)))
    else:
        widths = _grow(columns, floors, natural, spare)
    for column, width in zip(columns, widths, strict=True):
        column.width = width
        if column.overflow != "fold":
            column.no_wrap = True


def _grow(columns: list[Column], floors: list[int], natural: list[int], spare: int) -> list[int]:
    """From the floors, the names first, then the ids and arguments, one character each in turn."""
    widths = list(floors)
    for served in ("ellipsis", "fold"):
        growing = [i for i, column in enumerate(columns) if _gives_room(column) and column.overflow == served]
        while spare > 0 and growing:
            growing = [i for i in growing if widths[i] < natural[i]]
            for i in growing[:spare]:
                widths[i] += 1
                spare -= 1
    return widths


def _cut_to_fit(columns: list[Column], natural: list[int], excess: int) -> list[int]:
    """A terminal too narrow for even the floors: every column that does not fold is cut with ``…``,
    and the widest column gives a character until the table fits (or every column is one wide)."""
    for column in columns:
        if column.overflow != "fold":
            column.overflow = "ellipsis"
    widths = list(natural)
    while excess > 0:
        widest = max(range(len(widths)), key=widths.__getitem__)
        if widths[widest] == 1:
            break
        widths[widest] -= 1
        excess -= 1
    return widths


def _gives_room(column: Column) -> bool:
    return column.overflow == "fold" or (column.no_wrap and column.overflow == "ellipsis")


def _floor(console: Console, column: Column) -> int:
    if column.overflow == "fold":  # and never narrower than a word of its header, which folds too
        return max(FOLD_FLOOR, Measurement.get(console, console.options, column.header).minimum)
    return CUT_FLOOR if _gives_room(column) else 1_000_000  # a column kept whole keeps its natural width


def _natural_width(console: Console, column: Column) -> int:
    """The widest line of the column's header and cells."""
    options = console.options
    return max(Measurement.get(console, options, renderable).maximum for renderable in (column.header, *column.cells))


def _extra_width(console: Console, table: Table) -> int:
    """What the table adds to its columns' content (padding, separators), measured by rich itself."""
    saved = [column.width for column in table.columns]
    for column in table.columns:
        column.width = 1
    try:
        return Measurement.get(console, console.options, table).maximum - len(table.columns)
    finally:
        for column, width in zip(table.columns, saved, strict=True):
            column.width = width
