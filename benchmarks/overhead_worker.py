"""One configuration of the end-to-end benchmark, in its own process: ``overhead_worker.py CONFIG CASE...``.

benchmarks/overhead.py starts one worker per configuration (the bare clients, etf-otel, the
floor, each peer instrumentation): the instrumentations patch the same client classes, so
each gets a process of its own, instrumented once for its whole life. The parent drives them
round by round, one at a time, over a pipe of JSON lines, so that every configuration runs
in the same conditions and only one of them runs at any moment:

* on start the worker builds the in-memory clients of the cases given (``chat_4x50``, ...),
  instruments them, reads each twice to warm up and counts the spans one response makes, then
  prints ``{"ok": true, "spans": {case: n}, "versions": {...}}``, or ``{"ok": false,
  "status": "not installed" | "failed", "error": ...}`` and exits;
* ``{"run": CASE, "batch": N}``: reads one response unmeasured (every configuration comes to
  it after another process ran), then N responses back to back, and answers ``{"seconds": s}``
  (per response); an empty line or end of input ends the worker.

A peer worker runs with the Python of a peers' venv (scripts/install-bench-peers: the peers' venv,
and beside it OpenTelemetry google-genai's, whose util-genai the other peers cannot share): this
module imports only the clients, the OpenTelemetry SDK and the peer it is asked for; etf_otel
only for the etf-otel, floor and tracker configurations, in the project's venv.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from overhead_streams import ALL_PROTOCOLS, PROJECT_PROTOCOLS, Case, consumer  # type: ignore[import-not-found]

# --- the configurations -----------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One configuration: where it runs, what it instruments, and with which distributions."""

    key: str
    label: str
    venv: str  # "project" (the benchmark's interpreter), "peers" or "otel_genai" (scripts/install-bench-peers)
    protocols: tuple[str, ...]
    distributions: tuple[str, ...] = ()
    peer: bool = True

    @property
    def bare(self) -> str:
        """The bare configuration of the same venv: this one's ratios are read against it."""
        return {"project": "bare", "peers": "bare_peers", "otel_genai": "bare_otel_genai"}[self.venv]


CONFIGS = {
    config.key: config
    for config in (
        Config("bare", "bare client", "project", PROJECT_PROTOCOLS, peer=False),
        Config("floor", "floor: etf-otel's spans, only", "project", PROJECT_PROTOCOLS, ("etf-otel",), peer=False),
        Config(
            "tracker", "floor + identity tracking per index", "project", PROJECT_PROTOCOLS, ("etf-otel",), peer=False
        ),
        Config("etf_otel", "etf-otel", "project", PROJECT_PROTOCOLS, ("etf-otel",), peer=False),
        Config(
            "otel_genai_openai",
            "OpenTelemetry genai-openai (its successor)",
            "project",
            ("chat", "responses"),
            ("opentelemetry-instrumentation-genai-openai", "opentelemetry-util-genai"),
        ),
        Config("bare_peers", "bare client, peers' venv", "peers", ALL_PROTOCOLS, peer=False),
        Config(
            "otel_openai_v2",
            "OpenTelemetry openai-v2 (deprecated)",
            "peers",
            ("chat",),
            ("opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai"),
        ),
        Config(
            "openinference",
            "OpenInference (Arize)",
            "peers",
            ALL_PROTOCOLS,
            (
                "openinference-instrumentation-openai",
                "openinference-instrumentation-anthropic",
                "openinference-instrumentation-google-genai",
            ),
        ),
        Config(
            "openllmetry",
            "OpenLLMetry (Traceloop)",
            "peers",
            ALL_PROTOCOLS,
            (
                "opentelemetry-instrumentation-openai",
                "opentelemetry-instrumentation-anthropic",
                "opentelemetry-instrumentation-google-generativeai",
            ),
        ),
        Config(
            "bare_otel_genai", "bare client, OpenTelemetry google-genai's venv", "otel_genai", ("gemini",), peer=False
        ),
        Config(
            "otel_google_genai",
            "OpenTelemetry google-genai",
            "otel_genai",
            ("gemini",),
            ("opentelemetry-instrumentation-google-genai", "opentelemetry-util-genai"),
        ),
    )
}


# --- telemetry --------------------------------------------------------------------------------


class CountingExporter(SpanExporter):
    """Exports nowhere; counts the spans, off the measured thread (the batch processor's)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


@dataclass
class Providers:
    """An SDK tracer provider with a batch processor (exporting nowhere) and an SDK meter provider."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporter: CountingExporter

    @classmethod
    def create(cls) -> Providers:
        exporter = CountingExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()]), exporter)

    def spans_of(self, read: Callable[[], object]) -> int:
        """How many spans one call of ``read`` ends."""
        self.tracer_provider.force_flush()
        before = self.exporter.spans
        read()
        self.tracer_provider.force_flush()
        return self.exporter.spans - before


# --- instrumenting ----------------------------------------------------------------------------


def _etf_otel_instrumentor(protocol: str) -> Any:
    from etf_otel.integrations.anthropic._instrumentor import AnthropicInstrumentor
    from etf_otel.integrations.bedrock._instrumentor import BedrockInstrumentor
    from etf_otel.integrations.google_genai._instrumentor import GoogleGenAIInstrumentor
    from etf_otel.integrations.openai._instrumentor import OpenAIInstrumentor

    instrumentors = {
        "anthropic": AnthropicInstrumentor,
        "gemini": GoogleGenAIInstrumentor,
        "bedrock": BedrockInstrumentor,
    }
    return instrumentors.get(protocol, OpenAIInstrumentor)()


def instrument_etf_otel(providers: Providers, cases: Sequence[Case]) -> None:
    for instrumentor in map(_etf_otel_instrumentor, ("chat", "anthropic", "gemini", "bedrock")):
        instrumentor.instrument(tracer_provider=providers.tracer_provider, meter_provider=providers.meter_provider)


def instrument_otel_openai_v2(providers: Providers, cases: Sequence[Case]) -> None:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=providers.tracer_provider, meter_provider=providers.meter_provider)


def instrument_otel_genai_openai(providers: Providers, cases: Sequence[Case]) -> None:
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=providers.tracer_provider, meter_provider=providers.meter_provider)


def instrument_openinference(providers: Providers, cases: Sequence[Case]) -> None:
    from openinference.instrumentation.anthropic import AnthropicInstrumentor
    from openinference.instrumentation.google_genai import GoogleGenAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    for instrumentor in (OpenAIInstrumentor(), AnthropicInstrumentor(), GoogleGenAIInstrumentor()):
        instrumentor.instrument(tracer_provider=providers.tracer_provider)  # no metrics


def instrument_openllmetry(providers: Providers, cases: Sequence[Case]) -> None:
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor
    from opentelemetry.instrumentation.google_generativeai import GoogleGenerativeAiInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    for instrumentor in (OpenAIInstrumentor(), AnthropicInstrumentor(), GoogleGenerativeAiInstrumentor()):
        instrumentor.instrument(tracer_provider=providers.tracer_provider, meter_provider=providers.meter_provider)


def instrument_otel_google_genai(providers: Providers, cases: Sequence[Case]) -> None:
    from opentelemetry.instrumentation.google_genai import GoogleGenAiSdkInstrumentor

    # Its metadata asks for google-genai < 3; without skip_dep_check it would decline to instrument 3.x.
    GoogleGenAiSdkInstrumentor().instrument(
        tracer_provider=providers.tracer_provider, meter_provider=providers.meter_provider, skip_dep_check=True
    )


class Floor:
    """The floor: wrappers of the clients' request methods that emit, when the response has been
    read, the very spans etf-otel emits for that response (names, attributes, parent), and do
    nothing else.

    Wrapped: the three ``create`` methods (``stream=True`` or not), google-genai's
    ``Models.generate_content_stream`` and ``Models.generate_content``, and botocore's
    ``BaseClient._make_api_call`` (where etf-otel hooks boto3) for ``ConverseStream``, whose
    ``stream`` is replaced by a generator over it, and ``Converse``. A stream's spans are
    emitted when it ends, a body's when the call returns. The spans are captured once, at start,
    from etf-otel itself (through an in-memory exporter; etf-otel is then uninstrumented): what
    docs/telemetry.md asks for, with the attributes etf-otel sets, per protocol and shape. No
    identity rules, no metrics, no linkage. No instrumentation that records those spans with the
    SDK can cost less; etf-otel's ratio is read against it.
    """

    def __init__(self, providers: Providers, cases: Sequence[Case]) -> None:
        self.spans = {case.key: self._capture(case) for case in cases}
        self.tracer = providers.tracer_provider.get_tracer("etf_otel")
        self.current = ""
        self._wrap()

    def select(self, key: str) -> None:
        """The case whose spans the next responses emit."""
        self.current = key

    @staticmethod
    def _capture(case: Case) -> list[tuple[str, dict[str, Any], bool]]:
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        meter_provider = MeterProvider()
        instrumentor = _etf_otel_instrumentor(case.protocol)
        instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        try:
            consumer(case)()
        finally:
            instrumentor.uninstrument()
        return [(span.name, dict(span.attributes or {}), span.parent is None) for span in exporter.get_finished_spans()]

    def _emit(self, started: int) -> None:
        spans = self.spans[self.current]
        root = next((span for span in spans if span[2]), None)
        if root is None:
            return
        now = time.time_ns()
        response = self.tracer.start_span(root[0], kind=SpanKind.INTERNAL, start_time=started, attributes=root[1])
        context = trace.set_span_in_context(response)
        for name, attributes, is_root in spans:
            if not is_root:
                child = self.tracer.start_span(
                    name, context=context, kind=SpanKind.INTERNAL, start_time=started, attributes=attributes
                )
                child.end(end_time=now)
        response.end(end_time=now)

    def _create(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """openai's and anthropic's ``create``: a stream when the request says ``stream=True``."""
        if kwargs.get("stream") is True:
            return self._stream(wrapped, instance, args, kwargs)
        return self._body(wrapped, instance, args, kwargs)

    def _stream(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        started = time.time_ns()

        def observed(stream: Any) -> Any:
            yield from stream
            self._emit(started)

        return observed(wrapped(*args, **kwargs))

    def _body(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        started = time.time_ns()
        body = wrapped(*args, **kwargs)
        self._emit(started)
        return body

    def _converse(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """botocore's ``_make_api_call(operation_name, api_params)``: Converse observed, anything else passed."""
        operation = args[0] if args else kwargs.get("operation_name")
        if operation == "Converse":
            return self._body(wrapped, instance, args, kwargs)
        if operation != "ConverseStream":
            return wrapped(*args, **kwargs)
        answered: list[Any] = []

        def call() -> Any:  # the request, made inside _stream (after its start time): its stream, kept
            answered.append(wrapped(*args, **kwargs))
            return answered[0]["stream"]

        observed = self._stream(lambda: call(), instance, (), {})
        answered[0]["stream"] = observed
        return answered[0]

    def _wrap(self) -> None:
        import wrapt

        for module, name, wrapper in (
            ("botocore.client", "BaseClient._make_api_call", self._converse),
            ("openai.resources.chat.completions", "Completions.create", self._create),
            ("openai.resources.responses.responses", "Responses.create", self._create),
            ("anthropic.resources.messages.messages", "Messages.create", self._create),
            ("google.genai.models", "Models.generate_content_stream", self._stream),
            ("google.genai.models", "Models.generate_content", self._body),
        ):
            wrapt.wrap_function_wrapper(module, name, wrapper)


class Tracker(Floor):
    """The floor plus identity tracking per index: issue 20's "minimal wrapper", measured.

    Per event it reads what identity tracking needs and nothing else: the slot key (Chat
    ``(choice, index)``, Responses ``output_index``, Anthropic block ``index``, Gemini the call's
    position in its candidate, which the wire does not carry: a part that opens a call takes the
    next position, and the parts of a streamed call join it until one says no ``will_continue``),
    the first id of each slot (a later different one only counted) and the argument pieces
    appended to a list; when the stream ends, the floor's spans. On a body, each call's id and
    arguments read once, then the spans. No diagnostics, no validation, no linkage, no metrics,
    no finish or end rules. Any implementation of the identity rules does at least this, so its
    ratio says how much of the floor targets per-event tracking alone leaves (a reference line,
    not a target).
    """

    def _stream(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        started = time.time_ns()
        track = _TRACKERS[type(instance).__name__]

        def observed(stream: Any) -> Any:
            slots: dict[Any, list[Any]] = {}
            for event in stream:
                track(event, slots)
                yield event
            self._emit(started)

        return observed(wrapped(*args, **kwargs))

    def _body(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        started = time.time_ns()
        body = wrapped(*args, **kwargs)
        _BODY_READERS[type(instance).__name__](body)
        self._emit(started)
        return body


def _track_chat(chunk: Any, slots: dict[Any, list[Any]]) -> None:
    for choice in chunk.choices:
        tool_calls = choice.delta.tool_calls
        if tool_calls:
            for fragment in tool_calls:
                key = (choice.index, fragment.index)
                slot = slots.get(key)
                function = fragment.function
                if slot is None:
                    slots[key] = [fragment.id, [function.arguments or ""], 0]
                else:
                    if fragment.id and fragment.id != slot[0]:
                        slot[2] += 1
                    slot[1].append(function.arguments or "")


def _track_responses(event: Any, slots: dict[Any, list[Any]]) -> None:
    kind = event.type
    if kind == "response.function_call_arguments.delta":
        slots[event.output_index][1].append(event.delta)
    elif kind == "response.output_item.added" and event.item.type == "function_call":
        slots[event.output_index] = [event.item.call_id, [], 0]


def _track_anthropic(event: Any, slots: dict[Any, list[Any]]) -> None:
    kind = event.type
    if kind == "content_block_delta":
        delta = event.delta
        if delta.type == "input_json_delta":
            slots[event.index][1].append(delta.partial_json)
    elif kind == "content_block_start" and event.content_block.type == "tool_use":
        slots[event.index] = [event.content_block.id, [], 0]


def _track_gemini(chunk: Any, slots: dict[Any, list[Any]]) -> None:
    """``slots[candidate]``: the streamed call open in the candidate, then its calls in order (key: position)."""
    for candidate in chunk.candidates or ():
        content = candidate.content
        if content is None:
            continue
        calls = slots.get(candidate.index or 0)
        for part in content.parts or ():
            call = part.function_call
            if call is None:
                continue
            if calls is None:
                calls = slots[candidate.index or 0] = [None]
            slot = calls[0]
            if slot is None:  # a head opens the candidate's next position
                slot = [call.id, [call.partial_args or call.args], 0]
                calls.append(slot)
                if call.will_continue:
                    calls[0] = slot
                continue
            if call.id and call.id != slot[0]:
                if slot[0] is None:
                    slot[0] = call.id
                else:
                    slot[2] += 1
            if call.partial_args:
                slot[1].append(call.partial_args)
            if not call.will_continue:
                calls[0] = None


def _track_bedrock(event: Any, slots: dict[Any, list[Any]]) -> None:
    """A ``converse_stream`` event (botocore's dict, one key): ``toolUse`` blocks keyed by ``contentBlockIndex``."""
    delta = event.get("contentBlockDelta")
    if delta is not None:
        tool_use = delta["delta"].get("toolUse")
        if tool_use is not None:
            slots[delta["contentBlockIndex"]][1].append(tool_use.get("input", ""))
        return
    start = event.get("contentBlockStart")
    if start is not None:
        tool_use = start["start"].get("toolUse")
        if tool_use is not None:
            slots[start["contentBlockIndex"]] = [tool_use["toolUseId"], [], 0]


_TRACKERS: dict[str, Callable[[Any, dict[Any, list[Any]]], None]] = {
    "Completions": _track_chat,
    "Responses": _track_responses,
    "Messages": _track_anthropic,
    "Models": _track_gemini,
    "BedrockRuntime": _track_bedrock,
}


def _read_chat(completion: Any) -> None:
    for choice in completion.choices:
        for call in choice.message.tool_calls or ():
            _ = call.id, call.function.arguments


def _read_responses(response: Any) -> None:
    for item in response.output:
        if item.type == "function_call":
            _ = item.call_id, item.arguments


def _read_anthropic(message: Any) -> None:
    for block in message.content:
        if block.type == "tool_use":
            _ = block.id, block.input


def _read_gemini(response: Any) -> None:
    for candidate in response.candidates or ():
        for part in candidate.content.parts or ():
            call = part.function_call
            if call is not None:
                _ = call.id, call.args


def _read_bedrock(response: Any) -> None:
    for block in response["output"]["message"]["content"]:
        tool_use = block.get("toolUse")
        if tool_use is not None:
            _ = tool_use["toolUseId"], tool_use["input"]


_BODY_READERS: dict[str, Callable[[Any], None]] = {
    "Completions": _read_chat,
    "Responses": _read_responses,
    "Messages": _read_anthropic,
    "Models": _read_gemini,
    "BedrockRuntime": _read_bedrock,
}


INSTRUMENT: dict[str, Callable[[Providers, Sequence[Case]], object]] = {
    "bare": lambda providers, cases: None,
    "bare_peers": lambda providers, cases: None,
    "floor": Floor,
    "tracker": Tracker,
    "etf_otel": instrument_etf_otel,
    "otel_openai_v2": instrument_otel_openai_v2,
    "otel_genai_openai": instrument_otel_genai_openai,
    "openinference": instrument_openinference,
    "openllmetry": instrument_openllmetry,
    "bare_otel_genai": lambda providers, cases: None,
    "otel_google_genai": instrument_otel_google_genai,
}


# --- the worker -------------------------------------------------------------------------------


def versions(config: Config) -> dict[str, str]:
    out = {}
    for name in ("openai", "anthropic", "google-genai", "opentelemetry-sdk", *config.distributions):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def timed(read: Callable[[], object], batch: int) -> float:
    """Seconds per response over ``batch`` responses, after one unmeasured."""
    read()
    start = time.perf_counter()
    for _ in range(batch):
        read()
    return (time.perf_counter() - start) / batch


def serve(config: Config, cases: Sequence[Case], reply: Callable[[dict[str, Any]], None]) -> None:
    missing = [name for name, version in versions(config).items() if version == "not installed"]
    if missing:
        reply({"ok": False, "status": "not installed", "error": f"not installed: {', '.join(missing)}"})
        return
    providers = Providers.create()
    readers = {case.key: consumer(case) for case in cases}
    try:
        instrumented = INSTRUMENT[config.key](providers, cases)
        select = getattr(instrumented, "select", lambda key: None)
        spans = {}
        for key, read in readers.items():  # warm up (imports, caches, the first span of each kind), count
            select(key)
            read()
            read()
            spans[key] = providers.spans_of(read)
    except ImportError as error:
        reply({"ok": False, "status": "not installed", "error": f"{type(error).__name__}: {error}"})
        return
    except Exception as error:  # reported to the parent, which shows the configuration as failed
        reply({"ok": False, "status": "failed", "error": f"{type(error).__name__}: {error}"})
        return
    reply({"ok": True, "spans": spans, "versions": versions(config), "python": sys.executable})
    for line in sys.stdin:
        if not line.strip():
            break
        command = json.loads(line)
        select(command["run"])
        reply({"seconds": timed(readers[command["run"]], command["batch"])})
    providers.tracer_provider.shutdown()
    providers.meter_provider.shutdown()


def main(argv: Sequence[str]) -> int:
    logging.getLogger("opentelemetry").setLevel(logging.ERROR)  # dropped-span notices under load
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # whatever an instrumentation prints stays off the channel

    def reply(message: dict[str, Any]) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    serve(CONFIGS[argv[0]], [Case.parse(key) for key in argv[1:]], reply)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
