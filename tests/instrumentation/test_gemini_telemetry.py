"""A Gemini stream through the instrumentation: the candidate and call ordinal as the slot key, no
``gen_ai.tool.call.id`` for an id-less call, ``positional`` and ``drop_repeat`` counted on the call
span and on ``etf.tool_call.id_transitions``, and no rejected id or argument in any attribute."""

from __future__ import annotations

import pytest

from etf_otel.testing.gemini import call, chunk, leaf, stream
from tests.conftest import Captured
from tests.integrations.support import all_attribute_values

ARGUMENT = "CANARY-ARGUMENT"
REJECTED = "CANARY-REJECTED-ID"


def _calls(captured: Captured) -> list[dict[str, object]]:
    return [dict(span.attributes or {}) for span in captured.spans("assemble_tool_call")]


def test_id_less_calls_are_keyed_by_candidate_and_ordinal_and_counted_positional(captured: Captured) -> None:
    events = stream(
        chunk(call("get_weather", will_continue=True)),
        chunk(call(partial_args=[leaf("$.city", string=ARGUMENT)])),
        chunk(call("get_time", {"tz": ARGUMENT})),
    )
    for _ in captured.instrumentation().stream(iter(events), protocol="gemini"):
        pass
    calls = _calls(captured)
    assert [(c["etf.choice.index"], c["etf.tool_call.index"], c["etf.tool_call.verdict"]) for c in calls] == [
        (0, 0, "proposed"),
        (0, 1, "proposed"),
    ]
    assert all("gen_ai.tool.call.id" not in c and c["etf.id.positional"] == 1 for c in calls)
    (response,) = captured.spans("assemble_response")
    assert (response.attributes or {})["etf.protocol"] == "gemini"
    assert (response.attributes or {})["etf.stream.dispatchable"] is True
    positional = captured.metric_sum(
        "etf.tool_call.id_transitions", etf__id__transition="positional", etf__id__kind="absent"
    )
    assert positional == 2
    assert ARGUMENT not in repr(all_attribute_values(captured))


@pytest.mark.parametrize("allow", [[], ["drop_repeated_call"]])
def test_a_repeated_whole_call_with_drop_repeated_call(captured: Captured, allow: list[str]) -> None:
    events = stream(
        chunk(call("f", {"q": ARGUMENT}, id="k3xq9ab2")),
        chunk(call("f", {"q": ARGUMENT}, id="k3xq9ab2")),
        chunk(call("g", {}, id="c9", will_continue=True)),
        chunk(call(id=REJECTED)),  # id_conflict: rejected, never recorded
    )
    for _ in captured.instrumentation(allow=allow).stream(iter(events), protocol="gemini"):
        pass
    calls = _calls(captured)
    ids = [c.get("gen_ai.tool.call.id") for c in calls]
    if allow:
        assert ids == ["k3xq9ab2", "c9"] and calls[0]["etf.id.dropped_repeat"] == 1
    else:
        assert ids == ["k3xq9ab2", "k3xq9ab2", "c9"] and all("etf.id.dropped_repeat" not in c for c in calls)
    text = repr(all_attribute_values(captured))
    assert ARGUMENT not in text and REJECTED not in text
