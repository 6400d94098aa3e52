"""``etf-otel demo`` as a new user runs it: a subprocess, no server, the real openai and anthropic clients."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Each new case of the Responses and Anthropic parts, with the category its row must show.
PROTOCOL_CASES = {
    "valid call, result sent by call_id": "proposed; host ran read_source",
    "call_id changed in response.completed": "caught: snapshot_mismatch; guard refused: orphaned_result",
    "response.incomplete (max_output_tokens)": "caught: incomplete_response",
    "result sent with the fc_ item id": "caught: orphaned_result",
    "valid call, tool_use block to the host": "proposed; host ran read_source",
    "path parameter cut by max_tokens": "caught: incomplete_response; guard refused: incomplete_response",
    "block index reused by a second call": "caught: id_conflict",
}
WITHOUT_ANTHROPIC = (
    "import sys; sys.modules['anthropic'] = None\n"  # `import anthropic` raises ImportError
    "from etf_otel.cli import main; sys.exit(main(['demo']))"
)


def _run(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": str(columns)},
    )


def _demo(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    return _run("-m", "etf_otel", "demo", *args, columns=columns)


@pytest.fixture(scope="module")
def wide() -> str:
    """The output of one demo run at 200 columns (it exited 0)."""
    run = _demo()
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_demo_runs_every_case_and_says_so(wide: str) -> None:
    out = wide
    assert "preserved ids identical (call-read-1, call-save-1); report identical" in out
    for category in (
        "initial_null",
        "id_conflict",
        "empty_after_established",
        "unsupported_id_type",
        "invalid_arguments",
        "duplicate_call_id",
        "truncated_stream",
        "orphaned_result",
        "unanswered_call",
        "duplicate_result",
    ):
        assert category in out
    assert "all cases behaved as the rules say" in out
    assert "expected" not in out.replace("as expected", "")


def test_demo_names_each_protocol_case_with_its_category(wide: str) -> None:
    """Each protocol has its labelled section; each new case is one row with what the rules decided."""
    lines = wide.splitlines()
    responses = next(i for i, line in enumerate(lines) if line.startswith("OpenAI Responses:"))
    anthropic = next(i for i, line in enumerate(lines) if line.startswith("Anthropic Messages:"))
    assert next(i for i, line in enumerate(lines) if line.startswith("Chat Completions:")) < responses < anthropic
    for name, decision in PROTOCOL_CASES.items():
        rows = [line for line in lines if f"│ {name} " in line]
        assert len(rows) == 1, name
        cells = [cell.strip() for cell in rows[0].split("│")]
        assert cells[3].startswith(decision), (name, cells)
        assert cells[4] == "ok", (name, cells)
    # what the SDK alone handed the app, next to the rules
    assert "│ call_9 read_source " in wide  # the call_id of response.completed, never proposed
    assert "raises RuntimeError: Didn't receive a `response.completed` event." in wide
    assert "result sent for fc_r4, unchecked" in wide
    assert "│ toolu_a4 save_report {} " in wide  # the reused block index split into a second call


def test_demo_max_tokens_case_shows_the_sdks_empty_input_and_the_refusal(wide: str) -> None:
    row = next(line for line in wide.splitlines() if "│ path parameter cut by max_tokens " in line)
    assert "│ toolu_a2 read_source {} " in row  # the SDK's final message: a valid-looking {}
    assert "guard refused: incomplete_response" in row
    words = " ".join(wide.split())  # the sentence may wrap
    assert (
        "max_tokens: the SDK's final message hands the app toolu_a2 read_source {} (stop_reason max_tokens), "
        "a valid-looking input; the rules: incomplete_response; the guarded host raised "
        "GuardRefusedError(incomplete_response) and never ran the tool." in words
    )


def test_demo_fits_80_columns_and_never_cuts_an_id() -> None:
    run = _demo(columns=80)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    # the report digest is shortened on purpose; nothing else may be cut
    assert "…" not in re.sub(r"sha256 [0-9a-f]{12}…", "", run.stdout)
    for whole in ("call_9", "fc_r4", "toolu_a2", "toolu_a4", "snapshot_mismatch", "incomplete_response"):
        assert whole in run.stdout, whole
    assert "all cases behaved as the rules say" in run.stdout


def test_demo_without_anthropic_skips_that_part_and_says_how_to_install_it() -> None:
    run = _run("-c", WITHOUT_ANTHROPIC)
    assert run.returncode == 0, run.stdout + run.stderr
    skipped = [line for line in run.stdout.splitlines() if line.startswith("Anthropic Messages:")]
    assert skipped == ["Anthropic Messages: skipped, no anthropic; pip install '.[openai,anthropic]'"]
    assert "toolu_" not in run.stdout
    assert "OpenAI Responses:" in run.stdout
    assert "all cases behaved as the rules say" in run.stdout


def test_demo_export_writes_otlp_json_lines(tmp_path: Path) -> None:
    target = tmp_path / "demo.jsonl"
    run = _demo("--export", str(target))
    assert run.returncode == 0, run.stdout + run.stderr
    names: list[str] = []
    ids: set[str] = set()
    protocols: set[str] = set()
    metric_names: set[str] = set()
    for line in target.read_text().splitlines():
        document = json.loads(line)
        for resource_spans in document.get("resourceSpans", []):
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    names.append(span["name"].split(" ")[0])
                    for attribute in span.get("attributes", []):
                        if attribute["key"] == "gen_ai.tool.call.id":
                            ids.add(attribute["value"]["stringValue"])
                        if attribute["key"] == "etf.protocol":
                            protocols.add(attribute["value"]["stringValue"])
        for resource_metrics in document.get("resourceMetrics", []):
            for scope_metrics in resource_metrics["scopeMetrics"]:
                metric_names.update(metric["name"] for metric in scope_metrics["metrics"])
    assert {"assemble_response", "assemble_tool_call", "execute_tool"} <= set(names)
    assert {"call-read-1", "call-save-1"} <= ids
    assert protocols == {"chat_completions", "responses", "anthropic_messages"}
    assert {"call_r1", "toolu_a1", "toolu_a2"} <= ids  # the new parts' calls, by their call_id / tool_use id
    assert not {"fc_r1", "call_9"} & ids  # the item id is never the identity; call_9 was never proposed
    assert {"etf.tool_call.fragments", "etf.streams", "etf.integrity.violations", "etf.tool_calls"} <= metric_names
    assert "42" not in ids  # the rejected number id never becomes a span's call id
