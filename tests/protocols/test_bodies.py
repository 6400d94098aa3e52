"""Complete (non-streamed) bodies judged by the stream rules (docs/protocols.md, "Complete bodies").

Every body is judged twice: as parsed JSON (what ``replay`` reads) and as the SDK's own
response object (what the integrations get from ``create()``), built by the SDK's
constructor; both must give the very same result.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest
from anthropic._models import construct_type as anthropic_construct
from anthropic.types import Message
from openai._models import construct_type as openai_construct
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from etf_otel import ErrorCategory, IdentityRules, StreamState, Verdict
from etf_otel.core._identity import ABSENT, BODY_WITHOUT_ARGUMENTS
from etf_otel.core._refused import RefusedIds
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import ResponseSlots
from etf_otel.core._unslotted import COMPATIBILITY
from etf_otel.core._vocabulary import Transition
from etf_otel.protocols import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, GEMINI, RESPONSES, WireProtocol
from etf_otel.protocols._bodies import WHOLE, assemble_whole, judge_body

RULES = IdentityRules()
MISSING_ID = ErrorCategory.MISSING_ID
DUPLICATE = ErrorCategory.DUPLICATE_CALL_ID
INVALID = ErrorCategory.INVALID_ARGUMENTS
INCOMPLETE = ErrorCategory.INCOMPLETE_RESPONSE


def chat_call(call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat(finish: str | None, *calls: dict[str, Any], choices: int = 1) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "tool_calls": list(calls) or None}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": i, "message": message, "finish_reason": finish} for i in range(choices)],
    }


def function_call(call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response(status: str, *items: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "status": status,
        "output": list(items),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "incomplete_details": {"reason": reason} if reason else None,
    }


def tool_use(call_id: str, name: str, arguments: object) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def message(stop: str | None, *blocks: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": list(blocks),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


SDK_TYPES: dict[str, Any] = {
    CHAT_COMPLETIONS.name: ChatCompletion,
    RESPONSES.name: Response,
    ANTHROPIC_MESSAGES.name: Message,
}


def sdk_object(protocol: WireProtocol, body: dict[str, Any]) -> object:
    """``body`` as the SDK parses it off the wire (its lenient constructor, not validation)."""
    construct = anthropic_construct if protocol is ANTHROPIC_MESSAGES else openai_construct
    return construct(type_=SDK_TYPES[protocol.name], value=body)


def judged(protocol: WireProtocol, body: dict[str, Any]) -> AssemblyResult:
    """The result of ``body`` as JSON, checked equal to the result of the SDK's object of it."""
    as_json = judge_body(protocol, body, RULES)
    as_object = judge_body(protocol, sdk_object(protocol, body), RULES)
    assert as_json is not None and as_object is not None
    assert as_object.calls == as_json.calls
    assert (as_object.state, as_object.dispatchable, as_object.rejections) == (
        as_json.state,
        as_json.dispatchable,
        as_json.rejections,
    )
    return as_json


def summary(result: AssemblyResult) -> list[tuple[object, ...]]:
    return [(call.id, call.name, call.arguments, call.verdict, call.categories) for call in result.calls]


CASES = [
    pytest.param(
        CHAT_COMPLETIONS,
        chat("tool_calls", chat_call("a", "f", "{}"), chat_call("b", "g", '{"x":1}')),
        True,
        [("a", "f", "{}", Verdict.PROPOSED, ()), ("b", "g", '{"x":1}', Verdict.PROPOSED, ())],
        id="chat-two-calls",
    ),
    pytest.param(
        CHAT_COMPLETIONS,
        chat("tool_calls", chat_call("a", "f", "{}"), chat_call("a", "g", "{}")),
        False,
        [("a", "f", "{}", Verdict.REJECTED, (DUPLICATE,)), ("a", "g", "{}", Verdict.REJECTED, (DUPLICATE,))],
        id="chat-duplicate-ids",
    ),
    pytest.param(
        CHAT_COMPLETIONS,
        chat("tool_calls", chat_call(None, "f", "{}")),
        False,
        [(None, "f", "{}", Verdict.REJECTED, (MISSING_ID,))],
        id="chat-missing-id",
    ),
    pytest.param(
        CHAT_COMPLETIONS,
        chat("length", chat_call("a", "f", '{"city": "Par')),
        False,
        [("a", "f", '{"city": "Par', Verdict.REJECTED, (INVALID,))],
        id="chat-length-cut-arguments",
    ),
    pytest.param(
        CHAT_COMPLETIONS,
        chat("tool_calls", chat_call("a", "f", "[1]")),
        False,
        [("a", "f", "[1]", Verdict.REJECTED, (INVALID,))],
        id="chat-arguments-not-an-object",
    ),
    pytest.param(
        CHAT_COMPLETIONS,
        chat("tool_calls", chat_call("a", "f", "{}"), choices=2),
        False,
        [("a", "f", "{}", Verdict.REJECTED, (DUPLICATE,)), ("a", "f", "{}", Verdict.REJECTED, (DUPLICATE,))],
        id="chat-two-choices-one-id",
    ),
    pytest.param(
        RESPONSES,
        response(
            "completed",
            {"type": "message", "id": "msg", "role": "assistant", "status": "completed", "content": []},
            function_call("a", "f", "{}"),
            function_call("b", "g", '{"x":1}'),
        ),
        True,
        [("a", "f", "{}", Verdict.PROPOSED, ()), ("b", "g", '{"x":1}', Verdict.PROPOSED, ())],
        id="responses-two-calls",
    ),
    pytest.param(
        RESPONSES,
        response("incomplete", function_call("a", "f", "{}"), reason="max_output_tokens"),
        False,
        [("a", "f", "{}", Verdict.REJECTED, (INCOMPLETE,))],
        id="responses-incomplete",
    ),
    pytest.param(
        RESPONSES,
        response("completed", function_call("a", "f", "{}"), function_call("a", "g", "{}")),
        False,
        [("a", "f", "{}", Verdict.REJECTED, (DUPLICATE,)), ("a", "g", "{}", Verdict.REJECTED, (DUPLICATE,))],
        id="responses-duplicate-ids",
    ),
    pytest.param(
        RESPONSES,
        response("completed", function_call("a", "f", "not json")),
        False,
        [("a", "f", "not json", Verdict.REJECTED, (INVALID,))],
        id="responses-invalid-arguments",
    ),
    pytest.param(
        ANTHROPIC_MESSAGES,
        message("tool_use", {"type": "text", "text": "hi"}, tool_use("a", "f", {}), tool_use("b", "g", {"x": 1})),
        True,
        [("a", "f", "{}", Verdict.PROPOSED, ()), ("b", "g", '{"x":1}', Verdict.PROPOSED, ())],
        id="anthropic-two-calls",
    ),
    pytest.param(
        ANTHROPIC_MESSAGES,
        message("max_tokens", tool_use("a", "f", {"x": 1})),
        False,
        [("a", "f", '{"x":1}', Verdict.REJECTED, (INCOMPLETE,))],
        id="anthropic-max-tokens",
    ),
    pytest.param(
        ANTHROPIC_MESSAGES,
        message("tool_use", tool_use("a", "f", {}), tool_use("a", "g", {})),
        False,
        [("a", "f", "{}", Verdict.REJECTED, (DUPLICATE,)), ("a", "g", "{}", Verdict.REJECTED, (DUPLICATE,))],
        id="anthropic-duplicate-ids",
    ),
]


@pytest.mark.parametrize(("protocol", "body", "dispatchable", "calls"), CASES)
def test_a_body_is_judged_by_the_stream_rules(
    protocol: WireProtocol, body: dict[str, Any], dispatchable: bool, calls: list[tuple[object, ...]]
) -> None:
    result = judged(protocol, body)
    assert summary(result) == calls
    assert result.dispatchable is dispatchable
    assert result.state is StreamState.COMPLETED


@pytest.mark.parametrize(("protocol", "body"), [(case.values[0], case.values[1]) for case in CASES])
def test_a_body_has_no_fragments_and_no_identity_decisions(protocol: WireProtocol, body: dict[str, Any]) -> None:
    result = judged(protocol, body)
    assert result.fragments == 0
    assert all(call.fragments == 0 and call.transitions == () for call in result.calls)
    assert result.diagnostics == () and result.decision_counts == () and result.diagnostics_dropped == 0


def test_a_chat_body_without_calls_or_finish_reason_is_complete() -> None:
    """The HTTP body ended: no chunk can be missing, unlike a stream without finish reason or ``[DONE]``."""
    result = judged(CHAT_COMPLETIONS, chat(None))
    assert result.state is StreamState.COMPLETED and result.calls == () and result.rejections == ()


def test_a_failed_response_body_is_failed() -> None:
    result = judged(RESPONSES, response("failed", function_call("a", "f", "{}")))
    assert result.dispatchable is False
    assert result.state is StreamState.FAILED
    assert [call.verdict for call in result.calls] == [Verdict.REJECTED]


@pytest.mark.parametrize(
    ("protocol", "body"),
    [
        (RESPONSES, response("queued")),
        (RESPONSES, response("in_progress")),
        (RESPONSES, {"object": "response", "status": "completed"}),
        (CHAT_COMPLETIONS, {"choices": [{"index": 0, "delta": {}}]}),
        (CHAT_COMPLETIONS, {"object": "list"}),
        (ANTHROPIC_MESSAGES, {"type": "message", "content": "text"}),
    ],
    ids=["background-queued", "in-progress", "no-output", "chunk-not-body", "no-choices", "content-not-a-list"],
)
def test_what_is_no_complete_body_is_not_judged(protocol: WireProtocol, body: dict[str, Any]) -> None:
    assert judge_body(protocol, body, RULES) is None


def test_a_protocol_that_describes_no_body_judges_none() -> None:
    """A protocol registered from outside judges no body unless it describes one (the default)."""
    bare = WireProtocol(
        name="bare", assembler=CHAT_COMPLETIONS.assembler, recognizes=lambda event: False, result_ids=lambda r: None
    )
    assert judge_body(bare, chat("tool_calls", chat_call("a", "f", "{}")), RULES) is None
    assert not bare.judges_bodies
    assert CHAT_COMPLETIONS.judges_bodies and RESPONSES.judges_bodies and ANTHROPIC_MESSAGES.judges_bodies


@pytest.mark.parametrize(("protocol", "body"), [(case.values[0], case.values[1]) for case in CASES])
def test_a_body_result_is_the_stream_result_without_what_only_a_stream_has(
    protocol: WireProtocol, body: dict[str, Any]
) -> None:
    """``assemble_whole`` builds its result field by field: each field is kept or cleared on purpose.

    A field added to ``AssemblyResult`` fails the first assertion until ``assemble_whole`` says
    what a body's result holds in it.
    """
    assert [item.name for item in dataclasses.fields(AssemblyResult)] == [
        "state",
        "finish_reasons",
        "calls",
        "rejections",
        "fragments",
        "dispatchable",
        "_diagnostics",
        "_overflow",
        "_decision_counts",
        "_identity_errors",
        "refused_ids",
    ]
    events = protocol.body_events(body)
    assert events is not None
    streamed = protocol.assembler(rules=RULES)
    for event in events:
        streamed.feed(event)
    expected = streamed.finish()
    expected = dataclasses.replace(
        expected,
        calls=tuple(call._replace(fragments=0, transitions=()) for call in expected.calls),
        fragments=0,
        _diagnostics=(),
        _overflow=(),
        _decision_counts=(),
    )
    assert assemble_whole(protocol.assembler(rules=RULES), events) == expected


class _Finished:
    """An assembler that was fed nothing and finishes as ``result``."""

    def __init__(self, result: AssemblyResult) -> None:
        self.result = result

    def feed(self, event: object) -> None:
        raise AssertionError("no events were given")

    def finish(self) -> AssemblyResult:
        return self.result


def test_a_body_result_keeps_every_field_but_the_streamed_ones() -> None:
    """Every field set to a value of its own: the ones a body has are kept, the others cleared; of the
    decision counts, only those about a call as a whole (``positional``)."""
    unique: Any = [("marker", number) for number in range(8)]
    positional, awaited = COMPATIBILITY[Transition.POSITIONAL], IdentityRules().initial_row["absent"]
    unique[2] = ((0, 0, 1, awaited, None), (0, 0, 2, positional, None))
    unique[4] = ((awaited, 2), (positional, 1))
    full = AssemblyResult(
        state=StreamState.FAILED,
        finish_reasons=unique[0],
        calls=(),
        rejections=unique[1],
        fragments=7,
        dispatchable=False,
        _diagnostics=unique[2],
        _overflow=unique[3],
        _decision_counts=unique[4],
        _identity_errors=unique[5],
        refused_ids=RefusedIds.of(["refused"]),
    )
    whole = assemble_whole(cast("Any", _Finished(full)), [])
    kept, listed = ((positional, 1),), ((0, 0, 2, positional, None),)
    assert whole == dataclasses.replace(full, fragments=0, _diagnostics=listed, _overflow=(), _decision_counts=kept)


def test_a_gemini_body_keeps_positional_identity() -> None:
    """An id-less Gemini call is identified by its position whether or not the response was streamed: the
    transition ``positional`` is about the call, not a fragment (``etf.id.positional`` on its span)."""
    call = {"functionCall": {"name": "f", "args": {}}}
    body = {"candidates": [{"content": {"role": "model", "parts": [call]}, "finishReason": "STOP"}]}
    events = GEMINI.body_events(body)
    assert events is not None
    result = assemble_whole(GEMINI.assembler(rules=RULES), events)
    (call,) = result.calls
    assert (call.id, call.verdict, call.fragments, call.transitions) == (
        None,
        Verdict.PROPOSED,
        0,
        ((Transition.POSITIONAL, 1),),
    )
    assert [(decision.transition, count) for decision, count in result.decision_counts] == [(Transition.POSITIONAL, 1)]
    assert result.fragments == 0 and [d.transition for d in result.diagnostics] == [Transition.POSITIONAL]


def test_what_a_body_lacks_its_events_lack() -> None:
    """A field the body did not carry (absent or null) is not stated as anything in its events, but for a
    function's arguments, whose key the body left out (``absent_arguments_in_body`` reads it)."""
    chat_body = {"choices": [{"index": 0, "message": {"tool_calls": [{"id": "a"}, {"function": {"name": None}}]}}]}
    assert CHAT_COMPLETIONS.body_events(chat_body) == [
        {
            "object": "chat.completion.chunk",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "a", "function": {}},
                            {"index": 1, "function": {"arguments": BODY_WITHOUT_ARGUMENTS}},
                        ]
                    },
                }
            ],
        },
        "[DONE]",
    ]
    assert ANTHROPIC_MESSAGES.body_events({"content": [], "stop_reason": None, "stop_sequence": "END"}) == [
        {"type": "message_start", "message": {"content": []}},
        {"type": "message_delta", "delta": {"stop_sequence": "END"}},
        {"type": "message_stop"},
    ]


# --- absent_arguments_in_body: a complete body's call without an arguments key ------------------------------

DENIED = IdentityRules(deny=["absent_arguments_in_body"])


def without_arguments(call: dict[str, Any]) -> dict[str, Any]:
    """``call`` (Chat or Responses) without its ``arguments`` key."""
    if "function" in call:
        return {**call, "function": {k: v for k, v in call["function"].items() if k != "arguments"}}
    return {k: v for k, v in call.items() if k != "arguments"}


NO_ARGUMENTS_BODIES = [
    pytest.param(
        CHAT_COMPLETIONS,
        chat("tool_calls", without_arguments(chat_call("a", "now", "")), chat_call("b", "g", '{"x":1}')),
        id="chat",
    ),
    pytest.param(
        RESPONSES,
        response("completed", without_arguments(function_call("a", "now", "")), function_call("b", "g", '{"x":1}')),
        id="responses",
    ),
]


@pytest.mark.parametrize(("protocol", "body"), NO_ARGUMENTS_BODIES)
def test_a_body_call_without_an_arguments_key_has_empty_arguments_by_default(
    protocol: WireProtocol, body: dict[str, Any]
) -> None:
    """An OpenAI-compatible gateway's call whose parameters are all optional: ``{}``, as every framework reads
    it, counted once for the call as the compatibility decision ``absent_arguments`` (JSON and SDK object)."""
    result = judged(protocol, body)
    assert summary(result) == [("a", "now", "{}", Verdict.PROPOSED, ()), ("b", "g", '{"x":1}', Verdict.PROPOSED, ())]
    assert result.dispatchable
    assert [call.transitions for call in result.calls] == [((Transition.ABSENT_ARGUMENTS, 1),), ()]
    assert [(decision.transition, count) for decision, count in result.decision_counts] == [
        (Transition.ABSENT_ARGUMENTS, 1)
    ]
    assert [(d.index, d.transition) for d in result.diagnostics] == [(0, Transition.ABSENT_ARGUMENTS)]


@pytest.mark.parametrize(("protocol", "body"), NO_ARGUMENTS_BODIES)
def test_a_body_call_without_an_arguments_key_is_invalid_when_the_rule_is_denied(
    protocol: WireProtocol, body: dict[str, Any]
) -> None:
    for given in (body, sdk_object(protocol, body)):
        result = judge_body(protocol, given, DENIED)
        assert result is not None and not result.dispatchable
        assert summary(result)[0] == ("a", "now", "", Verdict.REJECTED, (INVALID,))
        assert result.decision_counts == () and all(call.transitions == () for call in result.calls)


@pytest.mark.parametrize(
    ("protocol", "body"),
    [
        pytest.param(CHAT_COMPLETIONS, chat("tool_calls", chat_call("a", "now", "")), id="chat-empty"),
        pytest.param(CHAT_COMPLETIONS, chat("tool_calls", chat_call("a", "now", None)), id="chat-null"),  # type: ignore[arg-type]
        pytest.param(RESPONSES, response("completed", function_call("a", "now", "")), id="responses-empty"),
        pytest.param(
            ANTHROPIC_MESSAGES,
            message("tool_use", {"type": "tool_use", "id": "toolu_1", "name": "now"}),
            id="anthropic-no-input",
        ),
    ],
)
def test_only_a_missing_chat_or_responses_arguments_key_is_read_as_empty(
    protocol: WireProtocol, body: dict[str, Any]
) -> None:
    """``""`` and ``null`` are arguments the body stated; Anthropic documents ``input`` as required: all stay
    ``invalid_arguments``, with the rule on."""
    result = judge_body(protocol, body, RULES)
    assert result is not None and not result.dispatchable
    assert [(call.verdict, call.categories, call.transitions) for call in result.calls] == [
        (Verdict.REJECTED, (INVALID,), ())
    ]


def test_a_gemini_call_without_args_is_a_parameterless_call_with_no_rule() -> None:
    """Gemini's ``{name}`` alone is a complete parameterless call, streamed or not (GEMINI.md 2.2): ``{}``
    whatever the rule says, and no ``absent_arguments`` decision."""
    body = {"candidates": [{"content": {"parts": [{"functionCall": {"name": "now"}}]}, "finishReason": "STOP"}]}
    for rules in (RULES, DENIED):
        events = GEMINI.body_events(body)
        assert events is not None
        (call,) = assemble_whole(GEMINI.assembler(rules=rules), events).calls
        assert (call.arguments, call.verdict, call.transitions) == (
            "{}",
            Verdict.PROPOSED,
            ((Transition.POSITIONAL, 1),),
        )


@pytest.mark.parametrize("rules", [RULES, DENIED], ids=["default", "denied"])
def test_a_stream_without_arguments_is_unchanged(rules: IdentityRules) -> None:
    """Bodies only: a streamed call that never sent ``arguments`` (Chat) or whose item has none (Responses)
    is ``invalid_arguments``, rule or not."""
    chat_stream = CHAT_COMPLETIONS.assembler(rules=rules)
    chat_stream.feed(
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "now"}}]}}]}
    )
    chat_stream.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    chat_stream.feed("[DONE]")
    responses_stream = RESPONSES.assembler(rules=rules)
    item = without_arguments(function_call("a", "now", ""))
    for event in (
        {"type": "response.created", "response": {"id": "resp_1"}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"id": "resp_1"}},
    ):
        responses_stream.feed(event)
    for result in (chat_stream.finish(), responses_stream.finish()):
        assert [(call.verdict, call.categories) for call in result.calls] == [(Verdict.REJECTED, (INVALID,))]
        assert all(d.transition is not Transition.ABSENT_ARGUMENTS for d in result.diagnostics)


def test_the_marker_after_arguments_adds_nothing() -> None:
    """A slot that already holds arguments is not given ``{}`` as well (a body states each call once)."""
    slots = ResponseSlots(RULES)
    slots.fragment(0, 0, "a", "f", '{"x":1}')
    slots.fragment(0, 0, ABSENT, ABSENT, BODY_WITHOUT_ARGUMENTS)
    slots.end()
    (call,) = slots.finish().calls
    assert (call.arguments, call.verdict, call.transitions) == ('{"x":1}', Verdict.PROPOSED, ())


def test_a_responses_body_marks_its_done_events_whole() -> None:
    """Only a body's ``output_item.done`` says its item is whole: there, and only there, a missing arguments
    key is no arguments (a stream's item without arguments stays invalid)."""
    item = {"type": "function_call", "call_id": "a", "name": "now"}
    events = RESPONSES.body_events(response("completed", item))
    assert events is not None
    marked = [event for event in events if WHOLE in event]  # type: ignore[operator]
    assert [event["type"] for event in marked] == ["response.output_item.done"]  # type: ignore[index]
    assert repr(BODY_WITHOUT_ARGUMENTS) == "BODY_WITHOUT_ARGUMENTS"
    (call,) = assemble_whole(RESPONSES.assembler(rules=RULES), events).calls
    assert (call.id, call.arguments, call.verdict) == ("a", "{}", Verdict.PROPOSED)
