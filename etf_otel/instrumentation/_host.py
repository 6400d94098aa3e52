"""Tool host wrappers: each execution becomes an ``execute_tool`` span (docs/guarantees.md).

The span carries the preserved call id and links to the ``assemble_tool_call`` span that
proposed it, when this process saw the proposal. In opt-in guard mode a call that is not
a valid proposal is refused with :class:`~etf_otel.errors.GuardRefusedError` before the
host runs; the guard is decided first and fails closed. The host's own return values and
exceptions pass through unchanged.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from contextvars import Token
from dataclasses import dataclass
from typing import Any, Protocol

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
from etf_otel.instrumentation._registry import ProposalRecord, arguments_value_hash, canonical_value_hash
from etf_otel.instrumentation._safety import internal_errors_swallowed
from etf_otel.instrumentation._switches import _suppressed
from etf_otel.instrumentation._telemetry import Telemetry
from etf_otel.protocols._base import field

__all__ = ["ObservedHost", "ToolFunction", "ToolHost", "call_fields"]


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


class ObservedHost:
    """A tool host whose executions become ``execute_tool`` spans keyed by the preserved id."""

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
            call_id, name, arguments = call_fields(call)
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
        call_id: str | None, record: ProposalRecord | None, name: str | None, arguments: object
    ) -> ErrorCategory | None:
        if not call_id:
            return ErrorCategory.MISSING_ID
        if record is None:
            return ErrorCategory.ORPHANED_RESULT
        if not record.dispatchable:
            return record.first_category or ErrorCategory.TRUNCATED_STREAM
        if name != record.name or not _same_arguments(arguments if arguments is not None else "", record):
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
                    finding = linkage.result(self._etf_conversation, execution.call_id)
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
