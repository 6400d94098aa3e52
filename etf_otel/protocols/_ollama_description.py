"""The Ollama protocol as the layers above see it: :data:`OLLAMA`.

Its adapter is :class:`~etf_otel.protocols._ollama.OllamaAssembler`; this module holds what is
read outside a stream: which chunks are Ollama's, how the next request's ``messages`` answer the
calls, how a complete body is judged and how a slot is named.

**Results.** The next request answers a call with a ``role: tool`` message after the assistant
message that carries it. What names the call differs by server and client version: newer
clients send ``tool_name`` (the function's name), some send ``tool_call_id`` (the call's id),
older ones neither (the model reads the results in order). So a result is linked (docs/protocols.md,
"Ollama results"), against the proposals of the response:

* by its ``tool_call_id`` when it has one and a proposal has an id: another id, or one whose
  call has another name than its ``tool_name``, is ``orphaned_result``;
* else by its ``tool_name``: the earliest unanswered proposal of that name;
* else by order: the earliest unanswered proposal.

One answer too many is ``duplicate_result``, a proposal without an answer ``unanswered_call``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from etf_otel.core._history import HistoryCall, HistoryResult, Turn, answered_turn, shapes
from etf_otel.core._identity import ABSENT
from etf_otel.core._linkage import Finding
from etf_otel.core._pairing_model import Answers, PairingRules
from etf_otel.core._results import AssemblyResult, ToolCall
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.protocols._base import FollowUp, WireProtocol, field, last_position
from etf_otel.protocols._ollama import OllamaAssembler

__all__ = ["FINISH_REASONS", "OLLAMA", "body_events", "results", "settle_answers"]

FINISH_REASONS: Final = frozenset({"stop", "length", "load", "unload"})
"""The ``done_reason`` values the Ollama server sends."""

_ASSISTANT: Final = "assistant"
_TOOL: Final = "tool"
_OTHER_PROTOCOLS: Final = ("choices", "type", "candidates", "contentBlockDelta", "messageStart")


def _recognizes(event: object) -> bool:
    """A chunk with ``done`` and a ``message`` (or ``created_at``), and none of the other protocols' keys."""
    if not isinstance(event, dict) or "done" not in event or any(key in event for key in _OTHER_PROTOCOLS):
        return False
    return "message" in event or "created_at" in event


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _messages(followup: object) -> list[object] | None:
    messages = field(followup, "messages") if isinstance(followup, dict) else followup
    if not isinstance(messages, (list, tuple)) or not all(isinstance(message, dict) for message in messages):
        return None
    return list(messages)


def _history_call(call: object) -> HistoryCall:
    function = field(call, "function")
    arguments = field(function, "arguments") if function is not ABSENT and function is not None else ABSENT
    name = field(function, "name") if function is not ABSENT and function is not None else ABSENT
    return HistoryCall(_string(field(call, "id")), _string(name), None if arguments is ABSENT else arguments)


def _turns(messages: Sequence[object]) -> list[Turn]:
    """A result with neither ``tool_call_id`` nor ``tool_name`` (older clients) is read as the server reads
    it, by order: the k-th tool message after an assistant turn answers that turn's k-th call (its name)."""
    turns: list[Turn] = []
    calls: tuple[HistoryCall, ...] = ()
    answered = 0
    for at, message in enumerate(messages):
        role = field(message, "role")
        if role == _ASSISTANT:
            listed = field(message, "tool_calls")
            calls = tuple(_history_call(c) for c in listed if c is not None) if isinstance(listed, list) else ()
            answered = 0
            turns.append(Turn(True, calls, at=at))
        elif role == _TOOL:
            call_id, name = _string(field(message, "tool_call_id")), _string(field(message, "tool_name"))
            if call_id is None and name is None and answered < len(calls):
                name = calls[answered].name
            answered += 1
            turns.append(Turn(False, results=(HistoryResult(call_id, name),), at=at))
        else:
            turns.append(Turn(False, at=at))
    return turns


def _history(request: object) -> list[Turn] | None:
    """The ``messages`` of a request as turns: an assistant message with its ``tool_calls``, a ``role: tool``
    message with the ``tool_call_id`` and ``tool_name`` it carries, any other message without results."""
    messages = _messages(request)
    return None if messages is None else _turns(messages)


def results(messages: Sequence[object], result: AssemblyResult | None = None) -> list[object]:
    """The ``role: tool`` messages that answer the assistant turn carrying ``result``'s calls.

    That turn is found by ids, else by names and arguments
    (:func:`~etf_otel.core._history.answered_turn`), else it is the last assistant message; its
    answers are the tool messages after it, up to the next assistant message.
    """
    start = None
    if result is not None and result.calls:
        turns = _turns(messages)
        answered = answered_turn(turns, shapes(result))
        start = None if answered is None else turns[answered].at
    if start is None:
        start = last_position(messages, _ASSISTANT)
    found: list[object] = []
    for message in messages[0 if start is None else start + 1 :]:
        role = field(message, "role")
        if role == _ASSISTANT:
            break
        if role == _TOOL:
            found.append(message)
    return found


def _result_ids(followup: object) -> list[object] | None:
    """The ``tool_call_id`` of each answer (:func:`results`); ``None`` for one without."""
    messages = _messages(followup)
    return None if messages is None else [_string(field(message, "tool_call_id")) for message in results(messages)]


def _follow_up(messages: Sequence[object]) -> FollowUp | None:
    """``(position of the last assistant message, the tool_call_ids its answers carry)``; ``None`` without one."""
    assistant = last_position(messages, _ASSISTANT)
    if assistant is None:
        return None
    return assistant, [_string(field(message, "tool_call_id")) for message in results(messages)]


def _link(result: AssemblyResult, followup: object) -> list[Finding] | None:
    """The findings of the next request's answers against ``result``: by id, by name, or by order."""
    messages = _messages(followup)
    return None if messages is None else link_answers(result.proposals, results(messages, result))


def link_answers(proposals: Sequence[ToolCall], answers: Sequence[object]) -> list[Finding]:
    """Findings of the ``role: tool`` messages ``answers`` against ``proposals`` (the module's rules)."""
    return settle_answers(proposals, answers)[0]


def settle_answers(proposals: Sequence[ToolCall], answers: Sequence[object]) -> tuple[list[Finding], frozenset[int]]:
    """:func:`link_answers`, and the positions of the proposals the answers settled: an id-less call (identity
    by position) is named by no finding nor answered id, so its settlement is said by where it stands."""
    id_mode = any(proposal.id is not None for proposal in proposals)
    answered: set[int] = set()
    findings: list[Finding] = []
    for answer in answers:
        call_id, name = _string(field(answer, "tool_call_id")), _string(field(answer, "tool_name"))
        if id_mode and call_id is not None:
            candidates = [at for at, proposal in enumerate(proposals) if proposal.id == call_id]
            if candidates and name is not None and proposals[candidates[0]].name != name:
                candidates = []
        else:
            candidates = [at for at, proposal in enumerate(proposals) if name is None or proposal.name == name]
        free = [at for at in candidates if at not in answered]
        if free:
            answered.add(free[0])
        elif candidates:
            findings.append(Finding(ErrorCategory.DUPLICATE_RESULT, proposals[candidates[-1]].id, name=name))
        else:
            findings.append(Finding(ErrorCategory.ORPHANED_RESULT, name=name))
    findings.extend(
        Finding(ErrorCategory.UNANSWERED_CALL, proposal.id, name=proposal.name)
        for at, proposal in enumerate(proposals)
        if at not in answered
    )
    return findings, frozenset(answered)


def body_events(body: object) -> list[object] | None:
    """A complete ``/api/chat`` body (``"stream": false``) as the one chunk it is; ``None`` when it is not one."""
    if not isinstance(body, dict) or "message" not in body or field(body, "done") is not True:
        return None
    return [body]


def _later_responses(events: Sequence[object]) -> list[int]:
    """An Ollama chunk after a chunk with ``done: true``: each response ends with one."""
    starts: list[int] = []
    done = False
    for position, event in enumerate(events):
        if not _recognizes(event):
            continue
        if done:
            starts.append(position)
        done = field(event, "done") is True
    return starts


def _slot_label(choice: int, index: int | None) -> str:
    return "no call" if index is None else f"call {index}"


OLLAMA: Final = WireProtocol(
    name="ollama",
    assembler=OllamaAssembler,
    recognizes=_recognizes,
    result_ids=_result_ids,
    title="Ollama",
    finish_reasons=FINISH_REASONS,
    followup_shape="the messages list, or the request object holding it",
    history=_history,
    pairing=PairingRules(Answers.RUN, by_name=True),
    follow_up=_follow_up,
    later_responses=_later_responses,
    slot_label=_slot_label,
    request_path="/api/chat",
    link=_link,
    body_events=body_events,
)
"""Ollama ``/api/chat``: slot key the call's ordinal; identity the optional call id, else its position."""
