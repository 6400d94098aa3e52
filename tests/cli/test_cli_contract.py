"""The command line's contract, row by row of a user report (docs/cli.md).

Exit 0 clean, 1 findings, 2 unusable input or usage with one line on stderr; a crash or a
missing package never passes for a finding; ids are never cut. Each test drives the real
CLI (in-process, or as ``python -m etf_otel`` where a real process matters) and fails on
the behaviour the report described:

1. ``replay --export`` to a directory or a full disk: one line, exit 2, no traceback;
2. ``replay --assembler langchain`` without ``langchain``: exit 2 with the install command;
3. a complete ``chat.completion`` body (not a stream): judged as a body (no fragments);
4. two responses in one recording (``cat a.sse a.sse``): refused, exit 2, never merged;
5. ``etf-otel`` alone is one line and exit 2; every ``--help`` states the exit codes;
6. one output shape: ``--assembler --json`` is the ``--json`` document plus ``assembler``,
   tables show categories in both modes, audit kinds and categories have one name each,
   the audit's telemetry note only when it applies, ``replay`` reads gzip;
7. on a pipe, tables print one record per line, tab-separated, ids whole; on a terminal they fold.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from etf_otel.audit._model import FIXED_CATEGORY, FindingKind
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.testing.chat import chunk, finished, fragment

from ._terminal import in_terminal
from .test_cli_replay import ROOT, assert_report_shape, run, write_jsonl
from .test_replay_protocols import CASE, FOLLOWUPS, SAMPLE_IDS, SAMPLES, column, refused

ELLIPSIS = "…"
REPO = Path(__file__).resolve().parents[2]
BOX = set("━─┼╇┃│┏┓┗┛┡┩└┘")
LONG_ID = "call_" + "x" * 70 + "_END"
LONG_NAME = "a_really_long_function_name_" + "y" * 30 + "_END"


def python_m(*argv: str, env: dict[str, str] | None = None, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    """``python -m etf_otel`` in a real process; stdout and stderr are pipes (not terminals)."""
    return subprocess.run(
        [sys.executable, "-m", "etf_otel", *argv],
        input=stdin.decode(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
        env=env if env is not None else dict(os.environ),
    )


def one_line(done: subprocess.CompletedProcess[str], prefix: str) -> str:
    """The single stderr line of an exit-2 refusal, without ``prefix``."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(prefix) and done.stderr.endswith("\n") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr[len(prefix) : -1]


# --- row 1: --export that cannot be written --------------------------------------------------------


def test_export_to_a_directory_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(*run(["replay", "--export", str(tmp_path), str(CASE)], capsys)) == (
        f"--export: cannot write {tmp_path}: Is a directory"
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_export_to_a_full_disk_is_one_line_and_exit_2() -> None:
    """The SDK's file exporters log a traceback and an atexit error when a write fails: none may show."""
    done = python_m("replay", "--export", "/dev/full", str(CASE))
    assert one_line(done, "etf-otel replay: ") == "--export: cannot write /dev/full: No space left on device"


def test_export_appends_and_refuses_a_missing_directory_as_html_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "export.jsonl"
    for _ in range(2):
        code, _, err = run(["replay", "--export", str(export), str(CASE)], capsys)
        assert (code, err) == (0, "")
    lines = export.read_text().splitlines()
    spans = [line for line in lines if "resourceSpans" in line]
    assert len(spans) == 2 and len(lines) == 4, "one spans and one metrics line per run, appended"
    assert all(json.loads(line) for line in lines)
    missing = tmp_path / "new" / "dir"
    for option, name in (("--export", "export.jsonl"), ("--html", "page.html")):
        reason = refused(*run(["replay", option, str(missing / name), str(CASE)], capsys))
        assert reason == f"{option}: cannot write {missing / name}: no directory {missing}"
    assert not (tmp_path / "new").exists(), "a typo in the directory creates no tree"


# --- row 2: an assembler whose library is missing -----------------------------------------------------

LANGCHAIN_MISSING = (
    "--assembler langchain needs langchain-core, which is not installed: pip install 'etf-otel[langchain]'"
)


def test_langchain_missing_in_a_real_process_is_exit_2_with_the_install_command(tmp_path: Path) -> None:
    stub = tmp_path / "stub" / "langchain_core"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'langchain_core'\", name='langchain_core')\n"
    )
    path = os.pathsep.join(filter(None, [str(stub.parent), os.environ.get("PYTHONPATH")]))
    done = python_m("replay", "--assembler", "langchain", str(CASE), env={**os.environ, "PYTHONPATH": path})
    assert one_line(done, "etf-otel replay: ") == LANGCHAIN_MISSING


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_langchain_missing_in_process_is_exit_2_with_the_install_command(
    extra: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    assert refused(*run(["replay", "--assembler", "langchain", str(CASE), *extra], capsys)) == LANGCHAIN_MISSING


def test_any_package_missing_at_run_time_is_exit_2_never_a_finding(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def needs_openai(*_: object, **__: object) -> int:
        raise ModuleNotFoundError("No module named 'openai'", name="openai")

    monkeypatch.setattr(sys.modules["etf_otel.cli._main"], "run_replay", needs_openai)
    code, out, err = run(["replay", str(CASE)], capsys)
    assert (code, out) == (2, "")
    assert err == "etf-otel replay: needs openai, which is not installed: pip install 'etf-otel[openai]'\n"


def test_a_crash_is_exit_2_with_one_line_never_a_finding(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def crash(*_: object, **__: object) -> int:
        raise RuntimeError("model output: call-CANARY-7d1")

    monkeypatch.setattr(sys.modules["etf_otel.cli._main"], "run_audit", crash)
    code, out, err = run(["audit", str(CASE)], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("etf-otel audit: internal error (RuntimeError)") and err.count("\n") == 1
    assert "CANARY" not in err, "the exception's message may quote model output: only its type is named"


# --- row 3: a complete, non-streamed body -------------------------------------------------------------

CHAT_BODY: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call-a", "type": "function", "function": {"name": "read_page", "arguments": '{"page":1}'}}
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
}


@pytest.mark.parametrize(
    ("name", "text", "extra"),
    [
        ("one line", json.dumps(CHAT_BODY) + "\n", []),
        ("pretty-printed", json.dumps(CHAT_BODY, indent=2) + "\n", []),
        ("without object", json.dumps({**CHAT_BODY, "object": None}) + "\n", []),
        ("protocol named", json.dumps(CHAT_BODY) + "\n", ["--protocol", "chat_completions"]),
        ("as SSE data", f"data: {json.dumps(CHAT_BODY)}\n\n", []),
    ],
)
def test_a_complete_chat_completion_body_is_judged_as_a_body(
    name: str, text: str, extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "body.json"
    path.write_text(text)
    code, out, err = run(["replay", str(path), "--json", *extra], capsys)
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["stream"] == {"state": "completed", "finish_reasons": ["tool_calls"], "streamed": False}
    assert [(call["id"], call["verdict"], call["fragments"]) for call in report["calls"]] == [("call-a", "proposed", 0)]
    code, out, _ = run(["replay", str(path), *extra], capsys)
    assert code == 0 and "response (complete body, not streamed): completed" in out


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (
            {"id": "resp_1", "object": "response", "status": "completed", "output": []},
            "Responses body (object: response)",
        ),
        ({"id": "msg_1", "type": "message", "role": "assistant", "content": []}, "Messages body (type: message)"),
    ],
)
def test_complete_bodies_of_the_other_protocols_are_judged_too(
    body: dict[str, Any], what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body, indent=1))
    code, out, _ = run(["replay", str(path), "--json"], capsys)
    assert code == 0 and json.loads(out)["stream"]["streamed"] is False


def test_a_body_that_has_not_ended_another_protocol_named_or_an_assembler_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queued = tmp_path / "queued.json"
    queued.write_text(json.dumps({"id": "resp_1", "object": "response", "status": "queued", "output": []}))
    assert refused(*run(["replay", str(queued)], capsys)).endswith(
        "that has not ended (a background response): nothing to judge"
    )
    body = tmp_path / "body.json"
    body.write_text(json.dumps(CHAT_BODY))
    assert refused(*run(["replay", str(body), "--protocol", "responses"], capsys)) == (
        f"{body}: a complete chat.completion body, not a responses response"
    )
    assert "nothing was streamed" in refused(*run(["replay", str(body), "--assembler", "openai"], capsys))


# --- row 4: several responses in one recording ---------------------------------------------------------


def sse(events: list[Any]) -> bytes:
    frames = []
    for event in events:
        head = f"event: {event['type']}\n" if isinstance(event, dict) and "type" in event else ""
        frames.append(f"{head}data: {event if isinstance(event, str) else json.dumps(event)}\n\n")
    return "".join(frames).encode()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_two_responses_piped_into_one_replay_are_refused(name: str) -> None:
    """``cat a.sse a.sse | etf-otel replay -``, literally: the second copy is never merged into the first."""
    recording = sse(SAMPLES[name])
    second_copy = recording
    if name == "gemini":  # no start event: only another responseId after the end tells a second response
        second_copy = recording.replace(b'"responseId": "resp-gemini-1"', b'"responseId": "resp-gemini-2"')
    done = python_m("replay", "-", stdin=recording + second_copy)
    second = len(SAMPLES[name]) + 1
    assert one_line(done, "etf-otel replay: ") == (
        f"<stdin>: 2 responses in one recording (the second starts at event {second}); replay reads one: split it"
    )


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_three_responses_in_json_lines_are_counted(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copies = [SAMPLES[name]] * 3
    if name == "gemini":  # no start event: another responseId after the end starts a response
        copies = [[{**event, "responseId": f"resp-{n}"} for event in SAMPLES[name]] for n in range(3)]
    path = write_jsonl(tmp_path / "three.jsonl", [event for copy in copies for event in copy])
    for extra in ([], ["--json"], ["--protocol", name], ["--assembler", "reference"]):
        reason = refused(*run(["replay", str(path), *extra], capsys))
        assert reason.startswith(f"{path}: 3 responses in one recording"), reason


def chat_response(response_id: str, call_id: str) -> list[Any]:
    first = chunk(fragment(0, call_id, "read_page", '{"page":'))
    last = chunk(fragment(0, None, arguments="1}"), finish_reason="tool_calls")
    return [{**first, "id": response_id}, {**last, "id": response_id}]


def test_chat_responses_without_done_are_told_apart_by_their_chunk_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(
        tmp_path / "two.jsonl", chat_response("chatcmpl-1", "call-a") + chat_response("chatcmpl-2", "call-b")
    )
    assert refused(*run(["replay", str(path)], capsys)) == (
        f"{path}: 2 responses in one recording (the second starts at event 3); replay reads one: split it"
    )


@pytest.mark.parametrize(
    "events",
    [
        pytest.param(
            [*chat_response("chatcmpl-1", "call-a"), {"id": "chatcmpl-1", "choices": [], "usage": {}}], id="usage"
        ),
        pytest.param(
            [*chat_response("chatcmpl-1", "call-a"), {"id": "chatcmpl-9", "choices": []}, "[DONE]"],
            id="new-id-no-choice",
        ),
        pytest.param([*chat_response("chatcmpl-1", "call-a"), "[DONE]", "[DONE]"], id="repeated-done"),
        pytest.param(
            chat_response("chatcmpl-1", "call-a")[:1] + chat_response("chatcmpl-2", "call-a")[1:], id="id-per-chunk"
        ),
    ],
)
def test_one_chat_response_is_not_mistaken_for_two(
    events: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "one.jsonl", events)
    code, out, err = run(["replay", str(path), "--json"], capsys)
    assert (code, err) == (0, "")
    assert [call["id"] for call in json.loads(out)["calls"]] == ["call-a"]


@pytest.mark.parametrize("name", ["responses", "anthropic_messages"])
def test_a_second_start_inside_an_unfinished_stream_is_the_adapters_splice(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a refusal: a start with another id before the end is judged (truncated, exit 1)."""
    events = SAMPLES[name]
    other = json.loads(json.dumps(events[0]).replace('"resp_1"', '"resp_2"').replace('"msg_01"', '"msg_02"'))
    assert other != events[0]
    path = write_jsonl(tmp_path / "spliced.jsonl", [*events[:3], other, *events[3:]])
    code, out, err = run(["replay", str(path), "--json"], capsys)
    assert (code, err) == (1, "")
    assert json.loads(out)["stream"]["state"] == "truncated"


# --- row 5: no command, and every --help -----------------------------------------------------------------


def test_no_command_is_one_line_and_exit_2() -> None:
    reason = one_line(python_m(), "etf-otel: ")
    assert reason == "no command given: choose one of replay, audit, demo (etf-otel --help)"


@pytest.mark.parametrize("command", [[], ["replay"], ["audit"], ["demo"]])
def test_every_help_states_the_exit_codes_and_an_example(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*command, "--help"], capsys)
    assert (code, err) == (0, "")
    assert re.search(r"^exit codes[^\n]*:\n  0  \S", out, re.M), out
    assert "\n  1  " in out and "\n  2  " in out
    assert re.search(r"^example:\n  etf-otel " + (command[0] if command else r"\w"), out, re.M), out


@pytest.mark.parametrize("command", [[], ["replay"], ["audit"], ["demo"]])
def test_every_help_points_at_docs_an_installed_user_can_open(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An installed package has no ``docs/``: the last line names the page at the project's source URL."""
    from etf_otel.cli._exit_codes import CLI_DOCS

    code, out, _ = run([*command, "--help"], capsys)
    source = re.search(r'^Source = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert source and CLI_DOCS == f"{source.group(1)}/blob/main/docs/cli.md"
    assert (REPO / "docs" / "cli.md").is_file()
    assert code == 0 and out.rstrip().splitlines()[-1].endswith(CLI_DOCS)
    assert re.search(r"(?<![/\w])docs/", out.replace(CLI_DOCS, "")) is None, out


# --- row 6: one shape, one name ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize("extra", [[], ["--show-arguments"], ["--followup"]])
def test_assembler_json_is_the_replay_document_plus_an_assembler_key(
    name: str, extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", SAMPLES[name])
    if extra == ["--followup"]:
        followup = tmp_path / "next.json"
        followup.write_text(json.dumps(FOLLOWUPS[name]([SAMPLE_IDS[name]])))
        extra = ["--followup", str(followup)]
    code, out, err = run(["replay", str(path), "--json", *extra], capsys)
    assert (code, err) == (0, "")
    plain = json.loads(out)
    code, out, err = run(["replay", str(path), "--json", "--assembler", "reference", *extra], capsys)
    assert (code, err) == (0, "")
    compared = json.loads(out)
    assembler = compared.pop("assembler")
    assert compared == plain, "the same keys and values as replay --json, nothing nested"
    assert_report_shape(
        {k: v for k, v in compared.items() if k not in ("linkage", "drift", "pairing", "pairing_omitted")},
        show_arguments="--show-arguments" in extra,
    )
    assert assembler == {
        "name": "reference",
        "raised": None,
        "calls": [
            {"id": SAMPLE_IDS[name], "name": "read_page"}
            | ({"arguments": '{"page":1}'} if "--show-arguments" in extra else {})
        ],
        "divergences": [],
    }


def test_the_comparison_table_shows_the_categories_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    path = write_jsonl(tmp_path / "r.jsonl", finished(chunk(fragment(0, "call-a", "read_page", "{not json"))))
    code, plain, err = run(["replay", str(path)], capsys)
    assert (code, err) == (1, "") and "invalid_arguments" in plain
    code, compared, err = run(["replay", str(path), "--assembler", "reference"], capsys)
    assert (code, err) == (1, "")
    header = next(line for line in compared.splitlines() if "rules id" in line)
    assert "categories" in header
    assert "invalid_arguments" in compared.split("rules:")[0], "in the table, not only in the summary line"


SQL = (ROOT / "etf_otel" / "audit" / "sql" / "audit_findings.sql").read_text(encoding="utf-8")


def docs_findings() -> dict[str, str]:
    """kind -> category column of docs/cli.md's findings table."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    table = text[text.index("| kind | category | found when |") :].split("\n\n")[0]
    return dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", table, re.M))


def test_audit_kinds_have_one_name_in_the_model_the_sql_and_the_docs() -> None:
    """The ``kind`` values of ``--json``: the same set, spelled the same, in all three places.

    That the SQL emits each kind with the Python audit's category is checked by running both
    (tests/audit/test_audit_sql.py); here, that no kind goes by a second name anywhere.
    """
    kinds = {kind.value for kind in FindingKind}
    header = re.search(r"^--   kind\s+(.*?)\(etf_otel", SQL, re.S | re.M)
    assert header is not None
    assert set(re.findall(r"[a-z_]+", header.group(1))) == kinds
    assert all(f"'{kind}'" in SQL for kind in kinds)
    assert set(docs_findings()) == kinds


def test_audit_fixed_categories_are_the_models_in_the_docs() -> None:
    """A kind's category column in docs/cli.md is its fixed category (or ``none``), else not a category name."""
    docs = docs_findings()
    categories = {category.value for category in ErrorCategory}
    for kind in FindingKind:
        if kind not in FIXED_CATEGORY:
            assert docs[kind.value].strip("`") not in categories, (kind, docs[kind.value])
        elif FIXED_CATEGORY[kind] is None:
            assert docs[kind.value] == "none", kind
        else:
            assert FIXED_CATEGORY[kind] in categories
            assert docs[kind.value] == f"`{FIXED_CATEGORY[kind]}`", kind


def otlp_file(path: Path, spans: list[dict[str, Any]]) -> Path:
    document = {
        "resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]
    }
    path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    return path


def otlp_span(trace: int, span: int, *, category: str | None = None, parent: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": f"{trace:032x}",
        "spanId": f"{span:016x}",
        "name": "chat",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
    }
    if parent is not None:
        out["parentSpanId"] = f"{parent:016x}"
    if category is not None:
        attributes = [{"key": "etf.error.category", "value": {"stringValue": category}}]
        out["events"] = [{"name": "etf.integrity.violation", "timeUnixNano": "1", "attributes": attributes}]
    return out


def test_the_audit_note_on_telemetry_kinds_only_when_there_are_any(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    violation = otlp_file(tmp_path / "violation.jsonl", [otlp_span(1, 1, category="id_conflict")])
    code, out, err = run(["audit", "--no-progress", str(violation)], capsys)
    assert (code, err) == (1, "")
    assert "recorded_violation" in out and "id_conflict (1)" in out
    assert "missing_span" not in out and "malformed_span" not in out and "telemetry itself" not in out

    orphan = otlp_file(tmp_path / "orphan.jsonl", [otlp_span(2, 2, parent=99, category="id_conflict")])
    code, out, err = run(["audit", "--no-progress", str(orphan)], capsys)
    assert (code, err) == (1, "")
    assert "missing_span concerns the telemetry itself (no error category)" in " ".join(out.split())
    assert "malformed_span" not in out


def test_replay_reads_gzip_like_audit_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["replay", str(CASE), "--json"], capsys)
    assert (code, err) == (0, "")
    compressed = tmp_path / "recording"  # no .gz name: recognised by content, as audit does
    compressed.write_bytes(gzip.compress(CASE.read_bytes()))
    followup = tmp_path / "next.json.gz"
    followup.write_bytes(gzip.compress(json.dumps(FOLLOWUPS["chat_completions"](["call-a"])).encode()))
    assert run(["replay", str(compressed), "--json"], capsys) == (0, out, "")
    code, out, err = run(["replay", str(compressed), "--json", "--followup", str(followup)], capsys)
    assert (code, err) == (0, "") and json.loads(out)["linkage"] == []
    truncated = tmp_path / "truncated.gz"
    truncated.write_bytes(gzip.compress(CASE.read_bytes())[:40])
    assert refused(*run(["replay", str(truncated)], capsys)) == f"{truncated}: broken gzip (truncated or corrupt)"


def test_gzip_on_standard_input() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "etf_otel", "replay", "-", "--json"],
        input=gzip.compress(CASE.read_bytes()),
        capture_output=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, b"")
    assert [call["id"] for call in json.loads(done.stdout)["calls"]] == ["call-a"]


# --- row 7: piped, one record per line; on a terminal, tables fold at its width -------------------------


def assert_folded(out: str, width: int = 80) -> None:
    assert ELLIPSIS not in out, "cut short"
    assert max(len(line) for line in out.splitlines()) <= width


def row_with(out: str, text: str) -> list[str]:
    """The tab-separated cells of the one piped line holding ``text``."""
    (line,) = [line for line in out.splitlines() if text in line]
    return line.split("\t")


@pytest.mark.parametrize("columns", ["80", None])
def test_piped_replay_tables_print_one_record_per_line_with_ids_whole(columns: str | None, tmp_path: Path) -> None:
    """``etf-otel replay f | grep ID`` finds the row: no fold, no split word, whatever ``COLUMNS`` says."""
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    path = write_jsonl(tmp_path / "r.jsonl", finished(chunk(fragment(0, LONG_ID, LONG_NAME, "{}"))))
    followup = tmp_path / "next.json"
    followup.write_text(json.dumps(FOLLOWUPS["chat_completions"]([LONG_ID, LONG_ID], [LONG_ID])))

    done = python_m("replay", str(path), env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert not BOX & set(done.stdout) and ELLIPSIS not in done.stdout
    assert row_with(done.stdout, "choice") == ["choice", "index", "id", "name", "fragments", "verdict", "categories"]
    assert row_with(done.stdout, LONG_ID) == ["0", "0", LONG_ID, LONG_NAME, "1", "proposed", "-"]

    done = python_m("replay", str(path), "--assembler", "reference", env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert [row_with(done.stdout, LONG_ID)[n - 1] for n in (2, 3, 6, 7)] == [LONG_ID, LONG_NAME, LONG_ID, LONG_NAME]

    done = python_m("replay", str(path), "--followup", str(followup), env=env)
    assert (done.returncode, done.stderr) == (1, "")
    linkage, pairing = done.stdout.split("linkage (next request)")[1].split("pairing (the next request")
    assert row_with(linkage, LONG_ID) == [LONG_ID, "duplicate_result"]
    assert row_with(pairing, LONG_ID) == ["duplicate_result", "messages[2] result 0", "unknown", LONG_ID]


def test_on_a_terminal_replay_tables_fold_ids_and_cut_names_with_a_marker(tmp_path: Path) -> None:
    """Ids fold at the terminal's width (never cut); a name too long is cut with ``…``, never folded."""
    path = write_jsonl(tmp_path / "r.jsonl", finished(chunk(fragment(0, LONG_ID, LONG_NAME, "{}"))))
    for args in ((), ("--assembler", "reference")):
        shown = in_terminal("replay", str(path), *args, columns=80)
        assert (shown.returncode, shown.stderr) == (0, "")
        assert max(len(line) for line in shown.stdout.splitlines()) <= 80
        assert column(shown.stdout, 2 if args else 3) == LONG_ID
        name = column(shown.stdout, 3 if args else 4)
        assert name.endswith(ELLIPSIS) and LONG_NAME.startswith(name[:-1]), name


def test_the_piped_audit_table_is_one_line_per_kind_and_prints_input_literally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Categories of recorded violations are input: shown whole on one line, markup and control as text."""
    monkeypatch.setenv("COLUMNS", "80")
    hostile = "[/x]" + "c" * 70 + "\x1b[31m"
    spans = [otlp_span(trace, trace, category=hostile if trace == 1 else "id_conflict") for trace in range(1, 9)]
    path = otlp_file(tmp_path / "spans.jsonl", spans)
    code, out, err = run(["audit", "--no-progress", str(path)], capsys)
    assert (code, err) == (1, ""), "a crash (rich markup) would be exit 1 with a traceback"
    assert "\x1b" not in out and ELLIPSIS not in out and not BOX & set(out)
    assert row_with(out, "count") == ["kind", "category", "count", "traces"]
    (cell,) = [cell for cell in row_with(out, "c" * 70) if "c" * 70 in cell]
    assert cell.startswith("[/x]" + "c" * 70 + "\\x1b[31m (1); ")
    for trace in range(1, 6):
        assert f"    {trace:032x}\n" in out, "trace ids are printed whole"
    assert "and 3 more" in out


def test_on_a_terminal_the_audit_table_folds_at_80_columns(tmp_path: Path) -> None:
    hostile = "[/x]" + "c" * 70 + "\x1b[31m"
    spans = [otlp_span(trace, trace, category=hostile if trace == 1 else "id_conflict") for trace in range(1, 9)]
    shown = in_terminal("audit", "--no-progress", str(otlp_file(tmp_path / "spans.jsonl", spans)), columns=80)
    assert shown.returncode == 1, shown.stderr
    assert_folded(shown.stdout)
    assert column(shown.stdout, 2).replace(" ", "").startswith("[/x]" + "c" * 70 + "\\x1b[31m(1)")
