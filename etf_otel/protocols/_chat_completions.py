"""The Chat Completions adapter, and the reference assembler for its streams.

It lowers Chat Completions chunks onto the protocol-neutral :class:`ResponseSlots`: it
reads ``choices[k].delta.tool_calls[]`` and ``finish_reason`` from each chunk and turns
them into slot events, the choice being the slot's scope. The protocol's own end rule
lives here, not in the slot model: a response ended properly when ``[DONE]`` arrived, or,
without it, when every choice that has tool calls got its own ``finish_reason``.

Chunks may be plain dicts (parsed JSON) or ``openai`` SDK objects; the SDK is never
imported. For SDK objects the difference between a missing key and ``null`` (which the
identity rules depend on) is read from pydantic's set of fields that were present in
the payload.

Odd field types are not errors here: the assembler never raises on JSON-shaped input,
it records a diagnostic and lets final validation reject the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

from etf_otel.core._history import HistoryCall, HistoryResult, Turn
from etf_otel.core._identity import ABSENT, CompatibilityRule, IdentityRules
from etf_otel.core._pairing_model import Answers, PairingRules
from etf_otel.core._results import AssemblyResult
from etf_otel.core._slots import DEFAULT_MAX_ARGUMENT_CHARS, ResponseSlots
from etf_otel.protocols._base import CallFields, FollowUp, WireProtocol, field, last_position
from etf_otel.protocols._bodies import chat_body_events

__all__ = ["CHAT_COMPLETIONS", "DONE", "ReferenceAssembler", "assemble"]

DONE: Final = "[DONE]"
"""The Chat Completions end sentinel, as the SSE ``data:`` payload carries it."""


_FUNCTION_NOT_AN_OBJECT: Final = object()
"""The arguments of a fragment whose ``function`` is not an object: not a string, so invalid.

Passing the value itself would let a string ``function`` (``"function": "{}"``) pass for
valid arguments."""


class ReferenceAssembler:
    """Assembles one streamed Chat Completions response by the rules of docs/identity-rules.md.

    Feed every chunk with :meth:`feed` (``"[DONE]"`` too, or call :meth:`feed_done`),
    then call :meth:`finish`. One instance per response: slots never outlive it.
    """

    __slots__ = ("_done", "_slots")

    def __init__(
        self,
        allow: Iterable[CompatibilityRule | str] = (),
        *,
        rules: IdentityRules | None = None,
        clock: Callable[[], int] | None = None,
        max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    ) -> None:
        if rules is None:
            rules = IdentityRules.for_rules(allow)
        self._slots = ResponseSlots(rules, clock=clock, max_argument_chars=max_argument_chars)
        self._done = False

    @property
    def slots(self) -> ResponseSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    # long: the per-fragment loop is inlined, so a streamed fragment costs no Python frame of its own
    def feed(self, chunk: object) -> None:
        """Apply one chunk. ``"[DONE]"`` marks the end sentinel; anything odd is tolerated.

        Plain dicts (parsed JSON) take an inlined path: this runs once per streamed chunk.
        """
        kind = type(chunk)
        if kind is dict:
            choices = chunk.get("choices")  # type: ignore[attr-defined]
        elif kind is str or kind is bytes:
            if chunk == DONE or chunk == b"[DONE]":
                self._done = True
            return
        else:
            try:  # SDK objects: a plain attribute read is the fast path
                choices = chunk.choices  # type: ignore[attr-defined]
            except AttributeError:
                if isinstance(chunk, (str, bytes)) and chunk in (DONE, b"[DONE]"):
                    self._done = True
                return
        if type(choices) is not list:
            return
        slots = self._slots
        position = -1
        for choice in choices:
            position += 1
            if type(choice) is dict:
                choice_index = choice.get("index", position)
                delta = choice.get("delta")
                finish_reason = choice.get("finish_reason")
            else:
                try:  # SDK objects: plain attribute reads are the fast path
                    choice_index = choice.index
                    delta = choice.delta
                    finish_reason = choice.finish_reason
                except AttributeError:
                    choice_index = getattr(choice, "index", position)
                    delta = getattr(choice, "delta", None)
                    finish_reason = getattr(choice, "finish_reason", None)
            if type(choice_index) is not int or choice_index < 0:
                choice_index = position
            if type(delta) is dict:
                tool_calls = delta.get("tool_calls")
            elif delta is None:
                tool_calls = None
            else:
                try:
                    tool_calls = delta.tool_calls
                except AttributeError:
                    tool_calls = None
            if type(tool_calls) is list:
                # The usual shapes are read inline (this loop runs once per streamed fragment);
                # anything else goes through _fragment.
                for fragment in tool_calls:
                    if type(fragment) is dict:
                        function = fragment.get("function", ABSENT)
                        if type(function) is not dict:
                            self._fragment(choice_index, fragment)
                            continue
                        index = fragment.get("index", ABSENT)
                        id_ = fragment.get("id", ABSENT)
                        name = function.get("name", ABSENT)
                        arguments = function.get("arguments", ABSENT)
                    else:
                        # SDK objects: only ``id`` needs the absent/null distinction (from the
                        # fields set); a missing ``function`` (None) raises and takes _fragment.
                        try:
                            id_ = fragment.id if "id" in fragment.__pydantic_fields_set__ else ABSENT
                            index = fragment.index
                            function = fragment.function
                            name = function.name
                            arguments = function.arguments
                        except AttributeError:
                            self._fragment(choice_index, fragment)
                            continue
                    if type(index) is int and index >= 0:
                        slots.fragment(choice_index, index, id_, name, arguments)
                    else:
                        slots.unindexed(choice_index, id_, name, arguments)
            if type(finish_reason) is str and finish_reason:
                slots.finish_reason(choice_index, finish_reason)

    def _fragment(self, choice: int, fragment: object) -> None:
        """Any fragment shape the inline path of :meth:`feed` does not read.

        A fragment that is not an object has no usable index; a ``function`` that is not
        an object has no usable name, and its value stands for the arguments (invalid).
        """
        if fragment is None or isinstance(fragment, (str, int, float, list)):
            self._slots.unindexed(choice, inferable=False)
            return
        id_ = field(fragment, "id")
        index = field(fragment, "index")
        function = field(fragment, "function")
        name: object = ABSENT
        arguments: object = ABSENT
        if isinstance(function, (str, int, float, list)):
            arguments = _FUNCTION_NOT_AN_OBJECT
        elif function is not ABSENT and function is not None:
            name = field(function, "name")
            arguments = field(function, "arguments")
        if type(index) is int and index >= 0:
            self._slots.fragment(choice, index, id_, name, arguments)
        else:
            self._slots.unindexed(choice, id_, name, arguments)

    def feed_done(self) -> None:
        self._done = True

    def finish(self) -> AssemblyResult:
        """Finalize the response (idempotent). Call it when the stream ends, however it ends."""
        slots = self._slots
        if not slots.finished and self._ended_properly():
            slots.end()
        return slots.finish()

    def _ended_properly(self) -> bool:
        """``[DONE]`` ends every choice; without it, every choice with tool calls needs a finish reason.

        At least one finish reason must have arrived: a stream with no tool calls and no
        reason never ended.
        """
        if self._done:
            return True
        reasons = self._slots.finish_reasons
        return bool(reasons) and all(choice in reasons for choice in self._slots.choices_with_slots())


def assemble(chunks: Iterable[object], allow: Iterable[CompatibilityRule | str] = ()) -> AssemblyResult:
    """Assemble a complete recorded response in one call."""
    assembler = ReferenceAssembler(allow)
    for chunk in chunks:
        assembler.feed(chunk)
    return assembler.finish()


def _recognizes(event: object) -> bool:
    """A chunk object (it has ``choices``), or the ``[DONE]`` sentinel."""
    return (isinstance(event, dict) and "choices" in event) or event == DONE


def _result_ids(followup: object) -> list[object] | None:
    """``tool_call_id`` of the ``role: "tool"`` messages after the last assistant message.

    ``followup`` is the next request's ``messages`` list, or the request object holding it.
    """
    messages = followup.get("messages") if isinstance(followup, dict) else followup
    if not isinstance(messages, list) or not all(isinstance(message, dict) for message in messages):
        return None
    last_assistant = max((at for at, message in enumerate(messages) if message.get("role") == "assistant"), default=-1)
    return [message.get("tool_call_id") for message in messages[last_assistant + 1 :] if message.get("role") == "tool"]


def _string(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _history(request: object) -> list[Turn] | None:
    """The ``messages`` of a request as turns: an assistant message with its ``tool_calls``, a ``role: tool``
    message with the ``tool_call_id`` it answers, any other message as a turn without results."""
    messages = field(request, "messages") if isinstance(request, dict) else request
    if not isinstance(messages, (list, tuple)):
        return None
    turns: list[Turn] = []
    for at, message in enumerate(messages):
        role = field(message, "role")
        if role == "assistant":
            calls = field(message, "tool_calls")
            turns.append(
                Turn(
                    True,
                    tuple(_history_call(call) for call in calls if call is not None)
                    if isinstance(calls, (list, tuple))
                    else (),
                    at=at,
                )
            )
        elif role == "tool":
            turns.append(Turn(False, results=(HistoryResult(_string(field(message, "tool_call_id"))),), at=at))
        else:
            turns.append(Turn(False, at=at))
    return turns


def _history_call(call: object) -> HistoryCall:
    function = field(call, "function")
    arguments = field(function, "arguments")
    return HistoryCall(
        _string(field(call, "id")), _string(field(function, "name")), None if arguments is ABSENT else arguments
    )


def _follow_up(messages: Sequence[object]) -> FollowUp | None:
    """``(position of the last assistant message, tool_call_ids of the tool messages after it)``.

    ``None`` when the request has no assistant message: it starts a conversation. An
    assistant message followed by no tool message at all answers none of its calls.
    """
    last_assistant = last_position(messages, "assistant")
    if last_assistant is None:
        return None
    ids = [
        field(message, "tool_call_id") for message in messages[last_assistant + 1 :] if field(message, "role") == "tool"
    ]
    return last_assistant, [call_id if isinstance(call_id, str) else None for call_id in ids]


def _complete_body(event: object) -> str | None:
    """``object: "chat.completion"``, or ``choices`` that all hold a ``message`` and no ``delta``."""
    if not isinstance(event, dict):
        return None
    choices = event.get("choices")
    if event.get("object") == "chat.completion" or (
        event.get("type") is None
        and isinstance(choices, list)
        and choices
        and all(isinstance(choice, dict) and "message" in choice and "delta" not in choice for choice in choices)
    ):
        return "a complete chat.completion body"
    return None


def _later_responses(events: Sequence[object]) -> list[int]:
    """A chunk after a ``[DONE]`` that followed chunks; without ``[DONE]``, a chunk with another
    (non-empty) ``id`` than the response's, once every choice seen has a finish reason, that
    carries one of those finished choices again."""
    starts: list[int] = []
    done, started, response_id = False, False, ""  # started: a chunk of the current response came
    seen: set[object] = set()
    finished: set[object] = set()
    for position, event in enumerate(events):
        if event == DONE:
            done = started  # a [DONE] before any chunk ends no response
            continue
        if not isinstance(event, dict) or "choices" not in event:
            continue
        started = True
        raw_id = event.get("id")
        chunk_id = raw_id if isinstance(raw_id, str) else ""
        raw = event["choices"]
        choices = [choice for choice in raw if isinstance(choice, dict)] if isinstance(raw, list) else []
        indexes = [_choice_index(choice, at) for at, choice in enumerate(choices)]
        another = bool(response_id and chunk_id and chunk_id != response_id)
        if done or (another and seen and seen <= finished and finished.intersection(indexes)):
            starts.append(position)
            done, response_id, seen, finished = False, "", set(), set()
        response_id = response_id or chunk_id
        seen.update(indexes)
        finished.update(index for index, choice in zip(indexes, choices, strict=True) if choice.get("finish_reason"))
    return starts


def _choice_index(choice: dict[str, object], position: int) -> object:
    index = choice.get("index")
    return index if type(index) is int else position


def _slot_label(choice: int, index: int | None) -> str:
    return f"no slot (choice {choice})" if index is None else f"choice {choice} \u00b7 tool_calls[{index}]"


def _call_fields(call: object) -> CallFields | None:
    """An OpenAI tool call (dict or SDK object): name and arguments text in its ``function``."""
    function = field(call, "function")
    if function is ABSENT or function is None:
        return None
    return field(call, "id"), field(function, "name"), field(function, "arguments")


CHAT_COMPLETIONS: Final = WireProtocol(
    name="chat_completions",
    assembler=ReferenceAssembler,
    recognizes=_recognizes,
    result_ids=_result_ids,
    title="Chat Completions",
    finish_reasons=frozenset({"stop", "length", "tool_calls", "content_filter", "function_call", "error"}),
    followup_shape="the messages list, or the request object holding it",
    history=_history,
    pairing=PairingRules(Answers.RUN),
    follow_up=_follow_up,
    complete_body=_complete_body,
    body_events=chat_body_events,
    later_responses=_later_responses,
    slot_label=_slot_label,
    call_fields=_call_fields,
    request_path="/v1/chat/completions",
)
"""The Chat Completions protocol: slot key ``(choice, tool_calls[i].index)``, identity ``tool_calls[i].id``."""
