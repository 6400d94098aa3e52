"""Divergence checks for the ``openai`` SDK's own Chat Completions accumulator (``ChatCompletionStreamState``).

The SDK assembles streamed tool calls itself in two places: ``ChatCompletionStreamState``
(fed by hand with ``handle_chunk``) and the ``chat.completions.stream(...)`` helper, whose
``ChatCompletionStream`` owns such a state. ``instrument_accumulator`` wraps either (or the
helper's manager) without changing what they return or raise; at the end of the response
the calls the SDK assembled are compared with what the identity rules preserve for the same
chunks, and every difference is recorded as ``divergent_assembly`` with a bounded
``etf.divergence.kind``.

* A state: ``handle_chunk`` feeds the rules too; ``get_final_completion()`` ends the response
  and compares. An exception of ``handle_chunk`` or ``get_final_completion`` (the SDK raises
  ``IndexError`` when the first tool index is 1, ``AssertionError`` on ``type: null``,
  ``LengthFinishReasonError`` on ``finish_reason: "length"``) reaches the caller unchanged
  and is recorded as ``assembler_raised``.
* A ``ChatCompletionStream`` (sync or async) is returned as the **same object**: its state
  is replaced by the observed state (every attribute and method is forwarded) and, when its
  events are exhausted, the final completion is compared, so the check also happens for
  applications that only iterate the events. Instrument it before consuming it (a stream
  already started is returned unchanged). A manager does that on entering ``with``.

With the OpenAI instrumentor active the helper's raw stream is already observed (response
and call spans, metrics); the comparison then reuses that observer's assembly, so one
response is recorded once and its chunks go through the rules once.

The ``openai`` package is never imported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, TypeVar

from etf_otel.core._divergence import AssembledCall
from etf_otel.instrumentation._assemblers import AssemblerAdapter
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.integrations._accumulators import SdkAccumulator, observe_accumulator
from etf_otel.integrations.openai._responses_state import RESPONSE_ACCUMULATOR
from etf_otel.protocols import CHAT_COMPLETIONS

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from etf_otel.instrumentation._convenience import SetupOptions

__all__ = ["CHAT_COMPLETION_ACCUMULATOR", "OPENAI_STATE_ADAPTER", "completion_calls", "instrument_accumulator"]

_T = TypeVar("_T")


def completion_calls(completion: Any) -> list[AssembledCall]:
    """``(id, name, arguments)`` of every tool call of a (snapshot or final) ``ChatCompletion``, in choice order."""
    calls: list[AssembledCall] = []
    for choice in getattr(completion, "choices", None) or ():
        message = getattr(choice, "message", None)
        for tool_call in getattr(message, "tool_calls", None) or ():
            function = getattr(tool_call, "function", None)
            calls.append(
                (getattr(tool_call, "id", None), getattr(function, "name", None), getattr(function, "arguments", None))
            )
    return calls


OPENAI_STATE_ADAPTER: Final = AssemblerAdapter(
    feed=("handle_chunk",), finish="get_final_completion", done=None, calls=completion_calls
)
"""How a ``ChatCompletionStreamState`` is driven (``instrument_assembler(state, adapter=...)`` takes it too)."""


class _ChatCompletionAccumulator(SdkAccumulator):
    protocol = CHAT_COMPLETIONS
    adapter = OPENAI_STATE_ADAPTER
    states = frozenset({"openai.ChatCompletionStreamState"})
    streams = frozenset({"openai.ChatCompletionStream", "openai.AsyncChatCompletionStream"})
    managers = frozenset({"openai.ChatCompletionStreamManager", "openai.AsyncChatCompletionStreamManager"})

    def new_state(self) -> Any:
        from openai.lib.streaming.chat import ChatCompletionStreamState

        return ChatCompletionStreamState()

    def is_fresh_state(self, state: Any) -> bool:
        if not callable(getattr(state, "handle_chunk", None)) or not callable(
            getattr(state, "get_final_completion", None)
        ):
            return False
        try:
            state.current_completion_snapshot  # noqa: B018 - the SDK asserts it exists once a chunk was handled
        except AssertionError:
            return True
        return False


CHAT_COMPLETION_ACCUMULATOR: Final = _ChatCompletionAccumulator()


def instrument_accumulator(
    target: _T,
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **options: Unpack[SetupOptions],
) -> _T:
    """Compare an ``openai`` accumulator with the rules; returns ``target`` (or a transparent proxy of it).

    ``target`` is a ``ChatCompletionStreamState`` or ``ResponseStreamState`` fed by hand, the
    stream of ``with client.chat.completions.stream(...)`` / ``client.responses.stream(...)``
    (changed in place, instrument it before consuming it), or the manager those return.
    Anything else is returned unchanged. ``record_response`` ``None``: a state records its
    response, a stream unless its raw stream is already observed (the OpenAI instrumentor).
    Without ``instrumentation``, the shared setup of ``options`` (``tracer_provider``, ...).
    """
    return observe_accumulator(
        target, (CHAT_COMPLETION_ACCUMULATOR, RESPONSE_ACCUMULATOR), instrumentation, record_response, options
    )
