"""Ollama requests linked to the response they answer, and judged by id, by name or by order.

An Ollama request carries the whole history in ``messages``. The ``ollama`` client sends the
assistant message without the calls' ids (its models drop them) and each result as a ``role: tool``
message with ``tool_name`` only, so a follow-up rarely carries an id to find its response by: it is
found as for the chat protocols (:mod:`etf_otel.integrations._conversation`), by the call ids of the
assistant turn when there are any, else by the fingerprint of the messages before it, when exactly
one recent request had them.

Results are then judged by the protocol's own linkage (:attr:`WireProtocol.link`: by id, by name,
by order), which needs the response's calls, not only their ids: an :class:`OllamaConversation`
keeps the latest result of its conversation (without arguments:
:func:`~etf_otel.integrations.google_genai._linkage.without_content`) and settles with the request's
messages instead of ids. Messages are read, never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from etf_otel.core._linkage import Finding
from etf_otel.core._results import AssemblyResult
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.integrations._conversation import ConversationIndex, Linked, LinkedConversation, digests, fingerprint
from etf_otel.integrations._fingerprints import plain
from etf_otel.protocols import OLLAMA
from etf_otel.protocols._ollama_description import results, settle_answers

__all__ = ["OllamaConversation", "OllamaConversations"]


class OllamaConversation(LinkedConversation):
    """A conversation settled by the next request's ``role: tool`` messages (by id, name or order)."""

    __slots__ = ("answered_spans", "followup", "latest", "latest_spans")

    def __init__(self, index: ConversationIndex | None) -> None:
        super().__init__(index)
        self.latest: AssemblyResult | None = None
        """The latest response of the conversation, once reported."""
        self.followup: list[Any] | None = None
        """The messages of the request that answers :attr:`latest`, until it settles it."""
        self.latest_spans: dict[tuple[int, int], str] = {}
        """The ``assemble_tool_call`` span id of each call of :attr:`latest`, by ``(choice, index)``."""
        self.answered_spans: tuple[str, ...] = ()
        """The span ids of the id-less proposals the last settlement answered (no id names them: the audit
        matches their settlement by span), until the settling request's observer takes them."""

    def settle(self, tool_message_ids: Iterable[object] | None = None) -> tuple[list[Finding], tuple[str, ...]]:
        followup, self.followup = self.followup, None
        latest = self.latest
        if followup is None or latest is None:
            return super().settle(tool_message_ids)
        super().settle(())  # clears the pending ids; the protocol's linkage judges instead
        findings, positions = settle_answers(latest.proposals, results(followup, latest))
        self.answered_spans = tuple(
            self.latest_spans[(call.choice, call.index)]
            for at, call in enumerate(latest.proposals)
            if at in positions and call.id is None and (call.choice, call.index) in self.latest_spans
        )
        unanswered = {finding.call_id for finding in findings if finding.category is ErrorCategory.UNANSWERED_CALL}
        answered = tuple(call.id for call in latest.proposals if call.id is not None and call.id not in unanswered)
        return findings, answered


class _Index(ConversationIndex):
    def new(self) -> OllamaConversation:
        return OllamaConversation(self)


class OllamaConversations:
    """Ollama requests linked to the response they answer (see the module's description)."""

    def __init__(self, capacity: int, rejected: Callable[[str], bool] | None = None) -> None:
        self.index = _Index(capacity, rejected)

    def link(self, messages: object) -> Linked:
        """The conversation a request continues (a new one when none), its messages kept to settle it.

        Only a list or tuple is read (the client sends a list)."""
        if not isinstance(messages, (list, tuple)):
            return Linked(None)
        items = [plain(message) for message in messages]
        item_digests = digests(items)
        turns = OLLAMA.history(items)
        linked = Linked(None)
        if turns and any(turn.assistant for turn in turns):
            found = self.index.link_history(turns, item_digests)
            if isinstance(found.conversation, OllamaConversation):
                found.conversation.followup = items
                linked = Linked(found.conversation, [], found.ambiguous, turns)
            else:
                linked = Linked(None, None, found.ambiguous)
        if linked.conversation is None:
            linked = Linked(self.index.new(), None, linked.ambiguous, turns or ())
        self.index.requested(linked.conversation, fingerprint(item_digests))  # type: ignore[arg-type]
        return linked
