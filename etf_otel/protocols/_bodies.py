"""Complete (non-streamed) response bodies, judged by the same rules as streams.

A body is what a stream would have been had every call arrived in one piece: each protocol
says which of its own events that is (:attr:`WireProtocol.body_events`), and the protocol's
adapter assembles them like any stream. One rule set then judges both: a call without an id
is ``missing_id``, two calls with one id ``duplicate_call_id``, arguments that are not a JSON
object ``invalid_arguments``, an end that says the output was cut ``incomplete_response``
(Responses ``incomplete``, Anthropic ``max_tokens``; Chat Completions' ``length`` is left to
JSON validation, as on streams). One reading is a body's own: a Chat Completions ``function`` or
a Responses ``function_call`` item without an ``arguments`` key is lowered to
:data:`~etf_otel.core._identity.BODY_WITHOUT_ARGUMENTS`, which the slots read as ``{}`` under
``absent_arguments_in_body`` (on by default; ``absent_arguments``), else as absent
(``invalid_arguments``). :func:`judge_body` then drops what only a stream has: a body
has no fragments and no fragment's identity transitions. A decision about a call as a whole is
kept (:data:`CALL_TRANSITIONS`): Gemini's ``positional``, a call whose position is its identity,
is the same whether the response was streamed or not; ``absent_arguments`` is a body's only.

Bodies come as parsed JSON (``replay``) or as the SDK's own objects (the integrations); both
are read through :func:`~etf_otel.protocols._base.field`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from etf_otel.core._identity import ABSENT, BODY_WITHOUT_ARGUMENTS, IdDecision, IdentityRules
from etf_otel.core._results import AssemblyResult, ToolCall
from etf_otel.core._vocabulary import Transition
from etf_otel.protocols._base import StreamAssembler, WireProtocol, field

__all__ = [
    "CALL_TRANSITIONS",
    "WHOLE",
    "anthropic_body_events",
    "assemble_whole",
    "chat_body_events",
    "judge_body",
    "responses_body_events",
]

WHOLE: Final = "etf_whole"
"""Key of the ``output_item.done`` events of a complete Responses body: the item is stated whole, so a
``function_call`` without an ``arguments`` key has none (:data:`BODY_WITHOUT_ARGUMENTS`, read by the adapter)."""

CALL_TRANSITIONS: Final = frozenset({Transition.POSITIONAL, Transition.ABSENT_ARGUMENTS})
"""Transitions that decide about a call as a whole, not about a fragment: a body keeps them."""

_DONE: Final = "[DONE]"
_RESPONSE_ENDS: Final = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}


def _sequence(value: object) -> list[object] | None:
    return list(value) if isinstance(value, (list, tuple)) else None


def _given(value: object) -> bool:
    """Whether the body carried ``value`` (not absent, and not ``None`` as SDK objects say absent)."""
    return value is not ABSENT and value is not None


def chat_body_events(body: object) -> list[object] | None:
    """A ``chat.completion`` as one chunk holding every call whole, then ``[DONE]``.

    ``None`` when a choice holds no ``message`` (not a complete body). Only what the adapter
    reads is carried over: each choice's index, calls and finish reason, each call's id, name
    and arguments (its ``type`` names no identity and is left out).
    """
    choices = _sequence(field(body, "choices"))
    if choices is None:
        return None
    lowered: list[object] = []
    for position, choice in enumerate(choices):
        message = field(choice, "message")
        if message is ABSENT or message is None:
            return None
        index = field(choice, "index")
        calls = _sequence(field(message, "tool_calls"))
        delta: dict[str, object] = {"tool_calls": list(map(_chat_call, range(len(calls)), calls))} if calls else {}
        entry: dict[str, object] = {"index": index if type(index) is int else position, "delta": delta}
        finish_reason = field(choice, "finish_reason")
        if _given(finish_reason):
            entry["finish_reason"] = finish_reason
        lowered.append(entry)
    chunk: dict[str, object] = {"object": "chat.completion.chunk", "choices": lowered}
    response_id = field(body, "id")
    if _given(response_id):
        chunk["id"] = response_id
    return [chunk, _DONE]


def _chat_call(slot: int, call: object) -> dict[str, object]:
    # _given inlined: this runs once per call of every body
    lowered: dict[str, object] = {"index": slot}
    call_id = field(call, "id")
    if call_id is not ABSENT and call_id is not None:
        lowered["id"] = call_id
    function = field(call, "function")
    named: dict[str, object] = {}
    if function is not ABSENT and function is not None:
        name = field(function, "name")
        if name is not ABSENT and name is not None:
            named["name"] = name
        arguments = field(function, "arguments")
        if arguments is ABSENT:  # no key at all: {} under absent_arguments_in_body (the slots decide)
            named["arguments"] = BODY_WITHOUT_ARGUMENTS
        elif arguments is not None:
            named["arguments"] = arguments
    lowered["function"] = named
    return lowered


def responses_body_events(body: object) -> list[object] | None:
    """An ``object: response`` as each output item added and done whole, then its terminal event.

    ``None`` for a response that has not ended (``queued``, ``in_progress``: a background
    response, read again later) or has no ``output`` list.
    """
    end = _RESPONSE_ENDS.get(str(field(body, "status")))
    output = _sequence(field(body, "output"))
    if end is None or output is None:
        return None
    response_id = field(body, "id")
    started: dict[str, object] = {"id": response_id} if _given(response_id) else {}
    events: list[object] = [{"type": "response.created", "response": started}]
    for position, item in enumerate(output):
        events.append({"type": "response.output_item.added", "output_index": position, "item": item})
        events.append({"type": "response.output_item.done", "output_index": position, "item": item, WHOLE: True})
    # The items were each stated whole already: the terminal event restates no output, which with
    # duplicate call ids would be matched to the wrong item (a false snapshot_mismatch).
    ending = dict(started)
    details = field(body, "incomplete_details")
    if _given(details):
        ending["incomplete_details"] = details
    events.append({"type": end, "response": ending})
    return events


def anthropic_body_events(body: object) -> list[object] | None:
    """A ``message`` as each content block started whole and stopped, its stop reason, ``message_stop``."""
    content = _sequence(field(body, "content"))
    if content is None:
        return None
    message_id = field(body, "id")
    started: dict[str, object] = {"id": message_id, "content": []} if _given(message_id) else {"content": []}
    events: list[object] = [{"type": "message_start", "message": started}]
    for position, block in enumerate(content):
        events.append({"type": "content_block_start", "index": position, "content_block": block})
        events.append({"type": "content_block_stop", "index": position})
    delta: dict[str, object] = {}
    stop_reason = field(body, "stop_reason")
    if _given(stop_reason):
        delta["stop_reason"] = stop_reason
    stop_sequence = field(body, "stop_sequence")
    if _given(stop_sequence):
        delta["stop_sequence"] = stop_sequence
    events.append({"type": "message_delta", "delta": delta})
    events.append({"type": "message_stop"})
    return events


def judge_body(
    protocol: WireProtocol, body: object, rules: IdentityRules, clock: Callable[[], int] | None = None
) -> AssemblyResult | None:
    """``body`` assembled and validated as ``protocol``'s stream of it would be; ``None`` when it is
    no complete body of that protocol.

    The result carries no fragments and no fragment's identity decisions: nothing was streamed.
    """
    events = protocol.body_events(body)
    return None if events is None else assemble_whole(protocol.assembler(rules=rules, clock=clock), events)


def assemble_whole(assembler: StreamAssembler, events: Sequence[object]) -> AssemblyResult:
    """The result of a body's ``events`` (:attr:`WireProtocol.body_events`) through a fresh ``assembler``,
    without what only a stream has: fragments, and the identity decisions and transitions of fragments
    (those about a call as a whole, :data:`CALL_TRANSITIONS`, are kept)."""
    feed = assembler.feed
    for event in events:
        feed(event)
    result = assembler.finish()
    counts = _call_decisions(result.decision_counts) if result.decision_counts else ()
    # Built directly rather than by dataclasses.replace, which reads every field's metadata on each
    # call; tests/protocols/test_bodies.py pins the fields, so a new one cannot be dropped unseen.
    return AssemblyResult(
        state=result.state,
        finish_reasons=result.finish_reasons,
        calls=tuple([_whole(call) for call in result.calls]),
        rejections=result.rejections,
        fragments=0,
        dispatchable=result.dispatchable,
        # the decisions about calls as a whole, each one past the body's no fragments (``replay`` lists them)
        _diagnostics=tuple([entry for entry in result._diagnostics if entry[3].transition in CALL_TRANSITIONS])
        if counts
        else (),
        _overflow=(),
        _decision_counts=counts,
        _identity_errors=result._identity_errors,
        refused_ids=result.refused_ids,
    )


def _whole(call: ToolCall) -> ToolCall:
    """``call`` as a body has it: no fragments, only the transitions about the call as a whole."""
    if not call.transitions:
        return call._replace(fragments=0)
    kept = tuple([pair for pair in call.transitions if pair[0] in CALL_TRANSITIONS])
    return call._replace(fragments=0, transitions=kept)


def _call_decisions(counts: tuple[tuple[IdDecision, int], ...]) -> tuple[tuple[IdDecision, int], ...]:
    return tuple([pair for pair in counts if pair[0].transition in CALL_TRANSITIONS])
