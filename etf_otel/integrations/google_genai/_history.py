"""What the ``google-genai`` SDK itself keeps of a streamed Gemini turn, as an assembler to compare.

The SDK assembles nothing: ``chats.send_message_stream`` (and automatic function calling) keeps
``candidates[0].content`` of every chunk, in order, as the model's turn of the history, and the
application reads the calls as the ``functionCall`` parts found there (``chunk.function_calls``).
:class:`ChatHistory` does exactly that with chunks as the wire sends them: each raw chunk becomes
the SDK's ``GenerateContentResponse`` the way its stream builds it (which raises the SDK's
``ValidationError`` for an ``args`` that is not an object), and an in-band ``{"error": ...}``
object ends the turn (the SDK raises instead of handing it on).

:data:`HISTORY_ADAPTER` drives it under ``Instrumentation.assembler(..., adapter=..., protocol=GEMINI)``,
so the calls it keeps are compared with the rules (``divergent_assembly``). ``google.genai`` is
imported only when a chunk is added.
"""

from __future__ import annotations

from typing import Any, Final

from etf_otel.core._divergence import AssembledCall
from etf_otel.instrumentation._assemblers import AssemblerAdapter

__all__ = ["HISTORY_ADAPTER", "ChatHistory", "history_calls"]


class ChatHistory:
    """The model turn as the SDK's chat history keeps it: ``add(chunk)`` per chunk, then ``turn()``."""

    def __init__(self) -> None:
        self.contents: list[Any] = []
        self._ended = False

    def add(self, chunk: object) -> None:
        """One chunk (parsed JSON, or the SDK's own object); nothing after an in-band error."""
        if self._ended:
            return
        if isinstance(chunk, dict) and next(iter(chunk), None) == "error":
            self._ended = True  # the SDK raises an APIError here
            return
        from google.genai import types

        response = (
            types.GenerateContentResponse._from_response(response=chunk, kwargs={})
            if isinstance(chunk, dict)
            else chunk
        )
        candidates = getattr(response, "candidates", None)
        content = getattr(candidates[0], "content", None) if candidates else None
        if content is not None:
            self.contents.append(content)

    def turn(self) -> list[Any]:
        """The contents kept, one per chunk that had candidate content."""
        return self.contents


def _sdk_response(chunk: dict[str, Any]) -> Any:
    """A raw chunk as the SDK's Developer API stream makes it a ``GenerateContentResponse``."""
    from google.genai import types
    from google.genai.models import _GenerateContentResponse_from_mldev

    return types.GenerateContentResponse._from_response(response=_GenerateContentResponse_from_mldev(chunk), kwargs={})


def history_calls(contents: list[Any]) -> list[AssembledCall]:
    """``(id, name, args)`` of every ``functionCall`` part of the turn, in order; unset ``args`` is ``{}``."""
    calls: list[AssembledCall] = []
    for content in contents:
        for part in getattr(content, "parts", None) or ():
            call = getattr(part, "function_call", None)
            if call is not None:
                calls.append((call.id, call.name, {} if call.args is None else call.args))
    return calls


HISTORY_ADAPTER: Final = AssemblerAdapter(feed=("add",), done=None, finish="turn", calls=history_calls)
"""How :class:`ChatHistory` is driven and read."""
