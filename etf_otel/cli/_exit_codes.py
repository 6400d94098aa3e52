"""The exit codes of every ``etf-otel`` command, defined once, and where ``--help`` sends people.

A CI job gates on them, so a crash or an unusable input must never look like a finding.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CLI_DOCS", "EXIT_BAD_INPUT", "EXIT_FOUND", "EXIT_INTERRUPTED", "EXIT_OK"]

EXIT_OK: Final = 0
"""Success, and nothing was found."""
EXIT_FOUND: Final = 1
"""Integrity problems were found."""
EXIT_BAD_INPUT: Final = 2
"""Bad usage or unreadable input (a one-line reason on stderr)."""
EXIT_INTERRUPTED: Final = 130
"""Interrupted (SIGINT, Ctrl-C), as shells report it: no verdict (one line on stderr)."""

CLI_DOCS: Final = "https://github.com/etf-otel/etf-otel/blob/main/docs/cli.md"
"""The command line's reference, as the ``--help`` texts name it: an installed package has no ``docs/``
(the project's ``Source`` URL in ``pyproject.toml``, then the page)."""
