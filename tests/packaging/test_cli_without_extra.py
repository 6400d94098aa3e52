"""``etf-otel`` when the ``cli`` extra's packages are missing: one line naming the extra, exit 2.

Each case hides a module (``sys.modules[name] = None`` makes importing it fail as if it
were not installed) in a fresh interpreter, so the command line is imported from scratch.
The install test (test_install.py) checks the same on a real install without the extra.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUN = "import sys\n{hide}\nfrom etf_otel.cli import main\nsys.exit(main({arguments!r}))\n"


def etf_otel_without(hide: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    code = RUN.format(hide=hide, arguments=list(arguments or ("replay", "reply.sse")))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module", ["rich", "pydantic"])
def test_a_missing_cli_package_names_the_extra(module: str) -> None:
    done = etf_otel_without(f"sys.modules[{module!r}] = None")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "etf-otel: the command line needs the cli extra: pip install 'etf-otel[cli]'\n"


def test_an_unusable_version_is_one_line_too() -> None:
    done = etf_otel_without("import types; sys.modules['rich.console'] = types.ModuleType('rich.console')")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "etf-otel: the command line cannot import rich.console (its version?): pip install --upgrade 'etf-otel[cli]'\n"
    )


def test_our_own_broken_import_keeps_its_traceback() -> None:
    done = etf_otel_without("sys.modules['etf_otel.cli._replay'] = None")
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback")
    assert "ModuleNotFoundError: import of etf_otel.cli._replay halted" in done.stderr


def test_replaying_sse_without_the_parser_names_the_extra(tmp_path: Path) -> None:
    """The SSE parser is imported only when an SSE recording is read, by the command already running."""
    recording = tmp_path / "reply.sse"
    recording.write_text('data: {"id": "r", "choices": []}\n\ndata: [DONE]\n\n')
    done = etf_otel_without("sys.modules['sseclient'] = None", "replay", str(recording))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "etf-otel replay: needs sseclient, which is not installed: pip install 'etf-otel[cli]'\n"


def test_a_command_without_the_sdk_names_the_extra() -> None:
    """The SDK is imported by the command that needs it (here the demo), not by the command line."""
    done = etf_otel_without("sys.modules['opentelemetry.sdk'] = None", "demo")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "etf-otel demo: needs opentelemetry, which is not installed: pip install 'etf-otel[cli]'\n"
