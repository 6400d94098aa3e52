"""The Gemini protocol as the layers above see it: :data:`GEMINI`.

Its adapter is :class:`~etf_otel.protocols._gemini.GeminiAssembler`; this module holds what is
read outside a stream: which chunks are Gemini's, how the next request's ``contents`` carry
``functionResponse`` parts, how a ``functionCall`` reads as a call, and how a slot is named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from etf_otel.core._history import (
    Drift,
    DriftKind,
    HistoryCall,
    HistoryResult,
    Shape,
    Turn,
    answered_turn,
    shapes,
)
from etf_otel.core._identity import ABSENT
from etf_otel.core._linkage import Finding
from etf_otel.core._pairing_model import Answers, PairingRules
from etf_otel.core._results import AssemblyResult
from etf_otel.protocols._base import CallFields, FollowUp, WireProtocol, field, last_position
from etf_otel.protocols._gemini import GeminiAssembler, finish_reason, unset
from etf_otel.protocols._gemini_arguments import read
from etf_otel.protocols._gemini_linkage import link_results

__all__ = ["FINISH_REASONS", "GEMINI", "body_events", "results"]

FINISH_REASONS: Final = frozenset(
    {
        "STOP",
        "MAX_TOKENS",
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "OTHER",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "MALFORMED_FUNCTION_CALL",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_OTHER",
        "NO_IMAGE",
        "IMAGE_RECITATION",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "MISSING_THOUGHT_SIGNATURE",
    }
)
"""The ``finishReason`` values Gemini documents (``FINISH_REASON_UNSPECIFIED`` is no reason)."""

_MODEL: Final = "model"


def _recognizes(event: object) -> bool:
    """A chunk with ``candidates`` or ``promptFeedback`` and neither ``choices`` nor ``type``."""
    if not isinstance(event, dict) or "choices" in event or "type" in event:
        return False
    return "candidates" in event or "promptFeedback" in event or "prompt_feedback" in event


def results(contents: Sequence[object], result: AssemblyResult | None = None) -> list[tuple[object, bool]]:
    """The ``functionResponse`` parts of the next request that ``result`` is judged by (:func:`scoped`)."""
    return scoped(contents, result)[0]


def drift(result: AssemblyResult, followup: object) -> list[Drift]:
    """What the next request answers without it being ``result``'s to judge (:func:`scoped`), as drift."""
    contents = _contents(followup)
    return [] if contents is None else scoped(contents, result)[1]


def scoped(
    contents: Sequence[object], result: AssemblyResult | None = None, kept: Sequence[Shape] | None = None
) -> tuple[list[tuple[object, bool]], list[Drift]]:
    """The ``functionResponse`` parts of the next request that ``result`` is judged by, in order, each with
    whether it is in scope.

    In scope is the first content after the model content that carries ``result``'s calls (found by
    ids, else by names and arguments: :func:`~etf_otel.core._history.answered_turn`), else after the
    last ``role: model`` content (the first content when there is no model turn). Contents before it
    belong to earlier responses and are not read; a result in a later content is out of scope (it
    answers nothing), except one that answers a call of a later model content (a framework's own
    round, answered in the same request) or a refused call of ``result`` answered with an error: those
    are not ``result``'s to judge: they are drift (``call_fabricated``, ``refusal_answered``). ``kept``:
    ``result``'s calls as a conversation keeps them (:func:`~etf_otel.core._history.shapes`), for a
    ``result`` kept without its arguments.
    """
    model = _answered(contents, result, kept) if result is not None else None
    if model is None:
        model = last_position(contents, _MODEL)
    scope = 0 if model is None else model + 1
    rejected = {call.name for call in result.calls if not (result.dispatchable and call.proposed)} if result else set()
    later_calls: set[object] = set()
    found: list[tuple[object, bool]] = []
    drifted: list[Drift] = []
    for position in range(scope, len(contents)):
        content = contents[position]
        parts = field(content, "parts")
        if field(content, "role") == _MODEL:
            later_calls.update(_calls_of(content))
            continue
        for part in parts if isinstance(parts, list) else ():
            response = read(part, "functionResponse", "function_response")
            if response is ABSENT or response is None:
                continue
            name = field(response, "name")
            if name in later_calls:
                drifted.append(Drift(DriftKind.CALL_FABRICATED, None, _string(name)))
            elif name in rejected and _is_error(response):
                drifted.append(Drift(DriftKind.REFUSAL_ANSWERED, None, _string(name)))
            else:
                found.append((response, position == scope))
    return found, drifted


def _calls_of(content: object) -> list[object]:
    parts = field(content, "parts")
    calls = (
        [read(part, "functionCall", "function_call") for part in parts if part is not None]
        if isinstance(parts, list)
        else []
    )
    return [field(call, "name") for call in calls if call is not ABSENT and call is not None]


def _is_error(response: object) -> bool:
    """A ``functionResponse`` whose ``response`` is an error (``{"error": ...}``)."""
    body = field(response, "response")
    return isinstance(body, dict) and "error" in body


def _history(request: object) -> list[Turn] | None:
    """The ``contents`` of a request as turns: a ``role: model`` content with its ``functionCall`` parts, any
    other content with its ``functionResponse`` parts (a ``response`` holding ``error`` marks an error)."""
    contents = _contents(request)
    return None if contents is None else _turns(contents)


def _turns(contents: Sequence[object]) -> list[Turn]:
    turns: list[Turn] = []
    for at, content in enumerate(contents):
        parts = field(content, "parts")
        parts = parts if isinstance(parts, list) else []
        if field(content, "role") == _MODEL:
            calls = [read(part, "functionCall", "function_call") for part in parts if part is not None]
            found = tuple(
                HistoryCall(_string(unset(field(call, "id"))), _string(field(call, "name")), _args(call))
                for call in calls
                if call is not ABSENT and call is not None
            )
            if turns and turns[-1].assistant:  # a streamed model turn: one content per chunk
                turns[-1] = turns[-1]._replace(calls=turns[-1].calls + found)
            else:
                turns.append(Turn(True, found, at=at))
        else:
            responses = [read(part, "functionResponse", "function_response") for part in parts if part is not None]
            turns.append(
                Turn(
                    False,
                    results=tuple(
                        HistoryResult(
                            _string(unset(field(response, "id"))),
                            _string(field(response, "name")),
                            _is_error(response),
                        )
                        for response in responses
                        if response is not ABSENT and response is not None
                    ),
                    at=at,
                )
            )
    return turns


def _args(call: object) -> object:
    value = field(call, "args")
    return None if value is ABSENT else value


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _answered(contents: Sequence[object], result: AssemblyResult, kept: Sequence[Shape] | None) -> int | None:
    """The position of the last model content of the turn that carries ``result``'s calls."""
    turns = _turns(contents)
    answered = answered_turn(turns, shapes(result) if kept is None else kept) if result.calls else None
    if answered is None:
        return None
    return turns[answered + 1].at - 1 if answered + 1 < len(turns) else len(contents) - 1


def _result_ids(followup: object) -> list[object] | None:
    """The ``id`` of each ``functionResponse`` in scope (:func:`results`); ``None`` for an id-less or out-of-scope one.

    ``followup`` is the next request's ``contents`` list, or the request object holding it.
    """
    contents = _contents(followup)
    return None if contents is None else list(_ids(contents))


def _contents(followup: object) -> list[object] | None:
    contents = followup.get("contents") if isinstance(followup, dict) else followup
    if not isinstance(contents, list) or not all(isinstance(content, dict) for content in contents):
        return None
    return contents


def _link(result: AssemblyResult, followup: object) -> list[Finding] | None:
    """The findings of the next request's results against ``result``: by id, or by name and order."""
    contents = _contents(followup)
    return None if contents is None else link_results(result, results(contents, result))


def _ids(contents: Sequence[object]) -> list[str | None]:
    ids: list[str | None] = []
    for response, in_scope in results(contents):
        call_id = unset(field(response, "id")) if in_scope else ABSENT
        ids.append(call_id if isinstance(call_id, str) else None)
    return ids


def _follow_up(contents: Sequence[object]) -> FollowUp | None:
    """``(position of the last model content, the ids its results answer)``; ``None`` without a model turn."""
    model = last_position(contents, _MODEL)
    return None if model is None else (model, _ids(contents))


def _later_responses(events: Sequence[object]) -> list[int]:
    """A chunk with another ``responseId`` after every candidate of the response got a ``finishReason``.

    Before that, another id is a splice inside one stream, which the adapter judges. Two
    responses with one ``responseId`` cannot be told apart: Gemini has no start event.
    """
    starts: list[int] = []
    response_id: str | None = None
    ended: dict[object, bool] = {}
    for position, event in enumerate(events):
        if not isinstance(event, dict):
            continue
        other = read(event, "responseId", "response_id")
        if type(other) is str and other and other != response_id:
            if response_id is not None and ended and all(ended.values()):
                starts.append(position)
                ended = {}
            response_id = other
        candidates = event.get("candidates")
        for candidate in candidates if isinstance(candidates, list) else ():
            index = field(candidate, "index")
            key = 0 if index is None or index is ABSENT else index
            if isinstance(key, (int, str)):
                ended[key] = ended.get(key, False) or finish_reason(candidate) is not None
    return starts


def body_events(body: object) -> list[object] | None:
    """A complete ``generateContent`` body as the one chunk it is (every call whole in it).

    ``None`` when it holds neither ``candidates`` nor ``promptFeedback`` (no response to judge).
    """
    if isinstance(body, (str, bytes, int, float, list, tuple)) or body is None:
        return None
    for camel, snake in (("candidates", "candidates"), ("promptFeedback", "prompt_feedback")):
        value = read(body, camel, snake)
        if value is not ABSENT and value is not None:
            return [body]
    return None


def _slot_label(choice: int, index: int | None) -> str:
    return f"candidate {choice}: no open call" if index is None else f"candidate {choice} call {index}"


def _call_fields(call: object) -> CallFields | None:
    """A ``functionCall``: a ``name`` and ``args`` (the parsed value), and no ``arguments`` or ``input``."""
    if field(call, "arguments") is not ABSENT or field(call, "input") is not ABSENT:
        return None
    name, arguments = field(call, "name"), field(call, "args")
    if name is ABSENT or arguments is ABSENT:
        return None
    return unset(field(call, "id")), name, arguments


GEMINI: Final = WireProtocol(
    name="gemini",
    assembler=GeminiAssembler,
    recognizes=_recognizes,
    result_ids=_result_ids,
    title="Gemini",
    finish_reasons=FINISH_REASONS,
    followup_shape="the contents list, or the request object holding it",
    history=_history,
    pairing=PairingRules(Answers.NEXT_TURN, by_name=True, container="contents"),
    follow_up=_follow_up,
    later_responses=_later_responses,
    slot_label=_slot_label,
    call_fields=_call_fields,
    request_path=":streamGenerateContent",
    link=_link,
    link_drift=drift,
    body_events=body_events,
)
"""Gemini ``streamGenerateContent``: slot key ``(candidate, call ordinal)``; identity the optional call id."""
