"""Configuration without code: the ``OTEL_INSTRUMENTATION_ETF_*`` variables, and the provider fallback.

Each variable is driven through the real ``openai`` instrumentor and the real client talking to
:class:`~etf_otel.testing.LocalChatServer` on 127.0.0.1, with in-memory SDK providers
(docs/configuration.md). Every test pairs what the variable does with the run that shows
the difference (the variable unset, or a keyword that wins over it), so none can pass vacuously.
The last tests run ``examples/zero_code.py`` under ``opentelemetry-instrument``, where the
environment is the only way to configure anything.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from etf_otel import attributes as A
from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation import Instrumentation, instrument_host, instrument_stream
from etf_otel.integrations.openai._instrumentor import FALLBACK_PROVIDER, OpenAIInstrumentor, instrument_openai
from etf_otel.testing import DONE, LocalChatServer, Script
from etf_otel.testing import responses as R
from etf_otel.testing.chat import chunk
from tests.conftest import Captured
from tests.integrations.support import Harness, response_span
from tests.test_examples import console_spans, named, zero_code

VARIABLES = (
    A.ENV_PROVIDER_NAME,
    A.ENV_ALLOW,
    A.ENV_DENY,
    A.ENV_GUARD,
    A.ENV_MAX_CONVERSATIONS,
    A.ENV_CAPTURE_CONTENT,
)


def call(index: int, call_id: str | None, name: str | None = None, arguments: str = "") -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "id": call_id, "function": {"arguments": arguments}}
    if name is not None:
        fragment["type"] = "function"
        fragment["function"]["name"] = name
    return fragment


def proposing(call_id: str) -> list[Any]:
    return [chunk(tool_calls=[call(0, call_id, "read_page", '{"page":1}')]), chunk(finish_reason="tool_calls"), DONE]


NULL_CONTINUATION = [
    chunk(tool_calls=[call(0, "call-a", "read_page", '{"page":')]),
    chunk(tool_calls=[call(0, None, arguments="1}")]),
    chunk(finish_reason="tool_calls"),
    DONE,
]
# ``id: ""`` after the id: rejected (empty_after_established) unless ``empty_continuation`` is allowed.
EMPTY_CONTINUATION = [
    chunk(tool_calls=[call(0, "call-a", "read_page", '{"page":')]),
    chunk(tool_calls=[call(0, "", arguments="1}")]),
    chunk(finish_reason="tool_calls"),
    DONE,
]
# Another id mid-call: rejected (id_conflict) under every rule set.
CONFLICTING_ID = [
    chunk(tool_calls=[call(0, "call-a", "read_page", '{"page":')]),
    chunk(tool_calls=[call(0, "call-b", arguments="1}")]),
    chunk(finish_reason="tool_calls"),
    DONE,
]
TEXT_ONLY = [chunk(content="done"), chunk(finish_reason="stop"), DONE]
CALL_A = {"id": "call-a", "type": "function", "function": {"name": "read_page", "arguments": '{"page":1}'}}
USER = [{"role": "user", "content": "read page 1"}]


# --- fixtures ---------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an environment that configures nothing."""
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def client(server: LocalChatServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as c:
        yield c


class Etf(Harness[OpenAIInstrumentor]):
    """Instruments with the captured providers, as many times as a test needs; always uninstrumented after."""

    def instrument(self, **options: Any) -> OpenAIInstrumentor:
        self.close()
        self.captured = Captured()
        self.instrumentor = instrument_openai(**self.providers(), **options)
        return self.instrumentor

    @property
    def instrumentation(self) -> Instrumentation:
        assert self.instrumentor is not None and self.instrumentor.instrumentation is not None
        return self.instrumentor.instrumentation


@pytest.fixture
def etf(captured: Captured) -> Iterator[Etf]:
    with Etf(captured) as harness:
        yield harness


def stream(server: LocalChatServer, client: openai.OpenAI, events: list[Any], messages: list[Any] = USER) -> None:
    server.enqueue(Script(events=events))
    for _ in client.chat.completions.create(model="m", messages=messages, stream=True):
        pass


def the_call_span(captured: Captured) -> ReadableSpan:
    (span,) = captured.spans("assemble_tool_call")
    return span


def providers_on_metrics(captured: Captured) -> set[Any]:
    return {
        attributes.get(A.GEN_AI_PROVIDER_NAME) for points in captured.metrics().values() for attributes, _ in points
    }


class Host:
    def __init__(self) -> None:
        self.executed: list[Any] = []

    def execute(self, tool_call: Any) -> str:
        self.executed.append(tool_call)
        return "page text"


# --- OTEL_INSTRUMENTATION_ETF_PROVIDER_NAME ----------------------------------------------------------------------


def test_provider_name_from_the_environment_labels_spans_and_metrics(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_PROVIDER_NAME, "vllm")
    etf.instrument()
    stream(server, client, NULL_CONTINUATION)
    etf.instrumentation.host(Host()).execute(CALL_A)

    assert response_span(etf.captured).attributes[A.GEN_AI_PROVIDER_NAME] == "vllm"
    assert the_call_span(etf.captured).attributes[A.GEN_AI_PROVIDER_NAME] == "vllm"
    (execution,) = etf.captured.spans("execute_tool")
    assert execution.attributes[A.GEN_AI_PROVIDER_NAME] == "vllm"
    assert etf.captured.metric_sum(A.METRIC_STREAMS, gen_ai__provider__name="vllm") == 1
    assert providers_on_metrics(etf.captured) == {"vllm", None}  # None: the duration histogram has no provider


def test_provider_name_keyword_beats_the_environment(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_PROVIDER_NAME, "vllm")
    etf.instrument(provider_name="tgi")
    stream(server, client, NULL_CONTINUATION)

    assert response_span(etf.captured).attributes[A.GEN_AI_PROVIDER_NAME] == "tgi"
    assert etf.captured.metric_sum(A.METRIC_STREAMS, gen_ai__provider__name="tgi") == 1
    assert etf.captured.metric_sum(A.METRIC_STREAMS, gen_ai__provider__name="vllm") == 0


def test_environment_is_read_when_instrumenting_not_per_call(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_PROVIDER_NAME, "vllm")
    etf.instrument()
    monkeypatch.setenv(A.ENV_PROVIDER_NAME, "changed-later")
    stream(server, client, NULL_CONTINUATION)

    assert response_span(etf.captured).attributes[A.GEN_AI_PROVIDER_NAME] == "vllm"


# --- the provider fallback ---------------------------------------------------------------------------------------


def test_provider_falls_back_to_openai_for_an_unknown_host(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI
) -> None:
    """127.0.0.1 is no known host: the client's wire API names the provider; the address goes on no metric."""
    assert "127.0.0.1" in server.base_url
    etf.instrument()
    stream(server, client, NULL_CONTINUATION)

    assert FALLBACK_PROVIDER == "openai"
    assert response_span(etf.captured).attributes[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert the_call_span(etf.captured).attributes[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert etf.captured.metric_sum(A.METRIC_STREAMS, gen_ai__provider__name="openai") == 1
    assert etf.captured.metric_sum(A.METRIC_TOOL_CALLS, gen_ai__provider__name="openai") == 1
    labels = [
        value for points in etf.captured.metrics().values() for attributes, _ in points for value in attributes.values()
    ]
    assert not any("127.0.0.1" in str(value) or str(server.port) in str(value) for value in labels), labels


def test_provider_falls_back_on_the_responses_api_too(etf: Etf, server: LocalChatServer) -> None:
    etf.instrument()
    events = R.stream(R.call(0, "call_a", "read_page", ('{"page":', "1}"), item_id="fc_a"))
    server.enqueue(Script(events=events, named=True))
    with openai.OpenAI(base_url=server.base_url, api_key="t", max_retries=0, timeout=5.0) as responses_client:
        for _ in responses_client.responses.create(model="m", input="read page 1", stream=True):
            pass

    response = response_span(etf.captured)
    assert response.attributes[A.ETF_PROTOCOL] == "responses"
    assert response.attributes[A.GEN_AI_PROVIDER_NAME] == "openai"


def test_configured_provider_overrides_the_fallback_and_a_known_host_is_not_the_fallback(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etf_otel.integrations.openai._instrumentor import provider_of_client

    with openai.OpenAI(base_url="https://api.groq.com/openai/v1", api_key="t") as groq:
        assert provider_of_client(groq) == "groq"
    with openai.AzureOpenAI(base_url="https://gateway.example/openai", api_key="t", api_version="2024-10-21") as azure:
        assert provider_of_client(azure) == "azure.ai.openai"
    monkeypatch.setenv(A.ENV_PROVIDER_NAME, "my-gateway")
    etf.instrument()
    stream(server, client, NULL_CONTINUATION)
    assert response_span(etf.captured).attributes[A.GEN_AI_PROVIDER_NAME] == "my-gateway"


# --- OTEL_INSTRUMENTATION_ETF_ALLOW ------------------------------------------------------------------------------


def test_allow_from_the_environment_admits_the_rule(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    etf.instrument()
    stream(server, client, EMPTY_CONTINUATION)
    assert the_call_span(etf.captured).attributes[A.ETF_TOOL_CALL_VERDICT] == "rejected"

    monkeypatch.setenv(A.ENV_ALLOW, " Empty_Continuation ,")
    etf.instrument()
    stream(server, client, EMPTY_CONTINUATION)
    span = the_call_span(etf.captured)
    assert span.attributes[A.ETF_TOOL_CALL_VERDICT] == "proposed"
    assert span.attributes[A.ETF_ID_KEPT_EMPTY] == 1


def test_allow_keyword_beats_the_environment(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_ALLOW, "empty_continuation")
    etf.instrument(allow=())
    stream(server, client, EMPTY_CONTINUATION)
    span = the_call_span(etf.captured)
    assert span.attributes[A.ETF_TOOL_CALL_VERDICT] == "rejected"
    assert span.attributes[A.ERROR_TYPE] == "empty_after_established"


def test_unknown_rule_name_is_ignored_with_one_warning(
    etf: Etf,
    server: LocalChatServer,
    client: openai.OpenAI,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    unknown = f"no_such_rule_{uuid.uuid4().hex[:8]}"  # warnings are once per process: a name no other test used
    monkeypatch.setenv(A.ENV_ALLOW, f"{unknown},empty_continuation")
    with caplog.at_level(logging.WARNING, logger="etf_otel"):
        etf.instrument()  # neither raises
        Instrumentation(etf.captured.tracer_provider, etf.captured.meter_provider)
        stream(server, client, EMPTY_CONTINUATION)

    warnings = [record for record in caplog.records if unknown in record.getMessage()]
    assert len(warnings) == 1, [record.getMessage() for record in caplog.records]
    assert warnings[0].levelno == logging.WARNING and A.ENV_ALLOW in warnings[0].getMessage()
    assert the_call_span(etf.captured).attributes[A.ETF_TOOL_CALL_VERDICT] == "proposed"  # the known name is kept


# --- OTEL_INSTRUMENTATION_ETF_DENY -------------------------------------------------------------------------------

# A complete body from an OpenAI-compatible gateway: the call's parameters are all optional, no arguments key.
NO_ARGUMENTS_BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call-a", "type": "function", "function": {"name": "now"}}],
            },
            "finish_reason": "tool_calls",
        }
    ],
}


def body(server: LocalChatServer, client: openai.OpenAI) -> Any:
    server.enqueue(Script(body=NO_ARGUMENTS_BODY))
    return client.chat.completions.create(model="m", messages=USER)


NO_ARGUMENTS_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 0,
    "model": "m",
    "status": "completed",
    "output": [{"type": "function_call", "id": "fc_1", "call_id": "call-a", "name": "now", "status": "completed"}],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_body_call_without_arguments_is_proposed_with_empty_arguments_by_default(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, api: str
) -> None:
    etf.instrument()
    if api == "chat":
        completion = body(server, client)
        assert "arguments" not in completion.choices[0].message.tool_calls[0].function.model_fields_set  # as sent
    else:
        server.enqueue(Script(body=NO_ARGUMENTS_RESPONSE))
        response = client.responses.create(model="m", input="hi")
        assert "arguments" not in response.output[0].model_fields_set  # the application gets it as sent
    span = the_call_span(etf.captured)
    assert span.attributes[A.ETF_TOOL_CALL_VERDICT] == "proposed"
    assert span.attributes[A.ETF_TOOL_CALL_ABSENT_ARGUMENTS] == 1
    transitions = etf.captured.metrics()[A.METRIC_ID_TRANSITIONS]
    assert [(a[A.ETF_ID_TRANSITION], v) for a, v in transitions if a[A.ETF_ID_TRANSITION] == "absent_arguments"] == [
        ("absent_arguments", 1)
    ]


def test_deny_from_the_environment_turns_off_a_default_rule(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_DENY, " Absent_Arguments_In_Body ,")
    monkeypatch.setenv(A.ENV_ALLOW, "absent_arguments_in_body")  # deny wins
    etf.instrument()
    body(server, client)
    span = the_call_span(etf.captured)
    assert span.attributes[A.ETF_TOOL_CALL_VERDICT] == "rejected"
    assert span.attributes[A.ERROR_TYPE] == "invalid_arguments"
    assert A.ETF_TOOL_CALL_ABSENT_ARGUMENTS not in span.attributes


def test_deny_keyword_beats_the_environment(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_DENY, "absent_arguments_in_body")
    etf.instrument(deny=())
    body(server, client)
    assert the_call_span(etf.captured).attributes[A.ETF_TOOL_CALL_VERDICT] == "proposed"
    etf.instrument(deny=["absent_arguments_in_body"])
    body(server, client)
    assert the_call_span(etf.captured).attributes[A.ETF_TOOL_CALL_VERDICT] == "rejected"


def test_a_stream_without_arguments_is_not_read_as_empty(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI
) -> None:
    """Bodies only: the same call streamed without arguments is invalid_arguments, as it always was."""
    etf.instrument()
    stream(
        server,
        client,
        [
            chunk(tool_calls=[{"index": 0, "id": "call-a", "type": "function", "function": {"name": "now"}}]),
            chunk(finish_reason="tool_calls"),
            DONE,
        ],
    )
    span = the_call_span(etf.captured)
    assert (span.attributes[A.ETF_TOOL_CALL_VERDICT], span.attributes[A.ERROR_TYPE]) == (
        "rejected",
        "invalid_arguments",
    )


# --- OTEL_INSTRUMENTATION_ETF_GUARD ------------------------------------------------------------------------------


def test_guard_from_the_environment_refuses_a_rejected_call(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    etf.instrument()
    stream(server, client, CONFLICTING_ID)
    observed_only = Host()
    assert etf.instrumentation.host(observed_only).execute(CALL_A) == "page text"
    assert observed_only.executed == [CALL_A]

    monkeypatch.setenv(A.ENV_GUARD, "TRUE")
    etf.instrument()
    stream(server, client, CONFLICTING_ID)
    guarded = Host()
    with pytest.raises(GuardRefusedError) as refused:
        etf.instrumentation.host(guarded).execute(CALL_A)
    assert refused.value.category.value == "id_conflict"
    assert guarded.executed == []
    (execution,) = etf.captured.spans("execute_tool")
    assert execution.attributes[A.ETF_GUARD_REFUSED] is True

    stream(server, client, proposing("call-v"))  # a valid proposal still runs under the guard
    valid = {**CALL_A, "id": "call-v"}
    assert etf.instrumentation.host(guarded).execute(valid) == "page text"
    assert guarded.executed == [valid]


def test_guard_keyword_beats_the_environment(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_GUARD, "true")
    etf.instrument(guard=False)
    stream(server, client, CONFLICTING_ID)
    host = Host()
    assert etf.instrumentation.host(host).execute(CALL_A) == "page text"
    assert host.executed == [CALL_A]


def test_guard_value_that_is_not_a_boolean_is_off_with_a_warning(
    etf: Etf,
    server: LocalChatServer,
    client: openai.OpenAI,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    value = f"yes-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(A.ENV_GUARD, value)
    with caplog.at_level(logging.WARNING, logger="etf_otel"):
        etf.instrument()
    assert [record.levelno for record in caplog.records if value in record.getMessage()] == [logging.WARNING]
    stream(server, client, CONFLICTING_ID)
    assert etf.instrumentation.host(Host()).execute(CALL_A) == "page text"


# --- OTEL_INSTRUMENTATION_ETF_MAX_CONVERSATIONS --------------------------------------------------------------------


def answer_conversation_a_wrongly(server: LocalChatServer, client: openai.OpenAI) -> None:
    """Conversation A proposes call-a, conversation B call-b, then A's follow-up answers call-zzz instead."""
    stream(server, client, proposing("call-a"), [{"role": "user", "content": "conversation A"}])
    stream(server, client, proposing("call-b"), [{"role": "user", "content": "conversation B"}])
    follow_up = [
        {"role": "user", "content": "conversation A"},
        {"role": "assistant", "tool_calls": [CALL_A]},
        {"role": "tool", "tool_call_id": "call-zzz", "content": "page text"},
    ]
    stream(server, client, TEXT_ONLY, follow_up)


def test_max_conversations_from_the_environment_bounds_the_linkage(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    etf.instrument()  # 1024: conversation A is still known, its follow-up is checked
    answer_conversation_a_wrongly(server, client)
    assert etf.captured.metric_sum(A.METRIC_INTEGRITY_VIOLATIONS, etf__error__category="orphaned_result") == 1

    monkeypatch.setenv(A.ENV_MAX_CONVERSATIONS, "1")
    etf.instrument()  # B pushed A out: the follow-up starts a new conversation, nothing to check
    answer_conversation_a_wrongly(server, client)
    assert etf.captured.metric_sum(A.METRIC_INTEGRITY_VIOLATIONS) == 0


def test_max_conversations_keyword_beats_the_environment_and_a_bad_value_keeps_the_default(
    etf: Etf,
    server: LocalChatServer,
    client: openai.OpenAI,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(A.ENV_MAX_CONVERSATIONS, "1")
    etf.instrument(max_conversations=16)
    answer_conversation_a_wrongly(server, client)
    assert etf.captured.metric_sum(A.METRIC_INTEGRITY_VIOLATIONS, etf__error__category="orphaned_result") == 1

    value = f"-{uuid.uuid4().int % 1000 + 1}"
    monkeypatch.setenv(A.ENV_MAX_CONVERSATIONS, value)
    with caplog.at_level(logging.WARNING, logger="etf_otel"):
        etf.instrument()
    assert len([record for record in caplog.records if A.ENV_MAX_CONVERSATIONS in record.getMessage()]) == 1
    answer_conversation_a_wrongly(server, client)
    assert etf.captured.metric_sum(A.METRIC_INTEGRITY_VIOLATIONS, etf__error__category="orphaned_result") == 1


# --- OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (unchanged) ------------------------------------------------


def test_capture_content_from_the_environment_still_works_and_the_keyword_beats_it(
    etf: Etf, server: LocalChatServer, client: openai.OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_CAPTURE_CONTENT, "true")
    etf.instrument()
    stream(server, client, NULL_CONTINUATION)
    assert the_call_span(etf.captured).attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"page":1}'

    etf.instrument(capture_content=False)
    stream(server, client, NULL_CONTINUATION)
    assert A.GEN_AI_TOOL_CALL_ARGUMENTS not in the_call_span(etf.captured).attributes


# --- the convenience functions ------------------------------------------------------------------------------------


def test_convenience_functions_take_the_environment_when_their_shared_setup_is_made(
    captured: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(A.ENV_GUARD, "true")
    monkeypatch.setenv(A.ENV_PROVIDER_NAME, "vllm")
    monkeypatch.setenv(A.ENV_ALLOW, "empty_continuation")
    providers = {"tracer_provider": captured.tracer_provider, "meter_provider": captured.meter_provider}
    assert list(instrument_stream(iter(EMPTY_CONTINUATION), **providers)) == EMPTY_CONTINUATION
    assert the_call_span(captured).attributes[A.ETF_TOOL_CALL_VERDICT] == "proposed"
    host = Host()
    assert instrument_host(host, **providers).execute(CALL_A) == "page text"  # the proposal the stream made
    never_proposed = {**CALL_A, "id": "call-zzz"}
    with pytest.raises(GuardRefusedError):  # orphaned_result
        instrument_host(host, **providers).execute(never_proposed)
    assert host.executed == [CALL_A]
    assert {span.attributes[A.GEN_AI_PROVIDER_NAME] for span in captured.spans("execute_tool")} == {"vllm"}

    assert instrument_host(host, guard=False, **providers).execute(never_proposed) == "page text"  # the keyword wins
    assert host.executed == [CALL_A, never_proposed]


# --- zero code: opentelemetry-instrument -----------------------------------------------------------------------------


def test_zero_code_run_takes_its_configuration_from_the_environment(server: LocalChatServer) -> None:
    done = zero_code(
        server,
        **{A.ENV_PROVIDER_NAME: "vllm", A.ENV_ALLOW: "empty_continuation,not_a_rule"},
    )

    assert 'tool call read_page id=call-a arguments={"page":1}' in done.stdout  # the app ran as before
    spans = console_spans(done.stdout)
    (assembled,) = named(spans, "assemble_tool_call read_page")
    (response,) = named(spans, "assemble_response")
    assert assembled["attributes"]["gen_ai.provider.name"] == "vllm"
    assert response["attributes"]["gen_ai.provider.name"] == "vllm"
    # Both entry points (openai, anthropic) read the variable: the unknown name is reported once.
    assert done.stderr.count("not_a_rule") == 1, done.stderr


def test_zero_code_run_without_configuration_falls_back_to_openai(server: LocalChatServer) -> None:
    done = zero_code(server)

    (response,) = named(console_spans(done.stdout), "assemble_response")
    assert response["attributes"]["gen_ai.provider.name"] == "openai"
