"""The ``anthropic`` SDK's accumulator (``accumulate_event`` as ``MessageStream`` drives it), wrapped.

For every Anthropic quirk stream: the exact ``etf.divergence.kind`` values recorded (spans
and the metric agree), and the caller sees exactly what the unwrapped SDK returns or raises:
hand-fed (:class:`MessageAccumulator` against a real ``MessageStream`` over the same events)
and through ``client.messages.stream(...)`` over real HTTP. Then ``etf-otel replay
--assembler`` on Anthropic recordings.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic._models import construct_type
from anthropic.lib.streaming import MessageStream
from anthropic.types import RawMessageStreamEvent

from etf_otel import attributes as A
from etf_otel.cli import main
from etf_otel.cli._replay_assemblers import (
    AssemblerUnavailable,
    check_assembler,
    run_assembler,
)
from etf_otel.instrumentation import Instrumentation, ObservedStream
from etf_otel.integrations.anthropic import MessageAccumulator, instrument_accumulator
from etf_otel.integrations.anthropic._instrumentor import instrument_anthropic
from etf_otel.integrations.anthropic._state import message_calls
from etf_otel.testing import ANTHROPIC_QUIRK_STREAMS, LocalChatServer, Script
from tests.integrations.support import divergence_kinds, in_span, outcome_of

from ..conftest import Captured

ANTHROPIC_KINDS: dict[str, list[str]] = {
    "clean multi-call stream": [],
    "parameter cut by max_tokens (input {})": [],
    "stop_reason without message_stop": [],
    "cut mid-arguments": ["arguments_differ"],
    "block index reused by a second call": ["arguments_differ", "call_split"],
    "delta after content_block_stop": ["arguments_differ"],
    "delta for an unknown index": ["assembler_raised"],
    "first tool block at index 1": ["assembler_raised"],
    "trailing text after the object": ["arguments_differ"],
    "complete input at block start, no deltas": [],
    "input at block start contradicts the deltas": [],
    "tool_use prepopulated in message_start": [],
    "second message_start (spliced)": ["call_split"],
}
"""What etf-otel records for ``anthropic`` 2.14.0's accumulator on each quirk stream."""

SDK_MESSAGES: dict[str, tuple[list[tuple[object, object, object]], object]] = {
    "parameter cut by max_tokens (input {})": ([("toolu_1", "get_a", {})], "max_tokens"),
    "cut mid-arguments": ([("toolu_1", "get_a", {})], None),
    "block index reused by a second call": ([("toolu_1", "get_a", {"a": 1}), ("toolu_2", "get_b", {})], "tool_use"),
    "delta after content_block_stop": ([("toolu_1", "get_a", {"a": 1, "b": 2})], "tool_use"),
    "trailing text after the object": ([("toolu_1", "get_a", {"a": 1})], "tool_use"),
    "second message_start (spliced)": ([("toolu_1", "get_a", {"a": 1}), ("toolu_2", "get_b", {})], "tool_use"),
}
"""What the SDK itself made of the quirks (tool calls, ``stop_reason``), pinned rather than derived."""

SDK_RAISES: dict[str, type[Exception]] = {
    "delta for an unknown index": IndexError,
    "first tool block at index 1": IndexError,
}


def _sdk_events(name: str) -> list[Any]:
    """The events as the SDK's transport builds them (``construct_type`` of the raw event union)."""
    return [construct_type(type_=RawMessageStreamEvent, value=event) for event in ANTHROPIC_QUIRK_STREAMS[name]]


class _RawEvents:
    """What ``MessageStream`` reads its events from, without HTTP: the raw events, in order."""

    def __init__(self, events: list[Any]) -> None:
        self._events = events

    def __iter__(self) -> Iterator[Any]:
        return iter(self._events)

    def close(self) -> None:
        pass


def _message_stream(name: str) -> Any:
    """The SDK's own ``MessageStream`` over the quirk's events: the unwrapped reference."""
    stream = MessageStream(_RawEvents(_sdk_events(name)), output_format=anthropic.NOT_GIVEN)  # type: ignore[arg-type]
    types = [event.type for event in stream]
    message = stream.get_final_message()
    return types, message.model_dump(), message_calls(message), message.stop_reason


def _accumulated(accumulator: Any, name: str) -> Any:
    """The same through a :class:`MessageAccumulator` (the event types are the raw ones the stream read)."""
    for event in _sdk_events(name):
        accumulator.accumulate(event)
    message = accumulator.get_final_message()
    return message.model_dump(), message_calls(message), message.stop_reason


def _without_event_types(outcome: tuple[str, Any]) -> tuple[str, Any]:
    return (outcome[0], outcome[1][1:]) if outcome[0] == "ok" else outcome


def test_every_quirk_row_is_pinned() -> None:
    assert set(ANTHROPIC_KINDS) == set(ANTHROPIC_QUIRK_STREAMS)


@pytest.mark.parametrize("name", list(ANTHROPIC_KINDS))
def test_anthropic_accumulator(captured: Captured, name: str) -> None:
    expected = _without_event_types(outcome_of(lambda: _message_stream(name)))
    assert outcome_of(lambda: _accumulated(MessageAccumulator(), name)) == expected
    etf = captured.instrumentation()
    seen = in_span(
        captured, lambda: _accumulated(instrument_accumulator(MessageAccumulator(), instrumentation=etf), name)
    )
    assert seen == expected
    assert divergence_kinds(captured) == ANTHROPIC_KINDS[name]
    if name in SDK_RAISES:
        assert expected[0] == "raised" and expected[1][0] is SDK_RAISES[name]
    else:
        assert expected[0] == "ok"
        if name in SDK_MESSAGES:
            assert (expected[1][1], expected[1][2]) == SDK_MESSAGES[name]
    (response,) = captured.spans("assemble_response")
    assert response.attributes is not None and response.attributes[A.ETF_PROTOCOL] == "anthropic_messages"


def test_max_tokens_placeholder_is_what_the_rules_assemble_and_refuse() -> None:
    """No divergence on a ``{}`` cut by max_tokens: the SDK and the rules agree; only the rules refuse it."""
    comparison = run_assembler("anthropic", ANTHROPIC_QUIRK_STREAMS["parameter cut by max_tokens (input {})"])
    assert comparison.calls == [("toolu_1", "get_a", {})]
    assert comparison.divergences == []
    (call,) = comparison.rules.calls
    assert call.arguments == "{}" and [category.value for category in call.categories] == ["incomplete_response"]
    assert not comparison.rules.dispatchable


def test_events_before_message_start_are_skipped_as_the_stream_skips_them() -> None:
    events = _sdk_events("clean multi-call stream")
    accumulator = MessageAccumulator()
    assert accumulator.accumulate(events[1]) is None
    with pytest.raises(AssertionError):
        accumulator.get_final_message()
    for event in events:
        accumulator.accumulate(event)
    assert [call[0] for call in message_calls(accumulator.current_message_snapshot)] == ["toolu_1", "toolu_2"]


def test_dict_events_are_converted_as_the_sdk_converts_them(captured: Captured) -> None:
    accumulator = instrument_accumulator(MessageAccumulator(), instrumentation=captured.instrumentation())
    for event in ANTHROPIC_QUIRK_STREAMS["second message_start (spliced)"]:
        accumulator.accumulate(event)
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        message = accumulator.get_final_message()
    assert message_calls(message) == SDK_MESSAGES["second message_start (spliced)"][0]
    assert divergence_kinds(captured) == ["call_split"]
    (response,) = captured.spans("assemble_response")
    assert response.attributes is not None and response.attributes[A.ETF_STREAM_STATE] == "truncated"


def test_raising_event_reaches_the_caller_unchanged(captured: Captured) -> None:
    accumulator = instrument_accumulator(MessageAccumulator(), instrumentation=captured.instrumentation())
    events = _sdk_events("delta for an unknown index")
    for event in events[:3]:
        accumulator.accumulate(event)
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        with pytest.raises(IndexError) as raised:
            accumulator.accumulate(events[3])
    assert type(raised.value) is IndexError and raised.value.args == ("list index out of range",)
    assert divergence_kinds(captured) == ["assembler_raised"]
    (response,) = captured.spans("assemble_response")
    assert response.attributes is not None and response.attributes[A.ETF_STREAM_STATE] == "failed"


def test_divergence_values_never_recorded(captured: Captured) -> None:
    etf = captured.instrumentation()
    in_span(
        captured,
        lambda: _accumulated(
            instrument_accumulator(MessageAccumulator(), instrumentation=etf), "delta after content_block_stop"
        ),
    )
    text = repr([(span.attributes, [e.attributes for e in span.events]) for span in captured.spans()])
    assert '"b"' not in text and "'b'" not in text


# --- client.messages.stream(...) over real HTTP --------------------------------------------------


def _client(server: LocalChatServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.root_url, api_key="test", max_retries=0)


def _script(name: str, **options: Any) -> Script:
    return Script(events=ANTHROPIC_QUIRK_STREAMS[name], named=True, **options)  # type: ignore[arg-type]


def _helper_run(client: anthropic.Anthropic, wrap: Callable[[Any], Any] | None) -> Any:
    manager = client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    if wrap is not None:
        manager = wrap(manager)
    with manager as stream:
        types = [event.type for event in stream]
        message = stream.get_final_message()
        return types, message.model_dump(), message_calls(message)


@pytest.mark.parametrize("name", list(ANTHROPIC_KINDS))
def test_messages_stream_helper(captured: Captured, server: LocalChatServer, name: str) -> None:
    client = _client(server)
    server.enqueue(_script(name))
    expected = outcome_of(lambda: _helper_run(client, None))
    server.enqueue(_script(name))
    etf = captured.instrumentation()
    seen = in_span(captured, lambda: _helper_run(client, lambda m: instrument_accumulator(m, instrumentation=etf)))
    assert seen == expected
    assert divergence_kinds(captured) == ANTHROPIC_KINDS[name]
    assert len(captured.spans("assemble_response")) == 1


def test_iterating_the_text_stream_is_enough(captured: Captured, server: LocalChatServer) -> None:
    client = _client(server)
    server.enqueue(_script("trailing text after the object"))
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        with client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as stream:
            assert instrument_accumulator(stream, instrumentation=captured.instrumentation()) is stream
            assert list(stream.text_stream) == []
    assert divergence_kinds(captured) == ["arguments_differ"]


def test_with_the_instrumentor_the_message_is_recorded_once(captured: Captured, server: LocalChatServer) -> None:
    """The instrumentor already observes the raw stream: the wrapper then only adds the divergence check."""
    instrumentor = instrument_anthropic(
        tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider
    )
    try:
        server.enqueue(_script("block index reused by a second call"))
        with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
            manager = _client(server).messages.stream(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
            )
            with manager as stream:
                assert isinstance(stream._raw_stream, ObservedStream)
                instrument_accumulator(stream, instrumentation=instrumentor.instrumentation)
                calls = message_calls(stream.get_final_message())
    finally:
        instrumentor.uninstrument()
    assert calls == SDK_MESSAGES["block index reused by a second call"][0]
    assert divergence_kinds(captured) == ["arguments_differ", "call_split"]
    assert len(captured.spans("assemble_response")) == 1


def test_dropped_connection_is_the_transport_not_the_accumulator(captured: Captured, server: LocalChatServer) -> None:
    client = _client(server)
    server.enqueue(_script("clean multi-call stream", cut_after=6))
    expected = outcome_of(lambda: _helper_run(client, None))
    server.enqueue(_script("clean multi-call stream", cut_after=6))
    etf = captured.instrumentation()
    seen = in_span(captured, lambda: _helper_run(client, lambda m: instrument_accumulator(m, instrumentation=etf)))
    assert expected[0] == "raised" and seen[0] == "raised" and seen[1][0] is expected[1][0]
    assert expected[1][0].__name__ == "RemoteProtocolError"  # anthropic 2.14 lets httpx2's error through
    assert divergence_kinds(captured) == []


def test_error_event_is_the_transport_not_the_accumulator(captured: Captured, server: LocalChatServer) -> None:
    events = [*ANTHROPIC_QUIRK_STREAMS["cut mid-arguments"], {"type": "error", "error": {"type": "overloaded_error"}}]
    client = _client(server)
    server.enqueue(Script(events=events, named=True))
    etf = captured.instrumentation()
    seen = in_span(captured, lambda: _helper_run(client, lambda m: instrument_accumulator(m, instrumentation=etf)))
    assert seen[0] == "raised" and issubclass(seen[1][0], anthropic.APIStatusError)
    assert divergence_kinds(captured) == []


def test_async_stream(captured: Captured, server: LocalChatServer) -> None:
    async def run(wrap: bool) -> Any:
        client = anthropic.AsyncAnthropic(base_url=server.root_url, api_key="test", max_retries=0)
        manager = client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        if wrap:
            manager = instrument_accumulator(manager, instrumentation=captured.instrumentation())
        async with manager as stream:
            try:
                types = [event.type async for event in stream]
            except IndexError as error:
                return "raised", type(error)
            return types, message_calls(await stream.get_final_message())

    for name in ("block index reused by a second call", "first tool block at index 1"):
        server.enqueue(_script(name))
        expected = asyncio.run(run(False))
        server.enqueue(_script(name))
        with captured.tracer_provider.get_tracer("test").start_as_current_span(name):
            assert asyncio.run(run(True)) == expected
    assert divergence_kinds(captured) == ["arguments_differ", "assembler_raised", "call_split"]


def test_stream_already_consumed_is_left_alone(captured: Captured, server: LocalChatServer) -> None:
    server.enqueue(_script("clean multi-call stream"))
    with _client(server).messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]) as s:
        next(iter(s))
        raw = s._raw_stream
        assert instrument_accumulator(s, instrumentation=captured.instrumentation()) is s
        assert s._raw_stream is raw
        s.until_done()


def test_disabled_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "etf_otel")
    etf = Instrumentation()
    stream, manager, accumulator = object(), object(), MessageAccumulator()
    assert instrument_accumulator(stream, instrumentation=etf) is stream
    assert instrument_accumulator(manager, instrumentation=etf) is manager
    assert instrument_accumulator(accumulator, instrumentation=etf) is accumulator


# --- replay --assembler ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ANTHROPIC_KINDS))
def test_run_assembler(name: str) -> None:
    comparison = run_assembler("anthropic", ANTHROPIC_QUIRK_STREAMS[name], protocol="anthropic_messages")
    assert comparison.divergences == ANTHROPIC_KINDS[name]
    assert comparison.raised == (SDK_RAISES[name].__name__ if name in SDK_RAISES else None)
    assert run_assembler("reference", ANTHROPIC_QUIRK_STREAMS[name]).divergences == []


def test_replay_drops_ping_and_stops_at_an_error_event() -> None:
    """As the SDK's transport does: ``ping`` never reaches the accumulator, ``error`` raises before it."""
    events = ANTHROPIC_QUIRK_STREAMS["clean multi-call stream"]
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}
    with_ping = [events[0], {"type": "ping"}, *events[1:]]
    assert run_assembler("anthropic", with_ping).calls == run_assembler("anthropic", events).calls
    cut = run_assembler("anthropic", [*events[:5], error, *events[5:]])
    assert cut.raised is None and cut.calls == [("toolu_1", "get_a", {})]


def test_assemblers_that_do_not_read_anthropic_are_refused() -> None:
    for name in ("openai", "langchain"):
        with pytest.raises(AssemblerUnavailable) as refused:
            check_assembler(name, "anthropic_messages")
        assert "\n" not in str(refused.value)
        assert str(refused.value).startswith(f"--assembler {name} does not read anthropic_messages recordings")
    with pytest.raises(AssemblerUnavailable, match="reads anthropic_messages; for chat_completions"):
        check_assembler("anthropic", "chat_completions")


def test_replay_offers_every_assembler_name() -> None:
    from etf_otel.cli._replay import ASSEMBLER_NAMES
    from etf_otel.cli._replay_assemblers import ASSEMBLERS, ASSEMBLERS_BY_PROTOCOL

    assert tuple(ASSEMBLER_NAMES) == ASSEMBLERS
    assert {name for names in ASSEMBLERS_BY_PROTOCOL.values() for name in names} == set(ASSEMBLERS)


def test_missing_library_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic.lib.streaming", None)
    with pytest.raises(AssemblerUnavailable) as refused:
        run_assembler("anthropic", ANTHROPIC_QUIRK_STREAMS["clean multi-call stream"])
    assert str(refused.value) == (
        "--assembler anthropic needs anthropic, which is not installed: pip install 'etf-otel[anthropic]'"
    )
    assert isinstance(refused.value, ImportError)  # what replay catches to exit 2


def replay(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["replay", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _recording(tmp_path: Path, events: list[object]) -> Path:
    path = tmp_path / "recording.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    return path


def test_replay_assembler_anthropic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recording(tmp_path, ANTHROPIC_QUIRK_STREAMS["block index reused by a second call"])
    code, out, _ = replay(capsys, str(path), "--assembler", "anthropic", "--json")
    assert code == 1
    document = json.loads(out)
    assert document["assembler"]["divergences"] == ["arguments_differ", "call_split"]
    assert document["assembler"]["calls"] == [{"id": "toolu_1", "name": "get_a"}, {"id": "toolu_2", "name": "get_b"}]


def test_replay_assembler_anthropic_without_divergence_still_reports_the_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _recording(tmp_path, ANTHROPIC_QUIRK_STREAMS["parameter cut by max_tokens (input {})"])
    code, out, _ = replay(capsys, str(path), "--assembler", "anthropic", "--json")
    assert code == 1  # the rules refuse the call (incomplete_response) though the SDK agrees with them
    document = json.loads(out)
    assert document["assembler"]["divergences"] == [] and document["dispatchable"] is False


def test_replay_openai_on_an_anthropic_recording_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recording(tmp_path, ANTHROPIC_QUIRK_STREAMS["clean multi-call stream"])
    code, out, err = replay(capsys, str(path), "--assembler", "openai")
    assert (code, out) == (2, "")
    assert err.startswith("etf-otel replay: --assembler openai does not read anthropic_messages recordings")
    assert err.count("\n") == 1


def test_replay_missing_library_is_exit_2_with_the_install_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _recording(tmp_path, ANTHROPIC_QUIRK_STREAMS["clean multi-call stream"])
    monkeypatch.setitem(sys.modules, "anthropic.lib.streaming", None)
    code, out, err = replay(capsys, str(path), "--assembler", "anthropic")
    assert (code, out) == (2, "")
    assert err == (
        "etf-otel replay: --assembler anthropic needs anthropic, which is not installed:"
        " pip install 'etf-otel[anthropic]'\n"
    )
