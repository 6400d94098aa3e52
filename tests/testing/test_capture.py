"""``etf_otel.testing.capture()`` and the pytest plugin's ``etf_capture`` fixture."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry import trace

from etf_otel.testing import Capture, capture

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "etf_otel.testing._pytest_plugin"


def test_capture_reads_spans_and_metric_points_by_name_from_its_own_providers() -> None:
    with capture() as telemetry:
        tracer = telemetry.tracer_provider.get_tracer("t")
        with tracer.start_as_current_span("etf.a"), tracer.start_as_current_span("other"):
            pass
        counter = telemetry.meter_provider.get_meter("t").create_counter("etf.calls")
        counter.add(2, {"etf.protocol": "chat_completions"})
        counter.add(3, {"etf.protocol": "responses"})

        assert [span.name for span in telemetry.spans()] == ["other", "etf.a"]
        assert [span.name for span in telemetry.spans("etf.")] == ["etf.a"]
        assert telemetry.span("other").parent is not None
        assert sorted(value for _, value in telemetry.points("etf.calls")) == [2, 3]
        assert telemetry.metric_sum("etf.calls", etf__protocol="responses") == 3
        assert telemetry.points("etf.none") == []
        with pytest.raises(AssertionError, match="0 finished spans named 'missing'"):
            telemetry.span("missing")
        telemetry.clear()
        assert telemetry.spans() == []
    assert trace.get_tracer_provider() is not telemetry.tracer_provider  # never the global provider


def run_pytest(tmp_path: Path, test: str) -> subprocess.CompletedProcess[str]:
    """A pytest session of an application's own tests, with only this plugin loaded."""
    (tmp_path / "test_app.py").write_text(textwrap.dedent(test), encoding="utf-8")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-q", str(tmp_path)]
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_the_fixture_gives_each_test_its_own_providers(tmp_path: Path) -> None:
    run = run_pytest(
        tmp_path,
        """
        seen = []

        def test_one(etf_capture):
            etf_capture.tracer_provider.get_tracer("t").start_span("one").end()
            seen.append(etf_capture)
            assert [s.name for s in etf_capture.spans()] == ["one"]

        def test_two(etf_capture):
            assert etf_capture is not seen[0] and etf_capture.spans() == []
        """,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


def test_without_the_sdk_the_fixture_fails_naming_the_extra(tmp_path: Path) -> None:
    run = run_pytest(
        tmp_path,
        """
        import sys

        sys.modules["opentelemetry.sdk"] = None  # the base install: no SDK

        def test_app(etf_capture):
            pass

        def test_unrelated():
            pass
        """,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 passed" in run.stdout and "1 error" in run.stdout
    assert "etf-otel[cli]" in run.stdout


def test_loading_the_plugin_imports_no_sdk_and_no_third_party_module() -> None:
    """pytest loads it in every application's test session: beyond pytest, only the standard library and etf_otel."""
    probe = f"""
import sys
sys.modules["opentelemetry.sdk"] = None
import pytest
before = set(sys.modules)
import {PLUGIN}
loaded = {{name.split(".")[0] for name in set(sys.modules) - before}}
own = {{"etf_otel"}} | {{name for name in loaded if name.endswith("__mypyc")}}  # the compiled build's shared library
print(sorted(loaded - set(sys.stdlib_module_names) - own))
"""
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "[]\n"


def test_the_plugin_is_registered_as_a_pytest11_entry_point() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib on Python 3.10
    table = text.split("[project.entry-points.pytest11]\n", 1)[1].split("\n\n", 1)[0]
    assert table.splitlines() == [f'etf_otel = "{PLUGIN}"']


def test_capture_is_the_class() -> None:
    assert isinstance(capture(), Capture)
