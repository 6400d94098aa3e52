"""End to end through a real Prometheus: exporter -> scrape -> alert rules and dashboard queries.

The instrumentation runs in this process with an SDK ``MeterProvider`` whose only reader is the
OpenTelemetry ``PrometheusMetricReader`` (on a dedicated registry), served by ``prometheus_client`` on
127.0.0.1. A real Prometheus (Debian's ``/usr/bin/prometheus``) scrapes it every second and evaluates
``dashboards/prometheus/etf-otel-alerts.yml`` (a copy whose group interval is 1 s instead of 1 m; the
expressions are unchanged). The workload replays the case study's rejection and linkage cases:

* per round: the control and the target stream (``id: null`` continuation, ``keep_null``), an
  ``id_conflict`` stream, an ``initial_null`` stream, a truncated stream, and a conversation whose
  first response proposes three calls: one executed, one whose host raises (``error.type``), one never
  answered (``unanswered_call``), plus a result for an id never proposed (``orphaned_result``);
* per round, through a second wire protocol with explicit open and close events (the test adapter
  ``LIFECYCLE_TEST`` over the slot model the Responses and Anthropic adapters use): one response
  that ends incomplete (``incomplete_response``) and one with a stray delta (``unknown_slot``);
* per round, a conversation linked as the Chat integrations link it, whose follow-up answers its call
  and a round the framework made up (``call_fabricated``: drift on ``etf.linkage.drift``, no violation),
  and one whose follow-up the pairing check finds broken for OpenAI (an id over 40 characters:
  ``etf.request.pairing_problems``, no violation);
* one round first (every series exists and is scraped), then ``ROUNDS`` more, so that ``increase()``
  sees traffic: 13 streams per round, 11 Chat Completions streams of which 1 truncated (9 %) and 2
  completed ones of the other protocol of which 1 incomplete (50 %).

Nothing produces ``empty_after_established``, ``divergent_assembly``, ``duplicate_result`` or a
failed or abandoned stream, so their rules must stay empty, and the volume conditions of the ratio
rules are met so that they are empty because of the category, not for lack of traffic.

Run with ``-s`` to see every query and its result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, start_http_server

from etf_otel.core._linkage import Conversation
from etf_otel.core._targets import target_of
from etf_otel.instrumentation import Instrumentation
from etf_otel.instrumentation._safety import set_strict
from etf_otel.integrations._instrumentor_base import Prepared
from etf_otel.integrations._prefix_conversations import PrefixConversations
from etf_otel.integrations._request_pairing import checked
from etf_otel.protocols import CHAT_COMPLETIONS
from etf_otel.testing.chat import MISSING, case_stream, chunk, finished, fragment
from tests.instrumentation.test_telemetry_contract import LIFECYCLE_TEST, lifecycle_call
from tests.support.prometheus import PROMETHEUS, PrometheusServer, free_port
from tests.test_dashboards import COUNTERS, DASHBOARD, HISTOGRAM, METRIC_LABELS, RULES, TARGET_LABELS, load_rules

pytestmark = pytest.mark.skipif(
    not PROMETHEUS, reason="prometheus not found: apt-get install -y --no-install-recommends prometheus"
)

JOB = "etf-e2e"
SERVICE = "etf-e2e-service"
PROVIDER = "etf.e2e"
ROUNDS = 12  # after the first round: 84 Chat streams, 24 of the other protocol (>= 20), >= 100 fragments
CHAT_STREAMS_PER_ROUND = 11
LIFECYCLE_STREAMS_PER_ROUND = 2
STREAMS_PER_ROUND = CHAT_STREAMS_PER_ROUND + LIFECYCLE_STREAMS_PER_ROUND
SCOPE_LABELS = {"otel_scope_name", "otel_scope_version"}  # otel_scope_schema_url is "" and dropped

IDENTITY_CATEGORIES = {"id_conflict", "initial_null", "unknown_slot"}
LINKAGE_CATEGORIES = {"orphaned_result", "unanswered_call"}
VIOLATION_CATEGORIES = LINKAGE_CATEGORIES | {"incomplete_response"}
PROTOCOLS = {"chat_completions", LIFECYCLE_TEST.name}
# alert -> the etf_error_category values its expression must return (None: the rule has no category label).
EXPECTED_NON_EMPTY: dict[str, set[str | None]] = {
    "EtfToolCallIdentityErrors": set(IDENTITY_CATEGORIES),
    "EtfTruncatedStreamRatioHigh": {None},
    "EtfToolCallLinkageViolations": set(LINKAGE_CATEGORIES),
    "EtfEmptyContinuationCompatibilitySuggested": set(),
    "EtfDivergentAssembly": set(),
    "EtfStreamsFailedOrAbandoned": set(),
    "EtfIncompleteResponseRatioHigh": {None},
    "EtfRequestPairingBroken": {"id_rejected_by_target"},  # by etf_pairing_problem, not by category
}
# alert -> its value when it returns one series (a share), and the etf_protocol it carries, if any.
EXPECTED_VALUE: dict[str, tuple[float, str | None]] = {
    "EtfTruncatedStreamRatioHigh": (1 / CHAT_STREAMS_PER_ROUND, "chat_completions"),
    "EtfIncompleteResponseRatioHigh": (1 / LIFECYCLE_STREAMS_PER_ROUND, None),
}
# What /api/v1/alerts must list once the rules have seen the traffic: rules with `for:` are pending.
EXPECTED_ALERTS = {
    ("EtfToolCallIdentityErrors", "firing", "id_conflict"),
    ("EtfToolCallIdentityErrors", "firing", "initial_null"),
    ("EtfToolCallIdentityErrors", "firing", "unknown_slot"),
    ("EtfToolCallLinkageViolations", "firing", "orphaned_result"),
    ("EtfToolCallLinkageViolations", "firing", "unanswered_call"),
    ("EtfTruncatedStreamRatioHigh", "pending", None),
    ("EtfIncompleteResponseRatioHigh", "pending", None),
    ("EtfRequestPairingBroken", "firing", "id_rejected_by_target"),
}


# --- the workload ------------------------------------------------------------------------------------


def _consume(stream: Any) -> None:
    for _ in stream:
        pass


class Host:
    def execute(self, call: Any) -> str:
        if call["function"]["name"] == "fail":
            raise ValueError("the tool failed")
        return "ok"


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "function": {"name": name, "arguments": "{}"}}


def run_round(instrumentation: Instrumentation, n: int) -> None:
    """One round: the case study's 7 Chat streams (1 truncated), and 2 of another protocol (1 incomplete)."""
    stream = instrumentation.stream
    _consume(stream(iter(case_stream(MISSING))))  # control
    _consume(stream(iter(case_stream(None))))  # target: id null on the continuation, keep_null
    conflict = finished(
        chunk(fragment(0, f"call-c{n}", "read_page", '{"page":')), chunk(fragment(0, f"call-x{n}", arguments="1}"))
    )
    _consume(stream(iter(conflict)))  # id_conflict
    _consume(stream(iter(finished(chunk(fragment(0, None, "read_page", '{"page": 1}'))))))  # initial_null
    _consume(stream(iter([chunk(fragment(0, f"call-t{n}", "read_page", '{"pa'))])))  # no finish, no [DONE]

    conversation = Conversation()
    three = finished(
        chunk(
            fragment(0, f"call-p{n}", "read_page", "{}"),
            fragment(1, f"call-q{n}", "fail", "{}"),
            fragment(2, f"call-r{n}", "read_page", "{}"),
        )
    )
    _consume(stream(iter(three), conversation=conversation))
    host = instrumentation.host(Host(), conversation=conversation)
    host.execute(_call(f"call-p{n}", "read_page"))
    with pytest.raises(ValueError):
        host.execute(_call(f"call-q{n}", "fail"))
    host.execute(_call(f"call-never-proposed-{n}", "read_page"))  # orphaned_result
    _consume(stream(iter(finished()), conversation=conversation))  # next request: call-r unanswered
    instrumentation.end_conversation(conversation)

    cut = [*lifecycle_call(0, f"call-i{n}"), {"end": "incomplete", "reason": "max_tokens"}]
    _consume(stream(iter(cut), protocol=LIFECYCLE_TEST))  # incomplete_response
    stray = [*lifecycle_call(0, f"call-s{n}"), {"delta": 0, "text": "}"}, {"end": "complete"}]
    _consume(stream(iter(stray), protocol=LIFECYCLE_TEST))  # unknown_slot: a delta after its call closed

    # drift, never a violation: the follow-up answers the call and a round the framework made up itself
    chats = PrefixConversations(8, CHAT_COMPLETIONS)
    user = [{"role": "user", "content": "read page 1"}]
    first = chats.link(user)
    one = finished(chunk(fragment(0, f"call-d{n}", "read_page", "{}")))
    _consume(stream(iter(one), conversation=first.conversation))
    history = [
        *user,
        {"role": "assistant", "tool_calls": [_call(f"call-d{n}", "read_page")]},
        {"role": "tool", "tool_call_id": f"call-d{n}", "content": "page"},
        {"role": "assistant", "tool_calls": [_call(f"own-{n}", "search_tools")]},  # call_fabricated
        {"role": "tool", "tool_call_id": f"own-{n}", "content": "tools"},
    ]
    follow_up = chats.link(history)
    _consume(stream(iter(finished()), conversation=follow_up.conversation, tool_message_ids=follow_up.result_ids))

    # a request checked before it is sent, as the integrations check it: an id over OpenAI's 40 characters
    long_id = f"call-{n}-{'x' * 40}"
    first = chats.link(user)
    _consume(stream(iter(finished(chunk(fragment(0, long_id, "read_page", "{}")))), conversation=first.conversation))
    history = [
        *user,
        {"role": "assistant", "tool_calls": [_call(long_id, "read_page")]},
        {"role": "tool", "tool_call_id": long_id, "content": "page"},
    ]
    linked = chats.link(history)
    prepared = Prepared(PROVIDER, linked.conversation, linked.result_ids, CHAT_COMPLETIONS)
    prepared = checked(prepared, linked, history, instrumentation, target=target_of("https://api.openai.com/v1"))
    _consume(prepared.observe(instrumentation, iter(finished())))  # id_rejected_by_target, no violation


# --- the live setup ----------------------------------------------------------------------------------


@dataclass
class Live:
    prometheus: PrometheusServer
    log: list[str] = field(default_factory=list)

    def query(self, expr: str, title: str = "") -> list[dict[str, Any]]:
        result = self.prometheus.query(expr)
        self.log.append(report(title or "query", expr, result))
        print(self.log[-1])
        return result


def show(series: dict[str, Any]) -> str:
    labels = {k: v for k, v in series["metric"].items() if k not in {"instance", "otel_scope_version"}}
    return f"{json.dumps(labels, sort_keys=True)} = {series['value'][1]}"


def report(title: str, expr: str, result: list[dict[str, Any]]) -> str:
    lines = [f"--- {title}: {' '.join(expr.split())}", *(f"    {show(s)}" for s in result)]
    if not result:
        lines.append("    (empty)")
    return "\n".join(lines)


def rules_with_fast_interval(tmp: Path) -> Path:
    """The shipped rules, unchanged except the group interval (1 m) set to 1 s."""
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for group in data["groups"]:
        group["interval"] = "1s"
    path = tmp / RULES.name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def stream_total(prometheus: PrometheusServer) -> float:
    result = prometheus.query(f'sum(etf_streams_total{{job="{JOB}"}})')
    return float(result[0]["value"][1]) if result else 0.0


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("prometheus-e2e")
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    meter_provider = MeterProvider(resource=Resource.create({"service.name": SERVICE}), metric_readers=[reader])
    tracer_provider = TracerProvider()
    exporter_port = free_port()
    server, thread = start_http_server(exporter_port, addr="127.0.0.1", registry=registry)
    prometheus = PrometheusServer(
        tmp, job=JOB, targets=[f"127.0.0.1:{exporter_port}"], rule_files=[rules_with_fast_interval(tmp)]
    )
    previous = set_strict(True)
    try:
        prometheus.start()  # the first scrape comes ~7 s later: run the first round meanwhile
        instrumentation = Instrumentation(tracer_provider, meter_provider, provider_name=PROVIDER)
        run_round(instrumentation, 0)
        prometheus.wait_for(
            lambda: stream_total(prometheus) == STREAMS_PER_ROUND, 15, "the first round's series to be scraped"
        )
        for n in range(1, ROUNDS + 1):
            run_round(instrumentation, n)
        total = STREAMS_PER_ROUND * (ROUNDS + 1)
        prometheus.wait_for(lambda: stream_total(prometheus) == total, 10, f"{total} streams to be scraped")
        yield Live(prometheus)
    finally:
        set_strict(previous)
        prometheus.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        meter_provider.shutdown()
        tracer_provider.shutdown()


# --- the tests ---------------------------------------------------------------------------------------


def test_target_is_up_and_service_name_is_on_target_info(live: Live) -> None:
    up = live.query(f'up{{job="{JOB}"}}', "scrape target")
    assert [s["value"][1] for s in up] == ["1"], live.log[-1]
    joined = live.query(
        f'sum by (job, instance) (rate(etf_streams_total{{job="{JOB}"}}[1m]))'
        " * on (job, instance) group_left (service_name) target_info",
        "service.name through target_info (README join)",
    )
    assert [s["metric"].get("service_name") for s in joined] == [SERVICE], live.log[-1]


def test_every_spec_metric_exists_with_exactly_the_spec_labels(live: Live) -> None:
    expected_names = COUNTERS | {f"{HISTOGRAM}_bucket", f"{HISTOGRAM}_sum", f"{HISTOGRAM}_count"}
    assert set(METRIC_LABELS) == expected_names
    found: dict[str, set[str]] = {}
    values: set[str] = set()
    for name in sorted(expected_names):
        series = live.prometheus.api("series", **{"match[]": f'{name}{{job="{JOB}"}}'})
        found[name] = set().union(*(set(s) for s in series)) - {"__name__"} if series else set()
        values |= {v for s in series for k, v in s.items() if k != "__name__"}
        line = f"--- series {name}: {len(series)} series, labels {sorted(found[name])}"
        live.log.append(line)
        print(line)
    problems = {
        name: sorted(labels ^ (METRIC_LABELS[name] | TARGET_LABELS | SCOPE_LABELS))
        for name, labels in found.items()
        if labels != METRIC_LABELS[name] | TARGET_LABELS | SCOPE_LABELS
    }
    assert problems == {}, "\n".join(live.log[-len(expected_names) :])
    assert not [v for v in values if v.startswith("call-")], "a call id reached a metric label"
    providers = live.query(f'count by (gen_ai_provider_name) ({{job="{JOB}", gen_ai_provider_name!=""}})', "providers")
    assert [s["metric"]["gen_ai_provider_name"] for s in providers] == [PROVIDER], live.log[-1]
    selector = f'{{__name__=~"etf_.*", job="{JOB}", etf_error_category!=""}}'
    categories = live.query(f"sum by (__name__, etf_error_category) ({selector})", "categories recorded")
    recorded = {(s["metric"]["__name__"], s["metric"]["etf_error_category"]) for s in categories}
    assert recorded == {("etf_tool_call_identity_errors_total", c) for c in IDENTITY_CATEGORIES} | {
        ("etf_integrity_violations_total", c) for c in VIOLATION_CATEGORIES
    }, live.log[-1]
    states = live.query(
        f'sum by (etf_protocol, etf_stream_state) (etf_streams_total{{job="{JOB}"}})', "stream states by protocol"
    )
    assert {(s["metric"]["etf_protocol"], s["metric"]["etf_stream_state"]): s["value"][1] for s in states} == {
        ("chat_completions", "completed"): str((CHAT_STREAMS_PER_ROUND - 1) * (ROUNDS + 1)),
        ("chat_completions", "truncated"): str(ROUNDS + 1),
        (LIFECYCLE_TEST.name, "completed"): str(LIFECYCLE_STREAMS_PER_ROUND * (ROUNDS + 1)),
    }, live.log[-1]
    incomplete = live.query(
        f'etf_integrity_violations_total{{job="{JOB}", etf_error_category="incomplete_response"}}', "incomplete"
    )
    assert [s["value"][1] for s in incomplete] == [str(ROUNDS + 1)], live.log[-1]  # once per response


def _alert_rules() -> dict[str, str]:
    rules = {rule["alert"]: rule["expr"] for rule in load_rules()}
    assert set(rules) == set(EXPECTED_NON_EMPTY), "a rule was added or renamed: say what this test expects of it"
    return rules


def _kind(labels: dict[str, str]) -> str | None:
    """What an alert is per: its error category, or the pairing problem (EtfRequestPairingBroken)."""
    return labels.get("etf_error_category", labels.get("etf_pairing_problem"))


@pytest.mark.parametrize("alert", sorted(EXPECTED_NON_EMPTY))
def test_alert_expression_is_non_empty_exactly_for_the_categories_that_occurred(live: Live, alert: str) -> None:
    expr = _alert_rules()[alert]
    result = live.query(expr, f"alert {alert}")
    message = live.log[-1]
    assert {_kind(s["metric"]) for s in result} == EXPECTED_NON_EMPTY[alert], message
    for series in result:
        assert series["metric"]["job"] == JOB, message
        assert series["metric"]["gen_ai_provider_name"] == PROVIDER, message
    if alert in EXPECTED_VALUE:
        value, protocol = EXPECTED_VALUE[alert]
        (series,) = result
        assert float(series["value"][1]) == pytest.approx(value, abs=0.005), message
        assert series["metric"].get("etf_protocol") == protocol, message
    # A ratio rule's volume condition (after the top-level `and`) holds: an empty result is the category's.
    parts = re.split(r"^\s*and\s*$", expr, flags=re.M)
    if len(parts) > 1:
        volume = live.query(parts[-1], f"alert {alert}, volume condition")
        assert volume and {s["metric"]["gen_ai_provider_name"] for s in volume} == {PROVIDER}, live.log[-1]


def test_rules_evaluate_healthy_and_the_expected_alerts_fire(live: Live) -> None:
    prometheus = live.prometheus

    def alerts() -> set[tuple[str, str, str | None]]:
        data = prometheus.api("alerts")
        return {(a["labels"]["alertname"], a["state"], _kind(a["labels"])) for a in data["alerts"]}

    def healthy() -> list[dict[str, Any]]:
        rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
        return rules if all(rule["health"] == "ok" for rule in rules) else []

    try:
        prometheus.wait_for(lambda: alerts() == EXPECTED_ALERTS, 10, "the expected alerts")
    except AssertionError:
        pass  # reported below with what was seen
    seen = alerts()
    rules = prometheus.wait_for(healthy, 5, "every rule evaluated with health ok")
    lines = [f"--- /api/v1/rules: {r['name']}: health={r['health']} state={r.get('state')}" for r in rules]
    lines += [f"--- /api/v1/alerts: {alert}" for alert in sorted(seen, key=str)]
    live.log.append("\n".join(lines))
    print(live.log[-1])
    assert {r["name"] for r in rules} == set(EXPECTED_NON_EMPTY), live.log[-1]
    assert all(not r.get("lastError") for r in rules), live.log[-1]
    assert seen == EXPECTED_ALERTS, live.log[-1]


def _dashboard_queries(job: str, provider: str, protocol: str) -> dict[str, str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "1m")
            expr = re.sub(r"\$\{?job\}?", lambda _: job, expr)
            expr = re.sub(r"\$\{?provider\}?", lambda _: provider, expr)
            expr = re.sub(r"\$\{?protocol\}?", lambda _: protocol, expr)
            assert "$" not in expr, f"unhandled variable in {expr}"
            queries[f"panel {panel['id']} {panel['title']} {target['refId']}"] = expr
    return queries


@pytest.mark.parametrize(
    ("job", "provider", "protocol"),
    # "All", and one selected value as Grafana escapes it
    [(".*", ".*", ".*"), (JOB, PROVIDER.replace(".", "\\\\."), "chat_completions")],
    ids=["all", "selected"],
)
def test_every_dashboard_panel_query_runs_and_returns_data(live: Live, job: str, provider: str, protocol: str) -> None:
    queries = _dashboard_queries(job, provider, protocol)
    results = {title: live.query(expr, title) for title, expr in queries.items()}
    dump = "\n".join(live.log[-len(results) :])
    assert [title for title, result in results.items() if not result] == [], dump
    by_category = results["panel 2 Identity errors by category A"]
    assert {s["metric"]["etf_error_category"] for s in by_category} == IDENTITY_CATEGORIES, dump
    assert all(float(s["value"][1]) > 0 for s in by_category), dump
    violations = results["panel 8 Integrity violations by category A"]
    assert {s["metric"]["etf_error_category"] for s in violations} == VIOLATION_CATEGORIES, dump
    by_protocol = results["panel 14 Stream end states by protocol A"]
    shown = PROTOCOLS if protocol == ".*" else {protocol}
    assert {s["metric"]["etf_protocol"] for s in by_protocol} == shown, dump
    (incomplete,) = results["panel 15 Incomplete responses A"]  # the protocol variable does not apply
    assert float(incomplete["value"][1]) == pytest.approx(1 / LIFECYCLE_STREAMS_PER_ROUND, abs=0.01), dump
    errors = results["panel 13 execute_tool errors by error.type A"]
    assert {s["metric"]["error_type"] for s in errors} == {"ValueError"}, dump


def test_dashboard_variables_list_the_job_provider_and_protocol(live: Live) -> None:
    jobs = live.prometheus.api("label/job/values", **{"match[]": "etf_streams_total"})
    providers = live.prometheus.api(
        "label/gen_ai_provider_name/values", **{"match[]": f'etf_streams_total{{job=~"{JOB}"}}'}
    )
    protocols = live.prometheus.api(
        "label/etf_protocol/values",
        **{"match[]": f'etf_streams_total{{job=~"{JOB}", gen_ai_provider_name=~"{PROVIDER.replace(".", "[.]")}"}}'},
    )
    line = f"--- variables: job={jobs} provider={providers} protocol={protocols}"
    print(line)
    assert JOB in jobs, line
    assert providers == [PROVIDER], line
    assert set(protocols) == PROTOCOLS, line
