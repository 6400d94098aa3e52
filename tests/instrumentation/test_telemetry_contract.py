"""Exact names, kinds, attribute names and value types of docs/telemetry.md."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from etf_otel import assemble
from etf_otel.core.linkage import Conversation

from ..chunks import MISSING, case_stream, chunk, finished, fragment
from ..conftest import Captured


def _consume(stream: Any) -> list[Any]:
    return list(stream)


def test_case_study_target_stream_spans(captured: Captured) -> None:
    instrumentation = captured.instrumentation(provider_name="openai")
    chunks = case_stream(None)
    tracer = captured.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("agent turn") as parent:
        assert _consume(instrumentation.stream(iter(chunks))) == chunks
    (call_span,) = captured.spans("assemble_tool_call")
    (stream_span,) = captured.spans("assemble_response")
    assert call_span.name == "assemble_tool_call read_page"
    assert call_span.kind is SpanKind.INTERNAL
    assert call_span.instrumentation_scope is not None and call_span.instrumentation_scope.name == "etf_otel"
    assert stream_span.parent is not None and stream_span.parent.span_id == parent.get_span_context().span_id
    assert call_span.parent is not None and call_span.parent.span_id == stream_span.context.span_id
    assert call_span.context.trace_id == parent.get_span_context().trace_id
    assert dict(call_span.attributes or {}) == {
        "gen_ai.tool.call.id": "call-a",
        "gen_ai.tool.name": "read_page",
        "gen_ai.provider.name": "openai",
        "etf.choice.index": 0,
        "etf.tool_call.index": 0,
        "etf.tool_call.fragments": 2,
        "etf.tool_call.verdict": "proposed",
        "etf.id.kept_null": 1,
    }
    assert call_span.status.status_code is StatusCode.UNSET
    assert call_span.events == ()
    assert call_span.start_time is not None and call_span.end_time is not None
    assert call_span.start_time <= call_span.end_time
    stream_attributes = dict(stream_span.attributes or {})
    assert stream_attributes["etf.stream.state"] == "completed"
    assert tuple(stream_attributes["gen_ai.response.finish_reasons"]) == ("tool_calls",)
    assert stream_attributes["etf.stream.slots"] == 1
    assert stream_attributes["etf.stream.fragments"] == 2
    assert stream_attributes["etf.stream.dispatchable"] is True


def test_rejected_call_span_has_error_status_and_bounded_events(captured: Captured) -> None:
    instrumentation = captured.instrumentation()
    stream = finished(
        chunk(fragment(0, "call-a", "read_page", "{")),
        *[chunk(fragment(0, f"call-other-{n}")) for n in range(20)],
        chunk(fragment(0, arguments="}")),
    )
    _consume(instrumentation.stream(iter(stream)))
    (span,) = captured.spans("assemble_tool_call")
    attributes = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.ERROR
    assert attributes["error.type"] == "id_conflict"
    assert attributes["etf.tool_call.verdict"] == "rejected"
    assert attributes["gen_ai.tool.call.id"] == "call-a"
    assert attributes["etf.identity.rejected.dropped"] == 4
    assert len(span.events) == 16
    event = span.events[0]
    assert event.name == "etf.identity.rejected"
    assert dict(event.attributes or {}) == {
        "etf.error.category": "id_conflict",
        "etf.id.kind": "string",
        "etf.id.prior_present": True,
        "etf.id.empty": False,
        "etf.id.transition": "reject",
        "etf.tool_call.index": 0,
        "etf.choice.index": 0,
    }
    for recorded in captured.exporter.get_finished_spans():
        assert "call-other" not in repr(dict(recorded.attributes or {}))
        assert all("call-other" not in repr(dict(e.attributes or {})) for e in recorded.events)


def test_call_without_established_id_has_no_call_id_attribute(captured: Captured) -> None:
    instrumentation = captured.instrumentation()
    _consume(instrumentation.stream(iter(finished(chunk(fragment(0, None, "f", "{}"))))))
    (span,) = captured.spans("assemble_tool_call")
    assert "gen_ai.tool.call.id" not in (span.attributes or {})
    assert (span.attributes or {})["error.type"] == "initial_null"


def test_metrics_names_attributes_and_values(captured: Captured) -> None:
    instrumentation = captured.instrumentation(provider_name="openai")
    _consume(instrumentation.stream(iter(case_stream(None))))
    _consume(instrumentation.stream(iter(finished(chunk(fragment(0, "call-b", "f", "{")), chunk(fragment(0, ""))))))
    _consume(instrumentation.stream(iter(case_stream(None)[:2])))
    metrics = captured.metrics()
    assert set(metrics) == {
        "etf.tool_call.fragments",
        "etf.tool_call.id_transitions",
        "etf.tool_call.identity_errors",
        "etf.tool_calls",
        "etf.streams",
    }
    assert captured.metric_sum("etf.tool_call.fragments") == 6
    assert (
        captured.metric_sum("etf.tool_call.id_transitions", etf__id__transition="keep_null", etf__id__kind="null") == 2
    )
    assert metrics["etf.tool_call.identity_errors"] == [
        (
            {
                "etf.error.category": "empty_after_established",
                "etf.id.kind": "string",
                "etf.id.prior_present": True,
                "etf.id.empty": True,
                "gen_ai.provider.name": "openai",
            },
            1,
        )
    ]
    assert captured.metric_sum("etf.streams", etf__stream__state="completed") == 2
    assert captured.metric_sum("etf.streams", etf__stream__state="truncated") == 1
    assert (
        captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed", gen_ai__tool__name="read_page") == 1
    )
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="rejected") == 2
    for points in metrics.values():
        for attributes, _ in points:
            assert "gen_ai.tool.call.id" not in attributes
            assert not any("call-" in str(value) for value in attributes.values())


def test_setups_sharing_a_meter_provider_count_into_the_same_counters(captured: Captured) -> None:
    """The SDK keeps only the first observable counter of a name: a second setup must not be lost."""
    first = captured.instrumentation(provider_name="openai")
    second = captured.instrumentation(provider_name="openai")
    _consume(first.stream(iter(case_stream(None))))
    _consume(second.stream(iter(case_stream(None))))
    _consume(second.stream(iter(case_stream(None))))
    assert captured.metric_sum("etf.streams", etf__stream__state="completed") == 3
    assert captured.metric_sum("etf.tool_call.fragments") == 6


_GLOBAL_PROVIDER_SET_LATE = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from etf_otel.instrumentation import Instrumentation
from tests.chunks import case_stream

before = Instrumentation()  # no provider set yet: counters go through the API's proxy
list(before.stream(iter(case_stream(None))))
reader = InMemoryMetricReader()
provider = MeterProvider(metric_readers=[reader])
metrics.set_meter_provider(provider)
list(before.stream(iter(case_stream(None))))
list(Instrumentation().stream(iter(case_stream(None))))
list(Instrumentation(meter_provider=provider).stream(iter(case_stream(None))))
data = reader.get_metrics_data()
print(sum(point.value for resource in data.resource_metrics for scope in resource.scope_metrics
          for metric in scope.metrics if metric.name == "etf.streams" for point in metric.data.data_points))
"""


def test_setups_before_and_after_the_global_meter_provider_is_set_all_count() -> None:
    """The global provider set late: the proxy's counters and the later setups' must not collide."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-c", _GLOBAL_PROVIDER_SET_LATE], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "4"


def test_counters_are_monotonic_sums_in_either_temporality() -> None:
    """Totals are kept cumulatively; a delta reader gets what changed since its last collection."""
    from opentelemetry.sdk.metrics import MeterProvider, ObservableCounter
    from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader, Sum

    from etf_otel.instrumentation import Instrumentation

    delta = InMemoryMetricReader(preferred_temporality={ObservableCounter: AggregationTemporality.DELTA})
    cumulative = InMemoryMetricReader()
    instrumentation = Instrumentation(meter_provider=MeterProvider(metric_readers=[delta, cumulative]))

    def streams(reader: InMemoryMetricReader) -> tuple[bool, AggregationTemporality, int]:
        data = reader.get_metrics_data()
        assert data is not None
        metric = next(
            metric
            for scope in data.resource_metrics[0].scope_metrics
            for metric in scope.metrics
            if metric.name == "etf.streams"
        )
        assert isinstance(metric.data, Sum)
        return metric.data.is_monotonic, metric.data.aggregation_temporality, metric.data.data_points[0].value

    _consume(instrumentation.stream(iter(case_stream(None))))
    _consume(instrumentation.stream(iter(case_stream(None))))
    assert streams(delta) == (True, AggregationTemporality.DELTA, 2)
    assert streams(cumulative) == (True, AggregationTemporality.CUMULATIVE, 2)
    _consume(instrumentation.stream(iter(case_stream(None))))
    assert streams(delta) == (True, AggregationTemporality.DELTA, 1)
    assert streams(cumulative) == (True, AggregationTemporality.CUMULATIVE, 3)


def test_tool_names_on_metrics_are_capped(captured: Captured) -> None:
    instrumentation = captured.instrumentation()
    instrumentation.telemetry.tool_name_label.__init__(2)  # type: ignore[misc]
    for name in ("a", "b", "c", "d"):
        _consume(instrumentation.stream(iter(finished(chunk(fragment(0, f"call-{name}", name, "{}"))))))
    names = {attributes["gen_ai.tool.name"] for attributes, _ in captured.metrics()["etf.tool_calls"]}
    assert names == {"a", "b", "_OTHER"}


def test_execute_tool_span_links_to_its_assembly_and_records_duration(captured: Captured) -> None:
    instrumentation = captured.instrumentation(provider_name="openai")
    result = assemble(case_stream(None))
    _consume(instrumentation.stream(iter(case_stream(None))))

    class Host:
        def execute(self, call: Any) -> str:
            assert trace.get_current_span().is_recording()
            return "page text"

    host = instrumentation.host(Host())
    assert host.execute(result.calls[0]) == "page text"
    (assembly,) = captured.spans("assemble_tool_call")
    (execution,) = captured.spans("execute_tool")
    assert execution.name == "execute_tool read_page"
    assert execution.kind is SpanKind.INTERNAL
    assert dict(execution.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "read_page",
        "gen_ai.tool.call.id": "call-a",
        "gen_ai.tool.type": "function",
        "gen_ai.provider.name": "openai",
    }
    assert [link.context.span_id for link in execution.links] == [assembly.context.span_id]
    (point,) = captured.metrics()["gen_ai.execute_tool.duration"]
    assert point[0] == {"gen_ai.tool.name": "read_page"}
    assert point[1].count == 1
    assert list(point[1].explicit_bounds)[:3] == [0.005, 0.01, 0.025]


def test_host_error_sets_error_type_and_is_reraised(captured: Captured) -> None:
    instrumentation = captured.instrumentation()

    class Boom(RuntimeError):
        pass

    error = Boom("disk full")

    def host(call: Any) -> None:
        raise error

    wrapped = instrumentation.host(host)
    with pytest.raises(Boom) as raised:
        wrapped({"id": "call-x", "type": "function", "function": {"name": "save", "arguments": "{}"}})
    assert raised.value is error
    (span,) = captured.spans("execute_tool")
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "test_host_error_sets_error_type_and_is_reraised.<locals>.Boom"
    assert "gen_ai.tool.call.id" not in (span.attributes or {})  # never proposed here: not a preserved id
    (point,) = captured.metrics()["gen_ai.execute_tool.duration"]
    assert point[0]["error.type"].endswith("Boom")


def test_linkage_findings_become_events_and_metrics(captured: Captured) -> None:
    instrumentation = captured.instrumentation()
    conversation = Conversation()
    two_calls = finished(chunk(fragment(0, "call-a", "f", "{}"), fragment(1, "call-b", "g", "{}")))
    _consume(instrumentation.stream(iter(two_calls), conversation=conversation))
    host = instrumentation.host(lambda call: "ok", conversation=conversation)
    host({"id": "call-a", "function": {"name": "f", "arguments": "{}"}})
    host({"id": "call-a", "function": {"name": "f", "arguments": "{}"}})
    host({"id": "call-zzz", "function": {"name": "f", "arguments": "{}"}})
    _consume(instrumentation.stream(iter(case_stream(MISSING)), conversation=conversation))
    violations = {a["etf.error.category"]: v for a, v in captured.metrics()["etf.integrity.violations"]}
    assert violations == {"duplicate_result": 1, "orphaned_result": 1, "unanswered_call": 1}
    executions = captured.spans("execute_tool")
    assert [[e.attributes["etf.error.category"] for e in s.events] for s in executions] == [  # type: ignore[index]
        [],
        ["duplicate_result"],
        ["orphaned_result"],
    ]
    instrumentation.end_conversation(conversation)
    violations = {a["etf.error.category"]: v for a, v in captured.metrics()["etf.integrity.violations"]}
    assert violations["unanswered_call"] == 2


def test_guard_mode_refuses_calls_that_are_not_valid_proposals(captured: Captured) -> None:
    from etf_otel.instrumentation import GuardRefusedError

    instrumentation = captured.instrumentation(guard=True)
    executed: list[Any] = []
    host = instrumentation.host(executed.append)
    truncated = assemble(case_stream(None)[:2])
    _consume(instrumentation.stream(iter(case_stream(None)[:2])))
    with pytest.raises(GuardRefusedError) as refused:
        host(truncated.calls[0])
    assert refused.value.category.value == "truncated_stream"
    assert "call-a" not in str(refused.value)
    with pytest.raises(GuardRefusedError):
        host({"id": "call-unknown", "function": {"name": "f", "arguments": "{}"}})
    assert executed == []
    complete = assemble(case_stream(None))
    _consume(instrumentation.stream(iter(case_stream(None))))
    host(complete.calls[0])
    assert executed == [complete.calls[0]]
    refusals = [s for s in captured.spans("execute_tool") if (s.attributes or {}).get("etf.guard.refused")]
    assert [(s.attributes or {})["error.type"] for s in refusals] == ["truncated_stream", "orphaned_result"]


def test_content_capture_is_opt_in_and_truncated(captured: Captured, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    instrumentation = captured.instrumentation()
    instrumentation.telemetry.max_content_chars = 5
    _consume(instrumentation.stream(iter(case_stream(None))))
    (span,) = captured.spans("assemble_tool_call")
    assert (span.attributes or {})["gen_ai.tool.call.arguments"] == '{"pag…[truncated]'


def test_disabled_instrumentation_returns_objects_unchanged(
    captured: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "requests, etf_otel")
    instrumentation = captured.instrumentation()
    stream = iter(case_stream(None))
    assert instrumentation.stream(stream) is stream
    host = object()
    assert instrumentation.host(host) is host


def test_suppressed_context_records_nothing(captured: Captured) -> None:
    from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

    instrumentation = captured.instrumentation()
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        _consume(instrumentation.stream(iter(case_stream(None))))
        instrumentation.host(lambda call: None)({"id": "call-a"})
    finally:
        detach(token)
    assert captured.exporter.get_finished_spans() == ()
