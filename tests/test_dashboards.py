"""The shipped dashboard and alert rules use only the names of the contract and are valid.

Checks the Prometheus rules (``promtool check rules`` and ``promtool test rules``), every PromQL
expression of the Grafana dashboard (through ``promtool check rules`` on a temporary rules file),
the metric, label and label-value names against the reference in ``docs/`` (the category table of
``docs/categories.md``, the metrics table of ``docs/telemetry.md``), those pages against the code
(``ErrorCategory``, the constants of ``etf_otel/attributes.py``), and that the
committed dashboard JSON is exactly what ``dashboards/grafana/generate.py`` builds and round-trips
through the grafana-foundation-sdk models.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog import encoder as sdk_encoder
from grafana_foundation_sdk.cog import plugins as sdk_plugins
from grafana_foundation_sdk.models import dashboard as sdk_dashboard
from grafana_foundation_sdk.models import prometheus as sdk_prometheus

REPO = Path(__file__).resolve().parents[1]
CATEGORIES_DOC = REPO / "docs" / "categories.md"
TELEMETRY_DOC = REPO / "docs" / "telemetry.md"
RULES = REPO / "dashboards" / "prometheus" / "etf-otel-alerts.yml"
RULES_TEST = REPO / "dashboards" / "prometheus" / "etf-otel-alerts.test.yml"
GENERATOR = REPO / "dashboards" / "grafana" / "generate.py"
DASHBOARD = REPO / "dashboards" / "grafana" / "etf-otel.json"

# docs/telemetry.md, Metrics: instrument -> Prometheus name (as produced by the OTel Prometheus exporter).
COUNTERS = {
    "etf_tool_call_fragments_total",
    "etf_tool_call_id_transitions_total",
    "etf_tool_call_identity_errors_total",
    "etf_integrity_violations_total",
    "etf_linkage_drift_total",
    "etf_tool_calls_total",
    "etf_streams_total",
    "etf_request_pairing_problems_total",
}
HISTOGRAM = "gen_ai_execute_tool_duration_seconds"
ALLOWED_METRICS = COUNTERS | {f"{HISTOGRAM}{suffix}" for suffix in ("_bucket", "_sum", "_count")}

# Labels each metric carries in Prometheus (docs/telemetry.md attributes, dots -> underscores),
# plus the target labels `job` and `instance`, and `le` on histogram buckets.
TARGET_LABELS = {"job", "instance"}
METRIC_LABELS: dict[str, set[str]] = {
    "etf_tool_call_fragments_total": {"gen_ai_provider_name"},
    "etf_tool_call_id_transitions_total": {"etf_id_transition", "etf_id_kind", "gen_ai_provider_name"},
    "etf_tool_call_identity_errors_total": {
        "etf_error_category",
        "etf_id_kind",
        "etf_id_prior_present",
        "etf_id_empty",
        "gen_ai_provider_name",
    },
    "etf_integrity_violations_total": {"etf_error_category", "gen_ai_provider_name"},
    "etf_linkage_drift_total": {"etf_divergence_kind", "gen_ai_provider_name"},
    "etf_tool_calls_total": {"etf_tool_call_verdict", "gen_ai_tool_name", "gen_ai_provider_name"},
    "etf_streams_total": {"etf_stream_state", "etf_protocol", "gen_ai_provider_name"},
    "etf_request_pairing_problems_total": {"etf_pairing_problem", "etf_pairing_reason", "gen_ai_provider_name"},
    f"{HISTOGRAM}_bucket": {"gen_ai_tool_name", "error_type", "le"},
    f"{HISTOGRAM}_sum": {"gen_ai_tool_name", "error_type"},
    f"{HISTOGRAM}_count": {"gen_ai_tool_name", "error_type"},
}
KNOWN_LABELS = TARGET_LABELS.union(*METRIC_LABELS.values())

# docs/categories.md, The closed list: the error categories.
ERROR_CATEGORIES = {
    "initial_null",
    "id_conflict",
    "empty_after_established",
    "unsupported_id_type",
    "missing_index",
    "name_conflict",
    "unknown_slot",
    "missing_id",
    "missing_name",
    "invalid_arguments",
    "duplicate_call_id",
    "snapshot_mismatch",
    "truncated_stream",
    "incomplete_response",
    "orphaned_result",
    "unanswered_call",
    "duplicate_result",
    "divergent_assembly",
}
# Closed value sets of other labels (docs/identity-rules.md and docs/telemetry.md).
LABEL_VALUES: dict[str, set[str]] = {
    "etf_error_category": ERROR_CATEGORIES,
    "etf_stream_state": {"completed", "truncated", "abandoned", "failed"},
    "etf_pairing_problem": {
        "result_without_call",
        "call_without_result",
        "duplicate_result",
        "duplicate_call_id",
        "id_rejected_by_target",
    },
    "etf_pairing_reason": {"history_trimmed", "id_rewritten", "concatenated_ids", "unknown"},
    "etf_tool_call_verdict": {"proposed", "rejected"},
    "etf_id_kind": {"absent", "null", "string", "number", "boolean", "array", "object"},
    "etf_id_transition": {
        "await",
        "establish",
        "replace_empty",
        "keep_omitted",
        "keep_null",
        "keep_identical",
        "reject",
        # compatibility transitions (docs/identity-rules.md, Compatibility rules)
        "keep_empty",
        "infer_index",
        "buffer_early",
        "drop_late",
        # Gemini (docs/protocols.md): an id-less call identified by position; a repeated whole call set aside
        "positional",
        "drop_repeat",
        # a complete body's call without an arguments key, read as {} (absent_arguments_in_body)
        "absent_arguments",
    },
    # docs/telemetry.md, The wire protocol: the shipped protocols' names (a custom protocol adds its own).
    "etf_protocol": {"chat_completions", "responses", "anthropic_messages", "gemini", "bedrock_converse", "ollama"},
}

# PromQL words the shipped expressions may use besides metric names.
PROMQL_WORDS = {
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "topk",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
}
SEVERITIES = {"critical", "warning", "info"}

STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
SELECTOR_RE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}")
MATCHER_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
IDENT_RE = re.compile(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*")
TEMPLATE_LABEL_RE = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")
TEMPLATE_CATEGORY_RE = re.compile(r'eq\s+\$labels\.etf_error_category\s+"([^"]*)"')
LABEL_VALUES_RE = re.compile(r"^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$")


# --- helpers ---------------------------------------------------------------------------------------


def analyse(expr: str) -> tuple[set[str], set[str], list[tuple[str | None, str, str, str]]]:
    """Return (metric names, label names, matchers) used by a PromQL expression.

    Matchers are (metric or None, label, operator, value). Identifiers that are neither PromQL
    words, labels nor metric names are returned as metric names, so anything unknown fails.
    """
    labels: set[str] = set()
    matchers: list[tuple[str | None, str, str, str]] = []
    for match in SELECTOR_RE.finditer(expr):
        metric = match.group(1)
        for label, op, value in MATCHER_RE.findall(match.group(2)):
            labels.add(label)
            matchers.append((metric, label, op, value))
    rest = SELECTOR_RE.sub(lambda m: f" {m.group(1) or ''} ", expr)
    rest = STRING_RE.sub(" ", rest)
    for match in GROUPING_RE.finditer(rest):
        labels.update(name.strip() for name in match.group(1).split(",") if name.strip())
    rest = GROUPING_RE.sub(" ", rest)
    rest = re.sub(r"\[[^\]]*\]", " ", rest)
    metrics = {word for word in IDENT_RE.findall(rest) if word not in PROMQL_WORDS}
    return metrics, labels, matchers


def matcher_values(op: str, value: str) -> set[str]:
    """The literal values an `=` or `=~` matcher selects (a regex must be a plain a|b|c list)."""
    if op == "=":
        return {value}
    if op == "=~":
        return set(value.split("|"))
    return set()


def problems_in(expr: str) -> list[str]:
    """Every name problem in one PromQL expression (empty when it uses only contract names)."""
    metrics, labels, matchers = analyse(expr)
    problems = [f"unknown metric {m!r}" for m in sorted(metrics - ALLOWED_METRICS)]
    problems += [f"unknown label {label!r}" for label in sorted(labels - KNOWN_LABELS)]
    for metric, label, op, value in matchers:
        if metric in METRIC_LABELS and label not in METRIC_LABELS[metric] | TARGET_LABELS:
            problems.append(f"{metric} has no label {label!r}")
        if label in LABEL_VALUES and not value.startswith("$"):
            for item in sorted(matcher_values(op, value) - LABEL_VALUES[label]):
                problems.append(f"unknown {label} value {item!r}")
    return problems


def concrete(expr: str) -> str:
    """Replace Grafana variables with concrete values so promtool can parse the expression."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
    return re.sub(r"\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?", ".*", expr)


def promtool_check(exprs: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `promtool check rules` on a file with one recording rule per expression."""
    rules = [{"record": f"etf_check:{name}", "expr": expr} for name, expr in exprs.items()]
    path = tmp_path / "expressions.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "expressions", "rules": rules}]}), encoding="utf-8")
    return subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False)


def load_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def dashboard_exprs() -> dict[str, str]:
    """Every panel query and variable selector of the dashboard, keyed by panel id and ref_id."""
    dashboard = load_dashboard()
    exprs = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            exprs[f"panel_{panel['id']}_{target['refId']}"] = target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES_RE.match(variable["query"])
            assert match, f"variable {variable['name']}: not a label_values(selector, label) query"
            exprs[f"variable_{variable['name']}"] = f"count by ({match.group(2)}) ({match.group(1)})"
    return exprs


def rule_exprs() -> dict[str, str]:
    return {rule["alert"]: rule["expr"] for rule in load_rules()}


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("etf_dashboard_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


BACKTICKED_RE = re.compile(r"`([^`]+)`")
SEPARATOR_ROW_RE = re.compile(r"^\|[\s|:-]+\|$")
HEADING_RE = re.compile(r"^(#{1,6}) (.+?)\s*$")


def doc_section(path: Path, heading: str) -> str:
    """The text of ``path`` under the heading ``heading``, up to the next heading of its level or above.

    Fails (never skips) when the page or the heading is missing: the reference ships in the repository.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        match = HEADING_RE.match(line)
        if match and match.group(2) == heading:
            level = len(match.group(1))
            body: list[str] = []
            for following in lines[number + 1 :]:
                other = HEADING_RE.match(following)
                if other and len(other.group(1)) <= level:
                    break
                body.append(following)
            return "\n".join(body)
    raise AssertionError(f"{path.relative_to(REPO)} has no heading {heading!r}")


def markdown_table(section: str) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the first table in ``section``; cells are stripped, backticks kept."""
    table: list[list[str]] = []
    for line in section.splitlines():
        if line.startswith("|"):
            if not SEPARATOR_ROW_RE.match(line):
                table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif table:
            break
    assert table, "no table in section"
    header, rows = table[0], table[1:]
    assert all(len(row) == len(header) for row in rows), f"ragged table under {header}"
    return header, rows


def table_rows(section: str) -> list[list[str]]:
    """The rows of the first table in ``section``, without the header, each cell without backticks."""
    return [[cell.strip("`") for cell in row] for row in markdown_table(section)[1]]


def documented_categories(heading: str) -> dict[str, str]:
    """``{category: phase}`` from the table under ``heading`` in docs/categories.md.

    The category column is the one whose header mentions "category"; each cell must hold exactly
    one name in backticks.
    """
    header, rows = markdown_table(doc_section(CATEGORIES_DOC, heading))
    column = next(i for i, title in enumerate(header) if "category" in title)
    phase = header.index("phase")
    categories: dict[str, str] = {}
    for row in rows:
        names = BACKTICKED_RE.findall(row[column])
        assert len(names) == 1, f"{heading}: one category in backticks per row, got {row[column]!r}"
        assert names[0] not in categories, f"{heading}: {names[0]} listed twice"
        categories[names[0]] = row[phase]
    return categories


IMPLEMENTED_CATEGORIES = "The closed list"


PROMTOOL = shutil.which("promtool") or ""
needs_promtool = pytest.mark.skipif(
    not PROMTOOL, reason="promtool not found: apt-get install -y --no-install-recommends prometheus"
)


# --- the lists above are the reference's, and the reference is the code's ---------------------------------


def test_allowed_metrics_are_the_prometheus_names_of_docs_telemetry() -> None:
    rows = table_rows(doc_section(TELEMETRY_DOC, "Metrics"))
    names = {row[3] for row in rows}
    assert names == COUNTERS | {HISTOGRAM}
    for instrument, _kind, attributes, prometheus in rows:
        doc_labels = {a.strip().split(" ")[0].strip("`").replace(".", "_") for a in attributes.split(",")}
        if prometheus == HISTOGRAM:
            assert doc_labels == METRIC_LABELS[f"{HISTOGRAM}_sum"], instrument
        else:
            assert doc_labels == METRIC_LABELS[prometheus], instrument


def test_error_categories_are_the_implemented_table_of_docs_categories() -> None:
    assert set(documented_categories(IMPLEMENTED_CATEGORIES)) == ERROR_CATEGORIES


def test_docs_categories_are_exactly_the_error_category_enum_with_its_phases() -> None:
    from etf_otel.core._vocabulary import ErrorCategory

    documented = documented_categories(IMPLEMENTED_CATEGORIES)
    assert documented == {category.value: category.phase.value for category in ErrorCategory}


def test_docs_categories_say_which_protocols_produce_each_one() -> None:
    header, rows = markdown_table(doc_section(CATEGORIES_DOC, IMPLEMENTED_CATEGORIES))
    produced_by = header.index("produced by")
    protocols = {"all", "Chat Completions", "Responses", "Anthropic", "Gemini"}
    for row in rows:
        named = {name.strip() for name in row[produced_by].split(",")}
        assert named and named <= protocols, row


def test_label_value_lists_are_the_code_vocabularies() -> None:
    from etf_otel.core._vocabulary import IdKind, StreamState, Transition, Verdict

    assert LABEL_VALUES["etf_stream_state"] == {state.value for state in StreamState}
    assert LABEL_VALUES["etf_tool_call_verdict"] == {verdict.value for verdict in Verdict}
    assert LABEL_VALUES["etf_id_kind"] == {kind.value for kind in IdKind}
    assert LABEL_VALUES["etf_id_transition"] == {transition.value for transition in Transition}


def test_protocol_label_values_name_every_registered_protocol() -> None:
    from etf_otel.protocols import PROTOCOLS

    assert set(PROTOCOLS) <= LABEL_VALUES["etf_protocol"]


def attribute_constants() -> dict[str, str]:
    """Every string constant of etf_otel/attributes.py, by name."""
    from etf_otel import attributes

    return {name: value for name, value in vars(attributes).items() if name.isupper() and isinstance(value, str)}


TELEMETRY_NAME_RE = re.compile(r"\b(?:etf|gen_ai)(?:\.[a-z0-9_]+)+|\berror\.type\b")


def test_docs_metrics_table_is_the_code_instruments_units_and_attributes() -> None:
    from etf_otel import attributes as A
    from etf_otel.instrumentation._counters import COUNTERS as COUNTER_SPECS

    code = {spec.name: (spec.unit, set(spec.attributes)) for spec in COUNTER_SPECS}
    code[A.METRIC_EXECUTE_TOOL_DURATION] = ("s", {A.GEN_AI_TOOL_NAME, A.ERROR_TYPE})
    metric_constants = {value for name, value in attribute_constants().items() if name.startswith("METRIC_")}
    assert set(code) == metric_constants
    header, rows = markdown_table(doc_section(TELEMETRY_DOC, "Metrics"))
    assert header == ["instrument", "kind", "attributes", "Prometheus"]
    documented: dict[str, tuple[str, set[str]]] = {}
    for instrument, kind, attributes, _prometheus in rows:
        (name,) = BACKTICKED_RE.findall(instrument)
        (unit,) = BACKTICKED_RE.findall(kind)
        documented[name] = (unit, {BACKTICKED_RE.findall(part)[0] for part in attributes.split(",")})
    assert documented == code


def test_docs_bounded_diagnostics_are_the_code_attributes_and_values() -> None:
    from etf_otel import attributes as A
    from etf_otel.core._vocabulary import IdKind, Transition

    header, rows = markdown_table(doc_section(TELEMETRY_DOC, "Bounded diagnostics"))
    assert header == ["attribute", "type", "values"]
    by_name = {BACKTICKED_RE.findall(row[0])[0]: row for row in rows}
    assert set(by_name) == {
        A.ETF_ID_KIND,
        A.ETF_ID_PRIOR_PRESENT,
        A.ETF_ID_EMPTY,
        A.ETF_ID_TRANSITION,
        A.ETF_ERROR_CATEGORY,
        A.ETF_TOOL_CALL_INDEX,
        A.ETF_CHOICE_INDEX,
    }
    kinds = set(BACKTICKED_RE.findall(by_name[A.ETF_ID_KIND][2])) - {'""'}
    assert kinds == {kind.value for kind in IdKind}
    assert set(BACKTICKED_RE.findall(by_name[A.ETF_ID_TRANSITION][2])) == {t.value for t in Transition}


def test_docs_wire_protocol_attribute_is_the_code_constant_with_the_label_values() -> None:
    from etf_otel import attributes as A

    header, rows = markdown_table(doc_section(TELEMETRY_DOC, "The wire protocol"))
    assert header == ["attribute", "type", "values"]
    ((attribute, kind, values),) = rows
    assert BACKTICKED_RE.findall(attribute) == [A.ETF_PROTOCOL]
    assert kind == "string"
    assert set(BACKTICKED_RE.findall(values)) - {"name", "WireProtocol", "protocol="} == LABEL_VALUES["etf_protocol"]


def test_every_telemetry_name_in_docs_telemetry_is_a_code_constant() -> None:
    """A misspelled attribute, event, span or metric name anywhere on the page fails here."""
    constants = set(attribute_constants().values())
    text = TELEMETRY_DOC.read_text(encoding="utf-8")
    names = {name for span in BACKTICKED_RE.findall(text) for name in TELEMETRY_NAME_RE.findall(span)}
    assert names - constants == set(), "names the code does not emit"
    span_names = {attribute_constants()[name] for name in attribute_constants() if name.startswith("SPAN_")}
    headings = {match.group(2) for line in text.splitlines() if (match := HEADING_RE.match(line))}
    for span in span_names:
        assert any(heading.strip("`").split(" ")[0] == span for heading in headings), f"no section for {span}"


# --- Prometheus rules ---------------------------------------------------------------------------------


@needs_promtool
def test_promtool_check_rules_passes() -> None:
    result = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(load_rules())} rules found" in result.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    result = subprocess.run(
        [PROMTOOL, "test", "rules", RULES_TEST.name],
        cwd=RULES_TEST.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_rule_has_unit_tests_that_fire_and_that_must_not_fire() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))
    assert tests["rule_files"] == [RULES.name]
    fires: set[str] = set()
    silent: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    alerts = set(rule_exprs())
    assert alerts - fires == set(), "rules without a firing test case"
    assert alerts - silent == set(), "rules without a test case that must not fire"
    assert (fires | silent) - alerts == set(), "tests for rules that do not exist"


def test_rules_use_only_contract_metric_label_and_category_names() -> None:
    problems = {name: problems_in(expr) for name, expr in rule_exprs().items()}
    assert {name: found for name, found in problems.items() if found} == {}


def test_rule_annotations_use_only_known_labels_and_categories() -> None:
    for rule in load_rules():
        text = " ".join(rule["annotations"].values())
        assert set(TEMPLATE_LABEL_RE.findall(text)) <= KNOWN_LABELS, rule["alert"]
        assert set(TEMPLATE_CATEGORY_RE.findall(text)) <= ERROR_CATEGORIES, rule["alert"]


def test_unit_test_series_use_only_contract_names() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text(encoding="utf-8"))
    series = [s["series"] for case in tests["tests"] for s in case["input_series"]]
    problems = {s: problems_in(s) for s in series}
    assert {s: found for s, found in problems.items() if found} == {}


def test_rules_keep_job_and_provider_through_aggregation_and_are_documented() -> None:
    for rule in load_rules():
        name = rule["alert"]
        groupings = GROUPING_RE.findall(STRING_RE.sub('""', rule["expr"]))
        by_clauses = re.findall(r"\bby\s*\(([^)]*)\)", rule["expr"])
        assert by_clauses, f"{name}: aggregates nothing"
        for clause in by_clauses:
            kept = {label.strip() for label in clause.split(",")}
            assert {"job", "gen_ai_provider_name"} <= kept, f"{name}: by ({clause}) drops job or provider"
            if "etf_error_category" in rule["annotations"]["summary"]:
                assert "etf_error_category" in kept, f"{name}: by ({clause}) drops the category"
        assert groupings, name
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert set(rule["annotations"]) >= {"summary", "description"}, name
        assert "{{ $labels.job }}" in rule["annotations"]["summary"], name
        assert "{{ $labels.gen_ai_provider_name }}" in rule["annotations"]["summary"], name
        assert "What to do:" in rule["annotations"]["description"], name
        assert "Meaning" in rule["annotations"]["description"], name


# --- Grafana dashboard ---------------------------------------------------------------------------------


def test_dashboard_uses_only_contract_metric_label_and_value_names() -> None:
    problems = {name: problems_in(expr) for name, expr in dashboard_exprs().items()}
    assert {name: found for name, found in problems.items() if found} == {}


def test_dashboard_shows_every_contract_metric() -> None:
    used: set[str] = set()
    for expr in dashboard_exprs().values():
        used |= analyse(expr)[0]
    assert COUNTERS <= used
    assert f"{HISTOGRAM}_bucket" in used


@needs_promtool
def test_every_dashboard_and_rule_expression_parses(tmp_path: Path) -> None:
    exprs = {name: concrete(expr) for name, expr in dashboard_exprs().items()}
    exprs |= {f"rule_{name}": expr for name, expr in rule_exprs().items()}
    result = promtool_check(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_dashboard_panels_have_ids_ref_ids_and_the_datasource_variable() -> None:
    dashboard = load_dashboard()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert ref_ids and all(ref_ids) and len(ref_ids) == len(set(ref_ids)), panel["title"]
        assert "$job" in json.dumps(panel["targets"]), f"{panel['title']}: not filtered by job"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["job"]["type"] == "query"
    assert variables["provider"]["type"] == "query"
    assert variables["provider"]["query"].endswith(", gen_ai_provider_name)")
    assert variables["protocol"]["type"] == "query"
    assert variables["protocol"]["query"].startswith("label_values(etf_streams_total{")  # the one metric with it
    assert variables["protocol"]["query"].endswith(", etf_protocol)")
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if "$protocol" in target["expr"]:  # only etf_streams_total carries etf_protocol
                assert analyse(target["expr"])[0] == {"etf_streams_total"}, panel["title"]


def test_generator_check_mode_accepts_the_committed_json() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generator_check_mode_rejects_a_stale_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generator = load_generator()
    stale = tmp_path / "etf-otel.json"
    stale.write_text(DASHBOARD.read_text(encoding="utf-8").replace("Identity errors", "Identity errorz"))
    assert generator.main(["--check", "--output", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert generator.main(["--output", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == DASHBOARD.read_text(encoding="utf-8")


def test_generator_output_is_deterministic() -> None:
    generator = load_generator()
    assert generator.render() == generator.render() == DASHBOARD.read_text(encoding="utf-8")


def test_dashboard_json_round_trips_through_the_sdk_models() -> None:
    sdk_plugins.register_default_plugins()
    data = load_dashboard()
    model = sdk_dashboard.Dashboard.from_json(data)
    again = json.loads(json.dumps(model, cls=sdk_encoder.JSONEncoder))
    assert again == data
    for panel in model.panels or []:
        if isinstance(panel, sdk_dashboard.Panel):
            assert all(isinstance(t, sdk_prometheus.Dataquery) for t in panel.targets or []), panel.title


# --- the checks themselves can fail --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("sum(rate(etf_tool_call_errors_total[5m]))", "unknown metric 'etf_tool_call_errors_total'"),
        ("rate(gen_ai_execute_tool_duration_seconds[5m])", "unknown metric 'gen_ai_execute_tool_duration_seconds'"),
        ("sum by (provider) (rate(etf_streams_total[5m]))", "unknown label 'provider'"),
        ('etf_streams_total{etf_stream_state="timeout"}', "unknown etf_stream_state value 'timeout'"),
        (
            'etf_integrity_violations_total{etf_error_category=~"orphaned_result|orphan"}',
            "unknown etf_error_category value 'orphan'",
        ),
        (
            'gen_ai_execute_tool_duration_seconds_count{gen_ai_provider_name="openai"}',
            "gen_ai_execute_tool_duration_seconds_count has no label 'gen_ai_provider_name'",
        ),
    ],
)
def test_name_check_reports_names_outside_the_contract(expr: str, problem: str) -> None:
    assert problem in problems_in(expr)


@needs_promtool
def test_expression_check_reports_invalid_promql(tmp_path: Path) -> None:
    result = promtool_check({"bad": "sum by (job) (rate(etf_streams_total[5m])"}, tmp_path)
    assert result.returncode != 0
