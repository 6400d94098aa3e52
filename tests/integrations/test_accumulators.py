"""The SDKs' own accumulators beside an instrumentor: each event goes through the rules once.

With the instrumentor active the raw stream a helper reads is already observed; the
comparison reuses that observer's assembly instead of feeding the same events to the rules a
second time. The rules' adapters are counted (``feed`` per event) with and without the
comparison, over the same scripted stream; and the state's proxy, handing each chunk nowhere,
adds one frame per chunk to the SDK's own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from etf_otel.integrations import anthropic as etf_anthropic
from etf_otel.integrations import openai as etf_openai
from etf_otel.integrations._accumulators import observed_accumulator
from etf_otel.integrations.openai._state import OPENAI_STATE_ADAPTER
from etf_otel.protocols import ANTHROPIC_MESSAGES, CHAT_COMPLETIONS, RESPONSES, WireProtocol
from etf_otel.testing import chat
from etf_otel.testing._quirks import ANTHROPIC_QUIRK_STREAMS, QUIRK_STREAMS, RESPONSES_QUIRK_STREAMS
from etf_otel.testing._server import LocalChatServer, Script
from tests.integrations.support import divergence_kinds

from ..conftest import Captured


def _chat(server: LocalChatServer, wrap: Callable[[Any], Any]) -> None:
    server.enqueue(Script(events=[e for e in QUIRK_STREAMS["repeated names"] if isinstance(e, (dict, str))]))
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    with wrap(client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}])) as stream:
        stream.until_done()


def _responses(server: LocalChatServer, wrap: Callable[[Any], Any]) -> None:
    server.enqueue(Script(events=RESPONSES_QUIRK_STREAMS["call_id changed in response.completed"], named=True))  # type: ignore[arg-type]
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    with wrap(client.responses.stream(model="m", input="hi")) as stream:
        stream.until_done()


def _messages(server: LocalChatServer, wrap: Callable[[Any], Any]) -> None:
    server.enqueue(Script(events=ANTHROPIC_QUIRK_STREAMS["delta after content_block_stop"], named=True))  # type: ignore[arg-type]
    client = anthropic.Anthropic(base_url=server.root_url, api_key="test", max_retries=0)
    manager = client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    with wrap(manager) as stream:
        stream.until_done()


CASES = {
    "chat completions": (_chat, CHAT_COMPLETIONS, etf_openai, ["name_concatenated"]),
    "responses": (_responses, RESPONSES, etf_openai, ["id_replaced"]),
    "anthropic messages": (_messages, ANTHROPIC_MESSAGES, etf_anthropic, ["arguments_differ"]),
}


def _feeds(monkeypatch: pytest.MonkeyPatch, protocol: WireProtocol) -> list[object]:
    """Every event the rules of ``protocol`` are fed, from now on."""
    fed: list[object] = []
    assembler = protocol.assembler
    original = assembler.feed  # type: ignore[attr-defined]

    def feed(self: Any, event: object) -> None:
        fed.append(event)
        original(self, event)

    monkeypatch.setattr(assembler, "feed", feed)
    return fed


@pytest.mark.parametrize("case", list(CASES))
def test_the_comparison_runs_no_rule_a_second_time(
    captured: Captured, server: LocalChatServer, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    run, protocol, package, kinds = CASES[case]
    fed = _feeds(monkeypatch, protocol)
    instrumentor = package.instrument_openai if package is etf_openai else package.instrument_anthropic
    active = instrumentor(tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider)
    try:
        run(server, lambda manager: manager)
        alone = len(fed)
        fed.clear()
        with captured.tracer_provider.get_tracer("test").start_as_current_span("application"):  # holds the divergence
            run(server, lambda manager: package.instrument_accumulator(manager, instrumentation=active.instrumentation))
    finally:
        active.uninstrument()
    assert alone > 0
    assert len(fed) == alone  # once per event: the instrumentor's run, reused by the comparison
    assert divergence_kinds(captured) == kinds  # and the comparison still found the divergence
    assert len(captured.spans("assemble_response")) == 2  # one per response, never two


def _python_calls(call: Callable[[], object]) -> int:
    """How many Python frames ``call()`` runs (``sys.setprofile`` sees each), itself excluded."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        count += event == "call"

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return count - 1


def test_beside_an_observed_stream_the_state_costs_one_frame_per_chunk(captured: Captured) -> None:
    """The proxy's own ``handle_chunk`` and nothing else: the rules were fed by the stream's observer."""
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    etf = captured.instrumentation()
    chunks = [
        ChatCompletionChunk.model_validate(chat.chunk(chat.fragment(0, "call_1", "get_weather", '{"city":'))),
        ChatCompletionChunk.model_validate(chat.chunk(chat.fragment(0, arguments='"Paris"}'))),
    ]
    bare = ChatCompletionStreamState()
    observed = observed_accumulator(
        etf,
        ChatCompletionStreamState(),
        OPENAI_STATE_ADAPTER,
        CHAT_COMPLETIONS,
        record_response=False,
        stream_observer=etf.observer(),
    )
    bare.handle_chunk(chunks[0])
    observed.handle_chunk(chunks[0])
    alone = _python_calls(lambda: bare.handle_chunk(chunks[1]))
    assert _python_calls(lambda: observed.handle_chunk(chunks[1])) == alone + 1
