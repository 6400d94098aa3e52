"""The Gemini protocol as the layers above see it: :data:`GEMINI`.

Its adapter is :class:`~etf_otel.protocols._gemini.GeminiAssembler`; this module holds what is
read outside a stream: which chunks are Gemini's, how the next request's ``contents`` carry
``functionResponse`` parts, how a ``functionCall`` reads as a call, and how a slot is named.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from etf_otel.core._identity import ABSENT
from etf_otel.core._linkage import Finding
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


def results(contents: Sequence[object]) -> list[tuple[object, bool]]:
    """The ``functionResponse`` parts of the next request, in order, each with whether it is in scope.

    In scope is the first content after the last ``role: model`` content (the first content
    when there is no model turn): a result in any later content answers nothing.
    """
    model = last_position(contents, _MODEL)
    scope = 0 if model is None else model + 1
    found: list[tuple[object, bool]] = []
    for position in range(scope, len(contents)):
        parts = field(contents[position], "parts")
        for part in parts if isinstance(parts, list) else ():
            response = read(part, "functionResponse", "function_response")
            if response is not ABSENT and response is not None:
                found.append((response, position == scope))
    return found


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
    return None if contents is None else link_results(result, results(contents))


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
    follow_up=_follow_up,
    later_responses=_later_responses,
    slot_label=_slot_label,
    call_fields=_call_fields,
    request_path=":streamGenerateContent",
    link=_link,
    body_events=body_events,
)
"""Gemini ``streamGenerateContent``: slot key ``(candidate, call ordinal)``; identity the optional call id."""
