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
import logging
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from etf_otel import RequestPairingError
from etf_otel import attributes as A
from etf_otel.testing import LocalChatServer, Script, refusals
from etf_otel.testing import chat as C
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
from tests.integrations.redirect import LocalRedirect
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


# --- the provider's refusal ---------------------------------------------------------------------------------

CALL_WITHOUT_RESULT = {
    "chat": "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: call_1_b",
    "responses": "No tool output found for function call call_1_b.",
    "responses-previous": "No tool output found for function call call_1_b.",
    "anthropic": "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: call_1_b. "
    "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
}
"""Each provider's refusal of a call without its result, as the public reports in docs/protocols.md quote it."""

RESULT_WITHOUT_CALL = {
    "chat": "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
    "'tool_calls'.",
    "responses": "No tool call found for function call output with call_id call_1_a.",
    "responses-previous": "No tool call found for function call output with call_id call_1_a.",
    "anthropic": "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: call_1_a. Each "
    "`tool_result` block must have a corresponding `tool_use` block in the previous message.",
}


def refusal(protocol: str, message: str) -> Any:
    return refusals.anthropic(message) if protocol == "anthropic" else refusals.openai(message, param="messages")


def refused_follow_up(server: LocalChatServer, protocol: str, results: list[str], message: str) -> Exception:
    """A first turn, then a follow-up answering ``results`` that the provider refuses with ``message``."""
    with client_of(server, protocol, "sync") as client:
        seen = turn(client, protocol, first_request(protocol))
        server.enqueue(refusal(protocol, message))
        with pytest.raises(Exception) as raised:
            turn(client, protocol, with_results(protocol, results)(seen))
    assert type(raised.value).__name__ == "BadRequestError"
    assert getattr(raised.value, "status_code", None) == 400
    return raised.value


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_predicted_refusal_gets_its_response_span_tied_to_the_check(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol)
    refused_follow_up(server, protocol, ["{a}"], CALL_WITHOUT_RESULT[protocol])
    _, span = spans(captured)
    assert pairing_of(span) == {
        **broken(["call_without_result"], ["unknown"]),
        A.ETF_REQUEST_PAIRING_REFUSED: True,
    }
    assert (span.attributes or {})[A.ERROR_TYPE] == "BadRequestError"
    assert not span.status.is_ok
    assert counted(captured) == {("call_without_result", "unknown"): 1}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_pairing_refusal_the_check_did_not_predict_is_refused_unexplained(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol)
    refused_follow_up(server, protocol, ["{a}", "{b}"], RESULT_WITHOUT_CALL[protocol])
    _, span = spans(captured)
    assert pairing_of(span) == {A.ETF_REQUEST_PAIRING: A.PAIRING_REFUSED_UNEXPLAINED}
    assert (span.attributes or {})[A.ERROR_TYPE] == "BadRequestError"
    assert counted(captured) == {}


@pytest.mark.parametrize("protocol", ["chat", "anthropic"])
def test_a_refusal_for_something_else_says_nothing_of_pairing(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol)
    refused_follow_up(server, protocol, ["{a}", "{b}"], "This model's maximum context length is 8192 tokens.")
    _, span = spans(captured)
    assert pairing_of(span) == {}
    assert (span.attributes or {})[A.ERROR_TYPE] == "BadRequestError"


# --- the request guard --------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_request_guard_refuses_a_broken_request_before_a_byte_is_sent(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol, guard_requests=True)
    with client_of(server, protocol, "sync") as client:
        seen = turn(client, protocol, first_request(protocol))
        sent = len(server.requests)
        with pytest.raises(RequestPairingError) as raised:
            turn(client, protocol, with_results(protocol, ["{a}"])(seen))
        assert len(server.requests) == sent  # refused before the SDK sent it
        turn(client, protocol, with_results(protocol, ["{a}", "{b}"])(seen))  # a clean one goes through
    container = "input" if protocol.startswith("responses") else "messages"
    where = "a call the provider holds (previous_response_id)" if protocol == "responses-previous" else f"{container}["
    assert str(raised.value).startswith("etf-otel refused to send a request its provider would refuse: ")
    assert f"call_without_result call_1_b at {where}" in str(raised.value)  # a proposed id: named
    assert str(raised.value).endswith(": unknown")
    assert raised.value.check.kinds == ("call_without_result",)
    refused_span = spans(captured)[1]
    assert pairing_of(refused_span) == broken(["call_without_result"], ["unknown"])
    assert (refused_span.attributes or {})[A.ERROR_TYPE] == "RequestPairingError"
    assert pairing_of(spans(captured)[2]) == {}


@pytest.mark.parametrize("protocol", ["chat", "anthropic"])
def test_the_request_guard_is_off_by_default_and_the_broken_request_is_sent_as_it_is(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str
) -> None:
    instrument(protocol)
    with client_of(server, protocol, "sync") as client:
        seen = turn(client, protocol, first_request(protocol))
        request = with_results(protocol, ["{a}"])(seen)
        turn(client, protocol, request)
    assert len(server.requests) == 2
    assert server.requests[1].body["messages"] == request["messages"]


def test_the_request_guard_from_the_environment(
    captured: Captured, server: LocalChatServer, instrument: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_GUARD_REQUESTS, "true")
    instrument("chat")
    with client_of(server, "chat", "sync") as client:
        seen = turn(client, "chat", first_request("chat"))
        with pytest.raises(RequestPairingError):
            turn(client, "chat", with_results("chat", ["{a}"])(seen))
    assert len(server.requests) == 1


# --- three rounds, trimmed; ids the target refuses; a self-consistent rewrite -------------------------------


def chat_calls(*ids: str) -> Script:
    return Script(
        events=C.finished(
            *(C.chunk(C.fragment(i, call_id, "read_page", "{}", type="function")) for i, call_id in enumerate(ids))
        )
    )


def assistant(*ids: str) -> dict[str, Any]:
    calls = [{"id": i, "type": "function", "function": {"name": "read_page", "arguments": "{}"}} for i in ids]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "page"}


USER = {"role": "user", "content": "read pages 1 and 2"}
TEXT = Script(events=C.finished(C.chunk(content="done"), finish_reason="stop"))


def three_rounds(server: LocalChatServer, third: list[dict[str, Any]], **client_options: Any) -> None:
    """Two rounds of calls (``call_r1``, then ``call_r2``) answered in a stateless history, then ``third``."""
    server.enqueue(chat_calls("call_r1"), chat_calls("call_r2"), TEXT)
    import openai

    options: dict[str, Any] = {"base_url": server.base_url, "api_key": "t", "max_retries": 0, **client_options}
    with openai.OpenAI(**options) as client:
        for messages in ([USER], [USER, assistant("call_r1"), tool("call_r1")], third):
            list(client.chat.completions.create(model="m", messages=messages, stream=True))


def test_a_clean_stateless_history_of_three_rounds_is_never_named(
    captured: Captured, server: Any, instrument: Any
) -> None:
    instrument("chat")
    three_rounds(server, [USER, assistant("call_r1"), tool("call_r1"), assistant("call_r2"), tool("call_r2")])
    assert [pairing_of(span) for span in spans(captured)] == [{}, {}, {}]
    assert counted(captured) == {}


def test_a_turn_trimmed_from_the_history_is_history_trimmed(captured: Captured, server: Any, instrument: Any) -> None:
    instrument("chat")
    three_rounds(
        server, [USER, tool("call_r1"), assistant("call_r2"), tool("call_r2")]
    )  # call_r1's turn compacted away
    assert pairing_of(spans(captured)[2]) == broken(["result_without_call"], ["history_trimmed"])
    assert counted(captured) == {("result_without_call", "history_trimmed"): 1}


def test_a_result_lost_on_a_retry_is_history_trimmed(captured: Captured, server: Any, instrument: Any) -> None:
    instrument("chat")
    three_rounds(server, [USER, assistant("call_r1"), assistant("call_r2"), tool("call_r2")])  # call_r1's result lost
    assert pairing_of(spans(captured)[2]) == broken(["call_without_result"], ["history_trimmed"])


def test_a_self_consistent_rewrite_is_drift_never_a_pairing_problem(
    captured: Captured, server: Any, instrument: Any
) -> None:
    instrument("chat")
    three_rounds(server, [USER, assistant("call_r1"), tool("call_r1"), assistant("run2_call_r2"), tool("run2_call_r2")])
    assert [pairing_of(span) for span in spans(captured)] == [{}, {}, {}]
    assert counted(captured) == {}


LONG = "call_" + "x" * 40
"""45 characters: OpenAI Chat Completions refuses more than 40 ("string too long ... maximum length 40")."""


@pytest.mark.parametrize(("host", "expected"), [("api.openai.com", ["id_rejected_by_target"]), (None, [])])
def test_an_over_long_id_is_refused_only_by_a_known_target(
    captured: Captured, server: LocalChatServer, instrument: Any, host: str | None, expected: list[str]
) -> None:
    instrument("chat")
    options: dict[str, Any] = {}
    if host is not None:  # the real host in the client's base URL, the bytes sent to the local server
        options = {"base_url": f"https://{host}/v1", "http_client": httpx2.Client(transport=LocalRedirect(server.port))}
    three_rounds(server, [USER, assistant("call_r1"), tool("call_r1"), assistant(LONG), tool(LONG)], **options)
    assert pairing_of(spans(captured)[2]) == (broken(expected, ["unknown"]) if expected else {})
    assert counted(captured) == ({("id_rejected_by_target", "unknown"): 2} if expected else {})
    assert LONG not in exported(captured)  # not a proposed id: never exported


def exported(captured: Captured) -> str:
    """Every span (attributes, events, links) and every metric point, as exported."""
    data = captured.reader.get_metrics_data()
    return "\n".join([*(span.to_json() for span in captured.spans()), data.to_json() if data is not None else ""])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_id_but_a_proposed_one_is_ever_exported(
    captured: Captured, server: LocalChatServer, instrument: Any, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="etf_otel")
    instrument(protocol)
    for results in (["{a}{b}"], ["{a}", "run_1:{b}"]):
        second(server, protocol, with_results(protocol, results))
    server.enqueue(answers(protocol if protocol in ("chat", "anthropic") else "responses", "streamed"))
    with client_of(server, protocol, "sync") as client:
        turn(client, protocol, orphan_request("responses" if protocol.startswith("responses") else protocol))
    text = exported(captured) + "\n".join(
        record.getMessage() for record in caplog.records if record.name.startswith("etf_otel")
    )
    assert "etf.request.pairing" in text
    for secret in ("call_1_acall_1_b", "call_2_acall_2_b", "run_1:", ORPHAN):
        assert secret not in text
