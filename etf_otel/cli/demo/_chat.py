"""``etf-otel demo``: the case study end to end, with the real ``openai`` client and no server.

A synthetic agent reads a source and saves a report. Its model is a local SSE server on 127.0.0.1
streaming scripted Chat Completions; each chunk the client yields goes to the reference assembler
and to the SDK's own accumulator (``ChatCompletionStreamState``, what ``chat.completions.stream``
uses): the table shows what the SDK alone would hand the app next to what the rules decided. The
app runs the rules' proposals through an instrumented, guarded host; the next request's tool
results are checked for linkage. Control (continuations omit the id) and target (``id: null``) must
preserve the same ids and report; the other cases are dispatched or caught as they say. Then the
OpenAI Responses, Anthropic and Gemini parts (``_responses``, ``_anthropic``, ``_gemini``).
"""

from __future__ import annotations

import gc
import json
import signal
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console

from etf_otel.cli._exit_codes import EXIT_BAD_INPUT
from etf_otel.cli._sdk_setup import SdkSetup, setup_sdk
from etf_otel.cli._text import console_for
from etf_otel.cli.demo._anthropic import run_anthropic
from etf_otel.cli.demo._cases import (
    DISPATCHED,
    READ,
    SAVE,
    DemoRun,
    Part,
    ProtocolCase,
    describe_call,
    hand_to_host,
    run_case,
)
from etf_otel.cli.demo._gemini import run_gemini
from etf_otel.cli.demo._responses import run_responses
from etf_otel.cli.demo._summary import print_summary
from etf_otel.core._results import AssemblyResult
from etf_otel.integrations.openai._state import completion_calls
from etf_otel.protocols._chat_completions import ReferenceAssembler
from etf_otel.testing import DONE, MISSING, LocalChatServer, Script, chat
from etf_otel.testing.chat import chunk

__all__ = ["run_demo"]

PROVIDER = "etf.demo"
SOURCE_TEXT = "Q3 revenue grew 12%; churn fell to 2.1%; two regions missed their targets.\n"
Fragment = dict[str, Any]


def _call(index: int, call_id: Any, name: str | None = None, arguments: str | None = None) -> Fragment:
    """One fragment; a named one opens its call (``"type": "function"``); ``call_id`` MISSING leaves the id out."""
    if name is None:
        return chat.fragment(index, call_id, arguments=MISSING if arguments is None else arguments)
    return chat.fragment(index, call_id, name, MISSING if arguments is None else arguments, type="function")


def _tool_turn(*fragment_groups: Sequence[Fragment], cut_after: int | None = None) -> Script:
    events: list[Any] = [chunk(tool_calls=list(group)) for group in fragment_groups]
    if cut_after is None:
        events += [chunk(finish_reason="tool_calls"), DONE]
    return Script(events=events, cut_after=cut_after)


def _text_turn(text: str) -> Script:
    return Script(events=[chunk(content=text), chunk(finish_reason="stop"), DONE])


def _split_call(index: int, call_id: str, name: str, arguments: str, continuation_id: Any) -> list[list[Fragment]]:
    """One call in three fragments: the id on the first, ``continuation_id`` on the rest."""
    third = max(1, len(arguments) // 3)
    return [
        [_call(index, call_id, name, arguments[:third])],
        [_call(index, continuation_id, arguments=arguments[third : 2 * third])],
        [_call(index, continuation_id, arguments=arguments[2 * third :])],
    ]


class DemoHost:
    """The tools of the synthetic agent: read a source file, save a report."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        (workdir / "source.txt").write_text(SOURCE_TEXT, encoding="utf-8")

    def execute(self, call: Any) -> str:
        """Run one call: a ``ToolCall``, a Responses item, a ``tool_use`` block, a Gemini ``FunctionCall``."""
        text = getattr(call, "arguments", None)
        arguments = json.loads(text) if isinstance(text, str) else getattr(call, "input", None) or call.args
        if call.name == "read_source":
            return (self.workdir / Path(arguments["path"]).name).read_text(encoding="utf-8")
        if call.name == "save_report":
            report = self.workdir / "report.md"
            report.write_text(f"# {arguments['title']}\n\n{arguments['body']}\n", encoding="utf-8")
            return str(report)
        raise ValueError("unknown tool")


def _raises(error: BaseException) -> str:
    return f"raises {type(error).__name__}" + (f": {error}" if str(error) else "")


def _sdk_feed(state: Any, sdk_chunk: Any) -> BaseException | None:
    """Hand one chunk to the SDK's accumulator as ``chat.completions.stream(...)`` does; what it raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic warns when it serializes a number as id
            list(state.handle_chunk(sdk_chunk))
    except Exception as error:  # the SDK's own failure is the result shown
        return error
    return None


def _sdk_hands(state: Any) -> str:
    """What ``get_final_completion()`` hands the app: its tool calls, or what it raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            calls = completion_calls(state.get_final_completion())
    except Exception as error:
        return _raises(error)
    return "\n".join(describe_call(*call) for call in calls) or "no call"


class _Agent:
    def __init__(self, client: Any, host: Any) -> None:
        self.client = client
        self.host = host

    def stream(self, messages: list[Any]) -> tuple[AssemblyResult, str]:
        """One model request: the rules' result, and what the SDK's own accumulator hands the app for its chunks."""
        from openai.lib.streaming.chat import ChatCompletionStreamState

        assembler, state = ReferenceAssembler(), ChatCompletionStreamState()
        failed: BaseException | None = None
        try:
            for sdk_chunk in self.client.chat.completions.create(model="etf-demo", messages=messages, stream=True):
                assembler.feed(sdk_chunk)
                failed = failed or _sdk_feed(state, sdk_chunk)
        except Exception as error:  # the SDK's own error for a cut connection
            return assembler.finish(), _raises(error)
        return assembler.finish(), _raises(failed) if failed else _sdk_hands(state)

    def execute(self, result: AssemblyResult, messages: list[Any], case: ProtocolCase) -> None:
        """Run every proposal through the guarded host and append the follow-up messages."""
        calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                 for c in result.proposals]  # fmt: skip
        messages.append({"role": "assistant", "tool_calls": calls})
        for call in result.proposals:
            output = hand_to_host(case, self.host, call)
            if output is not None:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})


def _run_conversation(
    agent: _Agent, server: LocalChatServer, continuation_id: Any, ids: list[str], case: ProtocolCase
) -> None:
    """Read the source, save the report, finish: the preserved ids go to ``ids``."""
    server.enqueue(
        _tool_turn(*_split_call(0, "call-read-1", "read_source", READ, continuation_id)),
        _tool_turn(*_split_call(0, "call-save-1", "save_report", SAVE, continuation_id)),
        _text_turn("The report is saved."),
    )
    messages: list[Any] = [{"role": "user", "content": "Read source.txt and save a short report."}]
    handed: list[str] = []
    for _ in range(2):
        result, sdk = agent.stream(messages)
        handed.append(sdk)
        ids += [call.id for call in result.calls if call.id]
        if not result.dispatchable:
            break
        agent.execute(result, messages, case)
    else:
        agent.stream(messages)
    case.sdk = "\n".join(handed)


def _single_turn_cases() -> list[tuple[ProtocolCase, Script]]:
    """Where the SDK alone goes wrong, then the rejections: each with the category the rules must record."""
    r1, rest = _call(0, "call-r1", "read_source", '{"path":'), ' "source.txt"}'
    whole = _call(0, "call-r1", "read_source", READ)
    repeated = _split_call(0, "call-d1", "read_source", READ, "call-d1")
    type_null = _split_call(0, "call-d3", "read_source", READ, MISSING)
    cut = [_call(0, MISSING, arguments=' "so')]
    type_null[1][0]["type"] = None
    ends = Script(events=[chunk(tool_calls=[_call(0, "call-r1", "read_source", '{"path": "sou')])])
    cases = [
        ("id repeated on every fragment", DISPATCHED, _tool_turn(*repeated)),
        ("first tool call at index 1", DISPATCHED, _tool_turn(*_split_call(1, "call-d2", "read_source", READ, None))),
        ("type: null on a continuation", DISPATCHED, _tool_turn(*type_null)),
        ("second id on the same index", "id_conflict", _tool_turn([r1], [_call(0, "call-r2", arguments=rest)])),
        ("stream ends mid-arguments, no finish_reason", "truncated_stream", ends),
        ("connection cut mid-call", "truncated_stream", _tool_turn([r1], cut, cut_after=2)),
        ("arguments not JSON", "invalid_arguments", _tool_turn([_call(0, "call-r1", "read_source", '{"path": "s')])),
        ("initial null id", "initial_null", _tool_turn([_call(0, None, "read_source", READ)])),
        ("null id on a new index", "initial_null", _tool_turn([whole], [_call(1, None, "save_report", "{}")])),
        ("empty id after an id", "empty_after_established", _tool_turn([r1], [_call(0, "", arguments=rest)])),
        ("number as id", "unsupported_id_type", _tool_turn([_call(0, 42, "read_source", READ)])),
        ("two calls, one id", "duplicate_call_id", _tool_turn([whole, {**whole, "index": 1}])),
    ]  # fmt: skip
    return [(ProtocolCase(name, expected), script) for name, expected, script in cases]


def _single_turn(agent: _Agent, server: LocalChatServer, script: Script, case: ProtocolCase) -> None:
    """The app runs what the rules propose and answers; a rejected call is tried anyway: the guard must refuse it."""
    server.enqueue(script)
    messages: list[Any] = [{"role": "user", "content": f"case: {case.name}"}]
    result, case.sdk = agent.stream(messages)
    if result.dispatchable:
        server.enqueue(_text_turn("ok"))
        agent.execute(result, messages, case)
        agent.stream(messages)
    elif result.calls:
        hand_to_host(case, agent.host, result.calls[0])


def _linkage_case(
    agent: _Agent, server: LocalChatServer, call_id: str, edit: Callable[[list[Any]], str], case: ProtocolCase
) -> None:
    """A valid call whose tool result the app gets wrong in the next request (``edit``), unchecked without the rules."""
    server.enqueue(_tool_turn([_call(0, call_id, "read_source", READ)]), _text_turn("ok"))
    messages: list[Any] = [{"role": "user", "content": f"linkage case: {case.name}"}]
    result, sdk = agent.stream(messages)
    agent.execute(result, messages, case)
    case.sdk = f"{sdk}\n{edit(messages)}, unchecked"
    agent.stream(messages)


def _linkage_cases() -> list[tuple[ProtocolCase, Callable[[list[Any]], str]]]:
    def orphan(messages: list[Any]) -> str:
        messages[-1] = {**messages[-1], "tool_call_id": "call-never-proposed"}
        return "result sent for call-never-proposed"

    def unanswered(messages: list[Any]) -> str:
        messages.pop()
        return "no result sent"

    def duplicate(messages: list[Any]) -> str:
        messages.append(dict(messages[-1]))
        return "two results sent"

    return [
        (ProtocolCase("tool result for an unknown id", "orphaned_result", may_run=True), orphan),
        (ProtocolCase("call without a tool result", "unanswered_call", may_run=True), unanswered),
        (ProtocolCase("two results for one call", "duplicate_result", may_run=True), duplicate),
    ]


def _demo_setup(export: str | None, otlp: bool, reader: InMemoryMetricReader) -> SdkSetup | None:
    """The providers, or ``None`` after one line on stderr (an unwritable FILE, ``--otlp`` with no collector)."""
    try:
        return setup_sdk("etf-otel-demo", export, otlp=otlp, extra_readers=[reader])
    except ValueError as error:
        print(f"etf-otel demo: {error}", file=sys.stderr)
    except OSError as error:
        print(f"etf-otel demo: cannot write --export {export}: {error.strerror or error}", file=sys.stderr)
    return None


def run_demo(export: str | None = None, console: Console | None = None, *, otlp: bool = False) -> int:
    """Run the whole demo: 0 when every case behaved as the rules say. Telemetry goes to ``export``
    (OTLP JSON lines), with ``otlp`` to the ``OTEL_EXPORTER_OTLP_*`` collector, else the summary only."""
    import openai

    from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor

    console = console or console_for()
    summary_exporter = InMemorySpanExporter()
    summary_reader = InMemoryMetricReader()
    setup = _demo_setup(export, otlp, summary_reader)
    if setup is None:
        return EXIT_BAD_INPUT
    tracer_provider, meter_provider = setup.tracer_provider, setup.meter_provider
    tracer_provider.add_span_processor(SimpleSpanProcessor(summary_exporter))

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        provider_name=PROVIDER,
        allow=(),  # the strict rules the cases assume, whatever OTEL_INSTRUMENTATION_ETF_ALLOW says
        skip_dep_check=True,
    )
    code, undelivered = EXIT_BAD_INPUT, ""
    watch = _InterruptWatch()
    try:
        with watch:
            instrumentation = instrumentor.instrumentation
            if instrumentation is None:  # instrument() declined: the openai client is instrumented by another setup
                print("etf-otel demo: the openai client is already instrumented by another setup", file=sys.stderr)
                return EXIT_BAD_INPUT
            tracer = tracer_provider.get_tracer("etf_otel.demo")
            with tempfile.TemporaryDirectory(prefix="etf-demo-") as workdir, LocalChatServer() as server:
                client = openai.OpenAI(base_url=server.base_url, api_key="etf-demo", max_retries=0)
                run, part = DemoRun(), Part(server, tracer, summary_exporter, DemoHost(Path(workdir)))
                _run_chat(run, part, client, instrumentation, Path(workdir))
                watch.check()
                run.responses = run_responses(part, client, instrumentation)
                watch.check()
                run.anthropic = run_anthropic(part, tracer_provider, meter_provider, PROVIDER)
                watch.check()
                run.gemini = run_gemini(part, tracer_provider, meter_provider, PROVIDER)
            watch.check()
            spans = summary_exporter.get_finished_spans()
            code, undelivered = print_summary(console, run, spans, summary_reader, setup, watch.check)
    except KeyboardInterrupt:  # leaving this block releases the interrupted frames: their streams end their spans
        watch.seen = True
    finally:
        if watch.seen:
            gc.collect()  # and those in reference cycles, while the providers still take spans
        instrumentor.uninstrument()
        setup.shutdown()
    if watch.seen:  # no verdict on an interrupted run, even when the interrupt landed where Python ignores it
        raise KeyboardInterrupt
    if undelivered:  # after the last export attempts and their log lines: the last line
        print(f"etf-otel demo: telemetry not delivered: {undelivered}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


def _run_chat(run: DemoRun, part: Part, client: Any, instrumentation: Any, workdir: Path) -> None:
    """The Chat Completions part: control and target runs, single-turn cases, linkage cases."""
    for tag, continuation, label in (
        ("control", MISSING, "control: continuations omit the id"),
        ("target", None, "target: continuations send id: null"),
    ):
        run_dir = workdir / tag
        run_dir.mkdir()
        agent = _Agent(client, instrumentation.host(DemoHost(run_dir), guard=True))
        run.ids[tag] = []
        body = partial(_run_conversation, agent, part.server, continuation, run.ids[tag])
        run.chat.append(run_case(part, f"run {tag}", ProtocolCase(label, DISPATCHED), body))
        report = run_dir / "report.md"
        run.reports[tag] = report.read_text(encoding="utf-8") if report.exists() else ""
    guarded = _Agent(client, instrumentation.host(part.host, guard=True))
    for case, script in _single_turn_cases():
        run.chat.append(run_case(part, "chat", case, partial(_single_turn, guarded, part.server, script)))
    for n, (case, edit) in enumerate(_linkage_cases(), 1):
        run.chat.append(run_case(part, "chat", case, partial(_linkage_case, guarded, part.server, f"call-l{n}", edit)))


class _InterruptWatch:
    """Remembers a Ctrl-C (SIGINT) for the length of the demo, wherever it lands.

    Python raises ``KeyboardInterrupt`` where the main thread happens to be, and one raised in a
    finalizer or a ``__del__`` (an abandoned stream's, an SDK client's) is printed with a traceback
    and ignored: the run would go on and end with a verdict on cases it cut short. The handler
    raises as the default one does, except in a ``__del__``, and always sets :attr:`seen`, which
    :meth:`check` (between the parts) and the demo read before giving a verdict. In a thread other
    than the main one (the demo embedded in a test) signals cannot be handled: nothing is installed.
    """

    def __init__(self) -> None:
        self.seen = False
        self._installed = False
        self._previous: Any = signal.SIG_DFL

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True
        if frame is not None and frame.f_code.co_name == "__del__":
            return  # Python would print it as ignored, with a traceback: the next check() raises it
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt

    def __enter__(self) -> None:
        try:
            previous = signal.signal(signal.SIGINT, self._handler)
        except ValueError:  # not the main thread
            return
        self._installed = True
        self._previous = signal.SIG_DFL if previous is None else previous  # None: not set from Python

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
