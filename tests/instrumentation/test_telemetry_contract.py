"""Exact names, kinds, attribute names and value types of docs/telemetry.md."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from etf_otel import assemble
from etf_otel.core._identity import ABSENT, IdentityRules
from etf_otel.core._lifecycle import LifecycleSlots
from etf_otel.core._linkage import Conversation
from etf_otel.core._results import AssemblyResult
from etf_otel.core._vocabulary import ResponseEnd, StreamState, Transition
from etf_otel.protocols import WireProtocol
from etf_otel.testing.chat import MISSING, case_stream, chunk, finished, fragment

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
    assert tuple(stream_attributes.pop("gen_ai.response.finish_reasons")) == ("tool_calls",)
    assert stream_attributes == {
        "etf.response.streamed": True,
        "etf.stream.state": "completed",
        "etf.stream.slots": 1,
        "etf.stream.fragments": 2,
        "etf.stream.dispatchable": True,
        "gen_ai.provider.name": "openai",
        "etf.protocol": "chat_completions",
    }
    assert stream_span.status.status_code is StatusCode.UNSET


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
    assert metrics["etf.streams"] == [
        ({"etf.stream.state": "completed", "etf.protocol": "chat_completions", "gen_ai.provider.name": "openai"}, 2),
        ({"etf.stream.state": "truncated", "etf.protocol": "chat_completions", "gen_ai.provider.name": "openai"}, 1),
    ]
    assert (
        captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed", gen_ai__tool__name="read_page") == 1
    )
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="rejected") == 2
    for name, points in metrics.items():
        for attributes, _ in points:
            assert "gen_ai.tool.call.id" not in attributes
            assert not any("call-" in str(value) for value in attributes.values())
            assert ("etf.protocol" in attributes) is (name == "etf.streams"), name  # kept off the other counters


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
from etf_otel.testing.chat import case_stream

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


@pytest.mark.parametrize(
    ("handed", "runs"),
    [
        ({"id": "call-a", "name": "read_page", "arguments": '{"page":1}'}, True),  # the text as assembled
        ({"id": "call-a", "name": "read_page", "arguments": '{ "page": 1 }'}, True),  # re-serialized
        ({"id": "call-a", "name": "read_page", "input": {"page": 1}}, True),  # parsed (Anthropic tool_use)
        (
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call-a",
                "name": "read_page",
                "arguments": '{"page":1}',
            },
            True,
        ),
        ({"id": "call-a", "name": "read_page", "input": {"page": 2}}, False),  # another value
        ({"id": "call-a", "name": "read_page", "input": {"page": True}}, False),  # true is not 1
        ({"id": "call-a", "name": "read_page", "arguments": '{"page":1'}, False),
        ({"id": "call-a", "name": "read_page", "input": {"page": object()}}, False),  # not JSON
        ({"type": "function_call", "id": "call-a", "name": "read_page", "arguments": '{"page":1}'}, False),  # fc alias
    ],
)
def test_guard_compares_arguments_as_text_or_as_json_values(
    captured: Captured, handed: dict[str, Any], runs: bool
) -> None:
    """A guarded host may be handed the proposal re-serialized or parsed; only the same value runs."""
    from etf_otel.instrumentation import GuardRefusedError

    instrumentation = captured.instrumentation()
    host = instrumentation.host(lambda call: "ran", guard=True)  # guarding from here on
    _consume(instrumentation.stream(iter(case_stream(None))))
    if runs:
        assert host(handed) == "ran"
    else:
        with pytest.raises(GuardRefusedError):
            host(handed)


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


# --- protocols with explicit open and close events ---------------------------------------------------


class _LifecycleAdapter:
    """A made-up wire protocol lowered onto :class:`LifecycleSlots`, the slot model of the Responses and
    Anthropic adapters, so that their categories and compatibility transitions can be driven here
    through ``Instrumentation.stream`` without depending on either adapter.

    Events: ``{"open": key, "id": ..., "name": ...}``, ``{"delta": key, "text": ...}``,
    ``{"done": key, "arguments": ...}`` (a snapshot that closes the arguments), ``{"close": key}``,
    ``{"incomplete": key}`` (item status), ``{"admit": key, "transition": ...}`` (a fragment a
    compatibility rule handled), ``{"final": [(id, name, arguments), ...]}`` and
    ``{"end": "complete" | "incomplete" | "failed", "reason": ...}``.
    """

    def __init__(self, *, rules: IdentityRules, clock: Callable[[], int] | None = None, **_: object) -> None:
        self._slots = LifecycleSlots(rules, clock=clock)

    @property
    def slots(self) -> LifecycleSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    def feed(self, event: object) -> None:
        if not isinstance(event, dict):
            return
        slots = self._slots
        if "open" in event:
            slots.open(event["open"], event.get("id", ABSENT), event.get("name", ABSENT))
        elif "delta" in event:
            slots.delta(event["delta"], event["text"])
        elif "done" in event:
            slots.snapshot(event["done"], event["arguments"])
            slots.close_arguments(event["done"])
        elif "close" in event:
            slots.close_slot(event["close"])
        elif "incomplete" in event:
            slots.mark_incomplete(event["incomplete"])
        elif "admit" in event:
            slots.admitted(event["admit"], Transition(event["transition"]))
        elif "final" in event:
            slots.final_snapshot(event["final"])
        elif "end" in event:
            if "reason" in event:
                slots.finish_reason(0, event["reason"])
            slots.end(ResponseEnd(event["end"]))

    def feed_done(self) -> None:
        return None

    def finish(self) -> AssemblyResult:
        return self._slots.finish()


LIFECYCLE_TEST = WireProtocol(
    name="lifecycle_test", assembler=_LifecycleAdapter, recognizes=lambda event: False, result_ids=lambda _: None
)
"""Also driven by tests/test_prometheus_e2e.py."""


def lifecycle_call(key: int, call_id: str, name: str = "read_page", arguments: str = '{"page": 1}') -> list[Any]:
    """One call opened, streamed in two deltas, its arguments stated and closed."""
    return [
        {"open": key, "id": call_id, "name": name},
        {"delta": key, "text": arguments[:3]},
        {"delta": key, "text": arguments[3:]},
        {"done": key, "arguments": arguments},
        {"close": key},
    ]


def test_a_custom_protocol_names_itself_on_the_response_span_and_etf_streams_only(captured: Captured) -> None:
    instrumentation = captured.instrumentation(provider_name="acme")
    events = [*lifecycle_call(0, "call-1"), {"end": "complete", "reason": "tool_calls"}]
    assert _consume(instrumentation.stream(iter(events), protocol=LIFECYCLE_TEST)) == events
    (response,) = captured.spans("assemble_response")
    (call,) = captured.spans("assemble_tool_call")
    assert (response.attributes or {})["etf.protocol"] == "lifecycle_test"
    assert type((response.attributes or {})["etf.protocol"]) is str
    assert "etf.protocol" not in (call.attributes or {})
    assert (response.attributes or {})["etf.stream.dispatchable"] is True
    metrics = captured.metrics()
    assert metrics["etf.streams"] == [
        ({"etf.stream.state": "completed", "etf.protocol": "lifecycle_test", "gen_ai.provider.name": "acme"}, 1)
    ]
    assert [name for name, points in metrics.items() if any("etf.protocol" in a for a, _ in points)] == ["etf.streams"]


def test_the_protocol_name_is_the_one_given_by_name_or_description(captured: Captured) -> None:
    instrumentation = captured.instrumentation()
    _consume(instrumentation.stream(iter(case_stream(None)), protocol="chat_completions"))
    _consume(instrumentation.stream(iter([{"end": "complete"}]), protocol=LIFECYCLE_TEST))
    observer = instrumentation.observer()  # the default protocol
    observer.observe(case_stream(None)[0])
    observer.finish()
    protocols = [(span.attributes or {})["etf.protocol"] for span in captured.spans("assemble_response")]
    assert protocols == ["chat_completions", "lifecycle_test", "chat_completions"]
    assert captured.metric_sum("etf.streams", etf__protocol="chat_completions") == 2
    assert captured.metric_sum("etf.streams", etf__protocol="lifecycle_test") == 1


def test_incomplete_response_fails_its_spans_and_is_counted_once_per_response(captured: Captured) -> None:
    instrumentation = captured.instrumentation(provider_name="acme")
    cut = [*lifecycle_call(0, "call-1"), *lifecycle_call(1, "call-2"), {"end": "incomplete", "reason": "max_tokens"}]
    _consume(instrumentation.stream(iter(cut), protocol=LIFECYCLE_TEST))
    (response,) = captured.spans("assemble_response")
    attributes = dict(response.attributes or {})
    assert attributes["etf.stream.state"] == "completed"  # it ended properly: the closed state set is unchanged
    assert attributes["error.type"] == "incomplete_response"
    assert attributes["etf.stream.dispatchable"] is False
    assert response.status.status_code is StatusCode.ERROR
    calls = captured.spans("assemble_tool_call")
    assert [(c.attributes or {})["error.type"] for c in calls] == ["incomplete_response"] * 2
    assert [tuple((c.attributes or {})["etf.tool_call.categories"]) for c in calls] == [("incomplete_response",)] * 2
    assert all(c.status.status_code is StatusCode.ERROR for c in calls)
    metrics = captured.metrics()
    assert metrics["etf.integrity.violations"] == [
        ({"etf.error.category": "incomplete_response", "gen_ai.provider.name": "acme"}, 1)
    ]
    assert metrics["etf.streams"] == [
        ({"etf.stream.state": "completed", "etf.protocol": "lifecycle_test", "gen_ai.provider.name": "acme"}, 1)
    ]
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="rejected") == 2
    assert "etf.tool_call.identity_errors" not in metrics


@pytest.mark.parametrize(
    ("events", "calls"),
    [
        ([{"end": "incomplete", "reason": "max_output_tokens"}], 0),  # withheld before any call
        ([*lifecycle_call(0, "call-1"), {"incomplete": 0}, {"end": "complete"}], 1),  # item status incomplete
    ],
    ids=["no-call", "item-status"],
)
def test_every_way_of_ending_incomplete_is_one_incomplete_response(
    captured: Captured, events: list[Any], calls: int
) -> None:
    _consume(captured.instrumentation().stream(iter(events), protocol=LIFECYCLE_TEST))
    (response,) = captured.spans("assemble_response")
    assert (response.attributes or {})["error.type"] == "incomplete_response"
    assert (response.attributes or {})["etf.stream.slots"] == calls
    assert captured.metric_sum("etf.integrity.violations", etf__error__category="incomplete_response") == 1


def test_an_incomplete_response_whose_stream_then_fails_is_a_failed_stream_only(captured: Captured) -> None:
    """The state decides first: a stream that raised is ``truncated_stream``, as with every protocol."""

    def raising() -> Any:
        yield from [*lifecycle_call(0, "call-1"), {"end": "incomplete"}]
        raise ConnectionError("reset")

    with pytest.raises(ConnectionError):
        _consume(captured.instrumentation().stream(raising(), protocol=LIFECYCLE_TEST))
    (response,) = captured.spans("assemble_response")
    assert (response.attributes or {})["etf.stream.state"] == "failed"
    assert (response.attributes or {})["error.type"] == "truncated_stream"
    assert "etf.integrity.violations" not in captured.metrics()


def test_unknown_slot_fails_the_response_span_and_is_an_identity_error(captured: Captured) -> None:
    instrumentation = captured.instrumentation(provider_name="acme")
    stray = [{"delta": 3, "text": '{"x": 1}'}, *lifecycle_call(0, "call-1"), {"delta": 0, "text": "}"}]
    _consume(instrumentation.stream(iter([*stray, {"end": "complete"}]), protocol=LIFECYCLE_TEST))
    (response,) = captured.spans("assemble_response")
    assert (response.attributes or {})["error.type"] == "unknown_slot"  # merged nowhere: it blocks the response
    assert (response.attributes or {})["etf.stream.dispatchable"] is False
    assert response.status.status_code is StatusCode.ERROR
    (call,) = captured.spans("assemble_tool_call")
    # Its own checks passed, but its response is blocked: rejected with the response's blocking category.
    assert (call.attributes or {})["etf.tool_call.verdict"] == "rejected"
    assert (call.attributes or {})["etf.tool_call.categories"] == ("unknown_slot",)
    assert (call.attributes or {})["error.type"] == "unknown_slot"
    assert call.status.status_code is StatusCode.ERROR
    assert captured.metrics()["etf.tool_call.identity_errors"] == [
        (
            {
                "etf.error.category": "unknown_slot",
                "etf.id.kind": "absent",
                "etf.id.prior_present": False,
                "etf.id.empty": False,
                "gen_ai.provider.name": "acme",
            },
            2,
        )
    ]
    assert "etf.integrity.violations" not in captured.metrics()


def test_snapshot_mismatch_fails_the_call_or_the_response_it_belongs_to(captured: Captured) -> None:
    instrumentation = captured.instrumentation()
    contradicted = [
        {"open": 0, "id": "call-1", "name": "read_page"},
        {"delta": 0, "text": '{"page": 1}'},
        {"done": 0, "arguments": '{"page": 2}'},
        {"end": "complete"},
    ]
    _consume(instrumentation.stream(iter(contradicted), protocol=LIFECYCLE_TEST))
    stray = [*lifecycle_call(0, "call-1"), {"final": [("call-1", "read_page", '{"page": 1}'), ("call-9", "f", "{}")]}]
    _consume(instrumentation.stream(iter([*stray, {"end": "complete"}]), protocol=LIFECYCLE_TEST))
    first, second = captured.spans("assemble_response")
    contradicted_call, listed_call = captured.spans("assemble_tool_call")
    assert (contradicted_call.attributes or {})["error.type"] == "snapshot_mismatch"
    assert contradicted_call.status.status_code is StatusCode.ERROR
    assert "error.type" not in (first.attributes or {})  # the call's category stays on the call span
    assert (first.attributes or {})["etf.stream.dispatchable"] is False
    assert (second.attributes or {})["error.type"] == "snapshot_mismatch"  # a listed call no slot proposed
    assert second.status.status_code is StatusCode.ERROR
    # call-1 agrees with the list, but the stray entry blocks its response: rejected with that category.
    assert (listed_call.attributes or {})["etf.tool_call.verdict"] == "rejected"
    assert (listed_call.attributes or {})["error.type"] == "snapshot_mismatch"
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="rejected") == 2
    assert captured.metric_sum("etf.tool_calls", etf__tool_call__verdict="proposed") == 0
    assert "etf.integrity.violations" not in captured.metrics()


def test_chat_missing_index_now_names_itself_on_the_response_span(captured: Captured) -> None:
    stream = finished(chunk(fragment(0, "call-a", "f", "{}"), fragment(MISSING, "call-b", "g", "{}")))
    _consume(captured.instrumentation().stream(iter(stream)))
    (response,) = captured.spans("assemble_response")
    assert (response.attributes or {})["error.type"] == "missing_index"
    assert response.status.status_code is StatusCode.ERROR


def test_compatibility_transitions_of_the_lifecycle_protocols_are_counted_on_the_call_span(
    captured: Captured,
) -> None:
    events = [
        *lifecycle_call(0, "call-1")[:3],
        {"admit": 0, "transition": "buffer_early"},
        {"admit": 0, "transition": "buffer_early"},
        {"admit": 0, "transition": "drop_late"},
        {"end": "complete"},
    ]
    _consume(captured.instrumentation().stream(iter(events), protocol=LIFECYCLE_TEST))
    (call,) = captured.spans("assemble_tool_call")
    attributes = dict(call.attributes or {})
    assert (attributes["etf.id.buffered_early"], attributes["etf.id.dropped_late"]) == (2, 1)
    assert type(attributes["etf.id.buffered_early"]) is int
    assert call.events == ()  # counted on the span, not one event per fragment
    transitions = {a["etf.id.transition"]: v for a, v in captured.metrics()["etf.tool_call.id_transitions"]}
    assert (transitions["buffer_early"], transitions["drop_late"]) == (2, 1)


def test_every_compatibility_transition_has_a_call_span_counter() -> None:
    from etf_otel import attributes as A
    from etf_otel.core._identity import CompatibilityRule
    from etf_otel.core._unslotted import COMPATIBILITY, INFER_INDEX
    from etf_otel.instrumentation._span_attributes import COMPAT_SPAN_COUNTERS

    decisions = [
        *IdentityRules.for_rules(list(CompatibilityRule)).table.values(),
        *COMPATIBILITY.values(),
        *INFER_INDEX.values(),
    ]
    compatible = {decision.transition for decision in decisions if decision.compatibility}
    assert set(COMPAT_SPAN_COUNTERS) == compatible
    assert set(COMPAT_SPAN_COUNTERS.values()) == {
        A.ETF_ID_KEPT_NULL,
        A.ETF_ID_KEPT_EMPTY,
        A.ETF_ID_INFERRED_INDEX,
        A.ETF_ID_BUFFERED_EARLY,
        A.ETF_ID_DROPPED_LATE,
        A.ETF_ID_POSITIONAL,
        A.ETF_ID_DROPPED_REPEAT,
        A.ETF_TOOL_CALL_ABSENT_ARGUMENTS,
    }


def test_a_compatibility_transition_without_a_span_name_never_fails_the_span(
    captured: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etf_otel.instrumentation import _span_attributes as span_attributes

    monkeypatch.delitem(span_attributes.COMPAT_SPAN_COUNTERS, Transition.DROP_LATE)
    events = [*lifecycle_call(0, "call-1"), {"admit": 0, "transition": "drop_late"}, {"end": "complete"}]
    _consume(captured.instrumentation().stream(iter(events), protocol=LIFECYCLE_TEST))
    # A made-up transition and a malformed count, handed to the telemetry directly (strict mode is on).
    instrumentation = captured.instrumentation()
    result = assemble(case_stream(None))
    (call,) = result.calls
    odd = call._replace(transitions=(("made_up", 3), (Transition.KEEP_NULL, 1), (Transition.KEEP_EMPTY, "2")))
    instrumentation.telemetry.record_response(
        dataclasses.replace(result, calls=(odd,)), StreamState.COMPLETED, None, time.time_ns()
    )
    late, odd_span = captured.spans("assemble_tool_call")
    assert (late.attributes or {})["etf.tool_call.verdict"] == "proposed"
    assert not any(name.startswith("etf.id.") for name in (late.attributes or {}))
    assert (odd_span.attributes or {})["etf.id.kept_null"] == 1
    assert "etf.id.kept_empty" not in (odd_span.attributes or {})
    assert (odd_span.attributes or {})["gen_ai.tool.call.id"] == "call-a"
    assert len(captured.spans("assemble_response")) == 2
