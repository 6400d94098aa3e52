"""What a follow-up request's history says about the response it answers (docs/protocols.md, "Linkage across
turns": what a follow-up's judgement covers, violation or drift).

A request that carries tool results repeats some of the conversation: Chat Completions, Anthropic and
Gemini requests always repeat all of it, a stateless Responses request (no ``previous_response_id``)
repeats every earlier ``function_call`` and ``function_call_output`` item, and frameworks append turns
of their own after the answer (an assistant "OK" and a user message with the files a tool returned, a
synthetic tool-discovery round). Each protocol's description reads its request into :class:`Turn` s;
this module decides, the same way for every protocol and for every reader (the live integrations,
``replay --followup``):

* the **answered turn**: the assistant turn that carries the response's calls, found by their ids
  wherever it stands (the last one when several carry them: a provider that numbers its ids ``call_0``
  in every response), else by position, name and arguments (a framework that replaced the ids);
* its **answers**: the results of the turns after it, up to the next assistant turn. Turns before it
  belong to earlier responses and are never judged against this one; turns after the answers never
  make one of its calls unanswered;
* **violation or drift**: a result that answers what the model proposed under another id the history
  carries consistently (``id_replaced``), a call no response proposed answered in the same request
  (``call_fabricated``), a refused call answered with an error (``refusal_answered``) are drift,
  recorded and never a violation; everything else that answers no proposal is left to the linkage
  rules (:mod:`etf_otel.core._linkage`), which say why it is orphaned.

Pure: no content is kept beyond the call, a response's calls are compared through a SHA-256 of their
name and canonical arguments (:func:`call_digest`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:
    from etf_otel.core._results import AssemblyResult

__all__ = [
    "Drift",
    "DriftKind",
    "HistoryCall",
    "HistoryResult",
    "Judgement",
    "Shape",
    "Turn",
    "answered_turn",
    "call_digest",
    "judge_history",
    "shapes",
]


class DriftKind(str, Enum):
    """How a self-consistent history differs from what the model proposed (``etf.divergence.kind``)."""

    ID_REPLACED = "id_replaced"
    CALL_FABRICATED = "call_fabricated"
    REFUSAL_ANSWERED = "refusal_answered"
    ID_INVENTED = "id_invented"
    """A framework ran an id-less call under an id it made up (ADK's ``adk-<uuid>``): recorded on the execution."""


class HistoryCall(NamedTuple):
    """A call of an assistant turn as the request carries it. ``arguments``: a JSON string or an object.

    ``item_id``: the call's id is its own output item's id (a Responses ``function_call`` whose ``call_id``
    is its ``id``): the known mistake of sending back an item id, never a framework's replacement."""

    call_id: str | None
    name: str | None
    arguments: Any  # not ``object``: a NamedTuple compiled by mypyc fails at import on it (KeyError: 'object')
    item_id: bool = False


class HistoryResult(NamedTuple):
    """A result as the request carries it; ``error``: marked an error (``is_error``, ``status: error``)."""

    call_id: str | None
    name: str | None = None
    error: bool = False


class Turn(NamedTuple):
    """One turn of a request's history: an assistant turn with its calls (maybe none), or any other turn
    with the results it carries (maybe none)."""

    assistant: bool
    calls: tuple[HistoryCall, ...] = ()
    results: tuple[HistoryResult, ...] = ()
    at: int = 0
    """The position of its first message or item in the request (a prefix of the request ends there)."""


class Shape(NamedTuple):
    """A call of a response as a conversation keeps it: its preserved id, its name, a digest of its name and
    arguments (:func:`call_digest`), and whether it was proposed (dispatchable)."""

    call_id: str | None
    name: str | None
    digest: bytes | None
    proposed: bool


class Drift(NamedTuple):
    """One drift record: its kind, the preserved id of the call it is about when there is one (the proposal's
    for ``id_replaced``, the rejected call's for ``refusal_answered``), the call's name."""

    kind: DriftKind
    call_id: str | None = None
    name: str | None = None


class Judgement(NamedTuple):
    """What a request's history decides for one response.

    ``answered``: the position of the answered turn; ``result_ids``: the results the linkage rules judge
    (the answers, a replaced id mapped back to its proposal's, then the results of later turns that
    answer no call of the history), in order; ``drift``: what was recorded instead of judged."""

    answered: int
    result_ids: list[str | None]
    drift: list[Drift]


_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def _nothing(call_id: str) -> bool:
    return False


def call_digest(name: object, arguments: object) -> bytes | None:
    """A SHA-256 of a call's name and canonical arguments (a JSON string parsed, an object as it is; an
    empty or absent value is ``{}``); ``None`` when the arguments are not JSON."""
    if arguments is None or arguments == "":
        value: object = {}
    elif isinstance(arguments, str):
        try:
            value = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    else:
        value = arguments
    try:
        canonical = _CANONICAL.encode([name if isinstance(name, str) else None, value])
    except (ValueError, RecursionError):
        return None
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).digest()


def shapes(result: AssemblyResult) -> list[Shape]:
    """Every call of ``result`` as a conversation keeps it (:class:`Shape`): proposed or not, no content."""
    proposed = result.dispatchable
    return [
        Shape(call.id, call.name, call_digest(call.name, call.arguments), proposed and call.proposed)
        for call in result.calls
    ]


def _same_call(call: HistoryCall, shape: Shape) -> bool:
    """The same name, and the same arguments unless the response's were not JSON (then the name decides)."""
    return call.name == shape.name and (shape.digest is None or call_digest(call.name, call.arguments) == shape.digest)


def answered_turn(
    turns: Sequence[Turn], shapes: Sequence[Shape], known: Callable[[str], bool] = _nothing
) -> int | None:
    """The position of the turn that carries ``shapes`` (a response's calls), ``None`` when none does.

    By ids first: the last assistant turn carrying every call exactly (ids, names and arguments), else
    the last one carrying any of the ids; then, for a framework that replaced the ids, the last
    assistant turn whose calls are the response's, position by position, by name and arguments; then
    the last one carrying an id ``known`` takes for the response's (an id its rules refused, its ids
    run together)."""
    ids = {shape.call_id for shape in shapes if shape.call_id is not None}
    carrying: int | None = None
    for position in range(len(turns) - 1, -1, -1):
        turn = turns[position]
        if not turn.assistant or not turn.calls:
            continue
        if ids and any(call.call_id in ids for call in turn.calls):
            if _matches(turn.calls, shapes, by_id=True):
                return position
            if carrying is None:
                carrying = position
    if carrying is not None:
        return carrying
    for position in range(len(turns) - 1, -1, -1):
        turn = turns[position]
        if turn.assistant and turn.calls and _matches(turn.calls, shapes, by_id=False):
            return position
    for position in range(len(turns) - 1, -1, -1):
        turn = turns[position]
        if turn.assistant and any(call.call_id is not None and known(call.call_id) for call in turn.calls):
            return position
    return None


def _matches(calls: Sequence[HistoryCall], shapes: Sequence[Shape], by_id: bool) -> bool:
    if len(calls) != len(shapes):
        return False
    return all(
        (not by_id or call.call_id == shape.call_id) and _same_call(call, shape)
        for call, shape in zip(calls, shapes, strict=True)
    )


def judge_history(
    turns: Sequence[Turn],
    shapes: Sequence[Shape],
    known: Callable[[str], bool] = _nothing,
    rejected: Callable[[str], bool] = _nothing,
    refused: Callable[[str], bool] = _nothing,
    adjacent: bool = False,
) -> Judgement | None:
    """The scope and drift of a request's ``turns`` against a response's ``shapes``; ``None`` when no turn
    carries the response's calls (the caller judges by other evidence, or not at all).

    ``known(call_id)``: whether an id the history carries is the response's own in another form (an
    incoming id its rules refused, its ids run together): a call with such an id is never fabricated,
    and a turn with one is the answered turn when no other carries the response's calls.
    ``rejected(call_id)``: whether the rules rejected a call with that id
    or refused it as an incoming id (answered with an error, it is ``refusal_answered``; a call of
    ``shapes`` that was not proposed is rejected too). ``refused(call_id)``: whether a guard refused to
    run that call (its answer is ``refusal_answered`` even when the result is not marked an error).
    ``adjacent``: only the turn right after the answered one holds its answers (Anthropic); a result in a
    later turn before the next assistant turn answers nothing (its id goes to the rules as ``None``).
    """
    answered = answered_turn(turns, shapes, known)
    if answered is None:
        return None
    proposal_ids = {shape.call_id for shape in shapes if shape.proposed and shape.call_id is not None}
    all_ids = {shape.call_id for shape in shapes if shape.call_id is not None}
    drift: list[Drift] = []
    replaced, standing = _answered_calls(turns[answered], shapes, proposal_ids, known, drift)
    result_ids: list[str | None] = []
    position = answered + 1
    while position < len(turns) and not turns[position].assistant:
        for result in turns[position].results:
            if adjacent and position > answered + 1:
                result_ids.append(None)
            else:
                result_ids.extend(_answer(result, replaced, standing, all_ids, (known, rejected, refused), drift))
        position += 1
    skipped = proposal_ids | set(replaced)
    result_ids += _later_turns(turns[position:], all_ids, skipped, known, drift)
    return Judgement(answered, result_ids, drift)


def _answered_calls(
    turn: Turn, shapes: Sequence[Shape], proposal_ids: set[str], known: Callable[[str], bool], drift: list[Drift]
) -> tuple[dict[str, str], dict[str, tuple[Shape | None, str | None]]]:
    """The answered turn's calls that are no proposal: the ids replaced (history id -> proposal id, recorded
    as ``id_replaced``) and the others, each with the response's call it matches by position, name and
    arguments (``None``: none) and its name."""
    replaced: dict[str, str] = {}
    standing: dict[str, tuple[Shape | None, str | None]] = {}
    for position, call in enumerate(turn.calls):
        if call.call_id is None or call.call_id in proposal_ids:
            continue
        shape = shapes[position] if position < len(shapes) else None
        matched = shape if shape is not None and _same_call(call, shape) else None
        if (
            matched is not None
            and matched.proposed
            and matched.call_id is not None
            and matched.call_id in call.call_id  # made unique around the provider's id (a prefix, a suffix)
            and matched.call_id not in {other.call_id for other in turn.calls}
            and not call.item_id
            and not known(call.call_id)  # the response's ids run together, an id its rules refused
        ):
            replaced[call.call_id] = matched.call_id
            drift.append(Drift(DriftKind.ID_REPLACED, matched.call_id, call.name))
        else:
            standing[call.call_id] = (matched, call.name)
    return replaced, standing


def _later_turns(
    turns: Sequence[Turn], all_ids: set[str], skipped: set[str], known: Callable[[str], bool], drift: list[Drift]
) -> list[str | None]:
    """The turns after the answers: a call no response proposed and its result are ``call_fabricated``; a
    result that answers no call of the history goes to the rules; one for a proposal was judged already."""
    fabricated: dict[str, str | None] = {}
    result_ids: list[str | None] = []
    for later in turns:
        if later.assistant:
            for call in later.calls:
                if call.call_id is not None and call.call_id not in all_ids and not known(call.call_id):
                    fabricated[call.call_id] = call.name
            continue
        for result in later.results:
            if result.call_id is not None and result.call_id in fabricated:
                drift.append(Drift(DriftKind.CALL_FABRICATED, None, fabricated.pop(result.call_id)))
            elif result.call_id not in skipped:
                result_ids.append(result.call_id)  # answers no call of the history: the rules say why
    return result_ids


def _answer(
    result: HistoryResult,
    replaced: dict[str, str],
    standing: dict[str, tuple[Shape | None, str | None]],
    all_ids: set[str],
    tests: tuple[Callable[[str], bool], Callable[[str], bool], Callable[[str], bool]],
    drift: list[Drift],
) -> list[str | None]:
    """What one answer of the answered turn gives the linkage rules (``[]``: recorded as drift instead)."""
    call_id = result.call_id
    if call_id is None:
        return [None]
    if call_id in replaced:
        return [replaced[call_id]]
    if call_id not in standing:
        return [call_id]  # a proposal's, or one no call of the answered turn carries
    known, rejected_by_rules, refused = tests
    matched, name = standing.pop(call_id)
    rejected = call_id in all_ids or rejected_by_rules(call_id)
    if (rejected and result.error) or refused(call_id):
        # the preserved id of the response's own rejected call (what settles its refused execution), never
        # an id the rules refused
        drift.append(Drift(DriftKind.REFUSAL_ANSWERED, call_id if call_id in all_ids else None, name))
        return []
    if matched is None and not rejected and not known(call_id):
        drift.append(Drift(DriftKind.CALL_FABRICATED, None, name))
        return []
    return [call_id]
