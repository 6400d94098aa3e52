"""The Ollama instrumentor, driven by the real ``ollama`` client over real HTTP.

Every test talks to :class:`~etf_otel.testing.LocalChatServer` (its ``/api/chat`` endpoint: NDJSON
lines, or one body for ``"stream": false``) with a real ``ollama.Client`` / ``ollama.AsyncClient``:
nothing below the client is mocked. The tool loop is the one of the client's own examples
(ollama-python 0.6.3 ``examples/multi-tool.py``: the assistant message appended, each result a
``role: tool`` message with ``tool_name``). The instrumentor wraps the client classes: the ``etf``
fixture always uninstruments.
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

from etf_otel.integrations.ollama import PROVIDER, OllamaInstrumentor, instrument_ollama
from etf_otel.testing import OLLAMA_QUIRK_STREAMS, LocalChatServer, Script
from etf_otel.testing.ollama import body, call, chunk, error, stream
from tests.conftest import Captured
from tests.integrations.support import Switch

ollama = pytest.importorskip("ollama")

MODEL = "llama3.2"
QUESTION = {"role": "user", "content": "Weather and time in Paris?"}
W, T = "call_w8x1k2m3", "call_t4n5p6q7"
TWO_CALLS = stream(
    chunk(call("get_weather", {"city": "Paris"}, id=W, index=0)),
    chunk(call("get_time", {"timezone": "Europe/Paris"}, id=T, index=1)),
)
ANSWER = stream(chunk(content="Sunny, 12:00."))


class Etf(Switch[OllamaInstrumentor]):
    """Switched on and off within a test by ``instrument_ollama``."""

    instrument_with = staticmethod(instrument_ollama)


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer() as running:
        yield running


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


def loop(client: Any, streamed: bool, answer: str | None = None) -> list[Any]:
    """The client examples' loop: one request, its calls answered by name, the next request."""
    messages: list[Any] = [QUESTION]
    if streamed:
        parts = list(client.chat(model=MODEL, messages=messages, stream=True))
        calls = [tool for part in parts for tool in part.message.tool_calls or ()]
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
    else:
        response = client.chat(model=MODEL, messages=messages)
        parts = [response]
        calls = list(response.message.tool_calls or ())
        messages.append(response.message)
    for tool in calls:
        messages.append({"role": "tool", "content": "ok", "tool_name": answer or tool.function.name})
    answered = client.chat(model=MODEL, messages=messages, stream=streamed)
    parts.extend(answered if streamed else [answered])
    return parts


def assert_clean_loop(captured: Captured, streamed: bool) -> None:
    first, second = responses(captured)
    assert attribute(first, "etf.protocol") == "ollama"
    assert attribute(first, "gen_ai.provider.name") == PROVIDER == "ollama"
    assert attribute(first, "etf.response.streamed") is streamed
    assert attribute(first, "etf.stream.dispatchable") is True
    assert attribute(first, "gen_ai.response.finish_reasons") == ("stop",)
    calls = captured.spans("assemble_tool_call get_weather") + captured.spans("assemble_tool_call get_time")
    assert [attribute(span, "gen_ai.tool.call.id") for span in calls] == [W, T]  # the ids the client drops
    assert attribute(second, "etf.stream.state") == "completed"
    assert findings(captured) == []


@pytest.mark.parametrize("streamed", [True, False])
def test_a_clean_two_tool_loop_is_proposed_linked_and_clean(
    streamed: bool, etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    if streamed:
        server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    else:
        server.enqueue(Script(body=body(*_calls(TWO_CALLS))))
        server.enqueue(Script(body=body(content="Sunny, 12:00.")))
    loop(ollama.Client(host=server.root_url), streamed)
    assert [request.body["stream"] for request in server.requests] == [streamed, streamed]
    assert_clean_loop(captured, streamed)


@pytest.mark.parametrize("streamed", [True, False])
def test_the_async_client_is_observed_the_same_way(
    streamed: bool, etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    server.enqueue(Script(events=TWO_CALLS) if streamed else Script(body=body(*_calls(TWO_CALLS))))
    server.enqueue(Script(events=ANSWER) if streamed else Script(body=body(content="Sunny.")))

    async def run() -> None:
        client = ollama.AsyncClient(host=server.root_url)
        messages: list[Any] = [QUESTION]
        if streamed:
            calls = [t async for part in await client.chat(model=MODEL, messages=messages, stream=True)
                     for t in part.message.tool_calls or ()]  # fmt: skip
        else:
            calls = list((await client.chat(model=MODEL, messages=messages)).message.tool_calls or ())
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        messages += [{"role": "tool", "content": "ok", "tool_name": tool.function.name} for tool in calls]
        answer = await client.chat(model=MODEL, messages=messages, stream=streamed)
        if streamed:
            [part async for part in answer]

    asyncio.run(run())
    assert_clean_loop(captured, streamed)


def _calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [tool for event in events for tool in event["message"].get("tool_calls", ())]


def test_the_application_gets_the_same_objects_and_errors_with_and_without_etf(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    client = ollama.Client(host=server.root_url)
    failing = [*TWO_CALLS[:1], error()]
    scripts = [Script(events=TWO_CALLS), Script(events=failing), Script(body=body(*_calls(TWO_CALLS)))]
    seen: list[list[Any]] = []
    for instrumented in (False, True):
        if instrumented:
            etf.on()
        server.enqueue(*scripts)
        outcomes: list[Any] = []
        for streamed in (True, True, False):
            try:
                got = client.chat(model=MODEL, messages=[QUESTION], stream=streamed)
                outcomes.append([part.model_dump() for part in got] if streamed else got.model_dump())
            except ollama.ResponseError as raised:
                outcomes.append(("raised", raised.error))
        seen.append(outcomes)
    assert seen[0] == seen[1]
    assert seen[0][1] == ("raised", error()["error"])
    assert [attribute(span, "etf.stream.state") for span in responses(captured)] == ["completed", "failed", "completed"]


@pytest.mark.parametrize(
    ("quirk", "dispatchable", "ids"),
    [
        ("calls without ids (older servers)", True, [None, None]),
        ("several calls on index 0, no ids", True, [None, None]),
        ("several calls on index 0, with ids", True, ["call_k3xq9ab2", "call_p0w7d4mz"]),
        ("one call with an id, its sibling without", False, ["call_k3xq9ab2", None]),
    ],
)
def test_quirk_streams_through_the_client(
    quirk: str, dispatchable: bool, ids: list[Any], etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    server.enqueue(Script(events=OLLAMA_QUIRK_STREAMS[quirk]))
    list(ollama.Client(host=server.root_url).chat(model=MODEL, messages=[QUESTION], stream=True))
    (response,) = responses(captured)
    assert attribute(response, "etf.stream.dispatchable") is dispatchable
    calls = captured.spans("assemble_tool_call get_a") + captured.spans("assemble_tool_call get_b")
    assert [attribute(span, "gen_ai.tool.call.id") for span in calls] == ids


def test_a_result_for_a_function_no_call_named_is_orphaned_and_its_call_unanswered(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    loop(ollama.Client(host=server.root_url), True, answer="get_weather")
    assert sorted(findings(captured)) == ["duplicate_result", "unanswered_call"]


def test_other_paths_and_uninstrumenting_pass_through(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    etf.on().uninstrument()
    etf.instrumentor = None
    server.enqueue(Script(events=TWO_CALLS))
    list(ollama.Client(host=server.root_url).chat(model=MODEL, messages=[QUESTION], stream=True))
    assert responses(captured) == []


def test_the_entry_point_is_declared_and_imports_no_ollama() -> None:
    root = Path(__file__).resolve().parents[2]
    group = (root / "pyproject.toml").read_text().split("[project.entry-points.opentelemetry_instrumentor]")[1]
    assert 'etf_otel_ollama = "etf_otel.integrations.ollama:OllamaInstrumentor"' in group.split("\n[")[0]
    script = (
        "import sys\n"
        "from etf_otel.integrations.ollama import OllamaInstrumentor\n"
        "OllamaInstrumentor().instrument()\n"
        "print('ollama' in sys.modules)\n"
        "import ollama, wrapt\n"
        "print(isinstance(vars(ollama.Client)['_request'], wrapt.FunctionWrapper))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


def test_eight_identical_loops_at_once_have_no_false_finding(etf: Etf, captured: Captured) -> None:
    """The client's follow-ups carry no ids: identical conversations are told apart by nothing but their
    messages. Each is linked or, when its evidence points at several, left unjudged; never a finding."""
    from concurrent.futures import ThreadPoolExecutor

    from etf_otel.testing._scripted import tool_turn_responder

    etf.on()
    with LocalChatServer(responder=tool_turn_responder) as server:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: loop(ollama.Client(host=server.root_url), True), range(8)))
    assert len(responses(captured)) == 16
    assert findings(captured) == []
    calls = captured.spans("assemble_tool_call get_weather") + captured.spans("assemble_tool_call get_time")
    assert len(calls) == 16 and {attribute(span, "etf.tool_call.verdict") for span in calls} == {"proposed"}


def test_a_host_handed_the_clients_calls_links_them_and_guard_refuses_a_rejected_one(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    """The client's ``ToolCall`` objects lost the ids the server sent: a host finds them by name and order."""
    from etf_otel.errors import GuardRefusedError

    instrumentation = etf.on(guard=True).instrumentation
    assert instrumentation is not None
    server.enqueue(Script(events=TWO_CALLS))
    client = ollama.Client(host=server.root_url)
    calls = [
        t for part in client.chat(model=MODEL, messages=[QUESTION], stream=True) for t in part.message.tool_calls or ()
    ]
    host = instrumentation.host(lambda tool: f"ran {tool.function.name}", guard=True)
    assert [host(tool) for tool in calls] == ["ran get_weather", "ran get_time"]
    for name in ("get_weather", "get_time"):
        (execution,) = captured.spans(f"execute_tool {name}")
        (assembly,) = captured.spans(f"assemble_tool_call {name}")
        assert [link.context.span_id for link in execution.links] == [assembly.context.span_id]
    server.enqueue(Script(events=OLLAMA_QUIRK_STREAMS["one call with an id, its sibling without"]))
    rejected = [
        t for part in client.chat(model=MODEL, messages=[QUESTION], stream=True) for t in part.message.tool_calls or ()
    ]
    with pytest.raises(GuardRefusedError):
        host(rejected[0])


def test_a_result_under_the_wrong_name_is_named_before_sending_and_the_guard_holds_it(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    streamed = True
    from etf_otel.errors import RequestPairingError

    etf.on()
    server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    loop(ollama.Client(host=server.root_url), streamed, answer="get_weather")
    follow_up = responses(captured)[-1]
    assert attribute(follow_up, "etf.request.pairing") == "broken"
    assert attribute(follow_up, "etf.request.pairing_problems") == ("call_without_result", "duplicate_result")

    etf.off()
    etf.on(guard_requests=True)
    server.enqueue(Script(events=TWO_CALLS))
    sent = len(server.requests)
    with pytest.raises(RequestPairingError):
        loop(ollama.Client(host=server.root_url), streamed, answer="get_weather")
    assert len(server.requests) == sent + 1  # the first request only: the broken follow-up never left
    assert attribute(responses(captured)[-1], "error.type") == "RequestPairingError"
