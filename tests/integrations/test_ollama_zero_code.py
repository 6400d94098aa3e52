"""Zero code for the ``ollama`` client: ``opentelemetry-instrument python app.py``, an app with no etf-otel
import, against the scripted server's ``/api/chat``, its export audited (docs/frameworks.md, "Ollama").

The app is the tool loop of the client's own examples (ollama-python 0.6.3 ``examples/multi-tool.py``):
calls read from the response, run as plain functions, each result sent back as a ``role: tool`` message
with ``tool_name``. The launcher finds etf-otel through the ``etf_otel_ollama`` entry point.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from etf_otel.cli._audit import run_audit
from etf_otel.testing import OLLAMA_QUIRK_STREAMS, LocalChatServer, Script
from etf_otel.testing.ollama import body, call, chunk, stream
from tests.audit.test_audit_evidence import ENGINES

pytest.importorskip("ollama")

APP = """
import asyncio, os, sys
import ollama

streamed, is_async, answer = sys.argv[1] == "stream", sys.argv[2] == "async", sys.argv[3]
TOOLS = {"get_weather": lambda city: "sunny", "get_time": lambda timezone: "12:00"}
TOOLS.update(get_a=lambda a: "a", get_b=lambda b: "b")


async def chat(client, messages):
    if not is_async:
        got = client.chat(model="llama3.2", messages=messages, stream=streamed)
        return list(got) if streamed else [got]
    got = await client.chat(model="llama3.2", messages=messages, stream=streamed)
    return [part async for part in got] if streamed else [got]


async def main():
    client = (ollama.AsyncClient if is_async else ollama.Client)(host=os.environ["OLLAMA_HOST"])
    messages = [{"role": "user", "content": "Weather and time in Paris?"}]
    parts = await chat(client, messages)
    calls = [tool for part in parts for tool in part.message.tool_calls or ()]
    messages.append({"role": "assistant", "content": "", "tool_calls": calls})
    for tool in calls:
        result = TOOLS[tool.function.name](**tool.function.arguments)
        messages.append({"role": "tool", "content": result, "tool_name": answer or tool.function.name})
    await chat(client, messages)
    print(f"ran {len(calls)} calls", file=sys.stderr)  # stdout carries the spans


asyncio.run(main())
"""

W, T = "call_w8x1k2m3", "call_t4n5p6q7"
CALLS = [call("get_weather", {"city": "Paris"}, id=W, index=0), call("get_time", {"timezone": "CET"}, id=T, index=1)]


def zero_code(
    server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str, engine: str = "python"
) -> tuple[str, int, dict[str, Any]]:
    from tests.test_examples import BIN, clean_env, run

    launcher = BIN / "opentelemetry-instrument"
    if not launcher.exists() or importlib.util.find_spec("opentelemetry.distro") is None:
        pytest.skip("needs opentelemetry-instrument and opentelemetry-distro (test extra)")
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = clean_env(
        OLLAMA_HOST=server.root_url,
        OTEL_TRACES_EXPORTER="otlp_json_file",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="mcp",
    )
    done = run([str(launcher), sys.executable, str(app), *argv], env)
    spans = tmp_path / "spans.jsonl"
    spans.write_text(done.stdout)
    code = run_audit([str(spans)], json_output=True, progress=False, engine=engine)
    out, err = capsys.readouterr()
    assert err == ""
    return done.stdout, code, json.loads(out)


def kinds(report: dict[str, Any]) -> dict[str, int]:
    return {entry["kind"]: entry["count"] for entry in report["by_kind"]}


def span_attributes(stdout: str, name: str) -> list[dict[str, Any]]:
    found = []
    for line in stdout.splitlines():
        for resource in json.loads(line).get("resourceSpans", []):
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"] == name:
                        attributes = {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}
                        found.append(attributes)
    return found


def span_id(stdout: str, name: str) -> str:
    (found,) = [
        span["spanId"]
        for line in stdout.splitlines()
        for resource in json.loads(line).get("resourceSpans", [])
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        if span["name"] == name
    ]
    return str(found)


SHAPES = [("stream", "sync"), ("body", "sync"), ("stream", "async"), ("body", "async")]


@pytest.mark.parametrize(("form", "kind"), SHAPES)
def test_a_clean_two_tool_loop_audits_clean_with_both_calls_proposed(
    form: str, kind: str, server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if form == "stream":
        server.enqueue(Script(events=stream(*(chunk(c) for c in CALLS))), Script(events=stream(chunk(content="ok"))))
    else:
        server.enqueue(Script(body=body(*CALLS)), Script(body=body(content="ok")))
    stdout, code, report = zero_code(server, tmp_path, capsys, form, kind, "")
    assert (code, kinds(report)) == (0, {}), report
    proposals = span_attributes(stdout, "assemble_tool_call get_weather") + span_attributes(
        stdout, "assemble_tool_call get_time"
    )
    assert [(p["gen_ai.tool.call.id"], p["etf.tool_call.verdict"]) for p in proposals] == [
        (W, "proposed"),
        (T, "proposed"),
    ]
    assert [r["etf.protocol"] for r in span_attributes(stdout, "assemble_response")] == ["ollama", "ollama"]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("form", "kind"), [("stream", "sync"), ("body", "async")])
def test_id_less_calls_of_an_older_server_are_proposed_answered_and_audit_clean(
    server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str, kind: str, engine: str
) -> None:
    """Calls without ids, answered by ``tool_name``: the settling request names them by their call spans
    (``etf.linkage.answered_spans``, no id to name them by), so the audit judges them answered, as the
    instrumentation did, instead of ``unjudged``."""
    if form == "stream":
        server.enqueue(Script(events=OLLAMA_QUIRK_STREAMS["several calls on index 0, no ids"]))
        server.enqueue(Script(events=stream(chunk(content="ok"))))
    else:
        server.enqueue(Script(body=body(call("get_a", {"a": 1}), call("get_b", {"b": 2}))))
        server.enqueue(Script(body=body(content="ok")))
    stdout, code, report = zero_code(server, tmp_path, capsys, form, kind, "", engine=engine)
    assert (code, kinds(report)) == (0, {}), report
    calls = span_attributes(stdout, "assemble_tool_call get_a") + span_attributes(stdout, "assemble_tool_call get_b")
    assert [(a["etf.tool_call.verdict"], a["etf.id.positional"]) for a in calls] == [
        ("proposed", "1")
    ] * 2  # OTLP JSON ints are strings
    first, settling = span_attributes(stdout, "assemble_response")
    assert "etf.linkage.answered_spans" not in first
    answered = [value["stringValue"] for value in settling["etf.linkage.answered_spans"]["values"]]
    assert answered == [span_id(stdout, "assemble_tool_call get_a"), span_id(stdout, "assemble_tool_call get_b")]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_id_less_call_left_unanswered_is_reported_not_settled(
    server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """The app answers one call only (both results named ``get_a``): the other call's span is not among the
    answered spans. The instrumentation's findings (the duplicate result, the unanswered call) are the audit's;
    its ``unanswered_call`` names no id, so the call itself stays ``unjudged`` (informational), never settled."""
    server.enqueue(Script(events=OLLAMA_QUIRK_STREAMS["several calls on index 0, no ids"]))
    server.enqueue(Script(events=stream(chunk(content="ok"))))
    stdout, code, report = zero_code(server, tmp_path, capsys, "stream", "sync", "get_a", engine=engine)
    settling = span_attributes(stdout, "assemble_response")[1]
    answered = [value["stringValue"] for value in settling["etf.linkage.answered_spans"]["values"]]
    assert answered == [span_id(stdout, "assemble_tool_call get_a")]
    # the follow-up leaves a call without its result: a request the pairing check finds broken, too
    assert (code, kinds(report)) == (1, {"recorded_violation": 2, "request_pairing": 1, "unjudged": 1}), report


def test_a_result_sent_under_the_wrong_name_is_reported(
    server: LocalChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.enqueue(Script(events=stream(*(chunk(c) for c in CALLS))), Script(events=stream(chunk(content="ok"))))
    _, code, report = zero_code(server, tmp_path, capsys, "stream", "sync", "get_weather")
    assert code == 1 and "unanswered_call" in kinds(report), report
