"""``benchmarks/overhead.py --quick --json`` runs and reports every figure (smoke test: no speed assertions).

The peers' venv (scripts/install-bench-peers) is hidden from the first test, as CI has none: the
peers it holds must then be reported "not installed" while the benchmark still runs. The second
test smoke-tests the peers themselves, only when ``ETF_BENCH_PEERS_VENV`` names an installed venv
(it starts eleven worker processes: too slow to run by default on a shared machine). The last
tests check what the benchmarks measure: every case's response is one etf-otel dispatches, a
Gemini case streams each call's arguments in as many leaves as its shape says, the tracker
keys Gemini's calls by their position, and a Bedrock Converse case is what a real boto3 client reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ("chat", "responses", "anthropic", "gemini")
STAGED_PROTOCOLS = PROTOCOLS[:3]  # overhead_stages.py times the openai and anthropic clients
SHAPES = ("4x50", "2x5", "2x0")  # 2x0: a whole body, not streamed
CLIENT_FIGURES = {f"{protocol}_stream_{shape}" for protocol in PROTOCOLS for shape in SHAPES[:2]} | {
    f"{protocol}_body_2x0" for protocol in PROTOCOLS
}
VERSUS_PEERS = {f"{key}_vs_peers" for key in CLIENT_FIGURES}
FIGURES = (
    CLIENT_FIGURES
    | VERSUS_PEERS
    | {
        "observer_us_per_fragment",
        "observer_us_per_call",
        "record_response_us_per_call",
        "assembler_speedup_vs_sdk",
        "memory_open_streams_mb",
        "memory_not_released_pct",
    }
)
PEERS_VENV_CONFIGS = {
    "bare_peers",
    "otel_openai_v2",
    "openinference",
    "openllmetry",
    "bare_otel_genai",
    "otel_google_genai",
}


def run_overhead(*arguments: str, peers_venv: str) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "overhead.py"), "--quick", "--json", *arguments],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={**os.environ, "ETF_BENCH_PEERS_VENV": peers_venv},
    )
    assert completed.returncode == 0, completed.stderr
    document: dict[str, Any] = json.loads(completed.stdout)
    assert document["mode"] == "quick"
    return document


def is_number(value: object) -> bool:
    return isinstance(value, float) and value == value  # a number, not NaN


def check_cases(clients: dict[str, Any], measured: set[str]) -> None:
    """Every case lists every configuration; those in ``measured`` have a ratio where they instrument the API."""
    cases = clients["cases"]
    assert set(cases) == {f"{protocol}_{shape}" for protocol in PROTOCOLS for shape in SHAPES}
    for key, case in cases.items():
        assert set(case["configurations"]) == set(clients["configurations"]), key
        for name, result in case["configurations"].items():
            instruments = case["protocol"] in clients["configurations"][name]["protocols"]
            if name in measured and instruments:
                assert result["status"] == "measured", (key, name, result)
                assert is_number(result["ms"]), (key, name)
                if not name.startswith("bare"):
                    assert is_number(result["ratio"]) and result["spans_per_response"] > 0, (key, name, result)
            elif not instruments:
                assert result["status"] == "does not instrument this API", (key, name)


def test_overhead_quick_json_reports_every_figure(tmp_path: Path) -> None:
    document = run_overhead(peers_venv=str(tmp_path / "no-peers-venv"))
    assert set(document["figures"]) == FIGURES
    for key, figure in document["figures"].items():
        assert figure["key"] == key
        assert is_number(figure["value"]), key
        assert figure["unit"] and figure["label"]
        if figure["target"] is not None:
            assert isinstance(figure["passed"], bool), key
    floors = {key for key, figure in document["figures"].items() if "floor" in figure["extra"]}
    assert floors == CLIENT_FIGURES | {"observer_us_per_fragment", "observer_us_per_call"}
    for key in floors:
        assert is_number(document["figures"][key]["extra"]["floor"]), key
    for key in CLIENT_FIGURES:  # the floor emits the spans etf-otel emits: 1 + one per call
        figure = document["figures"][key]
        assert figure["extra"]["spans_per_response"] == 1 + int(key.rsplit("_", 1)[1][0])
        margin = 0.01 if key.endswith("4x50") else 0.025  # issue 20: this far above the floor, at most
        assert figure["target"] == pytest.approx(figure["extra"]["floor"] + margin), key
        assert is_number(figure["extra"]["tracker_ratio"]), key  # issue 20's minimal wrapper, a reference line
        case_key = key.replace("_stream", "").replace("_body", "")
        tracker = document["clients"]["cases"][case_key]["configurations"]["tracker"]
        assert tracker["spans_per_response"] == figure["extra"]["spans_per_response"], key
        versus = document["figures"][f"{key}_vs_peers"]
        assert versus["value"] == figure["value"], key
        peers = {name: ratio for name, ratio in figure["extra"]["peers"].items() if is_number(ratio)}
        assert versus["extra"]["peers"] == peers, key
        assert versus["target"] == (min(peers.values()) if peers else None), key

    clients = document["clients"]
    configurations = clients["configurations"]
    for name in ("bare", "floor", "tracker", "etf_otel"):
        assert configurations[name]["status"] == "ok", configurations[name]
    for name in PEERS_VENV_CONFIGS:  # no peers' venv: reported, not fatal
        assert configurations[name]["status"] == "not installed", configurations[name]
    # genai-openai comes with the test extra, in the project's venv.
    assert configurations["otel_genai_openai"]["status"] in {"ok", "not installed"}
    measured = {"bare", "floor", "tracker", "etf_otel"} | {n for n, c in configurations.items() if c["status"] == "ok"}
    check_cases(clients, measured)
    for case in clients["cases"].values():
        for name in PEERS_VENV_CONFIGS:
            status = case["configurations"][name]["status"]
            assert status in {"not installed", "does not instrument this API"}, (name, status)


@pytest.mark.skipif(
    not os.environ.get("ETF_BENCH_PEERS_VENV")
    or not (Path(os.environ.get("ETF_BENCH_PEERS_VENV", "")) / "bin" / "python").exists(),
    reason="set ETF_BENCH_PEERS_VENV to the venv of scripts/install-bench-peers to smoke-test the peers",
)
def test_overhead_quick_measures_the_peers() -> None:
    venv = str(Path(os.environ["ETF_BENCH_PEERS_VENV"]).resolve())
    document = run_overhead("--only", "clients", peers_venv=venv)
    assert set(document["figures"]) == CLIENT_FIGURES | VERSUS_PEERS
    configurations = document["clients"]["configurations"]
    for name, configuration in configurations.items():
        assert configuration["status"] == "ok", (name, configuration)
    check_cases(document["clients"], set(configurations))


def quick_json(script: str, timeout: int) -> dict[str, Any]:
    """The JSON document of ``benchmarks/SCRIPT --quick --json``, which must exit 0."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    document: dict[str, Any] = json.loads(completed.stdout)
    return document


def test_stages_quick_json_accounts_for_every_stage() -> None:
    """``overhead_stages.py`` times every stage of every case; the stages and the rest add up to what etf-otel adds."""
    document = quick_json("overhead_stages.py", timeout=240)
    assert set(document["cases"]) == {f"{protocol}_{shape}" for protocol in STAGED_PROTOCOLS for shape in SHAPES[:2]}
    for key, case in document["cases"].items():
        stages = case["stages_us"]
        # Each stage ran (a method renamed away from the timing table would read 0 here).
        assert all(is_number(value) and value > 0 for value in stages.values()), (key, stages)
        assert abs(sum(stages.values()) + case["rest_us"] - case["added_us"]) < 1e-6, key


@pytest.mark.skipif(
    shutil.which("valgrind") is None and not os.environ.get("ETF_REQUIRE_VALGRIND"),
    reason="needs Debian's valgrind (scripts/test installs it and sets ETF_REQUIRE_VALGRIND=1)",
)
def test_instruction_counts_quick_json() -> None:
    """``overhead_instructions.py`` counts the instructions of a response: etf-otel's run executes more than bare."""
    document = quick_json("overhead_instructions.py", timeout=600)
    assert document["mode"] == "quick"
    case = document["cases"]["anthropic_2x5"]
    counts = case["instructions_per_response"]
    assert set(counts) == {"bare", "etf_otel"}
    assert counts["bare"] > 1_000_000  # a client reading a response, not an empty loop
    assert 1.0 < case["ratios"]["etf_otel"] < 3.0  # the start of the process is subtracted, the rules are counted
    body = document["cases"]["anthropic_2x0"]  # counted in the same process, from the next dump
    assert set(body["instructions_per_response"]) == {"bare", "etf_otel"}
    assert 1_000_000 < body["instructions_per_response"]["bare"] < counts["bare"]  # no SSE parsing: fewer
    assert 1.0 < body["ratios"]["etf_otel"] < 3.0


@pytest.fixture(scope="module")
def benchmark_modules() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import overhead_instructions
        import overhead_streams
        import overhead_worker

        yield overhead_streams, overhead_worker, overhead_instructions
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_every_measured_response_is_one_etf_otel_dispatches(benchmark_modules: Any) -> None:
    """The floor's spans, captured from etf-otel, say every case's response is whole and dispatchable.

    A case etf-otel rejected would measure the cost of a rejection, not of the identity rules.
    """
    streams, worker, instructions = benchmark_modules
    assert {key.split(":")[0] for key in instructions.CASES} == {*PROTOCOLS, "bedrock"}
    for key in instructions.CASES:
        protocol, calls, fragments = key.split(":")
        spans = worker.Floor._capture(streams.Case(protocol, int(calls), int(fragments)))
        root = [attributes for _, attributes, is_root in spans if is_root]
        assert len(root) == 1 and len(spans) == 1 + int(calls), key
        assert root[0]["etf.stream.dispatchable"] is True, (key, root[0])
        assert root[0]["etf.stream.slots"] == int(calls), key
        assert root[0]["etf.response.streamed"] is (fragments != "0"), key


def test_gemini_stream_streams_each_call_in_fragments_leaves(benchmark_modules: Any) -> None:
    """A Gemini N x M case: per call a head, M ``partialArgs`` leaves that rebuild its arguments, a terminator."""
    streams, _, _ = benchmark_modules
    chunks = streams.gemini_chunks(2, 5)
    assert len(chunks) == 2 * (5 + 2) + 1
    for position in range(2):
        name, arguments, _ = streams.call_arguments(position, 5)
        parts = [chunk["candidates"][0]["content"]["parts"][0]["functionCall"] for chunk in chunks[position * 7 :][:7]]
        assert parts[0] == {"name": name, "willContinue": True} and parts[-1] == {}
        leaves = [entry for part in parts[1:-1] for entry in part["partialArgs"]]
        assert len(leaves) == 5
        rebuilt: dict[str, Any] = {}
        for leaf in leaves:
            path = leaf["jsonPath"]
            value = next(leaf[k] for k in ("stringValue", "numberValue", "boolValue") if k in leaf)
            rebuilt[path] = rebuilt.get(path, "") + value if isinstance(value, str) else value
        assert rebuilt["$.pad"] == json.loads(arguments)["pad"]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


def test_tracker_keys_gemini_calls_by_position_and_collects_their_pieces(benchmark_modules: Any) -> None:
    """The tracker's Gemini slots: one per call, in order, each with its head and every leaf."""
    streams, worker, _ = benchmark_modules
    from google.genai import types

    slots: dict[Any, list[Any]] = {}
    for chunk in streams.gemini_chunks(4, 50):
        worker._track_gemini(types.GenerateContentResponse.model_validate(chunk), slots)
    open_call, *calls = slots[0]
    assert open_call is None and len(calls) == 4
    assert all(len(pieces) == 1 + 50 for _, pieces, _ in calls)


def test_bedrock_case_is_read_by_a_real_boto3_client_in_memory(benchmark_modules: Any) -> None:
    """A Converse case through boto3 answered by the ``before-send`` handler: the events built, every call whole.

    Streamed, the client decodes every event-stream message into the events the case was built from, and
    the tracker's slots rebuild each call's id and arguments; not streamed, ``converse`` returns each call.
    """
    streams, worker, _ = benchmark_modules
    body, events = streams.case_body(streams.Case("bedrock", 2, 5))
    read = list(streams.bedrock_client(body).converse_stream(**streams.BEDROCK_REQUEST)["stream"])
    assert read == streams.bedrock_events(2, 5) and len(read) == events == 1 + 2 * (5 + 2) + 2
    slots: dict[Any, list[Any]] = {}
    for event in read:
        worker._track_bedrock(event, slots)
    for position in range(2):
        call_id, pieces, _ = slots.pop(position)
        assert call_id == f"tooluse_{position}" and len(pieces) == 5
        assert json.loads("".join(pieces)) == json.loads(streams.call_arguments(position, 5)[1])
    assert not slots
    whole, _ = streams.case_body(streams.Case("bedrock", 2, 0))
    answer = streams.bedrock_client(whole, streamed=False).converse(**streams.BEDROCK_REQUEST)
    calls = [block["toolUse"] for block in answer["output"]["message"]["content"]]
    assert [(call["toolUseId"], call["input"]) for call in calls] == [
        (f"tooluse_{n}", json.loads(arguments)) for n, (_, arguments) in enumerate(streams.TOOLS[:2])
    ]
