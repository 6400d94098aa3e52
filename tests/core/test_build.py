"""Which build of the pure layers runs: the Python sources, or the optional mypyc-compiled one.

scripts/test runs the suite twice, the second time with ETF_EXPECT_COMPILED=1 and the compiled
extension modules beside the sources (docs/development.md). This test makes each pass prove it
runs the build it claims to: a compiled pass that silently imported the sources, or a pure pass
that picked up compiled modules left in the tree, fails here.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from importlib.machinery import ExtensionFileLoader

import etf_otel.core
import etf_otel.protocols

NOT_COMPILED = {"etf_otel.core._linkage", "etf_otel.protocols._base"}
"""Left interpreted by pyproject.toml's mypyc hook: see the comment there."""


def _modules() -> list[str]:
    names = ["etf_otel.core", "etf_otel.protocols"]
    for package in (etf_otel.core, etf_otel.protocols):
        names += [f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]
    return sorted(names)


def _compiled(name: str) -> bool:
    return isinstance(importlib.import_module(name).__loader__, ExtensionFileLoader)


def test_the_build_in_use_is_the_one_expected() -> None:
    expected = os.environ.get("ETF_EXPECT_COMPILED") == "1"
    assert etf_otel.core.COMPILED is expected, (
        "compiled modules left in the tree? rm -f *__mypyc*.so etf_otel/core/*.so etf_otel/protocols/*.so"
        if etf_otel.core.COMPILED
        else "ETF_EXPECT_COMPILED=1 but the sources run: the compiled modules are not on the import path"
    )
    compiled = {name for name in _modules() if _compiled(name)}
    assert compiled == (set(_modules()) - NOT_COMPILED if expected else set())
