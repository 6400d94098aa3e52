"""Wrappers for any stream, any assembler and any tool host (SPEC sections 6 and 7).

Each wrapper is a proxy by composition: it returns, raises and forwards exactly what the
wrapped object does, and observes on the side. The observer runs the reference identity
rules over the same chunks, so diagnostics exist even when the wrapped assembler is
opaque, and emits spans and metrics once per call and per response when the stream
ends: by exhaustion, by an error, by ``close()``/``break``/leaving ``with``, or when an
abandoned stream is garbage collected. Every telemetry step runs inside
:func:`~etf_otel.instrumentation.safety.internal_errors_swallowed`; only the host's own exceptions (and,
in opt-in guard mode, :class:`GuardRefusedError`) ever reach the application.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextvars import Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from etf_otel.core.divergence import AssembledCall, DivergenceKind, compare
from etf_otel.core.identity import ABSENT, CompatibilityRule, IdentityRules
from etf_otel.core.linkage import Conversation, Finding
from etf_otel.core.slots import AssemblyResult
from etf_otel.core.vocabulary import ErrorCategory, Phase, StreamState
from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation import attributes as A
from etf_otel.instrumentation.safety import internal_errors_swallowed
from etf_otel.instrumentation.telemetry import ProposalRecord, Telemetry
from etf_otel.protocols.chat_completions import DONE, ReferenceAssembler, field

__all__ = [
    "GuardRefusedError",
    "Instrumentation",
    "ObservedAssembler",
    "ObservedAsyncStream",
    "ObservedHost",
    "ObservedStream",
    "ResponseObserver",
    "instrument_assembler",
    "instrument_host",
    "instrument_stream",
]

_EOF, _ERROR, _CLOSED = "eof", "error", "closed"

if TYPE_CHECKING:  # wrapt < 2.5 proxies are not subscriptable at run time
    _ObjectProxy = wrapt.ObjectProxy[Any]
else:
    _ObjectProxy = wrapt.ObjectProxy
_DISABLED_NAMES = frozenset({"etf_otel", "etf-otel"})


def _disabled() -> bool:
    names = os.environ.get(A.ENV_DISABLED_INSTRUMENTATIONS, "")
    return any(name.strip() in _DISABLED_NAMES for name in names.split(","))


def _suppressed() -> bool:
    return bool(otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY))


class ResponseObserver:
    """Runs the identity rules beside one streamed response and reports it once at the end.

    With a ``conversation`` it first settles the previous response of that conversation
    (``tool_message_ids`` are the ids the new request answers with, when known): the
    findings are counted at once and recorded as events on this response's span.
    """

    __slots__ = (
        "__weakref__",
        "_assembler",
        "_base",
        "_conversation",
        "_done",
        "_findings",
        "_lock",
        "_parent",
        "_started_ns",
        "telemetry",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        rules: IdentityRules,
        conversation: Conversation | None = None,
        *,
        provider_name: str | None = None,
        tool_message_ids: Sequence[str | None] | None = None,
    ) -> None:
        self.telemetry = telemetry
        self._assembler = ReferenceAssembler(rules=rules, clock=time.time_ns)
        self._conversation = conversation
        self._base = telemetry.base_attributes(provider_name)
        self._parent = otel_context.get_current()
        self._started_ns = time.time_ns()
        self._lock = threading.Lock()
        self._done = False
        self._findings: list[Finding] = []
        if conversation is not None:
            with internal_errors_swallowed("settling the previous response"):
                self._findings = conversation.next_request(tool_message_ids)
                telemetry.count_findings(self._findings, self._base)

    @property
    def finished(self) -> bool:
        return self._done

    @property
    def assembler(self) -> ReferenceAssembler:
        return self._assembler

    def observe(self, chunk: object) -> None:
        try:
            self._assembler.feed(chunk)
        except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
            _observe_failed()

    def finish(self, how: str = _EOF) -> AssemblyResult | None:
        """Finalize once; later calls (a finalizer after ``close()``) do nothing."""
        with self._lock:
            if self._done:
                return None
            self._done = True
        with internal_errors_swallowed("finalizing a response"):
            result = self._assembler.finish()
            if how == _ERROR:
                state = StreamState.FAILED
            elif how == _CLOSED and result.state is not StreamState.COMPLETED:
                state = StreamState.ABANDONED
            else:
                state = result.state
            self.telemetry.record_response(
                result, state, self._parent, self._started_ns, self._conversation, self._base, self._findings
            )
            return result
        return None


def _observe_failed() -> None:  # pragma: no cover - see ResponseObserver.observe
    with internal_errors_swallowed("observing a chunk"):
        raise


class ObservedStream(_ObjectProxy):
    """A synchronous stream of chunks, observed.

    A transparent proxy: ``isinstance`` checks, attributes (``response``, ...) and every
    chunk are the wrapped stream's own; only iteration and closing are watched.
    """

    def __init__(self, stream: Iterable[Any], observer: ResponseObserver) -> None:
        super().__init__(stream)
        self._self_iterator: Iterator[Any] | None = None
        self._self_observer = observer
        self._self_feed = observer.assembler.feed  # called once per chunk: no frame in between
        self._self_finalizer = weakref.finalize(self, observer.finish, _CLOSED)

    def __iter__(self) -> Iterator[Any]:
        """A ``for`` loop gets a generator: the cheapest per-chunk path CPython has.

        Leaving the loop early (``break``) closes that generator, which ends the response
        as abandoned at once. ``next(stream)`` without ``iter`` goes through ``__next__``.
        """
        if self._self_iterator is not None:
            return self
        self._self_iterator = iterator = iter(self.__wrapped__)
        return self._self_generate(iterator)

    def _self_generate(self, iterator: Iterator[Any]) -> Iterator[Any]:
        feed = self._self_feed
        try:
            for chunk in iterator:
                try:
                    feed(chunk)
                except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
                    _observe_failed()
                yield chunk
        except GeneratorExit:
            self._self_end(_CLOSED)
            raise
        except BaseException:
            self._self_end(_ERROR)
            raise
        self._self_end(_EOF)

    def __next__(self) -> Any:
        iterator = self._self_iterator
        if iterator is None:
            iterator = self._self_iterator = iter(self.__wrapped__)
        try:
            chunk = next(iterator)
        except StopIteration:
            self._self_end(_EOF)
            raise
        except BaseException:
            self._self_end(_ERROR)
            raise
        try:
            self._self_feed(chunk)
        except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
            _observe_failed()
        return chunk

    def _self_end(self, how: str) -> None:
        self._self_observer.finish(how)
        self._self_finalizer.detach()

    def close(self) -> Any:
        try:
            close = getattr(self.__wrapped__, "close", None)
            return close() if close is not None else None
        finally:
            self._self_end(_CLOSED)

    def __enter__(self) -> ObservedStream:
        enter = getattr(self.__wrapped__, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(self, *exc_info: object) -> Any:
        try:
            exit_ = getattr(self.__wrapped__, "__exit__", None)
            return exit_(*exc_info) if exit_ is not None else None
        finally:
            self._self_end(_CLOSED)


class ObservedAsyncStream(_ObjectProxy):
    """An asynchronous stream of chunks, observed; a transparent proxy like :class:`ObservedStream`."""

    def __init__(self, stream: AsyncIterable[Any], observer: ResponseObserver) -> None:
        super().__init__(stream)
        self._self_iterator: AsyncIterator[Any] | None = None
        self._self_observer = observer
        self._self_feed = observer.assembler.feed  # called once per chunk: no frame in between
        self._self_finalizer = weakref.finalize(self, observer.finish, _CLOSED)

    def __aiter__(self) -> ObservedAsyncStream:
        return self

    async def __anext__(self) -> Any:
        iterator = self._self_iterator
        if iterator is None:
            iterator = self._self_iterator = self.__wrapped__.__aiter__()
        try:
            chunk = await iterator.__anext__()
        except StopAsyncIteration:
            self._self_end(_EOF)
            raise
        except BaseException:
            self._self_end(_ERROR)
            raise
        try:
            self._self_feed(chunk)
        except Exception:  # pragma: no cover - the assembler never raises on JSON-shaped input
            _observe_failed()
        return chunk

    def _self_end(self, how: str) -> None:
        self._self_observer.finish(how)
        self._self_finalizer.detach()

    def close(self) -> Any:
        """Forwards ``close()`` (a coroutine for ``openai.AsyncStream``); the response ends now."""
        try:
            return self.__wrapped__.close()
        finally:
            self._self_end(_CLOSED)

    async def aclose(self) -> None:
        try:
            aclose = getattr(self.__wrapped__, "aclose", None)
            if aclose is None:
                close = getattr(self.__wrapped__, "close", None)
                outcome = close() if close is not None else None
                if inspect.isawaitable(outcome):
                    await outcome
            else:
                await aclose()
        finally:
            self._self_end(_CLOSED)

    async def __aenter__(self) -> ObservedAsyncStream:
        enter = getattr(self.__wrapped__, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc_info: object) -> Any:
        try:
            exit_ = getattr(self.__wrapped__, "__aexit__", None)
            return await exit_(*exc_info) if exit_ is not None else None
        finally:
            self._self_end(_CLOSED)


def reference_calls(result: object) -> Sequence[AssembledCall]:
    """Extract ``(id, name, arguments)`` from a :class:`ReferenceAssembler` result."""
    return [(call.id, call.name, call.arguments) for call in result.calls]  # type: ignore[attr-defined]


class ObservedAssembler:
    """Any assembler that is fed chunks and then finished, observed.

    ``feed`` names the method(s) that take one chunk, ``finish`` the method that ends the
    response and returns its calls, ``calls`` turns that return value into
    ``(id, name, arguments)`` triples for the divergence check. Everything else is
    forwarded untouched.
    """

    def __init__(
        self,
        assembler: Any,
        observer: ResponseObserver,
        *,
        feed: Sequence[str] = ("feed",),
        finish: str = "finish",
        done: str | None = "feed_done",
        calls: Callable[[Any], Sequence[AssembledCall]] = reference_calls,
    ) -> None:
        self._etf_assembler = assembler
        self._etf_observer = observer
        self._etf_feed = frozenset(feed)
        self._etf_finish = finish
        self._etf_done = done
        self._etf_calls = calls
        self._etf_finalizer = weakref.finalize(self, observer.finish, _CLOSED)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._etf_assembler, name)
        if name in self._etf_feed:
            return self._etf_wrap_feed(target)
        if name == self._etf_done:
            return self._etf_wrap_done(target)
        if name == self._etf_finish:
            return self._etf_wrap_finish(target)
        return target

    def _etf_wrap_feed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        observer = self._etf_observer

        def feed(chunk: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                outcome = method(chunk, *args, **kwargs)
            except BaseException:  # some assemblers raise mid-stream (openai: IndexError, AssertionError)
                self._etf_end([DivergenceKind.ASSEMBLER_RAISED], _ERROR)
                raise
            if not observer.finished:
                observer.observe(chunk)
            return outcome

        return feed

    def _etf_wrap_done(self, method: Callable[..., Any]) -> Callable[..., Any]:
        observer = self._etf_observer

        def done(*args: Any, **kwargs: Any) -> Any:
            outcome = method(*args, **kwargs)
            observer.observe(DONE)
            return outcome

        return done

    def _etf_wrap_finish(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def finish(*args: Any, **kwargs: Any) -> Any:
            try:
                outcome = method(*args, **kwargs)
            except BaseException:
                self._etf_end([DivergenceKind.ASSEMBLER_RAISED], _ERROR)
                raise
            kinds: list[DivergenceKind] = []
            with internal_errors_swallowed("comparing assemblies"):
                ours = self._etf_observer.assembler.finish()
                kinds = compare(ours.calls, self._etf_calls(outcome))
            self._etf_end(kinds, _EOF)
            return outcome

        return finish

    def _etf_end(self, kinds: Sequence[DivergenceKind], how: str) -> None:
        observer = self._etf_observer
        if observer.finished:
            return
        with internal_errors_swallowed("recording divergence"):
            observer.telemetry.record_divergence([kind.value for kind in kinds])
        observer.finish(how)
        self._etf_finalizer.detach()


def _call_fields(call: object) -> tuple[str | None, str | None, str | None]:
    """``(id, name, arguments)`` of a call as hosts receive it: our ToolCall, an OpenAI dict or object."""
    call_id = field(call, "id")
    name = field(call, "name")
    arguments = field(call, "arguments")
    function = field(call, "function")
    if function is not ABSENT and function is not None:
        name = field(function, "name")
        arguments = field(function, "arguments")
    return (
        call_id if isinstance(call_id, str) else None,
        name if isinstance(name, str) else None,
        arguments if isinstance(arguments, str) else None,
    )


class ObservedHost:
    """A tool host whose executions become ``execute_tool`` spans keyed by the preserved id."""

    def __init__(
        self,
        host: Any,
        telemetry: Telemetry,
        *,
        method: str = "execute",
        conversation: Conversation | None = None,
        guard: bool = False,
        record_unverified_ids: bool = False,
    ) -> None:
        self._etf_host = host
        self._etf_telemetry = telemetry
        self._etf_method = method
        self._etf_conversation = conversation
        self._etf_guard = guard
        self._etf_record_unverified = record_unverified_ids
        target = host if callable(host) and not hasattr(host, method) else getattr(host, method)
        self._etf_target = target
        self._etf_is_async = inspect.iscoroutinefunction(target)

    def __getattr__(self, name: str) -> Any:
        if name == self._etf_method:
            return self._etf_async_execute if self._etf_is_async else self._etf_execute
        return getattr(self._etf_host, name)

    def __call__(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        if self._etf_is_async:
            return self._etf_async_execute(call, *args, **kwargs)
        return self._etf_execute(call, *args, **kwargs)

    def _etf_before(self, call: Any) -> tuple[_Execution | None, ErrorCategory | None]:
        """Decide the guard, then start the span (``None`` when telemetry is off or failed).

        The guard does not depend on telemetry: it is decided first, also when tracing is
        suppressed, and a failure while deciding refuses the call (fail closed).
        """
        telemetry = self._etf_telemetry
        refusal: ErrorCategory | None = None
        call_id = name = arguments = None
        record: ProposalRecord | None = None
        try:
            call_id, name, arguments = _call_fields(call)
            record = telemetry.proposals.get(call_id) if call_id else None
            if self._etf_guard:
                refusal = self._etf_refusal(call_id, record, name, arguments)
        except Exception:
            if self._etf_guard:
                refusal = ErrorCategory.ORPHANED_RESULT
        if _suppressed():
            return None, refusal
        with internal_errors_swallowed("starting an execution"):
            span = telemetry.start_execution(call_id, name, record, self._etf_record_unverified)
            token = otel_context.attach(trace.set_span_in_context(span))
            return _Execution(span, name, call_id, token, time.perf_counter()), refusal
        return None, refusal

    @staticmethod
    def _etf_refusal(
        call_id: str | None, record: ProposalRecord | None, name: str | None, arguments: str | None
    ) -> ErrorCategory | None:
        if not call_id:
            return ErrorCategory.MISSING_ID
        if record is None:
            return ErrorCategory.ORPHANED_RESULT
        if not record.dispatchable:
            return record.first_category or ErrorCategory.TRUNCATED_STREAM
        if name != record.name or hash(arguments or "") != record.arguments_hash:
            return ErrorCategory.DIVERGENT_ASSEMBLY
        return None

    def _etf_after(
        self,
        execution: _Execution | None,
        refusal: ErrorCategory | None,
        error: BaseException | None,
        result: Any = None,
    ) -> None:
        if execution is None:
            return
        telemetry = self._etf_telemetry
        span = execution.span
        try:
            with internal_errors_swallowed("ending an execution"):
                otel_context.detach(execution.token)
            with internal_errors_swallowed("checking an execution's linkage"):
                if self._etf_conversation is not None and refusal is None:
                    finding = self._etf_conversation.result(execution.call_id)
                    if finding is not None:
                        telemetry.record_findings([finding], span)
                if refusal is not None:
                    span.set_attribute(A.ETF_GUARD_REFUSED, True)
                    if refusal.phase is Phase.LINKAGE:
                        telemetry.record_findings([Finding(refusal)], span)
        finally:
            try:
                telemetry.end_execution(
                    span,
                    execution.name,
                    execution.started,
                    error,
                    result,
                    error_type=refusal.value if refusal is not None else None,
                )
            except Exception:
                with internal_errors_swallowed("ending an execution"):
                    if span.is_recording():  # end_execution failed before ending it
                        span.end()
                    raise

    def _etf_execute(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        execution, refusal = self._etf_before(call)
        if refusal is not None:
            self._etf_after(execution, refusal, None)
            raise GuardRefusedError(refusal)
        try:
            result = self._etf_target(call, *args, **kwargs)
        except BaseException as error:
            self._etf_after(execution, None, error)
            raise
        self._etf_after(execution, None, None, result)
        return result

    async def _etf_async_execute(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        execution, refusal = self._etf_before(call)
        if refusal is not None:
            self._etf_after(execution, refusal, None)
            raise GuardRefusedError(refusal)
        try:
            result = await self._etf_target(call, *args, **kwargs)
        except BaseException as error:
            self._etf_after(execution, None, error)
            raise
        self._etf_after(execution, None, None, result)
        return result


@dataclass(frozen=True, slots=True)
class _Execution:
    """The telemetry state of one host execution between its start and its end."""

    span: Span
    name: str | None
    call_id: str | None
    token: Token[Context]
    started: float


class Instrumentation:
    """One setup of etf-otel: providers, configuration and the state its wrappers share.

    Reuse one instance for the streams and hosts of an application, so that an
    ``execute_tool`` span can be linked to the ``assemble_tool_call`` span of its id.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        provider_name: str | None = None,
        allow: Iterable[CompatibilityRule | str] = (),
        guard: bool = False,
        capture_content: bool | None = None,
    ) -> None:
        self.rules = IdentityRules.for_rules(allow)
        self.guard = guard
        self.telemetry = Telemetry(
            tracer_provider, meter_provider, provider_name=provider_name, capture_content=capture_content
        )

    def observer(
        self,
        conversation: Conversation | None = None,
        *,
        provider_name: str | None = None,
        tool_message_ids: Sequence[str | None] | None = None,
    ) -> ResponseObserver:
        return ResponseObserver(
            self.telemetry, self.rules, conversation, provider_name=provider_name, tool_message_ids=tool_message_ids
        )

    def stream(
        self,
        stream: Any,
        *,
        conversation: Conversation | None = None,
        provider_name: str | None = None,
        tool_message_ids: Sequence[str | None] | None = None,
    ) -> Any:
        """Wrap a sync or async iterable of chunks; returns it unchanged when disabled.

        ``tool_message_ids`` are the ``tool_call_id`` values of the tool messages the request
        that produced this stream carried; with a ``conversation`` they settle the previous
        response (``orphaned_result``, ``duplicate_result``, ``unanswered_call``).
        """
        if _disabled() or _suppressed():
            return stream
        try:
            observer = self.observer(conversation, provider_name=provider_name, tool_message_ids=tool_message_ids)
            if hasattr(stream, "__aiter__"):
                return ObservedAsyncStream(stream, observer)
            return ObservedStream(stream, observer)
        except Exception:
            with internal_errors_swallowed("wrapping a stream"):
                raise
        return stream  # pragma: no cover - reached only when the wrapping itself failed

    def assembler(self, assembler: Any, *, conversation: Conversation | None = None, **adapter: Any) -> Any:
        """Wrap an assembler; ``adapter`` names its methods (see :class:`ObservedAssembler`)."""
        if _disabled():
            return assembler
        return ObservedAssembler(assembler, self.observer(conversation), **adapter)

    def host(
        self,
        host: Any,
        *,
        method: str = "execute",
        conversation: Conversation | None = None,
        guard: bool | None = None,
        record_unverified_ids: bool = False,
    ) -> Any:
        """Wrap a tool host (an object with ``method``, or a callable taking the call)."""
        if _disabled():
            return host
        return ObservedHost(
            host,
            self.telemetry,
            method=method,
            conversation=conversation,
            guard=self.guard if guard is None else guard,
            record_unverified_ids=record_unverified_ids,
        )

    def end_conversation(self, conversation: Conversation) -> None:
        """The turn is over: record every proposal that never got a result."""
        with internal_errors_swallowed("ending a conversation"):
            self.telemetry.record_findings(conversation.end())


_default: Instrumentation | None = None
_default_lock = threading.Lock()


def _instrumentation(instrumentation: Instrumentation | None, config: dict[str, Any]) -> Instrumentation:
    global _default
    if instrumentation is not None:
        return instrumentation
    if config:
        return Instrumentation(**config)
    with _default_lock:
        if _default is None:
            _default = Instrumentation()
        return _default


def instrument_stream(
    stream: Any,
    *,
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    **config: Any,
) -> Any:
    """Observe a stream of Chat Completions chunks (sync or async). See :class:`Instrumentation`."""
    return _instrumentation(instrumentation, config).stream(stream, conversation=conversation)


def instrument_assembler(
    assembler: Any,
    *,
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    adapter: dict[str, Any] | None = None,
    **config: Any,
) -> Any:
    """Observe any assembler fed with chunks. See :class:`ObservedAssembler`."""
    return _instrumentation(instrumentation, config).assembler(assembler, conversation=conversation, **(adapter or {}))


def instrument_host(
    host: Any,
    *,
    method: str = "execute",
    conversation: Conversation | None = None,
    instrumentation: Instrumentation | None = None,
    guard: bool | None = None,
    record_unverified_ids: bool = False,
    **config: Any,
) -> Any:
    """Observe (or, with ``guard=True``, guard) a tool host's executions."""
    return _instrumentation(instrumentation, config).host(
        host, method=method, conversation=conversation, guard=guard, record_unverified_ids=record_unverified_ids
    )
