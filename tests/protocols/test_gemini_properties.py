"""Property tests of the Gemini adapter against a model written from docs/protocols.md ("Gemini").

Each generated scenario is a candidate's calls, whole (``args``) or streamed (``partialArgs``
leaves: strings cut into pieces, numbers, booleans, nulls, and a terminator that is either an
empty ``functionCall`` or the last leaf's own part), packed several to a chunk or one per chunk,
with ids on every call or on none, text and thought parts between them, and an end (``STOP``,
a non-``STOP`` reason, an in-band error, nothing). What the response must become (the calls by
ordinal, their ids, their arguments as JSON values, dispatchable, the stream state) is computed
here from the scenario, without etf_otel. A second family feeds arbitrary JSON-shaped chunks
and only checks that nothing raises and that a dispatchable response is whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etf_otel import StreamState, Transition
from etf_otel.protocols._gemini import GeminiAssembler
from etf_otel.testing.gemini import call, chunk, error, leaf, text

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=False, allow_infinity=False)
)
values = st.one_of(scalars, st.text(max_size=8))
objects = st.dictionaries(names, values, max_size=4)


@dataclass
class Call:
    name: str
    value: dict[str, Any]
    streamed: bool
    own_part_terminator: bool
    """Streamed: the terminator is an empty ``functionCall`` (else the last leaf's part closes the call)."""


calls = st.builds(Call, names, objects, st.booleans(), st.booleans())


def _leaves(value: dict[str, Any], draw: Any) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for key, item in value.items():
        path = f"$.{key}" if draw(st.booleans()) else f"$['{key}']"
        if isinstance(item, str):
            cuts = sorted(draw(st.lists(st.integers(0, len(item)), max_size=3)))
            pieces = [item[a:b] for a, b in zip([0, *cuts], [*cuts, len(item)], strict=True)]
            if draw(st.booleans()):
                pieces.append("")  # the recorded streams close every string with an empty piece
            entries += [leaf(path, string=p, will_continue=True) for p in pieces[:-1]]
            entries.append(leaf(path, string=pieces[-1]))
        elif item is None:
            entries.append(leaf(path, null=draw(st.sampled_from([None, "NULL_VALUE"]))))
        elif isinstance(item, bool):
            entries.append(leaf(path, boolean=item))
        else:
            entries.append(leaf(path, number=item))
    return entries


@st.composite
def scenarios(draw: Any) -> tuple[list[Any], list[Call], list[str | None], str]:
    planned = draw(st.lists(calls, max_size=5))
    with_ids = draw(st.booleans())
    ids = [f"c{n}" if with_ids else None for n in range(len(planned))]
    parts: list[dict[str, Any]] = []
    for planned_call, call_id in zip(planned, ids, strict=True):
        if draw(st.booleans()):
            parts.append(draw(st.sampled_from([text("x"), {"thought": True, "text": "t"}])))
        identity = {"id": call_id} if call_id is not None else {}
        if not planned_call.streamed:
            parts.append(call(planned_call.name, planned_call.value, **identity))
            continue
        entries = _leaves(planned_call.value, draw)
        parts.append(call(planned_call.name, will_continue=True, **identity))
        groups = draw(st.lists(st.integers(1, 3), min_size=len(entries), max_size=len(entries)))
        at = 0
        pieces: list[list[dict[str, Any]]] = []
        for size in groups:
            if at < len(entries):
                pieces.append(entries[at : at + size])
                at += size
        for group in pieces:
            parts.append(call(partial_args=group, will_continue=True))
        if planned_call.own_part_terminator or not pieces:
            parts.append(call())
        else:
            parts[-1]["functionCall"].pop("willContinue")
    size = draw(st.integers(1, 3))
    chunks: list[Any] = [chunk(*parts[at : at + size]) for at in range(0, len(parts), size)]
    end = draw(st.sampled_from(["STOP", "STOP", "MAX_TOKENS", "MALFORMED_FUNCTION_CALL", "error", "eof"]))
    if end == "error":
        chunks.append(error())
    elif end != "eof":
        chunks.append(chunk(finish_reason=end))
    return chunks, planned, ids, end


@SETTINGS
@given(scenarios())
def test_the_calls_are_what_the_scenario_sent(scenario: tuple[list[Any], list[Call], list[str | None], str]) -> None:
    chunks, planned, ids, end = scenario
    assembler = GeminiAssembler()
    for event in chunks:
        assembler.feed(event)
    result = assembler.finish()
    state = {"STOP": StreamState.COMPLETED, "error": StreamState.FAILED, "eof": StreamState.TRUNCATED}
    assert result.state is state.get(end, StreamState.COMPLETED)
    assert [(c.index, c.id, c.name) for c in result.calls] == [
        (n, call_id, p.name) for n, (p, call_id) in enumerate(zip(planned, ids, strict=True))
    ]
    if end in ("STOP", "MAX_TOKENS", "MALFORMED_FUNCTION_CALL"):
        assert [json.loads(c.arguments) for c in result.calls] == [p.value for p in planned]
        positional = [c.transition_count(Transition.POSITIONAL) for c in result.calls]
        assert positional == [0 if call_id else 1 for call_id in ids]
    assert result.dispatchable == (end == "STOP" and bool(planned))
    assert all(call.proposed is result.dispatchable for call in result.calls)  # proposed means "may run"


_KEYS = (
    "candidates",
    "content",
    "parts",
    "functionCall",
    "name",
    "id",
    "args",
    "partialArgs",
    "willContinue",
    "jsonPath",
    "stringValue",
    "numberValue",
    "boolValue",
    "nullValue",
    "index",
    "finishReason",
    "responseId",
    "error",
    "promptFeedback",
    "blockReason",
    "role",
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.sampled_from(["$.a", "$.a[0]", "STOP"])),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.sampled_from(_KEYS), children, max_size=4)
    ),
    max_leaves=16,
)


@SETTINGS
@given(st.lists(json_values, max_size=8))
def test_arbitrary_json_never_raises_and_a_dispatchable_response_is_whole(events: list[Any]) -> None:
    assembler = GeminiAssembler()
    for event in events:
        assembler.feed(event)
    result = assembler.finish()
    if result.dispatchable:
        assert result.state is StreamState.COMPLETED and result.rejections == ()
        for proposal in result.calls:
            assert proposal.proposed and proposal.name and isinstance(json.loads(proposal.arguments), dict)
    else:
        assert not any(call.proposed for call in result.calls)
