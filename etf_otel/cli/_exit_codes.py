"""The exit codes of every ``etf-otel`` command, defined once.

A CI job gates on them, so a crash or an unusable input must never look like a finding.
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXIT_BAD_INPUT", "EXIT_FOUND", "EXIT_INTERRUPTED", "EXIT_OK"]

EXIT_OK: Final = 0
"""Success, and nothing was found."""
EXIT_FOUND: Final = 1
"""Integrity problems were found."""
EXIT_BAD_INPUT: Final = 2
"""Bad usage or unreadable input (a one-line reason on stderr)."""
EXIT_INTERRUPTED: Final = 130
"""Interrupted (SIGINT, Ctrl-C), as shells report it: no verdict (one line on stderr)."""
