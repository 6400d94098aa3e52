"""Tool host wrappers: each execution becomes an ``execute_tool`` span (docs/guarantees.md).

The span carries the preserved call id and links to the ``assemble_tool_call`` span that
proposed it, when this process saw the proposal. In opt-in guard mode a call that is not
a valid proposal is refused with :class:`~etf_otel.errors.GuardRefusedError` before the
host runs; the guard is decided first and fails closed. The host's own return values and
exceptions pass through unchanged.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from contextvars import Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from etf_otel import attributes as A
from etf_otel import protocols
from etf_otel.core._identity import ABSENT
from etf_otel.core._linkage import Conversation, Finding
from etf_otel.core._vocabulary import ErrorCategory, Phase
from etf_otel.errors import GuardRefusedError
from etf_otel.instrumentation import _linkage as linkage
from etf_otel.instrumentation import _positional as positional
from etf_otel.instrumentation._registry import (
    ProposalRecord,
    arguments_value_hash,
    canonical_value_hash,
    guard_refusal,
)
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _suppressed
from etf_otel.instrumentation._telemetry import Telemetry
from etf_otel.protocols._base import field

__all__ = ["ObservedHost", "ToolFunction", "ToolHost", "call_fields"]

if TYPE_CHECKING:  # wrapt < 2.5 proxies are not subscriptable at run time
    _ObjectProxy = wrapt.ObjectProxy[Any]
else:
    _ObjectProxy = wrapt.ObjectProxy


class ToolHost(Protocol):
    """A tool host as :class:`ObservedHost` drives it by default: ``execute(call)``, sync or async.

    ``call`` is what the application dispatches: a :class:`~etf_otel.ToolCall`, an OpenAI
    tool-call dict or object. Extra arguments are passed through. A host whose method has
    another name is wrapped with ``method=``.
    """

    def execute(self, call: Any, /) -> Any: ...


ToolFunction = Callable[..., Any]
"""A host that is a plain function (or any callable) taking the call first, sync or async."""


def call_fields(call: object) -> tuple[str | None, str | None, object]:
    """``(id, name, arguments)`` of a call as hosts receive it.

    A registered protocol's own shape, as its description reads it (an OpenAI dict or object
    with ``function``, a Responses ``function_call`` item, an Anthropic ``tool_use`` block whose
    ``input`` is the parsed value), else ``id``, ``name``, ``arguments`` (our ToolCall, a plain
    dict). Arguments are the text when there is one, else the value.
    """
    for protocol in protocols.registered():
        fields = protocol.call_fields(call)
        if fields is not None:
            call_id, name, arguments = fields
            break
    else:
        call_id, name, arguments = field(call, "id"), field(call, "name"), field(call, "arguments")
    return (
        call_id if isinstance(call_id, str) else None,
        name if isinstance(name, str) else None,
        None if arguments is ABSENT else arguments,
    )


def _same_arguments(arguments: object, record: ProposalRecord) -> bool:
    """The host was handed the proposal's arguments: the same text, or the same JSON value.

    The value comparison needs the record's canonical hash, which setups that guard keep.
    """
    if isinstance(arguments, str):
        if hash(arguments) == record.arguments_hash:
            return True
        value_hash = arguments_value_hash(arguments)
    else:
        value_hash = canonical_value_hash(arguments)
    return value_hash is not None and value_hash == record.value_hash


class ObservedHost(_ObjectProxy):
    """A tool host whose executions become ``execute_tool`` spans keyed by the preserved id.

    A transparent proxy (``wrapt``): ``isinstance`` and every attribute are the host's own but
    ``method`` (and calling the proxy), which run the host observed. Constructing one gives an
    instance of the subclass made once per method name and sync/async kind.
    """

    def __new__(cls, host: object, telemetry: Telemetry, *, method: str = "execute", **options: Any) -> ObservedHost:
        if cls is ObservedHost:
            cls = _shaped(method, inspect.iscoroutinefunction(_target(host, method)))
        observed: ObservedHost = super().__new__(cls)
        return observed

    def __init__(
        self,
        host: object,
        telemetry: Telemetry,
        *,
        method: str = "execute",
        conversation: Conversation | None = None,
        guard: bool = False,
        record_unverified_ids: bool = False,
    ) -> None:
        super().__init__(host)
        self._self_telemetry = telemetry
        self._self_conversation = conversation
        self._self_guard = guard
        self._self_record_unverified = record_unverified_ids
        self._self_target = _target(host, method)

    def _self_before(self, call: Any) -> tuple[_Execution | None, ErrorCategory | None, GuardRefusedError | None]:
        """Decide the guard, then start the span (``None`` when telemetry is off or failed).

        The guard does not depend on telemetry: it is decided first, also when tracing is
        suppressed, and a failure while deciding refuses the call (fail closed).
        """
        telemetry = self._self_telemetry
        refusal: ErrorCategory | None = None
        call_id = name = arguments = None
        record: ProposalRecord | None = None
        slot: positional.PositionalCall | None = None
        try:
            call_id, name, arguments = call_fields(call)
            slot = None if call_id else positional.take(telemetry, name)
            record = slot.record if slot is not None else telemetry.proposals.get(call_id) if call_id else None
            if self._self_guard:
                refusal = self._self_refusal(call_id if slot is None else "", record, name, arguments, slot)
        except Exception:
            if self._self_guard:
                refusal = ErrorCategory.ORPHANED_RESULT
        refused = None
        if refusal is not None:
            refused = GuardRefusedError(refusal, tool=name)  # should what follows fail: the category alone
            with internal_errors_swallowed("describing a refusal"):
                refused = guard_refusal(refusal, name, record, call_id, telemetry.proposals)
        if _suppressed():
            return None, refusal, refused
        with internal_errors_swallowed("starting an execution"):
            span = telemetry.start_execution(call_id, name, record, self._self_record_unverified)
            if slot is not None and span.is_recording():
                span.set_attributes({A.ETF_CHOICE_INDEX: slot.choice, A.ETF_TOOL_CALL_INDEX: slot.index})
            token = otel_context.attach(trace.set_span_in_context(span))
            return _Execution(span, name, call_id, token, time.perf_counter(), slot is not None), refusal, refused
        return None, refusal, refused

    @staticmethod
    def _self_refusal(
        call_id: str | None,
        record: ProposalRecord | None,
        name: str | None,
        arguments: object,
        slot: positional.PositionalCall | None = None,
    ) -> ErrorCategory | None:
        if not call_id and slot is None:
            return ErrorCategory.MISSING_ID
        if record is None:
            return ErrorCategory.ORPHANED_RESULT
        if not record.dispatchable:
            return record.first_category or ErrorCategory.TRUNCATED_STREAM
        if name != record.name or not _same_arguments(arguments if arguments is not None else "", record):
            return ErrorCategory.DIVERGENT_ASSEMBLY
        return None

    def _self_after(
        self,
        execution: _Execution | None,
        refusal: ErrorCategory | None,
        error: BaseException | None,
        result: Any = None,
    ) -> None:
        if execution is None:
            return
        telemetry = self._self_telemetry
        span = execution.span
        try:
            with internal_errors_swallowed("ending an execution"):
                otel_context.detach(execution.token)
            with internal_errors_swallowed("checking an execution's linkage"):
                if self._self_conversation is not None and refusal is None and not execution.positional:
                    finding = linkage.result(self._self_conversation, execution.call_id)
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

    def _self_execute(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        execution, refusal, refused = self._self_before(call)
        if refusal is not None:
            self._self_after(execution, refusal, None)
            raise refused or GuardRefusedError(refusal)
        try:
            result = self._self_target(call, *args, **kwargs)
        except BaseException as error:
            self._self_after(execution, None, error)
            raise
        self._self_after(execution, None, None, result)
        return result

    async def _self_async_execute(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        execution, refusal, refused = self._self_before(call)
        if refusal is not None:
            self._self_after(execution, refusal, None)
            raise refused or GuardRefusedError(refusal)
        try:
            result = await self._self_target(call, *args, **kwargs)
        except BaseException as error:
            self._self_after(execution, None, error)
            raise
        self._self_after(execution, None, None, result)
        return result


def _target(host: object, method: str) -> Callable[..., Any]:
    """What runs a call: the host's ``method``, or the host itself when it is a callable without one."""
    target: Callable[..., Any] = host if callable(host) and not hasattr(host, method) else getattr(host, method)
    return target


@functools.lru_cache(maxsize=64)
def _shaped(method: str, is_async: bool) -> type[ObservedHost]:
    """The proxy class whose ``method`` and ``__call__`` run the host observed, made once per shape."""
    execute = ObservedHost._self_async_execute if is_async else ObservedHost._self_execute
    return type("ObservedHost", (ObservedHost,), {method: execute, "__call__": execute})


@dataclass(frozen=True, slots=True)
class _Execution:
    """The telemetry state of one host execution between its start and its end."""

    span: Span
    name: str | None
    call_id: str | None
    token: Token[Context]
    started: float
    positional: bool = False
    """An id-less call found by name and order (:mod:`~etf_otel.instrumentation._positional`):
    its result is linked by the next request, not by an id."""
