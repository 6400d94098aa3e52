"""The public API is explicit: ``etf_otel.__all__`` is curated, sorted, and importing the
package (the pure core) pulls in no OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys

import etf_otel
import etf_otel.instrumentation


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
    assert all(hasattr(etf_otel, name) for name in etf_otel.__all__)


def test_instrumentation_exports_exist() -> None:
    assert all(hasattr(etf_otel.instrumentation, name) for name in etf_otel.instrumentation.__all__)


def test_the_pure_core_imports_no_opentelemetry() -> None:
    code = (
        "import sys, etf_otel, etf_otel.core._identity, etf_otel.core._slots, etf_otel.core._linkage,"
        " etf_otel.protocols._chat_completions;"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert run.stdout.strip() == "[]"
