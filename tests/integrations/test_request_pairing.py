"""The request before it is sent: the real clients' follow-ups checked as their provider pairs calls and results,
against the scripted server (docs/protocols.md, "The request before it is sent"; AGENT-STACKS 11.8).

Each conversation's first response proposes two calls (``call_<n>_a``, ``call_<n>_b``); its follow-up is broken
as applications and frameworks break them in public reports: a result dropped or lost on a retry, a result
twice, ids run together, an id wrapped by a framework, an id the target refuses. The broken request is named on
its response's span and counter before the provider answers; a clean or self-consistent one is not. The
provider's refusal (its real 400 body) still gets a span; the request guard refuses before a byte is sent.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from etf_otel import RequestPairingError
from etf_otel import attributes as A
from etf_otel.testing import LocalChatServer, refusals
from tests.conftest import Captured
from tests.integrations.conversation_load import (
    PROTOCOLS,
    Responder,
    Seen,
    client_of,
    first_request,
    follow_up,
    turn,
    turn_async,
)
from tests.integrations.test_linkage_evidence import instrumented


@pytest.fixture
def server() -> Iterator[LocalChatServer]:
    with LocalChatServer(responder=Responder()) as srv:
        yield srv


@pytest.fixture
def instrument(captured: Captured) -> Iterator[Any]:
    made: list[Any] = []

    def instrument_for(protocol: str, **options: Any) -> Any:
        made.append(instrumented(captured, protocol, **options))
        return made[-1]

    yield instrument_for
    for instrumentor in made:
        instrumentor.uninstrument()


def pairing_of(span: ReadableSpan) -> dict[str, Any]:
    attributes = span.attributes or {}
    return {name: attributes[name] for name in attributes if name.startswith("etf.request.pairing")}


def broken(problems: list[str], reasons: list[str]) -> dict[str, Any]:
    return {
        A.ETF_REQUEST_PAIRING: A.PAIRING_BROKEN,
        A.ETF_REQUEST_PAIRING_PROBLEMS: tuple(problems),
        A.ETF_REQUEST_PAIRING_REASONS: tuple(reasons),
    }


def second(server: LocalChatServer, protocol: str, answer: Any, mode: str = "sync") -> ReadableSpan | None:
    """A first turn, then the follow-up ``answer(ids)`` builds; the last response span (``None``: none)."""
    if mode == "async":

        async def both() -> None:
            async with client_of(server, protocol, mode) as client:
                seen = await turn_async(client, protocol, first_request(protocol))
                await turn_async(client, protocol, answer(seen))

        asyncio.run(both())
    else:
        with client_of(server, protocol, mode) as client:
            seen = turn(client, protocol, first_request(protocol))
            turn(client, protocol, answer(seen))
    return None


def spans(captured: Captured) -> list[ReadableSpan]:
    return captured.spans("assemble_response")


def with_results(protocol: str, results: list[str]) -> Any:
    """The follow-up that replays the first response's calls (named in ``previous_response_id`` for
    ``responses-previous``) and answers with ``results``, each a format of the ids (``{a}``, ``{b}``)."""

    def answer(seen: Seen) -> dict[str, Any]:
        a, b = seen.ids
        return follow_up(protocol, seen, [result.format(a=a, b=b) for result in results])

    return answer


CASES: dict[str, tuple[list[str], dict[tuple[str, str], int]]] = {
    "clean": (["{a}", "{b}"], {}),
    "dropped_result": (["{a}"], {("call_without_result", "unknown"): 1}),
    "duplicate_result": (["{a}", "{b}", "{b}"], {("duplicate_result", "unknown"): 1}),
    "concatenated_ids": (
        ["{a}{b}"],
        {("call_without_result", "concatenated_ids"): 2, ("result_without_call", "concatenated_ids"): 1},
    ),
    "rewritten_id": (
        ["{a}", "run_1:{b}"],
        {("call_without_result", "id_rewritten"): 1, ("result_without_call", "id_rewritten"): 1},
    ),
}
"""Each case: the follow-up's results, and the problems counted by ``(problem, reason)``."""


def counted(captured: Captured) -> dict[tuple[str, str], int]:
    return {
        (attributes[A.ETF_PAIRING_PROBLEM], attributes[A.ETF_PAIRING_REASON]): value
        for attributes, value in captured.points(A.METRIC_REQUEST_PAIRING_PROBLEMS)
    }


def expected_span(problems: dict[tuple[str, str], int]) -> dict[str, Any]:
    if not problems:
        return {}
    return broken(sorted({kind for kind, _ in problems}), sorted({reason for _, reason in problems}))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_broken_follow_up_is_named_on_its_response_span_and_counter(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str, case: str
) -> None:
    instrument(protocol)
    results, problems = CASES[case]
    second(server, protocol, with_results(protocol, results))
    first_span, second_span = spans(captured)
    assert pairing_of(first_span) == {}
    assert pairing_of(second_span) == expected_span(problems)
    assert counted(captured) == problems
    provider = "anthropic" if protocol == "anthropic" else "openai"
    assert captured.metric_sum(A.METRIC_REQUEST_PAIRING_PROBLEMS, gen_ai__provider__name=provider) == sum(
        problems.values()
    )


# --- every call shape ---------------------------------------------------------------------------------------

ORPHAN = "call_orphan"
"""A result whose call the request does not carry (the turn was trimmed away): never a preserved id."""


def orphan_request(protocol: str) -> dict[str, Any]:
    """A request whose only result answers no call: ``result_without_call`` wherever its provider looks."""
    user = {"role": "user", "content": "go on"}
    if protocol == "responses":
        return {"input": [user, {"type": "function_call_output", "call_id": ORPHAN, "output": "r"}]}
    if protocol == "anthropic":
        result = {"type": "tool_result", "tool_use_id": ORPHAN, "content": "r"}
        return {"messages": [user, {"role": "user", "content": [result]}], "max_tokens": 10}
    return {"messages": [user, {"role": "tool", "tool_call_id": ORPHAN, "content": "r"}]}


def shapes(protocol: str) -> dict[str, Any]:
    """``name: (client, request) -> what the application reads``, every shape the integration records."""

    def resource(client: Any) -> Any:
        if protocol == "responses":
            return client.responses
        return client.messages if protocol == "anthropic" else client.chat.completions

    def streamed(client: Any, request: dict[str, Any]) -> Any:
        return list(resource(client).create(model="m", stream=True, **request))

    def body(client: Any, request: dict[str, Any]) -> Any:
        return resource(client).create(model="m", **request)

    def raw(client: Any, request: dict[str, Any]) -> Any:
        return resource(client).with_raw_response.create(model="m", **request).parse()

    def helper_stream(client: Any, request: dict[str, Any]) -> Any:
        with resource(client).stream(model="m", **request) as events:
            return list(events)

    made = {"streamed": streamed, "body": body, "raw": raw}
    if protocol != "chat":
        made["helper_stream"] = helper_stream
    return made


def answers(protocol: str, shape: str) -> Any:
    from tests.integrations.test_call_shapes import ANSWERS

    stream, body = ANSWERS[protocol]
    return body if shape in ("body", "raw") else stream


async def run_async(client: Any, protocol: str, shape: str, request: dict[str, Any]) -> Any:
    """The async twin of :func:`shapes`."""
    resource = _resource(client, protocol)
    if shape == "helper_stream":
        async with resource.stream(model="m", **request) as events:
            return [event async for event in events]
    if shape == "streamed":
        return [event async for event in await resource.create(model="m", stream=True, **request)]
    if shape == "raw":
        parsed = (await resource.with_raw_response.create(model="m", **request)).parse()
        return await parsed if inspect.isawaitable(parsed) else parsed  # openai's legacy raw response parses at once
    return await resource.create(model="m", **request)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("protocol", "shape"),
    [(protocol, shape) for protocol in ("chat", "responses", "anthropic") for shape in shapes(protocol)],
)
def test_every_call_shape_records_the_broken_request_on_its_response(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str, shape: str, mode: str
) -> None:
    instrument(protocol)
    server.enqueue(answers(protocol, shape))
    if mode == "async":

        async def awaited() -> None:
            async with client_of(server, protocol, mode) as client:
                await run_async(client, protocol, shape, orphan_request(protocol))

        asyncio.run(awaited())
    else:
        with client_of(server, protocol, mode) as client:
            shapes(protocol)[shape](client, orphan_request(protocol))
    (span,) = spans(captured)
    assert pairing_of(span) == broken(["result_without_call"], ["unknown"])
    assert counted(captured) == {("result_without_call", "unknown"): 1}


def _resource(client: Any, protocol: str) -> Any:
    if protocol == "responses":
        return client.responses
    return client.messages if protocol == "anthropic" else client.chat.completions
