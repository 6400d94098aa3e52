"""``etf-otel demo``: what every protocol part shares: a case, running it, handing calls to the host, the summary.

Each case shows what the SDK's own accumulator handed the app next to what the rules decided,
read from the spans the case produced, and what the guarded host did with the calls the SDK handed over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from etf_otel import attributes as A
from etf_otel.cli._text import print_table
from etf_otel.cli.demo._next import next_without
from etf_otel.errors import GuardRefusedError
from etf_otel.testing import LocalChatServer

__all__ = [
    "ANTHROPIC_MISSING",
    "DISPATCHED",
    "MODEL",
    "READ",
    "SAVE",
    "USER",
    "DemoRun",
    "Part",
    "ProtocolCase",
    "describe_call",
    "hand_to_host",
    "print_part",
    "print_protocols",
    "run_case",
    "span_words",
]


DISPATCHED = "dispatched"
ANTHROPIC_MISSING = "Anthropic Messages: skipped, no anthropic; pip install 'etf-otel[demo]'"
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
    def outcome(self) -> str:
        """What the row means, in words of at most 7 letters (the column is 7 wide at 80 columns)."""
        if not self.ok:
            return "WRONG"
        if self.expected == DISPATCHED:
            return "valid, ran"
        return "ran; result flagged" if self.may_run else "caught, not run"

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


def span_words(attributes: dict[str, Any]) -> str:
    """What one span of the call says, in words (the attribute names are in docs/telemetry.md)."""
    words = [f"id {attributes.get(A.GEN_AI_TOOL_CALL_ID)}"]
    if A.ETF_TOOL_CALL_VERDICT in attributes:
        words.append(f"verdict {attributes[A.ETF_TOOL_CALL_VERDICT]}")
    if A.ETF_TOOL_CALL_FRAGMENTS in attributes:
        words.append(f"{attributes[A.ETF_TOOL_CALL_FRAGMENTS]} fragments")
    kept = attributes.get(A.ETF_ID_KEPT_NULL)
    if kept:
        words.append(f"{kept} continuations with id: null kept the id")
    if attributes.get(A.GEN_AI_OPERATION_NAME) == "execute_tool":
        words.append("the host ran it")
    return ", ".join(words)


@dataclass
class DemoRun:
    """Every case of one demo run, per protocol; ``anthropic``, ``gemini``: why that part was skipped, if it was."""

    chat: list[ProtocolCase] = field(default_factory=list)
    ids: dict[str, list[str]] = field(default_factory=dict)
    reports: dict[str, str] = field(default_factory=dict)
    responses: list[ProtocolCase] = field(default_factory=list)
    anthropic: list[ProtocolCase] | str = ""
    gemini: list[ProtocolCase] | str = ""


# --- the summary -------------------------------------------------------------------------------------------


COLUMNS = ("case", "without etf-otel: the SDK hands the app, then", "with etf-otel", "outcome")
MIN_WIDTHS = (19, 21, 24, 7)  # 80 columns: "(max_output_tokens)", "`response.completed`",
# "empty_after_established;" (the longest category and its separator) never break mid-word; outcome words <= 7
Group = tuple[str, Sequence["ProtocolCase"]]
"""A heading and its cases."""


_GAP: Final = 2
"""Spaces between two columns of a compact table (padding collapsed, no rule)."""


def _widths(total: int, rows: Sequence[Sequence[str]]) -> list[int]:
    """Column widths for a ``total``-column console: each column's longest word first, then its longest line."""
    words = [max(cell_len(word) for cell in column for word in cell.split()) for column in zip(*rows, strict=True)]
    natural = [
        max(cell_len(line) for cell in column for line in cell.split("\n")) for column in zip(*rows, strict=True)
    ]
    widths = [max(min(longest, least), word) for longest, least, word in zip(natural, MIN_WIDTHS, words, strict=True)]
    spare = total - 3 * _GAP - sum(widths)  # three gaps between the four columns
    while spare > 0 and any(width < longest for width, longest in zip(widths, natural, strict=True)):
        for index, longest in enumerate(natural):
            if spare > 0 and widths[index] < longest:
                widths[index] += 1
                spare -= 1
    return widths


def _without(case: ProtocolCase) -> str:
    return f"{case.sdk}\nthen: {next_without(case.name)}"


def print_part(console: Console, title: str, groups: Sequence[Group]) -> None:
    """One protocol's cases, group by group under its heading: the case, what the SDK alone hands the app
    and what happens next, what etf-otel decided, and the outcome in words. Ids and categories are never cut."""
    cases = [case for _, group in groups for case in group]
    rows = [COLUMNS, *((case.name, _without(case), case.decision, case.outcome) for case in cases)]
    widths = _widths(console.width, rows)
    console.print()
    console.print(Text(title, style="bold"))
    for number, (heading, group) in enumerate(groups):
        table = Table(
            title=heading,
            title_justify="left",
            box=box.SIMPLE_HEAD,  # compact, as the other tables (cli/_table.py): a rule under the header
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
            show_header=number == 0,
        )
        for column, width in zip(COLUMNS, widths, strict=True):
            table.add_column(column, width=width, overflow="fold")
        for case in group:
            decision = Text(case.decision)
            if not case.ok:
                decision.append(f"\nexpected: {case.expected}", style="red")
            outcome = Text(case.outcome, style="green" if case.ok else "bold red")
            table.add_row(Text(case.name), Text(_without(case)), decision, outcome)
        print_table(console, table)


def print_protocols(
    console: Console,
    responses: Sequence[ProtocolCase],
    anthropic: list[ProtocolCase] | str,
    gemini: list[ProtocolCase] | str = "",
) -> None:
    """The Responses, Anthropic and Gemini sections (or why a part was skipped); the max_tokens case also in words."""
    title = "OpenAI Responses: client.responses.stream(...), real openai client"
    print_part(console, title, [("a result sent back by the wrong id, a response cut short", responses)])
    if isinstance(anthropic, str):
        console.print()
        console.print(Text(anthropic))
    else:
        title = "Anthropic Messages: client.messages.stream(...), real anthropic client"
        print_part(console, title, [("tool_use blocks cut or reused", anthropic)])
        _max_tokens_in_words(console, anthropic)
    if isinstance(gemini, str):
        if gemini:
            console.print()
            console.print(Text(gemini))
        return
    title = "Gemini: client.models.generate_content_stream(...), real google-genai client"
    print_part(console, title, [("functionCall parts one per chunk, withheld, or left open", gemini)])


def _max_tokens_in_words(console: Console, anthropic: Sequence[ProtocolCase]) -> None:
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
