"""The options of ``instrument()``: typed, and an unknown one reported once, never raised."""

from __future__ import annotations

import ast
import importlib
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from etf_otel.integrations.openai import OpenAIInstrumentor, instrument_openai
from tests.conftest import Captured


def _option_warnings(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "etf_otel" and record.levelno == logging.WARNING and repr(name) in record.getMessage()
    ]


def test_an_unknown_option_is_reported_once_and_never_raised(
    captured: Captured, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A typo (``tracer_provder``) would leave the application on the global provider without a word."""
    from etf_otel.integrations import _instrumentor_base

    monkeypatch.setattr(_instrumentor_base, "_reported", set())
    caplog.set_level(logging.WARNING, logger="etf_otel")
    for _ in range(2):
        instrumentor = instrument_openai(tracer_provder=captured.tracer_provider)  # type: ignore[call-arg]
        assert instrumentor.instrumentation is not None  # instrumented all the same
        instrumentor.uninstrument()
    assert len(_option_warnings(caplog, "tracer_provder")) == 1


def test_the_instrument_path_reports_unknown_options_too(
    captured: Captured, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from etf_otel.integrations import _instrumentor_base
    from etf_otel.integrations.anthropic import AnthropicInstrumentor
    from etf_otel.integrations.mcp import MCPInstrumentor

    monkeypatch.setattr(_instrumentor_base, "_reported", set())
    caplog.set_level(logging.WARNING, logger="etf_otel")
    for instrumentor in (OpenAIInstrumentor(), AnthropicInstrumentor(), MCPInstrumentor()):
        instrumentor.instrument(gaurd=True, tracer_provider=captured.tracer_provider)  # type: ignore[call-arg]
        instrumentor.uninstrument()
    assert len(_option_warnings(caplog, "gaurd")) == 1
    assert not _option_warnings(caplog, "tracer_provider")


def test_known_options_are_not_reported(
    captured: Captured, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from etf_otel.integrations import _instrumentor_base

    monkeypatch.setattr(_instrumentor_base, "_reported", set())
    caplog.set_level(logging.WARNING, logger="etf_otel")
    instrument_openai(
        tracer_provider=captured.tracer_provider,
        meter_provider=captured.meter_provider,
        provider_name="p",
        allow=(),
        guard=False,
        capture_content=False,
        max_conversations=3,
        skip_dep_check=True,
    ).uninstrument()
    assert not [record for record in caplog.records if "option" in record.getMessage()]


def _defined(module: Any) -> set[str]:
    """The public names a module defines (not those it imports)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return {name for name in names if not name.startswith("_") and name != "__all__"}


def _isort_style(name: str) -> tuple[int, str]:
    """RUF022's order: constants, then classes, then the rest."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("package", ["openai", "anthropic", "mcp", "langchain"])
def test_each_integration_exports_its_public_names_sorted(package: str) -> None:
    """``__all__`` is sorted (RUF022) and is every public name: those a package imports, those a module defines."""
    module = importlib.import_module(f"etf_otel.integrations.{package}")
    if hasattr(module, "__path__"):
        public = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, ModuleType)}
    else:
        public = _defined(module)
    assert module.__all__ == sorted(module.__all__, key=_isort_style)
    assert set(module.__all__) == public
