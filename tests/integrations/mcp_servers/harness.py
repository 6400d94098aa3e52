"""Running the MCP test processes: an agent, a stdio server it spawns, a Streamable HTTP server.

Every process runs under ``opentelemetry-instrument`` (or instruments itself in the order
``ETF_TEST_ORDER`` gives, ``setup_order.py``) with its own OTLP/HTTP exporter into one
:class:`~tests.support.otlp_receiver.OtlpReceiver`; the batch processor's delay is short so a
process that dies mid-call has exported what it finished.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BIN = Path(sys.executable).parent
TIMEOUT = 90


def otel_env(endpoint: str, service: str, **extra: str) -> dict[str, str]:
    """A clean environment exporting traces (only) to ``endpoint`` as ``service``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "OPENAI_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        OTEL_SERVICE_NAME=service,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=endpoint,
        OTEL_BSP_SCHEDULE_DELAY="50",
        # Both peers' entry points are named ``mcp``; OpenLLMetry's 0.62.4 breaks ``import mcp`` on
        # mcp 2.x under the launcher, with or without etf-otel (docs/mcp.md), so the launcher skips
        # them. test_mcp_coexistence instruments both peers by hand, in either order.
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp",
    )
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def http_server(endpoint: str, **extra: str) -> Iterator[str]:
    """``tools_server.py http PORT`` under ``opentelemetry-instrument`` (see :func:`run_agent`); yields its URL."""
    port = free_port()
    argv = [str(BIN / "python"), str(HERE / "tools_server.py"), "http", str(port)]
    if not extra.get("ETF_TEST_ORDER"):
        argv.insert(0, str(BIN / "opentelemetry-instrument"))
    env = otel_env(endpoint, "tool-server-http", **extra)
    process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server did not start: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.send_signal(2)  # SIGINT: uvicorn shuts down, the SDK flushes at exit
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


def run_agent(endpoint: str, plan: dict[str, Any], **extra: str) -> list[dict[str, Any]]:
    """``agent.py``, the plan on stdin, under ``opentelemetry-instrument`` (with ``ETF_TEST_ORDER``: ``python``)."""
    argv = [str(BIN / "python"), str(HERE / "agent.py")]
    if not extra.get("ETF_TEST_ORDER"):
        argv.insert(0, str(BIN / "opentelemetry-instrument"))
    done = subprocess.run(
        argv,
        input=json.dumps(plan),
        env=otel_env(endpoint, "agent", **extra),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    """Until ``condition()`` holds (the servers export on their own schedule)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
