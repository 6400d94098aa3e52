"""The wrappers keep the caller's type: statically (mypy sees no ``Any``) and at run time (``isinstance``).

The static half runs mypy on a small module of ``assert_type`` calls: a return type that
became ``Any`` (or anything but the argument's type) fails it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from etf_otel import ReferenceAssembler
from etf_otel.instrumentation import AssemblerAdapter, ObservedAssembler
from etf_otel.protocols import CHAT_COMPLETIONS, WireProtocol
from tests.conftest import Captured

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """
from collections.abc import Callable, Iterator

from typing_extensions import assert_type

from etf_otel import ReferenceAssembler, ToolCall
from etf_otel.instrumentation import (
    AssemblerAdapter,
    Instrumentation,
    instrument_assembler,
    instrument_host,
    instrument_stream,
)


class Host:
    def execute(self, call: ToolCall) -> str:
        return call.name or ""


class Accumulator:
    def add(self, chunk: object) -> None: ...

    def result(self) -> list[tuple[str, str, str]]:
        return []


def check(etf: Instrumentation, chunks: Iterator[dict[str, object]], tool: Callable[[object], str]) -> None:
    adapter = AssemblerAdapter(feed="add", finish="result", done=None, calls=lambda result: result)
    assert_type(etf.stream(chunks), Iterator[dict[str, object]])
    assert_type(etf.assembler(ReferenceAssembler()), ReferenceAssembler)
    assert_type(etf.assembler(Accumulator(), adapter=adapter), Accumulator)
    assert_type(etf.host(Host()), Host)
    assert_type(etf.host(tool), Callable[[object], str])
    assert_type(etf.host(Accumulator(), method="add"), Accumulator)
    assert_type(instrument_stream(chunks), Iterator[dict[str, object]])
    assert_type(instrument_assembler(ReferenceAssembler()), ReferenceAssembler)
    assert_type(instrument_assembler(Accumulator(), adapter=adapter), Accumulator)
    assert_type(instrument_host(Host()), Host)
    assert_type(instrument_host(tool), Callable[[object], str])
    assert_type(instrument_host(Accumulator(), method="add"), Accumulator)
"""


def test_mypy_sees_the_callers_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    snippet = tmp_path / "uses_the_wrappers.py"
    snippet.write_text(textwrap.dedent(SNIPPET), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", "", str(snippet)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr


class Accumulator:
    def __init__(self) -> None:
        self.chunks: list[object] = []

    def add(self, chunk: object) -> None:
        self.chunks.append(chunk)

    def result(self) -> list[tuple[str, str, str]]:
        return []


ADAPTER = AssemblerAdapter(feed="add", finish="result", done=None, calls=lambda result: result)


def test_an_observed_assembler_is_its_assemblers_type(captured: Captured) -> None:
    etf = captured.instrumentation()
    reference, accumulator = etf.assembler(ReferenceAssembler()), etf.assembler(Accumulator(), adapter=ADAPTER)
    assert isinstance(reference, ReferenceAssembler) and isinstance(reference, ObservedAssembler)
    assert isinstance(accumulator, Accumulator) and not isinstance(accumulator, ReferenceAssembler)
    assert hasattr(reference, "feed_done") and not hasattr(accumulator, "feed_done")  # as the wrapped ones
    accumulator.add({"choices": []})
    assert accumulator.chunks == [{"choices": []}]  # every other attribute is the wrapped object's


def test_the_proxy_class_is_made_once_per_adapter_shape(captured: Captured) -> None:
    etf = captured.instrumentation()
    first, second = etf.assembler(Accumulator(), adapter=ADAPTER), etf.assembler(Accumulator(), adapter=ADAPTER)
    assert type(first) is type(second)
    other: object = etf.assembler(ReferenceAssembler())
    assert type(first) is not type(other)
    assert first.add is not first.add  # a bound method per read, as on any object: no closure is built
    assert getattr(first.add, "__func__", None) is getattr(second.add, "__func__", 1)


def _python_calls(call: object) -> int:
    """How many Python frames ``call()`` runs (``sys.setprofile`` sees each), itself excluded."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        count += event == "call"

    sys.setprofile(profile)
    try:
        call()  # type: ignore[operator]
    finally:
        sys.setprofile(None)
    return count - 1


def test_feeding_an_observed_assembler_adds_one_frame_to_the_two_assemblers(captured: Captured) -> None:
    opening = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": {}}]}}]}
    fragment = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}
    bare, observed = ReferenceAssembler(), captured.instrumentation().assembler(ReferenceAssembler())
    bare.feed(opening)
    observed.feed(opening)
    alone = _python_calls(lambda: bare.feed(fragment))
    # the wrapped assembler's frames, the rules' (the same reference assembler) and the proxy's feed
    assert _python_calls(lambda: observed.feed(fragment)) == 2 * alone + 1


class Keyworded:
    """An assembler whose feed takes more than the chunk, and raises when told to."""

    def __init__(self) -> None:
        self.fed: list[tuple[object, tuple[object, ...], dict[str, object]]] = []

    def add(self, chunk: object, *args: object, **kwargs: object) -> int:
        if kwargs.get("fail"):
            raise ValueError("the assembler's own error")
        self.fed.append((chunk, args, kwargs))
        return len(self.fed)

    def result(self) -> list[tuple[str, str, str]]:
        return []


def _counting_chat(fed: list[object]) -> WireProtocol:
    """Chat Completions whose rules record every chunk they are fed.

    A wrapper, not a subclass: in the compiled build an interpreted class cannot inherit from
    the compiled ``ReferenceAssembler``."""

    class Counted:
        def __init__(self, **options: Any) -> None:
            self._rules = CHAT_COMPLETIONS.assembler(**options)

        def feed(self, chunk: object) -> None:
            fed.append(chunk)
            self._rules.feed(chunk)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._rules, name)

    return dataclasses.replace(CHAT_COMPLETIONS, assembler=Counted)


def test_feed_passes_every_argument_and_returns_what_the_assembler_returns(captured: Captured) -> None:
    fed: list[object] = []
    observed: Any = captured.instrumentation().assembler(Keyworded(), adapter=ADAPTER, protocol=_counting_chat(fed))
    assert observed.add({"choices": []}) == 1
    assert observed.add({"choices": [{}]}, 2, mode="x") == 2
    assert observed.fed == [({"choices": []}, (), {}), ({"choices": [{}]}, (2,), {"mode": "x"})]
    assert fed == [{"choices": []}, {"choices": [{}]}]  # the rules see the chunk alone


def test_once_the_assembler_raised_its_chunks_reach_it_but_not_the_rules(captured: Captured) -> None:
    fed: list[object] = []
    observed: Any = captured.instrumentation().assembler(Keyworded(), adapter=ADAPTER, protocol=_counting_chat(fed))
    observed.add({"choices": []})
    with pytest.raises(ValueError, match="the assembler's own error"):
        observed.add({"choices": [{}]}, fail=True)
    assert observed.add({"choices": [{}, {}]}) == 2  # the application may go on feeding it
    assert fed == [{"choices": []}]
    assert len(captured.spans("assemble_response")) == 1  # the response ended when the assembler raised


class Host:
    def __init__(self) -> None:
        self.executed: list[object] = []

    def execute(self, call: object) -> str:
        self.executed.append(call)
        return "done"


async def run_async(call: object) -> str:
    return "done"


def test_an_observed_host_is_its_hosts_type(captured: Captured) -> None:
    etf = captured.instrumentation()
    host: Any = etf.host(Host())  # calling the proxy, or ``execute`` on a function, is beyond the host's type
    assert isinstance(etf.host(Host()), Host)
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert host.execute(call) == "done" and host(call) == "done" and host.executed == [call, call]
    assert type(etf.host(Host())) is type(host)  # one proxy class per method name and kind
    asynchronous: Any = etf.host(run_async)
    assert inspect.iscoroutinefunction(asynchronous.execute) and type(asynchronous) is not type(host)
    assert asyncio.run(asynchronous(call)) == "done"
    assert len(captured.spans("execute_tool")) == 3
