"""``etf-otel demo``: the OpenAI Responses and Anthropic Messages parts.

The same synthetic agent, now through ``client.responses`` of the real ``openai`` client and
``client.messages`` of the real ``anthropic`` client, both instrumented, talking to the
demo's local SSE server. Each part runs one valid call through the guarded host and sends its
result back (the linkage checks read it), then the failures. Each case shows what the SDK's own
accumulator (``get_final_response()``, ``get_final_message()``) handed the app, next to what
the rules decided, read from the spans the case produced, and what the guarded host did with
the calls the SDK handed over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from etf_otel import attributes as A
from etf_otel.errors import GuardRefusedError
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import anthropic as a
from etf_otel.testing import responses as r

__all__ = [
    "ANTHROPIC_MISSING",
    "DISPATCHED",
    "READ",
    "SAVE",
    "Part",
    "ProtocolCase",
    "describe_call",
    "hand_to_host",
    "print_part",
    "print_protocols",
    "run_anthropic",
    "run_case",
    "run_responses",
]

DISPATCHED = "dispatched"
ANTHROPIC_MISSING = "Anthropic Messages: skipped, no anthropic; pip install '.[openai,anthropic]'"
READ = '{"path": "source.txt"}'
SAVE = '{"title": "Quarterly summary", "body": "revenue +12%"}'
USER = "Read source.txt and save a short report."
MODEL = "claude-sonnet-5-5"  # a model name the anthropic SDK does not warn about


@dataclass
class Part:
    """What every part of the demo shares: the server, the telemetry, the demo's tool host (not wrapped)."""

    server: LocalChatServer
    tracer: Tracer
    spans: InMemorySpanExporter
    host: Any


@dataclass
class ProtocolCase:
    name: str
    expected: str  # DISPATCHED, or the category the rules must catch
    sdk: str = "-"  # what the SDK alone handed the app
    ran: list[str] = field(default_factory=list)  # tools the guarded host executed
    refused: list[str] = field(default_factory=list)  # the guard's categories
    categories: list[str] = field(default_factory=list)  # what the rules recorded
    may_run: bool = False  # the case is about the result sent back, not the call

    @property
    def ok(self) -> bool:
        if self.expected == DISPATCHED:
            return not self.categories and not self.refused and bool(self.ran)
        return self.expected in self.categories and (self.may_run or not self.ran)

    @property
    def decision(self) -> str:
        text = "caught: " + ", ".join(self.categories) if self.categories else "proposed"
        if self.ran:
            text += "; host ran " + ", ".join(self.ran)
        if self.refused:
            text += "; guard refused: " + ", ".join(dict.fromkeys(self.refused))
        return text


def _rule_categories(spans: Sequence[ReadableSpan]) -> list[str]:
    """The categories the rules recorded on the assembly spans (a guard refusal is not a rule's)."""
    found: list[str] = []
    for span in spans:
        if span.name.startswith(A.SPAN_EXECUTE_TOOL):
            continue
        categories = (span.attributes or {}).get(A.ETF_TOOL_CALL_CATEGORIES)
        found += [str(category) for category in categories] if isinstance(categories, (list, tuple)) else []
        events = [event.attributes or {} for event in span.events]
        found += [str(event[A.ETF_ERROR_CATEGORY]) for event in events if A.ETF_ERROR_CATEGORY in event]
    return list(dict.fromkeys(found))


def run_case(part: Part, protocol: str, case: ProtocolCase, body: Callable[[ProtocolCase], None]) -> ProtocolCase:
    before = len(part.spans.get_finished_spans())
    with part.tracer.start_as_current_span(f"agent {protocol} case {case.expected}"):
        body(case)
    case.categories = _rule_categories(part.spans.get_finished_spans()[before:])
    return case


def hand_to_host(case: ProtocolCase, host: Any, call: Any) -> str | None:
    """Run one call as the SDK handed it to the app through the guarded host: its output, ``None`` if refused."""
    try:
        output = host.execute(call)
    except GuardRefusedError as refused:
        case.refused.append(refused.category.value)
        return None
    case.ran.append(call.name)
    return str(output)


def describe_call(call_id: object, name: object, arguments: object) -> str:
    """``id name arguments`` of one call as an SDK handed it (``(no id)`` for a null id)."""
    call_id = "(no id)" if call_id is None else call_id
    return f"{call_id} {name} {arguments if isinstance(arguments, str) else json.dumps(arguments)}"


# --- OpenAI Responses ----------------------------------------------------------------------------------


def _r_item(call_id: str, item_id: str, arguments: str = READ, status: str = "completed") -> dict[str, Any]:
    return r.function_call(call_id, "read_source", arguments, item_id, status)


def _r_call(call_id: str, item_id: str, *, done: bool = True) -> list[dict[str, Any]]:
    """One ``read_source`` call at output_index 0 as the API streams it: added, two deltas, both done events."""
    events = r.call(0, call_id, "read_source", [READ[:8], READ[8:]], item_id)
    return events if done else events[:3]


def _r_script(response_id: str, events: Sequence[dict[str, Any]], end: dict[str, Any]) -> Script:
    """``response.created``, the events, then ``end``; sequence numbers in order, ``event:`` lines."""
    return Script(events=r.stream(*events, end=end, id=response_id), named=True)


def _r_completed(response_id: str, *items: dict[str, Any]) -> dict[str, Any]:
    return r.completed(list(items), id=response_id)


def _r_stream(n: int, completed_call_id: str | None = None) -> Script:
    """Response ``resp_<n>``: call ``call_r<n>`` (item ``fc_r<n>``), listed in ``response.completed``."""
    call_id, item_id, response_id = f"call_r{n}", f"fc_r{n}", f"resp_{n}"
    final = _r_item(completed_call_id or call_id, item_id)
    return _r_script(response_id, _r_call(call_id, item_id), _r_completed(response_id, final))


def _r_cases() -> list[tuple[ProtocolCase, Script, str | None]]:
    """``(case, its stream, the field of the call the app answers with)``; ``None``: no answer."""
    cut = r.incomplete("max_output_tokens", [_r_item("call_r3", "fc_r3", status="incomplete")], "resp_3")
    incomplete = _r_script("resp_3", _r_call("call_r3", "fc_r3", done=False), cut)
    return [
        (ProtocolCase("valid call, result sent by call_id", DISPATCHED), _r_stream(1), "call_id"),
        (ProtocolCase("call_id changed in response.completed", "snapshot_mismatch"), _r_stream(2, "call_9"), None),
        (ProtocolCase("response.incomplete (max_output_tokens)", "incomplete_response"), incomplete, None),
        (ProtocolCase("result sent with the fc_ item id", "orphaned_result", may_run=True), _r_stream(4), "id"),
    ]


_R_TOOLS: Any = [
    {"type": "function", "name": "read_source", "strict": False,
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
]  # fmt: skip


def _r_case(client: Any, host: Any, server: LocalChatServer, answer_with: str | None, case: ProtocolCase) -> None:
    """One ``responses.stream(...)`` turn: the SDK's calls to the host, then their results in the next request."""
    history: list[Any] = [{"role": "user", "content": USER}]
    try:
        with client.responses.stream(model="etf-demo", input=history, tools=_R_TOOLS) as stream:
            for _ in stream:
                pass
            final = stream.get_final_response()
    except Exception as error:  # what the SDK alone raises at the app
        case.sdk = f"raises {type(error).__name__}: {error}"
        return
    calls = [item for item in final.output if item.type == "function_call"]
    case.sdk = "\n".join(describe_call(call.call_id, call.name, call.arguments) for call in calls) or "no call"
    results: list[Any] = []
    for call in calls:
        output = hand_to_host(case, host, call)
        if output is not None and answer_with is not None:
            call_id = getattr(call, answer_with)
            results.append({"type": "function_call_output", "call_id": call_id, "output": output})
            if call_id != call.call_id:
                case.sdk += f"\nresult sent for {call_id}, unchecked"
    if results:
        server.enqueue(_r_script(f"{final.id}_next", [], _r_completed(f"{final.id}_next")))
        for _ in client.responses.create(model="etf-demo", input=[*history, *final.output, *results], stream=True):
            pass


def run_responses(part: Part, client: Any, instrumentation: Any) -> list[ProtocolCase]:
    """The Responses cases through ``client.responses`` of the instrumented ``openai`` client."""
    host = instrumentation.host(part.host, guard=True)
    cases = []
    for case, script, answer_with in _r_cases():
        part.server.enqueue(script)
        cases.append(run_case(part, "responses", case, partial(_r_case, client, host, part.server, answer_with)))
    return cases


# --- Anthropic Messages ----------------------------------------------------------------------------------


def _a_tool_block(index: int, tool_id: str, name: str, arguments: str) -> list[dict[str, Any]]:
    """One ``tool_use`` block as the API streams it: start (input ``{}``), ``""`` then two pieces, stop."""
    half = len(arguments) // 2
    return a.tool_call(index, tool_id, name, *dict.fromkeys(p for p in (arguments[:half], arguments[half:]) if p))


def _a_script(message_id: str, blocks: Sequence[dict[str, Any]], stop_reason: str = "tool_use") -> Script:
    """``message_start``, the blocks' events, ``message_delta`` with ``stop_reason``, ``message_stop``."""
    return Script(
        events=a.stream(list(blocks), stop_reason=stop_reason, message_id=message_id, model=MODEL), named=True
    )


def _a_cases() -> list[tuple[ProtocolCase, Script]]:
    reused = [*_a_tool_block(0, "toolu_a3", "read_source", READ), *_a_tool_block(0, "toolu_a4", "save_report", SAVE)]
    return [
        (
            ProtocolCase("valid call, tool_use block to the host", DISPATCHED),
            _a_script("msg_a1", _a_tool_block(0, "toolu_a1", "read_source", READ)),
        ),
        (
            ProtocolCase("path parameter cut by max_tokens", "incomplete_response"),
            _a_script("msg_a2", _a_tool_block(0, "toolu_a2", "read_source", ""), "max_tokens"),
        ),
        (ProtocolCase("block index reused by a second call", "id_conflict"), _a_script("msg_a3", reused)),
    ]


_A_TOOLS: Any = [
    {"name": "read_source", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "save_report", "input_schema": {"type": "object", "properties": {"title": {}, "body": {}}}},
]


def _a_case(client: Any, host: Any, server: LocalChatServer, case: ProtocolCase) -> None:
    """One ``messages.stream(...)`` turn: the final message's ``tool_use`` blocks to the host, results back."""
    history: list[Any] = [{"role": "user", "content": USER}]
    try:
        with client.messages.stream(model=MODEL, max_tokens=256, messages=history, tools=_A_TOOLS) as stream:
            final = stream.get_final_message()
    except Exception as error:  # what the SDK alone raises at the app
        case.sdk = f"raises {type(error).__name__}: {error}"
        return
    calls = [block for block in final.content if block.type == "tool_use"]
    case.sdk = "\n".join(describe_call(call.id, call.name, call.input) for call in calls) or "no call"
    if final.stop_reason != "tool_use":
        case.sdk += f"\n(stop_reason {final.stop_reason})"
    results: list[Any] = []
    for call in calls:
        output = hand_to_host(case, host, call)
        if output is not None:
            results.append({"type": "tool_result", "tool_use_id": call.id, "content": output})
    if results:
        text = [a.block_start(0, a.block("text", text="Done.")), a.block_stop(0)]
        server.enqueue(_a_script(f"{final.id}_next", text, "end_turn"))
        follow_up = [*history, {"role": "assistant", "content": final.content}, {"role": "user", "content": results}]
        for _ in client.messages.create(model=MODEL, max_tokens=256, messages=follow_up, stream=True):
            pass


def run_anthropic(
    part: Part, tracer_provider: TracerProvider, meter_provider: MeterProvider, provider_name: str
) -> list[ProtocolCase] | str:
    """The Anthropic cases through the instrumented ``anthropic`` client, or the line saying why they were skipped."""
    try:
        import anthropic
    except ImportError:
        return ANTHROPIC_MISSING
    from etf_otel.integrations.anthropic._instrumentor import AnthropicInstrumentor

    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        provider_name=provider_name,
        allow=(),  # the strict rules, whatever OTEL_INSTRUMENTATION_ETF_ALLOW says
        skip_dep_check=True,
    )
    try:
        instrumentation = instrumentor.instrumentation
        if instrumentation is None:  # instrument() declined
            return "Anthropic Messages: skipped, the anthropic client is instrumented by another setup"
        host = instrumentation.host(part.host, guard=True)
        client = anthropic.Anthropic(base_url=part.server.root_url, api_key="etf-demo", max_retries=0)
        cases = []
        for case, script in _a_cases():
            part.server.enqueue(script)
            cases.append(run_case(part, "anthropic", case, partial(_a_case, client, host, part.server)))
        return cases
    finally:
        instrumentor.uninstrument()


# --- the summary -------------------------------------------------------------------------------------------


COLUMNS = ("case", "the SDK alone hands the app", "etf-otel", "outcome")
MIN_WIDTHS = (19, 21, 24, 7)  # 80 columns: "(max_output_tokens)", "`response.completed`",
# "empty_after_established;" (the longest category and its separator) never break mid-word


def _widths(total: int, rows: Sequence[Sequence[str]]) -> list[int]:
    """Column widths for a ``total``-column console: each column's longest line, the minimums first."""
    natural = [
        max(cell_len(line) for cell in column for line in cell.split("\n")) for column in zip(*rows, strict=True)
    ]
    widths = [min(longest, least) for longest, least in zip(natural, MIN_WIDTHS, strict=True)]
    spare = total - 3 * 3 - sum(widths)  # three rules of " │ "
    while spare > 0 and any(width < longest for width, longest in zip(widths, natural, strict=True)):
        for index, longest in enumerate(natural):
            if spare > 0 and widths[index] < longest:
                widths[index] += 1
                spare -= 1
    return widths


def print_part(console: Console, title: str, cases: Sequence[ProtocolCase], sections: Sequence[int] = ()) -> None:
    """One protocol's cases: the case, what the SDK alone handed the app, what etf-otel decided, ok or not.

    A line is drawn after each row index in ``sections``. Ids and categories are never cut.
    """
    rows = [COLUMNS, *((case.name, case.sdk, case.decision, "ok") for case in cases)]
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for column, width in zip(COLUMNS, _widths(console.width, rows), strict=True):
        table.add_column(column, width=width, overflow="fold")
    for index, case in enumerate(cases):
        decision = Text(case.decision)
        if not case.ok:
            decision.append(f"\nexpected: {case.expected}", style="red")
        verdict = Text("ok", style="green") if case.ok else Text("WRONG", style="bold red")
        table.add_row(Text(case.name), Text(case.sdk), decision, verdict, end_section=index in sections)
    console.print()
    console.print(table)


def print_protocols(console: Console, responses: Sequence[ProtocolCase], anthropic: list[ProtocolCase] | str) -> None:
    """The Responses and Anthropic sections (or why Anthropic was skipped); the max_tokens case also in words."""
    print_part(console, "OpenAI Responses: client.responses.stream(...), real openai client", responses)
    if isinstance(anthropic, str):
        console.print()
        console.print(Text(anthropic))
        return
    print_part(console, "Anthropic Messages: client.messages.stream(...), real anthropic client", anthropic)
    for case in anthropic:
        if case.expected == "incomplete_response":
            sdk = case.sdk.replace("\n", " ")
            refused = f"raised GuardRefusedError({', '.join(case.refused)})" if case.refused else "refused nothing"
            words = (
                f"max_tokens: the SDK's final message hands the app {sdk}, a valid-looking input; "
                f"the rules: {', '.join(case.categories) or 'nothing'}; the guarded host {refused} "
                f"and {'ran' if case.ran else 'never ran'} the tool."
            )
            console.print(Text(words))
