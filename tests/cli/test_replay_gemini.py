"""``etf-otel replay`` over Gemini recordings: detection, ``--require-call-id``, ``--allow
drop_repeated_call``, and ``--html`` lanes named by candidate and call ordinal (docs/cli.md,
docs/protocols.md "Gemini").

``examples/recordings/gemini-vertex-partial-args.jsonl`` is a Vertex AI stream with
``streamFunctionCallArguments``: two id-less calls whose arguments arrive as ``partialArgs``
leaves, each closed by an empty ``functionCall``, the finish reason on a trailing text chunk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etf_otel.testing import gemini

from .test_cli_replay import RECORDINGS, assert_report_shape, run, run_json, write_jsonl, write_sse
from .test_html_replay import elements, page_of

VERTEX = RECORDINGS / "gemini-vertex-partial-args.jsonl"
REPEAT = [
    gemini.chunk(gemini.call("get_weather", {"city": "Paris"}, id="k3xq9ab2")),
    gemini.chunk(gemini.call("get_weather", {"city": "Paris"}, id="k3xq9ab2"), finish_reason="STOP"),
]


def test_a_vertex_partial_args_stream_with_two_calls(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(["replay", str(VERTEX), "--protocol", "gemini", "--show-arguments"], capsys)
    assert code == 0
    assert_report_shape(report, show_arguments=True)
    assert report["dispatchable"] is True
    assert report["stream"] == {"state": "completed", "finish_reasons": ["STOP"], "streamed": True}
    assert [(c["choice"], c["index"], c["id"], c["name"], c["arguments"], c["fragments"]) for c in report["calls"]] == [
        (0, 0, None, "get_weather", '{"location":"Paris","days":3}', 5),
        (0, 1, None, "get_time", '{"timezone":"Europe/Paris"}', 5),
    ]
    positional = [(d["choice"], d["index"]) for d in report["diagnostics"] if d["transition"] == "positional"]
    assert positional == [(0, 0), (0, 1)]  # once per id-less call
    assert run_json(["replay", str(VERTEX), "--show-arguments"], capsys) == (0, report)  # detected


def test_the_same_stream_as_sse_data_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chunks = [json.loads(line) for line in VERTEX.read_text().splitlines()]
    sse = write_sse(tmp_path / "vertex.sse", chunks)
    assert run_json(["replay", str(sse)], capsys) == run_json(["replay", str(VERTEX)], capsys)


def test_require_call_id_rejects_every_id_less_call(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(["replay", str(VERTEX), "--require-call-id"], capsys)
    assert code == 1 and report["dispatchable"] is False
    assert [c["categories"] for c in report["calls"]] == [["missing_id"], ["missing_id"]]
    assert not any(d["transition"] == "positional" for d in report["diagnostics"])
    code, _, err = run(["replay", str(VERTEX), "--allow", "require_call_id"], capsys)
    assert code == 2 and "invalid choice" in err  # strictness is no compatibility rule


def test_allow_drop_repeated_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(tmp_path / "repeat.jsonl", REPEAT)
    code, strict = run_json(["replay", str(path)], capsys)
    assert code == 1 and [c["categories"] for c in strict["calls"]] == [["duplicate_call_id"]] * 2
    code, allowed = run_json(["replay", str(path), "--allow", "drop_repeated_call"], capsys)
    assert code == 0 and allowed["dispatchable"] is True
    assert [(c["id"], c["verdict"]) for c in allowed["calls"]] == [("k3xq9ab2", "proposed")]
    assert [d["transition"] for d in allowed["diagnostics"]] == ["establish", "drop_repeat"]


def test_html_lanes_are_named_by_candidate_and_call_ordinal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, document = page_of(VERTEX, tmp_path, capsys)
    assert code == 0
    lanes = [attrs["data-lane"] for _, attrs in elements(document) if attrs.get("role") == "group"]
    assert lanes == ["response", "candidate 0 call 0", "candidate 0 call 1"]
    path = write_jsonl(tmp_path / "repeat.jsonl", [*REPEAT, gemini.chunk(gemini.call())])
    code, document = page_of(path, tmp_path, capsys, "--allow", "drop_repeated_call")
    assert code == 1  # the stray continuation is unknown_slot
    lanes = [attrs["data-lane"] for _, attrs in elements(document) if attrs.get("role") == "group"]
    assert lanes == ["response", "candidate 0 call 0", "candidate 0: no open call"]
    assert "repeated whole call set aside" in document


def test_a_followup_answers_by_id_and_by_name_and_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = write_jsonl(tmp_path / "r.jsonl", gemini.stream(gemini.chunk(gemini.call("f", {}, id="c1"))))
    followup = tmp_path / "next.json"
    response = {"functionResponse": {"id": "c1", "name": "f", "response": {"ok": True}}}
    late = {"functionResponse": {"id": "c1", "name": "f", "response": {}}}
    followup.write_text(
        json.dumps(
            {
                "contents": [
                    {"role": "user", "parts": [{"text": "go"}]},
                    {"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "f", "args": {}}}]},
                    {"role": "user", "parts": [response]},
                    {"role": "user", "parts": [late]},  # out of scope: answers nothing
                ]
            }
        )
    )
    code, out, err = run(["replay", str(recording), "--followup", str(followup), "--json"], capsys)
    assert (code, err) == (1, "")
    assert json.loads(out)["linkage"] == [{"id": None, "category": "orphaned_result", "name": "f"}]

    names = ("get_time", "get_weather")
    model = {"role": "model", "parts": [{"functionCall": {"name": name, "args": {}}} for name in names]}
    answers = [{"functionResponse": {"name": name, "response": {}}} for name in names]
    followup.write_text(json.dumps([model, {"role": "user", "parts": answers}]))
    code, out, err = run(["replay", str(VERTEX), "--followup", str(followup), "--json"], capsys)
    assert (code, err, json.loads(out)["linkage"], json.loads(out)["pairing"]) == (0, "", [], [])  # by name
    followup.write_text(json.dumps([model, {"role": "user", "parts": answers[:1] * 2}]))
    code, out, err = run(["replay", str(VERTEX), "--followup", str(followup)], capsys)
    assert code == 1 and "duplicate_result" in out and "unanswered_call" in out and "get_weather" in out
    assert "call_without_result" in out and "contents[0] call 1" in out


def test_the_google_genai_sdk_keeps_each_part_as_it_came(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--assembler google-genai``: the SDK's chat history joins no partialArgs (each part is a call of its
    own, the head's args unset); whole calls, one per chunk, it keeps as the rules do; an args string raises."""
    code, report = run_json(["replay", str(VERTEX), "--assembler", "google-genai", "--show-arguments"], capsys)
    assert code == 1 and report["dispatchable"] is True
    sdk = report["assembler"]
    assert (sdk["name"], sdk["raised"]) == ("google-genai", None)
    assert [(call["name"], call["arguments"]) for call in sdk["calls"]][:2] == [("get_weather", {}), (None, {})]
    assert len(sdk["calls"]) == 10 and sdk["divergences"] == ["arguments_differ", "call_split", "name_differs"]
    calls = gemini.chunk(gemini.call("a", {"x": 1})), gemini.chunk(gemini.call("b", {"y": [1, 2]}))
    whole = write_jsonl(tmp_path / "whole.jsonl", gemini.stream(*calls))
    code, report = run_json(["replay", str(whole), "--assembler", "google-genai"], capsys)
    assert (code, report["assembler"]["divergences"], len(report["assembler"]["calls"])) == (0, [], 2)
    text = write_jsonl(tmp_path / "text.jsonl", gemini.stream(gemini.chunk(gemini.call("a", '{"x": 1}'))))
    code, report = run_json(["replay", str(text), "--assembler", "google-genai"], capsys)
    assert (code, report["assembler"]["raised"], report["assembler"]["divergences"]) == (
        1,
        "ValidationError",
        ["assembler_raised"],
    )
