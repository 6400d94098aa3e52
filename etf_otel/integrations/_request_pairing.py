"""The live check of a request's pairing, before the SDK sends it (docs/protocols.md, "The request before it is
sent").

An integration that links a request with tool turns to its conversation
(:class:`~etf_otel.integrations._conversation.Linked`) hands it here with the decision it made
(:class:`~etf_otel.integrations._instrumentor_base.Prepared`): the history it read already is checked as the
target provider pairs calls and results (:func:`etf_otel.protocols.check_request`), with the conversation's
memory of earlier turns for the reasons, then remembered in it. What was found rides on the decision to its
response's span; with the request guard on, a broken request gets the refusal the SDK hook raises instead of
sending it. One pass over the history; the memory's digests are paid only for the turns a stateless history
added since the conversation's previous request.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Final

from etf_otel.core._history import Turn
from etf_otel.core._pairing import PairingCheck, target_of
from etf_otel.errors import RequestPairingError
from etf_otel.instrumentation._linkage import LOCK
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.integrations._conversation import Linked, LinkedConversation
from etf_otel.integrations._instrumentor_base import Prepared
from etf_otel.protocols import check_request

__all__ = ["TargetOf", "checked", "refused_by_provider"]

_BAD_REQUEST: Final = 400


def refused_by_provider(error: BaseException) -> bool:
    """Whether an SDK's error is the provider's 400, refusing the request: ``status_code`` (``openai``,
    ``anthropic``), ``code`` (google-genai's ``ClientError``), ``response.ResponseMetadata.HTTPStatusCode``
    (botocore's ``ClientError``, a ``ValidationException``)."""
    if getattr(error, "status_code", None) == _BAD_REQUEST or getattr(error, "code", None) == _BAD_REQUEST:
        return True
    response = getattr(error, "response", None)
    metadata = response.get("ResponseMetadata") if isinstance(response, dict) else None
    return isinstance(metadata, dict) and metadata.get("HTTPStatusCode") == _BAD_REQUEST


def refuse_unsent(prepared: Prepared | None, instrumentation: Instrumentation | None, sdk: str) -> None:
    """The request guard, for a hook that calls the SDK's transport itself: raise ``prepared``'s
    ``RequestPairingError`` before anything is sent, its span recorded first; nothing when it has none."""
    if prepared is None or instrumentation is None or prepared.refusal is None:
        return
    refusal = prepared.refusal
    with internal_errors_swallowed(f"recording a {sdk} request the guard refused"):
        prepared.refused(instrumentation, refusal, False)
    raise refusal


def record_provider_refusal(
    prepared: Prepared | None, instrumentation: Instrumentation | None, error: Exception, sdk: str
) -> None:
    """A request the provider refused (:func:`refused_by_provider`) gets the span its response would have had."""
    if prepared is not None and instrumentation is not None and refused_by_provider(error):
        with internal_errors_swallowed(f"recording a {sdk} request the provider refused"):
            prepared.refused(instrumentation, error, True)


class TargetOf:
    """The target of a client (:func:`~etf_otel.core._targets.target_of` its base URL), remembered for the last
    base URL object seen (a client's ``base_url`` is one object for its life)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[object, str | None] | None = None

    def __call__(self, base_url: object) -> str | None:
        last = self._last
        if last is not None and last[0] is base_url:
            return last[1]
        target = target_of(str(base_url))
        self._last = (base_url, target)
        return target


def _with_tool_turns(turns: Sequence[Turn]) -> bool:
    return any(turn.calls or turn.results for turn in turns)


def _nobody(call_id: str) -> bool:
    return False


def checked(
    prepared: Prepared,
    linked: Linked,
    request: object,
    instrumentation: Instrumentation,
    *,
    target: str | None,
    held_calls: Collection[str] | None = None,
) -> Prepared:
    """``prepared``, with what the check of ``request`` (whose history is ``linked.turns``) found; a request
    without a call or a result is not checked. Never raises: a check that fails leaves the request unchecked."""
    turns = linked.turns
    if not turns or not _with_tool_turns(turns):
        return prepared
    with internal_errors_swallowed("checking a request's pairing"):
        prepared.pairing = _check(prepared, linked.conversation, request, turns, target, held_calls)
        rules = prepared.protocol.pairing
        if instrumentation.guard_requests and prepared.pairing is not None and prepared.pairing.broken:
            container = rules.container if rules is not None else "messages"
            prepared.refusal = RequestPairingError(prepared.pairing, container)
    return prepared


def _check(
    prepared: Prepared,
    conversation: LinkedConversation | None,
    request: object,
    turns: Sequence[Turn],
    target: str | None,
    held_calls: Collection[str] | None,
) -> PairingCheck | None:
    """The check, under the conversations' lock; then the turns the conversation has not remembered yet."""
    with LOCK:
        memory = None if conversation is None else conversation.memory.current()
        preserved = _nobody if conversation is None else conversation.response_ids.__contains__
        check = check_request(
            prepared.protocol,
            request,
            target=target,
            memory=memory,
            held_calls=held_calls,
            preserved=preserved,
            turns=turns,
        )
        if conversation is not None and memory is not None:
            seen = conversation.remembered
            memory.requested(turns[seen:] if seen < len(turns) else turns)
            conversation.remembered = len(turns)
    return check
