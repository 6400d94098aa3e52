"""Adapters for third-party assemblers, against the real libraries (issue 8).

For every quirk stream and every adapter: the exact ``etf.divergence.kind`` values recorded,
and the caller sees exactly what the unwrapped library returns or raises.
"""

from __future__ import annotations

import functools
import io
import operator
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI
from langchain_openai.chat_models.base import _convert_delta_to_message_chunk
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from etf_otel.cli._replay_assemblers import render_comparison, run_assembler
from etf_otel.core._divergence import DivergenceKind
from etf_otel.instrumentation import Instrumentation, instrument_assembler
from etf_otel.integrations.langchain import (
    LANGCHAIN_ADAPTER,
    LangChainAccumulator,
    instrument_langchain,
    message_calls,
    observe_message_stream,
)
from etf_otel.integrations.openai import instrument_accumulator, instrument_openai
from etf_otel.integrations.openai._state import OPENAI_STATE_ADAPTER, completion_calls
from etf_otel.protocols._chat_completions import DONE
from etf_otel.testing import QUIRK_STREAMS, QUIRK_TABLES, LocalChatServer, Script
from tests.integrations.support import divergence_kinds, in_span, outcome_of

from ..conftest import Captured

REQUIRED = [
    "clean multi-call stream",
    "null continuations",
    "repeated ids",
    "repeated names",
    "conflicting ids",
    "all calls on index 0",
    "first index 1",
    "type: null",
    "cut mid-arguments",
]

OPENAI_KINDS: dict[str, list[str]] = {
    "clean multi-call stream": [],
    "null continuations": [],
    "repeated ids": ["id_concatenated"],
    "repeated names": ["name_concatenated"],
    "conflicting ids": ["id_concatenated"],
    "all calls on index 0": ["id_concatenated", "name_concatenated"],
    "first index 1": ["assembler_raised"],
    "type: null": ["assembler_raised"],
    "cut mid-arguments": [],
    'finish_reason "length"': ["assembler_raised"],
    "missing index": ["assembler_raised"],
}

LANGCHAIN_KINDS: dict[str, list[str]] = {
    "clean multi-call stream": [],
    "null continuations": [],
    "repeated ids": [],
    "repeated names": ["name_concatenated"],
    "conflicting ids": ["arguments_differ", "call_split"],
    "all calls on index 0": ["arguments_differ", "call_split"],
    "first index 1": [],
    "type: null": [],
    "cut mid-arguments": ["arguments_differ"],
    "arguments not a string": ["assembler_raised"],
}


def _sdk_chunks(chunks: list[object]) -> list[ChatCompletionChunk]:
    out = []
    for chunk in chunks:
        if chunk == DONE:
            break
        assert isinstance(chunk, dict)
        out.append(ChatCompletionChunk.construct(**chunk))
    return out


# --- openai: ChatCompletionStreamState -------------------------------------------------------


def _drive_state(state: Any, chunks: list[ChatCompletionChunk]) -> Any:
    events = [[event.model_dump() for event in state.handle_chunk(chunk)] for chunk in chunks]
    return events, state.get_final_completion().model_dump()


@pytest.mark.parametrize("name", list(OPENAI_KINDS))
def test_openai_state(captured: Captured, name: str) -> None:
    chunks = _sdk_chunks(QUIRK_STREAMS[name])
    expected = outcome_of(lambda: _drive_state(ChatCompletionStreamState(), chunks))
    etf = captured.instrumentation()
    seen = in_span(
        captured,
        lambda: _drive_state(
            instrument_assembler(ChatCompletionStreamState(), instrumentation=etf, adapter=OPENAI_STATE_ADAPTER),
            chunks,
        ),
    )
    assert seen == expected
    assert divergence_kinds(captured) == OPENAI_KINDS[name]
    assert (expected[0] == "raised") == ("assembler_raised" in OPENAI_KINDS[name])


def test_openai_state_convenience_and_forwarding(captured: Captured) -> None:
    state = instrument_accumulator(ChatCompletionStreamState(), instrumentation=captured.instrumentation())
    for chunk in _sdk_chunks(QUIRK_STREAMS["repeated ids"]):
        state.handle_chunk(chunk)
    assert completion_calls(state.current_completion_snapshot) == [("call_1call_1", "get_a", '{"a":1}')]
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        state.get_final_completion()
    assert divergence_kinds(captured) == ["id_concatenated"]
    assert [span.name for span in captured.spans("assemble_response")] == ["assemble_response"]


def test_divergence_values_never_recorded(captured: Captured) -> None:
    etf = captured.instrumentation()
    in_span(
        captured,
        lambda: _drive_state(
            instrument_assembler(ChatCompletionStreamState(), instrumentation=etf, adapter=OPENAI_STATE_ADAPTER),
            _sdk_chunks(QUIRK_STREAMS["conflicting ids"]),
        ),
    )
    text = repr([(span.attributes, [e.attributes for e in span.events]) for span in captured.spans()])
    assert "call_1call_2" not in text and "call_2" not in text


# --- openai: chat.completions.stream(...) over real HTTP ------------------------------------


def _helper_run(client: openai.OpenAI, wrap: Callable[[Any], Any] | None) -> Any:
    manager = client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}])
    if wrap is not None:
        manager = wrap(manager)
    with manager as stream:
        types = [event.type for event in stream]
        return types, stream.get_final_completion().model_dump()


def _script(name: str) -> Script:
    return Script(events=[event for event in QUIRK_STREAMS[name] if isinstance(event, (dict, str))])


@pytest.mark.parametrize("name", list(OPENAI_KINDS))
def test_openai_stream_helper(captured: Captured, server: LocalChatServer, name: str) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    server.enqueue(_script(name))
    expected = outcome_of(lambda: _helper_run(client, None))
    server.enqueue(_script(name))
    etf = captured.instrumentation()
    seen = in_span(captured, lambda: _helper_run(client, lambda m: instrument_accumulator(m, instrumentation=etf)))
    assert seen == expected
    assert divergence_kinds(captured) == OPENAI_KINDS[name]


def test_openai_stream_helper_iteration_only_and_instrumentor(captured: Captured, server: LocalChatServer) -> None:
    """Iterating the events is enough; with the instrumentor on, the response is recorded once."""
    instrumentor = instrument_openai(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider)
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        server.enqueue(_script("repeated names"))
        with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
            with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream:
                same = instrument_accumulator(stream, instrumentation=instrumentor.instrumentation)
                assert same is stream
                for _ in stream:
                    pass
    finally:
        instrumentor.uninstrument()
    assert divergence_kinds(captured) == ["name_concatenated"]
    assert len(captured.spans("assemble_response")) == 1


def test_openai_stream_already_consumed_is_left_alone(captured: Captured, server: LocalChatServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    server.enqueue(_script("repeated ids"))
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream:
        next(iter(stream))
        state = stream._state
        assert instrument_accumulator(stream, instrumentation=captured.instrumentation()) is stream
        assert stream._state is state
        stream.until_done()


# --- LangChain: AIMessageChunk accumulation ---------------------------------------------------


def _langchain_unwrapped(chunks: list[object]) -> Any:
    """The real libraries directly: langchain-openai's conversion, then ``+``."""
    messages = [
        _convert_delta_to_message_chunk(chunk["choices"][0]["delta"], AIMessageChunk)
        for chunk in chunks
        if isinstance(chunk, dict)
    ]
    summed: Any = functools.reduce(operator.add, messages)
    return summed.tool_calls, summed.invalid_tool_calls, summed.tool_call_chunks


def _langchain_wrapped(accumulator: Any, chunks: list[object]) -> Any:
    for chunk in chunks:
        accumulator.add(chunk)
    summed = accumulator.result()
    return summed.tool_calls, summed.invalid_tool_calls, summed.tool_call_chunks


@pytest.mark.parametrize("name", list(LANGCHAIN_KINDS))
def test_langchain_accumulator(captured: Captured, name: str) -> None:
    chunks = QUIRK_STREAMS[name]
    expected = outcome_of(lambda: _langchain_unwrapped(chunks))
    assert outcome_of(lambda: _langchain_wrapped(LangChainAccumulator(), chunks)) == expected
    etf = captured.instrumentation()
    seen = in_span(
        captured,
        lambda: _langchain_wrapped(
            instrument_assembler(LangChainAccumulator(), instrumentation=etf, adapter=LANGCHAIN_ADAPTER), chunks
        ),
    )
    assert seen == expected
    assert divergence_kinds(captured) == LANGCHAIN_KINDS[name]


def test_langchain_call_order_and_convenience(captured: Captured) -> None:
    accumulator = instrument_langchain(instrumentation=captured.instrumentation())
    for chunk in QUIRK_STREAMS["conflicting ids"]:
        accumulator.add(chunk)
    summed = accumulator.result()
    assert message_calls(summed) == [("call_1", "get_a", {}), ("call_2", None, "1}")]
    assert message_calls(None) == []


def _chat_run(model: ChatOpenAI, wrap: Callable[[Any], Any] | None) -> Any:
    stream = model.stream("hi")
    if wrap is not None:
        stream = wrap(stream)
    items = list(stream)
    summed = functools.reduce(operator.add, items)
    return summed.tool_calls, summed.invalid_tool_calls, summed.tool_call_chunks, [i.tool_call_chunks for i in items]


CHAT_OPENAI_KINDS = {name: LANGCHAIN_KINDS[name] for name in REQUIRED}


@pytest.mark.parametrize("name", REQUIRED)
def test_chat_openai_stream(captured: Captured, server: LocalChatServer, name: str) -> None:
    model = ChatOpenAI(base_url=server.base_url, api_key="x", model="m", max_retries=0)  # type: ignore[arg-type]
    server.enqueue(_script(name))
    expected = outcome_of(lambda: _chat_run(model, None))
    server.enqueue(_script(name))
    etf = captured.instrumentation()
    seen = in_span(
        captured,
        lambda: _chat_run(model, lambda s: observe_message_stream(s, instrumentation=etf, record_response=True)),
    )
    assert seen == expected
    assert divergence_kinds(captured) == CHAT_OPENAI_KINDS[name]
    assert len(captured.spans("assemble_response")) == 1


def test_message_stream_yields_the_same_objects(captured: Captured) -> None:
    messages = [m for m in (LangChainAccumulator().add(c) for c in QUIRK_STREAMS["repeated names"]) if m is not None]
    seen = list(observe_message_stream(iter(messages), instrumentation=captured.instrumentation()))
    assert all(a is b for a, b in zip(seen, messages, strict=True))


def test_message_stream_connection_error_reaches_caller(captured: Captured, server: LocalChatServer) -> None:
    model = ChatOpenAI(base_url=server.base_url, api_key="x", model="m", max_retries=0)  # type: ignore[arg-type]
    events = [e for e in QUIRK_STREAMS["cut mid-arguments"] if isinstance(e, dict)]
    server.enqueue(Script(events=events, cut_after=1))
    expected = outcome_of(lambda: _chat_run(model, None))
    server.enqueue(Script(events=events, cut_after=1))
    etf = captured.instrumentation()
    seen = in_span(captured, lambda: _chat_run(model, lambda s: observe_message_stream(s, instrumentation=etf)))
    assert expected[0] == "raised" and seen[0] == "raised" and seen[1][0] is expected[1][0]
    assert divergence_kinds(captured) == []


# --- replay --assembler ------------------------------------------------------------------------


@pytest.mark.parametrize("assembler", ["openai", "langchain", "reference"])
def test_run_assembler_matches_adapters(assembler: str) -> None:
    reference: dict[str, list[str]] = {name: [] for name in REQUIRED}
    tables: dict[str, dict[str, list[str]]] = {"openai": OPENAI_KINDS, "langchain": LANGCHAIN_KINDS}
    table = tables.get(assembler, reference)
    for name, kinds in table.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            comparison = run_assembler(assembler, QUIRK_STREAMS[name])
        assert comparison.divergences == kinds, name
        assert (comparison.raised is not None) == ("assembler_raised" in kinds), name


def test_comparison_document_and_rendering() -> None:
    from rich.console import Console

    comparison = run_assembler("openai", QUIRK_STREAMS["repeated ids"])
    document = comparison.to_dict()
    assert document["divergences"] == ["id_concatenated"]
    assert document["calls"] == [{"id": "call_1call_1", "name": "get_a"}]
    assert document["rules"]["calls"][0]["id"] == "call_1"
    assert "arguments" not in document["rules"]["calls"][0]
    assert comparison.to_dict(show_arguments=True)["calls"][0]["arguments"] == '{"a":1}'
    console = Console(file=io.StringIO(), width=200)  # not a terminal: one tab-separated record per line
    render_comparison(comparison, console, show_arguments=True)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "call_1call_1" in text and "id_concatenated" in text
    with pytest.raises(ValueError):
        run_assembler("nope", [])


def test_divergence_kind_values_are_bounded() -> None:
    assert {kind.value for kind in DivergenceKind} >= {
        "id_concatenated",
        "id_replaced",
        "id_missing",
        "name_concatenated",
        "call_split",
        "calls_merged",
        "arguments_differ",
        "assembler_raised",
    }


def test_disabled_returns_objects_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "etf_otel")
    etf = Instrumentation()
    state = ChatCompletionStreamState()
    assert instrument_accumulator(state, instrumentation=etf) is state
    stream: Iterator[Any] = iter([])
    assert observe_message_stream(stream, instrumentation=etf) is stream
    manager = object()
    assert instrument_accumulator(manager, instrumentation=etf) is manager


# --- the quirks tables (scripts/quirks_table.py) -----------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
QUIRKS_SCRIPT = ROOT / "scripts" / "quirks_table.py"
QUIRKS_SECTIONS = {
    "chat_completions": "Chat Completions",
    "responses": "OpenAI Responses",
    "anthropic_messages": "Anthropic Messages",
    "gemini": "Gemini",
    "bedrock_converse": "Amazon Bedrock Converse",
    "ollama": "Ollama",
}


def _row_names(text: str) -> list[str]:
    """The first cell of each row of the first table in ``text`` (header and separator left out)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [line[2:].split(" | ", 1)[0] for line in lines[2:]]


def _page_section(page: str, heading: str) -> str:
    return page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_quirks_table_in_docs_is_what_the_libraries_do_today() -> None:
    """docs/quirks.md is what a fresh run of the script writes."""
    run = subprocess.run([sys.executable, str(QUIRKS_SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]


def test_quirks_page_has_a_section_per_protocol_and_a_row_per_quirk_stream() -> None:
    page = (ROOT / "docs" / "quirks.md").read_text(encoding="utf-8")
    assert set(QUIRK_TABLES) == set(QUIRKS_SECTIONS)
    for protocol, heading in QUIRKS_SECTIONS.items():
        assert _row_names(_page_section(page, heading)) == list(QUIRK_TABLES[protocol]), heading
    assert QUIRK_TABLES["chat_completions"] is QUIRK_STREAMS


def test_quirks_check_fails_when_a_cell_is_stale(tmp_path: Path) -> None:
    """The staleness check can fail: a page whose Anthropic cell no longer matches the SDK is reported."""
    page = (ROOT / "docs" / "quirks.md").read_text(encoding="utf-8")
    stale = tmp_path / "quirks.md"
    cell = "raises `IndexError`<br>divergence: `assembler_raised`"
    assert cell in _page_section(page, "Anthropic Messages")
    stale.write_text(page.replace(cell, "`toolu_1` `get_a` `{}`<br>divergence: none"), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(QUIRKS_SCRIPT), "--check", "--output", str(stale)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert run.stderr == f"{stale} out of date: run scripts/quirks_table.py\n"
