"""Arize Phoenix (a real trace backend) for end-to-end tests, from its own virtual environment.

``scripts/install-phoenix`` installs it into ``.phoenix-venv`` (or ``$ETF_PHOENIX_VENV``): Phoenix
brings its own OpenTelemetry versions, which must not meet the project's. :class:`PhoenixServer`
starts ``phoenix serve`` offline on 127.0.0.1 (telemetry, external resources and the agent
assistant off, as REAL-COMPONENTS.md says), logs to a file (migrations print thousands of
lines), waits for ``/healthz`` and terminates it on :meth:`close`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from .rotel import free_port

__all__ = ["PhoenixServer", "phoenix_executable"]

ROOT = Path(__file__).resolve().parents[2]


def phoenix_executable() -> Path | None:
    """``phoenix`` of the Phoenix venv, or ``None`` when ``scripts/install-phoenix`` has not run."""
    venv = Path(os.environ.get("ETF_PHOENIX_VENV") or ROOT / ".phoenix-venv")
    executable = venv / "bin" / "phoenix"
    return executable if executable.is_file() and os.access(executable, os.X_OK) else None


class PhoenixServer:
    """``phoenix serve`` with its data in ``workdir``; :attr:`url` is ``http://127.0.0.1:PORT``."""

    def __init__(self, workdir: Path, *, startup_timeout: float = 60.0) -> None:
        executable = phoenix_executable()
        if executable is None:
            raise RuntimeError("Arize Phoenix is not installed: run scripts/install-phoenix")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.grpc_port = free_port()
        self.log_path = workdir / "phoenix.log"
        env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PHOENIX_"))}
        env.update(
            {
                "PHOENIX_WORKING_DIR": str(workdir),
                "PHOENIX_HOST": "127.0.0.1",
                "PHOENIX_PORT": str(self.port),
                "PHOENIX_GRPC_PORT": str(self.grpc_port),
                "PHOENIX_TELEMETRY_ENABLED": "false",
                "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
                "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            }
        )
        self._log = open(self.log_path, "wb")  # closed in close()
        self.process = subprocess.Popen(
            [str(executable), "serve"], stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=workdir
        )
        self.started = time.monotonic()
        deadline = self.started + startup_timeout
        while not self._healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                status = self.process.poll()
                self.close()
                raise RuntimeError(
                    f"phoenix serve {'exited ' + str(status) if status is not None else 'not healthy in time'}; "
                    f"log tail: {self.log()[-1500:]}"
                )
            time.sleep(0.2)
        self.ready_after = time.monotonic() - self.started

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as answer:
                return int(answer.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def post_traces(self, body: bytes) -> None:
        """POST one serialized ``ExportTraceServiceRequest`` (OTLP/HTTP protobuf) to ``/v1/traces``."""
        request = urllib.request.Request(
            f"{self.url}/v1/traces",
            data=body,
            headers={"Content-Type": "application/x-protobuf"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert int(answer.status) == 200, answer.status

    def get(self, path: str, **query: Any) -> Any:
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.loads(answer.read())

    def span_count(self, project: str) -> int:
        """Spans stored in ``project`` (0 while it does not exist)."""
        total, cursor = 0, None
        while True:
            query: dict[str, Any] = {"limit": 1000}
            if cursor:
                query["cursor"] = cursor
            try:
                page = self.get(f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans", **query)
            except urllib.error.HTTPError as error:
                if error.code == 404:
                    return 0
                raise
            total += len(page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return total

    def wait_for_spans(self, project: str, n: int, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while (count := self.span_count(project)) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"Phoenix project {project!r} has {count} spans after {timeout}s, expected {n}")
            time.sleep(0.1)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()

    def __enter__(self) -> PhoenixServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
