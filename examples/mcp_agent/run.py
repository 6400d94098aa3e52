"""Run the MCP example end to end: an agent, two MCP servers, one receiver, then ``etf-otel audit``.

``python examples/mcp_agent/run.py [--duplicate] [--out FILE]``

1. A local Chat Completions server (etf-otel's, the one ``etf-otel demo`` uses) streams a response
   that proposes two tool calls, for the real ``openai`` client; no API key needed.
2. The Streamable HTTP server (``server.py http PORT``) starts on 127.0.0.1; the agent starts the
   stdio one itself. Each of the three processes runs under ``opentelemetry-instrument`` with its
   own OTLP/HTTP exporter, all sending to one receiver.
3. The receiver is the smallest OTLP/HTTP trace endpoint: it decodes each protobuf request with the
   official ``opentelemetry-proto`` messages and appends it to ``--out`` as one OTLP/JSON line (hex
   ids), the format of the OTLP JSON file exporter. In production that is your collector's job.
4. ``etf-otel audit`` reads the file; its exit status is this script's.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from etf_otel.testing import DONE, LocalChatServer, Script
from etf_otel.testing.chat import chunk

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(value: Any) -> Any:
    """OTLP/JSON writes ids as hex, where protobuf's JSON mapping writes bytes as base64."""
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex() if key in ID_KEYS and isinstance(item, str) else _hex_ids(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value


class Receiver(ThreadingHTTPServer):
    """``POST /v1/traces`` (protobuf) on 127.0.0.1, written to ``path`` as OTLP/JSON lines (this run's only)."""

    def __init__(self, path: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.path = path
        path.write_text("", encoding="utf-8")  # a path given twice holds the last run, not both
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        line = json.dumps(_hex_ids(json_format.MessageToDict(request, use_integers_for_enums=True)))
        with self.server.lock, self.server.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _script() -> list[Script]:
    calls = [
        {"index": 0, "id": "call_read", "type": "function", "function": {"name": "read_page", "arguments": ""}},
        {"index": 0, "id": None, "function": {"arguments": '{"page": 1}'}},
        {"index": 1, "id": "call_count", "type": "function", "function": {"name": "word_count", "arguments": ""}},
        {"index": 1, "function": {"arguments": '{"text": "Revenue grew 12% in the third quarter."}'}},
    ]
    proposal = [chunk(tool_calls=[call]) for call in calls] + [chunk(finish_reason="tool_calls"), DONE]
    answer = [chunk(content="Revenue grew 12%; page 1 has 7 words."), chunk(finish_reason="stop"), DONE]
    return [Script(events=proposal), Script(events=answer)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit("the Streamable HTTP server did not start")


def _environment(endpoint: str, service: str, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "OPENAI_"))}
    if "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS" in os.environ:  # the caller's choice holds for every process
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = os.environ["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"]
    env.update(
        OTEL_SERVICE_NAME=service,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=endpoint,
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        **extra,
    )
    return env


def run(out: Path, duplicate: bool) -> int:
    instrument = [str(BIN / "opentelemetry-instrument"), str(BIN / "python")]
    receiver = Receiver(out)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    port = _free_port()
    with LocalChatServer() as llm:
        llm.enqueue(*_script())
        server = subprocess.Popen(
            [*instrument, str(HERE / "server.py"), "http", str(port)],
            env=_environment(receiver.endpoint, "report-tools-http"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_for_port(port, server)
            agent_env = _environment(
                receiver.endpoint,
                "mcp-agent",
                OPENAI_BASE_URL=llm.base_url,
                OPENAI_API_KEY="not-needed",
                MCP_HTTP_URL=f"http://127.0.0.1:{port}/mcp",
                MCP_DUPLICATE="1" if duplicate else "0",
            )
            subprocess.run([*instrument, str(HERE / "agent.py")], env=agent_env, check=True, timeout=120)
        finally:
            server.send_signal(signal.SIGINT)  # uvicorn stops; the SDK exports what is left at exit
            server.wait(timeout=30)
    receiver.shutdown()
    receiver.server_close()
    audit = subprocess.run([sys.executable, "-m", "etf_otel", "audit", str(out)], check=False)
    return audit.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duplicate", action="store_true", help="run read_page on both servers")
    parser.add_argument("--out", type=Path, help="the OTLP/JSON lines file (default: a new temporary file)")
    options = parser.parse_args()
    out = options.out or Path(tempfile.mkdtemp(prefix="etf-mcp-")) / "traces.jsonl"
    print(f"traces: {out}")
    raise SystemExit(run(out, options.duplicate))


if __name__ == "__main__":
    main()
