"""The command line as a user's terminal sees it: a pseudo-terminal from the standard library.

``etf-otel`` draws tables only for a terminal; on a pipe it prints one record per line. These
helpers run ``python -m etf_otel`` with stdout (and, when asked, stdin) on a pty of a given width,
stderr on a pipe, and return what the terminal showed.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Shown:
    returncode: int
    raw: str
    """What the terminal received, styles included."""
    stderr: str

    @property
    def stdout(self) -> str:
        """The text the terminal showed: the styles (bold, colour) taken out."""
        return ANSI.sub("", self.raw)


def _pty(columns: int) -> tuple[int, int]:
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    return leader, follower


def environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def in_terminal(*args: str, columns: int = 80, stdin_terminal: bool = False, timeout: float = 120, **env: str) -> Shown:
    """``python -m etf_otel ARGS`` with stdout on a terminal ``columns`` wide (stdin too with ``stdin_terminal``)."""
    leader, follower = _pty(columns)
    stdin_leader, stdin_follower = _pty(columns) if stdin_terminal else (None, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "etf_otel", *args],
        stdin=stdin_follower if stdin_follower is not None else subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=environment(COLUMNS=str(columns), **env),
    )
    os.close(follower)
    if stdin_follower is not None:
        os.close(stdin_follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
        stderr = process.stderr.read() if process.stderr else b""
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
        if stdin_leader is not None:
            os.close(stdin_leader)
        if process.stderr:
            process.stderr.close()
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return Shown(process.returncode, text, stderr.decode("utf-8", "replace"))
