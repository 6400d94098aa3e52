"""``etf-otel audit`` end to end, with real components only, on 127.0.0.1.

(a) ``etf-otel demo`` (a subprocess) exports through the official OTLP exporters (gRPC and
    HTTP/protobuf, chosen by the standard ``OTEL_EXPORTER_OTLP_*`` variables) into a real OTLP
    receiver that writes OTLP JSON lines; ``etf-otel audit`` of that file finds what the audit of
    the demo's own file export (``demo --export``, the official JSON file exporter) finds.
(b) The same with the ``rotel`` collector in the path: demo -> rotel -> receiver -> file -> audit.
(c) Arize Phoenix (marker ``phoenix``; ``scripts/install-phoenix`` first): the spans of one demo
    run, as received, are stored in Phoenix and in a file; ``etf-otel audit --phoenix`` is
    compared with the audit of that file. Phoenix drops span links, which the demo's
    executions (each the root of its own trace) depend on: the test pins exactly that
    difference. Spans exported under an application span reach Phoenix and the file from one
    tracer provider, and the two audits agree finding by finding.

Plus bad input for ``--phoenix``: connection refused, a server answering non-JSON, usage errors.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from etf_otel.audit import AuditReport, SpanData, audit_spans
from etf_otel.audit._sources.otlp_json import iter_spans
from etf_otel.audit._sources.phoenix import PhoenixError, iter_phoenix_spans
from etf_otel.cli import main

from ..support.otlp_receiver import OtlpReceiver
from ..support.phoenix import PhoenixServer, phoenix_executable
from ..support.rotel import Rotel, free_port, rotel_binary

TIMEOUT = 60
TELEMETRY_KINDS = ("missing_span", "malformed_span")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without OpenTelemetry settings, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PHOENIX_"))}
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def etf_otel(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etf_otel", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env if env is not None else clean_env(),
        check=False,
    )


def demo_to(endpoint: str, protocol: str, **extra: str) -> None:
    """``etf-otel demo --otlp`` exporting to ``endpoint`` over OTLP ``protocol`` (the standard variables).

    Without ``--otlp`` the demo ignores those variables (tests/cli/test_demo.py).
    """
    env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol, **extra)
    run = etf_otel("demo", "--otlp", env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "all cases behaved as the rules say" in run.stdout
    assert "Failed to export" not in run.stderr, run.stderr[-2000:]


def audit_json(*args: str) -> tuple[int, dict[str, Any], str]:
    """``etf-otel audit --json ARGS`` in this process (the same ``main`` as the console script)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", "--json", "--no-progress", *args])
    assert code in (0, 1), f"exit {code}: {err.getvalue()}"
    return code, json.loads(out.getvalue()), err.getvalue()


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """What must not depend on the transport: counts per kind and category, spans and traces."""
    return {
        "spans": report["input"]["spans"],
        "traces": report["input"]["traces"],
        "findings": report["findings"],
        "by_kind": {
            entry["kind"]: (entry["count"], entry["traces"], entry["categories"]) for entry in report["by_kind"]
        },
    }


def details(report: dict[str, Any]) -> set[tuple[Any, ...]]:
    """Every finding of every trace, comparable across sources of the same spans."""
    return {
        (trace["trace_id"], f["kind"], f["category"], f["span_id"], f.get("call_id"))
        for trace in report["traces_detail"]
        for f in trace["findings"]
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The audit of the demo's own export through the official OTLP JSON file exporter."""
    path = tmp_path_factory.mktemp("reference") / "demo.jsonl"
    run = etf_otel("demo", "--export", str(path))
    assert run.returncode == 0, run.stderr
    code, report, _ = audit_json(str(path))
    assert code == 1 and report["findings"] > 0  # the demo's rejection and linkage cases are found
    assert not set(summary(report)["by_kind"]) & set(TELEMETRY_KINDS)
    return summary(report)


# --- (a) the official exporters into a real OTLP receiver ------------------------------------------------


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_demo_over_otlp_into_a_receiver(protocol: str, tmp_path: Path, reference: dict[str, Any]) -> None:
    received = tmp_path / "received.jsonl"
    with OtlpReceiver(json_lines_path=received) as receiver:
        endpoint = receiver.http_endpoint if protocol == "http/protobuf" else f"http://{receiver.grpc_endpoint}"
        demo_to(endpoint, protocol)
        assert {span.transport for span in receiver.spans()} == {protocol}
    code, report, err = audit_json(str(received))
    assert (code, err) == (1, "")
    assert summary(report) == reference


# --- (b) with the rotel collector in the path ------------------------------------------------------------


@pytest.mark.skipif(rotel_binary() is None, reason="rotel is not installed (pip install rotel)")
def test_demo_through_rotel(tmp_path: Path, reference: dict[str, Any]) -> None:
    """OTLP/HTTP into rotel, OTLP/gRPC (gzip) out of it: both of rotel's sides in one path."""
    received = tmp_path / "received.jsonl"
    with OtlpReceiver(json_lines_path=received) as receiver:
        with Rotel(f"http://{receiver.grpc_endpoint}", tmp_path / "rotel") as rotel:
            demo_to(rotel.http_endpoint, "http/protobuf")
            assert rotel.stop() == 0, rotel.log()[-2000:]  # SIGTERM flushes rotel's batches
        spans = receiver.spans()
        assert spans and {span.transport for span in spans} == {"grpc"}  # what rotel forwarded
    code, report, err = audit_json(str(received))
    assert (code, err) == (1, ""), rotel.log()[-2000:]
    assert summary(report) == reference


# --- bad input for --phoenix (no Phoenix needed) -----------------------------------------------------------


class _Answer(BaseHTTPRequestHandler):
    body = b"<html><body>not Phoenix</body></html>"
    content_type = "text/html"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[Any]:
    """Start a stdlib HTTP server answering every GET with ``body``; yields a starter."""
    servers: list[ThreadingHTTPServer] = []

    def start(body: bytes, content_type: str = "text/html") -> str:
        handler = type("Handler", (_Answer,), {"body": body, "content_type": content_type})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def one_line_exit_2(*args: str) -> str:
    run = etf_otel("audit", *args)
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert run.stdout == ""
    assert run.stderr.endswith("\n") and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("etf-otel audit: ")
    return run.stderr


def test_phoenix_connection_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    err = one_line_exit_2("--phoenix", url)
    assert "Connection refused" in err and url in err


def test_phoenix_answer_not_json(answering: Any) -> None:
    err = one_line_exit_2("--phoenix", answering(b"<html><body>not Phoenix</body></html>"), "--project", "p")
    assert "not JSON" in err and "/v1/projects/p/spans" in err


def test_phoenix_json_that_is_not_a_span_page(answering: Any) -> None:
    err = one_line_exit_2("--phoenix", answering(b'{"hello": "world"}', "application/json"))
    assert "not a Phoenix span page" in err
    err = one_line_exit_2("--phoenix", answering(b'{"data": [{"name": "x"}], "next_cursor": null}', "application/json"))
    assert "without a context" in err


def test_phoenix_empty_project_is_bad_input(answering: Any) -> None:
    err = one_line_exit_2("--phoenix", answering(b'{"data": [], "next_cursor": null}', "application/json"))
    assert "no spans in Phoenix project 'default'" in err


def test_phoenix_usage_errors(tmp_path: Path) -> None:
    assert "--project needs --phoenix" in one_line_exit_2("--project", "p")
    assert "not both" in one_line_exit_2(str(tmp_path), "--phoenix", "http://127.0.0.1:1")
    assert "not an http:// or https:// URL" in one_line_exit_2("--phoenix", "127.0.0.1:6006")
    assert "give at least one PATH" in one_line_exit_2()


def test_phoenix_no_answer_times_out() -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(PhoenixError, match="no answer in time|timed out"):
            list(iter_phoenix_spans(url, timeout=0.3))


# --- (c) Arize Phoenix ------------------------------------------------------------------------------------

phoenix_mark = pytest.mark.phoenix


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    if phoenix_executable() is None:
        reason = "Arize Phoenix is not installed: run scripts/install-phoenix"
        if os.environ.get("ETF_REQUIRE_PHOENIX"):
            pytest.fail(reason)
        pytest.skip(reason)
    with PhoenixServer(tmp_path_factory.mktemp("phoenix")) as server:
        yield server


def strip_links(spans: Iterator[SpanData]) -> Iterator[SpanData]:
    for span in spans:
        span.links = []
        yield span


@phoenix_mark
def test_demo_into_phoenix_matches_the_file_audit(tmp_path: Path, phoenix: PhoenixServer) -> None:
    project = f"etf-demo-{uuid.uuid4().hex[:8]}"
    received = tmp_path / "received.jsonl"
    with OtlpReceiver(json_lines_path=received) as receiver:
        demo_to(
            receiver.http_endpoint,
            "http/protobuf",
            OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        )
        requests = receiver.trace_requests
        spans = sum(len(s.spans) for r in requests for rs in r.resource_spans for s in rs.scope_spans)
    # Phoenix gets exactly what the receiver got, as the official HTTP exporter encoded it.
    for request in requests:
        phoenix.post_traces(request.SerializeToString())
    phoenix.wait_for_spans(project, spans)

    file_code, from_file, _ = audit_json(str(received))
    code, from_phoenix, err = audit_json("--phoenix", phoenix.url, "--project", project)
    assert (file_code, code) == (1, 1)
    assert (from_phoenix["input"]["spans"], from_phoenix["input"]["traces"]) == (spans, from_file["input"]["traces"])

    # Everything Phoenix keeps survives the round trip: its audit is, finding by finding, the audit
    # of the same spans without their links.
    without_links = audit_spans(strip_links(iter_spans([str(received)]))).to_dict()
    assert details(from_phoenix) == details(without_links)
    assert summary(from_phoenix)["by_kind"] == summary(without_links)["by_kind"]

    # The demo runs every case under one agent span, so each execution shares its proposal's
    # trace: the audit correlates by trace and call id when the link is gone, and Phoenix's
    # audit equals the file audit finding by finding.
    assert details(from_phoenix) == details(from_file)
    assert summary(from_phoenix)["by_kind"] == summary(from_file)["by_kind"]

    # --html reads the project a second time: the page draws the same traces, spans and findings.
    pages = {}
    for source, args in (("file", [str(received)]), ("phoenix", ["--phoenix", phoenix.url, "--project", project])):
        audit_json(*args, "--html", str(tmp_path / f"{source}.html"))
        page = (tmp_path / f"{source}.html").read_text(encoding="utf-8")
        pages[source] = sorted(re.findall(r'data-(?:trace|role|finding)="([^"]+)"', page))
    assert pages["phoenix"] == pages["file"] and pages["file"]


@phoenix_mark
def test_application_spans_into_phoenix_and_a_file_agree(tmp_path: Path, phoenix: PhoenixServer) -> None:
    """One tracer provider exports to a file and to Phoenix (official exporters): same findings."""
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from etf_otel.core._linkage import Conversation
    from etf_otel.instrumentation import Instrumentation
    from etf_otel.testing.chat import case_stream

    project = f"etf-app-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "app.jsonl"
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(path))))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces", timeout=5)))
    meters = MeterProvider()
    tracer = provider.get_tracer("agent")
    inst = Instrumentation(provider, meters)

    def consume(stream: Any) -> None:
        for _ in stream:
            pass

    call_a = {"id": "call-a", "function": {"name": "read_page", "arguments": '{"page":1}'}}
    with tracer.start_as_current_span("clean turn"):
        consume(inst.stream(iter(case_stream(None))))
        inst.host(lambda c: "ok")(call_a)
    with tracer.start_as_current_span("duplicate and orphan"):
        consume(inst.stream(iter(case_stream(None))))
        host = inst.host(lambda c: "ok")
        host(call_a)
        host(call_a)
        inst.host(lambda c: "ok", record_unverified_ids=True)({**call_a, "id": "call-unknown"})
    with tracer.start_as_current_span("unanswered"):
        conversation = Conversation()
        consume(inst.stream(iter(case_stream(None)), conversation=conversation))
        inst.end_conversation(conversation)
    provider.shutdown()
    meters.shutdown()

    spans = sum(1 for _ in iter_spans([str(path)]))
    phoenix.wait_for_spans(project, spans)
    file_code, from_file, _ = audit_json(str(path))
    code, from_phoenix, err = audit_json("--phoenix", phoenix.url, "--project", project)
    assert (file_code, code) == (1, 1)
    assert summary(from_phoenix) == summary(from_file)
    assert details(from_phoenix) == details(from_file)
    assert set(summary(from_file)["by_kind"]) == {"duplicate_execution", "orphaned_execution", "unanswered_call"}
    assert "links" in err  # orphaned_execution was found: the note tells why Phoenix may differ


@phoenix_mark
def test_phoenix_pages_and_unknown_project(phoenix: PhoenixServer, tmp_path: Path) -> None:
    project = f"etf-pages-{uuid.uuid4().hex[:8]}"
    with OtlpReceiver() as receiver:
        demo_to(
            receiver.http_endpoint, "http/protobuf", OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}"
        )
        requests = receiver.trace_requests
    for request in requests:
        phoenix.post_traces(request.SerializeToString())
    total = sum(len(s.spans) for r in requests for rs in r.resource_spans for s in rs.scope_spans)
    phoenix.wait_for_spans(project, total)
    one_page = AuditReport()
    audit_spans(iter_phoenix_spans(phoenix.url, project), report=one_page)
    pages = audit_spans(iter_phoenix_spans(phoenix.url, project, page_size=7))  # several cursors
    assert pages.to_dict()["by_kind"] == one_page.to_dict()["by_kind"]
    assert len({span.span_id for span in iter_phoenix_spans(phoenix.url, project, page_size=7)}) == total

    err = one_line_exit_2("--phoenix", phoenix.url, "--project", "no-such-project")
    assert "HTTP 404" in err
