"""Gemini wire events: ``GenerateContentResponse`` chunks as ``streamGenerateContent`` sends them (plain dicts).

Keys are camelCase, as on the wire (the REST stream's JSON). Values are sent verbatim, without
validation, so a test can send what a misbehaving bridge sends (``"id": None``, ``args`` as a
string, a ``partialArgs`` entry with two values). :data:`MISSING` leaves a key out entirely.

A typical stream (a whole call, then a streamed Vertex call)::

    stream(
        chunk(call("get_time", {"tz": "CET"})),
        chunk(call("get_weather", will_continue=True)),
        chunk(call(partial_args=[leaf("$.city", string="Paris")])),
    )
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.testing._wire import MISSING, flatten, without_missing

__all__ = [
    "MISSING",
    "MODEL",
    "RESPONSE_ID",
    "blocked",
    "call",
    "chunk",
    "error",
    "leaf",
    "stream",
    "text",
]

RESPONSE_ID: Final = "resp-gemini-1"
MODEL: Final = "gemini-test"


def call(
    name: Any = MISSING,
    args: Any = MISSING,
    *,
    id: Any = MISSING,  # the wire field is called id
    partial_args: Any = MISSING,
    will_continue: Any = MISSING,
    **extra: Any,
) -> dict[str, Any]:
    """One ``functionCall`` part: ``call()`` alone is the empty continuation part ``{"functionCall": {}}``."""
    function_call = without_missing(
        id=id, name=name, args=args, partialArgs=partial_args, willContinue=will_continue, **extra
    )
    return {"functionCall": function_call}


def leaf(
    path: Any,
    *,
    string: Any = MISSING,
    number: Any = MISSING,
    boolean: Any = MISSING,
    null: Any = MISSING,
    will_continue: Any = MISSING,
) -> dict[str, Any]:
    """One ``partialArgs`` entry; ``null=None`` writes ``"nullValue": null``."""
    return without_missing(
        jsonPath=path,
        stringValue=string,
        numberValue=number,
        boolValue=boolean,
        nullValue=null,
        willContinue=will_continue,
    )


def text(value: str) -> dict[str, Any]:
    """A text part (not a call)."""
    return {"text": value}


def chunk(
    *parts: dict[str, Any],
    finish_reason: Any = MISSING,
    index: Any = MISSING,
    response_id: Any = RESPONSE_ID,
    role: str = "model",
    model: str = MODEL,
) -> dict[str, Any]:
    """One chunk with one candidate holding ``parts`` (``index`` :data:`MISSING`: candidate 0, as on Vertex)."""
    candidate = without_missing(index=index, finishReason=finish_reason)
    candidate = {"content": {"role": role, "parts": list(parts)}, **candidate}
    return without_missing(candidates=[candidate], modelVersion=model, responseId=response_id)


def blocked(reason: str = "SAFETY", response_id: Any = RESPONSE_ID) -> dict[str, Any]:
    """A chunk saying the prompt was blocked: ``promptFeedback.blockReason``, no candidates."""
    return without_missing(promptFeedback={"blockReason": reason}, responseId=response_id)


def error(code: int = 500, status: str = "INTERNAL", message: str = "internal error") -> dict[str, Any]:
    """The in-band error object a stream may end with."""
    return {"error": {"code": code, "message": message, "status": status}}


def stream(*chunks: Any, finish_reason: str = "STOP") -> list[dict[str, Any]]:
    """The chunks (lists spliced in), then a content-less chunk with ``finish_reason``: a proper end (EOF)."""
    return [*flatten(chunks), chunk(finish_reason=finish_reason)]
