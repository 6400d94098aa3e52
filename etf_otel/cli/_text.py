"""Text for the terminal and for pipes, shared by every command: JSON lines, literal consoles, escapes.

Whatever a command prints may come from the input it read (ids, names, finish reasons), so it
is printed literally (never as rich markup), with invisible characters made visible, in an
encoding the output can hold; a reader that leaves (``| head``) silences the output instead of
raising, so the exit code still tells the verdict.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from typing import IO, Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from etf_otel.cli._table import fit

__all__ = [
    "CELL_LIMIT",
    "TERMINAL_STDIN",
    "console_for",
    "cut",
    "displayable",
    "is_terminal",
    "json_text",
    "print_table",
    "shown",
    "stdin_is_terminal",
    "write_json",
]

CELL_LIMIT: Final = 200
"""Characters of one input string (an id, a name, arguments) a table shows; ``--json`` keeps it whole."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def json_text(document: object, *, ascii_only: bool = False) -> str:
    """``document`` as compact JSON that any UTF-8 (or, with ``ascii_only``, ASCII) output takes.

    Lone surrogates cannot be encoded as UTF-8; they are written as ``\\uXXXX`` escapes,
    which every JSON parser reads back as the same string.
    """
    text = json.dumps(document, ensure_ascii=ascii_only, separators=(",", ":"), default=str)
    return text if ascii_only else _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def write_json(document: object, stream: IO[str] | None = None) -> None:
    """One JSON document on one line; ASCII with escapes when ``stream`` is not UTF-8."""
    stream = stream if stream is not None else sys.stdout
    try:
        utf8 = codecs.lookup(getattr(stream, "encoding", None) or "utf-8").name == "utf-8"
    except LookupError:
        utf8 = False
    _write(stream, json_text(document, ascii_only=not utf8) + "\n")


def _write(stream: IO[str], text: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:  # the reader left (``| head``): the exit code still tells the verdict
        _silence_stdout()


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def displayable(text: str) -> str:
    """``text`` for a terminal: every non-printable character (control, format, surrogate,
    separator other than space) as a visible escape, so ``call-a\\u200b`` never looks like
    ``call-a`` and an ESC in an id never reaches the terminal."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escape(char) for char in text)


def _escape(char: str) -> str:
    code = ord(char)
    if char in _ESCAPES:
        return _ESCAPES[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def cut(text: str, limit: int = CELL_LIMIT) -> str:
    """``text``, or its first ``limit`` characters and a marker saying how many more there are.

    A table shows what tells two ids apart in their first characters; a 10 MB id is shown cut,
    in bounded time and memory, and the marker says the rest is there (``--json`` has it whole).
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text) - limit} more chars]"


def shown(text: str | None, limit: int = CELL_LIMIT) -> str:
    """An input string for a table cell: cut (:func:`cut`), then :func:`displayable`; ``-`` for none."""
    return "-" if text is None else displayable(cut(text, limit))


def is_terminal(stream: object) -> bool:
    """Whether ``stream`` is a terminal (a pipe, a file or a closed stream is not)."""
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False


TERMINAL_STDIN: Final = "<stdin>: standard input is a terminal; pipe or redirect the input into it"
"""The one line of a command asked to read ``-`` from a terminal (``replay -`` says the same)."""


def stdin_is_terminal() -> bool:
    """Whether standard input is a terminal: a command reading ``-`` refuses to wait on one."""
    return is_terminal(sys.stdin)


def _cell(value: object) -> str:
    plain = value.plain if isinstance(value, Text) else str(value)
    return cut(plain.replace("\t", " ").replace("\n", "; "), CELL_LIMIT * 4)


def print_table(console: Console, table: Table) -> None:
    """``table`` drawn for a terminal (:func:`~etf_otel.cli._table.fit`: no word split); on a pipe or a file,
    one record per line.

    Piped (a CI log, ``| grep``, ``| less``), a table drawn for 80 columns would fold lines and
    split words (``invalid_argu|ments``): there, as ``gh`` does, the title (if any), then the
    header and each row on one line, columns separated by tabs, a cell's lines joined by ``; ``.
    Every cell is bounded (:data:`CELL_LIMIT`), in either form.
    """
    if is_terminal(console.file):
        fit(table, console)
        console.print(table)
        return
    lines = [_cell(table.title)] if table.title else []
    columns = table.columns
    if table.show_header:
        lines.append("\t".join(_cell(column.header) for column in columns))
    lines += [
        "\t".join(_cell(value) for value in row) for row in zip(*(column.cells for column in columns), strict=True)
    ]
    if not console.quiet:  # written as is: rich would expand the tabs into spaces
        _write(console.file, "".join(f"{line}\n" for line in lines))


class _EncodableWriter:
    """A text stream that escapes what its target's encoding cannot hold instead of raising."""

    def __init__(self, target: IO[str]) -> None:
        self._target = target
        self.encoding = getattr(target, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        try:
            return self._target.write(text.encode(self.encoding, "backslashreplace").decode(self.encoding))
        except LookupError:
            return self._target.write(text.encode("ascii", "backslashreplace").decode("ascii"))

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        try:
            return self._target.isatty()
        except (AttributeError, OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._target.fileno()


class _ReplayConsole(Console):
    def on_broken_pipe(self) -> None:
        """The reader left (``| head``): stop writing, keep going, so the exit code is the verdict."""
        self.quiet = True
        _silence_stdout()


def console_for(stream: IO[str] | None = None) -> Console:
    """A console that prints model output literally (no markup, emoji codes, highlighting); piped, it never folds."""
    target = stream if stream is not None else sys.stdout
    writer = _EncodableWriter(target)
    return _ReplayConsole(
        file=writer,  # type: ignore[arg-type]
        markup=False,
        emoji=False,
        highlight=False,
        soft_wrap=not writer.isatty(),  # piped: a line is never folded (``| grep`` finds it whole)
    )
