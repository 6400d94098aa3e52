"""The Ollama ``/api/chat`` adapter and its description, rule by rule (docs/protocols.md, "Ollama").

The chunks and the next requests are our own bytes in the shapes of public recordings: the chat
examples of Ollama's API documentation (``docs/api.md``: a ``done: false`` chunk per piece, the last
``done: true`` with ``done_reason`` and the counters) and the tool loops of the ``ollama`` client's
examples (``examples/multi-tool.py``, ``examples/gpt-oss-tools-stream.py`` in ollama-python 0.6.3:
the calls of each chunk appended to an assistant message, each result a ``role: tool`` message with
``tool_name``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from etf_otel import IdentityRules, protocols
from etf_otel.core._vocabulary import ErrorCategory, StreamState, Transition, Verdict
from etf_otel.protocols import OLLAMA
from etf_otel.protocols._ollama import OllamaAssembler, assemble, tool_calls
from etf_otel.protocols._ollama_description import body_events, link_answers, results, settle_answers
from etf_otel.testing import OLLAMA_QUIRK_STREAMS
from etf_otel.testing.ollama import MISSING, body, call, chunk, done, error, stream

A, B = "call_k3xq9ab2", "call_p0w7d4mz"


def calls(events: list[Any], rules: IdentityRules | None = None) -> list[tuple[Any, ...]]:
    result = assemble(events, rules)
    return [(c.id, c.name, c.arguments, c.verdict.value, [x.value for x in c.categories]) for c in result.calls]


# --- the adapter -------------------------------------------------------------------------------------


def test_a_clean_loop_with_ids_is_dispatchable_and_keeps_each_call_whole() -> None:
    events = stream(chunk(call("get_a", {"a": 1}, id=A, index=0)), chunk(call("get_b", {"b": [1, "x"]}, id=B, index=1)))
    result = assemble(events)
    assert result.dispatchable and result.state is StreamState.COMPLETED
    assert calls(events) == [
        (A, "get_a", '{"a":1}', "proposed", []),
        (B, "get_b", '{"b":[1,"x"]}', "proposed", []),
    ]
    assert result.finish_reasons == ("stop",)


@pytest.mark.parametrize("index", [0, MISSING])
def test_calls_without_ids_are_positional_whatever_their_index(index: Any) -> None:
    events = stream(chunk(call("get_a", {"a": 1}, index=index), call("get_a", {"a": 2}, index=index)))
    assembler = OllamaAssembler()
    for event in events:
        assembler.feed(event)
    assert assembler.opened == 2
    result = assembler.finish()
    assert result.dispatchable
    assert [(c.id, c.arguments, c.verdict) for c in result.calls] == [
        (None, '{"a":1}', Verdict.PROPOSED),
        (None, '{"a":2}', Verdict.PROPOSED),
    ]
    assert [c.transition_count(Transition.POSITIONAL) for c in result.calls] == [1, 1]


def test_require_call_id_refuses_id_less_calls() -> None:
    events = stream(chunk(call("get_a", {"a": 1})))
    assert calls(events, IdentityRules.for_rules(["require_call_id"])) == [
        (None, "get_a", '{"a":1}', "rejected", ["missing_id"])
    ]


def test_one_call_with_an_id_makes_its_id_less_sibling_missing_id() -> None:
    assert [c[-1] for c in calls(OLLAMA_QUIRK_STREAMS["one call with an id, its sibling without"])] == [
        ["missing_id"],
        ["missing_id"],
    ]


def test_the_string_null_is_an_id_like_any_other() -> None:
    """A bridge that writes ``"id": "null"`` sends a real id: it is kept, and two such calls share it."""
    assert calls(stream(chunk(call("get_a", {"a": 1}, id="null")))) == [("null", "get_a", '{"a":1}', "proposed", [])]
    twice = stream(chunk(call("get_a", {"a": 1}, id="null"), call("get_b", {"b": 2}, id="null")))
    assert {tuple(c[-1]) for c in calls(twice)} == {("duplicate_call_id",)}


@pytest.mark.parametrize(
    ("arguments", "expected", "verdict"),
    [({}, "{}", "proposed"), (None, "{}", "proposed"), (MISSING, "{}", "proposed"), ('{"a":1}', "", "rejected")],
)
def test_arguments_objects_placeholders_and_strings(arguments: Any, expected: str, verdict: str) -> None:
    [(_, _, text, found, _)] = calls(stream(chunk(call("f", arguments, id=A))))
    assert (text, found) == (expected, verdict)


def test_arguments_json_cannot_hold_are_invalid() -> None:
    [(_, _, _, verdict, categories)] = calls(stream(chunk(call("f", {"a": float("nan")}, id=A))))
    assert (verdict, categories) == ("rejected", ["invalid_arguments"])


def test_calls_that_are_no_objects_or_have_no_function() -> None:
    assembler = OllamaAssembler()
    assembler.feed(chunk("not a call", None))  # type: ignore[arg-type]
    assembler.feed(chunk({"id": A}, {"id": B, "function": None}))
    assembler.feed(done())
    result = assembler.finish()
    assert not result.dispatchable
    assert [r.category for r in result.rejections if r.index is None] == [ErrorCategory.UNKNOWN_SLOT]
    assert [(c.id, c.name) for c in result.calls] == [(A, None), (B, None)]


@pytest.mark.parametrize(
    ("reason", "state", "dispatchable"),
    [("stop", StreamState.COMPLETED, True), (MISSING, StreamState.COMPLETED, True), ("", StreamState.COMPLETED, True)]
    + [("length", StreamState.COMPLETED, False), ("unload", StreamState.COMPLETED, False)],
)
def test_the_done_chunk_ends_the_response(reason: Any, state: StreamState, dispatchable: bool) -> None:
    result = assemble(stream(chunk(call("get_a", {"a": 1}, id=A)), reason=reason))
    assert (result.state, result.dispatchable) == (state, dispatchable)


def test_no_done_truncates_an_error_fails_and_calls_after_done_splice() -> None:
    assert assemble([chunk(call("get_a", {"a": 1}, id=A))]).state is StreamState.TRUNCATED
    assert assemble([chunk(call("get_a", {"a": 1}, id=A)), error()]).state is StreamState.FAILED
    assert assemble([chunk(call("get_a", {"a": 1}, id=A)), {"error": None}, done()]).dispatchable
    spliced = OllamaAssembler()
    for event in [*stream(chunk(call("get_a", {"a": 1}, id=A))), chunk(call("get_b", {}, id=B)), done()]:
        spliced.feed(event)
    assert spliced.ignored_events == 1  # the second done: the splice itself is no ignored chunk
    assert spliced.finish().state is StreamState.TRUNCATED


def test_chunks_after_the_end_without_calls_and_non_objects_are_ignored() -> None:
    assembler = OllamaAssembler()
    for event in ["text", 3, None, [], *stream(chunk(call("get_a", {"a": 1}, id=A))), chunk()]:
        assembler.feed(event)
    assert assembler.ignored_events == 5
    assert not assembler.finished
    assembler.feed_done()  # no sentinel on this wire: nothing happens
    result = assembler.finish()
    assert assembler.finished and assembler.slots.finished and result.dispatchable
    assembler.feed(chunk(call("get_b", {}, id=B)))
    assert assembler.finish() is result and assembler.ignored_events == 6


def test_sdk_objects_are_read_like_dicts() -> None:
    function = SimpleNamespace(name="get_a", arguments={"a": 1}, index=0)
    message = SimpleNamespace(role="assistant", content="", tool_calls=[SimpleNamespace(id=A, function=function)])
    last = SimpleNamespace(message=SimpleNamespace(role="assistant", content=""), done=True, done_reason="stop")
    assert calls([SimpleNamespace(message=message, done=False), last]) == [(A, "get_a", '{"a":1}', "proposed", [])]
    assert tool_calls(SimpleNamespace(message=None)) == [] and tool_calls({"message": {"tool_calls": "x"}}) == []


def test_the_quirk_streams_of_the_table() -> None:
    verdicts = {name: assemble(events).dispatchable for name, events in OLLAMA_QUIRK_STREAMS.items()}
    assert [name for name, ok in verdicts.items() if ok] == [
        "clean two-call stream (ids, one call a chunk)",
        "calls without ids (older servers)",
        "several calls on index 0, with ids",
        "several calls on index 0, no ids",
        "parallel calls in one chunk",
        'id "" or null (a proxy)',
        "no arguments (parameterless tool)",
        "no done_reason (servers before it)",
        "calls on the done chunk",
        "complete body (stream false)",
    ]


# --- the description ---------------------------------------------------------------------------------


def test_detection_tells_ollama_chunks_from_the_other_protocols() -> None:
    assert protocols.detect(chunk()) is OLLAMA and protocols.detect(done()) is OLLAMA
    assert protocols.detect({"done": False, "created_at": "t"}) is OLLAMA
    assert not OLLAMA.recognizes({"done": True})  # no message, no created_at
    assert not OLLAMA.recognizes({"done": True, "message": {}, "choices": []})
    assert not OLLAMA.recognizes([chunk()])
    assert protocols.get("ollama") is OLLAMA and OLLAMA.request_path == "/api/chat"


def test_a_complete_body_is_judged_as_the_one_chunk_it_is() -> None:
    whole = body(call("get_a", {"a": 1}, id=A), call("get_b", {"b": 2}, id=B))
    assert OLLAMA.judges_bodies and body_events(whole) == [whole]
    assert body_events(chunk()) is None and body_events({"done": True}) is None and body_events("x") is None


def test_later_responses_start_after_a_done_chunk() -> None:
    one = stream(chunk(call("get_a", {}, id=A)))
    assert OLLAMA.later_responses([*one, "noise", *one]) == [len(one) + 1]
    assert OLLAMA.later_responses(one) == []


def test_slot_labels() -> None:
    assert (OLLAMA.slot_label(0, 2), OLLAMA.slot_label(0, None)) == ("call 2", "no call")


def _assistant(*ids: Any, names: tuple[str, ...] = ("get_a", "get_b")) -> dict[str, Any]:
    tool_calls = [
        {"function": {"name": name, "arguments": {"x": at}}, **({} if i is None else {"id": i})}
        for at, (i, name) in enumerate(zip(ids, names, strict=False))
    ]
    return {"role": "assistant", "content": "", "tool_calls": tool_calls}


def _tool(name: Any = MISSING, call_id: Any = MISSING) -> dict[str, Any]:
    message = {"role": "tool", "content": "ok", "tool_name": name, "tool_call_id": call_id}
    return {key: value for key, value in message.items() if value is not MISSING}


def test_history_reads_calls_and_results() -> None:
    request = {"messages": [{"role": "user", "content": "hi"}, _assistant(A), _tool("get_a", A), {"role": "system"}]}
    turns = OLLAMA.history(request)
    assert turns is not None
    assert [(t.assistant, t.at) for t in turns] == [(False, 0), (True, 1), (False, 2), (False, 3)]
    assert turns[1].calls[0][:2] == (A, "get_a") and turns[2].results[0][:2] == (A, "get_a")
    no_function = OLLAMA.history([{"role": "assistant", "tool_calls": [{"id": A}, None]}])
    assert no_function is not None and no_function[0].calls[0][:3] == (A, None, None)
    assert OLLAMA.history({"messages": "x"}) is None and OLLAMA.history(["x"]) is None
    by_order = OLLAMA.history([_assistant(None), _tool(), _tool()])  # older clients: the k-th result, the k-th call
    assert by_order is not None and [t.results[0].name for t in by_order[1:]] == ["get_a", None]


def test_result_ids_and_follow_up() -> None:
    messages = [_assistant(A, B), _tool("get_a", A), {"role": "user", "content": "and?"}, _tool("get_b")]
    assert OLLAMA.result_ids({"messages": messages}) == [A, None]
    assert OLLAMA.result_ids("x") is None
    assert OLLAMA.follow_up(messages) == (0, [A, None])
    assert OLLAMA.follow_up([{"role": "user"}]) is None


def test_results_are_the_tool_messages_after_the_answered_turn() -> None:
    first = assemble(stream(chunk(call("get_a", {"x": 0}, id=A))))
    messages = [_assistant(A), _tool("get_a", A), _assistant(B), _tool("get_b", B)]
    assert results(messages, first) == [messages[1]]  # found by id: the later turn's answer is not its
    assert results(messages) == [messages[3]]  # no response: after the last assistant message
    assert results([_tool("get_a")]) == [_tool("get_a")]  # no assistant message at all
    stranger = assemble(stream(chunk(call("other", {"x": 9}, id="call_zz"))))
    assert results(messages, stranger) == [messages[3]]


def _findings(response: list[Any], answers: list[dict[str, Any]]) -> list[tuple[str, Any, Any]]:
    proposals = assemble(response).proposals
    return [(f.category.value, f.call_id, f.name) for f in link_answers(proposals, answers)]


def test_linkage_by_id_by_name_and_by_order() -> None:
    with_ids = stream(chunk(call("get_a", {}, id=A), call("get_b", {}, id=B)))
    without = stream(chunk(call("get_a", {}), call("get_b", {})))
    assert _findings(with_ids, [_tool("get_b", B), _tool("get_a", A)]) == []
    assert _findings(with_ids, [_tool("get_b"), _tool(call_id=A)]) == []  # by name, then by id
    assert _findings(without, [_tool(), _tool()]) == []  # by order: older clients name nothing
    assert _findings(without, [_tool("get_b", A), _tool("get_a", "whatever")]) == []  # ids ignored: none proposed
    assert _findings(with_ids, [_tool("get_a", "call_other"), _tool("get_b", A)]) == [
        ("orphaned_result", None, "get_a"),  # an unknown id
        ("orphaned_result", None, "get_b"),  # A's id under another name
        ("unanswered_call", A, "get_a"),
        ("unanswered_call", B, "get_b"),
    ]
    assert _findings(with_ids, [_tool("get_a", A), _tool("get_a", A), _tool("nope"), _tool(), _tool()]) == [
        ("duplicate_result", A, "get_a"),
        ("orphaned_result", None, "nope"),
        ("duplicate_result", B, None),
    ]


def test_the_positions_an_id_less_follow_up_settles() -> None:
    """No id names an id-less call: the integration records which it settled by where it stands."""
    proposals = assemble(stream(chunk(call("get_a", {}), call("get_b", {}), call("get_a", {})))).proposals
    findings, positions = settle_answers(proposals, [_tool("get_a"), _tool("get_a")])
    assert [(f.category.value, f.call_id, f.name) for f in findings] == [("unanswered_call", None, "get_b")]
    assert positions == frozenset({0, 2})
    assert settle_answers(proposals, [_tool("get_b"), _tool()])[1] == frozenset({0, 1})  # by name, then by order
    assert settle_answers(proposals, [_tool("nope")])[1] == frozenset()


def test_the_link_of_a_next_request() -> None:
    response = assemble(stream(chunk(call("get_a", {"x": 0}, id=A))))
    assert OLLAMA.link is not None
    assert OLLAMA.link(response, {"messages": [_assistant(A), _tool("get_a", A)]}) == []
    assert OLLAMA.link(response, {"messages": 3}) is None
