"""Canaries for the Responses and Anthropic protocols: rejected ids, item ids, names and arguments
never reach a span, an event or a metric (docs/telemetry.md), whatever the stream does."""

from __future__ import annotations

from typing import Any

import pytest

from etf_otel.testing import anthropic, responses
from tests.conftest import Captured
from tests.integrations.support import all_attribute_values

ARGUMENT = "CANARY-ARGUMENT"
REJECTED = "CANARY-REJECTED-ID"
ALIAS = "fc_CANARY-ITEM-ID"

STREAMS: dict[str, tuple[str, list[Any]]] = {
    "responses: call_id changed on done": (
        "responses",
        responses.stream(
            responses.added(0, call_id="call_1", name="f", arguments="", id=ALIAS),
            responses.delta(0, '{"q":"' + ARGUMENT + '"}', ALIAS),
            responses.item_done(0, call_id=REJECTED, name="f", arguments='{"q":"' + ARGUMENT + '"}', id=ALIAS),
        ),
    ),
    "responses: call_id changed in the terminal output": (
        "responses",
        responses.stream(
            responses.call(0, "call_1", "f", ['{"q":"' + ARGUMENT + '"}'], item_id=ALIAS),
            end=responses.completed([responses.function_call(REJECTED, "f", '{"q":"' + ARGUMENT + '"}', id=ALIAS)]),
        ),
    ),
    "anthropic: reused block index": (
        "anthropic_messages",
        anthropic.stream(
            anthropic.tool_call(0, "toolu_01", "f", '{"q":"' + ARGUMENT + '"}'),
            anthropic.tool_call(0, REJECTED, "f", '{"q":"' + ARGUMENT + '"}'),
        ),
    ),
    "anthropic: max_tokens with a claimed input": (
        "anthropic_messages",
        anthropic.stream(anthropic.tool_call(0, "toolu_01", "f", input={"q": ARGUMENT}), stop_reason="max_tokens"),
    ),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_no_canary_reaches_telemetry(captured: Captured, name: str) -> None:
    protocol, events = STREAMS[name]
    for _ in captured.instrumentation().stream(iter(events), protocol=protocol):
        pass
    assert captured.spans("assemble_response"), "the response was not recorded at all"
    assert any((span.attributes or {}).get("etf.tool_call.verdict") == "rejected" for span in captured.spans())
    text = repr(all_attribute_values(captured)) + repr([span.name for span in captured.spans()])
    for canary in (ARGUMENT, REJECTED, ALIAS):
        assert canary not in text, f"{canary} leaked in {name}"
