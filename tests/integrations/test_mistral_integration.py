"""The Mistral instrumentor, driven by the real ``mistralai`` SDK over real HTTP.

Every test talks to the Chat endpoint of :class:`~etf_otel.testing.LocalChatServer` with a real
``mistralai.Mistral`` client: nothing below the SDK is mocked. The chunks are our own bytes in the
shape Mistral streams (each tool call whole in one delta, with its ``index``; ids of 9 characters of
``[a-zA-Z0-9]``, as Mistral's API documentation and the SDK's README examples show), the follow-up
the SDK's tool loop (the assistant message, then ``role: tool`` messages with ``tool_call_id`` and
``name``). The instrumentor wraps the SDK's ``BaseSDK``: the ``etf`` fixture always uninstruments.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from etf_otel.integrations.mistral import PROVIDER, MistralInstrumentor, instrument_mistral
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing.chat import chunk, finished, fragment
from tests.conftest import Captured
from tests.integrations.support import Switch

mistral_client = pytest.importorskip("mistralai.client")

MODEL = "mistral-small-latest"
QUESTION = {"role": "user", "content": "Weather and time in Paris?"}
W, T = "aB3dE5gH7", "Zx9Yw8Vu7"


def two_calls(first: str = W, second: str = T) -> list[Any]:
    return finished(
        chunk(fragment(0, first, "get_weather", '{"city": "Paris"}')),
        chunk(fragment(1, second, "get_time", "{}")),
        finish_reason="tool_calls",
    )


ANSWER = finished(chunk(content="Sunny, 12:00."), finish_reason="stop")


def body(*calls: tuple[str, str, str], content: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}, "index": k}
            for k, (i, n, a) in enumerate(calls)
        ]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [choice],
        "usage": usage,
    }


class Etf(Switch[MistralInstrumentor]):
    """Switched on and off within a test by ``instrument_mistral``."""

    instrument_with = staticmethod(instrument_mistral)


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as running:
        yield running


def client(server: LocalChatServer) -> Any:
    return mistral_client.Mistral(api_key="local", server_url=server.root_url)


def responses(captured: Captured) -> list[ReadableSpan]:
    return captured.spans("assemble_response")


def attribute(span: ReadableSpan, name: str) -> Any:
    return (span.attributes or {}).get(name)


def findings(captured: Captured) -> list[str]:
    return [
        str((event.attributes or {})["etf.error.category"])
        for span in captured.exporter.get_finished_spans()
        for event in span.events
        if event.name == "etf.integrity.violation"
    ]


def calls_of(captured: Captured) -> list[tuple[Any, Any]]:
    spans = captured.spans("assemble_tool_call get_weather") + captured.spans("assemble_tool_call get_time")
    return [(attribute(span, "gen_ai.tool.call.id"), attribute(span, "etf.tool_call.verdict")) for span in spans]


def follow_up(calls: list[Any]) -> list[Any]:
    assistant = {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]}
    results = [{"role": "tool", "tool_call_id": c.id, "name": c.function.name, "content": "ok"} for c in calls]
    return [QUESTION, assistant, *results]


async def run_async(sdk: Any, streamed: bool) -> None:
    if streamed:
        got = await sdk.chat.stream_async(model=MODEL, messages=[QUESTION])
        calls = [c async for event in got for c in event.data.choices[0].delta.tool_calls or ()]
        await (await sdk.chat.stream_async(model=MODEL, messages=follow_up(calls))).__anext__()
    else:
        calls = (await sdk.chat.complete_async(model=MODEL, messages=[QUESTION])).choices[0].message.tool_calls
        await sdk.chat.complete_async(model=MODEL, messages=follow_up(calls))


@pytest.mark.parametrize(("streamed", "is_async"), [(True, False), (False, False), (True, True), (False, True)])
def test_a_clean_two_tool_loop_is_proposed_linked_and_clean(
    streamed: bool, is_async: bool, etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    calls = (W, "get_weather", '{"city": "Paris"}'), (T, "get_time", "{}")
    if streamed:
        server.enqueue(Script(events=two_calls()), Script(events=ANSWER))
    else:
        server.enqueue(Script(body=body(*calls)), Script(body=body(content="Sunny.")))
    sdk = client(server)
    if is_async:
        asyncio.run(run_async(sdk, streamed))
    elif streamed:
        got = [
            c
            for event in sdk.chat.stream(model=MODEL, messages=[QUESTION])
            for c in event.data.choices[0].delta.tool_calls or ()
        ]
        list(sdk.chat.stream(model=MODEL, messages=follow_up(got)))
    else:
        got = sdk.chat.complete(model=MODEL, messages=[QUESTION]).choices[0].message.tool_calls
        sdk.chat.complete(model=MODEL, messages=follow_up(got))
    first, second = responses(captured)
    assert attribute(first, "etf.protocol") == "chat_completions"
    assert attribute(first, "gen_ai.provider.name") == PROVIDER == "mistral_ai"
    assert attribute(first, "etf.response.streamed") is streamed
    assert attribute(first, "etf.stream.dispatchable") is True
    assert calls_of(captured) == [(W, "proposed"), (T, "proposed")]
    assert attribute(second, "etf.linkage.answered_ids") == (W, T)
    assert findings(captured) == []


def test_the_string_null_is_an_id_like_any_other(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    """Mistral-hosted models were seen sending ``"id": "null"``: a string, so an id, kept and linked."""
    etf.on()
    server.enqueue(Script(events=two_calls("null", T)), Script(events=ANSWER))
    sdk = client(server)
    got = [
        c
        for event in sdk.chat.stream(model=MODEL, messages=[QUESTION])
        for c in event.data.choices[0].delta.tool_calls or ()
    ]
    list(sdk.chat.stream(model=MODEL, messages=follow_up(got)))
    assert calls_of(captured) == [("null", "proposed"), (T, "proposed")]
    assert findings(captured) == []
    server.enqueue(Script(events=two_calls("null", "null")))  # one id naming two calls: neither is dispatched
    list(sdk.chat.stream(model=MODEL, messages=[QUESTION]))
    assert calls_of(captured).count(("null", "rejected")) == 2


def test_an_id_that_changes_mid_stream_is_a_conflict(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    etf.on()
    changed = finished(
        chunk(fragment(0, W, "get_weather", '{"city": "Paris"}')),
        chunk(fragment(0, "Qw3Er5Ty7", "get_weather", "")),
        finish_reason="tool_calls",
    )
    server.enqueue(Script(events=changed))
    list(client(server).chat.stream(model=MODEL, messages=[QUESTION]))
    (response,) = responses(captured)
    assert attribute(response, "etf.stream.dispatchable") is False
    assert calls_of(captured) == [(W, "rejected")]
    (span,) = captured.spans("assemble_tool_call get_weather")
    assert attribute(span, "etf.tool_call.categories") == ("id_conflict",)
    assert "Qw3Er5Ty7" not in str(span.attributes) + str([e.attributes for e in span.events])  # no rejected id


def test_the_application_gets_the_same_events_and_errors_with_and_without_etf(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    scripts = [Script(events=two_calls()), Script(events=two_calls(), cut_after=2), Script(body=body())]
    seen: list[list[Any]] = []
    sdk = client(server)
    for instrumented in (False, True):
        if instrumented:
            etf.on()
        server.enqueue(*scripts)
        outcomes: list[Any] = []
        for streamed in (True, True, False):
            try:
                if streamed:
                    outcomes.append([e.model_dump() for e in sdk.chat.stream(model=MODEL, messages=[QUESTION])])
                else:
                    outcomes.append(sdk.chat.complete(model=MODEL, messages=[QUESTION]).model_dump())
            except Exception as raised:
                outcomes.append(("raised", type(raised).__name__))
        seen.append(outcomes)
    assert seen[0] == seen[1]
    assert seen[0][1][0] == "raised"
    assert [attribute(span, "etf.stream.state") for span in responses(captured)] == ["completed", "failed", "completed"]


def test_the_entry_point_is_declared_and_imports_no_mistralai() -> None:
    root = Path(__file__).resolve().parents[2]
    group = (root / "pyproject.toml").read_text().split("[project.entry-points.opentelemetry_instrumentor]")[1]
    assert 'etf_otel_mistral = "etf_otel.integrations.mistral:MistralInstrumentor"' in group.split("\n[")[0]
    script = (
        "import sys\n"
        "from etf_otel.integrations.mistral import MistralInstrumentor\n"
        "MistralInstrumentor().instrument()\n"
        "print(any(name.startswith('mistralai') for name in sys.modules))\n"
        "import mistralai.client, wrapt\n"
        "from mistralai.client.basesdk import BaseSDK\n"
        "print(isinstance(vars(BaseSDK)['do_request'], wrapt.FunctionWrapper))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


def test_eight_identical_loops_at_once_have_no_false_finding(etf: Etf, captured: Captured) -> None:
    import itertools
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from etf_otel.testing import RecordedRequest

    counter, lock = itertools.count(), threading.Lock()

    def respond(request: RecordedRequest) -> Script:
        if request.body["messages"][-1]["role"] == "tool":
            return Script(events=ANSWER)
        with lock:
            n = next(counter)
        return Script(events=two_calls(f"W{n:08d}", f"T{n:08d}"))

    def one_loop(_: int) -> None:
        sdk = client(server)
        events = sdk.chat.stream(model=MODEL, messages=[QUESTION])
        got = [c for event in events for c in event.data.choices[0].delta.tool_calls or ()]
        list(sdk.chat.stream(model=MODEL, messages=follow_up(got)))

    etf.on()
    with LocalChatServer(responder=respond) as server, ThreadPoolExecutor(8) as pool:
        list(pool.map(one_loop, range(8)))
    assert len(responses(captured)) == 16
    assert findings(captured) == []
    assert len(calls_of(captured)) == 16 and {verdict for _, verdict in calls_of(captured)} == {"proposed"}


CALLS_BODY = body((W, "get_weather", '{"city": "Paris"}'), (T, "get_time", "{}"))
MISMATCH = "Not the same number of function calls and responses"
"""Mistral's refusal of calls and results that do not pair (mistralai/client-ts#106, camel-ai/camel#1467)."""


def test_a_dropped_result_is_named_before_sending_and_the_refusal_tied_to_it_and_the_guard_holds_it(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    from etf_otel.errors import RequestPairingError
    from etf_otel.testing import refusals

    etf.on()
    server.enqueue(Script(body=CALLS_BODY), refusals.mistral(MISMATCH))
    sdk = client(server)
    calls = sdk.chat.complete(model=MODEL, messages=[QUESTION]).choices[0].message.tool_calls
    dropped = follow_up(calls)[:-1]  # the last tool result lost
    with pytest.raises(mistral_client.errors.SDKError):
        sdk.chat.complete(model=MODEL, messages=dropped)
    refused = responses(captured)[-1]
    assert attribute(refused, "error.type") == "SDKError"
    assert attribute(refused, "etf.request.pairing") == "broken"
    assert attribute(refused, "etf.request.pairing_problems") == ("call_without_result",)
    assert attribute(refused, "etf.request.pairing_refused") is True
    assert findings(captured) == []  # the refused request settles nothing: no linkage finding of its own

    etf.off()
    etf.on(guard_requests=True)
    server.enqueue(Script(body=CALLS_BODY))
    calls = sdk.chat.complete(model=MODEL, messages=[QUESTION]).choices[0].message.tool_calls
    sent = len(server.requests)
    with pytest.raises(RequestPairingError, match=r"call_without_result .*messages\[1\] \(call 1\)"):
        sdk.chat.complete(model=MODEL, messages=follow_up(calls)[:-1])
    assert len(server.requests) == sent  # nothing left the process


def test_a_pairing_refusal_not_predicted_is_refused_unexplained(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    from etf_otel.testing import refusals

    etf.on()
    server.enqueue(Script(body=CALLS_BODY), refusals.mistral(MISMATCH))
    sdk = client(server)
    calls = sdk.chat.complete(model=MODEL, messages=[QUESTION]).choices[0].message.tool_calls
    with pytest.raises(mistral_client.errors.SDKError):
        sdk.chat.complete(model=MODEL, messages=follow_up(calls))
    assert attribute(responses(captured)[-1], "etf.request.pairing") == "refused_unexplained"
