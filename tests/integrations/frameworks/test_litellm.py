"""LiteLLM, zero code: ``completion`` / ``acompletion`` against the scripted server, judged and audited.

The real ``litellm`` package drives the real ``openai`` client (OpenAI-compatible endpoint) or its own
HTTP client (Anthropic endpoint) against :class:`LocalChatServer`; the openai, anthropic and LiteLLM
instrumentors are all active, as under ``opentelemetry-instrument``. The application is a plain loop:
the model proposes two calls, the app answers each with a ``tool`` message, the model answers in text.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import tomllib
import wrapt

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price list (no network)
litellm = pytest.importorskip("litellm")
MidStreamFallbackError = pytest.importorskip("litellm.exceptions").MidStreamFallbackError

from etf_otel import attributes as A  # noqa: E402
from etf_otel.cli._audit import run_audit  # noqa: E402
from etf_otel.integrations.anthropic import AnthropicInstrumentor  # noqa: E402
from etf_otel.integrations.litellm import LiteLLMInstrumentor, provider_of_call  # noqa: E402
from etf_otel.integrations.openai import OpenAIInstrumentor  # noqa: E402
from etf_otel.testing import MISSING, LocalChatServer, RecordedRequest, Script  # noqa: E402
from etf_otel.testing import anthropic as AN  # noqa: E402
from etf_otel.testing import chat as C  # noqa: E402
from tests.conftest import Process  # noqa: E402
from tests.test_examples import console_spans  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    # LiteLLM imports provider modules lazily, during the first call; pydantic warns about one of them
    "ignore:Items? .*ReadOnly. qualifier:UserWarning",
)

ROOT = Path(__file__).resolve().parents[3]
OPENAI = "openai/x"
ANTHROPIC = "anthropic/claude-x"
ANSWER = "Sunny, and it is noon."


# --- the scripts ----------------------------------------------------------------------------------------


def chat_calls(continuation_id: Any = MISSING, first: str = "call_1", second: str = "call_2") -> list[Any]:
    """Two calls, the first one's arguments split over two chunks (``continuation_id`` on the second)."""
    return C.finished(
        C.chunk(C.fragment(0, first, "get_weather", '{"city":', type="function")),
        C.chunk(C.fragment(0, continuation_id, arguments='"Paris"}')),
        C.chunk(C.fragment(1, second, "get_time", '{"tz":"UTC"}', type="function")),
    )


def chat_body(*calls: tuple[str, str, str], content: str | None = None) -> dict[str, Any]:
    tool_calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "x",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
    }


CALLS = (("call_1", "get_weather", '{"city":"Paris"}'), ("call_2", "get_time", '{"tz":"UTC"}'))


def anthropic_calls(first: str = "toolu_01", second: str = "toolu_02") -> Script:
    return Script(
        named=True,
        events=AN.stream(
            AN.tool_call(0, first, "get_weather", '{"city":', '"Paris"}'), AN.tool_call(1, second, "get_time", "{}")
        ),
    )


def anthropic_answer() -> Script:
    return Script(named=True, events=AN.stream(AN.text_block(0, ANSWER), stop_reason="end_turn"))


def scripts(model: str, stream: bool, continuation_id: Any = MISSING) -> tuple[Script, Script]:
    """The two answers of a clean loop: the calls, then the text."""
    if model == ANTHROPIC:
        return anthropic_calls(), anthropic_answer()
    if stream:
        return Script(events=chat_calls(continuation_id)), Script(
            events=C.finished(C.chunk(content=ANSWER), finish_reason="stop")
        )
    return Script(body=chat_body(*CALLS)), Script(body=chat_body(content=ANSWER))


# --- the application ------------------------------------------------------------------------------------


@dataclass
class Run:
    """What the application got (each chunk or response, as a plain dict) and the calls it ran."""

    got: list[dict[str, Any]]
    ran: list[tuple[str, str]]


VOLATILE = frozenset({"created", "_response_ms"})


def plain(obj: Any) -> dict[str, Any]:
    """A chunk or response as the application reads it, without the fields LiteLLM stamps per call."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items() if key not in VOLATILE}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    dumped: dict[str, Any] = strip(obj.model_dump())
    if str(dumped.get("id")).startswith("chatcmpl-") and len(str(dumped["id"])) > 30:
        dumped.pop("id")  # a response id LiteLLM made up (a uuid per call: Anthropic's is the message's)
    if dumped.get("object") == "chat.completion" or "usage" in dumped:
        dumped.pop("usage", None)  # LiteLLM counts tokens itself when the server sends none
    return dumped


def kwargs_of(server: LocalChatServer, model: str, messages: list[Any], stream: bool) -> dict[str, Any]:
    api_base = server.base_url if model == OPENAI else server.root_url
    return {"model": model, "api_base": api_base, "api_key": "test", "messages": messages, "stream": stream,
            "max_tokens": 64}  # fmt: skip


def follow_up(messages: list[Any], message: Any, run: Run) -> list[Any]:
    """The assistant turn as LiteLLM gave it, then one ``tool`` message per call the app runs."""
    results = [{"role": "tool", "tool_call_id": call.id, "content": "ok"} for call in message.tool_calls or ()]
    run.ran.extend((call.id, call.function.name) for call in message.tool_calls or ())
    return [*messages, message, *results]


def assembled(chunks: list[Any], messages: list[Any]) -> Any:
    return litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message


def loop_sync(server: LocalChatServer, model: str, stream: bool, turns: int = 2) -> Run:
    """The loop with ``litellm.completion`` and ``for``."""
    run = Run([], [])
    messages: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
    for _ in range(turns):
        response = litellm.completion(**kwargs_of(server, model, messages, stream))
        if stream:
            chunks = list(response)
            run.got.extend(plain(chunk) for chunk in chunks)
            message = assembled(chunks, messages)
        else:
            run.got.append(plain(response))
            message = response.choices[0].message
        messages = follow_up(messages, message, run)
    return run


async def loop_async(server: LocalChatServer, model: str, stream: bool, turns: int = 2) -> Run:
    """The loop with ``litellm.acompletion`` and ``async for``."""
    run = Run([], [])
    messages: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
    for _ in range(turns):
        response = await litellm.acompletion(**kwargs_of(server, model, messages, stream))
        if stream:
            chunks = [chunk async for chunk in response]
            run.got.extend(plain(chunk) for chunk in chunks)
            message = assembled(chunks, messages)
        else:
            run.got.append(plain(response))
            message = response.choices[0].message
        messages = follow_up(messages, message, run)
    return run


def loop(server: LocalChatServer, model: str, stream: bool, asynchronous: bool, turns: int = 2) -> Run:
    if asynchronous:
        return asyncio.run(loop_async(server, model, stream, turns))
    return loop_sync(server, model, stream, turns)


# --- the harness ----------------------------------------------------------------------------------------


class Stack:
    """The openai, anthropic and LiteLLM instrumentors, as ``opentelemetry-instrument`` loads them."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.instrumentors = [OpenAIInstrumentor(), AnthropicInstrumentor(), LiteLLMInstrumentor()]
        for instrumentor in self.instrumentors:
            instrumentor.instrument(tracer_provider=process.provider, meter_provider=process.meters)

    def close(self) -> None:
        for instrumentor in self.instrumentors:
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()

    def spans(self) -> list[dict[str, Any]]:
        """The exported spans, as the OTLP JSON lines file has them (name and flat attributes)."""
        self.process.provider.force_flush()
        found = []
        for line in self.process.path.read_text().splitlines() if self.process.path.exists() else ():
            for resource in json.loads(line)["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    for span in scope["spans"]:
                        attributes = {item["key"]: _value(item["value"]) for item in span.get("attributes", ())}
                        found.append({"name": span["name"], "attributes": attributes})
        return found

    def calls(self) -> list[dict[str, Any]]:
        return [span["attributes"] for span in self.spans() if span["name"].startswith("assemble_tool_call")]

    def responses(self) -> list[dict[str, Any]]:
        return [span["attributes"] for span in self.spans() if span["name"] == "assemble_response"]

    def audit(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
        """``etf-otel audit FILE --json``: its exit code and its document."""
        self.close()
        self.process.close()
        capsys.readouterr()
        code = run_audit([str(self.process.path)], json_output=True, progress=False)
        return code, json.loads(capsys.readouterr().out)


def _value(value: dict[str, Any]) -> Any:
    if "arrayValue" in value:
        return tuple(_value(item) for item in value["arrayValue"].get("values", ()))
    ((kind, item),) = value.items()
    return int(item) if kind == "intValue" else item


@pytest.fixture(autouse=True)
def close_litellms_loop() -> Iterator[None]:
    """Close the event loop LiteLLM's sync logging makes: it calls ``asyncio.get_event_loop()`` in the main
    thread, which creates and sets one that nothing closes (seen without etf-otel too)."""
    yield
    loop = getattr(getattr(asyncio.get_event_loop_policy(), "_local", None), "_loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running() and not loop.is_closed():
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture
def stack(process: Callable[..., Process]) -> Iterator[Stack]:
    instrumented = Stack(process())
    try:
        yield instrumented
    finally:
        instrumented.close()


def answered(response: dict[str, Any]) -> tuple[str, ...]:
    ids: tuple[str, ...] = response.get(A.ETF_LINKAGE_ANSWERED_IDS, ())
    return ids


# --- the tests ------------------------------------------------------------------------------------------

SHAPES = [
    pytest.param(OPENAI, True, False, id="openai-stream-for"),
    pytest.param(OPENAI, True, True, id="openai-stream-async-for"),
    pytest.param(OPENAI, False, False, id="openai-body-sync"),
    pytest.param(OPENAI, False, True, id="openai-body-async"),
    pytest.param(ANTHROPIC, True, False, id="anthropic-stream-for"),
    pytest.param(ANTHROPIC, True, True, id="anthropic-stream-async-for"),
]


@pytest.mark.parametrize(("model", "stream", "asynchronous"), SHAPES)
def test_a_clean_loop_is_recorded_once_per_call_linked_and_audits_clean(
    stack: Stack,
    server: LocalChatServer,
    capsys: pytest.CaptureFixture[str],
    model: str,
    stream: bool,
    asynchronous: bool,
) -> None:
    server.enqueue(*scripts(model, stream))
    run = loop(server, model, stream, asynchronous)
    first_ids = ("toolu_01", "toolu_02") if model == ANTHROPIC else ("call_1", "call_2")
    assert run.ran == list(zip(first_ids, ("get_weather", "get_time"), strict=True))
    calls, answer = stack.responses()  # exactly one record per model call: the SDK hooks stood aside
    provider = "anthropic" if model == ANTHROPIC else "openai"
    assert calls[A.ETF_STREAM_STATE] == answer[A.ETF_STREAM_STATE] == "completed"
    assert calls["etf.stream.dispatchable"] is True and calls["etf.response.streamed"] is stream
    assert calls["etf.protocol"] == answer["etf.protocol"] == "chat_completions"  # what LiteLLM hands the app
    assert calls[A.GEN_AI_PROVIDER_NAME] == provider
    assert answered(answer) == first_ids  # the follow-up settled both proposals
    proposed = {attributes[A.GEN_AI_TOOL_CALL_ID]: attributes for attributes in stack.calls()}
    assert sorted(proposed) == sorted(first_ids)
    assert {item["etf.tool_call.verdict"] for item in proposed.values()} == {"proposed"}
    code, document = stack.audit(capsys)
    assert (code, document["findings"], document["by_kind"]) == (0, 0, [])


def test_the_id_null_continuation_stays_clean(
    stack: Stack, server: LocalChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(*scripts(OPENAI, True, continuation_id=None))
    run = loop(server, OPENAI, stream=True, asynchronous=False)
    assert run.ran == [("call_1", "get_weather"), ("call_2", "get_time")]
    calls, answer = stack.responses()
    assert calls["etf.stream.dispatchable"] is True and answered(answer) == ("call_1", "call_2")
    weather = next(call for call in stack.calls() if call[A.GEN_AI_TOOL_CALL_ID] == "call_1")
    assert weather[A.ETF_ID_KEPT_NULL] == 1
    code, document = stack.audit(capsys)
    assert (code, document["findings"]) == (0, 0)


def test_a_conflicting_id_is_rejected_and_the_audit_reports_what_ran(
    stack: Stack, server: LocalChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(Script(events=chat_calls("call_9")), Script(events=C.finished(C.chunk(content=ANSWER))))
    run = loop(server, OPENAI, stream=True, asynchronous=False)
    assert run.ran == [("call_9", "get_weather"), ("call_2", "get_time")]  # LiteLLM keeps the last id
    calls, answer = stack.responses()
    assert calls["etf.stream.dispatchable"] is False
    weather = next(call for call in stack.calls() if call[A.GEN_AI_TOOL_CALL_ID] == "call_1")
    assert weather["etf.tool_call.verdict"] == "rejected" and "id_conflict" in weather["etf.tool_call.categories"]
    code, document = stack.audit(capsys)
    assert code == 1
    kinds = {entry["kind"]: entry for entry in document["by_kind"]}
    assert kinds["recorded_rejection"]["categories"] == {"id_conflict": 1}
    # what ran: the result of call_9 answers the id the rules refused, call_2's a call of a rejected response
    assert kinds["recorded_violation"]["categories"] == {"orphaned_result": 2}
    assert kinds["recorded_violation"]["orphan_reasons"] == {"rejected_incoming_id": 1, "rejected_call": 1}


def test_a_call_litellm_makes_inside_another_is_recorded_once(stack: Stack, server: LocalChatServer) -> None:
    """``acompletion`` with fallbacks calls ``litellm.acompletion`` again after the first model fails."""
    server.enqueue(Script(status=500), Script(events=chat_calls()))

    async def call() -> list[Any]:
        kwargs = kwargs_of(server, OPENAI, [{"role": "user", "content": "Weather?"}], stream=True)
        response = await litellm.acompletion(**kwargs, fallbacks=["openai/y"])
        return [chunk async for chunk in response]

    assert len(asyncio.run(call())) == 4 and len(server.requests) == 2
    (response,) = stack.responses()
    assert response[A.ETF_STREAM_STATE] == "completed" and response["etf.stream.slots"] == 2


def cut_stream(server: LocalChatServer, asynchronous: bool) -> BaseException:
    """A stream that ends (properly) before any finish reason: LiteLLM raises in the app's loop."""
    server.enqueue(Script(events=[C.chunk(C.fragment(0, "call_1", "get_weather", '{"city":', type="function"))]))
    with pytest.raises(Exception) as raised:
        loop(server, OPENAI, stream=True, asynchronous=asynchronous, turns=1)
    return raised.value


@pytest.mark.parametrize("asynchronous", [False, True], ids=["for", "async-for"])
def test_a_cut_stream_is_recorded_truncated_and_the_app_gets_litellms_exception(
    stack: Stack, server: LocalChatServer, asynchronous: bool
) -> None:
    error = cut_stream(server, asynchronous)
    (response,) = stack.responses()
    assert response[A.ETF_STREAM_STATE] == "failed" and response["etf.stream.dispatchable"] is False
    (weather,) = stack.calls()
    assert weather["etf.tool_call.verdict"] == "rejected"
    assert "truncated_stream" in weather["etf.tool_call.categories"]
    stack.close()
    bare = cut_stream(server, asynchronous)
    assert type(error) is type(bare) is MidStreamFallbackError
    assert str(error) == str(bare)


@pytest.mark.parametrize(("model", "stream", "asynchronous"), SHAPES)
def test_the_application_gets_the_same_chunks_and_objects_with_and_without_etf_otel(
    stack: Stack, server: LocalChatServer, model: str, stream: bool, asynchronous: bool
) -> None:
    server.enqueue(*scripts(model, stream))
    observed = loop(server, model, stream, asynchronous)
    stack.close()
    server.enqueue(*scripts(model, stream))
    bare = loop(server, model, stream, asynchronous)
    assert observed.got == bare.got and observed.ran == bare.ran
    first, second = server.requests[:2], server.requests[2:]
    assert [r.body for r in first] == [r.body for r in second]  # the same requests sent


def tool_turns(unique: bool) -> Callable[[RecordedRequest], Script | None]:
    """The two calls, or the text once the request carries results; ``unique``: each response's own call ids
    (as a provider gives them), else the same ids in every response."""
    counter = itertools.count()
    lock = threading.Lock()

    def respond(request: RecordedRequest) -> Script | None:
        if any(message.get("role") == "tool" for message in request.body["messages"]):
            return Script(events=C.finished(C.chunk(content=ANSWER), finish_reason="stop"))
        if not unique:
            return Script(events=chat_calls())
        with lock:
            n = next(counter)
        return Script(events=chat_calls(first=f"call_{n}a", second=f"call_{n}b"))

    return respond


@pytest.mark.parametrize("unique", [True, False], ids=["own-ids", "same-ids"])
def test_eight_concurrent_identical_runs_stay_clean(
    stack: Stack, capsys: pytest.CaptureFixture[str], unique: bool, concurrency: int = 8
) -> None:
    with LocalChatServer(responder=tool_turns(unique)) as server:

        async def all_runs() -> Sequence[Run]:
            return await asyncio.gather(*(loop_async(server, OPENAI, True) for _ in range(concurrency)))

        runs = asyncio.run(all_runs())
    responses = stack.responses()
    assert len(responses) == 2 * concurrency
    follow_ups = sorted(answered(response) for response in responses if answered(response))
    if unique:  # every follow-up linked to its own conversation's response
        assert follow_ups == sorted(tuple(call_id for call_id, _ in run.ran) for run in runs)
        assert len(follow_ups) == concurrency
    else:  # evidence that several conversations share is no match: not judged, never a false finding
        ambiguous = [response for response in responses if response.get(A.ETF_LINKAGE_AMBIGUOUS)]
        assert len(follow_ups) + len(ambiguous) == concurrency
    code, document = stack.audit(capsys)
    assert (code, document["findings"]) == (0, 0)


def test_the_provider_is_the_one_litellm_routes_to_in_genai_spelling() -> None:
    assert provider_of_call("anthropic/claude-x") == "anthropic"
    assert provider_of_call("gpt-4o") == "openai"  # a bare name: LiteLLM's model table
    assert provider_of_call("x", "azure") == "azure.ai.openai"
    assert provider_of_call("ollama/llama3") == "ollama"  # a LiteLLM provider without a GenAI name
    assert provider_of_call("nowhere/model") == "litellm"  # never the unbounded model text


ZERO_CODE_APP = """
import sys
before = "litellm" in sys.modules
import litellm, wrapt
from tests.integrations.frameworks.test_litellm import OPENAI, loop_sync
from etf_otel.testing import LocalChatServer


class Server(LocalChatServer):  # the test's server, by its address
    def __init__(self, base_url):
        self._base = base_url

    @property
    def base_url(self):
        return self._base

ran = loop_sync(Server(sys.argv[1]), OPENAI, stream=True).ran
print("RESULT", before, isinstance(litellm.completion, wrapt.FunctionWrapper), ran)
"""


def entry_point_shim(tmp_path: Path) -> list[str]:
    """A distribution that declares ``etf_otel_litellm``, for a checkout whose installed metadata predates it."""
    if any(point.name == "etf_otel_litellm" for point in entry_points(group="opentelemetry_instrumentor")):
        return []
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    target = declared["opentelemetry_instrumentor"]["etf_otel_litellm"]
    info = tmp_path / "etf_otel_litellm_shim-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: etf-otel-litellm-shim\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[opentelemetry_instrumentor]\netf_otel_litellm = {target}\n")
    return [str(tmp_path)]


def test_zero_code_under_opentelemetry_instrument(server: LocalChatServer, tmp_path: Path) -> None:
    """``opentelemetry-instrument python app.py``: the entry point loads, LiteLLM is wrapped only once the app
    imports it, and the loop is recorded once per model call, linked."""
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    if not launcher.exists() or importlib.util.find_spec("opentelemetry.distro") is None:
        pytest.skip("opentelemetry-instrument with opentelemetry-distro is not installed")
    server.enqueue(*scripts(OPENAI, stream=True, continuation_id=None))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "OPENAI_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), *entry_point_shim(tmp_path)]),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp,httpx,urllib3,requests,asyncio,threading,logging",
    )
    argv = [str(launcher), "--traces_exporter", "console", "--metrics_exporter", "none", "--logs_exporter", "none"]
    argv += [sys.executable, "-c", ZERO_CODE_APP, server.base_url]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert result == "RESULT False True [('call_1', 'get_weather'), ('call_2', 'get_time')]"
    spans = console_spans(done.stdout)
    responses = [span["attributes"] for span in spans if span["name"] == "assemble_response"]
    assert [response[A.ETF_STREAM_STATE] for response in responses] == ["completed", "completed"]
    assert "etf.linkage.answered_ids" not in responses[0]
    assert responses[1]["etf.linkage.answered_ids"] == ["call_1", "call_2"]


def test_uninstrument_restores_litellm_and_another_wrapper_around_ours_stays(process: Callable[..., Process]) -> None:
    modules = [sys.modules[name] for name in ("litellm", "litellm.chat_completions.dispatch", "litellm.main")]
    originals = [(vars(module)["completion"], vars(module)["acompletion"]) for module in modules]
    stack = Stack(process())
    assert all(
        isinstance(vars(m)[name], wrapt.FunctionWrapper) for m in modules for name in ("completion", "acompletion")
    )

    def outer(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(modules[0], "completion", outer)  # another instrumentation, after ours
    stack.close()
    kept = vars(modules[0])["completion"]
    assert isinstance(kept, wrapt.FunctionWrapper) and kept.__wrapped__ is originals[0][0]
    modules[0].completion = originals[0][0]
    assert [(vars(m)["completion"], vars(m)["acompletion"]) for m in modules] == originals


@pytest.mark.parametrize("asynchronous", [False, True], ids=["for", "async-for"])
def test_an_mcp_client_of_the_app_finds_the_call_litellm_streamed(
    stack: Stack, server: LocalChatServer, asynchronous: bool
) -> None:
    """A tool run through an MCP client is matched to the proposal of LiteLLM's setup (docs/mcp.md, "Matching")."""
    from etf_otel.instrumentation import _open_calls as open_calls
    from etf_otel.integrations.mcp._client import match_call

    server.enqueue(scripts(OPENAI, stream=True)[0])
    open_calls.track()
    try:

        def match() -> tuple[str, str | None, bool]:
            found = match_call("get_weather", {"city": "Paris"})
            return found.kind, found.call_id, found.record is not None and found.record.span_context is not None

        async def turn() -> tuple[str, str | None, bool]:
            await loop_async(server, OPENAI, stream=True, turns=1)
            return match()

        if asynchronous:
            matched = asyncio.run(turn())
        else:
            context = contextvars.copy_context()
            matched = context.run(lambda: (loop_sync(server, OPENAI, stream=True, turns=1), match())[1])
    finally:
        open_calls.untrack()
    assert matched == ("unique", "call_1", True)


# --- the request before it is sent (docs/protocols.md) ------------------------------------------------------

TOOL_MESSAGE_WITHOUT_CALL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
)
"""OpenAI's refusal of a tool message without its call (miurla/morphic#136), as LiteLLM passes it on."""


def pairing(response: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in response.items() if key.startswith("etf.request.pairing")}


@pytest.mark.parametrize("model", [OPENAI, ANTHROPIC])
def test_a_dropped_result_is_named_and_the_clean_loop_is_not(stack: Stack, server: LocalChatServer, model: str) -> None:
    first, answer = scripts(model, True)
    server.enqueue(first, answer)
    messages: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
    chunks = list(litellm.completion(**kwargs_of(server, model, messages, True)))
    message = assembled(chunks, messages)
    dropped = follow_up(messages, message, Run([], []))[:-1]  # the last tool message lost
    list(litellm.completion(**kwargs_of(server, model, dropped, True)))
    clean, broken = stack.responses()
    assert pairing(clean) == {}
    assert pairing(broken) == {
        "etf.request.pairing": "broken",
        "etf.request.pairing_problems": ("call_without_result",),
        "etf.request.pairing_reasons": ("unknown",),
    }


def test_a_refused_call_gets_its_span_and_the_guard_refuses_before_sending(
    stack: Stack, server: LocalChatServer, process: Callable[..., Process]
) -> None:
    from etf_otel import RequestPairingError
    from etf_otel.testing import refusals

    orphan = [{"role": "user", "content": "go on"}, {"role": "tool", "tool_call_id": "call_9", "content": "ok"}]
    server.enqueue(refusals.openai(TOOL_MESSAGE_WITHOUT_CALL, param="messages.[1].role"))
    with pytest.raises(litellm.BadRequestError):
        litellm.completion(**kwargs_of(server, OPENAI, orphan, False))
    (refused,) = stack.responses()
    assert pairing(refused) == {
        "etf.request.pairing": "broken",
        "etf.request.pairing_problems": ("result_without_call",),
        "etf.request.pairing_reasons": ("unknown",),
        "etf.request.pairing_refused": True,
    }
    assert refused[A.ERROR_TYPE] == "BadRequestError"
    stack.close()
    guarded = LiteLLMInstrumentor()
    guarded.instrument(tracer_provider=stack.process.provider, meter_provider=stack.process.meters, guard_requests=True)
    try:
        sent = len(server.requests)
        with pytest.raises(RequestPairingError, match=r"result_without_call at messages\[1\] \(result 0\): unknown"):
            litellm.completion(**kwargs_of(server, OPENAI, orphan, False))
        assert len(server.requests) == sent
    finally:
        guarded.uninstrument()
