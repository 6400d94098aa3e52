"""Build the etf-otel Grafana dashboard from code.

Usage:
    python dashboards/grafana/generate.py           # (re)write dashboards/grafana/etf-otel.json
    python dashboards/grafana/generate.py --check   # exit 1 if the committed JSON is not what this builds

Needs ``grafana-foundation-sdk==1769699379!11.6.0`` (the Grafana 11 schema release; the unpinned
default targets Grafana 10.1).

Every query uses the Prometheus names of docs/telemetry.md as produced by the OpenTelemetry
Prometheus exporter. ``service.name`` reaches Prometheus as ``job``; the execute_tool histogram
has no provider label, so its panels are filtered by ``job`` only; ``etf.protocol`` is a label of
``etf_streams_total`` alone, so only the stream panels follow the ``protocol`` variable. Panel ids
and query ref_ids are set here, and the output is written with sorted keys, so it is stable from
run to run.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import prometheus as prometheus_builder
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_model

OUTPUT = Path(__file__).resolve().with_name("etf-otel.json")

UID = "etf-otel"
TITLE = "etf-otel: streamed tool calls"

DATASOURCE = dashboard_model.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label filter applied to every etf_* query; the histogram has no provider label.
SELECTOR = 'job=~"$job", gen_ai_provider_name=~"$provider"'
JOB_SELECTOR = 'job=~"$job"'
# etf_streams_total is the only series with etf_protocol: a protocol filter on any other would
# select nothing once a protocol is picked.
STREAM_SELECTOR = f'{SELECTOR}, etf_protocol=~"$protocol"'

# Compatibility transitions: a lenient reading of the strict rules was needed for the fragment.
COMPATIBILITY_TRANSITIONS = "keep_null|keep_empty|infer_index|buffer_early|drop_late"

# Chat Completions never ends incomplete (a cut call fails JSON validation there), so its streams
# are left out of the share of incomplete responses, as in the EtfIncompleteResponseRatioHigh alert.
CAN_END_INCOMPLETE = 'etf_stream_state="completed", etf_protocol!="chat_completions"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    panel_id: int
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    width: int = 12
    height: int = 8
    stacked: bool = False


@dataclass(frozen=True)
class RowSpec:
    panel_id: int
    title: str


def _rate(metric: str, selector: str = SELECTOR) -> str:
    return f"rate({metric}{{{selector}}}[$__rate_interval])"


def _quantile(q: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (le) ({_rate('gen_ai_execute_tool_duration_seconds_bucket', JOB_SELECTOR)}))"
    )


LAYOUT: tuple[RowSpec | PanelSpec, ...] = (
    RowSpec(1, "Tool-call identity"),
    PanelSpec(
        2,
        "Identity errors by category",
        "Fragments rejected by the identity rules (docs/categories.md, identity phase), per second, by "
        "etf.error.category. missing_index and unknown_slot are fragments that belong to no call. Any "
        "rejection blocks every tool call of its response.",
        "cps",
        (
            Query(
                f"sum by (etf_error_category) ({_rate('etf_tool_call_identity_errors_total')})",
                "{{etf_error_category}}",
            ),
        ),
    ),
    PanelSpec(
        3,
        "Identity errors by provider",
        "Fragments rejected by the identity rules, per second, by gen_ai.provider.name.",
        "cps",
        (
            Query(
                f"sum by (gen_ai_provider_name) ({_rate('etf_tool_call_identity_errors_total')})",
                "{{gen_ai_provider_name}}",
            ),
        ),
    ),
    PanelSpec(
        4,
        "Fragments that needed a compatibility transition",
        "Share of all tool-call fragments that needed a compatibility transition "
        f"({COMPATIBILITY_TRANSITIONS.replace('|', ', ')}), by provider and transition. keep_null is part "
        "of the strict rules; keep_empty, infer_index, buffer_early and drop_late only appear when the "
        "empty_continuation, infer_missing_index, buffer_early_deltas and drop_post_done_delta compatibility "
        "rules are enabled.",
        "percentunit",
        (
            Query(
                "sum by (gen_ai_provider_name, etf_id_transition) ("
                + _rate(
                    "etf_tool_call_id_transitions_total",
                    f'{SELECTOR}, etf_id_transition=~"{COMPATIBILITY_TRANSITIONS}"',
                )
                + ") / on (gen_ai_provider_name) group_left () "
                + f"sum by (gen_ai_provider_name) ({_rate('etf_tool_call_fragments_total')})",
                "{{gen_ai_provider_name}} {{etf_id_transition}}",
            ),
        ),
    ),
    PanelSpec(
        5,
        "Identity transitions",
        "Identity decisions per second by etf.id.transition (await, establish, replace_empty, keep_omitted, "
        "keep_null, keep_identical, compatibility transitions, reject).",
        "cps",
        (
            Query(
                f"sum by (etf_id_transition) ({_rate('etf_tool_call_id_transitions_total')})",
                "{{etf_id_transition}}",
            ),
        ),
    ),
    RowSpec(6, "Streams and integrity"),
    PanelSpec(
        7,
        "Stream end states",
        "Streams per second by etf.stream.state: completed (terminal event seen), truncated (ended before a "
        "terminal event), abandoned (dropped unread), failed (raised while read). Only completed streams can "
        "be dispatched; an incomplete response is completed too (see Incomplete responses).",
        "cps",
        (
            Query(
                f"sum by (etf_stream_state) ({_rate('etf_streams_total', STREAM_SELECTOR)})",
                "{{etf_stream_state}}",
            ),
        ),
        stacked=True,
    ),
    PanelSpec(
        14,
        "Stream end states by protocol",
        "Streams per second by etf.protocol (chat_completions, responses, anthropic_messages, gemini, "
        "bedrock_converse, ollama) and "
        "etf.stream.state. Each protocol has its own terminal events, so truncation in one protocol and not "
        "the others points at that protocol's client, gateway or server.",
        "cps",
        (
            Query(
                f"sum by (etf_protocol, etf_stream_state) ({_rate('etf_streams_total', STREAM_SELECTOR)})",
                "{{etf_protocol}} {{etf_stream_state}}",
            ),
        ),
    ),
    PanelSpec(
        8,
        "Integrity violations by category",
        "Integrity violations per second by etf.error.category: the linkage categories orphaned_result, "
        "unanswered_call, duplicate_result and divergent_assembly, and incomplete_response (one per response "
        "that ended properly but said its output was cut or withheld).",
        "cps",
        (
            Query(
                f"sum by (etf_error_category) ({_rate('etf_integrity_violations_total')})",
                "{{etf_error_category}}",
            ),
        ),
    ),
    PanelSpec(
        16,
        "History drift (not violations)",
        "Follow-up requests per second whose history differs from the proposals without breaking anything, by "
        "etf.divergence.kind: id_replaced (a framework made the provider's ids unique), call_fabricated (a "
        "framework's own round, answered in the same request), refusal_answered (a refused call answered with an "
        "error). Never a violation and never alerted on: a rise after a framework upgrade says it rewrites history.",
        "cps",
        (
            Query(
                f"sum by (etf_divergence_kind) ({_rate('etf_linkage_drift_total')})",
                "{{etf_divergence_kind}}",
            ),
        ),
    ),
    PanelSpec(
        17,
        "Requests the provider will refuse (tool pairing)",
        "Problems per second in requests whose history breaks the provider's tool pairing rules, found before "
        "the request was sent (etf.request.pairing_problems), by problem and reason: result_without_call, "
        "call_without_result, duplicate_result, duplicate_call_id, id_rejected_by_target; history_trimmed, "
        "id_rewritten, concatenated_ids, unknown. Each such request gets the provider's 400; the span says which "
        "turn and call (etf.request.pairing_problems on assemble_response).",
        "cps",
        (
            Query(
                f"sum by (etf_pairing_problem, etf_pairing_reason) ({_rate('etf_request_pairing_problems_total')})",
                "{{etf_pairing_problem}} ({{etf_pairing_reason}})",
            ),
        ),
    ),
    PanelSpec(
        15,
        "Incomplete responses",
        "Share of completed Responses and Anthropic streams that ended incomplete (incomplete_response: a "
        "token or context limit, a refusal, a paused turn, an item marked incomplete), by provider; none of "
        "their tool calls may run. Chat Completions streams are left out: they never end incomplete. The "
        "count has no protocol label, so this panel ignores the protocol variable.",
        "percentunit",
        (
            Query(
                "sum by (gen_ai_provider_name) ("
                + _rate("etf_integrity_violations_total", f'{SELECTOR}, etf_error_category="incomplete_response"')
                + ") / sum by (gen_ai_provider_name) ("
                + _rate("etf_streams_total", f"{SELECTOR}, {CAN_END_INCOMPLETE}")
                + ")",
                "{{gen_ai_provider_name}}",
            ),
        ),
    ),
    RowSpec(9, "Tool calls and execution"),
    PanelSpec(
        10,
        "Tool-call verdicts",
        "Finalized tool calls per second by etf.tool_call.verdict: proposed (may be handed to the host) or rejected.",
        "cps",
        (
            Query(
                f"sum by (etf_tool_call_verdict) ({_rate('etf_tool_calls_total')})",
                "{{etf_tool_call_verdict}}",
            ),
        ),
        stacked=True,
    ),
    PanelSpec(
        11,
        "Rejected tool calls by tool",
        "Rejected tool calls per second by gen_ai.tool.name (capped; rare names are grouped as _OTHER).",
        "cps",
        (
            Query(
                "sum by (gen_ai_tool_name) ("
                + _rate("etf_tool_calls_total", f'{SELECTOR}, etf_tool_call_verdict="rejected"')
                + ")",
                "{{gen_ai_tool_name}}",
            ),
        ),
    ),
    PanelSpec(
        12,
        "execute_tool duration",
        "p50, p95 and p99 of gen_ai.execute_tool.duration over all tools. This histogram has no provider "
        "label: it is filtered by job only.",
        "s",
        (
            Query(_quantile("0.5"), "p50"),
            Query(_quantile("0.95"), "p95"),
            Query(_quantile("0.99"), "p99"),
        ),
    ),
    PanelSpec(
        13,
        "execute_tool errors by error.type",
        "Tool executions per second that ended with an error, by error.type (the host's outcome). Filtered by "
        "job only.",
        "cps",
        (
            Query(
                "sum by (error_type) ("
                + _rate("gen_ai_execute_tool_duration_seconds_count", f'{JOB_SELECTOR}, error_type!=""')
                + ")",
                "{{error_type}}",
            ),
        ),
    ),
)


def _ref_id(i: int) -> str:
    return chr(ord("A") + i)


def _panel(spec: PanelSpec) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(spec.panel_id)
        .title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .min(0)
        .span(spec.width)
        .height(spec.height)
        .fill_opacity(10)
        .legend(
            common_builder.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builder.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING)
        )
    )
    if spec.stacked:
        panel = panel.stacking(common_builder.StackingConfig().mode(common.StackingMode.NORMAL))
    for i, query in enumerate(spec.queries):
        panel = panel.with_target(
            prometheus_builder.Dataquery()
            .ref_id(_ref_id(i))
            .datasource(DATASOURCE)
            .expr(query.expr)
            .legend_format(query.legend)
            .range()
        )
    return panel


def _variables() -> list[cogbuilder.Builder[dashboard_model.VariableModel]]:
    datasource = dashboard_builder.DatasourceVariable("datasource").label("Data source").type("prometheus")
    job = (
        dashboard_builder.QueryVariable("job")
        .label("Job (service.name)")
        .datasource(DATASOURCE)
        .query("label_values(etf_streams_total, job)")
        .refresh(dashboard_model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    provider = (
        dashboard_builder.QueryVariable("provider")
        .label("Provider (gen_ai.provider.name)")
        .datasource(DATASOURCE)
        .query('label_values(etf_streams_total{job=~"$job"}, gen_ai_provider_name)')
        .refresh(dashboard_model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    protocol = (
        dashboard_builder.QueryVariable("protocol")
        .label("Protocol (etf.protocol, stream panels only)")
        .datasource(DATASOURCE)
        .query('label_values(etf_streams_total{job=~"$job", gen_ai_provider_name=~"$provider"}, etf_protocol)')
        .refresh(dashboard_model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dashboard_model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    return [datasource, job, provider, protocol]


def build() -> dashboard_model.Dashboard:
    """Build the dashboard model."""
    builder = (
        dashboard_builder.Dashboard(TITLE)
        .uid(UID)
        .description(
            "Streamed LLM tool calls observed by etf-otel: identity rule decisions, stream end states by wire "
            "protocol, incomplete responses, call-to-result integrity, tool-call verdicts and execute_tool "
            "durations."
        )
        .tags(["etf-otel", "genai", "opentelemetry"])
        .editable()
        .tooltip(dashboard_model.DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .timezone("browser")
        .refresh("1m")
        .variables(_variables())
        .annotation(
            dashboard_builder.AnnotationQuery()
            .name("Annotations & Alerts")
            .datasource(dashboard_model.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
            .built_in(1)
        )
    )
    for item in LAYOUT:
        if isinstance(item, RowSpec):
            builder = builder.with_row(dashboard_builder.Row(item.title).id(item.panel_id))
        else:
            builder = builder.with_panel(_panel(item))
    return builder.build()


def render() -> str:
    """Return the dashboard as deterministic JSON text (sorted keys, trailing newline)."""
    return json.dumps(build(), cls=JSONEncoder, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed JSON differs")
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"JSON file (default: {OUTPUT.name})")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"{args.output} (committed)",
                tofile=f"{args.output} (generated)",
            )
            sys.stderr.writelines(diff)
            print(f"{args.output} is out of date: run python dashboards/grafana/generate.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
