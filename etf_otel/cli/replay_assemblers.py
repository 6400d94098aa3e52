"""``etf-otel replay --assembler NAME``: one recorded response through a third-party assembler, wrapped.

The recording is fed to the named assembler through its etf-otel adapter, exactly as an
application would use it, and what the wrapper records (``divergent_assembly`` events
with ``etf.divergence.kind``) is read back from a private in-memory tracer: the
divergences shown are the ones the instrumentation emits, not a separate computation.
Beside it, the identity rules assemble the whole recording (``[DONE]`` included).

Assemblers: ``openai`` (the SDK's ``ChatCompletionStreamState``; chunks are built as the SDK
builds them from SSE data, and nothing after ``[DONE]`` reaches it, as with the SDK's own
stream), ``langchain`` (``langchain-openai``'s chunk conversion summed with ``+``), and
``reference`` (the reference assembler itself, which never diverges).

:data:`QUIRK_STREAMS` are the named streams of the quirks table (``scripts/quirks_table.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from rich.table import Table

from etf_otel import attributes as A
from etf_otel.cli.replay_report import build_report
from etf_otel.core.identity import CompatibilityRule
from etf_otel.core.results import AssemblyResult
from etf_otel.instrumentation.setup import Instrumentation
from etf_otel.protocols.chat_completions import DONE, ReferenceAssembler

__all__ = [
    "ASSEMBLERS",
    "QUIRK_STREAMS",
    "AssemblerComparison",
    "render_comparison",
    "run_assembler",
]

ASSEMBLERS = ("openai", "langchain", "reference")


@dataclass
class AssemblerComparison:
    """What one assembler made of a recording, beside what the rules made of it."""

    assembler: str
    calls: list[tuple[object, object, object]] | None
    """``(id, name, arguments)`` as the assembler produced them; ``None`` when it raised."""
    raised: str | None
    """The exception type the assembler raised (the message is not kept: it may quote values)."""
    rules: AssemblyResult
    divergences: list[str] = field(default_factory=list)

    def to_dict(self, *, show_arguments: bool = False) -> dict[str, Any]:
        """A JSON-able document: ``assembler``, ``raised``, ``calls``, ``divergences`` and the rules' replay report."""
        calls = None
        if self.calls is not None:
            calls = []
            for call_id, name, arguments in self.calls:
                entry: dict[str, Any] = {"id": call_id, "name": name}
                if show_arguments:
                    entry["arguments"] = arguments
                calls.append(entry)
        exclude = None if show_arguments else {"calls": {"__all__": {"arguments"}}}
        return {
            "assembler": self.assembler,
            "raised": self.raised,
            "calls": calls,
            "divergences": list(self.divergences),
            "rules": build_report(self.rules, show_arguments=show_arguments).model_dump(exclude=exclude),
        }


def _sdk_chunks(chunks: Iterable[object]) -> list[object]:
    """The chunks the ``openai`` SDK would hand on: built like its SSE decoder, none after ``[DONE]``."""
    from openai.types.chat import ChatCompletionChunk

    out: list[object] = []
    for chunk in chunks:
        if chunk == DONE:
            break
        if isinstance(chunk, dict):
            out.append(ChatCompletionChunk.construct(**chunk))
        elif not isinstance(chunk, str):
            out.append(chunk)
    return out


def _until_done(chunks: Iterable[object]) -> list[object]:
    out: list[object] = []
    for chunk in chunks:
        if chunk == DONE:
            break
        out.append(chunk)
    return out


@dataclass(frozen=True)
class _Driver:
    wrap: Callable[[Instrumentation], Any]
    feed: str
    finish: str
    calls: Callable[[Any], Sequence[tuple[object, object, object]]]
    chunks: Callable[[Sequence[object]], list[object]]


def _driver(name: str) -> _Driver:
    if name == "openai":
        from etf_otel.integrations.openai_state import completion_calls, instrument_openai_state

        return _Driver(
            lambda etf: instrument_openai_state(instrumentation=etf),
            "handle_chunk",
            "get_final_completion",
            completion_calls,
            _sdk_chunks,
        )
    if name == "langchain":
        from etf_otel.integrations.langchain import instrument_langchain, message_calls

        return _Driver(
            lambda etf: instrument_langchain(instrumentation=etf), "add", "result", message_calls, _until_done
        )
    if name == "reference":
        from etf_otel.instrumentation.assemblers import reference_calls

        return _Driver(
            lambda etf: etf.assembler(ReferenceAssembler(rules=etf.rules)), "feed", "finish", reference_calls, list
        )
    raise ValueError(f"unknown assembler {name!r}; expected one of {', '.join(ASSEMBLERS)}")


def run_assembler(
    name: str, chunks: Sequence[object], allow: Iterable[CompatibilityRule | str] = ()
) -> AssemblerComparison:
    """Run ``chunks`` through assembler ``name`` (wrapped) and through the rules; see the module doc."""
    allow = list(allow)
    driver = _driver(name)
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(shutdown_on_exit=False)
    etf = Instrumentation(tracer_provider, meter_provider, allow=allow)
    calls: list[tuple[object, object, object]] | None = None
    raised: str | None = None
    with tracer_provider.get_tracer("etf_otel.cli.replay_report").start_as_current_span("replay"):
        wrapped = driver.wrap(etf)
        try:
            for chunk in driver.chunks(chunks):
                getattr(wrapped, driver.feed)(chunk)
            calls = list(driver.calls(getattr(wrapped, driver.finish)()))
        except Exception as error:  # the assembler's own failure is a result here
            raised = type(error).__name__
        del wrapped  # a response abandoned by a raising feed is finalized now, inside the span
    tracer_provider.shutdown()
    meter_provider.shutdown()
    kinds: list[str] = []
    for span in exporter.get_finished_spans():
        for event in span.events:
            kind = (event.attributes or {}).get(A.ETF_DIVERGENCE_KIND)
            if event.name == A.EVENT_INTEGRITY_VIOLATION and isinstance(kind, str):
                kinds.append(kind)
    rules = ReferenceAssembler(allow)
    for chunk in chunks:
        rules.feed(chunk)
    return AssemblerComparison(name, calls, raised, rules.finish(), sorted(set(kinds)))


def _text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def render_comparison(comparison: AssemblerComparison, console: Console, *, show_arguments: bool = False) -> None:
    """Print the rules' calls and the assembler's calls side by side, then the divergences."""
    table = Table(title=f"rules vs {comparison.assembler}", title_justify="left")
    columns = ["#", "rules id", "rules name", "verdict"]
    if show_arguments:
        columns.append("rules arguments")
    columns += [f"{comparison.assembler} id", f"{comparison.assembler} name"]
    if show_arguments:
        columns.append(f"{comparison.assembler} arguments")
    for column in columns:
        table.add_column(column)
    ours = comparison.rules.calls
    theirs = comparison.calls or []
    for position in range(max(len(ours), len(theirs))):
        row = [str(position)]
        if position < len(ours):
            call = ours[position]
            row += [_text(call.id), _text(call.name), call.verdict.value]
            if show_arguments:
                row.append(call.arguments)
        else:
            row += ["", "", ""] + ([""] if show_arguments else [])
        if position < len(theirs):
            call_id, name, arguments = theirs[position]
            row += [_text(call_id), _text(name)] + ([_text(arguments)] if show_arguments else [])
        else:
            row += ["", ""] + ([""] if show_arguments else [])
        table.add_row(*row)
    console.print(table)
    if comparison.raised is not None:
        console.print(f"{comparison.assembler} raised {comparison.raised}")
    console.print("rules: " + ("dispatchable" if comparison.rules.dispatchable else "not dispatchable"))
    console.print("divergences: " + (", ".join(comparison.divergences) or "none"))


def _chunk(*fragments: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-quirk",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "quirk",
        "choices": [
            {"index": 0, "delta": {"tool_calls": list(fragments)} if fragments else {}, "finish_reason": finish_reason}
        ],
    }


_ABSENT: Any = object()


def _fragment(
    index: Any, id: Any = _ABSENT, name: Any = _ABSENT, arguments: Any = _ABSENT, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index} if index is not _ABSENT else {}
    if id is not _ABSENT:
        out["id"] = id
    function = {key: value for key, value in (("name", name), ("arguments", arguments)) if value is not _ABSENT}
    if function:
        out["function"] = function
    out.update(extra)
    return out


def _finished(*chunks: dict[str, Any]) -> list[object]:
    return [*chunks, _chunk(finish_reason="tool_calls"), DONE]


QUIRK_STREAMS: dict[str, list[object]] = {
    "clean multi-call stream": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":'), _fragment(1, "call_2", "get_b", '{"b":')),
        _chunk(_fragment(0, arguments="1}"), _fragment(1, arguments="2}")),
    ),
    "null continuations": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, None, arguments="1}"))
    ),
    "repeated ids": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, "call_1", arguments="1}"))
    ),
    "repeated names": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, name="get_a", arguments="1}"))
    ),
    "conflicting ids": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, "call_2", arguments="1}"))
    ),
    "all calls on index 0": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":1}')), _chunk(_fragment(0, "call_2", "get_b", '{"b":2}'))
    ),
    "first index 1": _finished(_chunk(_fragment(1, "call_1", "get_a", '{"a":')), _chunk(_fragment(1, arguments="1}"))),
    "type: null": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":', type="function")),
        _chunk(_fragment(0, arguments="1}", type=None)),
    ),
    "cut mid-arguments": [
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')),
        _chunk(_fragment(0, arguments='"x')),
    ],
    'empty-string continuations (id: "")': _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, "", arguments="1}"))
    ),
    "no id at all": _finished(_chunk(_fragment(0, name="get_a", arguments='{"a":1}'))),
    "initial null id": _finished(
        _chunk(_fragment(0, None, "get_a", '{"a":')), _chunk(_fragment(0, "call_1", arguments="1}"))
    ),
    "missing index": _finished(_chunk(_fragment(_ABSENT, "call_1", "get_a", '{"a":1}'))),
    "arguments not a string": _finished(
        _chunk(_fragment(0, "call_1", "get_a", '{"a":')), _chunk(_fragment(0, arguments=1))
    ),
    'finish_reason "length"': [
        _chunk(_fragment(0, "call_1", "get_a", '{"a":1}')),
        _chunk(finish_reason="length"),
        DONE,
    ],
}
"""Named recorded responses, one per quirk (the rows of the quirks table)."""
