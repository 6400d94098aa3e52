"""The Bedrock Converse instrumentor, driven by the real ``boto3`` client over real HTTP.

Every test talks to :class:`~etf_otel.testing.LocalChatServer` (its ``/model/{id}/converse-stream``
and ``/converse`` endpoints, event-stream frames) with a real ``bedrock-runtime`` client: nothing
below the client is mocked. The instrumentor wraps ``botocore`` globally: the ``etf`` fixture always
uninstruments.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from etf_otel.errors import GuardRefusedError
from etf_otel.integrations.bedrock import PROVIDER, BedrockInstrumentor, instrument_bedrock
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing.bedrock import (
    MODEL,
    body,
    exception,
    input_delta,
    message_start,
    stream,
    tool_call,
    tool_start,
    tool_use,
)
from tests.conftest import Captured
from tests.integrations.support import Switch

boto3 = pytest.importorskip("boto3")
botocore_config = pytest.importorskip("botocore.config")
botocore_client = pytest.importorskip("botocore.client")
botocore_exceptions = pytest.importorskip("botocore.exceptions")

QUESTION = {"role": "user", "content": [{"text": "Weather and time in Paris?"}]}
TWO_CALLS = stream(
    tool_call(1, "tooluse_w", "get_weather", "", '{"city":', '"Paris"}'), tool_call(2, "tooluse_t", "get_time", "")
)
ANSWER = [message_start(), {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Sunny, 12:00."}}}]
ANSWER += [{"contentBlockStop": {"contentBlockIndex": 0}}, {"messageStop": {"stopReason": "end_turn"}}]


class Etf(Switch[BedrockInstrumentor]):
    """Switched on and off within a test by ``instrument_bedrock``."""

    instrument_with = staticmethod(instrument_bedrock)


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as running:
        yield running


@pytest.fixture
def client(server: LocalChatServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    made = boto3.client(
        "bedrock-runtime",
        endpoint_url=server.root_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore_config.Config(retries={"total_max_attempts": 1}),
    )
    yield made
    made.close()


def converse_stream(client: Any, messages: list[Any]) -> tuple[str, Any, list[dict[str, Any]]]:
    """``("returned" | "raised", the stream's type or the error's type and code, the events read)``."""
    received: list[dict[str, Any]] = []
    try:
        events = client.converse_stream(modelId=MODEL, messages=messages)["stream"]
        try:
            received.extend(events)
        finally:
            events.close()
    except Exception as error:
        code = getattr(error, "response", {}).get("Error", {}).get("Code")
        return "raised", (type(error).__name__, code), received
    return "returned", events.__class__.__name__, received


def responses(captured: Captured) -> list[ReadableSpan]:
    return captured.spans("assemble_response")


def violations(captured: Captured) -> list[str]:
    return [
        str((event.attributes or {})["etf.error.category"])
        for span in captured.exporter.get_finished_spans()
        for event in span.events
        if event.name == "etf.integrity.violation"
    ]


def attribute(span: ReadableSpan, name: str) -> Any:
    return (span.attributes or {}).get(name)


def test_a_clean_two_tool_loop_is_proposed_linked_and_clean(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    etf.on()
    server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    outcome, _, events = converse_stream(client, [QUESTION])
    assert outcome == "returned" and events == TWO_CALLS
    assistant = {
        "role": "assistant",
        "content": [tool_use("tooluse_w", "get_weather", {"city": "Paris"}), tool_use("tooluse_t", "get_time", {})],
    }
    results = [{"toolResult": {"toolUseId": i, "content": [{"text": "ok"}]}} for i in ("tooluse_w", "tooluse_t")]
    assert converse_stream(client, [QUESTION, assistant, {"role": "user", "content": results}])[0] == "returned"
    first, second = responses(captured)
    assert attribute(first, "etf.protocol") == "bedrock_converse"
    assert attribute(first, "gen_ai.provider.name") == PROVIDER == "aws.bedrock"
    assert attribute(first, "etf.stream.dispatchable") is True
    assert attribute(first, "gen_ai.response.finish_reasons") == ("tool_use",)
    calls = captured.spans("assemble_tool_call get_weather") + captured.spans("assemble_tool_call get_time")
    assert sorted(attribute(span, "gen_ai.tool.call.id") for span in calls) == ["tooluse_t", "tooluse_w"]
    assert sorted(attribute(span, "etf.tool_call.index") for span in calls) == [1, 2]
    assert attribute(second, "gen_ai.response.finish_reasons") == ("end_turn",)
    assert violations(captured) == []


def test_the_application_gets_the_same_events_exceptions_and_stream_with_and_without_etf(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    cut = [message_start(), tool_start(1, "tooluse_w", "get_weather"), input_delta(1, '{"city":')]
    scripts = [Script(events=TWO_CALLS), Script(events=[*cut, exception()]), Script(events=cut)]
    seen: list[list[Any]] = []
    for instrumented in (False, True):
        if instrumented:
            etf.on()
        server.enqueue(*scripts)
        seen.append([converse_stream(client, [QUESTION]) for _ in scripts])
    without, with_etf = seen
    assert with_etf == without
    assert without[1][1] == ("EventStreamError", "modelStreamErrorException")
    assert without[0][1] == without[2][1] == "EventStream"  # the proxy answers as what it wraps
    states = [attribute(span, "etf.stream.state") for span in responses(captured)]
    assert states == ["completed", "failed", "truncated"]  # observed only while instrumented


def test_a_stream_boto3_ends_without_message_stop_is_truncated(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    etf.on()
    server.enqueue(Script(events=TWO_CALLS[:-2]))
    outcome, _, events = converse_stream(client, [QUESTION])
    assert outcome == "returned" and events == TWO_CALLS[:-2]  # boto3 says nothing
    (response,) = responses(captured)
    assert attribute(response, "etf.stream.state") == "truncated"
    assert attribute(response, "etf.stream.dispatchable") is False


def test_an_exception_frame_fails_the_response(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    etf.on()
    server.enqueue(Script(events=[message_start(), tool_start(1, "tooluse_w", "get_weather"), exception()]))
    assert converse_stream(client, [QUESTION])[0] == "raised"
    (response,) = responses(captured)
    assert attribute(response, "etf.stream.state") == "failed"


def test_converse_is_judged_as_a_body_and_returned_as_it_is(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    etf.on()
    document = body(tool_use("tooluse_w", "get_weather", {"city": "Paris"}))
    server.enqueue(Script(body=document))
    answer = client.converse(modelId=MODEL, messages=[QUESTION])
    assert answer["output"] == document["output"]
    (response,) = responses(captured)
    assert attribute(response, "etf.response.streamed") is False
    assert attribute(response, "etf.stream.dispatchable") is True


def test_a_follow_up_that_drops_a_result_is_unanswered_and_an_error_status_is_an_answer(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    etf.on()
    assistant = {
        "role": "assistant",
        "content": [tool_use("tooluse_w", "get_weather", {"city": "Paris"}), tool_use("tooluse_t", "get_time", {})],
    }
    error = {"toolResult": {"toolUseId": "tooluse_t", "content": [{"text": "failed"}], "status": "error"}}
    only_one = {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_w", "content": [{"text": "ok"}]}}]}
    server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    converse_stream(client, [QUESTION])
    converse_stream(client, [QUESTION, assistant, only_one])
    assert violations(captured) == ["unanswered_call"]
    server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    converse_stream(client, [QUESTION])
    answered = {"role": "user", "content": [*only_one["content"], error]}
    converse_stream(client, [QUESTION, assistant, answered])
    assert violations(captured) == ["unanswered_call"]  # nothing new: status error answers the call


def test_other_operations_pass_untouched_and_uninstrument_restores(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    original = vars(botocore_client.BaseClient)["_make_api_call"]
    etf.on()
    assert vars(botocore_client.BaseClient)["_make_api_call"] is not original
    with pytest.raises(botocore_exceptions.ClientError):
        client.invoke_model(modelId=MODEL, body=b"{}")  # no route there: the server answers 404
    assert responses(captured) == []
    etf.off()
    assert vars(botocore_client.BaseClient)["_make_api_call"] is original


def test_the_entry_point_is_declared_and_imports_no_botocore() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as handle:
        pyproject = handle.read()
    group = pyproject.split("[project.entry-points.opentelemetry_instrumentor]")[1].split("\n[")[0]
    assert 'etf_otel_bedrock = "etf_otel.integrations.bedrock:BedrockInstrumentor"' in group
    script = (
        "import sys\n"
        "from etf_otel.integrations.bedrock import BedrockInstrumentor\n"
        "BedrockInstrumentor().instrument()\n"
        "print(sorted(name for name in ('boto3', 'botocore') if name in sys.modules))\n"
        "import botocore.client, wrapt\n"
        "print(isinstance(vars(botocore.client.BaseClient)['_make_api_call'], wrapt.FunctionWrapper))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = root
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "True"]


def test_a_host_handed_a_tool_use_block_links_its_execution_and_guard_refuses_a_rejected_call(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    instrumentation = etf.on(guard=True).instrumentation
    assert instrumentation is not None
    server.enqueue(Script(events=TWO_CALLS))
    _, _, events = converse_stream(client, [QUESTION])
    host = instrumentation.host(lambda call: f"ran {call['name']}", guard=True)
    assert host({"toolUseId": "tooluse_w", "name": "get_weather", "input": {"city": "Paris"}}) == "ran get_weather"
    (execution,) = captured.spans("execute_tool get_weather")
    assert attribute(execution, "gen_ai.tool.call.id") == "tooluse_w"
    (assembly,) = captured.spans("assemble_tool_call get_weather")
    assert [link.context.span_id for link in execution.links] == [assembly.context.span_id]
    cut = stream(tool_call(1, "tooluse_x", "get_weather", '{"city":'), stop_reason="max_tokens")
    server.enqueue(Script(events=cut))
    converse_stream(client, [QUESTION])
    with pytest.raises(GuardRefusedError):
        host({"toolUseId": "tooluse_x", "name": "get_weather", "input": {}})


def test_results_split_over_two_user_messages_are_orphaned_and_unanswered_after_a_body(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    """Converse refuses results outside the first message after the assistant turn ("Expected toolResult
    blocks ..."): the second message's result answers nothing, and its call stays unanswered."""
    etf.on()
    calls = [tool_use("tooluse_w", "get_weather", {"city": "Paris"}), tool_use("tooluse_t", "get_time", {})]
    server.enqueue(Script(body=body(*calls)), Script(events=ANSWER))
    client.converse(modelId=MODEL, messages=[QUESTION])
    first = {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_w", "content": [{"text": "ok"}]}}]}
    second = {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_t", "content": [{"text": "ok"}]}}]}
    converse_stream(client, [QUESTION, {"role": "assistant", "content": calls}, first, second])
    assert sorted(violations(captured)) == ["orphaned_result", "unanswered_call"]


def test_a_connection_dropped_mid_call_raises_unchanged_and_fails_the_response(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    etf.on()
    server.enqueue(Script(events=TWO_CALLS, cut_after=5))
    outcome, error, events = converse_stream(client, [QUESTION])
    assert (outcome, error[0], events) == ("raised", "ProtocolError", TWO_CALLS[:5])  # urllib3's, not wrapped
    (response,) = responses(captured)
    assert attribute(response, "etf.stream.state") == "failed"
    assert attribute(response, "etf.stream.dispatchable") is False


def _loop(instrumentor: BedrockInstrumentor, server: LocalChatServer, client: Any, first: list[Any]) -> None:
    """One agent round: the model's calls run by an instrumented host, their results sent back."""
    instrumentation = instrumentor.instrumentation
    assert instrumentation is not None
    host = instrumentation.host(lambda call: {"ok": call["name"]})
    server.enqueue(Script(events=first), Script(events=ANSWER))
    _, _, events = converse_stream(client, [QUESTION])
    calls = [e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e]
    blocks = [tool_use(call["toolUseId"], call["name"], {}) for call in calls]
    results = []
    for call in calls:
        host({"toolUseId": call["toolUseId"], "name": call["name"], "input": {}})
        results.append({"toolResult": {"toolUseId": call["toolUseId"], "content": [{"json": {"ok": True}}]}})
    follow_up = [QUESTION, {"role": "assistant", "content": blocks}, {"role": "user", "content": results}]
    converse_stream(client, follow_up)


@pytest.mark.parametrize(("first", "code"), [(TWO_CALLS, 0), (TWO_CALLS[:-2], 1)], ids=["clean", "cut-and-run"])
def test_a_loop_is_audited_from_its_exported_spans(
    first: list[Any], code: int, process: Any, server: LocalChatServer, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A clean two-tool loop audits at exit 0; running the calls of a stream cut before messageStop is found."""
    from etf_otel.cli._main import main

    exported = process()
    instrumentor = instrument_bedrock(tracer_provider=exported.provider, meter_provider=exported.meters)
    try:
        _loop(instrumentor, server, client, first)
    finally:
        instrumentor.uninstrument()
        exported.close()
    capsys.readouterr()
    assert main(["audit", str(exported.path)]) == code
    report = capsys.readouterr().out
    if code == 0:
        assert "No linkage problems found." in report
    else:
        assert "executed_rejected\ttruncated_stream (2)" in report  # both calls of the cut stream ran


# --- the request before it is sent (docs/protocols.md) ------------------------------------------------------

TWO_USES = {
    "role": "assistant",
    "content": [tool_use("tooluse_w", "get_weather", {"city": "Paris"}), tool_use("tooluse_t", "get_time", {})],
}
ONLY_ONE = {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_w", "content": [{"text": "ok"}]}}]}
EXPECTED_BLOCKS = "Expected toolResult blocks at messages.2.content for the following Ids: tooluse_t"
"""Bedrock's refusal of a call without its result (NousResearch/hermes-agent#108584, mlflow/mlflow#24296)."""


def pairing(span: ReadableSpan) -> dict[str, Any]:
    return {key: value for key, value in (span.attributes or {}).items() if key.startswith("etf.request.pairing")}


def test_a_dropped_result_is_named_before_the_request_is_sent_and_the_refusal_is_tied_to_it(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    from etf_otel.testing import refusals

    etf.on()
    server.enqueue(Script(events=TWO_CALLS), refusals.bedrock(EXPECTED_BLOCKS))
    converse_stream(client, [QUESTION])
    outcome, error, _ = converse_stream(client, [QUESTION, TWO_USES, ONLY_ONE])
    assert (outcome, error) == ("raised", ("ValidationException", "ValidationException"))
    _, refused = responses(captured)
    assert pairing(refused) == {
        "etf.request.pairing": "broken",
        "etf.request.pairing_problems": ("call_without_result",),
        "etf.request.pairing_reasons": ("unknown",),
        "etf.request.pairing_refused": True,
    }
    assert attribute(refused, "error.type") == "ValidationException"  # botocore's class for the error code
    assert captured.metric_sum("etf.request.pairing_problems", etf__pairing__problem="call_without_result") == 1


def test_a_bedrock_pairing_refusal_not_predicted_is_refused_unexplained(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    from etf_otel.testing import refusals

    etf.on()
    answered = {
        "role": "user",
        "content": [*ONLY_ONE["content"], {"toolResult": {"toolUseId": "tooluse_t", "content": []}}],
    }
    server.enqueue(Script(events=TWO_CALLS), refusals.bedrock(EXPECTED_BLOCKS))
    converse_stream(client, [QUESTION])
    converse_stream(client, [QUESTION, TWO_USES, answered])
    assert pairing(responses(captured)[1]) == {"etf.request.pairing": "refused_unexplained"}


def test_the_request_guard_refuses_a_broken_converse_request_before_it_is_sent(
    etf: Etf, captured: Captured, server: LocalChatServer, client: Any
) -> None:
    from etf_otel.errors import RequestPairingError

    etf.on(guard_requests=True)
    server.enqueue(Script(events=TWO_CALLS))
    converse_stream(client, [QUESTION])
    with pytest.raises(
        RequestPairingError, match=r"call_without_result tooluse_t at messages\[1\] \(call 1\): unknown"
    ):
        client.converse_stream(modelId=MODEL, messages=[QUESTION, TWO_USES, ONLY_ONE])
    assert len(server.requests) == 1
    assert attribute(responses(captured)[1], "error.type") == "RequestPairingError"
