"""The command line from the user's side: a pipe, a terminal (a pty), a signal, a hostile recording.

Each test runs ``python -m etf_otel`` as a process, the way a shell, a CI log or ``| grep`` meets it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etf_otel.testing.chat import chunk, finished, fragment

from ._terminal import ROOT, environment, in_terminal

BROKEN = finished(chunk(fragment(0, "call-broken", "get_weather", '{"city": "Par')))


def etf_otel(*args: str, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "etf_otel", *args],
        input=None if stdin is None else stdin.decode(),
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=environment(),
    )


_MEASURE = (
    "import resource, subprocess, sys\n"
    "subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, check=False)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
)
"""Runs a command and reports its peak resident memory in KiB on stderr."""


def peak_mib(*args: str, out: Path) -> float:
    """The peak resident memory of one ``etf-otel`` run, its own.

    Measured from a small parent: a child forked straight from this test process starts with the
    test process's pages counted (Linux keeps the image a process had before ``exec`` in its peak),
    and ``RUSAGE_CHILDREN`` here would be the largest child this process ever waited for.
    """
    with out.open("w") as stdout:
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE, sys.executable, "-m", "etf_otel", *args],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=ROOT,
            env=environment(),
            check=True,
        )
    return int(done.stderr.strip().splitlines()[-1]) / 1024


def shell(command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``command`` in bash, ``etf-otel`` spelled as this interpreter's ``-m etf_otel``."""
    command = command.replace("etf-otel", f"{sys.executable} -m etf_otel")
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=environment()
    )


def write_events(path: Path, events: list[object]) -> Path:
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
    return path


def one_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"etf-otel {command}: ") and "internal error" not in line, line
    return line.removeprefix(f"etf-otel {command}: ")


# --- replay: hostile recordings are a verdict or one line ---------------------------------------------


@pytest.mark.parametrize("kind", [{"name": "response.completed"}, ["response.completed"], ["x", 1]])
def test_a_responses_event_whose_type_is_an_object_or_array_is_a_verdict_not_a_crash(
    kind: object, tmp_path: Path
) -> None:
    path = write_events(
        tmp_path / "r.jsonl", [{"type": "response.created", "response": {"id": "resp_1"}}, {"type": kind}]
    )
    for args in ((), ("--json",), ("--protocol", "responses")):
        done = etf_otel("replay", str(path), *args)
        assert (done.returncode, done.stderr) == (1, ""), done.stderr
    assert json.loads(etf_otel("replay", str(path), "--json").stdout)["stream"]["state"] == "truncated"


def test_a_10_mb_id_is_shown_cut_with_a_marker_in_bounded_time_and_memory_and_whole_in_json(tmp_path: Path) -> None:
    call_id = "call-" + "x" * 10_000_000
    path = write_events(tmp_path / "big.jsonl", finished(chunk(fragment(0, call_id, "get_weather", "{}"))))
    for columns, run in ((None, lambda: etf_otel("replay", str(path))), (80, lambda: in_terminal("replay", str(path)))):
        started = time.monotonic()
        done = run()
        elapsed = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        assert elapsed < 30, f"{elapsed:.1f} s (was 76 s)"
        assert len(done.stdout) < 20_000, "what the table prints is bounded"
        squeezed = "".join(done.stdout.replace("│", " ").split())  # a terminal folds the marker
        assert "\u2026[9999805morechars]" in squeezed, columns
    peak = peak_mib("replay", str(path), out=tmp_path / "table.txt")
    assert peak < 400, f"{peak:.0f} MiB (was 663 MiB)"
    document = json.loads(etf_otel("replay", str(path), "--json").stdout)
    assert document["calls"][0]["id"] == call_id, "--json keeps it whole"


@pytest.mark.parametrize("pretty", [False, True])
def test_traces_given_to_replay_get_a_one_line_hint_naming_audit(pretty: bool, tmp_path: Path) -> None:
    document = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": []}]}
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(document, indent=2 if pretty else None) + "\n", encoding="utf-8")
    hint = one_line(etf_otel("replay", str(path)), "replay")
    assert (
        hint == f"{path}: exported traces (OTLP JSON), not a recorded response: check them with etf-otel audit {path}"
    )
    piped = one_line(etf_otel("replay", "-", stdin=path.read_bytes()), "replay")
    assert piped.endswith("check them with etf-otel audit -")


# --- pipes: one record per line, and the verdict survives a reader that leaves -------------------------


def test_replay_piped_to_grep_finds_the_rejected_call_on_one_line(tmp_path: Path) -> None:
    path = write_events(tmp_path / "r.jsonl", BROKEN)
    done = shell(f"COLUMNS=40 etf-otel replay {path} | grep invalid_arguments")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.split("\t") == ["0", "0", "call-broken", "get_weather", "1", "rejected", "invalid_arguments"]


def test_on_a_terminal_the_same_table_is_drawn(tmp_path: Path) -> None:
    shown = in_terminal("replay", str(write_events(tmp_path / "r.jsonl", BROKEN)), columns=80)
    assert shown.returncode == 1 and "\t" not in shown.stdout
    lines = shown.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("choice")))
    assert set(lines[header + 1]) == {"─"}, "a rule under the header"
    assert lines[header + 2].split() == ["0", "0", "call-broken", "get_weather", "1", "rejected", "invalid_arguments"]


# --- a terminal: no word is split; names whole or cut with a marker, only ids and arguments fold ----------

WORDS = finished(
    chunk(fragment(0, "call_9Rz3TqkA1b2C3d4E5f6G7h8", "get_weather", '{"city": "Par')),  # invalid_arguments
    chunk(fragment(1, "call_Xq2Lm8Np4Rs6Tu0Vw2Yz4Ab", "search_flights", '{"from": "CDG"}')),  # blocked by it
    chunk(fragment(2, "call_Hk5", "lookup_order", "{}")),
    chunk(fragment(2, "call_Hk6")),  # id_conflict
)
NAMES = ("get_weather", "search_flights", "lookup_order")
CATEGORIES = ("invalid_arguments", "id_conflict")


def split_words(out: str, words: tuple[str, ...]) -> list[str]:
    """Tokens of ``out`` that begin one of ``words`` but are not the word: the first piece of a split word
    (a prefix cut with ``…`` is one token, and does not begin the word with its marker)."""
    pieces = []
    for token in out.split():
        for word in words:
            if token != word and len(token) >= 3 and word.startswith(token):
                pieces.append(token)
    return pieces


def whole_on_one_line(out: str, word: str) -> bool:
    return any(word in line.split() for line in out.splitlines())


def test_on_an_80_column_terminal_names_and_categories_are_whole_on_one_line(tmp_path: Path) -> None:
    shown = in_terminal("replay", str(write_events(tmp_path / "r.jsonl", WORDS)), columns=80)
    assert (shown.returncode, shown.stderr) == (1, "")
    out = shown.stdout
    assert max(len(line) for line in out.splitlines()) <= 80
    for word in (*NAMES, *CATEGORIES, "rejected", "categories", "fragments"):
        assert whole_on_one_line(out, word), (word, out)
    assert split_words(out, (*NAMES, *CATEGORIES)) == [], out
    row = next(line for line in out.splitlines() if "search_flights" in line).split()
    assert row[-3:] == ["1", "rejected", "invalid_arguments"]  # its sibling's category, whole, on its row


@pytest.mark.parametrize(
    ("args", "columns"),
    [((), 60), ((), 40), (("--show-arguments",), 80), (("--assembler", "reference"), 80)],
    ids=["60-columns", "40-columns", "arguments", "assembler"],
)
def test_narrower_tables_cut_names_with_a_marker_and_never_split_a_word(
    args: tuple[str, ...], columns: int, tmp_path: Path
) -> None:
    shown = in_terminal("replay", str(write_events(tmp_path / "r.jsonl", WORDS)), *args, columns=columns)
    assert (shown.returncode, shown.stderr) == (1, "")
    out = shown.stdout
    table = out.split("stream:")[0] if not args else out.split("rules:")[0] if "--assembler" in args else out
    assert max(len(line) for line in table.splitlines()) <= columns
    assert split_words(out, (*NAMES, *CATEGORIES)) == [], out
    for word in NAMES:  # every name is there, whole or as a prefix cut with a marker
        assert any(token == word or (token.endswith("…") and word.startswith(token[:-1])) for token in out.split()), (
            word,
            out,
        )


def test_demo_piped_to_head_exits_by_its_verdict() -> None:
    done = shell('etf-otel demo | head -3 > /dev/null; exit "${PIPESTATUS[0]}"')
    assert (done.returncode, done.stderr) == (0, "")


# --- standard input on a terminal, and Ctrl-C -------------------------------------------------------------


@pytest.mark.parametrize("command", ["replay", "audit"])
def test_reading_a_terminal_on_standard_input_is_refused_with_one_line(command: str) -> None:
    shown = in_terminal(command, "-", stdin_terminal=True, timeout=30)
    assert (shown.returncode, shown.stdout) == (2, "")
    assert (
        shown.stderr
        == f"etf-otel {command}: <stdin>: standard input is a terminal; pipe or redirect the input into it\n"
    )


def interrupt(args: list[str], wait_for: str | None, delay: float) -> tuple[int, str]:
    """Start ``etf-otel ARGS``, wait until stdout shows ``wait_for`` (or ``delay`` s), send SIGINT."""
    process = subprocess.Popen(
        [sys.executable, "-m", "etf_otel", *args],
        stdin=subprocess.PIPE,  # open and silent: ``audit -`` waits on it
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=environment(),
    )
    assert process.stdout is not None and process.stderr is not None
    if wait_for is not None:
        assert wait_for in process.stdout.readline()
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    return process.returncode, err


@pytest.mark.parametrize(
    ("args", "wait_for", "delay"),
    # A command that waits (on standard input) takes the signal mid-run whatever the machine's speed; the demo
    # finished before a fixed delay on a fast run and then met the signal in the exporter's exit flush.
    [(["audit", "--no-progress", "-"], None, 3.0)],
    ids=["audit-stdin"],
)
def test_sigint_ends_a_command_with_exit_130_and_one_line(args: list[str], wait_for: str | None, delay: float) -> None:
    code, err = interrupt(args, wait_for, delay)
    assert (code, err) == (130, f"etf-otel {args[0]}: interrupted\n")
