"""``etf-otel replay`` over every registered protocol: detection, SSE ``event:`` lines, standard
input, ``--followup`` linkage, and input that must be refused in one line (docs/cli.md).

A small fake protocol (``toy_protocol``) is put into the registry for the tests that must not
depend on which protocols are registered today; the real Responses and Anthropic recordings
are built with their protocols' own event builders.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from etf_otel import ABSENT, AssemblyResult, IdentityRules, ResponseSlots, protocols
from etf_otel.protocols import WireProtocol
from etf_otel.testing import anthropic, bedrock, gemini, ollama, responses
from etf_otel.testing.chat import chunk, finished, fragment

from ._terminal import in_terminal
from .test_cli_replay import RECORDINGS, ROOT, assert_followup_shape, assert_report_shape, run, run_json, write_jsonl

CASE = RECORDINGS / "case-target.jsonl"  # proposes call-a (read_page)
CANARY = "call-CANARY-9f3e1"


def supported() -> str:
    return ", ".join(protocols.PROTOCOLS)


def refused(code: int, out: str, err: str) -> str:
    """The one line on stderr of an exit-2 refusal, without the program prefix."""
    assert code == 2, (code, out, err)
    assert out == ""
    assert err.startswith("etf-otel replay: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err[len("etf-otel replay: ") : -1]


def write_sse_events(path: Path, events: list[Any], names: list[str | None] | None = None) -> Path:
    """SSE with an ``event:`` line per event (its ``type``, unless ``names`` says otherwise)."""
    names = names if names is not None else [e.get("type") if isinstance(e, dict) else None for e in events]
    frames = []
    for event, name in zip(events, names, strict=True):
        head = f"event: {name}\n" if name is not None else ""
        frames.append(f"{head}data: {event if isinstance(event, str) else json.dumps(event)}\n\n")
    path.write_text("".join(frames), encoding="utf-8")
    return path


def cli(*argv: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``python -m etf_otel`` in a real process, ``stdin`` through a real pipe."""
    return subprocess.run(
        [sys.executable, "-m", "etf_otel", *argv],
        input=stdin,
        capture_output=True,
        timeout=120,
        cwd=ROOT,
        check=False,
        env={**os.environ, **(env or {})},
    )


# --- a fake protocol, registered for a test -----------------------------------------------------


class _ToyAssembler:
    """Events ``{"type": "toy.call", "key", "id", "name", "arguments"}`` and ``{"type": "toy.end"}``."""

    def __init__(self, *, rules: IdentityRules, clock: Callable[[], int] | None = None, **_: object) -> None:
        self._slots = ResponseSlots(rules, clock=clock)

    @property
    def slots(self) -> ResponseSlots:
        return self._slots

    @property
    def finished(self) -> bool:
        return self._slots.finished

    def feed(self, event: object) -> None:
        if not isinstance(event, dict):
            return
        if event.get("type") == "toy.call":
            fields = (event.get(name, ABSENT) for name in ("id", "name", "arguments"))
            self._slots.fragment(0, event.get("key", 0), *fields)
        elif event.get("type") == "toy.end":
            self._slots.finish_reason(0, "end")
            self._slots.end()

    def feed_done(self) -> None:
        return None

    def finish(self) -> AssemblyResult:
        return self._slots.finish()


def _toy_recognizes(event: object) -> bool:
    return isinstance(event, dict) and isinstance(event.get("type"), str) and event["type"].startswith("toy.")


def _toy_result_ids(followup: object) -> list[object] | None:
    answers = followup.get("answers") if isinstance(followup, dict) else None
    return list(answers) if isinstance(answers, list) else None


TOY = WireProtocol(name="toy_protocol", assembler=_ToyAssembler, recognizes=_toy_recognizes, result_ids=_toy_result_ids)
TOY_EVENTS: list[Any] = [
    {"type": "toy.call", "key": 0, "id": "toy-1", "name": "read_page", "arguments": '{"page":'},
    {"type": "toy.call", "key": 0, "arguments": "1}"},
    {"type": "toy.end"},
]


@pytest.fixture
def toy() -> Iterator[WireProtocol]:
    protocols.register(TOY)
    try:
        yield TOY
    finally:
        protocols.unregister(TOY)


# --- real protocols: one recording each, built with that protocol's event builders ---------------

SAMPLES: dict[str, list[Any]] = {
    "chat_completions": finished(
        chunk(fragment(0, "call-a", "read_page", '{"page":')), chunk(fragment(0, None, arguments="1}"))
    ),
    "responses": responses.stream(responses.call(0, "call_r1", "read_page", ('{"page":', "1}"), item_id="fc_1")),
    "anthropic_messages": anthropic.stream(anthropic.tool_call(0, "toolu_01", "read_page", '{"page":', "1}")),
    "gemini": gemini.stream(
        gemini.chunk(gemini.call("read_page", {"page": 1}, id="k3xq9ab2")), gemini.chunk(gemini.text("done"))
    ),
    "bedrock_converse": bedrock.stream(
        bedrock.tool_call(0, "tooluse_01", "read_page", "", '{"page":', "1}"), text=None
    ),
    "ollama": ollama.stream(
        ollama.chunk(ollama.call("read_page", {"page": 1}, id="call_q8x1", index=0)), ollama.chunk()
    ),
}
SAMPLE_IDS = {
    "chat_completions": "call-a",
    "responses": "call_r1",
    "anthropic_messages": "toolu_01",
    "gemini": "k3xq9ab2",
    "bedrock_converse": "tooluse_01",
    "ollama": "call_q8x1",
}
FOLLOWUPS: dict[str, Callable[..., Any]] = {
    "chat_completions": lambda ids, calls=("call-a",): {
        "messages": [
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "read_page", "arguments": '{"page":1}'}}
                    for i in calls
                ],
            }
        ]
        + [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]
    },
    "responses": lambda ids, calls=("call_r1",): {
        "previous_response_id": "resp_1",  # the calls are the stored response's
        "input": [{"type": "function_call_output", "call_id": i, "output": "ok"} for i in ids],
    },
    "anthropic_messages": lambda ids, calls=("toolu_01",): {
        "messages": [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": i, "name": "read_page", "input": {"page": 1}} for i in calls],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids]},
        ]
    },
    "gemini": lambda ids, calls=("k3xq9ab2",): {
        "contents": [
            {
                "role": "model",
                "parts": [{"functionCall": {"id": i, "name": "read_page", "args": {"page": 1}}} for i in calls],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"id": i, "name": "read_page", "response": {}}} for i in ids],
            },
        ]
    },
    "bedrock_converse": lambda ids, calls=("tooluse_01",): {
        "messages": [
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": i, "name": "read_page", "input": {"page": 1}}} for i in calls],
            },
            {"role": "user", "content": [{"toolResult": {"toolUseId": i, "content": [{"text": "ok"}]}} for i in ids]},
        ]
    },
    "ollama": lambda ids, calls=("call_q8x1",): {
        "messages": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": i, "function": {"name": "read_page", "arguments": {"page": 1}}} for i in calls],
            }
        ]
        + [{"role": "tool", "tool_call_id": i, "tool_name": "read_page", "content": "ok"} for i in ids]
    },
}
"""A next request per protocol: an assistant turn carrying ``calls`` (the sample's by default), then results
for ``ids``; a Responses request continues the stored response (``previous_response_id``)."""


def test_every_registered_protocol_has_a_sample_here() -> None:
    """A protocol added to the registry gets its rows in this file, or this fails."""
    assert set(protocols.PROTOCOLS) == set(SAMPLES) == set(SAMPLE_IDS) == set(FOLLOWUPS)


@pytest.mark.parametrize("fmt", ["jsonl", "sse-with-event-lines"])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_registered_protocol_is_detected_from_its_first_event(
    name: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = SAMPLES[name]
    if fmt == "jsonl":
        path = write_jsonl(tmp_path / "r.jsonl", events)
    else:
        path = write_sse_events(tmp_path / "r.sse", events)
    code, detected = run_json(["replay", str(path), "--show-arguments"], capsys)
    assert code == 0
    assert_report_shape(detected, show_arguments=True)
    assert detected["dispatchable"] is True
    assert [(c["choice"], c["index"], c["id"], c["name"], c["arguments"]) for c in detected["calls"]] == [
        (0, 0, SAMPLE_IDS[name], "read_page", '{"page":1}')
    ]
    assert run_json(["replay", str(path), "--show-arguments", "--protocol", name], capsys) == (0, detected)
    for other in set(protocols.PROTOCOLS) - {name}:  # a named protocol that recognizes none of it: refused
        reason = refused(*run(["replay", str(path), "--protocol", other], capsys))
        assert reason == f"{path}: not a {other} recording: none of its events is one of that protocol's"


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_registered_protocol_links_its_next_request(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = write_jsonl(tmp_path / "r.jsonl", SAMPLES[name])
    call_id = SAMPLE_IDS[name]
    cases = {
        "clean": ([call_id], [], []),
        "orphaned": (
            [call_id, CANARY],
            [{"id": None, "category": "orphaned_result", "reason": "unknown"}],
            ["result_without_call"],
        ),
        "duplicate": ([call_id, call_id], [{"id": call_id, "category": "duplicate_result"}], ["duplicate_result"]),
        "unanswered": ([], [{"id": call_id, "category": "unanswered_call"}], ["call_without_result"]),
    }
    for case, (ids, expected, pairing) in cases.items():
        followup = tmp_path / f"{case}.json"
        followup.write_text(json.dumps(FOLLOWUPS[name](ids)))
        code, out, err = run(["replay", str(recording), "--followup", str(followup), "--json"], capsys)
        assert (code, err) == ((1 if expected else 0), ""), case
        document = json.loads(out)
        assert_followup_shape(document)
        found = [{k: v for k, v in f.items() if k != "name"} for f in document["linkage"]]
        if name in ("gemini", "ollama"):  # they link by name and order too: an orphan says no reason (and its name)
            expected = [{k: v for k, v in f.items() if k != "reason"} for f in expected]
        assert found == expected, case
        assert [problem["kind"] for problem in document["pairing"]] == pairing, case
        assert CANARY not in out

    cut = write_jsonl(tmp_path / "cut.jsonl", SAMPLES[name][:-2])  # no proper end: not dispatchable
    followup = tmp_path / "answers.json"
    followup.write_text(json.dumps(FOLLOWUPS[name]([call_id, CANARY])))
    code, out, err = run(["replay", str(cut), "--followup", str(followup), "--json"], capsys)
    assert (code, err) == (1, "")
    report = json.loads(out)
    assert report["dispatchable"] is False and report["stream"]["state"] == "truncated"
    by_name = name in ("gemini", "ollama")
    reasons = [None, None] if by_name else ["rejected_call", "unknown"]  # Gemini, Ollama: by name, no reason
    assert [{k: v for k, v in f.items() if k != "name"} for f in report["linkage"]] == [
        {"id": None, "category": "orphaned_result", **({"reason": reason} if reason else {})} for reason in reasons
    ]
    assert CANARY not in out


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_export_carries_the_detected_protocol(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = write_jsonl(tmp_path / "r.jsonl", SAMPLES[name])
    export = tmp_path / "export.jsonl"
    code, _, err = run(["replay", str(recording), "--export", str(export)], capsys)
    assert (code, err) == (0, "")
    values = {
        attribute["value"].get("stringValue")
        for line in export.read_text().splitlines()
        for resource in json.loads(line).get("resourceSpans", [])
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
        for attribute in span.get("attributes", [])
        if attribute["key"] == "etf.protocol"
    }
    assert values == {name}


# --- the fake protocol: nothing here names a protocol but the registry ---------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "sse-with-event-lines"])
def test_a_registered_protocol_is_detected_named_and_linked_with_no_change_to_replay(
    fmt: str, toy: WireProtocol, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if fmt == "jsonl":
        path = write_jsonl(tmp_path / "toy.jsonl", TOY_EVENTS)
    else:
        path = write_sse_events(tmp_path / "toy.sse", TOY_EVENTS)
    code, report = run_json(["replay", str(path)], capsys)
    assert code == 0
    assert [(c["id"], c["name"], c["verdict"]) for c in report["calls"]] == [("toy-1", "read_page", "proposed")]
    assert run_json(["replay", str(path), "--protocol", "toy_protocol"], capsys) == (0, report)

    followup = tmp_path / "next.json"
    followup.write_text(json.dumps({"answers": ["toy-1", CANARY, 7]}))
    code, out, err = run(["replay", str(path), "--followup", str(followup), "--json"], capsys)
    assert (code, err) == (1, "")
    assert json.loads(out)["linkage"] == [{"id": None, "category": "orphaned_result", "reason": "unknown"}] * 2
    followup.write_text(json.dumps({"messages": []}))
    reason = refused(*run(["replay", str(path), "--followup", str(followup)], capsys))
    assert reason == f"{followup}: not a toy_protocol next request (the request as the protocol sends it)"


def test_refusals_name_every_registered_protocol(
    toy: WireProtocol, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "foo.jsonl"
    path.write_text('{"foo": 1}\n')
    reason = refused(*run(["replay", str(path)], capsys))
    assert reason == f"{path}: not a recording of any supported protocol ({supported()})"
    assert "toy_protocol" in reason and "chat_completions" in reason


def test_assembler_comparison_follows_the_detected_protocol(
    toy: WireProtocol, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "toy.jsonl", TOY_EVENTS)
    code, out, err = run(["replay", str(path), "--assembler", "reference", "--json"], capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)["assembler"]["calls"] == [{"id": "toy-1", "name": "read_page"}]
    reason = refused(*run(["replay", str(path), "--assembler", "openai"], capsys))
    assert reason.startswith("--assembler openai does not read toy_protocol recordings")


def test_the_assembler_choices_are_the_comparisons_own() -> None:
    from etf_otel.cli._replay import ASSEMBLER_NAMES
    from etf_otel.cli._replay_assemblers import ASSEMBLERS

    assert ASSEMBLER_NAMES == ASSEMBLERS


def test_export_uses_the_detected_protocol(
    toy: WireProtocol, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "toy.jsonl", TOY_EVENTS)
    export = tmp_path / "export.jsonl"
    code, _, err = run(["replay", str(path), "--export", str(export)], capsys)
    assert (code, err) == (0, "")
    text = export.read_text()
    assert '"etf.protocol"' in text and '"toy_protocol"' in text
    assert '"chat_completions"' not in text


# --- detection and refusal: exit 2, one line ----------------------------------------------------


OTLP_LINE = json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": []}]})


@pytest.mark.parametrize(
    ("content", "fmt"),
    [
        (b"", "jsonl"),
        (b"\n\n  \n", "jsonl"),
        (b'{"foo": 1}\n', "jsonl"),
        (b'{"type": "unknown.event"}\n', "jsonl"),
        (b'data: {"foo": 1}\n\n', "sse"),
        (b": keep-alive only\n\n", "sse"),
    ],
)
def test_a_recording_no_protocol_recognizes_is_refused(
    content: bytes, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Events no protocol knows, or no event at all (then the reason says the file is empty)."""
    path = tmp_path / f"r.{fmt}"
    path.write_bytes(content)
    empty = content.strip() in (b"", b": keep-alive only")
    for extra in ([], ["--json"]):
        reason = refused(*run(["replay", str(path), *extra], capsys))
        unknown = f"not a recording of any supported protocol ({supported()})"
        assert reason == f"{path}: {'empty, no event to replay' if empty else unknown}"


def test_the_first_event_decides_and_naming_the_protocol_reads_past_a_foreign_first_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"foo": 1}, *SAMPLES["chat_completions"]])
    reason = refused(*run(["replay", str(path)], capsys))
    assert reason == f"{path}: not a recording of any supported protocol ({supported()})"
    code, report = run_json(["replay", str(path), "--protocol", "chat_completions"], capsys)
    assert code == 0 and [c["id"] for c in report["calls"]] == ["call-a"]


@pytest.mark.parametrize("named", [[], ["--protocol", "chat_completions"], ["--protocol", "gemini"]])
@pytest.mark.parametrize("content", [b"", b"\n\n"])
def test_an_empty_recording_is_refused_as_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], named: list[str], content: bytes
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    reason = refused(*run(["replay", str(path), *named], capsys))
    assert reason == f"{path}: empty, no event to replay"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "array.jsonl",
            json.dumps(SAMPLES["chat_completions"][0]) + "\n[1, 2]\n",
            "{path}:2: event is a JSON array, not an object",
        ),
        ("number.jsonl", "42\n", "{path}:1: event is a JSON number, not an object"),
        ("broken.jsonl", '{"choices": [\n', "{path}:1: not JSON"),
        ("string.sse", 'data: "x"\n\n', "{path}: SSE event 1: event is a JSON string, not an object"),
    ],
)
def test_an_event_that_is_not_an_object_is_refused(
    name: str, content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert refused(*run(["replay", str(path), "--json"], capsys)) == message.format(path=path)


def test_unreadable_paths_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(*run(["replay", str(tmp_path)], capsys)) == f"cannot read {tmp_path}: Is a directory"
    missing = tmp_path / "missing.jsonl"
    assert refused(*run(["replay", str(missing)], capsys)) == f"cannot read {missing}: No such file or directory"
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"choices": [], "x": "caf\xe9"}\n')
    assert refused(*run(["replay", str(latin1)], capsys)) == f"{latin1}:1: not UTF-8 text"


def test_an_export_path_that_cannot_be_written_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reason = refused(*run(["replay", str(CASE), "--export", str(tmp_path)], capsys))
    assert reason == f"--export: cannot write {tmp_path}: Is a directory"


# --- SSE with event: lines ----------------------------------------------------------------------


def test_sse_event_names_must_agree_with_the_data_type(
    toy: WireProtocol, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names: list[str | None] = ["toy.call", "toy.end", "toy.end"]  # the second event's name lies
    path = write_sse_events(tmp_path / "lying.sse", TOY_EVENTS, names)
    reason = refused(*run(["replay", str(path)], capsys))
    assert reason == f"{path}: SSE event 2: its event: name differs from the type of its data"


def test_sse_default_event_name_and_untyped_data_are_taken_as_they_are(
    toy: WireProtocol, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_sse_events(tmp_path / "toy.sse", TOY_EVENTS, ["message", None, "toy.end"])
    assert run_json(["replay", str(path)], capsys)[0] == 0
    chat = write_sse_events(tmp_path / "chat.sse", SAMPLES["chat_completions"], ["chunk"] * 3 + [None])
    code, report = run_json(["replay", str(chat)], capsys)  # Chat chunks have no type: nothing to check
    assert code == 0 and [c["id"] for c in report["calls"]] == ["call-a"]


# --- standard input, through a real pipe --------------------------------------------------------


@pytest.mark.parametrize("source", ["-", "/dev/stdin"])
def test_a_recording_piped_into_standard_input(source: str) -> None:
    done = cli("replay", source, "--json", stdin=(RECORDINGS / "case-target.sse").read_bytes())
    assert done.returncode == 0, done.stderr
    assert done.stderr == b""
    report = json.loads(done.stdout)
    assert [c["id"] for c in report["calls"]] == ["call-a"] and report["dispatchable"] is True


def test_standard_input_that_is_no_recording_is_refused_naming_stdin() -> None:
    done = cli("replay", "-", stdin=b"")
    assert done.returncode == 2 and done.stdout == b""
    expected = "etf-otel replay: <stdin>: empty, no event to replay\n"
    assert done.stderr.decode() == expected
    done = cli("replay", "-", stdin=b"{not json\n")
    assert (done.returncode, done.stderr.decode()) == (2, "etf-otel replay: <stdin>:1: not JSON\n")


def test_a_followup_piped_into_standard_input() -> None:
    followup = json.dumps([ASSISTANT, {"role": "tool", "tool_call_id": "call-a"}]).encode()
    done = cli("replay", str(CASE), "--followup", "-", "--json", stdin=followup)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["linkage"] == []


def test_standard_input_cannot_be_read_twice(capsys: pytest.CaptureFixture[str]) -> None:
    reason = refused(*run(["replay", "-", "--followup", "-"], capsys))
    assert reason == "FILE and --followup cannot both read standard input (-)"


def test_a_terminal_on_standard_input_is_refused_rather_than_waited_on() -> None:
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "etf_otel", "replay", "-"],
            stdin=terminal,
            capture_output=True,
            timeout=60,
            cwd=ROOT,
            check=False,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.returncode == 2
    assert done.stderr.decode() == (
        "etf-otel replay: <stdin>: standard input is a terminal; pipe or redirect the input into it\n"
    )


def test_closed_standard_input_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    assert refused(*run(["replay", "-"], capsys)) == "<stdin>: standard input is closed"


def test_a_reader_that_leaves_early_does_not_change_the_exit_code(tmp_path: Path) -> None:
    """``replay FILE | head -1``: a broken pipe is not a finding, nor a traceback."""
    many = [chunk(*(fragment(i, f"call-{i}", "read_page", "{}") for i in range(2000))), "[DONE]"]
    path = write_jsonl(tmp_path / "many.jsonl", many)
    for extra in ([], ["--json", "--show-arguments"]):
        with subprocess.Popen(
            [sys.executable, "-m", "etf_otel", "replay", str(path), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        ) as process:
            assert process.stdout is not None and process.stderr is not None
            process.stdout.read(10)
            process.stdout.close()
            err = process.stderr.read()
            assert process.wait(timeout=120) == 0, err
        assert b"Traceback" not in err


# --- --followup (Chat Completions) --------------------------------------------------------------


def tool(call_id: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


ASSISTANT = {"role": "assistant", "tool_calls": [{"id": "call-a", "type": "function"}]}
FOLLOWUP_KEYS = {"dispatchable", "stream", "calls", "rejections", "diagnostics", "linkage", "drift", "pairing"}
FOLLOWUP_KEYS |= {"pairing_omitted"}
CHAT_FOLLOWUPS: dict[str, tuple[Any, list[dict[str, Any]]]] = {
    "clean": ([{"role": "user", "content": "hi"}, ASSISTANT, tool("call-a")], []),
    "clean_request_object": ({"model": "m", "messages": [ASSISTANT, tool("call-a")]}, []),
    "orphaned_canary": (
        [ASSISTANT, tool("call-a"), tool(CANARY)],
        [{"id": None, "category": "orphaned_result", "reason": "unknown"}],
    ),
    "orphaned_not_a_string": (
        [ASSISTANT, tool("call-a"), tool(7)],
        [{"id": None, "category": "orphaned_result", "reason": "unknown"}],
    ),
    "duplicate": ([ASSISTANT, tool("call-a"), tool("call-a")], [{"id": "call-a", "category": "duplicate_result"}]),
    "unanswered": ([ASSISTANT], [{"id": "call-a", "category": "unanswered_call"}]),
    "answered_before_the_assistant_only": (
        [tool("call-a"), ASSISTANT],
        [{"id": "call-a", "category": "unanswered_call"}],
    ),
    "all_three": (
        [ASSISTANT, tool(CANARY), tool(CANARY)],
        [{"id": None, "category": "orphaned_result", "reason": "unknown"}] * 2
        + [{"id": "call-a", "category": "unanswered_call"}],
    ),
}


@pytest.mark.parametrize("case", sorted(CHAT_FOLLOWUPS))
def test_followup_linkage_of_a_dispatchable_response(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    followup, expected = CHAT_FOLLOWUPS[case]
    path = tmp_path / "next.json"
    path.write_text(json.dumps(followup))
    code, out, err = run(["replay", str(CASE), "--followup", str(path), "--json"], capsys)
    assert err == ""
    assert code == (1 if expected else 0)
    report = json.loads(out)
    assert set(report) == FOLLOWUP_KEYS
    assert_followup_shape(report)
    assert report["linkage"] == expected
    assert bool(report["pairing"]) is (case not in ("clean", "clean_request_object")), report["pairing"]
    assert CANARY not in out

    code, out, err = run(["replay", str(CASE), "--followup", str(path)], capsys)
    assert err == "" and code == (1 if expected else 0)
    assert CANARY not in out
    if expected:
        assert "linkage (next request)" in out
        for finding in expected:
            assert finding["category"] in out
    else:
        assert "linkage: every proposed call answered exactly once" in out


def test_without_followup_there_is_no_linkage_key(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run_json(["replay", str(CASE)], capsys)
    assert code == 0 and "linkage" not in report


@pytest.mark.parametrize(
    ("chunks", "canary_reason"),
    [
        ([chunk(fragment(0, "call-a", "read_page", "{}"))], "unknown"),  # truncated
        (  # id_conflict: the canary is the id the rules refused
            finished(chunk(fragment(0, "call-a", "read_page", "{}")), chunk(fragment(0, CANARY))),
            "rejected_incoming_id",
        ),
    ],
    ids=["truncated", "id_conflict"],
)
def test_a_non_dispatchable_response_proposed_nothing_so_every_result_is_orphaned(
    chunks: list[Any], canary_reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = write_jsonl(tmp_path / "r.jsonl", chunks)
    path = tmp_path / "next.json"
    path.write_text(json.dumps([ASSISTANT, tool("call-a"), tool(CANARY)]))
    code, out, err = run(["replay", str(recording), "--followup", str(path), "--json"], capsys)
    assert (code, err) == (1, "")
    report = json.loads(out)
    assert report["dispatchable"] is False
    assert report["linkage"] == [
        {"id": None, "category": "orphaned_result", "reason": "rejected_call"},
        {"id": None, "category": "orphaned_result", "reason": canary_reason},
    ]
    assert CANARY not in out
    code, out, err = run(["replay", str(recording), "--followup", str(path)], capsys)
    assert (code, err) == (1, "")
    assert "the response is not dispatchable, so it proposed nothing to answer" in out
    assert CANARY not in out


def test_followup_with_an_assembler_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "next.json"
    path.write_text(json.dumps([ASSISTANT]))
    code, out, err = run(["replay", str(CASE), "--assembler", "reference", "--followup", str(path), "--json"], capsys)
    assert (code, err) == (1, "")
    document = json.loads(out)
    assert document["linkage"] == [{"id": "call-a", "category": "unanswered_call"}]
    assert set(document["assembler"]) == {"name", "raised", "calls", "divergences"}
    code, out, err = run(["replay", str(CASE), "--assembler", "reference", "--followup", str(path)], capsys)
    assert (code, err) == (1, "") and "unanswered_call" in out


NOT_CHAT_REQUEST = "{path}: not a chat_completions next request (the messages list, or the request object holding it)"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"input": []}', NOT_CHAT_REQUEST),
        (b"[1, 2]", NOT_CHAT_REQUEST),
        (b'"messages"', NOT_CHAT_REQUEST),
        (b"{not json", "{path}: not JSON"),
        (b"[" * 100_000, "{path}: not JSON"),
        (b'[{"role": "tool", "tool_call_id": "caf\xe9"}]', "{path}: not UTF-8 text"),
        (b"", "{path}: empty, not JSON"),
        (b'{"a": 1}\n{"b": 2}\n', "{path}: not JSON"),
    ],
)
def test_a_followup_that_is_no_next_request_is_refused(
    content: bytes, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "next.json"
    path.write_bytes(content)
    for extra in ([], ["--json"]):
        reason = refused(*run(["replay", str(CASE), "--followup", str(path), *extra], capsys))
        assert reason == message.format(path=path)


def test_a_followup_path_that_cannot_be_read_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(*run(["replay", str(CASE), "--followup", str(tmp_path)], capsys)) == (
        f"cannot read {tmp_path}: Is a directory"
    )
    missing = tmp_path / "missing.json"
    assert refused(*run(["replay", str(CASE), "--followup", str(missing)], capsys)) == (
        f"cannot read {missing}: No such file or directory"
    )


# --- hostile strings: lone surrogates, NUL, markup, terminal control -----------------------------

HOSTILE = {  # id, name, arguments; a raw NUL in arguments is not JSON, so that call is rejected
    "lone_surrogate": ("call-\ud800", "read\udfffpage", '{"q":"\ud83d"}'),
    "nul": ("call-\x00a", "read\x00page", '{"q":"\x00"}'),
    "markup_and_escape": ("[/x]call", "[bold]read\x1b[31m", '{"q":"[/]"}'),
    "bidi_and_zero_width": ("call-a\u200b", "read\u202epage", '{"q":"\u2028"}'),
}


@pytest.mark.parametrize("fmt", ["jsonl", "sse"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_strings_give_valid_json_and_a_table_without_raw_control(
    case: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no folding: the cells are checked whole
    call_id, name, arguments = HOSTILE[case]
    chunks = finished(chunk(fragment(0, call_id, name, arguments)))
    path = write_jsonl(tmp_path / "r.jsonl", chunks) if fmt == "jsonl" else write_sse_events(tmp_path / "r.sse", chunks)

    verdict, expected_code = ("rejected", 1) if case == "nul" else ("proposed", 0)
    code, out, err = run(["replay", str(path), "--json", "--show-arguments"], capsys)
    assert (code, err) == (expected_code, "")
    out.encode("utf-8")  # strict: no lone surrogate reaches the output
    (call,) = json.loads(out)["calls"]
    assert (call["id"], call["name"], call["arguments"], call["verdict"]) == (call_id, name, arguments, verdict)

    for extra in ([], ["--show-arguments"]):
        code, out, err = run(["replay", str(path), *extra], capsys)
        assert (code, err) == (expected_code, "")
        out.encode("utf-8")
        assert verdict in out
        assert not any(char in out for char in "\x00\x1b\u200b\u202e\u2028\ud800\udfff\ud83d")
    shown = {
        "lone_surrogate": "call-\\ud800",
        "nul": "call-\\x00a",
        "markup_and_escape": "[/x]call",
        "bidi_and_zero_width": "call-a\\u200b",
    }[case]
    assert shown in out


def test_hostile_strings_in_an_assembler_comparison_and_in_linkage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    chunks = finished(chunk(fragment(0, "[/x]\ud800\x1b", "read\x00", "{}")))
    path = write_jsonl(tmp_path / "r.jsonl", chunks)
    followup = tmp_path / "next.json"
    followup.write_text(json.dumps([ASSISTANT, tool("[/x]\ud800\x1b"), tool("[/x]\ud800\x1b")]))
    code, out, err = run(["replay", str(path), "--assembler", "reference", "--followup", str(followup)], capsys)
    assert (code, err) == (1, "")
    out.encode("utf-8")
    assert "\x1b" not in out and "[/x]\\ud800\\x1b" in out and "duplicate_result" in out
    code, out, err = run(["replay", str(path), "--assembler", "reference", "--json"], capsys)
    assert (code, err) == (0, "")
    assert json.loads(out)["assembler"]["calls"] == [{"id": "[/x]\ud800\x1b", "name": "read\x00"}]


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_an_output_that_cannot_encode_the_strings_gets_escapes(extra: list[str], tmp_path: Path) -> None:
    chunks = finished(chunk(fragment(0, "call-\ud800", "読む", '{"q":"é"}')))
    path = write_jsonl(tmp_path / "r.jsonl", chunks)
    for encoding in ("utf-8", "ascii", "latin-1"):
        env = {"PYTHONIOENCODING": encoding, "COLUMNS": "200"}
        done = cli("replay", str(path), "--show-arguments", *extra, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stderr == b""
        text = done.stdout.decode(encoding)
        if extra:
            (call,) = json.loads(text)["calls"]
            assert (call["id"], call["name"], call["arguments"]) == ("call-\ud800", "読む", '{"q":"é"}')
        else:
            assert "call-\\ud800" in text and "proposed" in text


def column(out: str, number: int) -> str:
    """The text of table column ``number`` (from 1): a terminal's folded lines joined, or a pipe's
    tab-separated rows (the line after a title is the header) joined.

    On a terminal the table is compact: a header, a rule of ``─`` under it, rows as wide as the rule;
    a column spans the positions between two that are blank on the header line and on every row."""
    lines = out.splitlines()
    rules = [n for n, line in enumerate(lines) if line and set(line) == {"\u2500"}]
    if rules:
        width = len(lines[rules[0]])
        block = [lines[rules[0] - 1]]
        block += [line for line in lines[rules[0] + 1 :] if len(line) == width]
        block = [line.ljust(width) for line in block]
        blank = [all(line[p] == " " for line in block) for p in range(width)]
        spans, start = [], None
        for p in range(width + 1):
            if p < width and not blank[p]:
                start = p if start is None else start
            elif start is not None:
                spans.append((start, p))
                start = None
        begin, end = spans[number - 1]
        return "".join(line[begin:end].strip() for line in block[1:])
    cells, previous_tabbed = [], False
    for line in lines:
        tabbed = "\t" in line
        if tabbed and previous_tabbed:
            cells.append(line.split("\t")[number - 1])
        previous_tabbed = tabbed
    return "".join(cells)


def test_on_an_80_column_terminal_a_long_id_is_folded_never_cut_short(tmp_path: Path) -> None:
    """The id folds (every character shown); a name too long for its column is cut with a marker."""
    long_id, long_name = "call_" + "x" * 60 + "_END", "a_really_long_function_name_for_testing"
    path = write_jsonl(tmp_path / "r.jsonl", finished(chunk(fragment(0, long_id, long_name, "{}"))))
    shown = in_terminal("replay", str(path), columns=80)
    assert (shown.returncode, shown.stderr) == (0, "")
    out = shown.stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    assert (column(out, 3), column(out, 6)) == (long_id, "proposed")
    name = column(out, 4)
    assert name.endswith("…") and long_name.startswith(name[:-1]) and len(name) >= 8
    assert out.count("…") == 1, "only the name is cut"


# --- size ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "sse"])
def test_a_100000_event_stream(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events: list[Any] = [chunk(fragment(0, "call-a", "read_page", '{"q":"'))]
    events += [chunk(fragment(0, arguments="x")) for _ in range(99_998)]
    events += [chunk(fragment(0, arguments='"}'), finish_reason="tool_calls")]
    if fmt == "jsonl":
        path = write_jsonl(tmp_path / "big.jsonl", events)
    else:
        path = write_sse_events(tmp_path / "big.sse", [*events, "[DONE]"], [None] * (len(events) + 1))
    started = time.perf_counter()
    code, report = run_json(["replay", str(path)], capsys)
    elapsed = time.perf_counter() - started
    assert code == 0
    assert [(c["id"], c["fragments"], c["verdict"]) for c in report["calls"]] == [("call-a", 100_000, "proposed")]
    with capsys.disabled():
        print(f"\n[replay] 100,000 events ({fmt}, {path.stat().st_size / 2**20:.1f} MiB): {elapsed:.2f} s")
    assert elapsed < 60


# --- help ---------------------------------------------------------------------------------------


def test_help_states_the_exit_codes_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["replay", "--help"], capsys)
    assert code == 0
    assert "exit codes:\n  0  nothing found" in out
    assert "\n  1  integrity problems found" in out and "\n  2  unusable input or usage" in out
    assert "example:\n  etf-otel replay" in out
    assert "--followup NEXT" in out and "- reads standard input" in out


# --- Bedrock's raw event-stream bytes: a recording in a binary framing ---------------------------


def test_raw_event_stream_bytes_replay_like_their_dict_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = SAMPLES["bedrock_converse"]
    raw = tmp_path / "cassette.bin"
    raw.write_bytes(bedrock.frames(events))
    as_json = write_jsonl(tmp_path / "r.jsonl", events)
    code, report = run_json(["replay", str(raw), "--show-arguments"], capsys)
    assert code == 0
    assert run_json(["replay", str(as_json), "--show-arguments"], capsys) == (0, report)
    assert run_json(["replay", str(raw), "--show-arguments", "--protocol", "bedrock_converse"], capsys) == (0, report)
    followup = tmp_path / "next.json"
    followup.write_text(json.dumps(FOLLOWUPS["bedrock_converse"](["tooluse_01"])))
    code, out, err = run(["replay", str(raw), "--followup", str(followup), "--json"], capsys)
    assert (code, err, json.loads(out)["linkage"]) == (0, "", [])


def test_raw_bytes_cut_mid_message_or_corrupt_are_not_dispatchable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bedrock.frames(SAMPLES["bedrock_converse"])
    stop = len(bedrock.frames(SAMPLES["bedrock_converse"][:-2]))  # where messageStop begins
    cut = tmp_path / "cut.bin"
    cut.write_bytes(data[: stop + 7])  # messageStop cut inside its prelude: the end of the input
    code, report = run_json(["replay", str(cut)], capsys)
    assert (code, report["stream"]["state"], report["dispatchable"]) == (1, "truncated", False)
    corrupt = tmp_path / "corrupt.bin"
    corrupt.write_bytes(data[: stop + 20] + bytes([data[stop + 20] ^ 0xFF]) + data[stop + 21 :])
    code, report = run_json(["replay", str(corrupt)], capsys)
    assert (code, report["stream"]["state"], report["dispatchable"]) == (1, "failed", False)


# --- Ollama: what the ollama client sends back (tool_name, no ids) -----------------------------------


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["get_a", "get_b"], []),
        ([None, None], []),  # older clients name nothing: by order
        (["get_b"], [("unanswered_call", "get_a")]),
        (["get_a", "get_a", "get_b"], [("duplicate_result", "get_a")]),
    ],
)
def test_an_ollama_follow_up_without_ids_is_linked_by_name_and_order(
    names: list[str | None], expected: list[tuple[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = ollama.stream(ollama.chunk(ollama.call("get_a", {"a": 1}), ollama.call("get_b", {"b": 2})))
    recording = write_jsonl(tmp_path / "r.jsonl", events)
    assistant = {"role": "assistant", "content": "", "tool_calls": events[0]["message"]["tool_calls"]}
    tools = [{"role": "tool", "content": "ok", **({"tool_name": n} if n else {})} for n in names]
    followup = tmp_path / "next.json"
    followup.write_text(json.dumps({"messages": [{"role": "user", "content": "?"}, assistant, *tools]}))
    code, out, err = run(["replay", str(recording), "--followup", str(followup), "--json"], capsys)
    assert (code, err) == ((1 if expected else 0), "")
    document = json.loads(out)
    assert [(c["id"], c["verdict"]) for c in document["calls"]] == [(None, "proposed"), (None, "proposed")]
    assert [(f["category"], f["name"]) for f in document["linkage"]] == expected
