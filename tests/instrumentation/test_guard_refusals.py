"""What a guard refusal tells the application: the tool, the call's index, the rules' category.

A refused call raises :class:`GuardRefusedError`; its message is what a developer (or, through
a framework's error result, the model) reads. It names the tool as the host was handed it, the
call's index in its response when a response proposed it, the category and what it means, and
for the conflicting-ids quirk the identity rules' cause (``id_conflict``) before the linkage word
the host alone would see (``orphaned_result``). Never the call id or the arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from etf_otel.core._vocabulary import ErrorCategory
from etf_otel.errors import GuardRefusedError
from etf_otel.integrations.openai import OpenAIInstrumentor, instrument_openai
from etf_otel.testing import QUIRK_TABLES, LocalChatServer, Script
from tests.conftest import Captured

CHAT = QUIRK_TABLES["chat_completions"]


@pytest.fixture
def instrumented(captured: Captured) -> Iterator[OpenAIInstrumentor]:
    instrumentor = instrument_openai(
        tracer_provider=captured.tracer_provider, meter_provider=captured.meter_provider, guard=True
    )
    try:
        yield instrumentor
    finally:
        instrumentor.uninstrument()


def _calls_of(quirk: str) -> list[Any]:
    """The tool calls the ``openai`` SDK's own stream helper assembles from the quirk stream."""
    with LocalChatServer() as server:
        server.enqueue(Script(events=CHAT[quirk]))
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "go"}]) as stream:
            for _ in stream:
                pass
            message = stream.get_final_completion().choices[0].message
        client.close()
    return list(message.tool_calls or [])


def _refusal(instrumented: OpenAIInstrumentor, call: Any) -> GuardRefusedError:
    host = instrumented.instrumentation.host(lambda call: "ran")
    with pytest.raises(GuardRefusedError) as refused:
        host(call)
    return refused.value


def test_the_conflicting_ids_quirk_is_refused_with_the_rules_cause_the_tool_and_its_index(
    instrumented: OpenAIInstrumentor,
) -> None:
    (call,) = _calls_of("conflicting ids")  # the SDK runs the two ids together: call_1call_2
    refused = _refusal(instrumented, call)
    assert (refused.category, refused.cause, refused.tool, refused.index) == (
        ErrorCategory.ORPHANED_RESULT,  # what the execution records (error.type), unchanged
        ErrorCategory.ID_CONFLICT,
        "get_a",
        0,
    )
    message = str(refused)
    assert message.startswith("etf-otel guard refused to execute a tool call (tool 'get_a', index 0 of its response)")
    assert message.index("id_conflict") < message.index("orphaned_result")
    assert call.id not in message and "call_1" not in message and call.function.arguments not in message


def test_a_rejected_call_is_refused_with_its_tool_index_and_category(instrumented: OpenAIInstrumentor) -> None:
    (call,) = _calls_of("cut mid-arguments")
    refused = _refusal(instrumented, call)
    assert (refused.category, refused.cause, refused.tool, refused.index) == (
        ErrorCategory.INVALID_ARGUMENTS,
        None,
        "get_a",
        0,
    )
    assert str(refused).startswith(
        "etf-otel guard refused to execute a tool call (tool 'get_a', index 0 of its response): invalid_arguments, "
    )
    assert call.function.arguments not in str(refused)


def test_an_unknown_id_is_orphaned_with_its_tool_and_no_index(captured: Captured) -> None:
    """No response proposed it: there is no index to give, and no rules' cause to claim."""
    host = captured.instrumentation(guard=True).host(lambda call: "ran")
    with pytest.raises(GuardRefusedError) as refused:
        host({"id": "call-never-proposed", "name": "read\x1b[2Jpage", "arguments": '{"secret": 1}'})
    assert (refused.value.category, refused.value.cause, refused.value.index) == (
        ErrorCategory.ORPHANED_RESULT,
        None,
        None,
    )
    assert str(refused.value) == (
        "etf-otel guard refused to execute a tool call (tool 'read\\x1b[2Jpage'): orphaned_result,"
        " its id is no call of a response this process saw"
    )


def test_a_call_without_an_id_names_the_tool() -> None:
    error = GuardRefusedError(ErrorCategory.MISSING_ID, tool="x" * 100)
    assert str(error) == (
        f"etf-otel guard refused to execute a tool call (tool '{'x' * 64}'): missing_id,"
        " it has no call id to match a proposal"
    )
