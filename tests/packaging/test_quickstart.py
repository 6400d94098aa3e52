"""The README's zero-code quickstart, run as a new user runs it: a fresh venv, no API key.

The shell blocks of README.md's "Zero code" section run verbatim in a bash script, in a fresh
venv whose ``bin`` comes first on ``PATH``: the ``pip install`` line (with the path of this
checkout for ``/path/to/etf-otel``), then the block that starts the scripted server with a
quirk (on a free port instead of 8000) and points the ``openai`` client at it, then the
launcher and the audit. The application is ``examples/zero_code.py`` as ``app.py``. The audit
must read the spans the launcher wrote between the app's own lines, find the tool-call span,
and report the quirk. Needs PyPI, as the install tests (test_install.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCED_SH = re.compile(r"^```sh\n(.*?)^```$", re.M | re.S)


def zero_code_blocks() -> tuple[str, str]:
    """(the quickstart, the no-API-key block) of the README's "Zero code" section."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("### Zero code")
    section = readme[start : readme.index("\n### ", start + 1)]
    quickstart, server = FENCED_SH.findall(section)
    return quickstart, server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_blocks_are_the_ones_this_test_expects() -> None:
    quickstart, server = zero_code_blocks()
    assert quickstart.startswith("pip install '/path/to/etf-otel[")
    assert "opentelemetry-instrument python app.py" in quickstart and "etf-otel audit" in quickstart
    assert server.startswith("python -m etf_otel.testing --port 8000 ") and "OPENAI_BASE_URL=" in server


def test_the_readme_zero_code_quickstart_finds_the_quirk_in_a_fresh_venv(
    pypi: None, venv: Path, tmp_path: Path
) -> None:
    quickstart, server = zero_code_blocks()
    pip_line, rest = quickstart.split("\n", 1)
    port = free_port()
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(ROOT / "examples" / "zero_code.py", app / "app.py")
    script = "\n".join(
        [
            "set -u",
            f'export PATH="{venv}:$PATH"',
            f"{pip_line.replace('/path/to/etf-otel', str(ROOT))} || exit 90",
            server.replace("--port 8000", f"--port {port}").replace(":8000/", f":{port}/"),
            "SERVER=$!",
            "trap 'kill $SERVER' EXIT",
            f"for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done",
            rest,
        ]
    )
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env = {key: value for key, value in env.items() if not key.startswith(("OTEL_", "OPENAI_"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    done = subprocess.run(["bash", "-c", script], cwd=app, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode != 90, done.stderr[-3000:]
    lines = (app / "spans.jsonl").read_text().splitlines()
    names = [
        span["name"]
        for export in (json.loads(line) for line in lines if line.startswith('{"resourceSpans"'))
        for resource in export["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    assert "assemble_tool_call get_a" in names, (names, done.stderr[-3000:])
    assert any(line.startswith("tool call get_a ") for line in lines)  # the app's own output, between the spans
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]  # the audit's finding
    assert "recorded_rejection\tid_conflict (1)\t1\t1" in done.stdout, done.stdout
