"""The Bedrock Converse instrumentor on ``aiobotocore``'s asynchronous client, over real HTTP.

The client (``aiobotocore``, what ``aioboto3`` hands out too) talks to
:class:`~etf_otel.testing.LocalChatServer`'s Converse endpoints, nothing below it mocked. Its
``_make_api_call`` is a coroutine of its own class (``AioBaseClient``), so the synchronous hook never
sees these calls: each test here fails if the asynchronous one is missing. The application must get
what it gets without etf-otel: the same events, the same exceptions (aiohttp's own for a connection
dropped mid-body), the same end.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from etf_otel.integrations.bedrock import PROVIDER, instrument_bedrock
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
from tests.integrations.test_bedrock_integration import (
    ANSWER,
    QUESTION,
    TWO_CALLS,
    Etf,
    attribute,
    responses,
    violations,
)

aiobotocore_session = pytest.importorskip("aiobotocore.session")
aiobotocore_config = pytest.importorskip("aiobotocore.config")


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalChatServer]:
    for name in ("AWS_BEARER_TOKEN_BEDROCK", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with LocalChatServer() as running:
        yield running


@asynccontextmanager
async def connected(server: LocalChatServer) -> AsyncIterator[Any]:
    """An aiobotocore ``bedrock-runtime`` client of the scripted server (one attempt: no retry of a scripted error)."""
    async with aiobotocore_session.get_session().create_client(
        "bedrock-runtime",
        endpoint_url=server.root_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=aiobotocore_config.AioConfig(retries={"total_max_attempts": 1}),
    ) as client:
        yield client


async def converse_stream(client: Any, messages: list[Any]) -> tuple[str, Any, list[dict[str, Any]]]:
    """``("returned" | "raised", the stream's type or the error's type and code, the events read)``."""
    received: list[dict[str, Any]] = []
    try:
        events = (await client.converse_stream(modelId=MODEL, messages=messages))["stream"]
        try:
            async for event in events:
                received.append(event)
        finally:
            events.close()
    except Exception as error:
        code = getattr(error, "response", {}).get("Error", {}).get("Code")
        return "raised", (type(error).__name__, code), received
    return "returned", events.__class__.__name__, received


ASSISTANT = {
    "role": "assistant",
    "content": [tool_use("tooluse_w", "get_weather", {"city": "Paris"}), tool_use("tooluse_t", "get_time", {})],
}
RESULTS = {
    "role": "user",
    "content": [{"toolResult": {"toolUseId": i, "content": [{"text": "ok"}]}} for i in ("tooluse_w", "tooluse_t")],
}


def test_a_clean_two_tool_loop_streamed_is_proposed_linked_and_clean(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))

    async def loop() -> list[Any]:
        async with connected(server) as client:
            return [
                await converse_stream(client, [QUESTION]),
                await converse_stream(client, [QUESTION, ASSISTANT, RESULTS]),
            ]

    first_call, second_call = asyncio.run(loop())
    assert first_call == ("returned", "AioEventStream", TWO_CALLS) and second_call[0] == "returned"
    first, second = responses(captured)
    assert attribute(first, "etf.protocol") == "bedrock_converse"
    assert attribute(first, "gen_ai.provider.name") == PROVIDER
    assert attribute(first, "etf.stream.dispatchable") is True
    assert attribute(first, "etf.response.streamed") is True
    assert sorted(attribute(second, "etf.linkage.answered_ids")) == ["tooluse_t", "tooluse_w"]
    assert attribute(second, "gen_ai.response.finish_reasons") == ("end_turn",)
    assert violations(captured) == []


def test_converse_is_judged_as_a_body_and_a_dropped_result_is_unanswered(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    document = body(*ASSISTANT["content"])
    server.enqueue(Script(body=document), Script(body=body(stop_reason="end_turn")))
    only_one = {"role": "user", "content": RESULTS["content"][:1]}

    async def loop() -> list[Any]:
        async with connected(server) as client:
            first = await client.converse(modelId=MODEL, messages=[QUESTION])
            second = await client.converse(modelId=MODEL, messages=[QUESTION, ASSISTANT, only_one])
            return [first, second]

    first_answer, _ = asyncio.run(loop())
    assert first_answer["output"] == document["output"]
    first, second = responses(captured)
    assert attribute(first, "etf.response.streamed") is False
    assert attribute(first, "etf.stream.dispatchable") is True
    assert violations(captured) == ["unanswered_call"]


CUT = [message_start(), tool_start(1, "tooluse_w", "get_weather"), input_delta(1, '{"city":')]
ERROR_FRAME = {"error": {"code": "internalServerException", "message": "boom"}}
SCRIPTS = [
    Script(events=TWO_CALLS),
    Script(events=[*CUT, exception()]),  # a modelled exception frame mid-stream
    Script(events=[*CUT, ERROR_FRAME]),  # an unmodelled error frame mid-stream
    Script(events=CUT),  # no messageStop: aiobotocore's iterator just ends
    Script(events=TWO_CALLS, cut_after=5),  # the connection dropped mid-body
]


def test_the_application_gets_the_same_events_exceptions_and_end_with_and_without_etf(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    async def calls() -> list[Any]:
        async with connected(server) as client:
            return [await converse_stream(client, [QUESTION]) for _ in SCRIPTS]

    seen: list[list[Any]] = []
    for instrumented in (False, True):
        if instrumented:
            etf.on()
        server.enqueue(*SCRIPTS)
        seen.append(asyncio.run(calls()))
    without, with_etf = seen
    assert with_etf == without
    assert [outcome[1] for outcome in without] == [
        "AioEventStream",
        ("EventStreamError", "modelStreamErrorException"),
        ("EventStreamError", "internalServerException"),
        "AioEventStream",
        ("ClientPayloadError", None),  # aiohttp's, not wrapped by botocore
    ]
    assert without[4][2] == TWO_CALLS[:5]
    states = [attribute(span, "etf.stream.state") for span in responses(captured)]
    assert states == ["completed", "failed", "failed", "truncated", "failed"]  # observed only while instrumented
    assert [attribute(span, "etf.stream.dispatchable") for span in responses(captured)] == [True] + [False] * 4


def test_a_loop_is_audited_from_its_exported_spans(
    process: Any, server: LocalChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The calls run by an instrumented host, their results sent back: the audit finds nothing (exit 0)."""
    from etf_otel.cli._main import main

    exported = process()
    instrumentor = instrument_bedrock(tracer_provider=exported.provider, meter_provider=exported.meters)
    first = stream(tool_call(1, "tooluse_w", "get_weather", '{"city":"Paris"}'), tool_call(2, "tooluse_t", "get_time"))
    server.enqueue(Script(events=first), Script(events=ANSWER))

    async def loop() -> None:
        instrumentation = instrumentor.instrumentation
        assert instrumentation is not None
        host = instrumentation.host(lambda call: {"ok": call["name"]})
        async with connected(server) as client:
            _, _, events = await converse_stream(client, [QUESTION])
            calls = [e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e]
            for call in calls:
                host({"toolUseId": call["toolUseId"], "name": call["name"], "input": {}})
            await converse_stream(client, [QUESTION, ASSISTANT, RESULTS])

    try:
        asyncio.run(loop())
    finally:
        instrumentor.uninstrument()
        exported.close()
    capsys.readouterr()
    assert main(["audit", str(exported.path)]) == 0
    assert "No linkage problems found." in capsys.readouterr().out
    exported_text = exported.path.read_text(encoding="utf-8")
    assert exported_text.count('"assemble_response"') == 2  # both requests recorded: the audit had them


def test_the_entry_point_wraps_aiobotocore_only_when_the_application_imports_it() -> None:
    """Zero code: the ``etf_otel_bedrock`` entry point's instrumentor imports neither client; importing
    ``botocore.client`` does not bring ``aiobotocore`` in; importing ``aiobotocore.client`` wraps its class."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = (
        "import sys\n"
        "from importlib.metadata import entry_points\n"
        "(point,) = [p for p in entry_points(group='opentelemetry_instrumentor') if p.name == 'etf_otel_bedrock']\n"
        "point.load()().instrument()\n"
        "import botocore.client, wrapt\n"
        "print('aiobotocore' in sys.modules)\n"
        "import aiobotocore.client\n"
        "print(isinstance(vars(aiobotocore.client.AioBaseClient)['_make_api_call'], wrapt.FunctionWrapper))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["PYTHONPATH"] = root
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


def test_uninstrument_restores_the_asynchronous_client(etf: Etf) -> None:
    import aiobotocore.client

    original = vars(aiobotocore.client.AioBaseClient)["_make_api_call"]
    etf.on()
    assert vars(aiobotocore.client.AioBaseClient)["_make_api_call"] is not original
    etf.off()
    assert vars(aiobotocore.client.AioBaseClient)["_make_api_call"] is original


def test_on_aiobotocore_the_guard_refuses_unsent_and_the_providers_refusal_gets_its_span(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    from etf_otel.errors import RequestPairingError
    from etf_otel.testing import refusals

    etf.on(guard_requests=True)
    refusal = "Expected toolResult blocks at messages.2.content for the following Ids: tooluse_t"
    server.enqueue(Script(events=TWO_CALLS), Script(events=TWO_CALLS), refusals.bedrock(refusal))
    only_one = {"role": "user", "content": RESULTS["content"][:1]}

    async def loop() -> tuple[Any, ...]:
        async with connected(server) as client:
            first = await converse_stream(client, [QUESTION])
            try:
                await client.converse_stream(modelId=MODEL, messages=[QUESTION, ASSISTANT, only_one])
            except RequestPairingError as error:
                guarded: object = error
            etf.off()
            etf.on()  # the guard off: the same request is sent and the provider refuses it
            await converse_stream(client, [QUESTION])
            refused = await converse_stream(client, [QUESTION, ASSISTANT, only_one])
            return first, guarded, refused

    first, guarded, refused = asyncio.run(loop())
    assert first[0] == "returned" and isinstance(guarded, RequestPairingError)
    assert "call_without_result tooluse_t" in str(guarded)
    assert refused[:2] == ("raised", ("ValidationException", "ValidationException"))
    assert len(server.requests) == 3  # the guarded request never left
    spans = responses(captured)
    assert attribute(spans[1], "error.type") == "RequestPairingError"
    assert attribute(spans[-1], "error.type") == "ValidationException"
    assert attribute(spans[-1], "etf.request.pairing") == "broken"
    assert attribute(spans[-1], "etf.request.pairing_refused") is True
