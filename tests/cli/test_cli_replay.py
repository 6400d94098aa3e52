"""``etf-otel replay`` end to end: the case study, the JSON contract and exit codes (docs/cli.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from etf_otel import ErrorCategory, IdKind, Transition
from etf_otel.cli import main
from etf_otel.testing.chat import MISSING, chunk, finished, fragment

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "examples" / "recordings"
CASE_FILES = ("case-control.jsonl", "case-target.jsonl", "case-target.sse")

CATEGORIES = {category.value for category in ErrorCategory}
ID_KINDS = {"absent", "null", "string", "number", "boolean", "array", "object"}
TRANSITIONS = {transition.value for transition in Transition}
CALL_KEYS = {"choice", "index", "id", "name", "verdict", "categories", "fragments"}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; argparse's own exits count as return codes too."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 2
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, out, err = run([*argv, "--json"], capsys)
    assert err == ""
    assert out.endswith("\n") and out.count("\n") == 1, "one JSON document on one line"
    return code, json.loads(out)


def write_jsonl(path: Path, chunks: list[Any]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in chunks), encoding="utf-8")
    return path


def write_sse(path: Path, chunks: list[Any]) -> Path:
    lines = [f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def assert_one_line_reason(code: int, out: str, err: str) -> None:
    assert code == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    assert err.strip()


def assert_report_shape(report: dict[str, Any], *, show_arguments: bool) -> None:
    """The exact document of docs/cli.md: keys, and types (bool is not an int here)."""
    assert set(report) == {"dispatchable", "stream", "calls", "rejections", "diagnostics"}
    assert type(report["dispatchable"]) is bool

    stream = report["stream"]
    assert set(stream) == {"state", "finish_reasons", "streamed"}
    assert stream["streamed"] is True
    assert stream["state"] in ("completed", "truncated")
    assert type(stream["finish_reasons"]) is list
    assert all(type(reason) is str for reason in stream["finish_reasons"])

    assert type(report["calls"]) is list
    for call in report["calls"]:
        assert set(call) == (CALL_KEYS | {"arguments"} if show_arguments else CALL_KEYS)
        assert type(call["choice"]) is int and type(call["index"]) is int
        assert call["id"] is None or type(call["id"]) is str
        assert call["name"] is None or type(call["name"]) is str
        assert call["verdict"] in ("proposed", "rejected")
        assert type(call["categories"]) is list and set(call["categories"]) <= CATEGORIES
        assert (call["verdict"] == "rejected") is bool(call["categories"])
        assert type(call["fragments"]) is int
        if show_arguments:
            assert type(call["arguments"]) is str

    assert type(report["rejections"]) is list
    for rejection in report["rejections"]:
        assert set(rejection) == {"choice", "index", "category"}
        assert rejection["choice"] is None or type(rejection["choice"]) is int
        assert rejection["index"] is None or type(rejection["index"]) is int
        assert rejection["category"] in CATEGORIES

    assert type(report["diagnostics"]) is list
    for diagnostic in report["diagnostics"]:
        assert set(diagnostic) == {
            "choice",
            "index",
            "fragment",
            "id_kind",
            "prior_id_present",
            "id_empty",
            "transition",
            "category",
        }
        assert diagnostic["choice"] is None or type(diagnostic["choice"]) is int
        assert diagnostic["index"] is None or type(diagnostic["index"]) is int
        assert type(diagnostic["fragment"]) is int
        assert diagnostic["id_kind"] in ID_KINDS
        assert type(diagnostic["prior_id_present"]) is bool
        assert type(diagnostic["id_empty"]) is bool
        assert diagnostic["transition"] in TRANSITIONS
        assert diagnostic["category"] is None or diagnostic["category"] in CATEGORIES

    if report["dispatchable"]:
        assert report["rejections"] == []
        assert all(call["verdict"] == "proposed" for call in report["calls"])


FOLLOWUP_KEYS = {"linkage", "drift", "pairing", "pairing_omitted"}
"""The keys ``--followup`` adds to the document."""
PAIRING_KEYS = {"kind", "reason", "position", "at", "index", "item", "id"}
PAIRING_KINDS = {"result_without_call", "call_without_result", "duplicate_result", "duplicate_call_id"}
PAIRING_KINDS |= {"id_rejected_by_target"}
PAIRING_REASONS = {"history_trimmed", "id_rewritten", "concatenated_ids", "unknown"}


def assert_followup_shape(report: dict[str, Any], *, show_arguments: bool = False) -> None:
    """The document of ``replay --followup`` (docs/cli.md): the replay document plus its next request's keys."""
    assert_report_shape({k: v for k, v in report.items() if k not in FOLLOWUP_KEYS}, show_arguments=show_arguments)
    assert FOLLOWUP_KEYS <= set(report)
    assert type(report["linkage"]) is list and type(report["drift"]) is list
    assert type(report["pairing"]) is list and type(report["pairing_omitted"]) is int
    for problem in report["pairing"]:
        assert set(problem) == PAIRING_KEYS
        assert problem["kind"] in PAIRING_KINDS and problem["reason"] in PAIRING_REASONS
        assert problem["item"] in ("call", "result")
        if problem["position"] is None:  # a call the provider holds (previous_response_id)
            assert problem["at"] is None and problem["index"] is None and problem["item"] == "call"
        else:
            assert type(problem["at"]) is int and type(problem["index"]) is int
            assert problem["position"].endswith(f"[{problem['at']}]")
        assert problem["id"] is None or type(problem["id"]) is str


def test_id_kinds_are_the_spec_set() -> None:
    assert {kind.value for kind in IdKind} == ID_KINDS


# --- the case study -------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_FILES)
def test_case_study_recordings_preserve_call_a(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(["replay", str(RECORDINGS / name), "--show-arguments"], capsys)
    assert code == 0
    assert_report_shape(report, show_arguments=True)
    assert report["dispatchable"] is True
    assert report["stream"] == {"state": "completed", "finish_reasons": ["tool_calls"], "streamed": True}
    assert [(c["id"], c["name"], c["arguments"], c["verdict"]) for c in report["calls"]] == [
        ("call-a", "read_page", '{"page":1}', "proposed")
    ]
    assert report["rejections"] == []


@pytest.mark.parametrize("name", CASE_FILES)
def test_naming_the_detected_protocol_changes_nothing(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    detected = run_json(["replay", str(RECORDINGS / name)], capsys)
    named = run_json(["replay", str(RECORDINGS / name), "--protocol", "chat_completions"], capsys)
    assert named == detected
    assert named[1]["dispatchable"] is True


def test_control_and_target_differ_only_in_the_continuation_transition(capsys: pytest.CaptureFixture[str]) -> None:
    reports = {name: run_json(["replay", str(RECORDINGS / name)], capsys)[1] for name in CASE_FILES}
    calls = {name: report["calls"] for name, report in reports.items()}
    assert calls["case-control.jsonl"] == calls["case-target.jsonl"] == calls["case-target.sse"]
    transitions = {name: [d["transition"] for d in report["diagnostics"]] for name, report in reports.items()}
    assert transitions["case-control.jsonl"] == ["establish", "keep_omitted"]
    assert transitions["case-target.jsonl"] == transitions["case-target.sse"] == ["establish", "keep_null"]
    assert reports["case-target.jsonl"] == reports["case-target.sse"]


@pytest.mark.parametrize("name", CASE_FILES)
def test_human_output_has_the_table_the_id_and_the_verdict(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["replay", str(RECORDINGS / name)], capsys)
    assert code == 0 and err == ""
    assert "tool calls" in out
    for header in ("id", "name", "verdict"):
        assert header in out
    assert "call-a" in out and "read_page" in out and "proposed" in out
    assert "dispatchable: yes" in out
    assert not out.lstrip().startswith("{")


def test_python_dash_m_runs_the_same_replay() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "etf_otel", "replay", str(RECORDINGS / "case-target.sse"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    report = json.loads(done.stdout)
    assert_report_shape(report, show_arguments=False)
    assert [call["id"] for call in report["calls"]] == ["call-a"]
    assert report["dispatchable"] is True


# --- the JSON contract ------------------------------------------------------------------------

SHAPE_STREAMS: dict[str, list[Any]] = {
    "two_calls": finished(
        chunk(fragment(0, "call-a", "read_page", '{"page":'), fragment(1, "call-b", "save_report", "{")),
        chunk(fragment(0, None, arguments="1}"), fragment(1, arguments="}")),
    ),
    "conflict": finished(chunk(fragment(0, "call-a", "read_page", "{}")), chunk(fragment(0, "call-z"))),
    "truncated": [chunk(fragment(0, "call-a", "read_page", "{}"))],
    "no_tool_calls": [chunk(finish_reason="stop"), "[DONE]"],
    "missing_index": finished(chunk(fragment(0, "call-a", "read_page", "{}"), fragment(MISSING, "call-b"))),
    "odd_types": finished(chunk(fragment(0, 42, 7, ["x"]), fragment(None, {"a": 1}))),
    "two_choices": [
        chunk(fragment(0, "call-a", "read_page", "{}"), choice=0),
        chunk(fragment(0, "call-b", "save_report", "{}"), choice=1),
        chunk(finish_reason="tool_calls", choice=0),
        chunk(finish_reason="tool_calls", choice=1),
    ],
}


@pytest.mark.parametrize("show_arguments", [False, True])
@pytest.mark.parametrize("stream", sorted(SHAPE_STREAMS))
def test_json_output_has_the_spec_shape(
    stream: str, show_arguments: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / f"{stream}.jsonl", SHAPE_STREAMS[stream])
    argv = ["replay", str(path)] + (["--show-arguments"] if show_arguments else [])
    code, report = run_json(argv, capsys)
    assert_report_shape(report, show_arguments=show_arguments)
    assert code == (0 if not report["rejections"] else 1)
    if not show_arguments:
        assert all("arguments" not in call for call in report["calls"])


def test_json_values_of_a_mixed_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "mixed.jsonl", SHAPE_STREAMS["missing_index"])
    code, report = run_json(["replay", str(path)], capsys)
    assert code == 1
    assert report["dispatchable"] is False
    assert {"choice": 0, "index": None, "category": "missing_index"} in report["rejections"]
    unslotted = [d for d in report["diagnostics"] if d["index"] is None]
    assert unslotted == [
        {
            "choice": 0,
            "index": None,
            "fragment": 2,
            "id_kind": "string",
            "prior_id_present": False,
            "id_empty": False,
            "transition": "reject",
            "category": "missing_index",
        }
    ]
    assert "call-b" not in json.dumps(report)


def test_truncated_stream_reports_its_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "cut.jsonl", SHAPE_STREAMS["truncated"])
    code, report = run_json(["replay", str(path)], capsys)
    assert code == 1
    assert report["stream"] == {"state": "truncated", "finish_reasons": [], "streamed": True}
    assert report["dispatchable"] is False
    assert report["calls"][0]["id"] == "call-a"
    assert "truncated_stream" in report["calls"][0]["categories"]


# --- rejected streams -------------------------------------------------------------------------

REJECTED = {
    "id_conflict": (
        finished(chunk(fragment(0, "call-a", "read_page", "{}")), chunk(fragment(0, "call-EVIL"))),
        "call-EVIL",
    ),
    "conflict_first_of_two": (
        finished(
            chunk(fragment(0, "call-a", "read_page", '{"p":'), fragment(1, "call-b", "save_report", "{}")),
            chunk(fragment(0, "call-EVIL", arguments="1}")),
        ),
        "call-EVIL",
    ),
    "unsupported_number": (
        finished(chunk(fragment(0, "call-a", "read_page", "{}")), chunk(fragment(0, 987654321))),
        "987654321",
    ),
    "unsupported_object": (
        finished(chunk(fragment(0, {"id": "call-EVIL"}, "read_page", "{}"))),
        "call-EVIL",
    ),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
@pytest.mark.parametrize("fmt", ["jsonl", "sse"])
@pytest.mark.parametrize("as_json", [True, False])
def test_rejected_stream_exits_1_and_never_shows_the_rejected_id(
    case: str, fmt: str, as_json: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chunks, rejected_id = REJECTED[case]
    writer = write_jsonl if fmt == "jsonl" else write_sse
    path = writer(tmp_path / f"{case}.{fmt}", chunks)
    code, out, err = run(["replay", str(path)] + (["--json"] if as_json else []), capsys)
    assert code == 1
    assert err == ""
    assert rejected_id not in out
    if as_json:
        report = json.loads(out)
        assert_report_shape(report, show_arguments=False)
        assert report["dispatchable"] is False
        assert any(call["verdict"] == "rejected" for call in report["calls"])
    else:
        assert "rejected" in out and "dispatchable: no" in out


def test_preserved_id_survives_a_conflicting_continuation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "conflict.jsonl", REJECTED["id_conflict"][0])
    code, report = run_json(["replay", str(path)], capsys)
    assert code == 1
    assert [(c["id"], c["verdict"], c["categories"]) for c in report["calls"]] == [
        ("call-a", "rejected", ["id_conflict"])
    ]


# --- compatibility rules -----------------------------------------------------------------------

EMPTY_CONTINUATION = finished(
    chunk(fragment(0, "call-a", "read_page", '{"page":')),
    chunk(fragment(0, "", arguments="1}")),
)


@pytest.mark.parametrize("fmt", ["jsonl", "sse"])
def test_allow_empty_continuation_changes_the_verdict(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = write_jsonl if fmt == "jsonl" else write_sse
    path = writer(tmp_path / f"empty.{fmt}", EMPTY_CONTINUATION)

    code, strict = run_json(["replay", str(path)], capsys)
    assert code == 1
    assert strict["dispatchable"] is False
    assert strict["calls"][0]["categories"] == ["empty_after_established"]
    assert [d["transition"] for d in strict["diagnostics"]] == ["establish", "reject"]

    code, relaxed = run_json(["replay", str(path), "--allow", "empty_continuation"], capsys)
    assert code == 0
    assert relaxed["dispatchable"] is True
    assert [(c["id"], c["verdict"]) for c in relaxed["calls"]] == [("call-a", "proposed")]
    assert [d["transition"] for d in relaxed["diagnostics"]] == ["establish", "keep_empty"]
    assert relaxed["diagnostics"][1]["id_empty"] is True


def test_allow_infer_missing_index_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(
        tmp_path / "noindex.jsonl",
        finished(chunk(fragment(MISSING, "call-a", "read_page", '{"page":')), chunk(fragment(MISSING, arguments="1}"))),
    )
    assert run_json(["replay", str(path)], capsys)[0] == 1
    code, report = run_json(["replay", str(path), "--allow", "infer_missing_index"], capsys)
    assert code == 0
    assert [(c["index"], c["id"]) for c in report["calls"]] == [(0, "call-a")]


NO_ARGUMENTS_BODIES = {
    "chat": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "now"}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
    },
    "responses": {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "now", "status": "completed"}],
    },
}


@pytest.mark.parametrize("shape", sorted(NO_ARGUMENTS_BODIES))
def test_a_body_call_without_arguments_is_read_as_empty_unless_denied(
    shape: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``absent_arguments_in_body`` is on by default; ``--deny`` turns it off and wins over ``--allow``."""
    path = tmp_path / "body.json"
    path.write_text(json.dumps(NO_ARGUMENTS_BODIES[shape]), encoding="utf-8")
    code, report = run_json(["replay", str(path), "--show-arguments"], capsys)
    assert code == 0
    assert [(c["id"], c["verdict"], c["arguments"]) for c in report["calls"]] == [("call_1", "proposed", "{}")]
    assert [d["transition"] for d in report["diagnostics"]] == ["absent_arguments"]
    code, out, _ = run(["replay", str(path)], capsys)
    assert code == 0 and "id transitions: absent_arguments 1" in out
    for denied in (
        ["--deny", "absent_arguments_in_body"],
        ["--allow", "absent_arguments_in_body", "--deny", "absent_arguments_in_body"],
    ):
        code, report = run_json(["replay", str(path), *denied], capsys)
        assert code == 1
        assert [(c["verdict"], c["categories"]) for c in report["calls"]] == [("rejected", ["invalid_arguments"])]
        assert report["diagnostics"] == []


def test_deny_reaches_the_exported_telemetry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(NO_ARGUMENTS_BODIES["chat"]), encoding="utf-8")
    for argv, verdict in (([], "proposed"), (["--deny", "absent_arguments_in_body"], "rejected")):
        export = tmp_path / f"export-{verdict}.jsonl"
        run(["replay", str(path), "--export", str(export), *argv], capsys)
        text = export.read_text(encoding="utf-8")
        assert f'"stringValue": "{verdict}"' in text or f'"stringValue":"{verdict}"' in text
        assert ("etf.tool_call.absent_arguments" in text) is (verdict == "proposed")


@pytest.mark.parametrize("sentinel", ['"[DONE]"', "[DONE]"])
def test_both_jsonl_sentinels_end_the_stream(sentinel: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "done.jsonl"
    path.write_text(json.dumps(chunk(fragment(0, "call-a", "read_page", "{}"))) + "\n" + sentinel + "\n")
    code, report = run_json(["replay", str(path)], capsys)
    assert code == 0
    assert report["stream"]["state"] == "completed"


# --- bad input: exit 2, one line on stderr --------------------------------------------------

GOOD_LINE = json.dumps(chunk(fragment(0, "call-a", "read_page", "{}")))
BAD_FILES: dict[str, bytes] = {
    "non_utf8.jsonl": GOOD_LINE.encode() + b"\n" + b'{"choices": "\xff\xfe"}\n',
    "non_utf8_first_line.jsonl": b"\xff\xfe\x00{}\n",
    "non_utf8.sse": b"data: " + GOOD_LINE.encode() + b'\n\ndata: {"x": "\xff"}\n\n',
    "not_json.jsonl": GOOD_LINE.encode() + b"\n{not json\n",
    "array.jsonl": GOOD_LINE.encode() + b"\n[1, 2]\n",
    "string.jsonl": b'"hello"\n',
    "number.jsonl": GOOD_LINE.encode() + b"\n42\n",
    "null.jsonl": b"null\n",
    "broken.sse": b"data: " + GOOD_LINE.encode() + b'\n\ndata: {"choices": [\n\ndata: [DONE]\n\n',
    "array.sse": b"data: [1, 2]\n\n",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_unreadable_recording_exits_2_with_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    for json_flag in ([], ["--json"]):
        code, out, err = run(["replay", str(path), *json_flag], capsys)
        assert_one_line_reason(code, out, err)
        assert name in err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_reason(*run(["replay", str(tmp_path / "nope.jsonl"), "--json"], capsys))


def test_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_reason(*run(["replay", str(tmp_path), "--json"], capsys))


@pytest.mark.parametrize(
    "argv",
    [
        ["replay", "FILE", "--allow", "no_such_rule"],
        ["replay", "FILE", "--allow"],
        ["replay"],
        ["replay", "FILE", "--bogus"],
        ["replay", "FILE", "--protocol", "responses_v9"],
        ["frobnicate"],
        [],
    ],
)
def test_bad_usage_exits_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(RECORDINGS / "case-control.jsonl") if arg == "FILE" else arg for arg in argv]
    assert_one_line_reason(*run(argv, capsys))


def test_unknown_allow_value_exits_2_from_a_shell() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "etf_otel", "replay", str(RECORDINGS / "case-control.jsonl"), "--allow", "lenient"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "lenient" in done.stderr


def test_the_table_says_which_call_caused_the_rejection_the_others_carry(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/images/parallel-calls.jsonl: the third call's id changed; all three are rejected id_conflict."""
    code, out, _ = run(["replay", str(ROOT / "docs" / "images" / "parallel-calls.jsonl")], capsys)
    assert code == 1
    rows = [line.split("\t") for line in out.splitlines() if line.startswith("0\t")]
    assert [(row[1], row[-1]) for row in rows] == [("0", "id_conflict"), ("1", "id_conflict"), ("2", "id_conflict")]
    assert "caused by choice 0, index 2 (get_news): id_conflict\n" in out
    assert "the other calls carry it" in out


def test_a_call_that_caused_its_own_rejection_alone_needs_no_cause_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "cut.jsonl", [chunk(fragment(0, "call-a", "read_page", '{"page":'))])
    code, out, _ = run(["replay", str(path)], capsys)
    assert code == 1 and "caused by" not in out
