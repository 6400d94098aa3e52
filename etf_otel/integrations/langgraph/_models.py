"""``ChatOpenAI``'s streamed assembly judged as a third-party assembler, on every path (docs/frameworks.md).

Every streamed Chat Completions call of ``langchain-openai`` goes through
``BaseChatOpenAI._stream`` / ``_astream``: ``model.stream(...)`` and ``astream``, ``invoke``
with ``streaming=True``, and LangGraph's ``stream_mode="messages"`` (which makes the model
stream inside ``invoke``). Each yields ``ChatGenerationChunk`` objects that LangChain sums with
``+``; the wrappers here yield the very same objects, sum them on the side and compare the sum
with the rules at the end, as :func:`etf_otel.integrations.langchain.observe_message_stream`
does (divergence kinds: ``call_split`` when LangChain splits a call with a conflicting id,
``name_concatenated``, ``arguments_differ``...). The response itself is recorded by the
``openai`` instrumentor from the raw stream; without it, from the chunks LangChain kept.
The Responses API path (``use_responses_api``) is not a Chat Completions stream and is left alone.
With OpenInference's LangChain instrumentation co-installed, each step runs in its run's context
(:mod:`etf_otel.integrations.langgraph._openinference`), as do non-streamed ``_generate`` calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._accumulators import observed_accumulator
from etf_otel.integrations.langchain import (
    LANGCHAIN_ADAPTER,
    _MessageSum,
    _observe,
    _openai_instrumented,
    _rebuilt_chunk,
)
from etf_otel.integrations.langgraph._openinference import attached, run_context, stepped, stepped_async
from etf_otel.protocols import CHAT_COMPLETIONS

__all__ = ["ModelWrappers"]


class ModelWrappers:
    """The wrappers of ``BaseChatOpenAI._stream`` and ``_astream`` for one instrumentor's setup."""

    def __init__(self, instrumentation: Instrumentation) -> None:
        self._instrumentation = instrumentation

    def _observed(self) -> Any:
        if _disabled():
            return None
        with internal_errors_swallowed("observing a LangChain message stream"):
            return observed_accumulator(
                self._instrumentation,
                _MessageSum(),
                LANGCHAIN_ADAPTER,
                CHAT_COMPLETIONS,
                record_response=not _openai_instrumented(),
            )
        return None

    def stream(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        observed = self._observed()
        context = run_context()
        chunks = wrapped(*args, **kwargs)
        if context is not None:
            chunks = stepped(iter(chunks), context)
        return chunks if observed is None else _observe(iter(chunks), observed)

    def astream(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        observed = self._observed()
        context = run_context()
        chunks = wrapped(*args, **kwargs)
        if context is not None:
            chunks = stepped_async(chunks, context)
        return chunks if observed is None else _aobserve(chunks, observed)

    def generate(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """A complete response (the ``openai`` instrumentor records it): only the OpenInference run's context."""
        with attached(run_context()):
            return wrapped(*args, **kwargs)

    async def agenerate(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        with attached(run_context()):
            return await wrapped(*args, **kwargs)


async def _aobserve(stream: AsyncIterator[Any], observed: Any) -> AsyncIterator[Any]:
    """:func:`etf_otel.integrations.langchain._observe` for an async generator."""
    summing = True
    # Left early, ``stream`` is not closed here: the event loop finalizes it, as it would without us
    # (closing it from our own finalization races the loop's and fails with "already running").
    async for item in stream:
        if summing:
            summing = _add(observed, item)
        yield item
    if summing:
        try:
            observed.result()
        except Exception:  # recorded as assembler_raised; result() only returns the sum
            return


def _add(observed: Any, item: Any) -> bool:
    """Add one item to the sum; ``False`` once it cannot be summed (the comparison is then left out)."""
    message = getattr(item, "message", item)
    rebuilt: dict[str, Any] | None = None
    with internal_errors_swallowed("rebuilding a chunk from a message"):
        rebuilt = _rebuilt_chunk(message)
    if rebuilt is None:
        return False
    try:
        observed.add(rebuilt, message)
    except Exception:  # LangChain's own + raised: recorded; LangChain's + raises alike
        return False
    return True
