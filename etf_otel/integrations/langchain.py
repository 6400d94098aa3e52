"""Divergence checks for LangChain's streamed tool-call accumulation (``AIMessageChunk`` ``+``).

LangChain has no assembler object: ``ChatOpenAI.stream(...)`` (``langchain-openai``)
turns every Chat Completions chunk into an ``AIMessageChunk`` whose ``tool_call_chunks``
carry the fragments, and the application sums them (``functools.reduce(operator.add,
chunks)`` or ``acc = acc + chunk``); ``langchain-core`` merges fragments by index and id
and parses the arguments into ``tool_calls`` (dicts) and ``invalid_tool_calls``.

* :class:`LangChainAccumulator` does exactly that for raw chunks (dicts or ``openai``
  objects), with ``langchain-openai``'s own conversion; wrap it with
  :func:`instrument_langchain` (or ``instrument_assembler(acc, adapter=LANGCHAIN_ADAPTER)``):
  ``add(chunk)`` feeds the rules the same raw chunk, ``result()`` ends the response and
  compares. Raw chunks give the rules the exact stream.
* :func:`observe_message_stream` wraps the iterator that ``ChatOpenAI.stream(...)``
  returns: it yields the very same objects, sums them on the side and compares at the end.
  Here the rules see the fragments as LangChain kept them, rebuilt into chunks: LangChain
  has already turned an absent ``id`` and ``id: null`` into ``None`` (rebuilt as absent),
  dropped ``type``, and dropped every fragment of a delta in which one fragment lacked
  ``index`` or ``function``. Use the OpenAI instrumentor beside it for the exact stream:
  when it is active this wrapper records only the divergence (the instrumentor records
  the response).

LangChain parses arguments, so arguments are compared as JSON values (see
:mod:`etf_otel.core._divergence`). The calls are listed in ``tool_call_chunks`` order, each as
its ``tool_calls`` entry (parsed arguments) or its ``invalid_tool_calls`` entry (raw text).
``langchain-core`` (and, for the conversion, ``langchain-openai``) are imported lazily.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar, overload

from etf_otel.core._divergence import AssembledCall
from etf_otel.instrumentation._assemblers import AssemblerAdapter
from etf_otel.instrumentation._convenience import _instrumentation
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._switches import _disabled
from etf_otel.integrations._accumulators import observed_accumulator
from etf_otel.protocols import CHAT_COMPLETIONS

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from etf_otel.instrumentation._convenience import SetupOptions

__all__ = [
    "LANGCHAIN_ADAPTER",
    "LangChainAccumulator",
    "instrument_langchain",
    "message_calls",
    "observe_message_stream",
    "to_message_chunk",
]

_Accumulator = TypeVar("_Accumulator")


def _plain(chunk: object) -> dict[str, Any] | None:
    if isinstance(chunk, dict):
        return chunk
    dump = getattr(chunk, "model_dump", None)  # what ChatOpenAI._stream does with an SDK chunk
    if callable(dump):
        plain = dump()
        return plain if isinstance(plain, dict) else None
    return None


def _convert_delta(delta: Any) -> Any:
    """``langchain_openai``'s conversion of one ``delta``; the same logic when it is not installed."""
    from langchain_core.messages import AIMessageChunk

    try:
        from langchain_openai.chat_models.base import _convert_delta_to_message_chunk
    except ImportError:  # pragma: no cover - langchain-openai is installed in the test environment
        chunks: list[dict[str, Any]] = []
        try:
            chunks = [
                {
                    "name": raw["function"].get("name"),
                    "args": raw["function"].get("arguments"),
                    "id": raw.get("id"),
                    "index": raw["index"],
                    "type": "tool_call_chunk",
                }
                for raw in delta.get("tool_calls") or ()
            ]
        except KeyError:
            chunks = []
        return AIMessageChunk(
            content=delta.get("content") or "",
            id=delta.get("id"),
            tool_call_chunks=chunks,  # type: ignore[arg-type]
        )
    return _convert_delta_to_message_chunk(delta, AIMessageChunk)


def to_message_chunk(chunk: object) -> Any:
    """One Chat Completions chunk as ``ChatOpenAI.stream`` turns it into an ``AIMessageChunk``.

    ``None`` for what never reaches LangChain (``"[DONE]"``, a chunk whose delta is null).
    Only ``choices[0]`` is used, as in ``langchain-openai``.
    """
    from langchain_core.messages import AIMessageChunk

    data = _plain(chunk)
    if data is None:
        return None
    choices = data.get("choices") or []
    if not choices:
        return AIMessageChunk(content="")
    choice = choices[0]
    delta = choice.get("delta")
    if delta is None:
        return None
    message = _convert_delta(delta)
    if finish_reason := choice.get("finish_reason"):
        message.response_metadata["finish_reason"] = finish_reason
    message.response_metadata["model_provider"] = "openai"
    return message


class LangChainAccumulator:
    """Sums a streamed response the LangChain way; ``result()`` is the summed ``AIMessageChunk`` (or ``None``)."""

    def __init__(self) -> None:
        self.message: Any = None

    def add(self, chunk: object) -> Any:
        """Convert one raw chunk and add it; returns the converted ``AIMessageChunk`` (``None`` if skipped)."""
        message = to_message_chunk(chunk)
        if message is not None:
            self.add_message(message)
        return message

    def add_message(self, message: Any) -> None:
        self.message = message if self.message is None else self.message + message

    def result(self) -> Any:
        return self.message


def message_calls(message: Any) -> list[AssembledCall]:
    """``(id, name, args)`` of a summed ``AIMessageChunk``, in ``tool_call_chunks`` order."""
    if message is None:
        return []
    valid = list(getattr(message, "tool_calls", None) or ())
    invalid = list(getattr(message, "invalid_tool_calls", None) or ())
    chunks = list(getattr(message, "tool_call_chunks", None) or ())
    if len(chunks) != len(valid) + len(invalid):
        return [(c.get("id"), c.get("name"), c.get("args")) for c in (*valid, *invalid)]
    calls: list[AssembledCall] = []
    for chunk in chunks:
        bad = invalid[0] if invalid else None
        if bad is not None and (bad.get("id"), bad.get("name"), bad.get("args")) == (
            chunk.get("id"),
            chunk.get("name"),
            chunk.get("args"),
        ):
            invalid.pop(0)
            calls.append((bad.get("id"), bad.get("name"), bad.get("args")))
        elif valid:
            good = valid.pop(0)
            calls.append((good.get("id"), good.get("name"), good.get("args")))
    return calls


LANGCHAIN_ADAPTER: Final = AssemblerAdapter(feed=("add",), finish="result", done=None, calls=message_calls)
"""How :func:`~etf_otel.instrumentation.instrument_assembler` drives a :class:`LangChainAccumulator`."""


@overload
def instrument_langchain(
    accumulator: None = None, *, instrumentation: Instrumentation | None = None, **options: Unpack[SetupOptions]
) -> LangChainAccumulator: ...


@overload
def instrument_langchain(
    accumulator: _Accumulator, *, instrumentation: Instrumentation | None = None, **options: Unpack[SetupOptions]
) -> _Accumulator: ...


def instrument_langchain(
    accumulator: object = None,
    *,
    instrumentation: Instrumentation | None = None,
    **options: Unpack[SetupOptions],
) -> object:
    """Wrap a :class:`LangChainAccumulator` (a new one when ``None``) for one response, as a proxy of it."""
    return observed_accumulator(
        _instrumentation(instrumentation, options),
        accumulator if accumulator is not None else LangChainAccumulator(),
        LANGCHAIN_ADAPTER,
        CHAT_COMPLETIONS,
    )


class _MessageSum:
    """The ``+`` accumulation of a message stream; ``add`` takes the rebuilt chunk (for the rules) and the message."""

    def __init__(self) -> None:
        self.message: Any = None

    def add(self, _chunk: object, message: Any) -> None:
        self.message = message if self.message is None else self.message + message

    def result(self) -> Any:
        return self.message


def _rebuilt_chunk(message: Any) -> dict[str, Any]:
    """A Chat Completions chunk carrying what LangChain kept of one message's fragments."""
    fragments: list[dict[str, Any]] = []
    for tool_chunk in getattr(message, "tool_call_chunks", None) or ():
        fragment: dict[str, Any] = {"index": tool_chunk.get("index")}
        if tool_chunk.get("id") is not None:
            fragment["id"] = tool_chunk["id"]
        function: dict[str, Any] = {}
        if tool_chunk.get("name") is not None:
            function["name"] = tool_chunk["name"]
        if tool_chunk.get("args") is not None:
            function["arguments"] = tool_chunk["args"]
        fragment["function"] = function
        fragments.append(fragment)
    metadata = getattr(message, "response_metadata", None) or {}
    return {
        "object": "chat.completion.chunk",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": fragments} if fragments else {},
                "finish_reason": metadata.get("finish_reason"),
            }
        ],
    }


def _openai_instrumented() -> bool:
    try:
        from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor

        return bool(OpenAIInstrumentor().is_instrumented_by_opentelemetry)
    except Exception:  # pragma: no cover - opentelemetry-instrumentation missing
        return False


def observe_message_stream(
    stream: Iterable[_Accumulator],
    *,
    instrumentation: Instrumentation | None = None,
    record_response: bool | None = None,
    **options: Unpack[SetupOptions],
) -> Iterator[_Accumulator]:
    """Yield ``stream``'s items unchanged (``AIMessageChunk`` or ``ChatGenerationChunk``), checking the sum at the end.

    ``record_response`` ``None`` (default): record the response's spans and metrics unless
    the OpenAI instrumentor is active (it already observes the underlying raw stream).
    """
    if _disabled():
        return iter(stream)
    if record_response is None:
        record_response = not _openai_instrumented()
    observed = observed_accumulator(
        _instrumentation(instrumentation, options),
        _MessageSum(),
        LANGCHAIN_ADAPTER,
        CHAT_COMPLETIONS,
        record_response=record_response,
    )
    return _observe(iter(stream), observed)


def _observe(stream: Iterator[Any], observed: Any) -> Iterator[Any]:
    summing = True
    try:
        for item in stream:
            if summing:
                message = getattr(item, "message", item)
                rebuilt: dict[str, Any] | None = None
                with internal_errors_swallowed("rebuilding a chunk from a message"):
                    rebuilt = _rebuilt_chunk(message)
                if rebuilt is None:
                    summing = False
                else:
                    try:
                        observed.add(rebuilt, message)
                    except Exception:  # LangChain's own + raised: recorded; the application's + raises alike
                        summing = False
            yield item
    except GeneratorExit:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        raise
    if summing:
        try:
            observed.result()
        except Exception:  # pragma: no cover - result() only returns the sum
            return
