"""The code blocks of README.md and docs/ that claim to run, run as written.

Every ``python`` block of README.md is a complete program: it defines what it uses. It runs in a
fresh interpreter, its ``openai`` client pointed at the scripted server (``OPENAI_BASE_URL``, as a
reader without an API key would). In ``docs/``, the complete programs are listed in
:data:`RUNNABLE_DOCS` and run the same way; the other blocks are fragments of a larger program
(they use names the reader's program defines, or ``...``). The README's zero-code quickstart, a
shell block, runs in a fresh venv in ``tests/packaging/test_quickstart.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from etf_otel.testing import LocalChatServer
from etf_otel.testing._scripted import tool_turn_responder

REPO = Path(__file__).resolve().parents[1]
BLOCK_RE = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)

RUNNABLE_DOCS = {"docs/testing.md": [0, 1], "docs/frameworks.md": [0]}
"""The blocks of each page (by position among its python blocks) that are complete programs."""


def blocks(page: str) -> list[str]:
    return BLOCK_RE.findall((REPO / page).read_text(encoding="utf-8"))


SNIPPETS = [(f"README.md#{n}", code) for n, code in enumerate(blocks("README.md"))] + [
    (f"{page}#{n}", blocks(page)[n]) for page, numbers in RUNNABLE_DOCS.items() for n in numbers
]


@pytest.fixture(scope="module")
def model() -> Iterator[LocalChatServer]:
    with LocalChatServer(responder=tool_turn_responder) as server:
        yield server


def test_the_readme_has_its_snippets() -> None:
    assert len(blocks("README.md")) >= 2


@pytest.mark.parametrize(("where", "code"), SNIPPETS, ids=[where for where, _ in SNIPPETS])
def test_the_snippet_runs_as_written(where: str, code: str, model: LocalChatServer, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "OPENAI_"))}
    env.update(OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="test", PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{where}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    if "print(host(call))" in code:  # the README's host snippet: the host ran each call the model proposed
        assert done.stdout.splitlines() == ["ran get_weather", "ran get_time"], done.stdout
