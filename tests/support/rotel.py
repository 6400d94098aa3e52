"""``rotel`` (a Rust OpenTelemetry collector from its PyPI wheel) as a real collector in the export path.

The wheel ships the binary inside the package (``rotel/rotel-agent``), not on ``PATH``; there is
no console script. Started in the foreground on 127.0.0.1 with its own pid and log files (the
defaults are shared ``/tmp`` paths), it receives OTLP/gRPC and OTLP/HTTP and forwards everything
to one OTLP/gRPC endpoint. On SIGTERM it flushes its batches before exiting.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

__all__ = ["Rotel", "free_port", "rotel_binary"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the usual small race is acceptable in tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rotel_binary() -> Path | None:
    """The ``rotel-agent`` binary of the installed ``rotel`` package, or ``None``."""
    spec = importlib.util.find_spec("rotel")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "rotel-agent"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Rotel:
    """``rotel-agent start`` forwarding to ``exporter_endpoint`` (``http://127.0.0.1:PORT``, OTLP/gRPC)."""

    def __init__(self, exporter_endpoint: str, workdir: Path, *, startup_timeout: float = 10.0) -> None:
        binary = rotel_binary()
        if binary is None:
            raise RuntimeError("rotel is not installed (pip install rotel)")
        self.grpc_port = free_port()
        self.http_port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "rotel.log"
        argv = [
            str(binary),
            "start",
            "--otlp-grpc-endpoint",
            f"127.0.0.1:{self.grpc_port}",
            "--otlp-http-endpoint",
            f"127.0.0.1:{self.http_port}",
            "--exporter",
            "otlp",
            "--otlp-exporter-endpoint",
            exporter_endpoint,
            "--otlp-exporter-protocol",
            "grpc",
            "--pid-file",
            str(workdir / "rotel.pid"),
            "--log-file",
            str(workdir / "rotel-daemon.log"),
            "--batch-timeout",
            "100ms",
        ]
        env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "ROTEL_"))}
        self._log = open(self.log_path, "wb")  # closed in close()
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + startup_timeout
        while not (_listening(self.grpc_port) and _listening(self.http_port)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"rotel did not start: {self.log()[-2000:]}")
            time.sleep(0.02)

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM (rotel flushes what it holds), wait; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return int(self.process.returncode)

    def close(self) -> None:
        self.stop()
        self._log.close()

    def __enter__(self) -> Rotel:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
