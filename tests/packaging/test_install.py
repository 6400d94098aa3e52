"""What an application gets when it adds etf-otel to its requirements, installed for real.

Each test builds a fresh venv and installs the project's wheel from PyPI's dependencies, so
that what pyproject.toml declares (not what the development venv happens to hold) is what
runs. Two promises are checked:

* the library alone (no extra) brings the OpenTelemetry API, its instrumentor base and
  wrapt, never an SDK, an exporter, pydantic, rich or an SSE parser; every library layer
  imports without them, and ``etf-otel`` names the ``cli`` extra instead of crashing;
* ``etf-otel[openai]`` fits beside an application that locks the oldest OpenTelemetry API
  and SDK (and wrapt) the declared floors allow: pip keeps the application's versions, and a streamed
  tool call through the real ``openai`` client is recorded by the application's own SDK.

They need PyPI (pip's cache keeps them to a minute or so each). Under ``CI`` or
``ETF_REQUIRE_PYPI`` (scripts/test sets it) an unreachable PyPI fails them; elsewhere it
skips them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LIBRARY_MODULES = [
    "etf_otel",
    "etf_otel.core",
    "etf_otel.protocols",
    "etf_otel.recordings",
    "etf_otel.instrumentation",
    "etf_otel.audit",
    "etf_otel.errors",
    "etf_otel.attributes",
    "etf_otel.integrations.openai",
    "etf_otel.integrations.anthropic",
    "etf_otel.integrations.mcp",
    "etf_otel.integrations.langchain",
    "etf_otel.testing",
]

NOT_IN_THE_BASE_INSTALL = re.compile(
    r"opentelemetry-sdk|opentelemetry-exporter-.*|opentelemetry-proto|grpcio|protobuf|pydantic|pydantic-core|rich"
    r"|sseclient-py|openai|anthropic|mcp|langchain-.*|chdb|clickhouse-connect"
)

CLI_EXTRA_LINE = "etf-otel: the command line needs the cli extra: pip install 'etf-otel[cli]'"

# The application's own code: its SDK, an in-memory exporter, the instrumentor and one streamed
# tool call against the scripted server. Prints the finished spans as JSON.
APPLICATION = """
import json

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from etf_otel.integrations.openai import instrument_openai
from etf_otel.testing import DONE, LocalChatServer, Script
from etf_otel.testing.chat import chunk

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
instrument_openai(tracer_provider=provider)

first = {"index": 0, "id": "call-a", "type": "function", "function": {"name": "read_page", "arguments": '{"page":'}}
rest = {"index": 0, "function": {"arguments": "1}"}}
with LocalChatServer() as server:
    events = [chunk(tool_calls=[first]), chunk(tool_calls=[rest]), chunk(finish_reason="tool_calls"), DONE]
    server.enqueue(Script(events=events))
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "read"}], stream=True)
    deltas = [c.choices[0].delta.tool_calls[0].function for c in stream if c.choices[0].delta.tool_calls]
    arguments = "".join(delta.arguments or "" for delta in deltas)
assert arguments == '{"page":1}', arguments
print(json.dumps([{"name": s.name, "attributes": dict(s.attributes)} for s in exporter.get_finished_spans()]))
"""


@pytest.fixture(scope="module")
def wheel(pypi: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project as pip would install it from a clone, built once."""
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT)], out)
    (built,) = out.glob("etf_otel-*.whl")
    return built


def run(command: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs outside this checkout: no PYTHONPATH and a cwd that does not shadow the installed package."""
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def installed(bin_dir: Path) -> dict[str, str]:
    """Normalized distribution name -> version, as ``pip list`` reports the venv."""
    listing = run([str(bin_dir / "python"), "-m", "pip", "list", "--format=json"], bin_dir).stdout
    return {re.sub(r"[-_.]+", "-", d["name"]).lower(): d["version"] for d in json.loads(listing)}


def declared_floor(name: str) -> str:
    """The ``name>=X`` floor of the base dependencies, as an exact release (``1.30`` -> ``1.30.0``)."""
    match = re.search(rf'"{re.escape(name)}>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert match, f"pyproject.toml declares no floor for {name}"
    parts = match.group(1).split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def pinned(name: str) -> str:
    """The version constraints.txt pins ``name`` to."""
    match = re.search(rf"^{re.escape(name)}==(\S+)$", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    assert match, f"constraints.txt pins no {name}"
    return match.group(1)


def test_the_wheel_ships_the_type_marker_and_the_license(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "etf_otel/py.typed" in names
    (license_file,) = (name for name in names if name.endswith(".dist-info/licenses/LICENSE"))
    assert "Apache License" in zipfile.ZipFile(wheel).read(license_file).decode()
    metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()


def test_the_default_wheel_is_pure_python(wheel: Path) -> None:
    """The mypyc hook is off unless asked for (docs/performance.md): a plain build compiles nothing."""
    assert wheel.name.endswith("-py3-none-any.whl")
    assert [name for name in zipfile.ZipFile(wheel).namelist() if name.endswith((".so", ".pyd", ".c"))] == []


def test_the_compiled_build_uses_the_mypy_the_checks_use() -> None:
    hook = re.search(r'"mypy==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert hook, "pyproject.toml's mypyc hook pins no mypy"
    assert hook.group(1) == pinned("mypy")


def test_the_library_alone_brings_no_sdk_exporter_or_cli_package(wheel: Path, venv: Path) -> None:
    python = str(venv / "python")
    run([python, "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"), str(wheel)], venv)

    versions = installed(venv)
    assert {"etf-otel", "opentelemetry-api", "opentelemetry-instrumentation", "wrapt"} <= versions.keys()
    assert sorted(name for name in versions if NOT_IN_THE_BASE_INSTALL.fullmatch(name)) == []

    imports = f"import importlib\nfor name in {LIBRARY_MODULES!r}:\n    importlib.import_module(name)\n"
    run([python, "-c", imports], venv)

    for command in ([str(venv / "etf-otel"), "replay", "reply.sse"], [python, "-m", "etf_otel", "--help"]):
        done = run(command, venv, check=False)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", CLI_EXTRA_LINE + "\n"), command


def test_the_openai_extra_keeps_the_applications_oldest_opentelemetry(wheel: Path, venv: Path, tmp_path: Path) -> None:
    """As a lock file would: the application's pins are constraints pip must satisfy, not hints."""
    api = sdk = declared_floor("opentelemetry-api")  # the SDK is released with its API: the oldest pair
    lock = tmp_path / "app-constraints.txt"
    wrapt = declared_floor("wrapt")
    lock.write_text(f"opentelemetry-api=={api}\nopentelemetry-sdk=={sdk}\nwrapt=={wrapt}\nopenai=={pinned('openai')}\n")
    python = str(venv / "python")
    run([python, "-m", "pip", "install", "--quiet", "-c", str(lock), "opentelemetry-sdk", f"{wheel}[openai]"], venv)
    run([python, "-m", "pip", "check"], venv)

    versions = installed(venv)
    assert (versions["opentelemetry-api"], versions["opentelemetry-sdk"], versions["wrapt"]) == (api, sdk, wrapt)
    assert "opentelemetry-exporter-otlp-json-file" not in versions

    (tmp_path / "app.py").write_text(APPLICATION)
    spans = json.loads(run([python, str(tmp_path / "app.py")], tmp_path).stdout)
    names = sorted(span["name"] for span in spans)
    assert names == ["assemble_response", "assemble_tool_call read_page"], spans
    (call,) = (span for span in spans if span["name"] == "assemble_tool_call read_page")
    assert call["attributes"]["gen_ai.tool.call.id"] == "call-a"
