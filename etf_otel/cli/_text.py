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
from typing import IO

from rich.console import Console

__all__ = ["console_for", "displayable", "json_text", "write_json"]

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
    """A console that prints model output literally: no markup, no emoji codes, no highlighting."""
    target = stream if stream is not None else sys.stdout
    return _ReplayConsole(file=_EncodableWriter(target), markup=False, emoji=False, highlight=False)  # type: ignore[arg-type]
