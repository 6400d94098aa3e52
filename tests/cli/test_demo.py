"""``etf-otel demo`` as a new user runs it: a subprocess, no server, the real openai and anthropic clients.

Piped (as here), each case is one tab-separated line; on a terminal (a pty) the tables fit its width.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ._terminal import in_terminal

# Each case: (the start of what the SDK alone hands the app, or None: not checked; the start of etf-otel's decision).
CASES = {
    # Chat Completions
    "control: continuations omit the id": ("call-read-1 read_source", "proposed; host ran read_source, save_report"),
    "target: continuations send id: null": ("call-read-1 read_source", "proposed; host ran read_source, save_report"),
    "id repeated on every fragment": ("call-d1call-d1call-d1 read_source", "proposed; host ran read_source"),
    "first tool call at index 1": ("raises IndexError", "proposed; host ran read_source"),
    "type: null on a continuation": ("raises AssertionError", "proposed; host ran read_source"),
    "second id on the same index": ("call-r1call-r2 read_source", "caught: id_conflict; guard refused: id_conflict"),
    "stream ends mid-arguments, no finish_reason": (
        'call-r1 read_source {"path": "sou',
        "caught: invalid_arguments, truncated_stream; guard refused",
    ),
    "connection cut mid-call": ("raises APIConnectionError", "caught: invalid_arguments, truncated_stream"),
    "arguments not JSON": ('call-r1 read_source {"path": "s', "caught: invalid_arguments; guard refused"),
    "initial null id": ("(no id) read_source", "caught: initial_null"),
    "null id on a new index": ("call-r1 read_source", "caught: initial_null"),
    "empty id after an id": ("call-r1 read_source", "caught: empty_after_established; guard refused"),
    "number as id": ("42 read_source", "caught: unsupported_id_type"),
    "two calls, one id": ("call-r1 read_source", "caught: duplicate_call_id; guard refused"),
    "tool result for an unknown id": ("call-l1 read_source", "caught: orphaned_result"),
    "call without a tool result": ("call-l2 read_source", "caught: unanswered_call; host ran read_source"),
    "two results for one call": ("call-l3 read_source", "caught: duplicate_result; host ran read_source"),
    # OpenAI Responses
    "valid call, result sent by call_id": ("call_r1 read_source", "proposed; host ran read_source"),
    "call_id changed in response.completed": (
        "call_9 read_source",  # the call_id of response.completed, never proposed
        "caught: snapshot_mismatch; guard refused: orphaned_result",
    ),
    "response.incomplete (max_output_tokens)": (
        "raises RuntimeError: Didn't receive a `response.completed` event.",
        "caught: incomplete_response",
    ),
    "result sent with the fc_ item id": ("call_r4 read_source", "caught: orphaned_result"),
    # Anthropic Messages
    "valid call, tool_use block to the host": ("toolu_a1 read_source", "proposed; host ran read_source"),
    "path parameter cut by max_tokens": (
        "toolu_a2 read_source {}",  # the SDK's final message: a valid-looking {}
        "caught: incomplete_response; guard refused: incomplete_response",
    ),
    "block index reused by a second call": ("toolu_a3 read_source", "caught: id_conflict"),
    # Gemini
    "parallel calls, one per chunk": (
        'call_g1 read_source {"path": "source.txt"}; call_g2 save_report',  # each functionCall part as it came
        "proposed; host ran read_source, save_report",
    ),
    "call withheld by MAX_TOKENS": (
        "call_g3 read_source {}; (finishReason MAX_TOKENS)",
        "caught: incomplete_response; guard refused: incomplete_response",
    ),
    "Vertex partialArgs string never closed": (
        "(no id) read_source (no args); (no id) (no name) (no args)",  # the SDK leaves the pieces to the app
        "caught: invalid_arguments",
    ),
}
VALID = "valid, ran"
CAUGHT = "caught, not run"
FLAGGED = "ran; result flagged"  # the call was right: the result sent back was not
OUTCOMES = {name: VALID for name in list(CASES)[:5]} | {
    "tool result for an unknown id": FLAGGED,
    "call without a tool result": FLAGGED,
    "two results for one call": FLAGGED,
    "valid call, result sent by call_id": VALID,
    "result sent with the fc_ item id": FLAGGED,
    "valid call, tool_use block to the host": VALID,
    "parallel calls, one per chunk": VALID,
}
HEADINGS = [
    "Chat Completions: real openai client, its accumulator ChatCompletionStreamState",
    "the case study: read a source, save a report (two ids, three fragments each)",
    "where the SDK alone goes wrong and the rules accept the call",
    "rejections: the rules catch the call, the guarded host refuses it",
    "the next request: results checked against the proposals",
    "OpenAI Responses: client.responses.stream(...), real openai client",
    "a result sent back by the wrong id, a response cut short",
    "Anthropic Messages: client.messages.stream(...), real anthropic client",
    "tool_use blocks cut or reused",
    "Gemini: client.models.generate_content_stream(...), real google-genai client",
    "functionCall parts one per chunk, withheld, or left open",
]
# What happens next without etf-otel: the providers' own error texts, where they refuse the next request.
CHAT_ORPHANED = (
    "400 \"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.\""
)
NEXT = {
    "id repeated on every fragment": f"its result for call-d1call-d1call-d1 (an id never issued): {CHAT_ORPHANED}",
    "second id on the same index": f"its result for call-r1call-r2 (an id never issued): {CHAT_ORPHANED}",
    "tool result for an unknown id": CHAT_ORPHANED,
    "call without a tool result": 'The following tool_call_ids did not have response messages: call-l2"',
    "two results for one call": "400 \"Duplicate value for 'tool_call_id'\"",
    "stream ends mid-arguments, no finish_reason": "a tool run with arguments that were cut",
    "call_id changed in response.completed": '400 "No tool call found for function call output with call_id call_9."',
    "result sent with the fc_ item id": '400 "No tool call found for function call output with call_id fc_r4."',
    "path parameter cut by max_tokens": "read_source runs with {}: a tool run with arguments that were cut",
}
WITHOUT_ANTHROPIC = (
    "import sys; sys.modules['anthropic'] = None\n"  # `import anthropic` raises ImportError
    "from etf_otel.cli import main; sys.exit(main(['demo']))"
)
ONE_WRONG_CLAIM = (  # the demo claims the rules reject the repeated id, which they rightly accept
    "import sys\n"
    "from etf_otel.cli import main\n"
    "from etf_otel.cli.demo import _chat as demo\n"
    "cases = demo._single_turn_cases\n"
    "def claimed():\n"
    "    out = cases(); out[0][0].expected = 'id_conflict'; return out\n"
    "demo._single_turn_cases = claimed\n"
    "sys.exit(main(['demo']))"
)
BOX = set("━─┼╇┃│")
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing listens there


def _run(*args: str, columns: int = 200, **env: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with stdout on a pipe (one record per line)."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": str(columns), **env},
    )


def _demo(*args: str, columns: int = 200, **env: str) -> subprocess.CompletedProcess[str]:
    return _run("-m", "etf_otel", "demo", *args, columns=columns, **env)


def _cells(out: str) -> dict[str, list[str]]:
    """Every piped row of the tables (tab-separated: case, without etf-otel, with etf-otel, outcome), by case."""
    rows = [line.split("\t") for line in out.splitlines() if line.count("\t") == 3]
    return {cells[0]: cells for cells in rows if cells[0] != "case"}


@pytest.fixture(scope="module")
def wide() -> str:
    """The output of one demo run at 200 columns (it exited 0), a collector configured in the shell."""
    run = _demo(OTEL_EXPORTER_OTLP_ENDPOINT=NOWHERE)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stderr == ""  # no export was tried: nothing retried, nothing failed
    return run.stdout


def test_demo_runs_every_case_and_says_so(wide: str) -> None:
    out = wide
    assert "preserved ids identical (call-read-1, call-save-1); report identical" in out
    assert "all cases behaved as the rules say" in out
    assert "expected" not in out.replace("as expected", "")
    assert "exported to: this summary only (--export FILE, or --otlp)" in out  # not to the shell's collector


def test_demo_shows_what_the_sdk_hands_the_app_next_to_the_rules(wide: str) -> None:
    """Each group has its heading, in order; each case is one line: the SDK alone and what happens next,
    the rules, and an outcome that says what it means (never ``ok`` on a rejection)."""
    lines = wide.splitlines()
    positions = [lines.index(heading) for heading in HEADINGS]
    assert positions == sorted(positions), "headings in order, each on a line of its own"
    rows = _cells(wide)
    assert set(CASES) <= set(rows), set(CASES) - set(rows)
    for name, (sdk, decision) in CASES.items():
        cells = rows[name]
        assert cells[1].startswith(sdk), (name, cells)
        assert "; then: " in cells[1], (name, cells)
        assert cells[2].startswith(decision), (name, cells)
        assert cells[3] == OUTCOMES.get(name, CAUGHT), (name, cells)
    assert "result sent for fc_r4, unchecked" in wide
    assert "result sent for call-never-proposed, unchecked" in wide
    assert "toolu_a4 save_report {}" in wide  # the reused block index split into a second call


def test_demo_says_what_happens_next_without_etf_otel_in_the_providers_words(wide: str) -> None:
    rows = _cells(wide)
    for name, text in NEXT.items():
        assert text in rows[name][1].split("; then: ", 1)[1], (name, rows[name][1])


def test_demo_ends_with_a_readable_summary_not_python_dicts(wide: str) -> None:
    assert "{'" not in wide and "': " not in wide
    summary = wide.split("call-read-1 in the telemetry (control run, then target run):\n")[1].splitlines()[:4]
    assert summary == [
        "  assemble_tool_call read_source: id call-read-1, verdict proposed, 3 fragments",
        "  execute_tool read_source: id call-read-1, the host ran it",
        "  assemble_tool_call read_source: id call-read-1, verdict proposed, 3 fragments, 2 continuations with"
        " id: null kept the id",
        "  execute_tool read_source: id call-read-1, the host ran it",
    ]


def test_demo_max_tokens_case_shows_the_sdks_empty_input_and_the_refusal(wide: str) -> None:
    words = " ".join(wide.split())  # the sentence may wrap
    assert (
        "max_tokens: the SDK's final message hands the app toolu_a2 read_source {} (stop_reason max_tokens), "
        "a valid-looking input; the rules: incomplete_response; the guarded host raised "
        "GuardRefusedError(incomplete_response) and never ran the tool." in words
    )


def test_demo_fits_an_80_column_terminal_and_never_breaks_a_word() -> None:
    """On a terminal 80 columns wide every line fits, and the text is the 200-column text wrapped at spaces only."""
    narrow, wide = in_terminal("demo", columns=80), in_terminal("demo", columns=200)
    assert (narrow.returncode, narrow.stderr, wide.returncode) == (0, "", 0), narrow.stdout + narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    # the report digest is shortened on purpose; nothing else may be cut
    assert "…" not in re.sub(r"sha256 [0-9a-f]{12}…", "", narrow.stdout)

    def words(out: str) -> Counter[str]:  # box drawing aside: a word broken mid-word changes the count
        return Counter(word for word in out.replace("│", " ").replace("┃", " ").split() if not set(word) <= BOX)

    assert words(narrow.stdout) == words(wide.stdout)
    assert "all cases behaved as the rules say" in narrow.stdout
    assert "caught," in narrow.stdout and " ok " not in narrow.stdout
    # compact, as replay's and audit's tables: a rule under the header, no box around or between the cells
    assert not set("┃│━╇┼┏┓┗┛") & set(narrow.stdout + wide.stdout)
    assert narrow.stdout.count("\n" + "─" * 80 + "\n") >= 4  # one header rule per protocol's table


def test_demo_without_anthropic_skips_that_part_and_says_how_to_install_it() -> None:
    run = _run("-c", WITHOUT_ANTHROPIC)
    assert run.returncode == 0, run.stdout + run.stderr
    skipped = [line for line in run.stdout.splitlines() if line.startswith("Anthropic Messages:")]
    assert skipped == ["Anthropic Messages: skipped, no anthropic; pip install 'etf-otel[demo]'"]
    assert "toolu_" not in run.stdout
    assert "OpenAI Responses:" in run.stdout
    assert "all cases behaved as the rules say" in run.stdout


def test_demo_says_which_case_went_wrong_and_exits_1() -> None:
    run = _run("-c", ONE_WRONG_CLAIM)
    assert run.returncode == 1, run.stdout + run.stderr
    assert _cells(run.stdout)["id repeated on every fragment"][3] == "WRONG"
    assert _cells(run.stdout)["type: null on a continuation"][3] == VALID
    assert "expected: id_conflict" in run.stdout
    assert "some cases did not behave as expected" in run.stdout


def test_demo_otlp_without_a_collector_is_one_line_and_exit_2() -> None:
    run = _demo("--otlp")
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.splitlines() == [
        "etf-otel demo: --otlp needs the collector's address in OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT)"
    ]
    both = _demo("--otlp", "--export", "demo.jsonl")
    assert (both.returncode, both.stderr) == (2, "etf-otel demo: argument --export: not allowed with argument --otlp\n")


def test_demo_unwritable_export_is_one_line_and_exit_2(tmp_path: Path) -> None:
    run = _demo("--export", str(tmp_path))  # a directory
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == f"etf-otel demo: cannot write --export {tmp_path}: Is a directory\n"
    missing = tmp_path / "no" / "such"
    run = _demo("--export", str(missing / "demo.jsonl"))  # refused as --html refuses it, never created
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == f"etf-otel demo: cannot write --export {missing / 'demo.jsonl'}: no directory {missing}\n"
    assert not (tmp_path / "no").exists()


def test_demo_otlp_to_nothing_listening_says_so_and_exits_2() -> None:
    """``--otlp`` reads the variables; spans nobody accepted are not reported as exported."""
    run = _demo("--otlp", OTEL_EXPORTER_OTLP_ENDPOINT=NOWHERE, OTEL_EXPORTER_OTLP_TIMEOUT="1")
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "all cases behaved as the rules say" in run.stdout  # the rules' verdict stands
    assert re.search(rf"exported to: OTLP/HTTP {NOWHERE}, 0 of \d+ spans accepted", run.stdout)
    last = run.stderr.splitlines()[-1]
    assert re.fullmatch(rf"etf-otel demo: telemetry not delivered: OTLP/HTTP {NOWHERE} accepted 0 of \d+ spans", last)


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
    assert protocols == {"chat_completions", "responses", "anthropic_messages", "gemini"}
    assert {"call_r1", "toolu_a1", "toolu_a2", "call_g1", "call_g2"} <= ids  # by call_id / tool_use id / call id
    assert not {"fc_r1", "call_9"} & ids  # the item id is never the identity; call_9 was never proposed
    assert {"etf.tool_call.fragments", "etf.streams", "etf.integrity.violations", "etf.tool_calls"} <= metric_names
    assert "42" not in ids  # the rejected number id never becomes a span's call id


# Ctrl-C in the last part of the demo, with a stream of the instrumented client left half-read in
# the interrupted frame (it ends its span when that frame is released).
INTERRUPTED_MID_STREAM = (
    "import sys\n"
    "import openai\n"
    "from etf_otel.cli import main\n"
    "from etf_otel.cli.demo import _chat as demo\n"
    "from etf_otel.testing import Script, chat\n"
    "def interrupted(part, *args):\n"
    "    client = openai.OpenAI(base_url=part.server.base_url, api_key='x', max_retries=0)\n"
    "    part.server.enqueue(Script(events=chat.finished(chat.chunk(chat.fragment(0, 'call_1', 'f', '{}')))))\n"
    "    stream = client.chat.completions.create(model='m', messages=[], stream=True)\n"
    "    next(iter(stream))\n"
    "    raise KeyboardInterrupt\n"
    "demo.run_gemini = interrupted\n"
    "sys.exit(main(['demo']))"
)
# Ctrl-C landing in a finalizer (an SDK client's ``__del__``), where Python would print the
# KeyboardInterrupt with a traceback and go on: the demo stops at its next check, with no verdict.
INTERRUPTED_IN_A_FINALIZER = (
    "import os, signal, sys, time\n"
    "from etf_otel.cli import main\n"
    "from etf_otel.cli.demo import _chat as demo\n"
    "class Finalized:\n"
    "    def __del__(self):\n"
    "        os.kill(os.getpid(), signal.SIGINT)\n"
    "        time.sleep(0.2)\n"
    "def interrupted(*args):\n"
    "    Finalized()\n"
    "    return 'skipped'\n"
    "demo.run_gemini = interrupted\n"
    "sys.exit(main(['demo']))"
)


@pytest.mark.parametrize(
    "script", [INTERRUPTED_MID_STREAM, INTERRUPTED_IN_A_FINALIZER], ids=["mid-stream", "finalizer"]
)
def test_demo_interrupted_near_its_end_exits_130_with_no_verdict_and_nothing_after(script: str) -> None:
    run = _run("-c", script)
    assert run.returncode == 130, run.stderr
    assert "did not behave" not in run.stdout and "behaved as the rules say" not in run.stdout
    assert run.stderr == "etf-otel demo: interrupted\n", run.stderr  # no "already shutdown", no "Exception ignored"
