"""The audit across the MCP process boundary: real ``mcp`` clients and servers, real SDK spans.

The ``mcp`` SDK traces a ``tools/call`` twice: a CLIENT span in the agent and, in the server, a
SERVER span with ``gen_ai.operation.name = execute_tool``, child of the CLIENT span through
``_meta``. Our instrumentation enriches both (docs/mcp.md); here that enrichment is done by hand,
exactly as the contract fixes it (:class:`ClientEnrichment`, :func:`enrich_server_span`), so these
tests judge the audit alone. Every span is exported by the official OTLP JSON file exporter, one
file per "process", and every case is audited by the Python engine and by the SQL in embedded chDB,
which must agree.

Run as ``python -m tests.audit.test_audit_mcp serve OUT SERVICE``, this module is a stdio MCP tool
server of its own process, exporting to ``OUT``.
"""

from __future__ import annotations

import contextvars
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import Context as ToolContext
from mcp.server.mcpserver import MCPServer
from mcp.shared import _otel as sdk_otel
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from etf_otel import attributes as A
from etf_otel.audit import AuditReport
from etf_otel.audit._pipeline import sql_audit
from etf_otel.audit._report import INFORMATIONAL
from etf_otel.audit._sources.otlp_json import iter_spans
from etf_otel.audit._sources.sql import ChdbEngine
from etf_otel.cli._audit import run_audit
from etf_otel.core._linkage import Conversation
from etf_otel.testing.chat import chunk, finished, fragment

from ..conftest import Process
from .test_audit import consume
from .test_audit_sql import finding_set, python_report, summary

REPO = Path(__file__).resolve().parents[2]
MAX_ID = 256
"""The server enrichment's bound on a ``_meta`` call id (longer: not recorded)."""
ARGS = {"page": 1}

_client_enrichment: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("client", default=None)
_server_provider: contextvars.ContextVar[TracerProvider | None] = contextvars.ContextVar("server", default=None)


# --- the enrichment, by hand, as the contract fixes it --------------------------------------------


class ClientEnrichment(SpanProcessor):
    """Our client instrumentation's attributes and link on the SDK's ``MCP send tools/call`` span."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        wanted = _client_enrichment.get()
        if wanted is None or span.attributes.get(A.MCP_METHOD_NAME) != A.MCP_METHOD_TOOLS_CALL:
            return
        span.set_attribute(A.ETF_MCP_MATCH, wanted["match"])
        if wanted.get("call_id") is not None:
            span.set_attribute(A.GEN_AI_TOOL_CALL_ID, wanted["call_id"])
            span.set_attribute(A.GEN_AI_TOOL_NAME, wanted["tool"])
        if wanted.get("proposal") is not None:
            span.add_link(wanted["proposal"])


def enrich_server_span(meta: dict[str, Any] | None) -> None:
    """Our server instrumentation on the SDK's SERVER span: the call id and the link from ``_meta``,
    or why they were not used (``etf.mcp.meta_rejected``)."""
    span = trace.get_current_span()
    meta = meta or {}
    span.set_attribute(A.GEN_AI_TOOL_TYPE, A.TOOL_TYPE_FUNCTION)
    rejected: list[str] = []
    if A.MCP_META_TOOL_CALL_ID in meta:
        call_id = meta[A.MCP_META_TOOL_CALL_ID]
        if not isinstance(call_id, str):
            rejected.append("call_id_not_string")
        elif not call_id:
            rejected.append("call_id_empty")
        elif len(call_id) > MAX_ID:
            rejected.append("call_id_too_long")
        elif not call_id.isprintable():
            rejected.append("call_id_not_printable")
        else:
            span.set_attribute(A.GEN_AI_TOOL_CALL_ID, call_id)
            span.set_attribute(A.ETF_TOOL_CALL_ID_SOURCE, A.TOOL_CALL_ID_SOURCE_MCP_META)
    if A.MCP_META_PROPOSAL in meta:
        extracted = TraceContextTextMapPropagator().extract({"traceparent": meta[A.MCP_META_PROPOSAL]})
        context = trace.get_current_span(extracted).get_span_context()
        if context.is_valid:
            span.add_link(context)
        else:
            rejected.append("proposal_unparsed")
    if rejected:
        span.set_attribute(A.ETF_MCP_META_REJECTED, rejected)


def tool_server(name: str, *, enriched: bool = True) -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def read_page(page: int, ctx: ToolContext) -> str:
        if enriched:
            enrich_server_span(ctx.request_context.meta)
        return f"page {page}"

    @server.tool()
    def broken(page: int, ctx: ToolContext) -> str:
        if enriched:
            enrich_server_span(ctx.request_context.meta)
        raise ValueError("tool down")

    return server


class RoutingTracer:
    """The SDK's module tracer, sending CLIENT spans to the agent's provider and SERVER spans to the
    provider of the in-memory server being called: each side exports to its own file, as two
    processes would, without a global provider."""

    def __init__(self, agent: TracerProvider) -> None:
        self.agent = agent.get_tracer("mcp-python-sdk")

    def start_as_current_span(self, name: str, *, kind: SpanKind, **options: Any) -> Any:
        server = _server_provider.get()
        if kind is SpanKind.SERVER and server is not None:
            return server.get_tracer("mcp-python-sdk").start_as_current_span(name, kind=kind, **options)
        return self.agent.start_as_current_span(name, kind=kind, **options)


def traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-01"


# --- one agent and its tool servers ---------------------------------------------------------------


class World:
    """An instrumented agent (proposals by the real instrumentation) and in-memory MCP tool servers."""

    def __init__(self, process: Callable[..., Process], monkeypatch: pytest.MonkeyPatch) -> None:
        self.process = process
        self.agent = process("agent.jsonl", "agent")
        self.memory = InMemorySpanExporter()
        self.agent.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.agent.provider.add_span_processor(ClientEnrichment())
        self.inst = self.agent.instrumentation()
        self.servers: dict[str, tuple[MCPServer, Process]] = {}
        monkeypatch.setattr(sdk_otel, "_tracer", RoutingTracer(self.agent.provider))

    def server(self, name: str, *, enriched: bool = True) -> str:
        self.servers[name] = (tool_server(name, enriched=enriched), self.process(f"{name}.jsonl", name))
        return name

    def propose(
        self, *call_ids: str, conversation: Conversation | None = None, answered: list[str] | None = None
    ) -> None:
        chunks = [chunk(fragment(index, call_id, "read_page", '{"page":1}')) for index, call_id in enumerate(call_ids)]
        consume(self.inst.stream(iter(finished(*chunks)), conversation=conversation, tool_message_ids=answered))

    def proposal(self, call_id: str) -> SpanContext:
        spans = [
            span
            for span in self.memory.get_finished_spans()
            if span.name.startswith(A.SPAN_ASSEMBLE_TOOL_CALL)
            and (span.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID) == call_id
        ]
        assert spans[-1].context is not None
        return spans[-1].context

    def call(
        self,
        server: str,
        call_id: str | None = None,
        *,
        match: str | None = "explicit",
        meta_id: str | None = None,
        link: bool = True,
        tool: str = "read_page",
    ) -> None:
        """``call_tool`` on ``server``: ``match`` is the client enrichment (``None``: not instrumented),
        ``meta_id`` the id sent in ``_meta`` (the call id unless given)."""
        proposal = self.proposal(call_id) if call_id is not None and link else None
        meta: dict[str, Any] = {}
        sent = meta_id if meta_id is not None else call_id if match in ("explicit", "unique") else None
        if sent is not None:
            meta[A.MCP_META_TOOL_CALL_ID] = sent
        if proposal is not None and match in ("explicit", "unique"):
            meta[A.MCP_META_PROPOSAL] = traceparent(proposal)
        enrichment = None
        if match is not None:
            matched = match in ("explicit", "unique")
            enrichment = {
                "match": match,
                "call_id": call_id if matched else None,
                "tool": tool,
                "proposal": proposal if matched else None,
            }
        mcp_server, host = self.servers[server]

        async def run() -> None:
            async with Client(mcp_server, mode="legacy") as client:
                await client.call_tool(tool, ARGS, meta=meta or None)

        tokens = (_client_enrichment.set(enrichment), _server_provider.set(host.provider))
        try:
            anyio.run(run)
        finally:
            _client_enrichment.reset(tokens[0])
            _server_provider.reset(tokens[1])

    def paths(self) -> list[Path]:
        self.agent.close()
        for _, host in self.servers.values():
            host.close()
        return [self.agent.path, *(host.path for _, host in self.servers.values())]


@pytest.fixture
def world(process: Callable[..., Process], monkeypatch: pytest.MonkeyPatch) -> World:
    return World(process, monkeypatch)


@pytest.fixture
def audited() -> Callable[[list[Path]], AuditReport]:
    """The Python audit of the files, checked against the SQL audit of the same files in chDB."""
    pytest.importorskip("chdb")

    def run(paths: list[Path]) -> AuditReport:
        expected = python_report(paths)
        engine = ChdbEngine()  # one embedded chDB at a time: closed before anything else opens one
        try:
            engine.load(iter_spans([str(path) for path in paths]))
            got = sql_audit(engine)
        finally:
            engine.close()
        assert finding_set(got) == finding_set(expected)
        assert summary(got) == summary(expected)
        return expected

    return run


def found(report: AuditReport) -> list[tuple[str, str | None, str | None]]:
    """(kind, call id, detail) of every finding, informational ones included, sorted."""
    data = report.to_dict()
    listed = sorted(
        (
            (finding["kind"], finding.get("call_id"), finding.get("detail"))
            for entry in data["traces_detail"]
            for finding in entry["findings"]
        ),
        key=lambda item: tuple(part or "" for part in item),
    )
    counts = {entry["kind"]: entry["count"] for entry in data["by_kind"]}
    informational = sorted(kind.value for kind in INFORMATIONAL if kind.value in counts)
    assert sum(counts.values()) - sum(counts[kind] for kind in informational) == len(listed)
    return listed + [(kind, None, None) for kind in informational for _ in range(counts[kind])]


def server_spans(path: Path) -> list[dict[str, Any]]:
    return [
        span
        for line in path.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        if span["name"].startswith("tools/call")
    ]


# --- the cases ------------------------------------------------------------------------------------


def test_a_remote_execution_is_counted_once_and_linked(world: World, audited: Any) -> None:
    server = world.server("tool-server")
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a")
        world.call(server, "call-a")
    paths = world.paths()
    (span,) = server_spans(paths[1])
    assert span["kind"] == 2 and span["links"]  # the SDK's SERVER span, enriched, in its own file
    report = audited(paths)
    assert found(report) == [] and report.traces == 1


def test_duplicate_by_two_servers(world: World, audited: Any) -> None:
    first, second = world.server("server-a"), world.server("server-b")
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a")
        world.call(first, "call-a")
        world.call(second, "call-a")
    paths = world.paths()
    report = audited(paths)
    assert found(report) == [("duplicate_execution", "call-a", "2 executions")]
    (finding,) = next(iter(report.details.values()))
    assert finding.span_id == server_spans(paths[2])[0]["spanId"]  # the second server's execution


def test_orphaned_execution_of_an_id_never_proposed(world: World, audited: Any) -> None:
    server = world.server("tool-server")
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a")
        world.call(server, "call-a")
        world.call(server, None, match="unmatched", meta_id="call-zzz")  # an id nobody proposed, by hand
        world.call(server, None, match="ambiguous")  # two open proposals fitted: no id was sent
    report = audited(world.paths())
    assert found(report) == [
        ("orphaned_execution", "call-zzz", None),
        ("unidentified_execution", None, None),  # no id: unjudged, never an orphan
    ]


def test_unanswered_proposal_never_executed(world: World, audited: Any) -> None:
    server = world.server("tool-server")
    conversation = Conversation()
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a", "call-b", conversation=conversation)
        world.call(server, "call-a")
    with world.agent.tracer.start_as_current_span("next turn"):  # answers call-a only
        world.propose("call-c", conversation=conversation, answered=["call-a"])
    report = audited(world.paths())
    assert found(report) == [("unanswered_call", "call-b", "recorded by the instrumentation"), ("unjudged", None, None)]


def test_client_only_trace_is_judged_from_the_client_span_once(world: World, audited: Any) -> None:
    """A server without tracing: the CLIENT spans are the executions, each counted once."""
    server = world.server("untraced")
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a", "call-b")
        world.call(server, "call-a")
        world.call(server, "call-a")
        world.call(server, "call-b", tool="broken")
    paths = world.paths()
    paths[1].unlink()  # the server's spans never reach the audit
    report = audited(paths[:1])
    # call-b's failure is a tool result (isError), not a JSON-RPC error: the CLIENT span cannot tell.
    assert found(report) == [("duplicate_execution", "call-a", "2 executions")]


def test_server_without_enrichment_inherits_the_client_call_id(world: World, audited: Any) -> None:
    server = world.server("sdk-only", enriched=False)
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a", "call-b")
        world.call(server, "call-a", link=False)  # by id alone, as when links are lost (Phoenix)
        world.call(server, "call-b", tool="broken")
    paths = world.paths()
    assert all(A.GEN_AI_TOOL_CALL_ID not in json.dumps(span) for span in server_spans(paths[1]))
    report = audited(paths)
    # call-b ran once, on the server, and failed there (SERVER span error.type tool_error).
    assert found(report) == [("execution_without_result", "call-b", "error.type tool_error")]


def test_proposal_in_another_trace(world: World, audited: Any) -> None:
    """No application span: the proposal is a trace of its own, the call another; the link joins them."""
    plain, enriched = world.server("sdk-only", enriched=False), world.server("tool-server")
    world.propose("call-a", "call-b")
    world.call(plain, "call-a")
    world.call(enriched, "call-b")
    world.call(enriched, "call-b")
    report = audited(world.paths())
    assert found(report) == [("duplicate_execution", "call-b", "2 executions")]


def test_malformed_and_oversized_ids_from_meta(world: World, audited: Any) -> None:
    server = world.server("tool-server")
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a", "call-b")
        # Oversized and unprintable ids are not recorded by the server: the client's id stands.
        world.call(server, "call-a", meta_id="x" * (MAX_ID + 1))
        world.call(server, "call-b", meta_id="call-b\x00")
        # The client sent no id; hand-written _meta: one the server rejects, one it records as is.
        world.call(server, None, match="unmatched", meta_id="z" * (MAX_ID + 1))
        world.call(server, None, match="unmatched", meta_id="y" * MAX_ID)
    paths = world.paths()
    assert "z" * MAX_ID not in paths[1].read_text()  # never recorded, not even in the rejection
    report = audited(paths)
    assert found(report) == [
        ("orphaned_execution", "y" * MAX_ID, None),
        ("unidentified_execution", None, None),  # the rejected id was never recorded: no id, unjudged
    ]


def test_server_id_contradicting_its_client_span(world: World, audited: Any) -> None:
    server = world.server("tool-server")
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a", "call-b")
        world.call(server, "call-a", meta_id="call-b")  # rewritten between client and server
    report = audited(world.paths())
    assert found(report) == [
        ("malformed_span", "call-b", "gen_ai.tool.call.id differs from its tools/call CLIENT span's"),
        ("unjudged", None, None),
    ]


def test_client_span_matched_without_a_call_id_is_malformed(world: World, audited: Any) -> None:
    server = world.server("tool-server")
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a")
        world.call(server, None, match="explicit")  # says it matched, names nothing
    report = audited(world.paths())
    assert found(report) == [
        ("malformed_span", None, "missing gen_ai.tool.call.id"),
        ("unidentified_execution", None, None),
        ("unjudged", None, None),
    ]


def test_nothing_crosses_when_the_instrumentation_is_disabled(
    world: World, audited: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = world.server("tool-server")
    monkeypatch.setenv(A.ENV_DISABLED_INSTRUMENTATIONS, "etf_otel")
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a")
        world.call(server, None, match=None)
    paths = world.paths()
    (span,) = server_spans(paths[1])
    assert A.GEN_AI_TOOL_CALL_ID not in json.dumps(span)
    report = audited(paths)
    # No proposal was recorded, no id crossed: the one SERVER execution names nothing, and the
    # bare CLIENT span is not counted beside it.
    assert found(report) == [("unidentified_execution", None, None)]


# --- two real server processes over stdio -----------------------------------------------------------


def serve(out: str, service: str) -> None:
    """A stdio MCP tool server process exporting its spans to ``out`` (OTLP JSON lines)."""
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.resources import Resource

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(out)))
    sdk_otel._tracer = provider.get_tracer("mcp-python-sdk")  # type: ignore[assignment]
    try:
        tool_server(service).run("stdio")
    finally:
        provider.shutdown()


def test_duplicate_by_two_server_processes(
    world: World, audited: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = [tmp_path / "process-a.jsonl", tmp_path / "process-b.jsonl"]
    with world.agent.tracer.start_as_current_span("turn"):
        world.propose("call-a")
        proposal = traceparent(world.proposal("call-a"))
        for out in outputs:
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "tests.audit.test_audit_mcp", "serve", str(out), out.stem],
                cwd=str(REPO),
            )
            meta = {A.MCP_META_TOOL_CALL_ID: "call-a", A.MCP_META_PROPOSAL: proposal}

            async def run(params: StdioServerParameters = params, meta: dict[str, Any] = meta) -> None:
                async with Client(params) as client:
                    await client.call_tool("read_page", ARGS, meta=meta)

            token = _client_enrichment.set(
                {"match": "explicit", "call_id": "call-a", "tool": "read_page", "proposal": world.proposal("call-a")}
            )
            try:
                anyio.run(run)
            finally:
                _client_enrichment.reset(token)
    paths = [*world.paths(), *outputs]
    assert all(len(server_spans(out)) == 1 for out in outputs)
    report = audited(paths)
    assert found(report) == [("duplicate_execution", "call-a", "2 executions")]
    for engine in ("python", "chdb"):  # the command line: etf-otel audit [--engine chdb] FILES --json
        code = run_audit([str(path) for path in paths], json_output=True, progress=False, engine=engine)
        document = json.loads(capsys.readouterr().out)
        assert code == 1 and [(entry["kind"], entry["count"]) for entry in document["by_kind"]] == [
            ("duplicate_execution", 1)
        ]
        (detail,) = document["traces_detail"]
        assert detail["findings"][0]["span_id"] == server_spans(outputs[1])[0]["spanId"]


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    serve(sys.argv[2], sys.argv[3])
