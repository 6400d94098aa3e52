"""``etf-otel demo``: the Gemini part, through ``client.models.generate_content_stream`` of the real
``google-genai`` client.

Parallel calls arrive one per chunk, each as the chunk's first part: the SDK hands the app every
``functionCall`` part as it came. Valid calls (with ids, as Gemini 3.1+ sends them) run through the
guarded host and their results go back; a call withheld by ``MAX_TOKENS`` and a Vertex
``partialArgs`` stream whose string never closed are caught.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from etf_otel.cli.demo._cases import DISPATCHED, READ, SAVE, USER, Part, ProtocolCase, hand_to_host, run_case
from etf_otel.testing import LocalChatServer, Script
from etf_otel.testing import gemini as g

__all__ = ["GEMINI_MISSING", "run_gemini"]

GEMINI_MISSING = "Gemini: skipped, no google-genai; pip install 'etf-otel[google-genai]'"
MODEL = "gemini-demo"


def _cases() -> list[tuple[ProtocolCase, Script]]:
    read, save = json.loads(READ), json.loads(SAVE)
    open_string = [g.leaf("$.path", string="source", will_continue=True)]
    return [
        (
            ProtocolCase("parallel calls, one per chunk", DISPATCHED),
            Script(
                events=g.stream(
                    g.chunk(g.call("read_source", read, id="call_g1")),
                    g.chunk(g.call("save_report", save, id="call_g2")),
                )
            ),  # fmt: skip
        ),
        (
            ProtocolCase("call withheld by MAX_TOKENS", "incomplete_response"),
            Script(events=g.stream(g.chunk(g.call("read_source", {}, id="call_g3")), finish_reason="MAX_TOKENS")),
        ),
        (
            ProtocolCase("Vertex partialArgs string never closed", "invalid_arguments"),
            Script(
                events=g.stream(
                    g.chunk(g.call("read_source", will_continue=True)), g.chunk(g.call(partial_args=open_string))
                )
            ),  # fmt: skip
        ),
    ]


def _describe(call: Any) -> str:
    arguments = json.dumps(call.args) if call.args is not None else "(no args)"
    return f"{call.id or '(no id)'} {call.name or '(no name)'} {arguments}"


def _case(client: Any, config: Any, host: Any, server: LocalChatServer, case: ProtocolCase) -> None:
    """One streamed turn: every ``functionCall`` part the SDK hands over goes to the host, results back."""
    chunks = list(client.models.generate_content_stream(model=MODEL, contents=USER, config=config))
    calls = [call for chunk in chunks for call in chunk.function_calls or ()]
    reasons = [c.finish_reason.value for chunk in chunks for c in chunk.candidates or () if c.finish_reason]
    case.sdk = "\n".join(_describe(call) for call in calls) or "no call"
    if reasons and reasons[-1] != "STOP":
        case.sdk += f"\n(finishReason {reasons[-1]})"
    answers: list[dict[str, Any]] = []
    for call in calls:
        if call.name:
            output = hand_to_host(case, host, call)
            if output is not None:
                answers.append({"functionResponse": {"id": call.id, "name": call.name, "response": {"result": output}}})
    if answers:
        server.enqueue(Script(events=g.stream(g.chunk(g.text("Done.")))))
        parts = [{"functionCall": call.model_dump(exclude_none=True)} for call in calls]
        model_turn = {"role": "model", "parts": parts}
        history = [{"role": "user", "parts": [{"text": USER}]}, model_turn, {"role": "user", "parts": answers}]
        for _ in client.models.generate_content_stream(model=MODEL, contents=history, config=config):
            pass


def run_gemini(
    part: Part, tracer_provider: TracerProvider, meter_provider: MeterProvider, provider_name: str
) -> list[ProtocolCase] | str:
    """The Gemini cases through the instrumented ``google-genai`` client, or the line saying why they were skipped."""
    try:
        from google import genai
        from google.genai import types
    except ImportError:
        return GEMINI_MISSING
    from etf_otel.integrations.google_genai import GoogleGenAIInstrumentor

    instrumentor = GoogleGenAIInstrumentor()
    instrumentor.instrument(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        provider_name=provider_name,
        allow=(),  # the strict rules, whatever OTEL_INSTRUMENTATION_ETF_ALLOW says
        skip_dep_check=True,
    )
    try:
        instrumentation = instrumentor.instrumentation
        if instrumentation is None:  # instrument() declined
            return "Gemini: skipped, the google-genai client is instrumented by another setup"
        host = instrumentation.host(part.host, guard=True)
        options = types.HttpOptions(base_url=part.server.root_url, api_version="v1beta")
        client = genai.Client(api_key="etf-demo", http_options=options)
        afc = types.AutomaticFunctionCallingConfig(disable=True)  # the app runs the calls: through its host
        config = types.GenerateContentConfig(automatic_function_calling=afc)
        cases = []
        for case, script in _cases():
            part.server.enqueue(script)
            cases.append(run_case(part, "gemini", case, partial(_case, client, config, host, part.server)))
        return cases
    finally:
        instrumentor.uninstrument()
