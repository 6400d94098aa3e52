"""The convenience functions share one setup per providers and options.

``instrument_stream(s, tracer_provider=tp)`` then ``instrument_host(h, guard=True,
tracer_provider=tp)`` must act like one ``Instrumentation(tp)`` wrapping both: the guarded
host sees the proposals the stream recorded and links its spans to them.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from etf_otel import ReferenceAssembler, assemble
from etf_otel.instrumentation import (
    AssemblerAdapter,
    GuardRefusedError,
    instrument_assembler,
    instrument_host,
    instrument_stream,
)
from etf_otel.instrumentation._convenience import shared_instrumentation
from etf_otel.testing.chat import case_stream

from ..conftest import Captured


class Host:
    def __init__(self) -> None:
        self.executed: list[Any] = []

    def execute(self, call: Any) -> str:
        self.executed.append(call)
        return "page text"


def _providers(captured: Captured) -> dict[str, Any]:
    return {"tracer_provider": captured.tracer_provider, "meter_provider": captured.meter_provider}


def test_guarded_host_executes_the_call_the_stream_proposed(captured: Captured) -> None:
    chunks = case_stream(None)
    assert list(instrument_stream(iter(chunks), **_providers(captured))) == chunks
    host = Host()
    guarded = instrument_host(host, guard=True, **_providers(captured))
    call = assemble(chunks).calls[0]

    assert guarded.execute(call) == "page text"

    assert host.executed == [call]
    (assembly,) = captured.spans("assemble_tool_call")
    (execution,) = captured.spans("execute_tool")
    attributes = dict(execution.attributes or {})
    assert attributes["gen_ai.tool.call.id"] == "call-a"
    assert "etf.guard.refused" not in attributes and "error.type" not in attributes
    assert [link.context.span_id for link in execution.links] == [assembly.context.span_id]
    (point,) = captured.metrics()["gen_ai.execute_tool.duration"]
    assert point[0] == {"gen_ai.tool.name": "read_page"}


def test_guarded_host_still_refuses_what_was_not_validly_proposed(captured: Captured) -> None:
    truncated = case_stream(None)[:2]  # no finish reason, no [DONE]
    list(instrument_stream(iter(truncated), **_providers(captured)))
    host = Host()
    guarded = instrument_host(host, guard=True, **_providers(captured))

    with pytest.raises(GuardRefusedError) as refused:
        guarded.execute(assemble(truncated).calls[0])
    assert refused.value.category.value == "truncated_stream"
    with pytest.raises(GuardRefusedError) as refused:
        guarded.execute({"id": "call-unknown", "function": {"name": "f", "arguments": "{}"}})
    assert refused.value.category.value == "orphaned_result"

    assert host.executed == []
    errors = [(span.attributes or {}).get("error.type") for span in captured.spans("execute_tool")]
    assert errors == ["truncated_stream", "orphaned_result"]


def test_different_providers_do_not_share(captured: Captured) -> None:
    other = Captured()
    chunks = case_stream(None)
    list(instrument_stream(iter(chunks), **_providers(captured)))
    host = Host()
    guarded = instrument_host(host, guard=True, **_providers(other))

    with pytest.raises(GuardRefusedError) as refused:
        guarded.execute(assemble(chunks).calls[0])
    assert refused.value.category.value == "orphaned_result"
    assert host.executed == []
    assert captured.spans("execute_tool") == []

    same = shared_instrumentation(**_providers(captured))
    assert shared_instrumentation(**_providers(other)) is not same
    mixed = shared_instrumentation(tracer_provider=captured.tracer_provider, meter_provider=other.meter_provider)
    assert mixed is not same and mixed is not shared_instrumentation(**_providers(other))


def test_none_shares_with_the_global_providers() -> None:
    explicit = shared_instrumentation(
        tracer_provider=trace.get_tracer_provider(), meter_provider=metrics.get_meter_provider()
    )
    assert shared_instrumentation() is explicit


def test_setup_options_split_setups_but_guard_does_not(captured: Captured, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    base = shared_instrumentation(**_providers(captured))
    assert shared_instrumentation(capture_content=False, **_providers(captured)) is base  # None resolved
    assert shared_instrumentation(capture_content=True, **_providers(captured)) is not base
    assert shared_instrumentation(provider_name="openai", **_providers(captured)) is not base
    allowed = shared_instrumentation(allow=["empty_continuation", "infer_missing_index"], **_providers(captured))
    assert allowed is not base
    assert (
        shared_instrumentation(allow=("infer_missing_index", "empty_continuation"), **_providers(captured)) is allowed
    )
    assert base.guard is False  # guard is the host wrapper's, never the setup's
    with pytest.raises(TypeError):
        instrument_stream(iter(()), guard=True, **_providers(captured))  # type: ignore[call-arg]


def test_assembler_and_host_share_too(captured: Captured) -> None:
    chunks = case_stream(None)
    for adapter in (None, AssemblerAdapter()):
        observed = instrument_assembler(ReferenceAssembler(), adapter=adapter, **_providers(captured))
        for item in chunks:
            if item == "[DONE]":
                observed.feed_done()
            else:
                observed.feed(item)
        observed.finish()
    host = Host()
    guarded = instrument_host(host, guard=True, **_providers(captured))
    guarded.execute(assemble(chunks).calls[0])
    assert len(host.executed) == 1
    assert len(captured.spans("execute_tool")[0].links) == 1


def test_shared_setups_do_not_keep_providers_alive() -> None:
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    meter_provider = MeterProvider(shutdown_on_exit=False)
    list(instrument_stream(iter(case_stream(None)), tracer_provider=tracer_provider, meter_provider=meter_provider))
    references = weakref.ref(tracer_provider), weakref.ref(meter_provider)
    del tracer_provider, meter_provider
    gc.collect()
    assert [reference() for reference in references] == [None, None]


def test_an_adapter_is_the_one_way_to_name_the_methods(captured: Captured) -> None:
    etf = captured.instrumentation()
    assert AssemblerAdapter(feed="add").feed == ("add",)
    with pytest.raises(TypeError):  # the separate keywords of before adapters existed are gone
        etf.assembler(ReferenceAssembler(), feed=("add",))  # type: ignore[call-overload]
    with pytest.raises(TypeError):  # so is a mapping of the adapter's fields
        instrument_assembler(ReferenceAssembler(), instrumentation=etf, adapter={"feed": ("add",)})  # type: ignore[call-overload]
