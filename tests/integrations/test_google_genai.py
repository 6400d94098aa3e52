"""The ``google-genai`` instrumentor, driven by the real ``google-genai`` client over real HTTP.

Every test talks to :class:`~etf_otel.testing.LocalChatServer` on 127.0.0.1 with the real SDK
(its HTTP stack, SSE reader, ``GenerateContentResponse`` models, automatic function calling and
continuation): nothing below the client is mocked. The Developer API client and the Vertex AI
client (an OAuth token given, so nothing is fetched) both reach the server through
``HttpOptions(base_url=...)``. The instrumentor patches the SDK globally and is a singleton: the
``etf`` fixture always uninstruments.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import google.oauth2.credentials
import pytest
from google import genai
from google.genai import types
from opentelemetry.sdk.trace import ReadableSpan

from etf_otel import attributes as A
from etf_otel.errors import GuardRefusedError
from etf_otel.integrations.google_genai import GoogleGenAIInstrumentor, instrument_google_genai
from etf_otel.integrations.google_genai._linkage import GeminiConversation
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import gemini as g
from tests.conftest import Captured
from tests.integrations.support import Switch

pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

MODEL = "gemini-test"
NO_AFC = types.GenerateContentConfig(automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


class Etf(Switch[GoogleGenAIInstrumentor]):
    """Switched on and off within a test by ``instrument_google_genai``."""

    instrument_with = staticmethod(instrument_google_genai)


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


def developer(server: LocalChatServer) -> genai.Client:
    options = types.HttpOptions(base_url=server.root_url, api_version="v1beta")
    return genai.Client(api_key="test", http_options=options)


def vertex(server: LocalChatServer) -> genai.Client:
    options = types.HttpOptions(base_url=server.root_url, api_version="v1beta")
    token = google.oauth2.credentials.Credentials(token="test")  # type: ignore[no-untyped-call]
    return genai.Client(vertexai=True, project="p", location="us-central1", credentials=token, http_options=options)


def stream(client: genai.Client, contents: Any = "hi", config: Any = NO_AFC) -> list[dict[str, Any]]:
    return [c.model_dump(exclude_none=True) for c in client.models.generate_content_stream(
        model=MODEL, contents=contents, config=config)]  # fmt: skip


def outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "returned", run()
    except Exception as error:  # the application's view: the type and the message
        return "raised", (type(error).__name__, str(error))


def responses(captured: Captured) -> list[ReadableSpan]:
    return captured.spans(A.SPAN_ASSEMBLE_RESPONSE)


def calls(captured: Captured) -> list[dict[str, Any]]:
    return [dict(span.attributes or {}) for span in captured.spans(A.SPAN_ASSEMBLE_TOOL_CALL)]


def slots(captured: Captured) -> list[tuple[Any, ...]]:
    return [
        (c[A.ETF_CHOICE_INDEX], c[A.ETF_TOOL_CALL_INDEX], c.get(A.GEN_AI_TOOL_NAME), c.get(A.GEN_AI_TOOL_CALL_ID),
         c[A.ETF_TOOL_CALL_VERDICT])
        for c in calls(captured)
    ]  # fmt: skip


def findings(span: ReadableSpan) -> list[tuple[Any, Any]]:
    return [
        (attributes[A.ETF_ERROR_CATEGORY], attributes.get(A.GEN_AI_TOOL_NAME))
        for event in span.events
        for attributes in [event.attributes or {}]
        if event.name == A.EVENT_INTEGRITY_VIOLATION
    ]


def state(span: ReadableSpan) -> tuple[Any, Any, Any]:
    attributes = span.attributes or {}
    return attributes[A.ETF_STREAM_STATE], attributes.get(A.ERROR_TYPE), attributes[A.ETF_STREAM_DISPATCHABLE]


WEATHER = g.call("get_weather", {"city": "Paris"})
TIME = g.call("get_time", {"tz": "CET"})


# --- whole calls: parallel in one chunk, or one per chunk; ids or none ------------------------------------


@pytest.mark.parametrize(
    "chunks", [[g.chunk(WEATHER, TIME)], [g.chunk(WEATHER), g.chunk(TIME)]], ids=["one-chunk", "chunk-each"]
)
def test_parallel_id_less_calls_are_two_slots_by_ordinal_with_no_invented_id(
    etf: Etf, captured: Captured, server: LocalChatServer, chunks: list[Any]
) -> None:
    etf.on()
    server.enqueue(Script(events=g.stream(*chunks)))
    stream(developer(server))
    assert slots(captured) == [(0, 0, "get_weather", None, "proposed"), (0, 1, "get_time", None, "proposed")]
    assert all(c[A.ETF_ID_POSITIONAL] == 1 for c in calls(captured))
    (response,) = responses(captured)
    assert state(response) == ("completed", None, True)
    assert response.attributes[A.ETF_PROTOCOL] == "gemini"  # type: ignore[index]
    assert response.attributes[A.GEN_AI_PROVIDER_NAME] == "gcp.gemini"  # type: ignore[index]


def test_ids_are_kept_and_an_id_less_sibling_is_missing_id(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    server.enqueue(Script(events=g.stream(g.chunk(g.call("get_weather", {}, id="call_1"), g.call("get_time", {})))))
    stream(developer(server))
    assert slots(captured) == [(0, 0, "get_weather", "call_1", "rejected"), (0, 1, "get_time", None, "rejected")]
    assert calls(captured)[1][A.ERROR_TYPE] == "missing_id"
    assert state(responses(captured)[0])[2] is False


# --- Vertex partialArgs ---------------------------------------------------------------------------------

TWO_STREAMED = g.stream(
    g.chunk(g.call("get_weather", will_continue=True)),
    g.chunk(g.call(partial_args=[g.leaf("$.city", string="Pa", will_continue=True)], will_continue=True)),
    g.chunk(g.call(partial_args=[g.leaf("$.city", string="ris", will_continue=True)], will_continue=True)),
    g.chunk(g.call(partial_args=[g.leaf("$.city", string="")], will_continue=True)),
    g.chunk(g.call()),
    g.chunk(g.call("book", will_continue=True)),
    g.chunk(g.call(partial_args=[g.leaf("$.rooms[0].beds", number=2), g.leaf("$.rooms[1].beds", number=1)])),
)


def test_vertex_partial_args_stream_two_calls_assembled_by_ordinal(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on(capture_content=True)
    server.enqueue(Script(events=TWO_STREAMED))
    stream(vertex(server))
    assert server.requests[0].path.endswith("/publishers/google/models/gemini-test:streamGenerateContent")
    assert slots(captured) == [(0, 0, "get_weather", None, "proposed"), (0, 1, "book", None, "proposed")]
    assert [c[A.GEN_AI_TOOL_CALL_ARGUMENTS] for c in calls(captured)] == [
        '{"city":"Paris"}',
        '{"rooms":[{"beds":2.0},{"beds":1.0}]}',  # the SDK reads every numberValue as a float
    ]
    assert responses(captured)[0].attributes[A.GEN_AI_PROVIDER_NAME] == "gcp.vertex_ai"  # type: ignore[index]


def test_vertex_string_left_open_is_invalid_arguments(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    etf.on()
    server.enqueue(Script(events=g.stream(
        g.chunk(g.call("get_weather", will_continue=True)),
        g.chunk(g.call(partial_args=[g.leaf("$.city", string="Pa", will_continue=True)])),  # closes the call
    )))  # fmt: skip
    stream(vertex(server))
    assert calls(captured)[0][A.ERROR_TYPE] == "invalid_arguments"


INCOMPLETE = ("completed", "incomplete_response", False)

# --- every end ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (g.stream(g.chunk(WEATHER)), ("completed", None, True)),
        (g.stream(g.chunk(WEATHER), finish_reason="MAX_TOKENS"), INCOMPLETE),
        (g.stream(g.chunk(WEATHER), finish_reason="MALFORMED_FUNCTION_CALL"), INCOMPLETE),
        (g.stream(g.chunk(WEATHER, finish_reason="STOP"), finish_reason="SAFETY"), INCOMPLETE),
        ([g.blocked()], INCOMPLETE),
        ([g.chunk(WEATHER)], ("truncated", "truncated_stream", False)),
        ([g.chunk(WEATHER), g.chunk(TIME, response_id="resp-2"), g.chunk(finish_reason="STOP")],
         ("truncated", "truncated_stream", False)),
    ],
    ids=["stop", "max-tokens", "malformed", "late-safety", "blocked", "eof", "splice"],
)  # fmt: skip
def test_every_end_class(
    etf: Etf, captured: Captured, server: LocalChatServer, events: list[Any], expected: tuple[Any, ...]
) -> None:
    etf.on()
    server.enqueue(Script(events=events))
    stream(developer(server))
    assert state(responses(captured)[0]) == expected


def test_in_band_error_raises_unchanged_and_fails_the_response(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    script = Script(events=[g.chunk(WEATHER, finish_reason="STOP"), g.error(503, "UNAVAILABLE", "overloaded")])
    server.enqueue(script)
    without = outcome(lambda: stream(developer(server)))
    etf.on()
    server.enqueue(script)
    with_etf = outcome(lambda: stream(developer(server)))
    assert with_etf == without and without[0] == "raised" and without[1][0] == "ServerError"
    assert state(responses(captured)[0]) == ("failed", "truncated_stream", False)


# --- transparency ---------------------------------------------------------------------------------------


def test_a_request_is_read_when_iterated_and_its_chunks_pass_one_generator_of_etf_otel(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    etf.on()
    server.enqueue(Script(events=g.stream(g.chunk(WEATHER), g.chunk(TIME))))
    client = developer(server)  # kept: the SDK closes its HTTP client with it
    models = client.models
    chunks = models._generate_content_stream_with_continuation(model=MODEL, contents="hi", config=NO_AFC)
    assert server.requests == [] and responses(captured) == []  # nothing sent before the SDK iterates
    iterator = iter(chunks)
    assert iterator.gi_code.co_name == "_self_generate"  # the observed stream's own generator, nothing between
    assert len(list(chunks)) == 3 and list(chunks) == [] and iter(chunks) is iterator
    assert [c[A.GEN_AI_TOOL_NAME] for c in calls(captured)] == ["get_weather", "get_time"]
    server.enqueue(Script(events=[g.error(400, "INVALID_ARGUMENT", "bad")], status=400))
    refused = models._generate_content_stream_with_continuation(model=MODEL, contents="hi", config=NO_AFC)
    with pytest.raises(Exception, match="INVALID_ARGUMENT"):
        iter(refused)
    assert list(refused) == [] and len(responses(captured)) == 2  # raised once, as a generator does
    assert responses(captured)[1].attributes[A.ERROR_TYPE] == "ClientError"  # type: ignore[index] # the refusal's span


SCRIPTS = [
    Script(events=TWO_STREAMED),
    Script(events=g.stream(g.chunk(WEATHER, g.text("x")), g.chunk(TIME, finish_reason="STOP"))),
    Script(events=[g.chunk(WEATHER), g.error()]),
    Script(events=[g.chunk(WEATHER)], cut_after=1),
    Script(events=[g.chunk(g.call("f", "not an object"))]),  # the SDK's own ValidationError
    Script(events=[g.error(400, "INVALID_ARGUMENT", "bad")], status=400),
]


def test_the_application_gets_the_same_chunks_and_exceptions_with_and_without(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    def run_all() -> list[tuple[str, Any]]:
        seen = []
        streamed, whole = vertex(server), developer(server)
        for script in SCRIPTS:
            server.enqueue(script)
            seen.append(outcome(lambda: stream(streamed)))
            first = script.events[0]
            server.enqueue(Script(body=first) if isinstance(first, dict) and script.status == 200 else script)
            seen.append(
                outcome(
                    lambda: whole.models.generate_content(model=MODEL, contents="hi", config=NO_AFC).model_dump(
                        exclude_none=True
                    )
                )
            )
        return [(kind, _without_dates(value)) for kind, value in seen]  # fmt: skip

    without = run_all()
    etf.on()
    assert run_all() == without
    assert {kind for kind, _ in without} == {"returned", "raised"}
    # A refused request (the 400) gets the span its response would have had, ended with the error; the SDK's
    # ValidationError fails the stream it ends and refuses the body before it is returned (nothing to judge).
    assert len(responses(captured)) == 2 * len(SCRIPTS) - 1
    *_, failed, refused_stream, refused_body = responses(captured)
    assert state(failed) == ("failed", "truncated_stream", False)
    assert [span.attributes[A.ERROR_TYPE] for span in (refused_stream, refused_body)] == ["ClientError"] * 2  # type: ignore[index]


def _without_dates(value: Any) -> Any:
    """What the application got, but the HTTP date header (it changes by the second)."""
    if isinstance(value, (list, tuple)):
        return [_without_dates(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_dates(item) for key, item in value.items() if key != "date"}
    return value


def test_automatic_function_calling_is_the_same_for_the_application_with_and_without(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    """The chunks of every round, what the functions were handed, and an in-band error in a later round."""

    def run() -> tuple[Any, ...]:
        RAN.clear()
        server.enqueue(Script(events=g.stream(g.chunk(WEATHER), g.chunk(g.call("get_time", {"tz": "CET"})))))
        server.enqueue(Script(events=g.stream(g.chunk(g.text("done")))))
        server.enqueue(Script(events=g.stream(g.chunk(WEATHER))), Script(events=[g.chunk(g.text("x")), g.error()]))
        client = developer(server)
        first = outcome(lambda: stream(client, "weather?", AFC))
        second = outcome(lambda: stream(client, "weather?", AFC))
        return _without_dates(first), _without_dates(second), list(RAN)

    without = run()
    etf.on()
    assert run() == without
    assert without[1][0] == "raised" and without[2] == ["get_weather(Paris)", "get_time(CET)", "get_weather(Paris)"]
    assert [state(span)[0] for span in responses(captured)] == ["completed", "completed", "completed", "failed"]


# --- a complete body ------------------------------------------------------------------------------------


def test_generate_content_body_is_judged_as_a_body(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    etf.on()
    server.enqueue(Script(body=g.chunk(WEATHER, TIME, finish_reason="MAX_TOKENS")))
    client = developer(server)
    body = client.models.generate_content(model=MODEL, contents="hi", config=NO_AFC)
    assert [call.name for call in body.function_calls or ()] == ["get_weather", "get_time"]
    (response,) = responses(captured)
    assert response.attributes[A.ETF_RESPONSE_STREAMED] is False  # type: ignore[index]
    assert state(response) == ("completed", "incomplete_response", False)
    assert [c[A.ETF_TOOL_CALL_FRAGMENTS] for c in calls(captured)] == [0, 0]


def test_aio_stream_and_body(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    etf.on()
    server.enqueue(Script(events=g.stream(g.chunk(WEATHER), g.chunk(TIME))), Script(body=g.chunk(TIME)))
    client = developer(server)

    async def run() -> tuple[int, Any]:
        chunks = [c async for c in await client.aio.models.generate_content_stream(
            model=MODEL, contents="hi", config=NO_AFC)]  # fmt: skip
        body = await client.aio.models.generate_content(model=MODEL, contents="hi", config=NO_AFC)
        return len(chunks), body.function_calls

    count, body_calls = asyncio.run(run())
    assert count == 3 and body_calls is not None
    first, second = responses(captured)
    assert state(first) == ("completed", None, True)
    assert second.attributes[A.ETF_RESPONSE_STREAMED] is False  # type: ignore[index]
    assert state(second) == ("truncated", "truncated_stream", False)  # no finishReason in the body


# --- linkage --------------------------------------------------------------------------------------------


def answer(*names: str, ids: tuple[Any, ...] = ()) -> dict[str, Any]:
    parts = []
    for position, name in enumerate(names):
        response: dict[str, Any] = {"name": name, "response": {"result": "ok"}}
        if position < len(ids) and ids[position] is not None:
            response["id"] = ids[position]
        parts.append({"functionResponse": response})
    return {"role": "user", "parts": parts}


def follow_up(server: LocalChatServer, captured: Captured, reply: dict[str, Any]) -> ReadableSpan:
    """The model turn as the application copies it, then its answers; the next response's span."""
    client = developer(server)
    first = client.models.generate_content(model=MODEL, contents="hi", config=NO_AFC)
    assert first.candidates and first.candidates[0].content
    server.enqueue(Script(body=g.chunk(g.text("done"), finish_reason="STOP")))
    contents = [{"role": "user", "parts": [{"text": "hi"}]}, first.candidates[0].content, reply]
    client.models.generate_content(model=MODEL, contents=contents, config=NO_AFC)
    return responses(captured)[-1]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (answer("get_time", "get_weather"), []),  # order across names does not matter
        (answer("get_weather"), [("unanswered_call", "get_time")]),
        (answer("get_weather", "get_time", "get_time"), [("duplicate_result", "get_time")]),
        (answer("get_weather", "get_time", "lookup"), [("orphaned_result", "lookup")]),
    ],
    ids=["clean", "unanswered", "duplicate", "orphaned"],
)
def test_linkage_of_id_less_calls_is_by_name_and_order(
    etf: Etf, captured: Captured, server: LocalChatServer, reply: dict[str, Any], expected: list[Any]
) -> None:
    etf.on()
    server.enqueue(Script(body=g.chunk(WEATHER, TIME, finish_reason="STOP")))
    assert findings(follow_up(server, captured, reply)) == expected


def test_linkage_by_id_checks_the_id_and_the_name(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    etf.on()
    body = g.chunk(g.call("get_weather", {}, id="c1"), g.call("get_time", {}, id="c2"), finish_reason="STOP")
    server.enqueue(Script(body=body))
    span = follow_up(server, captured, answer("get_weather", "get_weather", ids=("c1", "c2")))
    assert findings(span) == [("orphaned_result", "get_weather"), ("unanswered_call", "get_time")]
    server.enqueue(Script(body=body))
    span = follow_up(server, captured, answer("get_time", "get_weather", ids=(None, "c1")))  # id-less: by name
    assert findings(span) == []
    assert span.attributes[A.ETF_LINKAGE_ANSWERED_IDS] == ("c1", "c2")  # type: ignore[index]


def test_a_model_turn_given_as_model_content_is_the_model_turn(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    """``types.ModelContent`` (Google ADK builds its streamed model turns so) has its role as a class default: the
    SDK sends ``"role": "model"``, though the object was not given it. The follow-up is linked as with a
    ``Content``; it was not, and settled nothing (issue 39: ADK's SSE mode, 0 of 2 answered ids)."""
    etf.on()
    body = g.chunk(g.call("get_weather", {}, id="c1"), g.call("get_time", {}, id="c2"), finish_reason="STOP")
    server.enqueue(Script(body=body))
    client = developer(server)
    first = client.models.generate_content(model=MODEL, contents="hi", config=NO_AFC)
    assert first.candidates and first.candidates[0].content
    turn = types.ModelContent(parts=first.candidates[0].content.parts or [])
    server.enqueue(Script(body=g.chunk(g.text("done"), finish_reason="STOP")))
    reply = answer("get_weather", "get_time", ids=("c1", "c2"))
    client.models.generate_content(
        model=MODEL, contents=[types.UserContent(parts=[types.Part(text="hi")]), turn, reply]
    )
    span = responses(captured)[-1]
    assert findings(span) == []
    assert span.attributes[A.ETF_LINKAGE_ANSWERED_IDS] == ("c1", "c2")  # type: ignore[index]
    assert server.requests[-1].body["contents"][1]["role"] == "model"  # what the SDK sent


# --- automatic function calling -------------------------------------------------------------------------

RAN: list[str] = []


def get_weather(city: str) -> str:
    """The weather in a city."""
    RAN.append(f"get_weather({city})")
    return "sunny"


def get_time(tz: str) -> str:
    """The time in a time zone."""
    RAN.append(f"get_time({tz})")
    if tz == "Mars":
        raise ValueError("no such zone")
    return "14:05"


AFC = types.GenerateContentConfig(tools=[get_weather, get_time])
WEATHER_1 = g.call("get_weather", {"city": "Paris"}, id="w1")
MARS = g.call("get_time", {"tz": "Mars"}, id="t1")


def executions(captured: Captured) -> list[tuple[Any, ...]]:
    spans = captured.spans(A.SPAN_EXECUTE_TOOL)
    tool_calls = {span.context.span_id: span for span in captured.spans(A.SPAN_ASSEMBLE_TOOL_CALL)}
    found = []
    for span in spans:
        attributes = span.attributes or {}
        (link,) = span.links
        call = tool_calls[link.context.span_id].attributes or {}
        name, index = attributes[A.GEN_AI_TOOL_NAME], attributes[A.ETF_TOOL_CALL_INDEX]
        outcome = attributes.get(A.GEN_AI_TOOL_CALL_ID), attributes.get(A.ERROR_TYPE)
        found.append((name, index, call[A.ETF_TOOL_CALL_INDEX], call[A.GEN_AI_TOOL_NAME], *outcome))
    return found


@pytest.mark.parametrize("mode", ["stream", "body", "aio-stream"])
def test_automatic_function_calling_runs_are_executions_linked_to_their_calls(
    etf: Etf, captured: Captured, server: LocalChatServer, mode: str
) -> None:
    etf.on()
    RAN.clear()
    if mode == "body":
        server.enqueue(
            Script(body=g.chunk(WEATHER_1, g.call("get_time", {"tz": "Mars"}, id="t1"), finish_reason="STOP"))
        )
        server.enqueue(Script(body=g.chunk(g.text("done"), finish_reason="STOP")))
    else:
        server.enqueue(
            Script(events=g.stream(g.chunk(WEATHER_1), g.chunk(g.call("get_time", {"tz": "Mars"}, id="t1"))))
        )
        server.enqueue(Script(events=g.stream(g.chunk(g.text("done")))))
    client = developer(server)
    if mode == "body":
        client.models.generate_content(model=MODEL, contents="weather?", config=AFC)
    elif mode == "stream":
        stream(client, "weather?", AFC)
    else:

        async def run() -> None:
            async for _ in await client.aio.models.generate_content_stream(model=MODEL, contents="hi", config=AFC):
                pass

        asyncio.run(run())
    assert RAN == ["get_weather(Paris)", "get_time(Mars)"]
    assert executions(captured) == [
        ("get_weather", 0, 0, "get_weather", "w1", None),
        ("get_time", 1, 1, "get_time", "t1", "FunctionInvocationError"),
    ]
    first, second = responses(captured)
    assert state(first)[2] is True and state(second) == ("completed", None, False)
    # The SDK answers without ids, in the next request: the id-mode call is answered by name.
    assert findings(second) == [] and second.attributes[A.ETF_LINKAGE_ANSWERED_IDS] == ("w1", "t1")  # type: ignore[index]
    sent = server.requests[1].body["contents"][-1]["parts"]
    assert [part["functionResponse"].get("id") for part in sent] == [None, None]


def test_chats_turns_with_automatic_function_calling_link_cleanly(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    """Two ``chats.send_message_stream`` turns, each two requests: every follow-up finds the response it answers
    (none is judged against another turn's calls), and each run of the SDK is an execution."""
    etf.on()
    RAN.clear()
    client = developer(server)  # held: a collected client closes its HTTP client
    chat = client.chats.create(model=MODEL, config=AFC)
    for city in ("Paris", "Rome"):
        server.enqueue(Script(events=g.stream(g.chunk(g.call("get_weather", {"city": city})))))
        server.enqueue(Script(events=g.stream(g.chunk(g.text("sunny")))))
        list(chat.send_message_stream(f"weather in {city}?"))
    assert RAN == ["get_weather(Paris)", "get_weather(Rome)"]
    assert [findings(span) for span in responses(captured)] == [[], [], [], []]
    assert [state(span)[2] for span in responses(captured)] == [True, False, True, False]
    assert [row[:4] for row in executions(captured)] == [("get_weather", 0, 0, "get_weather")] * 2


def divergences(span: ReadableSpan) -> list[Any]:
    return [
        (event.attributes or {}).get(A.ETF_DIVERGENCE_KIND)
        for event in span.events
        if (event.attributes or {}).get(A.ETF_ERROR_CATEGORY) == "divergent_assembly"
    ]


def test_aio_automatic_function_calling_runs_a_streamed_call_without_its_arguments(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    """The SDK does not join ``partialArgs``: its async function calling runs each streamed call's head with
    no arguments (its sync one runs none). The rules assembled the arguments: the execution, linked to its
    call, says the SDK ran it with others (``divergent_assembly``, ``arguments_differ``)."""
    etf.on()
    seen: list[Any] = []

    def book(rooms: object = "none") -> str:  # not Any: the SDK's argument conversion raises TypeError on it
        """Book rooms."""
        seen.append(rooms)
        return "booked"

    def get_weather(city: str = "nowhere") -> str:
        """The weather in a city."""
        seen.append(city)
        return "sunny"

    config = types.GenerateContentConfig(tools=[get_weather, book])
    server.enqueue(Script(events=TWO_STREAMED), Script(events=g.stream(g.chunk(g.text("done")))))

    async def run() -> None:
        client = vertex(server)  # one per event loop: its aiohttp session belongs to the loop
        async for _ in await client.aio.models.generate_content_stream(model=MODEL, contents="hi", config=config):
            pass

    asyncio.run(run())
    assert seen == ["nowhere", "none"]  # the defaults: nothing of Paris or the rooms reached the functions
    assert [row[:4] for row in executions(captured)] == [("get_weather", 0, 0, "get_weather"), ("book", 1, 1, "book")]
    assert [divergences(span) for span in captured.spans(A.SPAN_EXECUTE_TOOL)] == [["arguments_differ"]] * 2
    # A whole call runs with its own arguments: no divergence (numbers compared as JSON values).
    captured.clear()
    server.enqueue(Script(events=g.stream(g.chunk(g.call("book", {"rooms": [{"beds": 2}]})))))
    server.enqueue(Script(events=g.stream(g.chunk(g.text("done")))))
    asyncio.run(run())
    assert seen[-1] == [{"beds": 2}]
    assert [divergences(span) for span in captured.spans(A.SPAN_EXECUTE_TOOL)] == [[]]


def test_aio_failures_and_coroutine_functions(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    """The async client as the sync one: a refused request is no response, a chunk the SDK refuses or an
    in-band error later fails the response; a coroutine function the SDK awaits is an execution too."""
    etf.on()
    awaited: list[str] = []

    async def get_weather(city: str) -> str:
        """The weather in a city."""
        awaited.append(city)
        return "sunny"

    server.enqueue(
        Script(events=[g.error(400, "INVALID_ARGUMENT", "bad")], status=400),
        Script(events=[g.chunk(g.call("f", "not an object"))]),
        Script(events=[g.chunk(WEATHER), g.error()]),
        Script(events=g.stream(g.chunk(WEATHER))),
        Script(events=g.stream(g.chunk(g.text("done")))),
    )

    async def run(config: Any) -> tuple[str, Any]:
        client = developer(server)
        try:
            return "returned", [c async for c in await client.aio.models.generate_content_stream(
                model=MODEL, contents="hi", config=config)]  # fmt: skip
        except Exception as error:
            return "raised", type(error).__name__

    async def all_runs() -> list[tuple[Any, ...]]:
        afc = types.GenerateContentConfig(tools=[get_weather])
        return [await run(NO_AFC), await run(NO_AFC), await run(NO_AFC), (await run(afc))[:1]]

    assert asyncio.run(all_runs()) == [
        ("raised", "ClientError"),
        ("raised", "ValidationError"),
        ("raised", "ServerError"),
        ("returned",),
    ]
    assert awaited == ["Paris"]
    refused, *answered = responses(captured)
    assert refused.attributes[A.ERROR_TYPE] == "ClientError"  # type: ignore[index] # the 400's span
    assert [state(span)[0] for span in answered] == ["failed", "failed", "completed", "completed"]
    assert [row[:4] for row in executions(captured)] == [("get_weather", 0, 0, "get_weather")]


def test_a_conversation_keeps_no_arguments_between_requests(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    """Linkage by name and order needs the latest response's calls: their names, ids and slots, never what
    the model wrote in them."""
    instrumentor = etf.on()
    server.enqueue(Script(body=g.chunk(g.call("get_weather", {"city": "a-secret-place"}), finish_reason="STOP")))
    client = developer(server)
    client.models.generate_content(model=MODEL, contents="hi", config=NO_AFC)
    conversations = instrumentor._conversations
    assert conversations is not None
    (kept,) = {id(c): c for c in conversations.index._by_request._items.values()}.values()
    assert isinstance(kept, GeminiConversation)
    assert kept.latest is not None and [(c.name, c.arguments) for c in kept.latest.calls] == [("get_weather", "")]
    assert "a-secret-place" not in repr(kept.latest)


def test_a_guarded_host_finds_id_less_calls_by_name_and_order(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    """The application runs the SDK's id-less ``FunctionCall``s through a guarded host: the k-th run of a
    name is the k-th call of that name in the latest response, linked to it and judged by its verdict."""
    instrumentation = etf.on().instrumentation
    assert instrumentation is not None
    ran: list[str] = []

    def run_tool(call: Any) -> str:
        ran.append(call.name)
        return "ok"

    host = instrumentation.host(run_tool, guard=True)
    client = developer(server)

    def turn(*events: Any) -> list[Any]:
        server.enqueue(Script(events=list(events)))
        chunks = list(client.models.generate_content_stream(model=MODEL, contents="hi", config=NO_AFC))
        return [call for chunk in chunks for call in chunk.function_calls or ()]

    calls = turn(*g.stream(g.chunk(WEATHER), g.chunk(TIME), g.chunk(g.call("get_weather", {"city": "Rome"}))))
    for call in [*calls, calls[0]]:  # one run of get_weather more than the response proposed
        try:
            host(call)
        except GuardRefusedError as error:
            ran.append(f"refused {error.category.value}")
    assert ran == ["get_weather", "get_time", "get_weather", "refused missing_id"]
    spans = captured.spans(A.SPAN_EXECUTE_TOOL)
    slots_run = [((s.attributes or {}).get(A.ETF_TOOL_CALL_INDEX), len(s.links)) for s in spans]
    assert slots_run == [(0, 1), (1, 1), (2, 1), (None, 0)]
    tool_calls = {s.context.span_id: s for s in captured.spans(A.SPAN_ASSEMBLE_TOOL_CALL)}
    linked = [(tool_calls[s.links[0].context.span_id].attributes or {})[A.ETF_TOOL_CALL_INDEX] for s in spans[:3]]
    assert linked == [0, 1, 2]
    # A rejected id-less call is refused for what the rules found, not for its missing id.
    (cut,) = turn(*g.stream(g.chunk(WEATHER), finish_reason="MAX_TOKENS"))
    with pytest.raises(GuardRefusedError) as raised:
        host(cut)
    assert raised.value.category.value == "incomplete_response"


# --- the request before it is sent (docs/protocols.md) ------------------------------------------------------

FUNCTION_RESPONSE_TURN = "Please ensure that function response turn comes immediately after a function call turn."
"""The Gemini API's refusal of results without their calls (GoogleCloudPlatform/generative-ai#368)."""


def pairing(span: ReadableSpan) -> dict[str, Any]:
    return {key: value for key, value in (span.attributes or {}).items() if key.startswith("etf.request.pairing")}


def test_a_dropped_result_is_named_on_the_next_response(etf: Etf, captured: Captured, server: LocalChatServer) -> None:
    etf.on()
    server.enqueue(Script(body=g.chunk(WEATHER, TIME, finish_reason="STOP")))
    span = follow_up(server, captured, answer("get_weather"))
    assert pairing(span) == {
        "etf.request.pairing": "broken",
        "etf.request.pairing_problems": ("call_without_result",),
        "etf.request.pairing_reasons": ("unknown",),
    }
    assert captured.metric_sum("etf.request.pairing_problems", gen_ai__provider__name="gcp.gemini") == 1


def test_a_refusal_of_the_api_gets_its_span_and_the_guard_refuses_first(
    etf: Etf, captured: Captured, server: LocalChatServer
) -> None:
    from etf_otel import RequestPairingError
    from etf_otel.testing import refusals

    etf.on()
    server.enqueue(Script(body=g.chunk(WEATHER, TIME, finish_reason="STOP")), refusals.gemini(FUNCTION_RESPONSE_TURN))
    client = developer(server)
    first = client.models.generate_content(model=MODEL, contents="hi", config=NO_AFC)
    assert first.candidates and first.candidates[0].content
    user = {"role": "user", "parts": [{"text": "hi"}]}
    broken = [user, first.candidates[0].content, {"role": "user", "parts": [{"text": "and?"}]}, answer("get_weather")]
    with pytest.raises(Exception, match="function response turn") as raised:
        client.models.generate_content(model=MODEL, contents=broken, config=NO_AFC)
    assert type(raised.value).__name__ == "ClientError"
    refused = responses(captured)[1]
    assert pairing(refused)["etf.request.pairing_refused"] is True
    assert refused.attributes[A.ERROR_TYPE] == "ClientError"  # type: ignore[index]
    etf.off()
    etf.on(guard_requests=True)
    sent = len(server.requests)
    with pytest.raises(
        RequestPairingError, match=r"call_without_result at contents\[1\] \(call 0\): unknown \(and 2 more\)$"
    ):
        list(client.models.generate_content_stream(model=MODEL, contents=broken, config=NO_AFC))
    with pytest.raises(RequestPairingError):
        client.models.generate_content(model=MODEL, contents=broken, config=NO_AFC)
    assert len(server.requests) == sent  # nothing was sent
