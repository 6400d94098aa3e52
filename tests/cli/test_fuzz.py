"""Hostile input: every wrapper and both CLIs over arbitrary, malformed and huge input.

``tests/core/test_properties.py`` already checks that the reference assembler alone never raises on
JSON-shaped chunks. This module extends that to everything around it:

* every wrapper (sync and async stream, assembler, host in observe and guard modes) stays
  transparent on hostile chunks (wrong types in every field, bytes, broken SSE text, canaries),
  with the library in strict mode so that a swallowed telemetry error fails the test;
* nothing leaks: canaries planted in ids, names and arguments; ids that were never preserved,
  names that never became a call's name, and (content capture off) every argument never appear
  in spans, metrics, DEBUG logs, nor in ``replay`` (without ``--show-arguments``), its
  ``--export`` file and ``audit`` of that export;
* trust does not widen: in guard mode no call that is not exactly a reference proposal runs,
  across the corpus and against a naive third-party assembler's output; in observe mode the
  host's own refusals are recorded and never changed;
* ``replay`` and ``audit`` on arbitrary bytes, broken SSE framing, non-UTF-8 and hostile OTLP
  JSON exit 0, 1 or 2, and 2 always with one line on stderr, never a traceback;
* huge strings (10 MB arguments, a 64 MB stream under ``tracemalloc``) and 10,000-deep nesting.

Long mode: ``ETF_FUZZ_LONG=1 .venv/bin/python -m pytest tests/cli/test_fuzz.py -p no:cacheprovider``
multiplies every ``max_examples`` by 50 (``ETF_FUZZ_SCALE=N`` to choose the factor). The number of
cases run is printed at the end of the module.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import json
import logging
import os
import random
import secrets
import tempfile
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from etf_otel import attributes as A
from etf_otel.cli import main as cli_main
from etf_otel.core._slots import DEFAULT_MAX_ARGUMENT_CHARS, AssemblyResult
from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.instrumentation import AssemblerAdapter, GuardRefusedError, Instrumentation
from etf_otel.instrumentation._safety import set_strict
from etf_otel.protocols._chat_completions import CHAT_COMPLETIONS, DONE, ReferenceAssembler, assemble
from etf_otel.recordings import complete_body, later_responses
from etf_otel.testing.chat import MISSING

LONG = os.environ.get("ETF_FUZZ_LONG") == "1"
SCALE = int(os.environ.get("ETF_FUZZ_SCALE", "50")) if LONG else 1
CASES: Counter[str] = Counter()
"""Fuzz cases run, by test: printed at the end of the module."""


def budget(examples: int) -> Any:
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )


@pytest.fixture(scope="module", autouse=True)
def report_cases(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    line = f"[fuzz] {sum(CASES.values())} cases run" + (f" (long mode x{SCALE})" if LONG else "") + f": {dict(CASES)}"
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        print("\n" + line, flush=True)


@pytest.fixture(autouse=True)
def strict() -> Iterator[None]:
    """A telemetry error on hostile input is a bug even though production swallows it."""
    previous = set_strict(True)
    try:
        yield
    finally:
        set_strict(previous)


@pytest.fixture(autouse=True)
def no_content_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(A.ENV_CAPTURE_CONTENT, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)


# --- canaries and the hostile corpus ------------------------------------------------------------

RUN = secrets.token_hex(4)
ID_CANARIES = tuple(f"call-CANID{i}x{RUN}" for i in range(4))
NAME_CANARIES = tuple(f"fn_CANNAME{i}x{RUN}" for i in range(3))
ARG_CANARIES = tuple(f"CANARG{i}x{RUN}" for i in range(3))
ALL_CANARIES = ID_CANARIES + NAME_CANARIES + ARG_CANARIES

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6) | st.sampled_from(ALL_CANARIES),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)
wrong_types = json_values | st.binary(max_size=6)

ids = st.sampled_from((MISSING, None, "", *ID_CANARIES, *ID_CANARIES)) | wrong_types
names = st.sampled_from((MISSING, None, "", *NAME_CANARIES, *NAME_CANARIES)) | wrong_types
argument_pieces = st.sampled_from(
    (MISSING, None, "", "{", "}", '{"q":"', '"}', "{}", *ARG_CANARIES, *(f'{{"q":"{c}"}}' for c in ARG_CANARIES))
)
arguments = argument_pieces | argument_pieces | wrong_types
indices = st.sampled_from((MISSING, 0, 0, 1, 1, 2, None, -1, "0", 1.5, True)) | wrong_types


def _fields(**parts: Any) -> dict[str, Any]:
    return {key: value for key, value in parts.items() if value is not MISSING}


functions = st.one_of(
    st.builds(lambda n, a: _fields(name=n, arguments=a), names, arguments),
    st.just(MISSING),
    wrong_types,
)
fragments = st.one_of(
    st.builds(lambda i, d, f: _fields(index=i, id=d, function=f, type="function"), indices, ids, functions),
    wrong_types,
)
finish_reasons = st.sampled_from((None, None, None, "tool_calls", "stop", "")) | wrong_types
choices = st.one_of(
    st.builds(
        lambda i, calls, f: _fields(
            index=i, delta={"tool_calls": calls} if calls is not MISSING else {}, finish_reason=f
        ),
        st.sampled_from((0, 0, 0, 1, MISSING, None, -1, "x")),
        st.lists(fragments, max_size=3) | st.just(MISSING) | wrong_types,
        finish_reasons,
    ),
    wrong_types,
)
broken_text = st.sampled_from(
    (
        "data: {",
        'data: {"choices": [',
        "data: [DONE]",
        ": keep-alive",
        "event: error",
        "\x00\x01",
        "[DONE",
        "DONE",
        '"[DONE]"',
    )
)
hostile_chunks = st.one_of(
    st.builds(lambda cs: {"object": "chat.completion.chunk", "choices": cs}, st.lists(choices, min_size=1, max_size=2)),
    st.builds(lambda cs: {"object": "chat.completion.chunk", "choices": cs}, st.lists(choices, min_size=1, max_size=2)),
    st.builds(lambda cs: {"choices": cs}, wrong_types),
    st.just(DONE),
    st.just(b"[DONE]"),
    broken_text,
    st.binary(max_size=12),
    wrong_types,
)


@st.composite
def plausible_streams(draw: st.DrawFn) -> list[Any]:
    """Well-formed responses (often dispatchable) with canaries, then maybe one hostile change."""
    slots = draw(st.integers(1, 3))
    pending: list[list[dict[str, Any]]] = []
    for slot in range(slots):
        call_id = draw(st.sampled_from(ID_CANARIES))
        text = '{"q":"' + draw(st.sampled_from(ARG_CANARIES)) + '"}'
        cut = draw(st.integers(1, len(text) - 1))
        continuation = draw(st.sampled_from((MISSING, None, call_id)))
        pending.append(
            [
                _fields(
                    index=slot,
                    id=call_id,
                    function={"name": draw(st.sampled_from(NAME_CANARIES)), "arguments": text[:cut]},
                ),
                _fields(index=slot, id=continuation, function={"arguments": text[cut:]}),
            ]
        )
    order = draw(st.permutations([slot for slot in range(slots) for _ in range(2)]))
    chunks: list[Any] = [
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [pending[slot].pop(0)]}}]}
        for slot in order
    ]
    chunks += draw(st.sampled_from(([TERMINAL, DONE], [TERMINAL], [DONE], [])))
    change = draw(st.sampled_from(("none", "none", "insert", "replace")))
    if change != "none" and chunks:
        position = draw(st.integers(0, len(chunks) - 1))
        hostile = draw(hostile_chunks)
        if change == "insert":
            chunks.insert(position, hostile)
        else:
            chunks[position] = hostile
    return chunks


TERMINAL = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
streams = st.one_of(st.lists(hostile_chunks, max_size=10), plausible_streams())


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a chunk (keys and values, bytes decoded leniently)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings_in(item)


def canaries_in(chunks: Sequence[Any], pool: Sequence[str]) -> set[str]:
    text = "\n".join(s for chunk in chunks for s in strings_in(chunk))
    return {canary for canary in pool if canary in text}


def never_visible(chunks: Sequence[Any], result: AssemblyResult, *, capture: bool = False) -> set[str]:
    """Canaries that must not appear: in ids never preserved, names never a call's name, arguments.

    A canary may also sit in a legitimate value (json_values plants any canary anywhere, so a
    preserved id or a call's name can contain one): those are visible by design and excluded.
    """
    legit = [call.id for call in result.calls if call.id] + [call.name for call in result.calls if call.name]
    pool = ID_CANARIES + NAME_CANARIES + (() if capture else ARG_CANARIES)
    return {canary for canary in canaries_in(chunks, pool) if not any(canary in value for value in legit)}


# --- the rig -------------------------------------------------------------------------------------


class _OwnRandomIds(IdGenerator):
    """Span and trace ids drawn from a generator of the rig's own.

    The SDK's default draws from the global ``random``. A stream an earlier example abandoned is
    reported by its finalizer, whenever the collector runs: while Hypothesis draws the next example,
    that span's ids moved the global state, and Hypothesis failed the test ("Do not use the random
    module inside strategies"), now and then.
    """

    def __init__(self) -> None:
        self._random = random.Random(0)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


class Rig:
    """Fresh providers per example: metrics are cumulative, so nothing carries over."""

    def __init__(self, **config: Any) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(shutdown_on_exit=False, id_generator=_OwnRandomIds())
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        self.instrumentation = Instrumentation(self.tracer_provider, self.meter_provider, **config)

    def text(self) -> str:
        spans = "\n".join(span.to_json(indent=None) for span in self.exporter.get_finished_spans())
        data = self.reader.get_metrics_data()
        return spans + (data.to_json(indent=None) if data is not None else "")


class LogSink(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.parts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.parts += [record.name, record.getMessage(), repr(record.args), str(record.exc_info)]

    def text(self) -> str:
        return "\n".join(self.parts)


@contextlib.contextmanager
def debug_logs() -> Iterator[LogSink]:
    sink = LogSink()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(sink)
    root.setLevel(logging.DEBUG)
    try:
        yield sink
    finally:
        root.removeHandler(sink)
        root.setLevel(previous)


LOOP = asyncio.new_event_loop()


@pytest.fixture(scope="module", autouse=True)
def close_loop() -> Iterator[None]:
    yield
    LOOP.close()


async def agen(chunks: Sequence[Any]) -> AsyncIterator[Any]:
    for item in chunks:
        await asyncio.sleep(0)
        yield item


def as_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def naive_calls(chunks: Sequence[Any]) -> list[tuple[Any, Any, Any]]:
    """What a naive third-party accumulator returns: it concatenates every string id and name per index
    (like the ``openai`` SDK's ``ChatCompletionStreamState`` on repeated or conflicting ids)."""
    slots: dict[Any, list[str]] = {}
    for chunk in chunks:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("choices"), list):
            continue
        for choice in chunk["choices"]:
            calls = choice.get("delta", {}).get("tool_calls") if isinstance(choice, dict) else None
            if not isinstance(calls, list) or not isinstance(choice.get("delta"), dict):
                continue
            for fragment in calls:
                if not isinstance(fragment, dict):
                    continue
                index = fragment.get("index")
                key = repr(index)
                slot = slots.setdefault(key, ["", "", ""])
                function = fragment.get("function")
                if isinstance(fragment.get("id"), str):
                    slot[0] += fragment["id"]
                if isinstance(function, dict):
                    if isinstance(function.get("name"), str):
                        slot[1] += function["name"]
                    if isinstance(function.get("arguments"), str):
                        slot[2] += function["arguments"]
    return [tuple(slot) for slot in slots.values()]  # type: ignore[misc]


class NaiveAssembler:
    def __init__(self) -> None:
        self.chunks: list[Any] = []

    def feed(self, chunk: Any) -> None:
        self.chunks.append(chunk)

    def finish(self) -> list[tuple[Any, Any, Any]]:
        return naive_calls(self.chunks)


def naive_triples(calls: list[tuple[Any, Any, Any]]) -> list[tuple[str | None, str | None, str | None]]:
    return [(i or None, n or None, a) for i, n, a in calls]


def attempts_for(chunks: Sequence[Any], result: AssemblyResult) -> list[tuple[Any, Any, Any]]:
    """Calls a host may be asked to run: the reference calls (proposed or not) and tampered copies,
    every raw id string of the stream, and a naive assembler's output."""
    out: list[tuple[Any, Any, Any]] = []
    for call in result.calls:
        out.append((call.id, call.name, call.arguments))
        out.append((call.id, call.name, call.arguments + " "))
        out.append((call.id, (call.name or "") + "x", call.arguments))
    name, arguments = (result.calls[0].name, result.calls[0].arguments) if result.calls else ("f", "{}")
    for raw in sorted({s for chunk in chunks for s in strings_in(chunk) if s.startswith("call-")}):
        out.append((raw, name, arguments))
    out += naive_calls(chunks)
    return out


# --- 1. every wrapper is transparent -----------------------------------------------------------------


class HostDenied(Exception):
    """The host's own authorization refused the call."""


@budget(150)
@given(streams, st.booleans())
def test_every_wrapper_is_transparent_on_hostile_input(chunks: list[Any], guard: bool) -> None:
    CASES["wrappers"] += 1
    rig = Rig(guard=guard, capture_content=True)
    etf = rig.instrumentation
    # Sync and async streams yield the very same objects.
    assert all(a is b for a, b in zip(list(etf.stream(iter(chunks))), chunks, strict=True))

    async def consume() -> list[Any]:
        return [item async for item in etf.stream(agen(chunks))]

    assert all(a is b for a, b in zip(LOOP.run_until_complete(consume()), chunks, strict=True))

    # A wrapped reference assembler returns what an unwrapped one returns.
    wrapped, plain = etf.assembler(ReferenceAssembler()), ReferenceAssembler()
    for item in chunks:
        assert wrapped.feed(item) is plain.feed(item) is None
    assert wrapped.finish() == plain.finish()

    # A wrapped third-party assembler that raises on odd input re-raises the same exception.
    class Fragile:
        def feed(self, item: Any) -> None:
            item["choices"][0]["delta"]  # raises on anything odd

        def finish(self) -> list[Any]:
            return []

    fragile, seen = etf.assembler(Fragile(), adapter=AssemblerAdapter(calls=lambda result: result)), []
    for item in chunks:
        try:
            Fragile().feed(item)
            expected: BaseException | None = None
        except Exception as error:
            expected = error
        try:
            fragile.feed(item)
        except Exception as error:
            assert expected is not None and type(error) is type(expected)
            seen.append(error)
        else:
            assert expected is None
    assert fragile.finish() == []

    # Hosts: observe mode returns or raises exactly what the host does; guard mode adds only refusals.
    result = plain.finish()

    def host(call: Any) -> Any:
        call_id = call.get("id") if isinstance(call, dict) else None
        if isinstance(call_id, str) and call_id.endswith("1x" + RUN):
            raise HostDenied("not allowed")
        return ("ran", call_id)

    observed = etf.host(host)
    for attempt in [*attempts_for(chunks, result), *((c, c, c) for c in chunks[:3])]:
        call = as_call(*attempt)
        try:
            direct: Any = host(call)
        except HostDenied:
            direct = HostDenied
        try:
            outcome: Any = observed(call)
        except HostDenied:
            outcome = HostDenied
        except GuardRefusedError:
            assert guard, "observe mode refused a call"
            continue
        assert outcome == direct
    # Hostile call objects (not dicts) reach the host unchanged.
    for odd in chunks[:3]:
        try:
            observed(odd)
        except GuardRefusedError:
            assert guard
    assert not LOOP.is_closed()


# --- 2. trust does not widen ------------------------------------------------------------------------


def same_call(call_id: Any, name: Any, arguments: Any) -> tuple[Any, Any, Any]:
    """A call as the guard compares it: the arguments as a JSON value (key order, spacing aside)."""
    try:
        value = json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        value = arguments
    return (call_id, name, value)


@budget(150)
@given(streams)
def test_guard_never_runs_what_is_not_a_reference_proposal(chunks: list[Any]) -> None:
    CASES["guard"] += 1
    rig = Rig(guard=True)
    etf = rig.instrumentation
    for _ in etf.stream(iter(chunks)):
        pass
    reference = assemble(chunks)
    proposals = {same_call(call.id, call.name, call.arguments) for call in reference.proposals}
    ran: list[tuple[Any, Any, Any]] = []

    def host(call: Any) -> str:
        ran.append(same_call(call["id"], call["function"]["name"], call["function"]["arguments"]))
        return "ok"

    guarded = etf.host(host)
    attempts = attempts_for(chunks, reference)
    # A naive third-party assembler, wrapped: its output goes to the guarded host as is.
    naive = etf.assembler(NaiveAssembler(), adapter=AssemblerAdapter(calls=naive_triples))
    for item in chunks:
        naive.feed(item)
    attempts += naive.finish()
    refused = 0
    for attempt in attempts:
        try:
            guarded(as_call(*attempt))
        except GuardRefusedError:
            refused += 1
    assert set(ran) <= proposals, "guard mode executed a call that is not a reference proposal"
    assert {same_call(*a) for a in attempts if same_call(*a) in proposals} == set(ran), "guard refused a proposal"
    assert refused == sum(1 for a in attempts if same_call(*a) not in proposals)
    if not reference.dispatchable:
        assert ran == []
    else:
        CASES["guard_dispatchable"] += 1


@budget(100)
@given(streams)
def test_observe_mode_records_but_never_changes_the_hosts_own_decisions(chunks: list[Any]) -> None:
    CASES["observe"] += 1
    rig = Rig()
    etf = rig.instrumentation
    for _ in etf.stream(iter(chunks)):
        pass
    reference = assemble(chunks)
    decisions: list[tuple[Any, bool]] = []

    def host(call: Any) -> str:
        allowed = not (isinstance(call["function"]["name"], str) and call["function"]["name"].endswith("1x" + RUN))
        decisions.append((call["id"], allowed))
        if not allowed:
            raise HostDenied("refused by the host's own policy")
        return "ran"

    observed = etf.host(host)
    attempts = attempts_for(chunks, reference)
    denied = 0
    for attempt in attempts:
        try:
            assert observed(as_call(*attempt)) == "ran"
        except HostDenied:
            denied += 1
    assert len(decisions) == len(attempts), "observe mode skipped a call"
    assert denied == sum(1 for _, allowed in decisions if not allowed)
    executions = rig.exporter.get_finished_spans()
    failed = [s for s in executions if s.name.startswith(A.SPAN_EXECUTE_TOOL) and s.attributes.get(A.ERROR_TYPE)]
    assert len(failed) == denied
    assert all(s.attributes[A.ERROR_TYPE] == "HostDenied" for s in failed)
    assert not any(s.attributes.get(A.ETF_GUARD_REFUSED) for s in executions)


# --- 3. nothing leaks ----------------------------------------------------------------------------


@budget(120)
@given(streams, st.booleans())
def test_no_canary_leaks_from_the_fuzz_corpus(chunks: list[Any], capture: bool) -> None:
    CASES["canaries"] += 1
    with debug_logs() as logs:
        rig = Rig(capture_content=capture)
        etf = rig.instrumentation
        for _ in etf.stream(iter(chunks)):
            pass
        LOOP.run_until_complete(_drain(etf.stream(agen(chunks))))
        reference = assemble(chunks)
        assembler = etf.assembler(NaiveAssembler(), adapter=AssemblerAdapter(calls=naive_triples))
        for item in chunks:
            assembler.feed(item)
        assembler.finish()
        asked: set[Any] = set()
        for guard in (False, True):
            host = etf.host(lambda call: "ok", guard=guard)
            for attempt in attempts_for(chunks, reference):
                asked.add(attempt[1])
                with contextlib.suppress(GuardRefusedError):
                    host(as_call(*attempt))
    secret = never_visible(chunks, reference, capture=capture)
    spans = rig.exporter.get_finished_spans()
    assembly = "\n".join(s.to_json(indent=None) for s in spans if not s.name.startswith(A.SPAN_EXECUTE_TOOL))
    assert {c for c in secret if c in assembly} == set()
    # An execute_tool span and the duration metric name the tool the application asked to run (also
    # when guard mode refused it, e.g. a name a naive assembler took from a rejected fragment); ids the
    # guard could not verify are never recorded.
    executions = "\n".join(s.to_json(indent=None) for s in spans if s.name.startswith(A.SPAN_EXECUTE_TOOL))
    data = rig.reader.get_metrics_data()
    executions += data.to_json(indent=None) if data is not None else ""
    asked_names = [name for name in asked if isinstance(name, str)]
    allowed = {c for c in secret if any(c in name for name in asked_names)}
    assert {c for c in secret - allowed if c in executions} == set()
    assert {c for c in secret | canaries_in(chunks, ARG_CANARIES) if c in logs.text()} == set()


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


def _write_jsonl(path: Path, chunks: Sequence[Any]) -> list[Any]:
    kept = [c for c in chunks if c == DONE or (isinstance(c, dict) and _jsonable(c))]
    path.write_text("".join(("[DONE]" if c == DONE else json.dumps(c)) + "\n" for c in kept), encoding="utf-8")
    return kept


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    # The CLI turns a crash into exit 2 with one line ("internal error (...)"), so that it never
    # passes for a finding; here it is what the fuzzer hunts for.
    assert ": internal error (" not in err.getvalue(), err.getvalue()
    return code, out.getvalue(), err.getvalue()


@budget(30)
@given(streams)
def test_no_canary_leaks_from_replay_export_and_audit(chunks: list[Any]) -> None:
    CASES["cli_canaries"] += 1
    with tempfile.TemporaryDirectory() as tmp, debug_logs() as logs:
        recording, export = Path(tmp, "r.jsonl"), Path(tmp, "export.jsonl")
        kept = _write_jsonl(recording, chunks)
        reference = assemble(kept)
        secret = never_visible(kept, reference)
        outputs = []
        # Named, so that a stream whose first chunk is the hostile one is still read as Chat Completions.
        # Several responses in a row (a chunk after [DONE], ...) are refused too (docs/cli.md).
        chat = any(CHAT_COMPLETIONS.recognizes(chunk) for chunk in kept) and not (
            later_responses(CHAT_COMPLETIONS.name, kept) or (kept and complete_body(kept[0]))
        )
        for extra in ((), ("--json",), ("--json", "--export", str(export))):
            code, out, err = run_cli("replay", str(recording), "--protocol", "chat_completions", *extra)
            if chat:
                assert code in (0, 1), err
            else:  # not one Chat Completions response (an empty file among them): unusable input, refused
                assert code == 2 and out == "" and err.count("\n") == 1, err
            outputs += [out, err]
        assert export.exists() is chat
        if chat:
            outputs.append(export.read_text(encoding="utf-8"))
            for extra in ((), ("--json",)):
                code, out, err = run_cli("audit", "--no-progress", str(export), *extra)
                assert code in (0, 1, 2), err
                assert code != 2 or err.count("\n") == 1, err
                outputs += [out, err]
            document = json.loads(outputs[2])
            assert all("arguments" not in call for call in document["calls"])
    text = "\n".join(outputs) + logs.text()
    assert {c for c in secret if c in text} == set()


# --- 4. CLIs on unreadable input ----------------------------------------------------------------------


def assert_clean_exit(code: int, err: str, command: str) -> None:
    assert code in (0, 1, 2)
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip("\n").split("\n")
        assert len(lines) == 1 and lines[0].startswith(f"etf-otel {command}: "), err


valid_line = st.builds(
    lambda cs: json.dumps({"object": "chat.completion.chunk", "choices": cs}),
    st.lists(
        st.builds(
            lambda i, calls: {"index": 0, "delta": {"tool_calls": calls}, "finish_reason": i},
            st.sampled_from((None, "tool_calls")),
            st.lists(
                st.builds(
                    lambda d: {"index": 0, "id": d, "function": {"arguments": "{}"}},
                    ids.filter(_jsonable).filter(lambda v: v is not MISSING),
                ),
                max_size=2,
            ),
        ),
        max_size=1,
    ),
)
sse_lines = st.one_of(
    valid_line.map(lambda line: "data: " + line),
    valid_line.map(lambda line: "data: " + line[: len(line) // 2]),
    st.sampled_from(("data: [DONE]", "data:", ": comment", "event: message", "id: 7", "retry: x", "", "data: {}")),
    st.text(max_size=10),
)
line_separators = st.sampled_from(("\n", "\r\n", "\r", "\n\n"))
recordings = st.one_of(
    st.binary(max_size=64),
    st.builds(
        lambda lines, sep: sep.join(lines).encode(),
        st.lists(valid_line | st.text(max_size=8), max_size=5),
        line_separators,
    ),
    st.builds(lambda lines, sep: sep.join(lines).encode(), st.lists(sse_lines, max_size=6), line_separators),
    st.builds(
        lambda lines, junk, at: (lambda b: b[:at] + junk + b[at:])("\n".join(lines).encode()),
        st.lists(sse_lines | valid_line, min_size=1, max_size=4),
        st.sampled_from((b"\xff", b"\xfe\xff", b"\xc3", b"\x00", b"\xef\xbb\xbf", b"\xed\xa0\x80")),
        st.integers(0, 200),
    ),
)


@budget(150)
@given(recordings)
def test_replay_never_raises_and_explains_unreadable_input(data: bytes) -> None:
    CASES["replay_bytes"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "recording")
        path.write_bytes(data)
        code, _, err = run_cli("replay", str(path), "--json")
    assert_clean_exit(code, err, "replay")


any_values = st.deferred(
    lambda: (
        st.none()
        | st.booleans()
        | st.integers()
        | st.text(max_size=6)
        | st.lists(any_values, max_size=2)
        | st.dictionaries(
            st.sampled_from(("stringValue", "intValue", "arrayValue", "kvlistValue", "values", "x")),
            any_values,
            max_size=2,
        )
    )
)
hex_ids = st.sampled_from(("0" * 31 + "1", "0" * 15 + "2", "", "zz", "AAAAAAAAAAAAAAAAAAAAAA==", None, 7))
otlp_spans = st.builds(
    lambda trace_id, span_id, parent, name, attrs, events, links, status: _fields(
        traceId=trace_id,
        spanId=span_id,
        parentSpanId=parent,
        name=name,
        attributes=attrs,
        events=events,
        links=links,
        status=status,
    ),
    hex_ids,
    hex_ids,
    hex_ids | st.just(MISSING),
    st.sampled_from(("execute_tool f", "assemble_tool_call f", "assemble_response", "other", None, 3)),
    st.lists(
        st.builds(
            lambda k, v: {"key": k, "value": v},
            st.sampled_from(
                ("gen_ai.tool.call.id", "etf.tool_call.verdict", "etf.stream.state", "gen_ai.input.messages", "x")
            ),
            any_values,
        ),
        max_size=3,
    )
    | any_values,
    st.lists(
        st.builds(
            lambda n, a: {"name": n, "attributes": a},
            st.sampled_from(("etf.integrity.violation", "gen_ai.tool.message", "x")),
            any_values,
        ),
        max_size=2,
    )
    | any_values,
    st.lists(st.builds(lambda t, s: {"traceId": t, "spanId": s}, hex_ids, hex_ids), max_size=2) | any_values,
    any_values,
)
otlp_documents = st.builds(
    lambda spans: {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]},
    st.lists(otlp_spans, max_size=4),
) | st.builds(lambda v: {"resourceSpans": v}, any_values)
otlp_inputs = st.one_of(
    st.binary(max_size=64),
    st.builds(
        lambda docs, sep: sep.join(json.dumps(d) for d in docs).encode(),
        st.lists(otlp_documents, min_size=1, max_size=3),
        st.sampled_from(("\n", "\n\n", " ")),
    ),
    st.builds(lambda doc, cut: json.dumps(doc).encode()[:cut], otlp_documents, st.integers(0, 300)),
    st.builds(lambda doc: json.dumps(doc, indent=2).encode(), otlp_documents),
)


@budget(150)
@given(otlp_inputs)
def test_audit_never_raises_and_explains_unreadable_input(data: bytes) -> None:
    CASES["audit_bytes"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "export.json")
        path.write_bytes(data)
        code, _, err = run_cli("audit", "--no-progress", "--json", str(path))
    assert_clean_exit(code, err, "audit")


@pytest.mark.parametrize("command", ["replay", "audit"])
def test_clis_exit_2_on_missing_directory_and_unreadable_paths(command: str, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.write_text("{}\n")
    locked.chmod(0)
    for target in (tmp_path / "missing", tmp_path, locked):
        if command == "audit" and target == tmp_path:
            continue  # audit reads directories
        if target == locked and os.access(locked, os.R_OK):
            continue  # running as root: permissions do not apply
        args = ["audit", "--no-progress", str(target)] if command == "audit" else ["replay", str(target)]
        code, _, err = run_cli(*args)
        assert code == 2
        assert_clean_exit(code, err, command)


# --- 5. deep nesting --------------------------------------------------------------------------------

DEPTH = 10_000


def nested_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def nested_dict(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def deep_json_text(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def deep_chunks() -> list[Any]:
    deep = nested_list(DEPTH)
    return [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call-deep",
                                "function": {"name": "f", "arguments": deep_json_text(DEPTH)},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": deep, "function": {"name": deep, "arguments": nested_dict(DEPTH)}}
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": deep, "id": nested_dict(DEPTH), "function": deep}]}}
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": deep}, "finish_reason": deep}]},
        {"choices": deep},
        deep,
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        DONE,
    ]


@pytest.mark.parametrize("guard", [False, True])
def test_deep_nesting_in_chunk_fields_raises_no_recursion_error(guard: bool) -> None:
    CASES["deep"] += 1
    chunks = deep_chunks()
    rig = Rig(guard=guard, capture_content=True)
    etf = rig.instrumentation
    assert all(a is b for a, b in zip(list(etf.stream(iter(chunks))), chunks, strict=True))
    LOOP.run_until_complete(_drain(etf.stream(agen(chunks))))
    wrapped = etf.assembler(ReferenceAssembler())
    for item in chunks:
        wrapped.feed(item)
    result = wrapped.finish()
    assert not result.dispatchable
    (call,) = result.calls
    assert call.id == "call-deep" and ErrorCategory.INVALID_ARGUMENTS in call.categories
    host = etf.host(lambda call: "ran")
    outcomes = []
    for call_object in (
        as_call("call-deep", "f", deep_json_text(DEPTH)),
        as_call(nested_list(DEPTH), nested_dict(DEPTH), nested_list(DEPTH)),
        nested_list(DEPTH),
    ):
        try:
            outcomes.append(host(call_object))
        except GuardRefusedError as refusal:
            outcomes.append(refusal.category)
    if guard:  # the rejected call is refused with its own first category; the others have no usable id
        assert outcomes == [call.categories[0], ErrorCategory.MISSING_ID, ErrorCategory.MISSING_ID]
    else:
        assert outcomes == ["ran"] * 3


def test_replay_of_deep_nesting_exits_cleanly(tmp_path: Path) -> None:
    CASES["deep"] += 1
    deep_string = tmp_path / "deep-string.jsonl"
    deep_string.write_text(json.dumps(deep_chunks()[0]) + "\n[DONE]\n")
    code, out, err = run_cli("replay", str(deep_string), "--json")
    assert code == 1 and "invalid_arguments" in out and err == ""
    deep_field = tmp_path / "deep-field.jsonl"
    deep_field.write_text(
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":' + "[" * DEPTH + "]" * DEPTH + "}]}}]}\n"
    )
    code, out, err = run_cli("replay", str(deep_field))
    assert_clean_exit(code, err, "replay")
    assert code == 2
    deep_sse = tmp_path / "deep.sse"
    deep_sse.write_text("data: " + "[" * DEPTH + "]" * DEPTH + "\n\n")
    code, out, err = run_cli("replay", str(deep_sse))
    assert_clean_exit(code, err, "replay")


def _span_document(attributes: list[Any]) -> dict[str, Any]:
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "execute_tool f", "attributes": attributes}
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


@pytest.mark.parametrize("layout", ["json-lines", "document"])
def test_audit_of_deeply_nested_json_exits_2_with_one_line(layout: str, tmp_path: Path) -> None:
    CASES["deep"] += 1
    text = '{"resourceSpans":' + "[" * DEPTH + "]" * DEPTH + "}"
    path = tmp_path / "deep.json"
    path.write_text(text + "\n" if layout == "json-lines" else "  \n" + text + "\n")
    try:
        code, _, err = run_cli("audit", "--no-progress", str(path))
    except RecursionError as error:
        raise AssertionError("RecursionError escaped etf-otel audit") from error
    assert code == 2
    assert_clean_exit(code, err, "audit")


def test_audit_of_deeply_nested_input_messages_attribute(tmp_path: Path) -> None:
    CASES["deep"] += 1
    messages = "[" * DEPTH + "]" * DEPTH
    path = tmp_path / "messages.jsonl"
    path.write_text(
        json.dumps(_span_document([{"key": "gen_ai.input.messages", "value": {"stringValue": messages}}])) + "\n"
    )
    try:
        code, _, err = run_cli("audit", "--no-progress", str(path))
    except RecursionError as error:
        raise AssertionError("RecursionError escaped etf-otel audit") from error
    assert_clean_exit(code, err, "audit")


# --- 6. huge strings and bounded memory ----------------------------------------------------------------

TEN_MB = 10 * 1024 * 1024


def huge_arguments(size: int) -> str:
    head = '{"blob":"'
    return head + "x" * (size - len(head) - 2) + '"}'


def huge_stream(arguments: str, pieces: int) -> list[Any]:
    step = -(-len(arguments) // pieces)
    frags = [arguments[i : i + step] for i in range(0, len(arguments), step)]
    chunks: list[Any] = [
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": 0, "id": "call-big", "function": {"name": "f", "arguments": frags[0]}}]
                    },
                }
            ]
        }
    ]
    chunks += [
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": None, "function": {"arguments": p}}]}}]}
        for p in frags[1:]
    ]
    return [*chunks, {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}, DONE]


@pytest.mark.parametrize("pieces", [1, 10])
def test_a_10_mb_argument_is_invalid_past_the_cap_and_accepted_below_it(pieces: int) -> None:
    CASES["huge"] += 1
    arguments = huge_arguments(TEN_MB)
    chunks = huge_stream(arguments, pieces)
    for cap, accepted in ((1024 * 1024, False), (DEFAULT_MAX_ARGUMENT_CHARS, False), (16 * 1024 * 1024, True)):
        assembler = ReferenceAssembler(max_argument_chars=cap)
        for item in chunks:
            assembler.feed(item)
        (call,) = assembler.finish().calls
        if accepted:
            assert call.proposed and call.arguments == arguments
        else:
            assert call.categories == (ErrorCategory.INVALID_ARGUMENTS,) and call.arguments == ""
    # Through the instrumentation (default cap): rejected, and the span carries no 10 MB attribute.
    rig = Rig(guard=True, capture_content=True)
    for _ in rig.instrumentation.stream(iter(chunks)):
        pass
    (span,) = [s for s in rig.exporter.get_finished_spans() if s.name.startswith(A.SPAN_ASSEMBLE_TOOL_CALL)]
    assert span.attributes[A.ERROR_TYPE] == "invalid_arguments"
    assert len(str(span.attributes.get(A.GEN_AI_TOOL_CALL_ARGUMENTS, ""))) <= 4096 + 32
    with pytest.raises(GuardRefusedError):
        rig.instrumentation.host(lambda call: "ran")(as_call("call-big", "f", arguments))


def _stream_of(total: int, piece: int, *, distinct: bool = True) -> Iterator[Any]:
    yield {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [{"index": 0, "id": "call-runaway", "function": {"name": "f", "arguments": '{"a":"'}}]
                },
            }
        ]
    }
    for number in range(total // piece):
        text = (str(number) + "x" * piece)[:piece] if distinct else "x" * piece
        yield {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": text}}]}}]}
    yield DONE


def _peak_while(consume: Callable[[], Any]) -> tuple[int, Any]:
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        outcome = consume()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, outcome


MEMORY_BOUND = int(DEFAULT_MAX_ARGUMENT_CHARS * 1.5)
"""The cap (8 Mi ASCII characters, 8 MiB) plus half of it for everything else."""


def test_a_64_mb_stream_in_large_fragments_holds_no_more_than_the_cap() -> None:
    CASES["huge"] += 1

    def consume() -> Any:
        rig = Rig(capture_content=True)
        for _ in rig.instrumentation.stream(_stream_of(64 * 1024 * 1024, 64 * 1024)):
            pass
        (span,) = [s for s in rig.exporter.get_finished_spans() if s.name.startswith(A.SPAN_ASSEMBLE_TOOL_CALL)]
        return span.attributes[A.ERROR_TYPE]

    peak, error_type = _peak_while(consume)
    print(f"[fuzz] 64 MB stream, 64 KiB fragments, through the stream wrapper: peak {peak / 2**20:.1f} MiB")
    assert error_type == "invalid_arguments"
    assert peak <= MEMORY_BOUND, (
        f"peak {peak / 2**20:.1f} MiB for a cap of {DEFAULT_MAX_ARGUMENT_CHARS / 2**20:.0f} Mi chars"
    )


def test_a_64_mb_stream_in_small_fragments_holds_no_more_than_the_cap() -> None:
    CASES["huge"] += 1

    def consume() -> Any:
        assembler = ReferenceAssembler()
        for item in _stream_of(64 * 1024 * 1024, 512, distinct=False):
            assembler.feed(item)
        return assembler.finish().calls[0].categories

    peak, categories = _peak_while(consume)
    print(f"[fuzz] 64 MB stream, 512 B fragments, reference assembler: peak {peak / 2**20:.1f} MiB")
    assert categories == (ErrorCategory.INVALID_ARGUMENTS,)
    assert peak <= MEMORY_BOUND, (
        f"peak {peak / 2**20:.1f} MiB for a cap of {DEFAULT_MAX_ARGUMENT_CHARS / 2**20:.0f} Mi chars"
    )


# --- replay over the three protocols: typed events whose fields hold anything ----------------------

_PROTOCOL_TYPES = {
    "responses": (
        "response.created", "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed",
        "response.incomplete", "response.failed", "error",
    ),
    "anthropic_messages": (
        "message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop", "error", "ping",
    ),
}  # fmt: skip
_STARTS = {
    "responses": {"type": "response.created", "response": {"id": "resp_1", "output": []}},
    "anthropic_messages": {"type": "message_start", "message": {"id": "msg_1", "content": []}},
    "chat_completions": {"object": "chat.completion.chunk", "choices": []},
}
_FIELDS = (
    "type", "output_index", "content_index", "index", "item_id", "item", "delta", "arguments", "response",
    "content_block", "message", "usage", "choices", "id", "call_id", "name", "input", "partial_json", "stop_reason",
)  # fmt: skip
odd_values = json_values | st.sampled_from(({"a": 1}, [1, "x"], ["response.completed"], {"type": "x"}, 10**30, -1))


def _typed_event(protocol: str) -> st.SearchStrategy[dict[str, Any]]:
    """An event of ``protocol``: a known type (or an object, an array, anything) and fields of any JSON value."""
    if protocol == "chat_completions":
        kind: st.SearchStrategy[Any] = st.just("chat.completion.chunk") | odd_values
        return st.builds(
            lambda k, rest: {"object": k, **rest},
            kind,
            st.dictionaries(st.sampled_from(_FIELDS), odd_values, max_size=4),
        )
    kind = st.sampled_from(_PROTOCOL_TYPES[protocol]) | odd_values
    return st.builds(
        lambda k, rest: {**rest, "type": k}, kind, st.dictionaries(st.sampled_from(_FIELDS), odd_values, max_size=4)
    )


protocol_recordings = st.sampled_from(tuple(_STARTS)).flatmap(
    lambda protocol: st.tuples(st.just(protocol), st.lists(_typed_event(protocol), max_size=6))
)


@budget(100)
@given(protocol_recordings, st.booleans(), st.booleans())
def test_replay_of_any_protocol_with_hostile_typed_events_never_raises(
    recording: tuple[str, list[dict[str, Any]]], as_json: bool, named: bool
) -> None:
    """A Responses or Anthropic event whose `type` is an object or array, any field of any type: a verdict or exit 2."""
    CASES["replay_protocols"] += 1
    protocol, events = recording
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "recording.jsonl")
        path.write_text("\n".join(json.dumps(e) for e in [_STARTS[protocol], *events]) + "\n", encoding="utf-8")
        extra = ["--protocol", protocol] if named else []
        code, _, err = run_cli("replay", str(path), *extra, *(["--json"] if as_json else []))
    assert_clean_exit(code, err, "replay")
