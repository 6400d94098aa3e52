"""Fixtures of the install tests: PyPI reachable (or the test skips, and fails under CI), a fresh venv."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pypi() -> None:
    """PyPI answers, or the test cannot say anything: fail under CI, skip elsewhere."""
    try:
        urllib.request.urlopen(urllib.request.Request("https://pypi.org/simple/wrapt/", method="HEAD"), timeout=15)
    except OSError as error:
        message = f"PyPI is unreachable ({error}): the install tests need it"
        if os.environ.get("ETF_REQUIRE_PYPI") or os.environ.get("CI", "").lower() not in {"", "0", "false"}:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[Path]:
    """A fresh venv's ``bin`` directory; pip's cache is shared, nothing else is."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    yield tmp_path / "venv" / "bin"
