"""What the instrumentors (``openai``, ``anthropic``, ``mcp``) share: their options, their setup,
what a request decided before it was sent, and the removal of their own wrappers.

``instrument(**options)`` takes the keywords of :class:`InstrumentorOptions`. An unknown one (a
typo such as ``tracer_provder``) would otherwise be dropped without a word, leaving the
application on the global provider: it is reported once per name, as a warning on the
``etf_otel`` logger, and never raised (``opentelemetry-instrument`` must keep starting).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypedDict, TypeVar

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.dependencies import get_dependency_conflicts
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from etf_otel.core._identity import CompatibilityRule
from etf_otel.core._linkage import Conversation
from etf_otel.core._pairing_model import PairingCheck
from etf_otel.core._results import AssemblyResult
from etf_otel.errors import RequestPairingError
from etf_otel.instrumentation._config import environment_max_conversations
from etf_otel.instrumentation._request_pairing import record_refused
from etf_otel.instrumentation._setup import Instrumentation
from etf_otel.instrumentation._streams import observer_of
from etf_otel.integrations._conversation import DEFAULT_MAX_CONVERSATIONS
from etf_otel.protocols import CHAT_COMPLETIONS, WireProtocol

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "ClientInstrumentor",
    "InstrumentorOptions",
    "Method",
    "Prepared",
    "dependency_met",
    "instrumented",
    "rejected_by",
    "remove_own_wrapper",
    "report_unknown_options",
    "unwrap_methods",
    "wrap_methods",
]

_logger = logging.getLogger("etf_otel")

Method = tuple[str, str, Callable[..., Any]]
"""``(class name, method name, wrapper)``: a method of an SDK module that an instrumentor wraps."""


class InstrumentorOptions(TypedDict, total=False):
    """The keywords of ``instrument()``; one left out (or ``None``) takes its environment variable."""

    tracer_provider: trace.TracerProvider | None
    meter_provider: metrics.MeterProvider | None
    provider_name: str | None
    """``gen_ai.provider.name`` for every response, instead of the one detected per client."""
    allow: Iterable[CompatibilityRule | str] | None
    deny: Iterable[CompatibilityRule | str] | None
    """Rules turned off, a default one too (``absent_arguments_in_body``); wins over ``allow``."""
    guard: bool | None
    guard_requests: bool | None
    """Refuse a request whose pairing the provider refuses (``RequestPairingError``) before it is sent."""
    capture_content: bool | None
    max_conversations: int | None
    """How many conversations each index of linkage remembers (least recently used out first)."""
    skip_dep_check: bool
    """``BaseInstrumentor``'s: do not check the instrumented library's version."""
    raise_exception_on_conflict: bool
    """``BaseInstrumentor``'s: raise instead of logging a version conflict."""


_KNOWN: Final = frozenset(InstrumentorOptions.__annotations__)
_reported: set[str] = set()
_reported_lock = threading.Lock()


def report_unknown_options(options: Mapping[str, object]) -> None:
    """Warn once per name about each option ``instrument()`` does not know (it is ignored)."""
    for name in sorted(set(options) - _KNOWN):
        with _reported_lock:
            if name in _reported:
                continue
            _reported.add(name)
        _logger.warning(
            "etf-otel: unknown instrument() option %r is ignored; the options are: %s", name, ", ".join(sorted(_KNOWN))
        )


class ClientInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """What the instrumentors share: the :class:`Instrumentation` their ``instrument()`` options build.

    ``instrument(**options)`` (:class:`InstrumentorOptions`): an option left out (or ``None``)
    takes its environment variable (:mod:`etf_otel.instrumentation._config`), read once, in
    ``instrument()``; a given option wins over it.
    """

    _instrumentation: Instrumentation | None = None
    _provider_override: str | None = None

    def instrument(self, **options: Unpack[InstrumentorOptions]) -> None:
        """Instrument the SDK (``BaseInstrumentor.instrument``, with the options typed)."""
        super().instrument(**options)

    @property
    def instrumentation(self) -> Instrumentation | None:
        """The shared setup; use ``.host(...)`` on it so executions link to their assemblies."""
        return self._instrumentation

    def _set_up(self, options: Mapping[str, Any]) -> tuple[Instrumentation, int]:
        """The setup ``instrument(**options)`` describes (options over environment), and its ``max_conversations``.

        A configured provider name (option or environment) overrides the one detected per client.
        """
        report_unknown_options(options)
        instrumentation = Instrumentation(
            options.get("tracer_provider"),
            options.get("meter_provider"),
            provider_name=options.get("provider_name"),
            allow=options.get("allow"),
            deny=options.get("deny"),
            guard=options.get("guard"),
            capture_content=options.get("capture_content"),
            guard_requests=options.get("guard_requests"),
        )
        self._instrumentation = instrumentation
        self._provider_override = instrumentation.provider_name
        capacity: int | None = options.get("max_conversations")
        if capacity is None:
            capacity = environment_max_conversations() or DEFAULT_MAX_CONVERSATIONS
        return instrumentation, capacity


_Instrumentor = TypeVar("_Instrumentor", bound=ClientInstrumentor)


def instrumented(instrumentor: _Instrumentor, options: InstrumentorOptions) -> _Instrumentor:
    """``instrumentor``, instrumented with ``options`` (the body of the ``instrument_*`` one-liners)."""
    instrumentor.instrument(**options)
    return instrumentor


@dataclass(slots=True)
class Prepared:
    """What one model request decided before it was sent: how its response is to be observed."""

    provider_name: str | None
    conversation: Conversation | None = None
    """The conversation it continues (or starts); ``None``: not linked."""
    result_ids: list[str | None] | None = None
    """The ids of the results it carries, which settle the conversation's previous response."""
    protocol: WireProtocol = CHAT_COMPLETIONS
    request_key: bytes | None = None
    """The Responses API's fingerprint of the request's input."""
    ambiguous: bool = False
    """It carried results whose evidence pointed to no single response (``etf.linkage.ambiguous``)."""
    taken: bool = False
    """Its response was handed to the instrumentor once already (:mod:`etf_otel.integrations._sdk_hooks`)."""
    pairing: PairingCheck | None = None
    """What the check of its history found (``etf.request.pairing``); ``None``: not checked."""
    refusal: RequestPairingError | None = None
    """The request guard's refusal: raised instead of sending the request."""
    started_ns: int = field(default_factory=time.time_ns)
    parent: Context | None = field(default_factory=otel_context.get_current)
    """Where its response's span goes, and from when: the request was prepared there and then."""

    def observe_parsed(self, instrumentation: Instrumentation, parsed: Any, is_stream: bool) -> Any:
        """What the application gets for the SDK's ``parsed`` response: a stream observed (:meth:`observe`),
        a complete body recorded (:meth:`record`) and returned as it is."""
        if is_stream:
            return self.observe(instrumentation, parsed)
        self.record(instrumentation, parsed)
        return parsed

    def observe(self, instrumentation: Instrumentation, stream: Any) -> Any:
        """``stream`` observed as this request decided (``Instrumentation.stream``)."""
        observed = instrumentation.stream(
            stream,
            conversation=self.conversation,
            provider_name=self.provider_name,
            tool_message_ids=self.result_ids,
            protocol=self.protocol,
        )
        if self.ambiguous or self.pairing is not None:
            observer = observer_of(observed)
            if observer is not None:
                observer.linkage_ambiguous = self.ambiguous
                observer.pairing = self.pairing
        return observed

    def record(self, instrumentation: Instrumentation, body: Any) -> AssemblyResult | None:
        """A complete body, recorded as this request decided (``Instrumentation.response``)."""
        return instrumentation.response(
            body,
            conversation=self.conversation,
            provider_name=self.provider_name,
            tool_message_ids=self.result_ids,
            protocol=self.protocol,
            linkage_ambiguous=self.ambiguous,
            pairing=self.pairing,
        )

    def refused(self, instrumentation: Instrumentation, error: BaseException, provider_refused: bool) -> None:
        """The request got no response: refused by the provider (``provider_refused``) or by the request guard."""
        record_refused(
            instrumentation.telemetry,
            error,
            check=self.pairing,
            provider_name=self.provider_name,
            protocol=self.protocol.name,
            started_ns=self.started_ns,
            parent=self.parent,
            provider_refused=provider_refused,
        )


def dependency_met(dependency: str, otherwise: str) -> bool:
    """Whether the imported package is one this version of etf-otel knows, else one warning saying ``otherwise``.

    ``opentelemetry-instrument`` skips ``instrumentation_dependencies`` (it checks only the
    distribution's ``instruments`` extra, which etf-otel does not declare): each instrumentor asks
    when its package is imported.
    """
    conflict = get_dependency_conflicts([dependency])
    if conflict is not None:
        _logger.warning("etf-otel: %s; %s", conflict, otherwise)
        return False
    return True


def rejected_by(instrumentation: Instrumentation) -> Callable[[str], bool]:
    """Whether the rules rejected a call with that id, as the setup's proposal registry remembers."""
    proposals = instrumentation.telemetry.proposals

    def rejected(call_id: str) -> bool:
        record = proposals.get(call_id)
        return record is not None and not record.dispatchable

    return rejected


def wrap_methods(module: str | ModuleType, methods: Sequence[Method]) -> None:
    """Wrap each ``(class name, method name, wrapper)`` of ``module`` (wrapt)."""
    for cls, name, wrapper in methods:
        wrapt.wrap_function_wrapper(module, f"{cls}.{name}", wrapper)


def unwrap_methods(module: ModuleType, methods: Sequence[Method]) -> None:
    """Undo :func:`wrap_methods` (:func:`remove_own_wrapper` on each method)."""
    for cls, name, wrapper in methods:
        remove_own_wrapper(getattr(module, cls), wrapper, name)


def remove_own_wrapper(owner: Any, wrapper: Any, name: str = "create") -> None:
    """Remove our wrapper from ``owner.<name>`` (a class or a module) wherever it sits in a chain of
    wrapt wrappers.

    ``opentelemetry.instrumentation.utils.unwrap`` removes the outermost wrapper, which is
    another instrumentation's when it wrapped the method after us.
    """
    outer: Any = None
    current: Any = vars(owner).get(name)
    while isinstance(current, (wrapt.FunctionWrapper, wrapt.BoundFunctionWrapper)):
        if current._self_wrapper == wrapper:
            if outer is None:
                setattr(owner, name, current.__wrapped__)
            else:
                outer.__wrapped__ = current.__wrapped__
            return
        outer, current = current, current.__wrapped__
