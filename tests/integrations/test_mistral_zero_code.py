"""Zero code for the ``mistralai`` SDK: ``opentelemetry-instrument python app.py``, an app with no etf-otel
import, against the scripted server's Chat endpoint, its export audited.

The app is the SDK's documented tool loop (the assistant message appended, each result a ``role:
tool`` message with ``tool_call_id`` and ``name``); the launcher finds etf-otel through the
``etf_otel_mistral`` entry point.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from etf_otel.cli._audit import run_audit
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing.chat import chunk, finished, fragment

pytest.importorskip("mistralai.client")

APP = """
import asyncio, os, sys
from mistralai.client import Mistral

streamed, is_async, answer = sys.argv[1] == "stream", sys.argv[2] == "async", sys.argv[3]
TOOLS = {"get_weather": lambda city: "sunny", "get_time": lambda: "12:00"}
QUESTION = {"role": "user", "content": "Weather and time in Paris?"}


async def calls_of(client, messages):
    if streamed:
        if is_async:
            events = [e async for e in await client.chat.stream_async(model="m", messages=messages)]
        else:
            events = list(client.chat.stream(model="m", messages=messages))
        return [c for e in events for c in e.data.choices[0].delta.tool_calls or ()]
    if is_async:
        return (await client.chat.complete_async(model="m", messages=messages)).choices[0].message.tool_calls or []
    return client.chat.complete(model="m", messages=messages).choices[0].message.tool_calls or []


async def main():
    client = Mistral(api_key="local", server_url=os.environ["MISTRAL_SERVER_URL"])
    messages = [QUESTION]
    calls = await calls_of(client, messages)
    messages.append({"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in calls]})
    for call in calls:
        result = TOOLS[call.function.name](**__import__("json").loads(call.function.arguments))
        call_id = answer or call.id
        messages.append({"role": "tool", "tool_call_id": call_id, "name": call.function.name, "content": result})
    await calls_of(client, messages)
    print(f"ran {len(calls)} calls", file=sys.stderr)  # stdout carries the spans


asyncio.run(main())
"""

W, T = "aB3dE5gH7", "Zx9Yw8Vu7"
TWO_CALLS = finished(
    chunk(fragment(0, W, "get_weather", '{"city": "Paris"}')),
    chunk(fragment(1, T, "get_time", "{}")),
    finish_reason="tool_calls",
)
ANSWER = finished(chunk(content="Sunny, 12:00."), finish_reason="stop")


def body(with_calls: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "" if with_calls else "Sunny."}
    if with_calls:
        message["tool_calls"] = [
            {"id": W, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": T, "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if with_calls else "stop"}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "usage": usage,
    }


def zero_code(
    server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str, **more: str
) -> tuple[int, dict[str, Any]]:
    from tests.test_examples import BIN, clean_env, run

    launcher = BIN / "opentelemetry-instrument"
    if not launcher.exists() or importlib.util.find_spec("opentelemetry.distro") is None:
        pytest.skip("needs opentelemetry-instrument and opentelemetry-distro (test extra)")
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = clean_env(
        MISTRAL_SERVER_URL=server.root_url,
        OTEL_TRACES_EXPORTER="otlp_json_file",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp",
        **more,
    )
    done = run([str(launcher), sys.executable, str(app), *argv], env)
    assert "ran 2 calls" in done.stderr
    spans = tmp_path / "spans.jsonl"
    spans.write_text(done.stdout)
    code = run_audit([str(spans)], json_output=True, progress=False, engine="python")
    out, err = capsys.readouterr()
    assert err == ""
    report = json.loads(out)
    assert report["input"]["records"] > 0
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    scopes = {
        scope["scope"]["name"]
        for line in lines
        for resource in line["resourceSpans"]
        for scope in resource["scopeSpans"]
    }
    (tmp_path / "scopes.json").write_text(json.dumps(sorted(scopes)))
    return code, {entry["kind"]: entry["count"] for entry in report["by_kind"]}


@pytest.mark.parametrize(("form", "kind"), [("stream", "sync"), ("body", "async")])
def test_a_clean_two_tool_loop_audits_clean(
    form: str, kind: str, server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if form == "stream":
        server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    else:
        server.enqueue(Script(body=body(True)), Script(body=body(False)))
    assert zero_code(server, tmp_path, capsys, form, kind, "") == (0, {})


def test_a_result_under_an_id_no_call_had_is_reported(
    server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    code, kinds = zero_code(server, tmp_path, capsys, "stream", "sync", "Qw3Er5Ty7")
    assert code == 1 and kinds.get("unanswered_call") == 2, kinds


def test_the_sdks_own_tracing_on_beside_etf_otel_changes_nothing(
    server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``MISTRAL_SDK_TELEMETRY=global``: the SDK's own spans (its tracing hook swaps the response for a
    ``TracedResponse`` that reads the same byte stream) go to the same export, etf-otel's responses nested
    under its chat spans, and the audit is clean: no finding, no ``unobserved_llm_call``."""
    server.enqueue(Script(events=TWO_CALLS), Script(events=ANSWER))
    assert zero_code(server, tmp_path, capsys, "stream", "sync", "", MISTRAL_SDK_TELEMETRY="global") == (0, {})
    scopes = json.loads((tmp_path / "scopes.json").read_text())
    assert "etf_otel" in scopes and len(scopes) > 1, scopes
