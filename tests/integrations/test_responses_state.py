"""The ``openai`` SDK's Responses accumulator (``ResponseStreamState``), wrapped, against the real library.

For every Responses quirk stream: the exact ``etf.divergence.kind`` values recorded (spans
and the metric agree), and the caller sees exactly what the unwrapped SDK returns or raises,
by hand-fed state and through ``client.responses.stream(...)`` over real HTTP. Then
``etf-otel replay --assembler`` on Responses recordings.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from openai._models import construct_type
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseStreamEvent

from etf_otel import attributes as A
from etf_otel.cli import main
from etf_otel.cli._replay_assemblers import (
    AssemblerUnavailable,
    check_assembler,
    run_assembler,
)
from etf_otel.instrumentation import Instrumentation, ObservedStream
from etf_otel.integrations.openai import instrument_accumulator
from etf_otel.integrations.openai._instrumentor import instrument_openai
from etf_otel.integrations.openai._responses_state import (
    NO_COMPLETED_RESPONSE,
    ResponseStateWithFinal,
    response_calls,
)
from etf_otel.testing import RESPONSES_QUIRK_STREAMS, LocalChatServer, Script
from tests.integrations.support import divergence_kinds, in_span, outcome_of

from ..conftest import Captured

RESPONSES_KINDS: dict[str, list[str]] = {
    "clean multi-call stream": [],
    "interleaved calls": [],
    "done events only (no deltas)": [],
    "call_id changed in response.completed": ["id_replaced"],
    "call_id changed in output_item.done": ["assembler_raised"],
    'empty call_id ("") on output_item.added': ["assembler_raised"],
    "item id rotated (call_id kept)": ["assembler_raised"],
    "contradicting done events": ["arguments_differ"],
    "delta before output_item.added": ["assembler_raised"],
    "delta for an unknown output_index": ["assembler_raised"],
    "stray delta after arguments.done": [],
    "output_index reused by a second call": ["assembler_raised"],
    "response.completed with empty output": ["calls_merged"],
    "no output_item.done": [],
    "cut mid-arguments": ["assembler_raised"],
    "response.incomplete (max_output_tokens)": ["assembler_raised"],
    "second response.created (spliced)": ["assembler_raised"],
}
"""What etf-otel records for ``openai`` 3.51's ``ResponseStreamState`` on each quirk stream."""

SDK_CALLS: dict[str, list[tuple[object, object, object]]] = {
    "call_id changed in response.completed": [("call_9", "get_a", '{"a":1}')],
    "contradicting done events": [("call_1", "get_a", '{"a":4}')],
    "response.completed with empty output": [],
    "stray delta after arguments.done": [("call_1", "get_a", '{"a":1}')],
}
"""What the SDK itself assembled where the rules see something else (pinned, not derived)."""

SDK_RAISES: dict[str, str] = {
    "call_id changed in output_item.done": "Completed output item identity changed.",
    'empty call_id ("") on output_item.added': "Completed output item identity changed.",
    "item id rotated (call_id kept)": "Completed output item identity changed.",
    "delta before output_item.added": "Received a content event for output index 0 before receiving its output item",
    "delta for an unknown output_index": (
        "Received a content event for output index 1 before receiving its output item"
    ),
    "output_index reused by a second call": "Duplicate response output index 0.",
    "cut mid-arguments": NO_COMPLETED_RESPONSE,
    "response.incomplete (max_output_tokens)": NO_COMPLETED_RESPONSE,
    "second response.created (spliced)": "Lifecycle response identity changed.",
}
"""The ``RuntimeError`` message of each quirk the SDK refuses."""


def _new_state() -> ResponseStreamState:
    return ResponseStreamState(input_tools=omit, text_format=omit)


def _sdk_events(name: str) -> list[Any]:
    """The events as the SDK's SSE decoder builds them (``construct_type`` of the stream event union)."""
    return [construct_type(type_=ResponseStreamEvent, value=event) for event in RESPONSES_QUIRK_STREAMS[name]]


def _final(state: Any) -> Any:
    """``ResponseStream.get_final_response`` once the events are consumed."""
    response = state._completed_response
    if not response:
        raise RuntimeError(NO_COMPLETED_RESPONSE)
    return response


def _drive(state: Any, events: list[Any], final: Callable[[Any], Any]) -> Any:
    fired = [[event.model_dump() for event in state.handle_event(event)] for event in events]
    response = final(state)
    return fired, response.model_dump(), response_calls(response)


def test_every_quirk_row_is_pinned() -> None:
    assert set(RESPONSES_KINDS) == set(RESPONSES_QUIRK_STREAMS)


@pytest.mark.parametrize("name", list(RESPONSES_KINDS))
def test_responses_state(captured: Captured, name: str) -> None:
    expected = outcome_of(
        lambda: _drive(ResponseStreamState(input_tools=omit, text_format=omit), _sdk_events(name), _final)
    )
    etf = captured.instrumentation()
    seen = in_span(
        captured,
        lambda: _drive(
            instrument_accumulator(_new_state(), instrumentation=etf),
            _sdk_events(name),
            lambda s: s.get_final_response(),
        ),
    )
    assert seen == expected
    assert divergence_kinds(captured) == RESPONSES_KINDS[name]
    if name in SDK_RAISES:
        assert expected == ("raised", (RuntimeError, (SDK_RAISES[name],)))
    else:
        assert expected[0] == "ok"
        if name in SDK_CALLS:
            assert expected[1][2] == SDK_CALLS[name]
    (response,) = captured.spans("assemble_response")
    assert response.attributes is not None and response.attributes[A.ETF_PROTOCOL] == "responses"


def test_the_sdk_takes_the_terminal_output_and_ignores_the_done_snapshots() -> None:
    """What the SDK does on its own, pinned: ``response.completed`` wins over deltas and both done events."""
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in _sdk_events("contradicting done events"):
        state.handle_event(event)
    assert response_calls(state._completed_response) == [("call_1", "get_a", '{"a":4}')]
    assert state._output_items[0].arguments == '{"a":1}'  # the deltas, as its snapshot events report them


def test_state_forwards_and_records_one_response(captured: Captured) -> None:
    state = instrument_accumulator(_new_state(), instrumentation=captured.instrumentation())
    for event in _sdk_events("call_id changed in response.completed"):
        state.handle_event(event)
    assert state._output_items[0].call_id == "call_1"  # forwarded to the SDK's state
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        assert response_calls(state.get_final_response()) == [("call_9", "get_a", '{"a":1}')]
    assert divergence_kinds(captured) == ["id_replaced"]
    assert len(captured.spans("assemble_response")) == 1
    assert [span.name for span in captured.spans("assemble_tool_call")] == ["assemble_tool_call get_a"]


def test_divergence_values_never_recorded(captured: Captured) -> None:
    etf = captured.instrumentation()
    in_span(
        captured,
        lambda: _drive(
            instrument_accumulator(_new_state(), instrumentation=etf),
            _sdk_events("call_id changed in response.completed"),
            lambda s: s.get_final_response(),
        ),
    )
    text = repr([(span.attributes, [e.attributes for e in span.events]) for span in captured.spans()])
    assert "call_9" not in text


def test_raising_event_reaches_the_caller_as_the_sdk_raised_it(captured: Captured) -> None:
    state = instrument_accumulator(_new_state(), instrumentation=captured.instrumentation())
    events = _sdk_events("delta before output_item.added")
    state.handle_event(events[0])
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        with pytest.raises(RuntimeError, match="before receiving its output item") as raised:
            state.handle_event(events[1])
    assert type(raised.value) is RuntimeError
    assert divergence_kinds(captured) == ["assembler_raised"]
    (response,) = captured.spans("assemble_response")
    assert response.attributes is not None and response.attributes[A.ETF_STREAM_STATE] == "failed"


# --- client.responses.stream(...) over real HTTP -------------------------------------------------


def _script(name: str) -> Script:
    return Script(events=RESPONSES_QUIRK_STREAMS[name], named=True)  # type: ignore[arg-type]


def _helper_run(client: openai.OpenAI, wrap: Callable[[Any], Any] | None) -> Any:
    manager = client.responses.stream(model="m", input="hi")
    if wrap is not None:
        manager = wrap(manager)
    with manager as stream:
        types = [event.type for event in stream]
        response = stream.get_final_response()
        return types, response.model_dump(), response_calls(response)


@pytest.mark.parametrize("name", list(RESPONSES_KINDS))
def test_responses_stream_helper(captured: Captured, server: LocalChatServer, name: str) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    server.enqueue(_script(name))
    expected = outcome_of(lambda: _helper_run(client, None))
    server.enqueue(_script(name))
    etf = captured.instrumentation()
    seen = in_span(captured, lambda: _helper_run(client, lambda m: instrument_accumulator(m, instrumentation=etf)))
    assert seen == expected
    assert divergence_kinds(captured) == RESPONSES_KINDS[name]
    assert len(captured.spans("assemble_response")) == 1


def test_iterating_the_events_is_enough(captured: Captured, server: LocalChatServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    server.enqueue(_script("contradicting done events"))
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        with client.responses.stream(model="m", input="hi") as stream:
            assert instrument_accumulator(stream, instrumentation=captured.instrumentation()) is stream
            for _ in stream:
                pass
    assert divergence_kinds(captured) == ["arguments_differ"]


def test_with_the_instrumentor_the_response_is_recorded_once(captured: Captured, server: LocalChatServer) -> None:
    """The instrumentor already observes the raw stream: the wrapper then only adds the divergence check."""
    instrumentor = instrument_openai(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider)
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        server.enqueue(_script("call_id changed in response.completed"))
        with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
            with client.responses.stream(model="m", input="hi") as stream:
                assert isinstance(stream._raw_stream, ObservedStream)
                instrument_accumulator(stream, instrumentation=instrumentor.instrumentation)
                assert response_calls(stream.get_final_response()) == [("call_9", "get_a", '{"a":1}')]
    finally:
        instrumentor.uninstrument()
    assert divergence_kinds(captured) == ["id_replaced"]
    assert len(captured.spans("assemble_response")) == 1


def test_async_stream(captured: Captured, server: LocalChatServer) -> None:
    async def run(wrap: bool) -> Any:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        manager = client.responses.stream(model="m", input="hi")
        if wrap:
            manager = instrument_accumulator(manager, instrumentation=captured.instrumentation())
        async with manager as stream:
            types = [event.type async for event in stream]
            return types, response_calls(await stream.get_final_response())

    server.enqueue(_script("call_id changed in response.completed"))
    expected = asyncio.run(run(False))
    server.enqueue(_script("call_id changed in response.completed"))
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        assert asyncio.run(run(True)) == expected
    assert expected[1] == [("call_9", "get_a", '{"a":1}')]
    assert divergence_kinds(captured) == ["id_replaced"]


def test_stream_already_consumed_is_left_alone(captured: Captured, server: LocalChatServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    server.enqueue(_script("clean multi-call stream"))
    with client.responses.stream(model="m", input="hi") as stream:
        next(iter(stream))
        state = stream._state
        assert instrument_accumulator(stream, instrumentation=captured.instrumentation()) is stream
        assert stream._state is state
        stream.until_done()


def test_disabled_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "etf_otel")
    etf = Instrumentation()
    stream, manager = object(), object()
    assert instrument_accumulator(stream, instrumentation=etf) is stream
    assert instrument_accumulator(manager, instrumentation=etf) is manager
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    bare = instrument_accumulator(state, instrumentation=etf)
    assert type(bare) is ResponseStateWithFinal and bare.__wrapped__ is state


# --- replay --assembler ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RESPONSES_KINDS))
def test_run_assembler(name: str) -> None:
    comparison = run_assembler("openai", RESPONSES_QUIRK_STREAMS[name], protocol="responses")
    assert comparison.divergences == RESPONSES_KINDS[name]
    assert (comparison.raised == "RuntimeError") == (name in SDK_RAISES)
    assert run_assembler("reference", RESPONSES_QUIRK_STREAMS[name], protocol="responses").divergences == []


def test_run_assembler_detects_the_protocol() -> None:
    events = RESPONSES_QUIRK_STREAMS["call_id changed in response.completed"]
    assert run_assembler("openai", events).divergences == ["id_replaced"]


def test_assemblers_that_do_not_read_responses_are_refused() -> None:
    with pytest.raises(AssemblerUnavailable) as refused:
        check_assembler("langchain", "responses")
    assert str(refused.value) == (
        "--assembler langchain does not read responses recordings"
        " (it reads chat_completions; for responses: openai, reference)"
    )
    with pytest.raises(AssemblerUnavailable):
        run_assembler("anthropic", RESPONSES_QUIRK_STREAMS["clean multi-call stream"])
    with pytest.raises(ValueError, match="unknown assembler"):
        check_assembler("nope", "responses")


def replay(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["replay", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _recording(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "recording.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in RESPONSES_QUIRK_STREAMS[name]), encoding="utf-8")
    return path


def test_replay_assembler_openai_on_a_responses_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recording(tmp_path, "call_id changed in response.completed")
    code, out, _ = replay(capsys, str(path), "--assembler", "openai", "--json")
    assert code == 1
    document = json.loads(out)
    assert document["assembler"]["divergences"] == ["id_replaced"]
    assert document["assembler"]["calls"] == [{"id": "call_9", "name": "get_a"}]
    assert document["calls"][0]["id"] == "call_1"


def test_replay_assembler_that_does_not_fit_the_protocol_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recording(tmp_path, "clean multi-call stream")
    code, out, err = replay(capsys, str(path), "--assembler", "langchain")
    assert (code, out) == (2, "")
    assert err == (
        "etf-otel replay: --assembler langchain does not read responses recordings"
        " (it reads chat_completions; for responses: openai, reference)\n"
    )


def test_replay_assembler_reference_on_a_responses_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recording(tmp_path, "clean multi-call stream")
    code, out, _ = replay(capsys, str(path), "--assembler", "reference", "--json")
    assert code == 0
    document = json.loads(out)
    assert document["assembler"]["divergences"] == []
    assert [call["id"] for call in document["assembler"]["calls"]] == ["call_1", "call_2"]
