"""The openai and anthropic instrumentors never import their SDK (docs/protocols.md, "Call shapes").

Each scenario runs in a fresh interpreter: ``sys.modules`` of the test process holds both SDKs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

LOAD_ENTRY_POINTS = """
import sys
from importlib.metadata import entry_points
instrumentors = [
    entry_point.load()()
    for entry_point in entry_points(group="opentelemetry_instrumentor")
    if entry_point.name.startswith("etf_otel")
]
assert len(instrumentors) >= 3, instrumentors
for instrumentor in instrumentors:
    instrumentor.instrument()
"""


def run(script: str) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_etf_otel_entry_points_import_no_sdk_the_process_does_not_use() -> None:
    """What ``opentelemetry-instrument`` does with etf-otel's entry points, in a process that uses neither SDK."""
    script = (
        LOAD_ENTRY_POINTS
        + """
print(sorted(name for name in ("openai", "anthropic", "mcp", "httpx2", "pydantic", "litellm") if name in sys.modules))
"""
    )
    assert run(script) == "[]"


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_the_sdk_is_hooked_when_imported_and_an_uninstrumented_hook_stands_aside(sdk: str) -> None:
    script = (
        LOAD_ENTRY_POINTS
        + f"""
import wrapt
import {sdk}
from {sdk}._base_client import SyncAPIClient, AsyncAPIClient
from {sdk}._response import BaseAPIResponse
hooked = [isinstance(vars(cls)[name], wrapt.FunctionWrapper) for cls, name in
          ((SyncAPIClient, "request"), (AsyncAPIClient, "request"), (BaseAPIResponse, "_parse"))]
for instrumentor in instrumentors:
    instrumentor.uninstrument()
unhooked = [isinstance(vars(cls)[name], wrapt.FunctionWrapper) for cls, name in
            ((SyncAPIClient, "request"), (AsyncAPIClient, "request"), (BaseAPIResponse, "_parse"))]
print(hooked, unhooked)
"""
    )
    assert run(script) == "[True, True, True] [False, False, False]"


def test_a_hook_registered_then_uninstrumented_before_the_import_wraps_nothing() -> None:
    script = """
import wrapt
from etf_otel.integrations.openai import instrument_openai
instrument_openai().uninstrument()
import openai
from openai._base_client import SyncAPIClient
print(isinstance(vars(SyncAPIClient)["request"], wrapt.FunctionWrapper))
"""
    assert run(script) == "False"


def test_google_genai_is_hooked_only_when_the_application_imports_it() -> None:
    """The instrumentor imports nothing of ``google``; importing ``google.genai`` puts the wrappers in place,
    ``uninstrument()`` takes them away, and a hook left by an uninstrumented instrumentor does nothing."""
    script = """
import sys
import wrapt
from etf_otel.integrations.google_genai import GoogleGenAIInstrumentor
instrumentor = GoogleGenAIInstrumentor()
instrumentor.instrument()
print(sorted(name for name in sys.modules if name == "google" or name.startswith("google.")))
from google.genai import _extra_utils, models
points = [(models.Models, "_generate_content_stream_with_continuation"),
          (models.AsyncModels, "_generate_content_with_continuation"),
          (_extra_utils, "invoke_function_from_dict_args")]
print([isinstance(vars(owner)[name], wrapt.FunctionWrapper) for owner, name in points])
instrumentor.uninstrument()
print([isinstance(vars(owner)[name], wrapt.FunctionWrapper) for owner, name in points])
"""
    assert run(script).splitlines() == ["[]", "[True, True, True]", "[False, False, False]"]


def test_pydantic_ai_is_hooked_when_imported_and_unhooked_by_uninstrument() -> None:
    script = """
import sys
import wrapt
from etf_otel.integrations.pydantic_ai import PydanticAIInstrumentor
instrumentor = PydanticAIInstrumentor()
instrumentor.instrument()
imported = sorted(name for name in ("pydantic_ai", "pydantic", "openai", "anthropic") if name in sys.modules)
from pydantic_ai.agent import Agent
from pydantic_ai.tool_manager import ToolManager
points = ((Agent, "iter"), (ToolManager, "_raw_execute"), (ToolManager, "execute_tool_call"))
hooked = [isinstance(vars(cls)[name], wrapt.FunctionWrapper) for cls, name in points]
instrumentor.uninstrument()
unhooked = [isinstance(vars(cls)[name], wrapt.FunctionWrapper) for cls, name in points]
print(imported, hooked, unhooked)
"""
    assert run(script) == "[] [True, True, True] [False, False, False]"
