"""Architecture rules, read from the source with ``ast``: nothing in ``etf_otel`` is imported.

Layers, lowest first: core < protocols < errors < instrumentation < integrations < audit < cli.
Every check is a function of the directory that holds the package, so ``test_checks_can_fail``
runs the very same code on a small broken package and proves the checks are not vacuous.

How imports are modelled:

* Every ``import`` counts wherever it sits (module level, function, ``try``): a lazy import is
  still a dependency, it only moves the failure from import time to call time.
* ``from pkg import name`` is an edge to the submodule ``pkg.name`` when that file exists,
  otherwise to ``pkg`` (its ``__init__``). Importing ``pkg.sub`` gets no implied edge to ``pkg``:
  Python registers ``pkg`` in ``sys.modules`` before running its ``__init__``, so a module that
  ``pkg/__init__`` is loading may itself do ``from pkg import sub``. That implied edge would turn
  every re-exporting ``__init__`` into a false cycle. Taking a *name* defined in ``pkg/__init__``
  from a module that ``__init__`` loads is an edge to ``pkg``, a real cycle, and is reported.
* Imports under ``if TYPE_CHECKING:`` count for layering (a type dependency on a higher layer is
  still a design dependency) but not for cycles: they never run, and moving an import under
  ``TYPE_CHECKING`` is the standard, legitimate way to break a runtime cycle.
* ``etf_otel/__main__.py`` (``python -m etf_otel``) is part of the cli layer. Dynamic imports
  (``importlib.import_module``) are not seen; the package has none.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = "etf_otel"
MODULE_LIMIT, FUNCTION_LIMIT = 400, 60  # lines; a module or function must stay below, unless "# long: <reason>"
LONG = re.compile(r"^\s*# long: \S")

# Module path relative to the package -> layer. The longest matching prefix wins; "" is the root only.
LAYER_OF = {
    "": "api",
    "_version": "version",
    "__main__": "cli",
    "core": "core",
    "protocols": "protocols",
    "errors": "errors",
    "instrumentation": "instrumentation",
    "attributes": "attributes",
    "integrations": "integrations",
    "audit": "audit",
    "cli": "cli",
    "recordings": "recordings",
    "testing": "testing",
}
_BASE = {"version", "core", "protocols", "errors", "attributes"}
MAY_IMPORT: dict[str, set[str]] = {
    "version": set(),
    "core": {"core"},
    "protocols": {"core", "protocols"},
    "errors": {"core"},  # the exception tree sits on the vocabulary, nothing else
    "attributes": {"core"},  # attribute names only: the audit reads them without the wrappers
    "instrumentation": _BASE | {"instrumentation"},
    "integrations": _BASE | {"instrumentation", "integrations"},
    "recordings": _BASE,  # reads recorded streams: the rules and adapters, no telemetry
    "testing": _BASE | {"recordings", "testing"},  # scripted server and builders: no wrappers, no cli
    "audit": _BASE | {"audit"},  # reads exported traces: attribute names, yes; wrappers and cli, no
    "api": set(LAYER_OF.values()) - {"cli", "testing"},  # `import etf_otel` loads no command line, no test tool
    "cli": set(LAYER_OF.values()),
}
PURE = {"core", "protocols"}
IMPURE_STDLIB = set("threading _thread multiprocessing concurrent asyncio socket ssl select selectors".split())
IMPURE_STDLIB |= set("io os sys pathlib shutil tempfile subprocess urllib http logging".split())
NO_SDK = {"api", "core", "protocols", "errors", "attributes", "recordings", "instrumentation", "integrations"}
LIBRARY = {"api", "core", "protocols", "errors", "attributes", "recordings", "instrumentation", "integrations"}
LIBRARY |= {"audit", "testing"}
BASE_DEPENDENCIES = {"opentelemetry", "wrapt", "typing_extensions"}
SDK_PACKAGES = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto")  # the cli extra's
LAZY_DEPENDENCIES = {
    "integrations": {"openai", "anthropic", "mcp", "langchain_core", "langchain_openai", "pydantic"}
    | {"agents", "pydantic_ai", "langgraph", "litellm", "google", "strands"},  # the frameworks and google-genai
    "recordings": {"sseclient"},  # SSE text, with the cli extra; JSON lines need nothing
    "audit": {"chdb", "clickhouse_connect"},  # the SQL engines, each its own extra
}
EAGER_DEPENDENCIES = {"etf_otel.testing._pytest_plugin": {"pytest"}}  # loaded by pytest alone
OUTPUT_ATTRIBUTES = {("sys", "exit"), ("sys", "stdout"), ("sys", "stderr"), ("os", "_exit")}
OUTPUT_IMPORTS = ("sys.exit", "sys.stdout", "sys.stderr", "rich.console")
MAY_PRINT = {f"{PKG}.testing.__main__"}  # a command outside the cli: ``python -m etf_otel.testing`` (the server)


@dataclass(frozen=True)
class Module:
    name: str
    is_package: bool
    tree: ast.Module
    lines: list[str]


@dataclass(frozen=True)
class Import:
    source: str
    target: str  # absolute; the submodule when `from pkg import sub` names one
    line: int
    type_only: bool  # under `if TYPE_CHECKING:`
    lazy: bool = False  # inside a function: runs only when called


def parse(root: Path) -> dict[str, Module]:
    """Every module of the package under ``root`` by dotted name (``pkg/__init__.py`` is ``pkg``)."""
    found = {}
    for path in sorted((root / PKG).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        text = path.read_text(encoding="utf-8")
        found[name] = Module(name, is_package, ast.parse(text, str(path)), text.splitlines())
    return found


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _name(node.test) == "TYPE_CHECKING":
            ids.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return ids


def _function_nodes(tree: ast.Module) -> set[int]:
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for statement in node.body
        for inner in ast.walk(statement)
    }


def imports(root: Path) -> list[Import]:
    """Every import statement of every module, relative imports resolved, one entry per target."""
    mods = parse(root)
    found = []
    for mod in mods.values():
        typed = _type_checking_nodes(mod.tree)
        deferred = _function_nodes(mod.tree)
        package = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                full = [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
                targets = [t if t in mods or base not in mods else base for t in full] or [base]
            else:
                continue
            found += [
                Import(mod.name, t, node.lineno, id(node) in typed, id(node) in deferred)
                for t in dict.fromkeys(targets)
            ]
    return found


def import_graph(root: Path, *, with_type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports (see the module docstring for what counts)."""
    graph: dict[str, set[str]] = {name: set() for name in parse(root)}
    for imp in imports(root):
        if imp.target in graph and (with_type_only or not imp.type_only):
            graph[imp.source].add(imp.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with a cycle in them (Tarjan), each as a sorted module list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layer(module: str) -> str | None:
    """The layer of a package module, ``None`` for modules outside the package or in no layer."""
    if module != PKG and not module.startswith(PKG + "."):
        return None
    rel = module[len(PKG) + 1 :]
    matches = [p for p in LAYER_OF if rel == p or (p and rel.startswith(p + "."))]
    return LAYER_OF[max(matches, key=len)] if matches else None


def layering_violations(root: Path) -> list[str]:
    """Layering: a module imports only the layers below its own (TYPE_CHECKING imports included), so
    the core works without telemetry, the audit without the wrappers, all of it without the cli."""
    out = [f"{name}: in no layer, add it to LAYER_OF" for name in parse(root) if layer(name) is None]
    for imp in imports(root):
        source, target = layer(imp.source), layer(imp.target)
        if source is not None and target is not None and target not in MAY_IMPORT[source]:
            out.append(f"{imp.source}:{imp.line} ({source}) imports {imp.target} ({target})")
    return out


def purity_violations(root: Path) -> list[str]:
    """core/protocols import only the standard library minus threads and I/O, and call no open():
    the rules stay deterministic and cheap to test, usable under any host."""
    out = []
    for imp in imports(root):
        top = imp.target.partition(".")[0]
        if layer(imp.source) in PURE and top != PKG and (top not in sys.stdlib_module_names or top in IMPURE_STDLIB):
            out.append(f"{imp.source}:{imp.line} imports {imp.target}")
    for mod in parse(root).values():
        for node in ast.walk(mod.tree) if layer(mod.name) in PURE else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"open", "input"}:
                out.append(f"{mod.name}:{node.lineno} calls {node.func.id}()")
    return out


def sdk_violations(root: Path) -> list[str]:
    """Library layers import the OpenTelemetry API, never ``opentelemetry.sdk``: the application owns
    the SDK, and an instrumentation library that configures one fights its host."""
    return [
        f"{imp.source}:{imp.line} imports {imp.target}"
        for imp in imports(root)
        if layer(imp.source) in NO_SDK and (imp.target + ".").startswith("opentelemetry.sdk.")
    ]


def dependency_violations(root: Path) -> list[str]:
    """Library layers import the standard library, the OpenTelemetry API, wrapt and typing_extensions
    (the base install) and, inside a function only, the package a user installs to use that part (an
    SDK for its integration, an extra for the SSE parser or a SQL engine): importing etf-otel never
    needs what an application did not ask for."""
    out = []
    for imp in imports(root):
        source = layer(imp.source)
        top = imp.target.partition(".")[0]
        if source not in LIBRARY or top == PKG or top in sys.stdlib_module_names:
            continue
        sdk = imp.target.startswith(SDK_PACKAGES)
        if (top in BASE_DEPENDENCIES and not sdk) or top in EAGER_DEPENDENCIES.get(imp.source, ()):
            continue
        lazily = top in LAZY_DEPENDENCIES.get(source, ()) or (sdk and source == "testing")
        if lazily and (imp.lazy or imp.type_only):
            continue
        out.append(f"{imp.source}:{imp.line} ({source}) imports {imp.target}")
    return out


def output_violations(root: Path) -> list[str]:
    """Only the cli prints or exits (print(), exit(), sys.exit, sys.stdout/stderr, rich consoles):
    a library that writes to the terminal or ends the process cannot be embedded."""
    found: dict[tuple[str, int], set[str]] = defaultdict(set)
    for mod in parse(root).values():
        for node in ast.walk(mod.tree) if layer(mod.name) != "cli" and mod.name not in MAY_PRINT else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"print", "exit"}:
                found[mod.name, node.lineno].add(f"{node.func.id}()")
            if isinstance(node, ast.Attribute) and (_name(node.value), node.attr) in OUTPUT_ATTRIBUTES:
                found[mod.name, node.lineno].add(f"{_name(node.value)}.{node.attr}")
    for imp in imports(root):
        if layer(imp.source) != "cli" and imp.source not in MAY_PRINT and imp.target.startswith(OUTPUT_IMPORTS):
            found[imp.source, imp.line].add(f"import {imp.target}")
    return [f"{name}:{line} {', '.join(sorted(what))}" for (name, line), what in sorted(found.items())]


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if not isinstance(child, ast.ClassDef):
                yield child, prefix + child.name
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def size_violations(root: Path) -> list[str]:
    """Modules under 400 lines and functions under 60 stay reviewable; a justified exception says why
    on a `# long: <reason>` line right above the def (or in the first 5 lines of the module)."""
    out = []
    for mod in parse(root).values():
        if len(mod.lines) >= MODULE_LIMIT and not any(LONG.match(line) for line in mod.lines[:5]):
            out.append(f"{mod.name}: module, {len(mod.lines)} lines")
        for node, qualname in _functions(mod.tree):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            above = [mod.lines[i - 2] for i in {node.lineno, first} if i >= 2]  # right above def or decorators
            if length >= FUNCTION_LIMIT and not any(LONG.match(line) for line in above):
                out.append(f"{mod.name}:{node.lineno} {qualname}(), {length} lines")
    return out


def _cycle_report(root: Path, found: list[list[str]]) -> str:
    """Each cycle as its modules and the import lines that close it."""
    text = []
    for component in found:
        edges = [
            f"    {i.source}:{i.line} -> {i.target}"
            for i in imports(root)
            if i.source in component and i.target in component and not i.type_only
        ]
        text.append(f"  {component}\n" + "\n".join(edges))
    return "\n".join(text)


def test_no_import_cycles() -> None:
    """A cycle makes import order matter and hides a layering mistake; a lazy import only defers it."""
    graph = import_graph(ROOT)
    assert "etf_otel.core._slots" in graph["etf_otel.core._identity"] | graph["etf_otel.protocols._chat_completions"]
    found = cycles(graph)
    assert not found, "import cycles:\n" + _cycle_report(ROOT, found)


@pytest.mark.parametrize(
    "check",
    [layering_violations, purity_violations, sdk_violations, dependency_violations, output_violations, size_violations],
    ids=lambda check: check.__name__.removesuffix("_violations"),
)
def test_rule(check: Callable[[Path], list[str]]) -> None:
    """Each rule holds on the package; a failure lists every offender under the rule's reason."""
    violations = check(ROOT)
    assert not violations, f"{check.__doc__}\n  " + "\n  ".join(violations)


FAKE = {
    "__init__.py": "",
    "core/__init__.py": "",
    "core/a.py": "import threading\nfrom etf_otel.core import b\nfrom etf_otel.cli.main import run\n",
    "core/b.py": "def later():\n    from . import a\n\n    print(a)\n",
    "core/big.py": "def big():\n" + "    x = 1\n" * 60 + "\n\n# long: table\ndef fine():\n" + "    x = 1\n" * 60,
    "cli/__init__.py": "",
    "cli/main.py": "import sys\n\n\ndef run():\n    print(sys.argv)\n",
    "testing/__init__.py": "",
    "testing/__main__.py": "import sys\n\nprint(sys.argv)\n",  # the one command outside the cli
    "testing/server.py": "print('serving')\n",  # ...and only that one
    "instrumentation/__init__.py": "from etf_otel.instrumentation.wrappers import wrap\n",
    "instrumentation/wrappers.py": "from etf_otel.instrumentation import telemetry\n\nwrap = telemetry\n",
    "attributes.py": "NAME = 'x'\n",
    "integrations/__init__.py": "",
    "integrations/sdk.py": "import openai\nimport wrapt\n\n\ndef later():\n    import anthropic\n",  # eager SDK import
    "instrumentation/telemetry.py": (
        "from typing import TYPE_CHECKING\n\nfrom etf_otel import attributes\n\n"
        "if TYPE_CHECKING:\n    from opentelemetry.sdk.trace import TracerProvider\n\n"
        "    from etf_otel.instrumentation.wrappers import wrap\n"
    ),
}


def test_checks_can_fail(tmp_path: Path) -> None:
    """The same functions, on a package with one of each mistake, report each (and no false cycle)."""
    for name, text in FAKE.items():
        (tmp_path / PKG / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / PKG / name).write_text(text, encoding="utf-8")
    # b -> a only inside a function; the re-exporting instrumentation/__init__ is no cycle
    assert cycles(import_graph(tmp_path)) == [["etf_otel.core.a", "etf_otel.core.b"]]
    typed = cycles(import_graph(tmp_path, with_type_only=True))  # TYPE_CHECKING edges are left out by default
    assert ["etf_otel.instrumentation.telemetry", "etf_otel.instrumentation.wrappers"] in typed
    assert layering_violations(tmp_path) == ["etf_otel.core.a:3 (core) imports etf_otel.cli.main (cli)"]
    assert purity_violations(tmp_path) == ["etf_otel.core.a:1 imports threading"]
    sdk = "etf_otel.instrumentation.telemetry:6 imports opentelemetry.sdk.trace.TracerProvider"
    assert sdk_violations(tmp_path) == [sdk]  # TYPE_CHECKING imports count for layering
    assert dependency_violations(tmp_path) == [
        "etf_otel.instrumentation.telemetry:6 (instrumentation) imports opentelemetry.sdk.trace.TracerProvider",
        "etf_otel.integrations.sdk:1 (integrations) imports openai",
    ]
    assert output_violations(tmp_path) == ["etf_otel.core.b:4 print()", "etf_otel.testing.server:1 print()"]
    assert size_violations(tmp_path) == ["etf_otel.core.big:1 big(), 61 lines"]
