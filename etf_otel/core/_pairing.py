"""The request before it is sent: a request's history checked as the target provider pairs calls and results
(docs/protocols.md, "The request before it is sent"; AGENT-STACKS 11.8).

Providers refuse a request whose history pairs calls and results wrongly, with a 400 that says what is wrong
and never why. Each protocol's description states how its provider pairs (:class:`PairingRules`); this module
checks a request's :class:`~etf_otel.core._history.Turn` s by them and returns bounded :class:`Problem` s:

* ``result_without_call``: a result that answers no call where the provider looks for one (Chat: the
  assistant message right before the run of ``role: tool`` messages; Anthropic and Gemini: the message right
  before; Responses: any ``function_call`` of the input, or a call ``previous_response_id`` carries);
* ``call_without_result``: a call not answered where the provider looks for its answer;
* ``duplicate_result``: a second result for one call;
* ``duplicate_call_id``: a second call with one id, only where the provider refuses it (Anthropic: anywhere in
  the request);
* ``id_rejected_by_target``: an id outside the target's documented limits (:mod:`etf_otel.core._targets`),
  only for a known target.

Each problem carries its position (the turn, the message or item it starts at, and which call or result of
it) and a reason, when the conversation's memory (:class:`~etf_otel.core._pairing_memory.PairingMemory`)
tells: ``history_trimmed`` (the conversation carried that call, or that result, before, and this request
does not), ``concatenated_ids`` (the id runs known ids together), ``id_rewritten`` (the id wraps a known one,
or a call and a result of one turn disagree where only one of them is known), else ``unknown``. A problem
names an id only when the caller says it is a preserved one (``preserved``); never an argument or a content.

Pure: no OpenTelemetry, no I/O; at most :data:`MAX_PROBLEMS` problems, the rest counted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from etf_otel.core._history import HistoryCall, HistoryResult, Turn
from etf_otel.core._pairing_memory import DEFAULT_MAX_IDS, PairingMemory
from etf_otel.core._pairing_model import (
    MAX_PROBLEMS,
    Answers,
    PairingCheck,
    PairingProblem,
    PairingReason,
    PairingRules,
    Problem,
    UniqueIds,
    describe,
)
from etf_otel.core._targets import TARGETS, IdLimit, id_limit, target_of

__all__ = [
    "DEFAULT_MAX_IDS",
    "MAX_PROBLEMS",
    "TARGETS",
    "Answers",
    "IdLimit",
    "PairingCheck",
    "PairingMemory",
    "PairingProblem",
    "PairingReason",
    "PairingRules",
    "Problem",
    "UniqueIds",
    "check",
    "describe",
    "id_limit",
    "target_of",
]


def _nothing(call_id: str) -> bool:
    return False


class _Found:
    """The problems found so far, and what their reasons are read from."""

    __slots__ = ("called", "memory", "preserved", "problems", "turns")

    def __init__(self, turns: Sequence[Turn], memory: PairingMemory | None, preserved: Callable[[str], bool]) -> None:
        self.turns = turns
        self.memory = memory
        self.preserved = preserved
        self.problems: list[Problem] = []
        self.called = {call.call_id for turn in turns for call in turn.calls if call.call_id is not None}

    def add(
        self,
        kind: PairingProblem,
        reason: PairingReason,
        turn: int | None,
        index: int | None,
        call: bool,
        call_id: str | None,
    ) -> None:
        at = None if turn is None else self.turns[turn].at
        kept = call_id if call_id is not None and self.preserved(call_id) else None
        self.problems.append(Problem(kind, reason, turn, at, index, call, kept))

    def of_id(self, call_id: str | None) -> PairingReason:
        """Why an id is refused or repeated: it runs known ids together, or wraps a known one."""
        memory = self.memory
        if call_id is None or memory is None:
            return PairingReason.UNKNOWN
        if memory.run_together(call_id):
            return PairingReason.CONCATENATED_IDS
        return PairingReason.ID_REWRITTEN if memory.wraps(call_id) else PairingReason.UNKNOWN

    def of_result(self, call_id: str | None, unanswered: Sequence[str | None]) -> PairingReason:
        """Why a result answers no call; ``unanswered``: the ids of the calls left unanswered where it stands."""
        memory = self.memory
        if call_id is None or memory is None:
            return PairingReason.UNKNOWN
        if memory.run_together(call_id):
            return PairingReason.CONCATENATED_IDS
        known = memory.carried(call_id)
        if memory.wraps(call_id) or any(other is not None and memory.carried(other) != known for other in unanswered):
            return PairingReason.ID_REWRITTEN
        if known and call_id not in self.called:
            return PairingReason.HISTORY_TRIMMED
        return PairingReason.UNKNOWN

    def of_call(self, call_id: str | None, orphans: Sequence[str | None]) -> PairingReason:
        """Why a call is unanswered; ``orphans``: the ids of the results that answered nothing where it stands."""
        memory = self.memory
        if call_id is None or memory is None:
            return PairingReason.UNKNOWN
        if memory.run_together(call_id) or any(other is not None and memory.run_together(other) for other in orphans):
            return PairingReason.CONCATENATED_IDS
        known = memory.carried(call_id)
        if memory.wraps(call_id) or any(other is not None and memory.carried(other) != known for other in orphans):
            return PairingReason.ID_REWRITTEN
        return PairingReason.HISTORY_TRIMMED if memory.answered(call_id) else PairingReason.UNKNOWN

    def done(self, limit: int) -> PairingCheck:
        ordered = sorted(self.problems, key=_order)
        return PairingCheck(tuple(ordered[:limit]), max(0, len(ordered) - limit))


def _order(problem: Problem) -> tuple[int, int, int]:
    if problem.turn is None:
        return (1, 0, problem.index or 0)
    return (0, problem.turn, problem.index or 0)


def check(
    turns: Sequence[Turn],
    rules: PairingRules,
    *,
    limit: IdLimit | None = None,
    memory: PairingMemory | None = None,
    held: bool = False,
    held_calls: Collection[str] | None = None,
    preserved: Callable[[str], bool] = _nothing,
    max_problems: int = MAX_PROBLEMS,
) -> PairingCheck:
    """The problems the provider refuses in a request's ``turns`` under ``rules``.

    ``limit``: the target's id limit (:func:`~etf_otel.core._targets.id_limit`; ``None``, an unknown target:
    no id check). ``memory``: the conversation's earlier turns, for the reasons (``None``: every reason is
    ``unknown``). ``held``: the provider holds earlier turns of this request (Responses ``previous_response_id``),
    with ``held_calls`` the ids of its calls when known (each needs a result here); ``held`` with
    ``held_calls`` ``None``: a result whose call is not in the request is not judged. ``preserved(call_id)``:
    whether a problem may name that id."""
    found = _Found(turns, memory, preserved)
    if limit is not None:
        _limits(turns, limit, found)
    if rules.unique_call_ids is not UniqueIds.ACCEPTED:
        _duplicate_calls(turns, rules.unique_call_ids is UniqueIds.REQUEST, found)
    if rules.answers is Answers.ANYWHERE:
        _anywhere(turns, found, held, held_calls)
    else:
        _adjacent(turns, rules, found)
    return found.done(max(0, max_problems))


def _limits(turns: Sequence[Turn], limit: IdLimit, found: _Found) -> None:
    for position, turn in enumerate(turns):
        for index, call in enumerate(turn.calls):
            if call.call_id is not None and not limit.accepts(call.call_id):
                reason = found.of_id(call.call_id)
                found.add(PairingProblem.ID_REJECTED_BY_TARGET, reason, position, index, True, call.call_id)
        for index, result in enumerate(turn.results):
            if result.call_id is not None and not limit.accepts(result.call_id):
                reason = found.of_id(result.call_id)
                found.add(PairingProblem.ID_REJECTED_BY_TARGET, reason, position, index, False, result.call_id)


def _duplicate_calls(turns: Sequence[Turn], whole_request: bool, found: _Found) -> None:
    seen: set[str] = set()
    for position, turn in enumerate(turns):
        if not whole_request:
            seen = set()
        for index, call in enumerate(turn.calls):
            if call.call_id is None:
                continue
            if call.call_id in seen:
                reason = found.of_id(call.call_id)
                found.add(PairingProblem.DUPLICATE_CALL_ID, reason, position, index, True, call.call_id)
            seen.add(call.call_id)


def _adjacent(turns: Sequence[Turn], rules: PairingRules, found: _Found) -> None:
    """Each assistant turn's calls against the results right after it (:attr:`Answers.RUN`, ``NEXT_TURN``);
    a result anywhere else answers nothing."""
    position, count = 0, len(turns)
    while position < count:
        turn = turns[position]
        if not turn.assistant:
            for index, result in enumerate(turn.results):
                reason = found.of_result(result.call_id, ())
                found.add(PairingProblem.RESULT_WITHOUT_CALL, reason, position, index, False, result.call_id)
            position += 1
            continue
        after = position + 1
        if rules.answers is Answers.NEXT_TURN:
            if after < count and not turns[after].assistant:
                after += 1
        else:
            while after < count and not turns[after].assistant and turns[after].results:
                after += 1
        _pair(position, range(position + 1, after), rules.by_name, found)
        position = after


def _pair(position: int, answering: range, by_name: bool, found: _Found) -> None:
    """The calls of the assistant turn at ``position`` against the results of the turns ``answering`` it."""
    turns = found.turns
    calls = turns[position].calls
    answered = [False] * len(calls)
    by_id = not by_name or any(call.call_id is not None for call in calls)
    orphans: list[tuple[int, int, str | None]] = []
    for place in answering:
        for index, result in enumerate(turns[place].results):
            matched = _match(calls, answered, result, by_id, by_name)
            if matched is None:
                orphans.append((place, index, result.call_id))
            elif not matched:
                reason = found.of_id(result.call_id)
                found.add(PairingProblem.DUPLICATE_RESULT, reason, place, index, False, result.call_id)
    unanswered = [index for index, done in enumerate(answered) if not done]
    unanswered_ids = [calls[index].call_id for index in unanswered]
    orphan_ids = [call_id for _, _, call_id in orphans]
    for place, index, call_id in orphans:
        reason = found.of_result(call_id, unanswered_ids)
        found.add(PairingProblem.RESULT_WITHOUT_CALL, reason, place, index, False, call_id)
    for index in unanswered:
        call_id = calls[index].call_id
        found.add(
            PairingProblem.CALL_WITHOUT_RESULT, found.of_call(call_id, orphan_ids), position, index, True, call_id
        )


def _match(
    calls: Sequence[HistoryCall], answered: list[bool], result: HistoryResult, by_id: bool, by_name: bool
) -> bool | None:
    """Which calls ``result`` answers, marked in ``answered``: ``True`` when it answered one, ``False`` when
    the calls it names were answered already (a duplicate), ``None`` when it names none."""
    if by_id and result.call_id is not None:
        named = [index for index, call in enumerate(calls) if call.call_id == result.call_id]
    elif by_name and result.name is not None:
        named = [index for index, call in enumerate(calls) if call.name == result.name]
        free = [index for index in named if not answered[index]]
        if free:
            answered[free[0]] = True
            return True
        return False if named else None
    else:
        return None
    if not named:
        return None
    if any(answered[index] for index in named):
        return False
    for index in named:  # two calls with one id (where the provider accepts it): one result answers both
        answered[index] = True
    return True


def _anywhere(turns: Sequence[Turn], found: _Found, held: bool, held_calls: Collection[str] | None) -> None:
    """Every result against every call of the request by id, and against the calls the provider holds.

    An id several calls carry (a provider that numbers every response's calls ``call_0``, its stateless
    history repeating each round) takes as many results as calls: each of them answers one; only a result
    beyond that is a second result for one call."""
    held_ids = dict.fromkeys(held_calls) if held and held_calls is not None else {}
    calls: dict[str, int] = dict.fromkeys(held_ids, 1)
    for turn in turns:
        for call in turn.calls:
            if call.call_id is not None:
                calls[call.call_id] = calls.get(call.call_id, 0) + 1
    answered: dict[str, int] = {}
    orphans: list[tuple[int, int, str | None]] = []
    for position, turn in enumerate(turns):
        for index, result in enumerate(turn.results):
            call_id = result.call_id
            if call_id is not None and call_id in calls:
                if answered.get(call_id, 0) >= calls[call_id]:
                    reason = found.of_id(call_id)
                    found.add(PairingProblem.DUPLICATE_RESULT, reason, position, index, False, call_id)
                answered[call_id] = answered.get(call_id, 0) + 1
            elif not (held and held_calls is None and call_id is not None):
                orphans.append((position, index, call_id))
    left = dict(answered)  # the answers not yet given to a call, taken by the calls in the order they stand
    unanswered: list[tuple[int | None, int | None, str | None]] = []
    for position, turn in enumerate(turns):
        for index, call in enumerate(turn.calls):
            if call.call_id is not None and left.get(call.call_id, 0) > 0:
                left[call.call_id] -= 1
            else:
                unanswered.append((position, index, call.call_id))
    unanswered += [
        (None, None, call_id) for call_id in held_ids if call_id not in answered and call_id not in found.called
    ]
    unanswered_ids = [call_id for _, _, call_id in unanswered]
    orphan_ids = [call_id for _, _, call_id in orphans]
    for position, index, call_id in orphans:
        reason = found.of_result(call_id, unanswered_ids)
        found.add(PairingProblem.RESULT_WITHOUT_CALL, reason, position, index, False, call_id)
    for where, place, call_id in unanswered:
        found.add(PairingProblem.CALL_WITHOUT_RESULT, found.of_call(call_id, orphan_ids), where, place, True, call_id)
