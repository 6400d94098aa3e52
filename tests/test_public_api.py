"""The public API is explicit: every public module says what it exports, and nothing else leaks.

Derived from the package's own files and names (as httpx's exported-members test does), so a
new module or a new top-level name is checked without editing this file:

* a module is API when it is the ``__init__`` of a package none of whose path parts starts with
  ``_``, or one of :data:`PUBLIC_MODULES`; every other module file is private, its name (or a
  package it sits in) starting with ``_``;
* the public names of an API module (its top-level definitions and, for a package, what it
  imports from ``etf_otel``, submodules aside) are exactly its ``__all__``; names it imports from
  elsewhere (``typing``, ``wrapt``) are its tools, not its API;
* every name in every ``__all__`` resolves.

Importing ``etf_otel`` (the pure core) pulls in no OpenTelemetry.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import etf_otel

PACKAGE_DIR = Path(etf_otel.__file__).resolve().parent
PUBLIC_MODULES = frozenset(
    {
        "attributes",
        "errors",
        "recordings",
        "integrations.langchain",
        "testing.anthropic",
        "testing.bedrock",
        "testing.chat",
        "testing.gemini",
        "testing.ollama",
        "testing.refusals",
        "testing.responses",
    }
)
"""Modules that are API without being a package ``__init__`` (dotted, relative to ``etf_otel``)."""


def _dotted(path: Path, root: Path) -> tuple[str, ...]:
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def module_files(root: Path = PACKAGE_DIR) -> Iterator[tuple[Path, tuple[str, ...]]]:
    for path in sorted(root.rglob("*.py")):
        yield path, _dotted(path, root)


def is_api(path: Path, parts: tuple[str, ...]) -> bool:
    if any(part.startswith("_") for part in parts):
        return False
    return path.name == "__init__.py" or ".".join(parts) in PUBLIC_MODULES


API_MODULES = sorted(".".join(("etf_otel", *parts)) for path, parts in module_files() if is_api(path, parts))


def _bound_names(statements: list[ast.stmt]) -> Iterator[tuple[str, ast.stmt]]:
    """Top-level names a module binds (``if``/``try`` bodies included), with the statement binding each."""
    for statement in statements:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield statement.name, statement
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        yield node.id, statement
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            for alias in statement.names:
                yield (alias.asname or alias.name).split(".")[0], statement
        elif isinstance(statement, (ast.If, ast.Try)):
            handlers = [line for handler in getattr(statement, "handlers", ()) for line in handler.body]
            yield from _bound_names([*statement.body, *statement.orelse, *handlers])


def _imported(statement: ast.stmt) -> str | None:
    """``"etf_otel"`` for an import from this package, ``"elsewhere"`` for any other, ``None`` for a definition."""
    if isinstance(statement, ast.Import):
        return "etf_otel" if all(alias.name.split(".")[0] == "etf_otel" for alias in statement.names) else "elsewhere"
    if isinstance(statement, ast.ImportFrom):
        inside = statement.level > 0 or (statement.module or "").split(".")[0] == "etf_otel"
        return "etf_otel" if inside else "elsewhere"
    return None


def source_file(module: ModuleType) -> Path:
    """The module's ``.py`` file, also in the compiled build, whose ``__file__`` is the extension module beside it."""
    path = Path(module.__file__ or "")
    return path.with_name(path.name.split(".")[0] + ".py")


def public_names(module: ModuleType) -> set[str]:
    """The names ``module`` exposes: its own definitions and re-exports, no private submodule, no borrowed tool.

    A package ``__init__`` holds nothing but its API, so whatever it imports from ``etf_otel`` is
    a re-export; a plain module's imports are its tools unless its ``__all__`` lists them.
    """
    path = source_file(module)
    source = path.read_text(encoding="utf-8")
    package = path.name == "__init__.py"
    listed = set(getattr(module, "__all__", ()))
    names = set()
    for name, statement in _bound_names(ast.parse(source).body):
        origin = _imported(statement)
        if name.startswith("_") or origin == "elsewhere" or (origin and not package and name not in listed):
            continue
        value = getattr(module, name, None)
        if not isinstance(value, ModuleType) or value.__name__ in API_MODULES:  # a public module it re-exports
            names.add(name)
    return names


def test_every_module_that_is_not_api_is_private() -> None:
    public = [".".join(parts) for path, parts in module_files() if not is_api(path, parts)]
    assert [name for name in public if not any(part.startswith("_") for part in name.split("."))] == []
    assert "instrumentation" in {parts[0] for path, parts in module_files() if is_api(path, parts) and parts}


@pytest.mark.parametrize("name", API_MODULES)
def test_public_names_are_exactly_all(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list), f"{name} has no __all__ list"
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    assert public_names(module) == {entry for entry in exported if not entry.startswith("__")}


@pytest.mark.parametrize("name", API_MODULES)
def test_every_exported_name_resolves(name: str) -> None:
    module = importlib.import_module(name)
    assert [entry for entry in module.__all__ if not hasattr(module, entry)] == []


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A module left public, an unlisted helper and a listed name that is missing are all caught."""
    package = tmp_path / "pkg"
    (package / "_private").mkdir(parents=True)
    for path, text in {
        "__init__.py": "from typing import Final\n\n__all__ = ['listed']\nlisted: Final = 1\n\n\ndef helper(): ...\n",
        "leaky.py": "",
        "_fine.py": "",
        "_private/__init__.py": "",
        "_private/inner.py": "",
    }.items():
        (package / path).write_text(text, encoding="utf-8")
    private = [".".join(parts) for path, parts in module_files(package) if not is_api(path, parts)]
    assert [name for name in private if not any(part.startswith("_") for part in name.split("."))] == ["leaky"]
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("pkg")
        assert public_names(module) == {"listed", "helper"}  # helper is not in __all__: the test fails on it
    finally:
        sys.path.remove(str(tmp_path))
        for loaded in [name for name in sys.modules if name == "pkg" or name.startswith("pkg.")]:
            del sys.modules[loaded]


def test_package_exports_are_pinned_and_sorted() -> None:
    assert etf_otel.__all__ == [
        "ABSENT",
        "DONE",
        "AssemblyResult",
        "CompatibilityRule",
        "Conversation",
        "ErrorCategory",
        "EtfOtelError",
        "Finding",
        "FragmentDiagnostic",
        "GuardRefusedError",
        "IdKind",
        "IdentityRules",
        "ReferenceAssembler",
        "Rejection",
        "RequestPairingError",
        "ResponseSlots",
        "StreamState",
        "ToolCall",
        "Transition",
        "UnreadableInputError",
        "Verdict",
        "__version__",
        "assemble",
    ]
    assert etf_otel.__all__ == sorted(etf_otel.__all__, key=lambda name: (not name.isupper(), name))


def test_the_pure_core_imports_no_opentelemetry() -> None:
    code = (
        "import sys, etf_otel, etf_otel.core, etf_otel.core._identity, etf_otel.core._slots, etf_otel.core._linkage,"
        " etf_otel.protocols._chat_completions;"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert run.stdout.strip() == "[]"
