"""Canaries: raw ids, names, arguments and results never leak (docs/telemetry.md).

Unique canary strings are planted in arguments, rejected ids (every rejection kind),
rejected names, results, exception messages and unknown ids, then run through every
wrapper (sync and async streams, an assembler, a host, guard mode, a conversation) with
spans, metrics and logs all captured. Everything exported is serialized and searched.

* Content capture off (the default): no canary anywhere.
* Content capture on: arguments and results appear on spans (truncated), never in metrics
  or logs; rejected ids, rejected names and exception messages never appear anywhere.

Preserved (established) ids may appear: that is what ``gen_ai.tool.call.id`` is for.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import traceback
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from etf_otel import attributes as A
from etf_otel.core._linkage import Conversation
from etf_otel.instrumentation import AssemblerAdapter, GuardRefusedError, Instrumentation
from etf_otel.instrumentation._safety import set_strict
from etf_otel.instrumentation._telemetry import DEFAULT_MAX_CONTENT_CHARS, Telemetry
from etf_otel.protocols._chat_completions import DONE, ReferenceAssembler
from etf_otel.testing.chat import MISSING, chunk, finished, fragment


def canary(label: str) -> str:
    return f"CANARY{label.upper()}{secrets.token_hex(6)}"


@dataclass
class Canaries:
    """Every planted value, by where it may legitimately appear."""

    never: dict[str, str] = field(default_factory=dict)
    """Rejected ids and names, exception messages, unknown ids: nowhere, ever."""
    content: dict[str, str] = field(default_factory=dict)
    """Arguments and results: on spans with content capture only."""

    def add_never(self, label: str) -> str:
        value = self.never[label] = canary(label)
        return value

    def add_content(self, label: str) -> str:
        value = self.content[label] = canary(label)
        return value


def args(value: str) -> str:
    return '{"q":"' + value + '"}'


def build(c: Canaries) -> dict[str, list[Any]]:
    """Streams covering every rejection kind, each carrying canaries."""
    number = 10**11 + secrets.randbelow(10**11)
    c.never["rejected_number"] = str(number)
    conflict = "call-" + c.add_never("rejected_conflict")
    return {
        "id_conflict": finished(
            chunk(fragment(0, "call-keep-1", "lookup", '{"q":"' + c.add_content("arg_conflict"))),
            chunk(fragment(0, conflict, arguments='"}')),
        ),
        "initial_null": finished(
            chunk(fragment(0, None, "lookup", args(c.add_content("arg_null")))),
            chunk(fragment(1, None, "lookup", '{"q":"')),
            chunk(fragment(1, "call-keep-2", arguments=c.add_content("arg_null_later") + '"}')),
        ),
        "empty_after_established": finished(
            chunk(fragment(0, "call-keep-3", "lookup", '{"q":"')),
            chunk(fragment(0, "", arguments=c.add_content("arg_empty") + '"}')),
        ),
        "unsupported_id_types": finished(
            chunk(fragment(0, [c.add_never("rejected_array")], "lookup", args(c.add_content("arg_array")))),
            chunk(fragment(1, {"k": c.add_never("rejected_object"), c.add_never("rejected_key"): 1}, "lookup", "{}")),
            chunk(fragment(2, number, "lookup", "{}")),
            chunk(fragment(3, "call-keep-4", "lookup", "{")),
            chunk(fragment(3, [{"deep": [c.add_never("rejected_nested")]}], arguments="}")),
            chunk(fragment(4, True, "lookup", "{}")),
        ),
        "missing_index": finished(
            chunk(fragment(0, "call-keep-5", "lookup", "{}")),
            chunk(
                fragment(MISSING, "call-" + c.add_never("rejected_no_index"), "n" + c.add_never("name_no_index")),
                fragment(None, "call-" + c.add_never("rejected_null_index"), arguments=c.add_content("arg_no_index")),
                fragment(-1, "call-" + c.add_never("rejected_negative_index")),
                fragment("0", "call-" + c.add_never("rejected_string_index")),
            ),
        ),
        "name_conflict": finished(
            chunk(fragment(0, "call-keep-6", "lookup", "{")),
            chunk(fragment(0, "call-keep-6", "tool" + c.add_never("rejected_name"), "}")),
        ),
        "odd_types": finished(
            chunk(fragment(0, "call-keep-7", {"n": c.add_never("name_object")}, "{}")),
            chunk(fragment(1, "call-keep-8", "lookup", [c.add_content("arg_list")])),
            chunk(fragment(2, "call-keep-9", "lookup", {"a": c.add_content("arg_object")})),
        ),
        "truncated": [chunk(fragment(0, "call-keep-10", "lookup", args(c.add_content("arg_truncated"))))],
        "valid": finished(
            chunk(fragment(0, "call-ok-1", "lookup", '{"q":"'), fragment(1, "call-ok-2", "save", "{")),
            chunk(fragment(0, None, arguments=c.add_content("arg_valid_1") + '"}')),
            chunk(fragment(1, arguments='"r":"' + c.add_content("arg_valid_2") + '"}')),
        ),
    }


def gen(chunks: Sequence[Any]) -> Iterator[Any]:
    yield from chunks


async def agen(chunks: Sequence[Any]) -> AsyncIterator[Any]:
    for item in chunks:
        await asyncio.sleep(0)
        yield item


def as_sdk_objects(chunks: Sequence[Any]) -> list[Any] | None:
    """The same stream as ``openai`` SDK objects, or ``None`` when the SDK's model rejects it."""
    try:
        return [item if item == DONE else ChatCompletionChunk.model_validate(item) for item in chunks]
    except ValueError:
        return None


class Host:
    def __init__(self, c: Canaries) -> None:
        self.result = {"answer": c.add_content("result")}
        self.message = c.add_never("exception_message")

    def execute(self, call: Any) -> Any:
        if call["function"]["name"] == "save":
            raise RuntimeError(self.message)
        return self.result


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def run_everything(instrumentation: Instrumentation, c: Canaries, *, guard_works: bool = True) -> None:
    """Every wrapper over every canary stream (``guard_works=False``: telemetry is broken, see test_faults)."""
    streams = build(c)
    for chunks in streams.values():
        list(instrumentation.stream(gen(chunks)))
        [item async for item in instrumentation.stream(agen(chunks))]
        sdk = as_sdk_objects(chunks)
        if sdk is not None:
            list(instrumentation.stream(gen(sdk)))
        assembler = instrumentation.assembler(ReferenceAssembler())
        for item in chunks:
            assembler.feed(item)
        assembler.finish()

    # A third-party assembler that diverges, with canaries in what it returns.
    class Diverging:
        def feed(self, item: Any) -> None:
            pass

        def finish(self) -> list[tuple[str, str, str]]:
            return [("call-" + c.add_never("divergent_id"), "n" + c.add_never("divergent_name"), "{}")]

    diverging = instrumentation.assembler(Diverging(), adapter=AssemblerAdapter(calls=lambda result: result))
    for item in streams["valid"]:
        diverging.feed(item)
    diverging.finish()

    # The host: proposals, a host error, an unknown id, guard refusals, a conversation.
    conversation = Conversation()
    list(instrumentation.stream(gen(streams["valid"]), conversation=conversation))
    host = Host(c)
    observed = instrumentation.host(host, conversation=conversation)
    arguments_1 = args(c.content["arg_valid_1"])
    observed.execute(call("call-ok-1", "lookup", arguments_1))
    with pytest.raises(RuntimeError):
        observed.execute(call("call-ok-2", "save", '{"r":"' + c.content["arg_valid_2"] + '"}'))
    observed.execute(call("call-" + c.add_never("unknown_id"), "lookup", args(c.add_content("arg_unknown"))))
    observed.execute(call("call-ok-1", "lookup", arguments_1))  # duplicate_result: the preserved id only

    guarded = instrumentation.host(host, guard=True)
    for refused in (
        call("call-" + c.never["rejected_conflict"], "lookup", "{}"),
        call("call-keep-1", "lookup", "{}"),
        call("call-keep-10", "lookup", "{}"),
        call("call-ok-1", "lookup", args(c.add_content("arg_divergent"))),
    ):
        try:
            guarded.execute(refused)
        except GuardRefusedError as refusal:
            assert refused["id"] not in str(refusal)
        else:
            assert not guard_works, "guard mode executed a call that is not a valid proposal"

    async def async_host(item: Any) -> Any:
        await asyncio.sleep(0)
        return {"async": c.add_content("async_result")}

    await instrumentation.host(async_host)(call("call-ok-1", "lookup", arguments_1))

    # The next request answers with tool messages, one of them unknown: orphaned_result.
    next_turn = instrumentation.stream(
        gen(streams["valid"]),
        conversation=conversation,
        tool_message_ids=["call-ok-1", "call-" + c.add_never("unknown_tool_message"), None],
    )
    list(next_turn)
    instrumentation.end_conversation(conversation)


# --- capturing and searching --------------------------------------------------------------


def spans_text(captured: Any) -> str:
    return "\n".join(span.to_json(indent=None) for span in captured.exporter.get_finished_spans())


def metrics_text(captured: Any) -> str:
    data = captured.reader.get_metrics_data()
    return data.to_json(indent=None) if data is not None else ""


def logs_text(caplog: pytest.LogCaptureFixture) -> str:
    parts: list[str] = [caplog.text]
    for record in caplog.records:
        parts += [record.name, record.getMessage(), str(record.msg), repr(record.args), repr(vars(record))]
        if record.exc_info:
            parts.append("".join(traceback.format_exception(*record.exc_info)))
        if record.exc_text:
            parts.append(record.exc_text)
    return "\n".join(parts)


def found(text: str, canaries: dict[str, str]) -> dict[str, str]:
    return {label: value for label, value in canaries.items() if value in text}


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="etf_otel")
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(A.ENV_CAPTURE_CONTENT, raising=False)


@pytest.mark.parametrize("capture_content", [False, None], ids=["explicit-off", "default-env-unset"])
async def test_no_canary_anywhere_with_content_capture_off(
    capture_content: bool | None, captured: Any, logs: pytest.LogCaptureFixture, no_env: None
) -> None:
    c = Canaries()
    await run_everything(captured.instrumentation(capture_content=capture_content), c)
    everything = spans_text(captured) + metrics_text(captured) + logs_text(logs)
    assert found(everything, c.never) == {}
    assert found(everything, c.content) == {}
    # The search is real: preserved ids and valid names are there.
    assert "call-ok-1" in spans_text(captured) and "call-keep-4" in spans_text(captured)
    assert "lookup" in metrics_text(captured)
    assert len(c.never) >= 15 and len(c.content) >= 12


async def test_content_capture_on_puts_content_on_spans_only(
    captured: Any, logs: pytest.LogCaptureFixture, no_env: None
) -> None:
    c = Canaries()
    await run_everything(captured.instrumentation(capture_content=True), c)
    spans, metrics, log_text = spans_text(captured), metrics_text(captured), logs_text(logs)
    assert found(spans + metrics + log_text, c.never) == {}
    assert found(metrics, c.content) == {}
    assert found(log_text, c.content) == {}
    on_spans = found(spans, c.content)
    for label in ("arg_valid_1", "arg_valid_2", "arg_conflict", "arg_truncated", "result", "async_result"):
        assert label in on_spans, label


def test_captured_content_is_truncated(captured: Any, logs: pytest.LogCaptureFixture, no_env: None) -> None:
    head, tail, result_tail = canary("head"), canary("tail"), canary("result_tail")
    arguments = '{"q":"' + head + "x" * DEFAULT_MAX_CONTENT_CHARS + tail + '"}'
    instrumentation = captured.instrumentation(capture_content=True)
    list(instrumentation.stream(gen(finished(chunk(fragment(0, "call-long", "lookup", arguments))))))
    instrumentation.host(lambda item: head + "y" * DEFAULT_MAX_CONTENT_CHARS + result_tail)(
        call("call-long", "lookup", arguments)
    )
    (assembled,) = captured.spans(A.SPAN_ASSEMBLE_TOOL_CALL)
    (executed,) = captured.spans(A.SPAN_EXECUTE_TOOL)
    recorded = str(assembled.attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS])
    result = str(executed.attributes[A.GEN_AI_TOOL_CALL_RESULT])
    assert head in recorded and head in result
    assert len(recorded) <= DEFAULT_MAX_CONTENT_CHARS + 32 and len(result) <= DEFAULT_MAX_CONTENT_CHARS + 32
    everything = spans_text(captured) + metrics_text(captured) + logs_text(logs)
    assert tail not in everything and result_tail not in everything


@pytest.mark.parametrize(("value", "captured_content"), [("true", True), ("false", False), ("", False)])
def test_the_environment_variable_opts_in(
    value: str, captured_content: bool, captured: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_CAPTURE_CONTENT, value)
    secret = canary("env")
    list(captured.instrumentation().stream(gen(finished(chunk(fragment(0, "call-e", "lookup", args(secret)))))))
    assert (secret in spans_text(captured)) is captured_content
    assert secret not in metrics_text(captured)


def test_rejected_fragment_content_never_reaches_a_proposal_id(captured: Any, no_env: None) -> None:
    """The established id is what spans carry; a conflicting id is not a second call id anywhere."""
    c = Canaries()
    list(captured.instrumentation(capture_content=True).stream(gen(build(c)["id_conflict"])))
    (span,) = captured.spans(A.SPAN_ASSEMBLE_TOOL_CALL)
    assert span.attributes[A.GEN_AI_TOOL_CALL_ID] == "call-keep-1"
    events = [event for event in span.events if event.name == A.EVENT_IDENTITY_REJECTED]
    assert len(events) == 1
    assert set(events[0].attributes or {}) <= {
        A.ETF_ERROR_CATEGORY,
        A.ETF_ID_KIND,
        A.ETF_ID_PRIOR_PRESENT,
        A.ETF_ID_EMPTY,
        A.ETF_ID_TRANSITION,
        A.ETF_TOOL_CALL_INDEX,
        A.ETF_CHOICE_INDEX,
    }


# --- logs of swallowed internal errors ------------------------------------------------------


class LeakyError(RuntimeError):
    pass


@pytest.mark.parametrize("target", ["record_response", "start_execution", "end_execution"])
async def test_swallowed_errors_do_not_log_their_message(
    target: str, captured: Any, logs: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, no_env: None
) -> None:
    """An internal error whose message quotes a value is logged by type only."""
    secret = canary("exception")

    def leaky(*args: Any, **kwargs: Any) -> Any:
        raise LeakyError(f"could not record {secret}")

    monkeypatch.setattr(Telemetry, target, leaky)
    previous = set_strict(False)
    try:
        c = Canaries()
        await run_everything(captured.instrumentation(capture_content=True), c, guard_works=False)
    finally:
        set_strict(previous)
    text = logs_text(logs)
    assert "LeakyError" in text  # the failure was logged ...
    assert secret not in text  # ... without its message
    assert found(text, c.never) == {} and found(text, c.content) == {}
