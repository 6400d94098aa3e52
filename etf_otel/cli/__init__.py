"""The command line: the only layer that prints or exits.

Its packages (the OpenTelemetry SDK and exporters, pydantic, rich, the SSE parser) come
with the ``cli`` extra, not with the library an application installs. Without them
``etf-otel`` names the extra in one line and exits 2: a traceback would read as a bug.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from etf_otel.cli import _exit_codes

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code instead of exiting (130 when interrupted)."""
    try:
        return _start(argv)
    except KeyboardInterrupt:  # Ctrl-C while the command line starts: no traceback either
        print("etf-otel: interrupted", file=sys.stderr)
        return _exit_codes.EXIT_INTERRUPTED


def _start(argv: Sequence[str] | None) -> int:
    try:
        from etf_otel.cli._main import main as run
    except ImportError as error:
        missing = error.name or ""
        if not missing or missing.partition(".")[0] == "etf_otel":
            raise  # our own import is broken: that is a bug, keep its traceback
        if isinstance(error, ModuleNotFoundError):
            reason = "the command line needs the cli extra"
            install = "pip install 'etf-otel[cli]'"
        else:  # installed, but not a version the command line can use
            reason = f"the command line cannot import {missing} (its version?)"
            install = "pip install --upgrade 'etf-otel[cli]'"
        print(f"etf-otel: {reason}: {install}", file=sys.stderr)
        return _exit_codes.EXIT_BAD_INPUT
    return run(argv)
