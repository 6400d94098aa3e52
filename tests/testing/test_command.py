"""``python -m etf_otel.testing``: started as a user starts it, driven by the real clients."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from etf_otel import ReferenceAssembler
from etf_otel.testing import QUIRK_TABLES

TOOLS: Any = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_weather", "get_time")
]


class Command:
    """One running server process and the lines it printed when it came up."""

    def __init__(self, *args: str, lines: int = 5) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "etf_otel.testing", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            self.lines = self._first_lines(lines)
        except BaseException:
            self.stop()
            raise
        self.base_url = self.lines[1].split("base_url=")[1].split()[0]
        self.root_url = self.lines[-1].split("base_url=")[1].split()[0].rstrip(",")

    def _first_lines(self, count: int, timeout: float = 20.0) -> list[str]:
        """The first ``count`` lines, read in a thread so that a silent server fails the test instead of hanging it."""
        assert self.process.stdout is not None
        stdout = self.process.stdout
        lines: list[str] = []
        reader = threading.Thread(
            target=lambda: lines.extend(stdout.readline().rstrip("\n") for _ in range(count)), daemon=True
        )
        reader.start()
        reader.join(timeout)
        assert len(lines) == count, f"the server printed {lines}"
        return lines

    def stop(self) -> int:
        """Ctrl-C, as a user stops it; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(10)
        finally:
            self.process.kill()
            for stream in (self.process.stdout, self.process.stderr):
                assert stream is not None
                stream.close()


@pytest.fixture
def command() -> Iterator[Command]:
    server = Command()
    yield server
    server.stop()


def test_prints_one_base_url_per_protocol_on_loopback(command: Command) -> None:
    assert "Ctrl-C" in command.lines[0]
    protocols = [line.split()[0] for line in command.lines[1:]]
    assert protocols == ["chat_completions", "responses", "anthropic_messages", "gemini"]
    port = command.base_url.split(":")[2].split("/")[0]
    assert command.base_url == f"http://127.0.0.1:{port}/v1"
    assert command.root_url == f"http://127.0.0.1:{port}"
    assert command.stop() == 0


def test_a_chat_tool_turn_then_the_answer_with_the_real_openai_client(command: Command) -> None:
    client = openai.OpenAI(base_url=command.base_url, api_key="none", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
    assembler = ReferenceAssembler()
    for chunk in client.chat.completions.create(model="m", messages=messages, stream=True, tools=TOOLS):
        assembler.feed(chunk)
    result = assembler.finish()
    assert [(call.id, call.name, json.loads(call.arguments)) for call in result.proposals] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_time", {"timezone": "Europe/Paris"}),
    ]
    assert result.dispatchable
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
             for c in result.proposals]  # fmt: skip
    messages.append({"role": "assistant", "tool_calls": calls})
    messages += [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in result.proposals]

    text = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(model="m", messages=messages, stream=True)
    )

    assert "Paris" in text


def test_a_responses_tool_turn_then_the_answer_with_the_real_openai_client(command: Command) -> None:
    client = openai.OpenAI(base_url=command.base_url, api_key="none", max_retries=0)
    with client.responses.stream(model="m", input="Weather and time in Paris?") as stream:
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(call.call_id, call.name, json.loads(call.arguments)) for call in calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_time", {"timezone": "Europe/Paris"}),
    ]
    results = [{"type": "function_call_output", "call_id": call.call_id, "output": "ok"} for call in calls]

    with client.responses.stream(model="m", input=[*final.output, *results]) as stream:
        answer = stream.get_final_response()

    assert "Paris" in answer.output_text


def test_an_anthropic_tool_turn_then_the_answer_with_the_real_anthropic_client(command: Command) -> None:
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=command.root_url, api_key="none", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
    with client.messages.stream(model="claude-sonnet-5-5", max_tokens=64, messages=messages) as stream:
        final = stream.get_final_message()
    calls = [block for block in final.content if block.type == "tool_use"]
    assert [(call.id, call.name, call.input) for call in calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"}),
        ("toolu_2", "get_time", {"timezone": "Europe/Paris"}),
    ]
    results = [{"type": "tool_result", "tool_use_id": call.id, "content": "ok"} for call in calls]
    messages += [{"role": "assistant", "content": final.content}, {"role": "user", "content": results}]

    with client.messages.stream(model="claude-sonnet-5-5", max_tokens=64, messages=messages) as stream:
        answer = stream.get_final_message()

    assert answer.stop_reason == "end_turn"
    assert "Paris" in answer.content[0].text


def test_a_request_without_stream_gets_the_same_turn_as_one_complete_body(command: Command) -> None:
    """The scripted turn for the SDKs' non-streamed calls: two calls, then the answer, per protocol."""
    anthropic = pytest.importorskip("anthropic")
    client = openai.OpenAI(base_url=command.base_url, api_key="none", max_retries=0)
    user: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
    message = client.chat.completions.create(model="m", messages=user).choices[0].message
    assert [(call.id, call.function.name) for call in message.tool_calls or []] == [
        ("call_1", "get_weather"),
        ("call_2", "get_time"),
    ]
    results = [{"role": "tool", "tool_call_id": call.id, "content": "ok"} for call in message.tool_calls or []]
    follow_up = [*user, message.model_dump(exclude_none=True), *results]
    assert "Paris" in (client.chat.completions.create(model="m", messages=follow_up).choices[0].message.content or "")

    response = client.responses.create(model="m", input="Weather and time in Paris?")
    assert [(item.call_id, item.name) for item in response.output if item.type == "function_call"] == [
        ("call_1", "get_weather"),
        ("call_2", "get_time"),
    ]

    claude = anthropic.Anthropic(base_url=command.root_url, api_key="none", max_retries=0)
    final = claude.messages.create(model="claude-sonnet-5-5", max_tokens=64, messages=user)
    assert [(block.id, block.input) for block in final.content if block.type == "tool_use"] == [
        ("toolu_1", {"city": "Paris"}),
        ("toolu_2", {"timezone": "Europe/Paris"}),
    ]


def test_quirk_serves_the_named_stream_to_each_request_without_tool_results() -> None:
    server = Command("--quirk", "null continuations", lines=2)
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        for _ in range(2):  # every request that starts a turn, not only the first
            chunks = list(client.chat.completions.create(model="m", messages=[], stream=True))
            fragments = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or []]
            assert [(call.id, "id" in call.model_fields_set) for call in fragments] == [("call_1", True), (None, True)]
        with pytest.raises(openai.NotFoundError, match="no responses quirk stream named 'null continuations'"):
            client.responses.create(model="m", input="x", stream=True)
        assert "'null continuations'" in server.lines[0]
    finally:
        assert server.stop() == 0


def test_quirk_answers_the_follow_up_with_the_tool_results_so_an_agent_loop_ends() -> None:
    """An agent loop as people write it: call the model until it stops asking for tools."""
    server = Command("--quirk", "conflicting ids", lines=2)
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "Weather and time in Paris?"}]
        requests = 0
        while requests < 3:
            requests += 1
            with client.chat.completions.stream(model="m", messages=messages, tools=TOOLS) as stream:
                message = stream.get_final_completion().choices[0].message
            if not message.tool_calls:
                break
            messages.append(message.model_dump(exclude_none=True))
            messages += [{"role": "tool", "tool_call_id": call.id, "content": "ok"} for call in message.tool_calls]
        assert requests == 2 and "Paris" in (message.content or "")
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("quirk", "protocols"),
    [
        ("conflicting ids", ["chat_completions"]),
        ("cut mid-arguments", ["chat_completions", "responses", "anthropic_messages"]),
        ("args sent as a JSON string", ["gemini"]),
        ("clean multi-call stream", ["chat_completions", "responses", "anthropic_messages"]),
    ],
)
def test_the_quirk_banner_lists_only_the_protocols_that_have_that_quirk(quirk: str, protocols: list[str]) -> None:
    assert [protocol for protocol, table in QUIRK_TABLES.items() if quirk in table] == protocols
    server = Command("--quirk", quirk, lines=1 + len(protocols))
    try:
        assert [line.split()[0] for line in server.lines[1:]] == protocols
    finally:
        assert server.stop() == 0


def test_list_names_every_quirk_stream_under_its_protocol() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "etf_otel.testing", "--list"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0
    expected = [
        line for protocol, table in QUIRK_TABLES.items() for line in [f"{protocol}:", *(f"  {n}" for n in table)]
    ]
    assert run.stdout.splitlines() == expected


def test_an_unknown_quirk_or_a_busy_port_exits_2_with_one_line(command: Command) -> None:
    port = command.base_url.split(":")[2].split("/")[0]
    for args in (["--quirk", "no such quirk"], ["--port", port], ["--port", "99999"], ["--port", "-1"]):
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "etf_otel.testing", *args], capture_output=True, text=True, timeout=60
        )
        assert (run.returncode, run.stdout) == (2, "")
        assert run.stderr.splitlines()[-1].startswith("python -m etf_otel.testing: ")
        assert "Traceback" not in run.stderr
        if args[0] == "--port":
            assert run.stderr.count("\n") == 1, run.stderr
        assert time.monotonic() - started < 30


def test_a_gemini_turn_through_the_sdks_automatic_function_calling(command: Command) -> None:
    """The printed line is what ``google-genai`` takes; two id-less calls, one per chunk, which the SDK
    runs itself, then the answer; ``generate_content`` gets the same turn as one body."""
    genai = pytest.importorskip("google.genai")
    name, settings = command.lines[4].split()[:2]
    assert name == "gemini" and settings == f"base_url={command.root_url},"
    options = genai.types.HttpOptions(base_url=command.root_url, api_version="v1beta")
    client = genai.Client(api_key="none", http_options=options)
    ran: list[str] = []

    def get_weather(city: str) -> str:
        """The weather."""
        ran.append(city)
        return "sunny"

    def get_time(timezone: str) -> str:
        """The time."""
        ran.append(timezone)
        return "14:05"

    config = genai.types.GenerateContentConfig(tools=[get_weather, get_time])
    text = "".join(c.text or "" for c in client.models.generate_content_stream(model="m", contents="?", config=config))
    assert ran == ["Paris", "Europe/Paris"] and "Paris" in text
    body = client.models.generate_content(model="m", contents="?", config=config)
    assert ran[2:] == ["Paris", "Europe/Paris"] and "Paris" in (body.text or "")
