"""The audit's orphaned results say why, and tool messages are judged by the evidence their span carries.

* A recorded ``orphaned_result`` keeps its ``etf.linkage.orphan_reason`` in the finding (``--json``, the
  text table, the HTML page), including ``rejected_incoming_id``, which only the process that refused the
  id can recognise (the audit never sees the id).
* Tool messages recorded by another instrumentation (``gen_ai.input.messages``) answer the response their
  span's answered turn names (the last assistant turn carrying a proposed call), in whatever trace it was
  proposed; a turn naming a call id several spans proposed is ``unjudged``, never a violation; an orphaned
  message says why.

Both engines (Python, chDB) must agree on each.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from etf_otel.cli._audit import run_audit
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing.chat import chunk, finished, fragment
from tests.integrations.test_openai_integration import TEXT_ONLY, USER, consume

from ..conftest import Process
from .test_audit import consume as drain
from .test_audit_evidence import ENGINES, app, audit, findings, kinds, server  # noqa: F401  (fixtures)

REFUSED = "call_Zq81refused"
CONFLICTING = finished(
    chunk(fragment(0, "call_kept", "read_page", '{"page":', type="function")),
    chunk(fragment(0, REFUSED, arguments="1}")),
)


def follow_up(call_id: str) -> list[Any]:
    calls = [{"id": call_id, "type": "function", "function": {"name": "read_page", "arguments": '{"page":1}'}}]
    return [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": call_id, "content": "page"},
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_recorded_rejected_incoming_id_reaches_the_finding_and_the_id_reaches_no_span(
    app: tuple[Process, openai.OpenAI],  # noqa: F811
    server: LocalChatServer,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    engine: str,
) -> None:
    proc, client = app
    for messages, events in [(USER, CONFLICTING), (follow_up(REFUSED), TEXT_ONLY)]:
        server.enqueue(Script(events=events))
        assert consume(client, messages).error is None
    proc.close()

    assert "Zq81refused" not in proc.path.read_text()
    code, report = audit(capsys, proc.path, engine)
    assert code == 1 and kinds(report)["recorded_violation"] == 1, report
    (finding,) = findings(report, "recorded_violation")
    assert finding["category"] == "orphaned_result" and finding["orphan_reason"] == "rejected_incoming_id"
    (entry,) = [entry for entry in report["by_kind"] if entry["kind"] == "recorded_violation"]
    assert entry["orphan_reasons"] == {"rejected_incoming_id": 1}


def chat_span(proc: Process, messages: list[Any]) -> None:
    """Another instrumentation's LLM call recording the messages it sent, as a trace of its own."""
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(messages)}
    proc.tracer.start_span("chat", attributes=attributes).end()


def propose(proc: Process, *ids: str) -> None:
    """A response proposing ``ids``, in a trace of its own (a framework that splits a run over traces)."""
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
        drain(inst.stream(iter(finished(*(chunk(fragment(i, c, "read_page", "{}")) for i, c in enumerate(ids))))))


def turn_answering(named: list[str], answers: list[str]) -> list[Any]:
    calls = [
        {"id": call_id, "type": "function", "function": {"name": "read_page", "arguments": "{}"}} for call_id in named
    ]
    tools = [{"role": "tool", "tool_call_id": call_id, "content": "page"} for call_id in answers]
    return [*USER, {"role": "assistant", "content": None, "tool_calls": calls}, *tools]


@pytest.mark.parametrize("engine", ENGINES)
def test_tool_messages_answer_the_calls_their_assistant_turn_names_in_another_trace(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    proc = process()
    propose(proc, "call-a", "call-b")
    chat_span(proc, turn_answering(["call-a", "call-b"], ["call-a", "call-b"]))
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    assert "orphaned_tool_message" not in kinds(report), report  # was 2, one per message of the other trace
    assert code == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_a_tool_message_carrying_two_ids_run_together_is_orphaned_with_reason_concatenated_ids(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    proc = process()
    propose(proc, "call-a", "call-b")
    chat_span(proc, turn_answering(["call-a", "call-b"], ["call-acall-b", "call-x"]))
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    assert code == 1
    found = {f["call_id"]: f.get("orphan_reason") for f in findings(report, "orphaned_tool_message")}
    assert found == {"call-acall-b": "concatenated_ids", "call-x": "unknown"}


@pytest.mark.parametrize("engine", ENGINES)
def test_an_assistant_turn_naming_an_id_two_responses_proposed_leaves_its_tool_messages_unjudged(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """A server that numbers its calls ``call_0`` in every response: the id names no single response."""
    proc = process()
    propose(proc, "call_0")
    propose(proc, "call_0")
    chat_span(proc, turn_answering(["call_0"], ["call_0", "call_9"]))
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    assert code == 0 and "orphaned_tool_message" not in kinds(report), report
    details = {f["detail"] for entry in report["traces_detail"] for f in entry["findings"]}
    assert not details  # informational findings are counted, not listed
    assert kinds(report)["unjudged"] == 2 + 2  # the two proposals, the two tool messages


@pytest.mark.parametrize("engine", ENGINES)
def test_without_an_assistant_turn_the_trace_is_the_evidence_and_a_rejected_call_says_so(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    proc = process()
    inst = proc.instrumentation()
    with proc.tracer.start_as_current_span("turn"):
        drain(inst.stream(iter(CONFLICTING)))  # call_kept, rejected (id_conflict)
        messages = [{"role": "tool", "tool_call_id": "call_kept", "content": "?"}]
        proc.tracer.start_span("chat", attributes={"gen_ai.input.messages": json.dumps(messages)}).end()
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    assert code == 1
    (finding,) = findings(report, "orphaned_tool_message")
    assert finding["orphan_reason"] == "rejected_call"


def test_the_text_table_and_the_html_page_show_the_orphan_reason(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    proc = process()
    propose(proc, "call-a", "call-b")
    chat_span(proc, turn_answering(["call-a", "call-b"], ["call-acall-b"]))
    proc.close()
    page = tmp_path / "audit.html"
    code = run_audit([str(proc.path)], json_output=False, progress=False, html=str(page))
    out, _ = capsys.readouterr()
    assert code == 1
    assert "orphan_reason concatenated_ids (1)" in out
    html = page.read_text()
    assert "concatenated_ids" in html and "orphan reason concatenated_ids" in html


ASSISTANT_SHAPES = {
    "chat": lambda ids: {"role": "assistant", "tool_calls": [{"id": i, "type": "function"} for i in ids]},
    "semconv": lambda ids: {"role": "assistant", "parts": [{"type": "tool_call", "id": i, "name": "f"} for i in ids]},
    "anthropic": lambda ids: {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": i, "name": "f"} for i in ids],
    },
}


@pytest.mark.parametrize("shape", sorted(ASSISTANT_SHAPES))
@pytest.mark.parametrize("engine", ENGINES)
def test_the_assistant_turn_is_read_in_each_shape_and_only_the_last_one_counts(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str, shape: str
) -> None:
    """An earlier assistant turn naming other calls is not the evidence; the last one is."""
    proc = process()
    propose(proc, "call-a", "call-b")
    propose(proc, "call-c")
    assistant = ASSISTANT_SHAPES[shape]
    answer = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call-a", "response": "ok"}]}
    chat_span(proc, [*USER, assistant(["call-c"]), assistant(["call-a", "call-b"]), answer])
    chat_span(proc, [*USER, assistant(["call-a", "call-b"]), {"role": "tool", "tool_call_id": "call-c"}])
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    found = {f["call_id"]: f.get("orphan_reason") for f in findings(report, "orphaned_tool_message")}
    assert (code, found) == (1, {"call-c": "unknown"}), report


@pytest.mark.parametrize("shape", sorted(ASSISTANT_SHAPES))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_stateless_history_is_judged_on_its_last_round_with_calls_only(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str, shape: str
) -> None:
    """A request repeating every earlier round (AGENT-STACKS 11.6): the tool messages judged are those after the
    last assistant turn carrying a proposed call, against that turn; the earlier rounds' results are not judged
    again (an earlier one answering nothing included), and a text turn after the answers does not move the
    answered turn (a tool message after it that answers no call is still judged)."""
    proc = process()
    propose(proc, "call-a")
    propose(proc, "call-b")
    assistant = ASSISTANT_SHAPES[shape]
    text = {"role": "assistant", "content": "OK"}
    history = [
        *USER,
        assistant(["call-a"]),
        {"role": "tool", "tool_call_id": "call-a"},
        {"role": "tool", "tool_call_id": "call-lost"},  # an earlier round's own mistake: judged back then
        assistant(["call-b"]),
        {"role": "tool", "tool_call_id": "call-b"},
        text,
        {"role": "user", "content": "the file"},
    ]
    chat_span(proc, history)
    chat_span(proc, [*history, {"role": "tool", "tool_call_id": "call-x"}])  # after the text turn: still read
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    found = {f["call_id"]: f.get("orphan_reason") for f in findings(report, "orphaned_tool_message")}
    assert (code, found) == (1, {"call-x": "unknown"}), report
