"""``etf-otel demo``: the case study end to end, with the real ``openai`` client and no server.

A synthetic agent reads a source and saves a report. Its model is a local SSE server on
127.0.0.1 that streams scripted Chat Completions; the agent assembles tool calls with the
reference assembler and executes them through an instrumented, guarded host; the next
request carries the tool results, which the instrumentation checks for linkage. The
control run (continuations omit the id) and the target run (continuations carry
``id: null``) must preserve the same ids and write the same report; the rejection and
linkage cases must each be caught with their category. The same agent then talks the OpenAI
Responses and Anthropic Messages protocols through their SDKs (``demo_protocols.py``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from rich.table import Table

from etf_otel import attributes as A
from etf_otel.cli.demo_protocols import Part, ProtocolCase, print_protocols, run_anthropic, run_responses
from etf_otel.cli.exit_codes import EXIT_BAD_INPUT, EXIT_FOUND, EXIT_OK
from etf_otel.cli.local_sse import DONE, LocalChatServer, Script, chunk
from etf_otel.cli.sdk_setup import setup_sdk
from etf_otel.core.results import AssemblyResult
from etf_otel.errors import GuardRefusedError
from etf_otel.protocols.chat_completions import ReferenceAssembler

__all__ = ["run_demo"]

PROVIDER = "etf.demo"
SOURCE_TEXT = "Q3 revenue grew 12%; churn fell to 2.1%; two regions missed their targets.\n"
REPORT_BODY = "Summary: revenue +12%, churn 2.1%, two regions below target."
Fragment = dict[str, Any]
ABSENT_KEY: Any = object()


def _call(index: int, call_id: Any, name: str | None = None, arguments: str | None = None) -> Fragment:
    fragment: Fragment = {"index": index}
    if call_id is not ABSENT_KEY:
        fragment["id"] = call_id
    function: dict[str, Any] = {}
    if name is not None:
        fragment["type"] = "function"
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        fragment["function"] = function
    return fragment


def _tool_turn(*fragment_groups: Sequence[Fragment], cut_after: int | None = None) -> Script:
    events: list[Any] = [chunk(tool_calls=list(group)) for group in fragment_groups]
    if cut_after is None:
        events += [chunk(finish_reason="tool_calls"), DONE]
    return Script(events=events, cut_after=cut_after)


def _text_turn(text: str) -> Script:
    return Script(events=[chunk(content=text), chunk(finish_reason="stop"), DONE])


def _split_call(index: int, call_id: str, name: str, arguments: str, continuation_id: Any) -> list[list[Fragment]]:
    """One call in three fragments: the id on the first, ``continuation_id`` on the rest."""
    third = max(1, len(arguments) // 3)
    return [
        [_call(index, call_id, name, arguments[:third])],
        [_call(index, continuation_id, arguments=arguments[third : 2 * third])],
        [_call(index, continuation_id, arguments=arguments[2 * third :])],
    ]


class DemoHost:
    """The tools of the synthetic agent: read a source file, save a report."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        (workdir / "source.txt").write_text(SOURCE_TEXT, encoding="utf-8")

    def execute(self, call: Any) -> str:
        """Run one call: a ``ToolCall``, a Responses ``function_call`` item, an Anthropic ``tool_use`` block."""
        text = getattr(call, "arguments", None)
        arguments = json.loads(text) if isinstance(text, str) else call.input
        if call.name == "read_source":
            return (self.workdir / Path(arguments["path"]).name).read_text(encoding="utf-8")
        if call.name == "save_report":
            report = self.workdir / "report.md"
            report.write_text(f"# {arguments['title']}\n\n{arguments['body']}\n", encoding="utf-8")
            return str(report)
        raise ValueError("unknown tool")


@dataclass
class CaseOutcome:
    name: str
    expected: str
    state: str = "-"
    dispatched: bool = False
    ids: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        if self.expected == "dispatched":
            return self.dispatched and not self.categories
        return self.expected in self.categories


class _Agent:
    def __init__(self, client: Any, host: Any) -> None:
        self.client = client
        self.host = host

    def stream(self, messages: list[Any]) -> tuple[AssemblyResult, str]:
        """One model request: assemble its tool calls. Returns ``(result, failure)``."""
        assembler = ReferenceAssembler()
        try:
            for sdk_chunk in self.client.chat.completions.create(model="etf-demo", messages=messages, stream=True):
                assembler.feed(sdk_chunk)
        except Exception as error:  # the SDK's own error for a cut connection
            return assembler.finish(), f"failed ({type(error).__name__})"
        return assembler.finish(), ""

    def execute(self, result: AssemblyResult, messages: list[Any]) -> None:
        """Run every proposal through the guarded host and append the follow-up messages."""
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in result.proposals
                ],
            }
        )
        for call in result.proposals:
            output = self.host.execute(call)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})


def _run_conversation(agent: _Agent, server: LocalChatServer, continuation_id: Any, tag: str) -> CaseOutcome:
    read = json.dumps({"path": "source.txt"})
    save = json.dumps({"title": "Quarterly summary", "body": REPORT_BODY})
    server.enqueue(
        _tool_turn(*_split_call(0, f"call-read-{tag}", "read_source", read, continuation_id)),
        _tool_turn(*_split_call(0, f"call-save-{tag}", "save_report", save, continuation_id)),
        _text_turn("The report is saved."),
    )
    outcome = CaseOutcome(name="", expected="dispatched", dispatched=True)
    messages: list[Any] = [{"role": "user", "content": "Read source.txt and save a short report."}]
    for _ in range(2):
        result, failure = agent.stream(messages)
        outcome.state = failure or result.state.value
        outcome.categories += [category.value for category in result.categories]
        outcome.dispatched = outcome.dispatched and result.dispatchable
        outcome.ids += [call.id for call in result.calls if call.id]
        if not result.dispatchable:
            return outcome
        agent.execute(result, messages)
    agent.stream(messages)
    return outcome


def _rejection_cases() -> list[tuple[str, str, Script]]:
    args = '{"path": "source.txt"}'
    return [
        ("initial null id", "initial_null", _tool_turn([_call(0, None, "read_source", args)])),
        (
            "null id on new index",
            "initial_null",
            _tool_turn([_call(0, "call-r1", "read_source", args)], [_call(1, None, "save_report", "{}")]),
        ),
        (
            "conflicting id",
            "id_conflict",
            _tool_turn([_call(0, "call-r1", "read_source", '{"path":')], [_call(0, "call-r2", arguments='"a"}')]),
        ),
        (
            "empty id after id",
            "empty_after_established",
            _tool_turn([_call(0, "call-r1", "read_source", '{"path":')], [_call(0, "", arguments='"a"}')]),
        ),
        ("number as id", "unsupported_id_type", _tool_turn([_call(0, 42, "read_source", args)])),
        ("arguments not JSON", "invalid_arguments", _tool_turn([_call(0, "call-r1", "read_source", '{"path": "s')])),
        (
            "duplicate final ids",
            "duplicate_call_id",
            _tool_turn([_call(0, "call-r1", "read_source", args), _call(1, "call-r1", "read_source", args)]),
        ),
        (
            "connection cut mid-call",
            "truncated_stream",
            _tool_turn(
                [_call(0, "call-r1", "read_source", '{"pa')], [_call(0, ABSENT_KEY, arguments='th"')], cut_after=2
            ),
        ),
    ]


def _run_rejection(agent: _Agent, server: LocalChatServer, name: str, expected: str, script: Script) -> CaseOutcome:
    server.enqueue(script)
    result, failure = agent.stream([{"role": "user", "content": f"case: {name}"}])
    outcome = CaseOutcome(name=name, expected=expected, state=failure or result.state.value)
    outcome.dispatched = result.dispatchable
    outcome.ids = [call.id for call in result.calls if call.id]
    outcome.categories = [category.value for category in result.categories]
    if result.calls:  # try to run the first call anyway: the guard must refuse it
        try:
            agent.host.execute(result.calls[0])
            outcome.note = "executed!"
        except GuardRefusedError as refused:
            outcome.note = f"guard refused: {refused.category.value}"
    return outcome


def _linkage_case(
    agent: _Agent, server: LocalChatServer, name: str, expected: str, edit: Callable[[list[Any]], None]
) -> CaseOutcome:
    server.enqueue(
        _tool_turn([_call(0, f"call-l-{expected}", "read_source", '{"path": "source.txt"}')]),
        _text_turn("ok"),
    )
    messages: list[Any] = [{"role": "user", "content": f"linkage case: {name}"}]
    result, _ = agent.stream(messages)
    agent.execute(result, messages)
    edit(messages)
    agent.stream(messages)
    return CaseOutcome(
        name=name, expected=expected, state="completed", dispatched=True, ids=[c.id or "" for c in result.calls]
    )


def _linkage_cases() -> list[tuple[str, str, Callable[[list[Any]], None]]]:
    def orphan(messages: list[Any]) -> None:
        messages[-1] = {**messages[-1], "tool_call_id": "call-never-proposed"}

    def unanswered(messages: list[Any]) -> None:
        messages.pop()

    def duplicate(messages: list[Any]) -> None:
        messages.append(dict(messages[-1]))

    return [
        ("tool result for unknown id", "orphaned_result", orphan),
        ("call without tool result", "unanswered_call", unanswered),
        ("two results for one call", "duplicate_result", duplicate),
    ]


def _violations(spans: Sequence[ReadableSpan]) -> list[str]:
    return [
        str((event.attributes or {}).get(A.ETF_ERROR_CATEGORY))
        for span in spans
        for event in span.events
        if event.name == A.EVENT_INTEGRITY_VIOLATION
    ]


def run_demo(export: str | None = None, console: Console | None = None) -> int:
    """Run the whole demo; returns 0 when every case behaved as the rules say."""
    import openai

    from etf_otel.integrations.openai import OpenAIInstrumentor

    console = console or Console()
    summary_exporter = InMemorySpanExporter()
    summary_reader = InMemoryMetricReader()
    setup = setup_sdk("etf-otel-demo", export, extra_readers=[summary_reader])
    tracer_provider, meter_provider = setup.tracer_provider, setup.meter_provider
    tracer_provider.add_span_processor(SimpleSpanProcessor(summary_exporter))

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(
        tracer_provider=tracer_provider, meter_provider=meter_provider, provider_name=PROVIDER, skip_dep_check=True
    )
    try:
        instrumentation = instrumentor.instrumentation
        if instrumentation is None:  # instrument() declined: the openai client is instrumented by another setup
            print("etf-otel demo: the openai client is already instrumented by another setup", file=sys.stderr)
            return EXIT_BAD_INPUT
        tracer = tracer_provider.get_tracer("etf_otel.demo")
        with tempfile.TemporaryDirectory(prefix="etf-demo-") as workdir, LocalChatServer() as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="etf-demo", max_retries=0)
            run, part = DemoRun(), Part(server, tracer, summary_exporter, DemoHost(Path(workdir)))
            _run_chat(run, part, client, instrumentation, Path(workdir))
            run.responses = run_responses(part, client, instrumentation)
            run.anthropic = run_anthropic(part, tracer_provider, meter_provider, PROVIDER)
        spans = summary_exporter.get_finished_spans()
        return _print_summary(console, run, spans, summary_reader, setup.destination)
    finally:
        instrumentor.uninstrument()
        setup.shutdown()


@dataclass
class DemoRun:
    """Every case of one demo run, per protocol; ``anthropic`` is why that part was skipped, if it was."""

    chat: list[CaseOutcome] = field(default_factory=list)
    reports: dict[str, str] = field(default_factory=dict)
    responses: list[ProtocolCase] = field(default_factory=list)
    anthropic: list[ProtocolCase] | str = ""


def _run_chat(run: DemoRun, part: Part, client: Any, instrumentation: Any, workdir: Path) -> None:
    """The Chat Completions part: control and target runs, rejection cases, linkage cases."""
    server, tracer, exporter = part.server, part.tracer, part.spans
    for tag, continuation, label in (
        ("control", ABSENT_KEY, "control (continuations omit id)"),
        ("target", None, "target (continuations id: null)"),
    ):
        run_dir = workdir / tag
        run_dir.mkdir()
        agent = _Agent(client, instrumentation.host(DemoHost(run_dir), guard=True))
        with tracer.start_as_current_span(f"agent run {tag}"):
            outcome = _run_conversation(agent, server, continuation, "1")
        outcome.name = label
        run.chat.append(outcome)
        report = run_dir / "report.md"
        run.reports[tag] = report.read_text(encoding="utf-8") if report.exists() else ""
    guarded = _Agent(client, instrumentation.host(part.host, guard=True))
    for name, expected, script in _rejection_cases():
        with tracer.start_as_current_span(f"agent case {expected}"):
            run.chat.append(_run_rejection(guarded, server, name, expected, script))
    for name, expected, edit in _linkage_cases():
        before = len(exporter.get_finished_spans())
        with tracer.start_as_current_span(f"agent case {expected}"):
            outcome = _linkage_case(guarded, server, name, expected, edit)
        outcome.categories = _violations(exporter.get_finished_spans()[before:])
        run.chat.append(outcome)


def _chat_table(outcomes: list[CaseOutcome]) -> Table:
    table = Table(title="Chat Completions: streams through the real openai client", title_justify="left")
    for column in ("case", "stream", "dispatched", "caught", "outcome"):
        table.add_column(column, overflow="fold")  # ids and categories fold, never cut
    for outcome in outcomes:
        caught = ", ".join(dict.fromkeys(outcome.categories)) or "-"
        verdict = "[green]ok[/green]" if outcome.ok else f"[red]expected {outcome.expected}[/red]"
        if outcome.note:
            verdict += f" ({outcome.note})"
        table.add_row(outcome.name, outcome.state, "yes" if outcome.dispatched else "no", caught, verdict)
    return table


def _metric_points(reader: InMemoryMetricReader) -> int:
    data = reader.get_metrics_data()
    resources = data.resource_metrics if data is not None else []
    return sum(len(metric.data.data_points) for r in resources for scope in r.scope_metrics for metric in scope.metrics)


def _print_summary(
    console: Console,
    run: DemoRun,
    spans: Sequence[ReadableSpan],
    reader: InMemoryMetricReader,
    destination: str | None,
) -> int:
    console.print("[bold]etf-otel demo[/bold]: a synthetic agent reads a source and saves a report\n")
    console.print(_chat_table(run.chat))
    control, target, reports = run.chat[0], run.chat[1], run.reports
    same_ids = control.ids == target.ids and bool(control.ids)
    same_report = bool(reports.get("control")) and reports.get("control") == reports.get("target")
    digest = hashlib.sha256(reports.get("target", "").encode()).hexdigest()[:12]
    console.print(
        f"control vs target: preserved ids {'identical' if same_ids else 'DIFFER'} ({', '.join(target.ids)}); "
        f"report {'identical' if same_report else 'DIFFERS'} (sha256 {digest}…)"
    )
    print_protocols(console, run.responses, run.anthropic)
    names = Counter(span.name.split(" ")[0] for span in spans)
    span_counts = ", ".join(f"{count} {name}" for name, count in sorted(names.items()))
    console.print(f"\ntelemetry: {len(spans)} spans ({span_counts}), {_metric_points(reader)} metric series")
    console.print(f"exported to: {destination or 'console summary only (use --export FILE or OTEL_EXPORTER_OTLP_*)'}")
    target_spans = [s for s in spans if (s.attributes or {}).get(A.GEN_AI_TOOL_CALL_ID) == "call-read-1"]
    if target_spans:
        console.print("\nspans of call-read-1 (both runs):")
        for span in target_spans:
            attributes = dict(span.attributes or {})
            shown = {key: attributes[key] for key in sorted(attributes) if key.startswith(("etf.", "gen_ai.", "error"))}
            console.print(f"  {span.name}: {shown}")
    cases: list[Any] = [*run.chat, *run.responses, *(run.anthropic if isinstance(run.anthropic, list) else [])]
    all_ok = all(case.ok for case in cases) and same_ids and same_report
    verdict = "[green]all cases behaved as the rules say" if all_ok else "[red]some cases did not behave as expected"
    console.print(f"\n[bold]{verdict}[/]")
    return EXIT_OK if all_ok else EXIT_FOUND
