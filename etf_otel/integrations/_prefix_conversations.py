"""Chat-shaped requests (Chat Completions, Anthropic Messages, LiteLLM's) linked to the response they answer.

The evidence and the scope are :class:`~etf_otel.integrations._conversation.ConversationIndex`'s; this
module reads a request's messages into turns with the protocol's reader and keeps the request's
fingerprint for the next one.
"""

from __future__ import annotations

from collections.abc import Callable

from etf_otel.integrations._conversation import ConversationIndex, Linked
from etf_otel.integrations._fingerprints import digests, fingerprint
from etf_otel.protocols import WireProtocol

__all__ = ["PrefixConversations"]


class PrefixConversations:
    """Chat-shaped requests (Chat Completions, Anthropic Messages) linked to the response they answer.

    ``protocol`` reads a request's messages into turns (:attr:`~etf_otel.protocols.WireProtocol.history`)
    and says where their answers stand; ``guarded``: a guard refuses every call the rules rejected, so a
    result for one is the refusal answered.
    """

    def __init__(
        self,
        capacity: int,
        protocol: WireProtocol,
        rejected: Callable[[str], bool] | None = None,
        guarded: bool = False,
    ) -> None:
        self.index = ConversationIndex(capacity, rejected)
        self._protocol = protocol
        self._guarded = guarded

    def link(self, messages: object) -> Linked:
        """The conversation a request continues (a new one when none), and the results it is judged by.

        Only a list or tuple is read: messages given as an iterator (a generator) would be
        consumed before the SDK sends them, so that request gets no linkage.
        """
        if not isinstance(messages, (list, tuple)):
            return Linked(None)
        message_digests = digests(messages)
        turns = self._protocol.history(messages)
        linked = Linked(None)
        if turns:
            adjacent = self._protocol.answers_adjacent
            linked = self.index.link_history(turns, message_digests, guarded=self._guarded, adjacent=adjacent)
        if linked.conversation is None:
            linked = Linked(self.index.new(), None, linked.ambiguous)
        self.index.requested(linked.conversation, fingerprint(message_digests))  # type: ignore[arg-type]
        return linked._replace(turns=turns or ())
