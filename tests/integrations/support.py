"""Helpers the integration tests share: instrumentor harness, wrapper inspection, stream consumption, checks."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

import wrapt
from opentelemetry.sdk.trace import ReadableSpan

from etf_otel import attributes as A
from etf_otel.integrations._instrumentor_base import ClientInstrumentor
from tests.conftest import Captured

InstrumentorT = TypeVar("InstrumentorT", bound=ClientInstrumentor)
HarnessT = TypeVar("HarnessT", bound="Harness[Any]")


class Harness(Generic[InstrumentorT]):
    """Instruments on demand with the captured providers; always uninstrumented afterwards (``with``)."""

    def __init__(self, captured: Captured) -> None:
        self.captured = captured
        self.instrumentor: InstrumentorT | None = None

    def providers(self) -> dict[str, Any]:
        """The captured providers, as the ``instrument_*`` keywords."""
        return {"tracer_provider": self.captured.tracer_provider, "meter_provider": self.captured.meter_provider}

    def close(self) -> None:
        if self.instrumentor is not None:
            self.instrumentor.uninstrument()
            self.instrumentor = None

    def __enter__(self: HarnessT) -> HarnessT:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Switch(Harness[InstrumentorT]):
    """A harness a test switches on and off (``on(**options)``, ``off()``) with the SDK's ``instrument_*``
    (:attr:`instrument_with`), for what changes between instrumenting twice (the guard, the providers)."""

    instrument_with: Callable[..., InstrumentorT]

    def on(self, **options: Any) -> InstrumentorT:
        self.instrumentor = type(self).instrument_with(**self.providers(), **options)
        return self.instrumentor

    def off(self) -> None:
        self.close()


def wrappers(cls: type, name: str = "create") -> list[Any]:
    """The objects whose methods wrap ``cls.<name>`` (wrapt wrappers), outermost first."""
    found = []
    target = cls.__dict__[name]
    while isinstance(target, (wrapt.FunctionWrapper, wrapt.BoundFunctionWrapper)):
        found.append(getattr(target._self_wrapper, "__self__", target._self_wrapper))
        target = target.__wrapped__
    return found


def hook_points(sdk: str) -> list[tuple[type, str]]:
    """The SDK's methods every call shape passes, which etf-otel wraps (etf_otel.integrations._sdk_hooks)."""
    import importlib

    base_client = importlib.import_module(f"{sdk}._base_client")
    response = importlib.import_module(f"{sdk}._response")
    points = [
        (base_client.SyncAPIClient, "request"),
        (base_client.AsyncAPIClient, "request"),
        (response.BaseAPIResponse, "_parse"),
    ]
    try:
        legacy = importlib.import_module(f"{sdk}._legacy_response")
    except ImportError:
        return points
    return [*points, (legacy.LegacyAPIResponse, "_parse")]


def hooked(sdk: str) -> list[str]:
    """The hook points of ``sdk`` that etf-otel wraps right now."""
    from etf_otel.integrations._sdk_hooks import SdkHooks

    return [
        f"{cls.__name__}.{name}"
        for cls, name in hook_points(sdk)
        if any(isinstance(owner, SdkHooks) and owner.sdk == sdk for owner in wrappers(cls, name))
    ]


def dump(item: Any) -> tuple[str, str]:
    """An item as the application saw it: its type and its JSON (``repr`` when it is not a model)."""
    if hasattr(item, "model_dump_json"):
        return type(item).__qualname__, item.model_dump_json(warnings=False)
    return type(item).__qualname__, repr(item)


def drain(stream: Iterable[Any], seen: list[tuple[str, str]], stop_after: int | None) -> None:
    """Iterate ``stream`` like an application does into ``seen``; ``stop_after`` breaks then closes."""
    for item in stream:
        seen.append(dump(item))
        if stop_after is not None and len(seen) >= stop_after:
            break
    if stop_after is not None:
        stream.close()  # type: ignore[attr-defined]


async def drain_async(stream: AsyncIterable[Any], seen: list[tuple[str, str]], stop_after: int | None) -> None:
    async for item in stream:
        seen.append(dump(item))
        if stop_after is not None and len(seen) >= stop_after:
            break
    if stop_after is not None:
        await stream.close()  # type: ignore[attr-defined]


def tool_spans(captured: Captured) -> list[ReadableSpan]:
    return captured.spans("assemble_tool_call")


def divergence_kinds(captured: Captured) -> list[str]:
    """The divergence kinds recorded on span events, sorted; each must be counted once on the metric too."""
    kinds = [
        str(event.attributes[A.ETF_DIVERGENCE_KIND])
        for span in captured.spans()
        for event in span.events
        if event.name == A.EVENT_INTEGRITY_VIOLATION and event.attributes and A.ETF_DIVERGENCE_KIND in event.attributes
    ]
    counted = captured.metric_sum("etf.integrity.violations", etf__error__category="divergent_assembly")
    assert counted == len(kinds), "every divergence is counted once on the metric too"
    return sorted(kinds)


def outcome_of(run: Callable[[], Any]) -> tuple[str, Any]:
    """What a caller observed: ``("ok", value)`` or ``("raised", (type, args))``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warnings on constructed models and quirks, wrapped or not
        try:
            return "ok", run()
        except Exception as error:
            return "raised", (type(error), error.args)


def in_span(captured: Captured, run: Callable[[], Any]) -> tuple[str, Any]:
    """:func:`outcome_of` inside an application span."""
    with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):
        return outcome_of(run)


def response_span(captured: Captured) -> ReadableSpan:
    """The one ``assemble_response`` span."""
    (span,) = captured.spans("assemble_response")
    return span


def by_id(spans: Sequence[ReadableSpan]) -> dict[Any, ReadableSpan]:
    return {span.attributes.get("gen_ai.tool.call.id"): span for span in spans}


def all_attribute_values(captured: Captured) -> list[Any]:
    """Every attribute value on every span, span event and metric point."""
    values: list[Any] = []
    for span in captured.spans():
        values.extend(span.attributes.values())
        for event in span.events:
            values.extend(event.attributes.values())
    for points in captured.metrics().values():
        for attributes, _ in points:
            values.extend(attributes.values())
    return values
