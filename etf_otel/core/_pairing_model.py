"""The vocabulary of the pairing check (:mod:`etf_otel.core._pairing`): what a provider refuses, why, where,
and how each protocol's provider pairs calls and results (:class:`PairingRules`, a protocol description's
``pairing``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = [
    "MAX_PROBLEMS",
    "Answers",
    "PairingCheck",
    "PairingProblem",
    "PairingReason",
    "PairingRules",
    "Problem",
    "UniqueIds",
    "describe",
]

MAX_PROBLEMS: Final = 64
"""Problems kept per request; the others are counted in :attr:`PairingCheck.omitted`."""


class PairingProblem(str, Enum):
    """What the provider refuses (``etf.request.pairing_problems``)."""

    RESULT_WITHOUT_CALL = "result_without_call"
    CALL_WITHOUT_RESULT = "call_without_result"
    DUPLICATE_RESULT = "duplicate_result"
    DUPLICATE_CALL_ID = "duplicate_call_id"
    ID_REJECTED_BY_TARGET = "id_rejected_by_target"


class PairingReason(str, Enum):
    """Why, as far as the conversation's memory tells (``etf.request.pairing_reasons``)."""

    HISTORY_TRIMMED = "history_trimmed"
    ID_REWRITTEN = "id_rewritten"
    CONCATENATED_IDS = "concatenated_ids"
    UNKNOWN = "unknown"


class Answers(str, Enum):
    """Where a provider looks for the results of an assistant turn's calls."""

    RUN = "run"
    """The run of result turns right after it (Chat Completions: the ``role: tool`` messages)."""
    NEXT_TURN = "next_turn"
    """The one turn right after it (Anthropic: the next user message; Gemini: the next content)."""
    ANYWHERE = "anywhere"
    """Anywhere in the request, by id (Responses: the input names no order)."""


class UniqueIds(str, Enum):
    """Where the provider refuses two calls with one id."""

    ACCEPTED = "accepted"
    TURN = "turn"
    REQUEST = "request"


@dataclass(frozen=True, slots=True)
class PairingRules:
    """How one protocol's provider pairs calls and results (:attr:`WireProtocol.pairing`)."""

    answers: Answers
    by_name: bool = False
    """Results without ids answer by name and order (Gemini: the calls of a turn without ids, by name)."""
    unique_call_ids: UniqueIds = UniqueIds.ACCEPTED
    container: str = "messages"
    """What the request calls its turns (``messages``, ``input``, ``contents``): how a position is named."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing the provider refuses. ``turn``: the position in the request's turns, ``at`` that turn's
    :attr:`~etf_otel.core._history.Turn.at` (its message or item), ``index``: which call (``call``) or result
    of that turn; all three ``None`` for a call the provider holds (``previous_response_id``).
    ``call_id``: only a preserved id the caller vouched for."""

    kind: PairingProblem
    reason: PairingReason
    turn: int | None
    at: int | None
    index: int | None
    call: bool
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class PairingCheck:
    """The problems of one request, in the order of the history, and how many more were left out."""

    problems: tuple[Problem, ...] = ()
    omitted: int = 0

    @property
    def broken(self) -> bool:
        """Whether the provider will refuse the request (``etf.request.pairing = "broken"``)."""
        return bool(self.problems)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The problems' kinds, each once, sorted (``etf.request.pairing_problems``)."""
        return tuple(sorted({problem.kind.value for problem in self.problems}))

    @property
    def reasons(self) -> tuple[str, ...]:
        """The problems' reasons, each once, sorted (``etf.request.pairing_reasons``)."""
        return tuple(sorted({problem.reason.value for problem in self.problems}))


def describe(problem: Problem, container: str = "messages") -> str:
    """One line naming the problem, its position and its reason (``RequestPairingError``, ``replay``)."""
    if problem.turn is None:
        where = "a call the provider holds (previous_response_id)"
    else:
        side = "call" if problem.call else "result"
        where = f"{container}[{problem.at}] ({side} {problem.index})"
    named = f" {problem.call_id}" if problem.call_id is not None else ""
    return f"{problem.kind.value}{named} at {where}: {problem.reason.value}"
