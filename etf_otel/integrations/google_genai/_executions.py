"""The SDK's automatic function calling: each function it runs is an ``execute_tool`` execution.

Given Python callables as tools, ``google-genai`` runs the model's calls itself
(``_extra_utils.get_function_response_parts``, once per streamed chunk that has parts, or once for
a complete body) and answers them in its next request, without ids. The SDK is then the tool
host: every function it invokes (``invoke_function_from_dict_args`` and its ``_async`` twin, also
when it runs a sync function in a thread) becomes an ``execute_tool`` span, current while the
function runs, with the slot it executes: ``etf.choice.index`` 0 (the SDK runs the first
candidate's calls only) and ``etf.tool_call.index``, the call's ordinal in the response.

A streamed chunk's calls are run while the response is still streaming, before it is judged and
before its ``assemble_tool_call`` spans exist. So the execution span stays open until its response
is reported: it then gets a link to its call's span, the call's ``gen_ai.tool.call.id`` when the
call had one, and ends at the time the function returned. For an id-less call that link and the
slot are the only key between the execution and the call. A function run with another name or
other arguments than the call the rules assembled in its slot (the SDK runs a streamed call's head
without its ``partialArgs``) is a ``divergent_assembly`` on the execution span.

The ordinal of an invoked part is read from the Gemini adapter: the calls the response had opened
before the chunk (:class:`_Tap`, taken as the chunk passes) plus the heads before it in the chunk.
Nothing here decides anything the SDK does: functions, their results and exceptions are the SDK's.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanContext
from opentelemetry.util.types import AttributeValue

from etf_otel import attributes as A
from etf_otel.core._divergence import DivergenceKind
from etf_otel.core._results import AssemblyResult, ToolCall
from etf_otel.instrumentation._observer import ResponseObserver
from etf_otel.instrumentation._registry import canonical_value_hash
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._span_attributes import put_call_id
from etf_otel.protocols._base import field as read_field

__all__ = [
    "FollowedResponse",
    "function_response_parts",
    "function_response_parts_async",
    "invoke",
    "invoke_async",
    "mark_body",
    "tap",
    "tap_async",
]

_CANDIDATE: Final = 0
"""The SDK runs the calls of the first candidate only."""


@dataclass
class _Execution:
    span: Span
    name: str
    ordinal: int | None
    started: float
    token: Token[Context] | None
    handed: int | None = None
    """The canonical hash of the arguments the SDK handed the function (never the values)."""
    ended: tuple[float, int] | None = None
    error: BaseException | None = None
    result: Any = None


@dataclass
class FollowedResponse:
    """One request's response: its observer, and once reported its result and call spans."""

    observer: ResponseObserver | None = None
    result: AssemblyResult | None = None
    call_spans: Mapping[tuple[int, int], SpanContext] = field(default_factory=dict)
    waiting: list[_Execution] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    counter: Callable[[int], object] | None = None
    """The adapter's ``opened``, looked up once: :meth:`opened` runs once per chunk."""

    def follow(self, observer: ResponseObserver) -> None:
        self.observer = observer
        opened = getattr(observer.assembler, "opened", None)
        self.counter = opened if callable(opened) else None
        observer.when_reported(self._reported)

    def opened(self) -> int:
        """The calls the first candidate opened so far (``0`` before any was observed)."""
        counter = self.counter
        count = counter(_CANDIDATE) if counter is not None else 0
        return count if isinstance(count, int) else 0

    def _reported(self, result: AssemblyResult, call_spans: Mapping[tuple[int, int], SpanContext]) -> None:
        with self.lock:
            self.result, self.call_spans = result, call_spans
            waiting, self.waiting = self.waiting, []
        for execution in waiting:
            self._end(execution)

    def executed(self, execution: _Execution) -> None:
        """The function returned or raised: end its span now, or when the response is reported."""
        with self.lock:
            if self.result is None:
                self.waiting.append(execution)
                return
        self._end(execution)

    def _end(self, execution: _Execution) -> None:
        observer = self.observer
        if observer is None:  # pragma: no cover - a followed response always has its observer
            return
        span = execution.span
        with internal_errors_swallowed("linking an execution to its call"):
            slot = (_CANDIDATE, execution.ordinal)
            calls = self.result.calls if self.result is not None and execution.ordinal is not None else ()
            call = next((c for c in calls if (c.choice, c.index) == slot), None)
            linked = self.call_spans.get((call.choice, call.index)) if call is not None else None
            if linked is not None and span.is_recording():
                span.add_link(linked)
                if call is not None and call.id is not None:
                    attributes: dict[str, AttributeValue] = {}
                    put_call_id(attributes, call.id)
                    span.set_attributes(attributes)
            if call is not None:  # counted whether or not the span is sampled
                observer.telemetry.record_divergence(_differences(call, execution), span)
        observer.telemetry.end_execution(
            span, execution.name, execution.started, execution.error, execution.result, ended=execution.ended
        )


def _differences(call: ToolCall, execution: _Execution) -> list[str]:
    """How what the SDK ran differs from the call the rules assembled in that slot (``divergent_assembly``).

    The SDK runs each ``functionCall`` part as it came: a streamed call's head runs without the
    arguments its ``partialArgs`` carry. Arguments are compared as JSON values (an integral float
    equals its integer: the SDK reads every number as a float, then turns integral ones back).
    """
    kinds: list[str] = []
    if call.name != execution.name:
        kinds.append(DivergenceKind.NAME_DIFFERS.value)
    try:
        assembled = _value_hash(json.loads(call.arguments))
    except (ValueError, RecursionError):
        assembled = None
    if assembled is None or assembled != execution.handed:
        kinds.append(DivergenceKind.ARGUMENTS_DIFFER.value)
    return kinds


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integral(item) for item in value]
    return value


def _value_hash(value: Any) -> int | None:
    return canonical_value_hash(_integral(value))


class _Tap(NamedTuple):
    """The chunk a followed stream handed on last in this context, and the calls opened before it.

    A named tuple: one is made per chunk, and a frozen dataclass costs several calls to build."""

    chunk: object
    response: FollowedResponse
    before: int


_TAPPED: Final[ContextVar[_Tap | None]] = ContextVar("etf_otel_gemini_tapped", default=None)


def _failed(response: FollowedResponse, error: Exception) -> None:
    """The SDK raised while reading the response: the rules see an in-band error, whatever came before.

    A Gemini stream is failed by an error even after a ``STOP`` chunk (the SDK raises then too);
    only the error's numeric code is kept, never its message.
    """
    with internal_errors_swallowed("failing a Gemini response"):
        observer = response.observer
        if observer is not None:
            code = getattr(error, "code", None)
            observer.observe({"error": {"code": code if type(code) is int else None}})


def tap(stream: Iterator[Any], response: FollowedResponse) -> Iterator[Any]:
    """``stream``'s chunks, each remembered (with the calls opened before it) as it is handed on; an
    exception of the SDK fails the response (:func:`_failed`) and reaches the application unchanged."""
    try:
        for chunk in stream:
            with internal_errors_swallowed("following a Gemini chunk"):
                _TAPPED.set(_Tap(chunk, response, response.opened()))
            yield chunk
    except Exception as error:
        _failed(response, error)
        raise
    finally:
        close = getattr(stream, "close", None)
        if callable(close):
            close()


async def tap_async(stream: AsyncIterator[Any], response: FollowedResponse) -> AsyncIterator[Any]:
    """:func:`tap` for an async stream."""
    try:
        async for chunk in stream:
            with internal_errors_swallowed("following a Gemini chunk"):
                _TAPPED.set(_Tap(chunk, response, response.opened()))
            yield chunk
    except Exception as error:
        _failed(response, error)
        raise
    finally:
        close = getattr(stream, "aclose", None)
        if callable(close):
            await close()


def mark_body(body: object, response: FollowedResponse) -> None:
    """A complete body was judged: the functions the SDK runs for it are its calls, from ordinal 0."""
    _TAPPED.set(_Tap(body, response, 0))


@dataclass
class _Planned:
    name: str
    ordinal: int | None
    function: Any
    taken: bool = False


@dataclass
class _Plan:
    """The functions one ``get_function_response_parts`` call will run, in order, with their slots."""

    response: FollowedResponse
    calls: list[_Planned]

    def take(self, function: object) -> _Planned | None:
        for planned in self.calls:
            if not planned.taken and planned.function is function:
                planned.taken = True
                return planned
        return None


_PLAN: Final[ContextVar[_Plan | None]] = ContextVar("etf_otel_gemini_plan", default=None)


def _plan(args: tuple[Any, ...], kwargs: dict[str, Any], need_args: bool) -> _Plan | None:
    chunk = args[0] if args else kwargs.get("response")
    functions = args[1] if len(args) > 1 else kwargs.get("function_map")
    tapped = _TAPPED.get()
    if tapped is None or tapped.chunk is not chunk or not isinstance(functions, Mapping):
        return None
    candidates = read_field(chunk, "candidates")
    content = read_field(candidates[0], "content") if isinstance(candidates, list) and candidates else None
    parts = read_field(content, "parts")
    after = tapped.response.opened()
    ordinal = tapped.before
    calls: list[_Planned] = []
    for part in parts if isinstance(parts, list) else ():
        call = getattr(part, "function_call", None)
        if not call:
            continue
        name, call_id, arguments = call.name, call.id, call.args
        head = bool(name) or bool(call_id) or arguments is not None
        if name is not None and (arguments is not None or not need_args):
            slot = ordinal if head and ordinal < after else None
            calls.append(_Planned(name, slot, functions.get(name)))
        ordinal += 1 if head else 0
    return _Plan(tapped.response, calls)


def function_response_parts(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``get_function_response_parts``: the functions it runs are known to :func:`invoke` with their slots."""
    plan = None
    with internal_errors_swallowed("reading the calls the SDK runs"):
        plan = _plan(args, kwargs, need_args=True)
    token = _PLAN.set(plan)
    try:
        return wrapped(*args, **kwargs)
    finally:
        _PLAN.reset(token)


async def function_response_parts_async(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """:func:`function_response_parts` for ``get_function_response_parts_async`` (it runs calls without ``args``)."""
    plan = None
    with internal_errors_swallowed("reading the calls the SDK runs"):
        plan = _plan(args, kwargs, need_args=False)
    token = _PLAN.set(plan)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _PLAN.reset(token)


def _start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[FollowedResponse, _Execution] | None:
    plan = _PLAN.get()
    if plan is None or plan.response.observer is None:
        return None
    function = args[1] if len(args) > 1 else kwargs.get("function_to_invoke")
    handed = args[0] if args else kwargs.get("args")
    planned = plan.take(function)
    if planned is None:
        return None
    telemetry = plan.response.observer.telemetry
    span = telemetry.start_execution(None, planned.name, None, False)
    if planned.ordinal is not None and span.is_recording():
        span.set_attributes({A.ETF_CHOICE_INDEX: _CANDIDATE, A.ETF_TOOL_CALL_INDEX: planned.ordinal})
    token = otel_context.attach(trace.set_span_in_context(span))
    execution = _Execution(span, planned.name, planned.ordinal, time.perf_counter(), token, _value_hash(handed))
    return plan.response, execution


def _started(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[FollowedResponse, _Execution] | None:
    with internal_errors_swallowed("starting an execution"):
        return _start(args, kwargs)
    return None


def _ended(started: tuple[FollowedResponse, _Execution], error: BaseException | None, result: Any) -> None:
    response, execution = started
    with internal_errors_swallowed("ending an execution"):
        if execution.token is not None:
            otel_context.detach(execution.token)
        execution.ended = (time.perf_counter(), time.time_ns())
        execution.error, execution.result = error, result
        response.executed(execution)


def invoke(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``invoke_function_from_dict_args``: a planned function runs as an execution."""
    started = _started(args, kwargs)
    if started is None:
        return wrapped(*args, **kwargs)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        _ended(started, error, None)
        raise
    _ended(started, None, result)
    return result


async def invoke_async(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``invoke_function_from_dict_args_async``: a planned coroutine function runs as an execution."""
    started = _started(args, kwargs)
    if started is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as error:
        _ended(started, error, None)
        raise
    _ended(started, None, result)
    return result
