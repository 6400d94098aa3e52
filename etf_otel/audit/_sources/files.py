"""Which files an audit reads, and how one is opened (gzip detected by its magic bytes).

``-`` stands for standard input, read as a mixed stream by :mod:`.otlp_json`.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable
from typing import IO, Final, cast

from etf_otel.errors import OtlpInputError

__all__ = ["STDIN", "expand_inputs", "expand_paths", "open_input", "total_bytes"]

_GZIP_MAGIC: Final = b"\x1f\x8b"

STDIN: Final = "-"
"""The path that reads standard input as a mixed stream (see :func:`.otlp_json._read_source`)."""


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files named and files under named directories (recursively, sorted, no hidden files)."""
    return [path for path, _ in expand_inputs(paths)]


def expand_inputs(paths: Iterable[str]) -> list[tuple[str, bool]]:
    """:func:`expand_paths`, each with whether it was found in a directory (then skipped if not traces)."""
    out: list[tuple[str, bool]] = []
    for path in paths:
        if path == STDIN:
            out.append((path, False))
        elif os.path.isdir(path):
            found: list[str] = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found.extend(os.path.join(root, name) for name in files if not name.startswith("."))
            out.extend((name, True) for name in sorted(found))
        elif os.path.isfile(path):
            out.append((path, False))
        elif os.path.exists(path):
            raise OtlpInputError(f"{path}: not a regular file or directory")
        else:
            raise OtlpInputError(f"{path}: no such file or directory")
    return out


def open_input(path: str) -> tuple[IO[bytes], IO[bytes]]:
    """(text source, raw file for progress) with gzip detected by magic bytes."""
    raw = open(path, "rb")  # closed by the caller
    try:
        magic = raw.read(2)
        raw.seek(0)
    except OSError:
        raw.close()
        raise
    if magic == _GZIP_MAGIC:
        return cast("IO[bytes]", gzip.GzipFile(fileobj=raw, mode="rb")), raw
    return raw, raw


def total_bytes(paths: Iterable[str]) -> int:
    """Size on disk of the expanded input (for a progress bar)."""
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    return total
