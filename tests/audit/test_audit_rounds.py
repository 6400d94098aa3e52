"""Which round of a recorded history the audit judges (AGENT-STACKS 11.6), in both engines.

* The answered turn is the last assistant turn carrying a call some span proposed: a round a framework
  appends after it (pydantic-ai's synthetic ``search_tools`` call, answered in the same request) is passed
  over, and its answer is not an orphaned tool message.
* The answers of the answered turn are the tool messages up to the next assistant turn; after a later
  assistant turn, a tool message answering that later turn's call belongs to that round, and one answering
  nothing is still judged (as the live rule, ``etf_otel.core._history.judge_history``, does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integrations.test_openai_integration import USER

from ..conftest import Process
from .test_audit_evidence import ENGINES, audit, findings, kinds
from .test_audit_reasons import ASSISTANT_SHAPES, chat_span, propose

TEXT = {"role": "assistant", "content": "OK"}


def tool(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "result"}


def orphans(report: dict[str, Any]) -> dict[str, str | None]:
    return {f["call_id"]: f.get("orphan_reason") for f in findings(report, "orphaned_tool_message")}


@pytest.mark.parametrize("shape", sorted(ASSISTANT_SHAPES))
@pytest.mark.parametrize("engine", ENGINES)
def test_a_round_the_framework_appends_after_the_answered_turn_is_passed_over(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str, shape: str
) -> None:
    """The shape of pydantic-ai's deferred tool discovery (its ``search_tools`` round, a call no model
    response proposed, answered in the same request): the real answers are judged, the made-up round is not."""
    proc = process()
    propose(proc, "call-a", "call-b")
    assistant = ASSISTANT_SHAPES[shape]
    history = [*USER, assistant(["call-a", "call-b"]), tool("call-a"), tool("call-b")]
    chat_span(proc, [*history, assistant(["search_tools_1"]), tool("search_tools_1")])
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    assert (code, orphans(report)) == (0, {}), report


@pytest.mark.parametrize("engine", ENGINES)
def test_the_answered_turn_found_before_a_made_up_round_still_judges_its_own_answers(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """Passing over the made-up round does not excuse the answered turn's own mistakes, nor a tool message
    after it that answers no call of any round."""
    proc = process()
    propose(proc, "call-a", "call-b")
    history = [*USER, ASSISTANT_SHAPES["chat"](["call-a", "call-b"]), tool("call-a"), tool("call-acall-b")]
    made_up = [ASSISTANT_SHAPES["chat"](["search_tools_1"]), tool("search_tools_1"), tool("call-lost")]
    chat_span(proc, [*history, *made_up])
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    assert (code, orphans(report)) == (1, {"call-acall-b": "concatenated_ids", "call-lost": "unknown"}), report


@pytest.mark.parametrize("engine", ENGINES)
def test_a_made_up_round_after_a_turn_several_spans_proposed_leaves_it_unjudged(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """A server numbering its calls ``call_0`` in every response: the answered turn names no single
    response, so its answers stay ``unjudged``; the made-up round after it changes nothing."""
    proc = process()
    propose(proc, "call_0")
    propose(proc, "call_0")
    history = [*USER, ASSISTANT_SHAPES["chat"](["call_0"]), tool("call_0")]
    chat_span(proc, [*history, ASSISTANT_SHAPES["chat"](["search_tools_1"]), tool("search_tools_1")])
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    assert (code, orphans(report)) == (0, {}), report
    assert kinds(report)["unjudged"] == 2 + 1  # the two proposals, the answer


@pytest.mark.parametrize("engine", ENGINES)
def test_tool_messages_after_a_later_assistant_turn_belong_to_that_round(
    process: Callable[..., Process], capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """After the answers: an "OK" turn and the user's file (a tool that returned one), then a made-up round
    answered after another text turn. Its answer belongs to the made-up round; a result answering no call of
    any round is still judged, against the answered turn."""
    proc = process()
    propose(proc, "call-a")
    chat = ASSISTANT_SHAPES["chat"]
    history = [*USER, chat(["call-a"]), tool("call-a"), TEXT, {"role": "user", "content": "the file"}]
    later = [chat(["search_tools_1"]), TEXT, tool("search_tools_1"), TEXT, tool("call-x")]
    chat_span(proc, [*history, *later])
    proc.close()
    code, report = audit(capsys, proc.path, engine)
    assert (code, orphans(report)) == (1, {"call-x": "unknown"}), report
