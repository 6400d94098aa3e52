"""``benchmarks/overhead.py --quick --json`` runs and reports every figure (smoke test: no speed assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = {
    "openai_stream_4x50",
    "openai_stream_2x5",
    "observer_us_per_fragment",
    "observer_us_per_call",
    "record_response_us_per_call",
    "assembler_speedup_vs_sdk",
    "memory_open_streams_mb",
    "memory_not_released_pct",
}


def test_overhead_quick_json_reports_every_figure() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "overhead.py"), "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    document = json.loads(completed.stdout)
    assert document["mode"] == "quick"
    assert set(document["figures"]) == FIGURES
    for key, figure in document["figures"].items():
        assert figure["key"] == key
        assert isinstance(figure["value"], float) and figure["value"] == figure["value"], key  # a number, not NaN
        assert figure["unit"] and figure["label"]
        if figure["target"] is not None:
            assert isinstance(figure["passed"], bool), key
    floors = {key for key, figure in document["figures"].items() if "floor" in figure["extra"]}
    assert floors == {"openai_stream_4x50", "openai_stream_2x5", "observer_us_per_fragment", "observer_us_per_call"}
    for key in floors:
        floor = document["figures"][key]["extra"]["floor"]
        assert isinstance(floor, float) and floor == floor, key
