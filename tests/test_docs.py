"""The reference in ``docs/`` stands on its own in a clone and agrees with the code.

* Every relative markdown link in README.md, dashboards/README.md and docs/*.md points at a
  file of the repository, and every ``#anchor`` at a heading of its target page.
* Nothing in the repository points outside it at ``../shared`` (the contract's working copy
  that a clone does not have); the markdown pages do not cite "SPEC" either.
* The identity table, the compatibility rules (with their call-span counters) and the divergence
  sub-kinds written in the docs are the code's, row by row; every compatibility rule is in the
  tables of docs/identity-rules.md and docs/protocols.md, with the same transition in both.
* Every finish reason the code keeps (``known_finish_reasons()``) is listed where
  ``gen_ai.response.finish_reasons`` is described (docs/telemetry.md, and README.md if it ever
  lists them again), and nothing else is listed there as one.
* README.md is a front door: at most about 12 KB, its two commands as ``.ci/run`` and
  ``pyproject.toml`` make them true, links to the pages it hands the details to, and its span
  and metric tables name what the code emits.

The category and telemetry tables are checked against the code in ``tests/test_dashboards.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from etf_otel.core._divergence import DivergenceKind
from etf_otel.core._identity import STRICT_TABLE, CompatibilityRule, IdState, Incoming
from etf_otel.core._vocabulary import OTHER_FINISH_REASON, ErrorCategory, Transition
from etf_otel.protocols import known_finish_reasons

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted([REPO / "README.md", REPO / "dashboards" / "README.md", *DOCS.glob("*.md")])

FENCE_RE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
LINK_RE = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING_RE = re.compile(r"^(#{1,6}) (.+?)\s*#*\s*$", re.M)
BACKTICKED_RE = re.compile(r"`([^`]+)`")
SEPARATOR_ROW_RE = re.compile(r"^\|[\s|:-]+\|$")

# Where a mention of the shared working copy would leave a clone with a dangling pointer.
NO_SHARED_DIRS = ("docs", "dashboards", "etf_otel", "examples", "scripts")
NO_SHARED_FILES = ("README.md",)
SHARED_MARKERS = ("../shared", "shared/SPEC.md", "shared/PROTOCOLS.md")
SKIPPED_PARTS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code: links and headings live outside them."""
    return INLINE_CODE_RE.sub("", FENCE_RE.sub("", text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for match in HEADING_RE.finditer(FENCE_RE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        anchor, number = base, 0
        while anchor in found:
            number += 1
            anchor = f"{base}-{number}"
        found.add(anchor)
    return found


def relative_links(page: Path) -> list[str]:
    targets = LINK_RE.findall(prose(page.read_text(encoding="utf-8")))
    return [target for target in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)]


def section(page: Path, heading: str) -> str:
    """The text under ``heading`` up to the next heading of its level or above; fails when missing."""
    text = FENCE_RE.sub("", page.read_text(encoding="utf-8"))
    for match in HEADING_RE.finditer(text):
        if match.group(2) == heading:
            level = len(match.group(1))
            following = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, match.end())
            return text[match.end() : following.start() if following else len(text)]
    raise AssertionError(f"{page.relative_to(REPO)} has no heading {heading!r}")


def first_table(text: str) -> list[list[str]]:
    """The rows (without header) of the first markdown table in ``text``."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|"):
            if not SEPARATOR_ROW_RE.match(line):
                rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 1, "no table with rows"
    return rows[1:]


def table_columns(text: str, *names: str) -> list[tuple[str, ...]]:
    """The cells of the columns ``names`` (found by their header) of the first table in ``text``."""
    header: list[str] | None = None
    rows: list[tuple[str, ...]] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            if header is not None:
                break
            continue
        if SEPARATOR_ROW_RE.match(line):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        else:
            rows.append(tuple(cells[header.index(name)] for name in names))
    assert header is not None and rows, "no table with rows"
    return rows


def documented_rule_transitions(text: str) -> dict[str, str]:
    """``rule -> transition`` from the first table of a "Compatibility rules" section."""
    documented: dict[str, str] = {}
    for rule_cell, transition_cell in table_columns(text, "rule", "transition"):
        (rule,) = BACKTICKED_RE.findall(rule_cell)
        (transition,) = BACKTICKED_RE.findall(transition_cell)
        assert rule not in documented, f"{rule} documented twice"
        documented[rule] = transition
    return documented


FINISH_REASONS_ROW_RE = re.compile(r"^\| `gen_ai\.response\.finish_reasons` \|([^\n]*)\|$", re.M)
FINISH_REASONS_README_RE = re.compile(r"`gen_ai\.response\.finish_reasons` \(([^)]*)\)")
PLAIN_VALUE_RE = re.compile(r"^_?[A-Za-z][A-Za-z_]*$")


def documented_finish_reasons(description: str) -> tuple[set[str], set[str]]:
    """The code's finish reasons missing from ``description``, and plain values there that are none.

    Dotted names (``response.incomplete``) are the events a reason comes from, not reasons.
    """
    listed = {value for value in BACKTICKED_RE.findall(description) if PLAIN_VALUE_RE.match(value)}
    return known_finish_reasons() - listed, listed - known_finish_reasons() - {OTHER_FINISH_REASON}


def scanned_files() -> list[Path]:
    files = [REPO / name for name in NO_SHARED_FILES]
    for directory in NO_SHARED_DIRS:
        for path in sorted((REPO / directory).rglob("*")):
            if path.is_file() and not SKIPPED_PARTS & set(path.relative_to(REPO).parts):
                files.append(path)
    return files


# --- links ----------------------------------------------------------------------------------------


def test_the_reference_pages_exist_and_the_index_lists_each_of_them() -> None:
    pages = {path.name for path in DOCS.glob("*.md")} - {"README.md"}
    assert {
        "identity-rules.md",
        "categories.md",
        "telemetry.md",
        "guarantees.md",
        "cli.md",
        "protocols.md",
        "quirks.md",
    } <= pages
    indexed = {Path(target.split("#")[0]).name for target in relative_links(DOCS / "README.md")}
    assert pages <= indexed, "pages missing from docs/README.md"
    rows = [BACKTICKED_RE.sub("", row[0]) for row in first_table(prose((DOCS / "README.md").read_text()) + "\n")]
    listed = [Path(target).name for row in rows for target in LINK_RE.findall(row)]
    assert sorted(listed) == sorted(set(listed)), "a page listed twice in docs/README.md"


def test_readme_links_to_the_reference() -> None:
    assert "docs/README.md" in relative_links(REPO / "README.md")


# --- the README is a front door ---------------------------------------------------------------------

README_MAX_BYTES = 12 * 1024
MAIN_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -q '.[demo]' && .venv/bin/etf-otel demo"
# What the README hands over: each of these pages holds what the README no longer does.
README_HANDS_OVER = (
    "docs/README.md",
    "docs/usage.md",
    "docs/configuration.md",
    "docs/telemetry.md",
    "docs/guarantees.md",
    "docs/performance.md",
    "docs/testing.md",
    "docs/cli.md",
    "docs/development.md",
    "dashboards/README.md",
    "examples/",
    "CHANGELOG.md",
)


def test_readme_stays_a_front_door() -> None:
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move reference material to docs/"


def test_readme_commands_are_the_ones_the_repository_runs() -> None:
    """The main job is the demo from the ``demo`` extra; the test command is what CI runs."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert MAIN_COMMAND in readme
    assert "\nscripts/test\n" in readme
    assert "`.ci/run` calls `scripts/test`" in readme
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^(exec )?scripts/test\b", ci, re.M), ".ci/run no longer calls scripts/test"


def test_readme_links_to_every_page_it_hands_over_to() -> None:
    links = {target.split("#")[0] for target in relative_links(REPO / "README.md")}
    assert set(README_HANDS_OVER) - links == set()


TELEMETRY_NAME_RE = re.compile(r"\b(?:etf|gen_ai)(?:\.[a-z0-9_]+)+|\berror\.type\b")


def attribute_constants() -> dict[str, str]:
    from etf_otel import attributes

    return {name: value for name, value in vars(attributes).items() if name.isupper() and isinstance(value, str)}


def test_readme_span_and_metric_tables_are_the_code_names() -> None:
    constants = attribute_constants()
    text = section(REPO / "README.md", "Spans and metrics")
    spans = {BACKTICKED_RE.findall(row[0])[0].split(" ")[0] for row in table_columns(text, "span (INTERNAL)")}
    assert spans == {value for name, value in constants.items() if name.startswith("SPAN_")}
    metrics: dict[str, str] = {}
    metric_table = text[text.index("| metric |") :]  # the second table of the section
    for metric_cell, prometheus_cell in table_columns(metric_table, "metric", "Prometheus"):
        (metric,) = BACKTICKED_RE.findall(metric_cell)
        (metrics[metric],) = BACKTICKED_RE.findall(prometheus_cell)
    assert set(metrics) == {value for name, value in constants.items() if name.startswith("METRIC_")}
    for metric, prometheus in metrics.items():
        base = metric.replace(".", "_")
        assert prometheus in (f"{base}_total", f"{base}_seconds"), metric
    names = {name for code in BACKTICKED_RE.findall(text) for name in TELEMETRY_NAME_RE.findall(code)}
    assert names - set(constants.values()) == set(), "names the code does not emit"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_resolves_to_a_file_and_heading_of_the_repository(page: Path) -> None:
    problems: list[str] = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.is_relative_to(REPO):
            problems.append(f"{target}: outside the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading with anchor #{anchor}")
    assert problems == []


def test_link_check_reports_broken_targets(tmp_path: Path) -> None:
    """The checks above can fail: a missing file, a missing anchor and an escape are all seen."""
    page = DOCS / "telemetry.md"
    assert "metrics" in anchors(page)
    assert "no-such-heading" not in anchors(page)
    text = "[a](nope.md) [b](telemetry.md#no-such-heading) [c](../../x.md) `[d](code.md)` [e](https://x.org)"
    (tmp_path / "page.md").write_text(text, encoding="utf-8")
    assert relative_links(tmp_path / "page.md") == ["nope.md", "telemetry.md#no-such-heading", "../../x.md"]


# --- no pointers outside the repository -------------------------------------------------------------


def test_nothing_in_the_repository_points_at_the_shared_working_copy() -> None:
    found: list[str] = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary files cannot hold a link
        for marker in SHARED_MARKERS:
            if marker in text:
                found.append(f"{path.relative_to(REPO)}: {marker}")
    assert found == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_markdown_pages_cite_the_reference_not_spec(page: Path) -> None:
    assert re.findall(r".*\bSPEC\b.*", page.read_text(encoding="utf-8")) == []


# --- the docs' tables are the code's ----------------------------------------------------------------


def test_identity_table_in_docs_is_the_code_strict_table_row_by_row() -> None:
    states = {state.value for state in IdState}
    incomings = {incoming.value for incoming in Incoming}
    documented: dict[tuple[IdState, Incoming], tuple[Transition, ErrorCategory | None]] = {}
    for state_cell, incoming_cell, transition_cell, category_cell in first_table(
        section(DOCS / "identity-rules.md", "The identity table")
    ):
        row_states = BACKTICKED_RE.findall(state_cell)
        row_incomings = [name for name in BACKTICKED_RE.findall(incoming_cell) if name in incomings]
        assert row_states and set(row_states) <= states, state_cell
        assert row_incomings, incoming_cell
        (transition,) = BACKTICKED_RE.findall(transition_cell)
        categories = BACKTICKED_RE.findall(category_cell)
        assert len(categories) <= 1, category_cell
        decision = (Transition(transition), ErrorCategory(categories[0]) if categories else None)
        for state in row_states:
            for incoming in row_incomings:
                key = (IdState(state), Incoming(incoming))
                assert key not in documented, f"{key} documented twice"
                documented[key] = decision
    code = {key: (decision.transition, decision.category) for key, decision in STRICT_TABLE.items()}
    assert documented == code


def test_compatibility_rules_in_docs_are_the_code_rules_with_their_transitions() -> None:
    rows = first_table(section(DOCS / "identity-rules.md", "Compatibility rules"))
    documented = {BACKTICKED_RE.findall(rule)[0]: BACKTICKED_RE.findall(transition)[0] for rule, transition, _ in rows}
    assert set(documented) == {rule.value for rule in CompatibilityRule}
    assert documented == {
        "empty_continuation": "keep_empty",
        "infer_missing_index": "infer_index",
        "buffer_early_deltas": "buffer_early",
        "drop_post_done_delta": "drop_late",
        "drop_repeated_call": "drop_repeat",
        "require_call_id": "reject",  # a strict option: its calls are rejected (missing_id), nothing admitted
        "absent_arguments_in_body": "absent_arguments",  # on by default, complete bodies only
    }
    assert set(documented.values()) <= {transition.value for transition in Transition}


def test_call_span_counters_of_compatibility_transitions_in_docs_are_the_code_mapping() -> None:
    from etf_otel.instrumentation._span_attributes import COMPAT_SPAN_COUNTERS

    rows = first_table(section(DOCS / "telemetry.md", "Compatibility transitions on the call span"))
    documented = {BACKTICKED_RE.findall(transition)[0]: BACKTICKED_RE.findall(name)[0] for transition, name, _ in rows}
    assert documented == {transition.value: name for transition, name in COMPAT_SPAN_COUNTERS.items()}
    # Every rule's transition has its counter: a rule whose effect the call span cannot show fails here.
    # The strict option require_call_id admits nothing: its effect is the category missing_id.
    rules = first_table(section(DOCS / "identity-rules.md", "Compatibility rules"))
    assert {BACKTICKED_RE.findall(transition)[0] for _, transition, _ in rules} - {"reject"} <= set(documented)


def test_divergence_sub_kinds_in_docs_are_the_code_kinds() -> None:
    rows = first_table(section(DOCS / "categories.md", "Divergence sub-kinds (`etf.divergence.kind`)"))
    documented = [BACKTICKED_RE.findall(row[0])[0] for row in rows]
    assert len(documented) == len(set(documented))
    assert set(documented) == {kind.value for kind in DivergenceKind}


@pytest.mark.parametrize("page", ["identity-rules.md", "protocols.md"])
def test_every_compatibility_rule_is_in_the_rules_table_of(page: str) -> None:
    documented = documented_rule_transitions(section(DOCS / page, "Compatibility rules"))
    assert set(documented) == {rule.value for rule in CompatibilityRule}
    assert set(documented.values()) <= {transition.value for transition in Transition}


def test_protocols_and_identity_rules_give_each_compatibility_rule_the_same_transition() -> None:
    rules = documented_rule_transitions(section(DOCS / "identity-rules.md", "Compatibility rules"))
    assert documented_rule_transitions(section(DOCS / "protocols.md", "Compatibility rules")) == rules


def test_every_known_finish_reason_is_in_the_telemetry_reference() -> None:
    rows = FINISH_REASONS_ROW_RE.findall(section(DOCS / "telemetry.md", "`assemble_response`"))
    assert len(rows) == 1, "no single gen_ai.response.finish_reasons row"
    missing, unknown = documented_finish_reasons(rows[0])
    assert (missing, unknown) == (set(), set())
    assert OTHER_FINISH_REASON in BACKTICKED_RE.findall(rows[0])


def test_a_finish_reason_list_in_the_readme_is_the_code_list() -> None:
    """The README names the attribute and leaves its values to docs/telemetry.md; a list there must be whole."""
    for description in FINISH_REASONS_README_RE.findall((REPO / "README.md").read_text(encoding="utf-8")):
        assert documented_finish_reasons(description) == (set(), set())


def test_the_finish_reason_and_rule_checks_report_what_is_missing() -> None:
    """The checks above can fail: a reason left out, a misspelled one, a rule left out or renamed."""
    complete = " ".join(f"`{reason}`" for reason in sorted(known_finish_reasons()))
    assert documented_finish_reasons(f"{complete} `_OTHER` `response.incomplete`") == (set(), set())
    stale = complete.replace("`pause_turn`", "`pause`")
    assert documented_finish_reasons(stale) == ({"pause_turn"}, {"pause"})
    table = "| rule | transition |\n|---|---|\n| `empty_continuation` | `keep_empty` |\n"
    table += "| `drop_post_done` | `drop_late` |\n"  # drop_post_done_delta misspelled; three rules left out
    documented = documented_rule_transitions(table)
    assert documented == {"empty_continuation": "keep_empty", "drop_post_done": "drop_late"}
    assert set(documented) != {rule.value for rule in CompatibilityRule}
