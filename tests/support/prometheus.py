"""A real Prometheus server for tests: Debian's ``/usr/bin/prometheus`` on 127.0.0.1 and a free port.

It scrapes the given targets every second and evaluates the given rule files every second; the
HTTP API is read with the standard library only. The process is owned by the caller: use it as a
context manager (or call :meth:`PrometheusServer.stop`), which terminates, waits and kills if needed.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml

PROMETHEUS = shutil.which("prometheus") or ""
T = TypeVar("T")


def free_port() -> int:
    """An ephemeral port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrometheusError(AssertionError):
    """The API answered with an error, or the server did not become ready in time."""


class PrometheusServer:
    """One Prometheus process with a temporary config, storage and log under ``workdir``."""

    def __init__(
        self,
        workdir: Path,
        *,
        job: str,
        targets: Sequence[str],
        rule_files: Sequence[Path] = (),
        interval: str = "1s",
    ) -> None:
        if not PROMETHEUS:
            raise FileNotFoundError("prometheus not found: apt-get install -y --no-install-recommends prometheus")
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        self.log = workdir / "prometheus.log"
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
        }
        self.config.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.process: subprocess.Popen[bytes] | None = None

    # --- process ---------------------------------------------------------------------------------

    def start(self, ready_timeout: float = 10.0) -> PrometheusServer:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={self.config}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    "--log.level=info",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.wait_for(lambda: self._ready(), ready_timeout, "Prometheus /-/ready")
        return self

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise PrometheusError(f"prometheus exited with {self.process.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # --- HTTP API --------------------------------------------------------------------------------

    def api(self, path: str, **params: str | list[str]) -> Any:
        """GET ``/api/v1/<path>``; returns ``data``, raises :class:`PrometheusError` on an API error."""
        query = urllib.parse.urlencode(params, doseq=True)
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query at now; returns the vector (or raises for a non-vector result)."""
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr!r}: result type {data['resultType']}, not a vector")
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for(self, check: Callable[[], T], timeout: float, what: str, poll: float = 0.25) -> T:
        """Poll ``check`` until it returns something truthy; raise with the log tail on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise PrometheusError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.log_tail()}")
            time.sleep(poll)
