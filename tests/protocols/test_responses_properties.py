"""Property tests of the Responses adapter over random interleavings of calls.

Each scenario is a few function calls (each its own ordered events: ``output_item.added``,
deltas, ``arguments.done``, ``output_item.done``), message items in between, interleaved at
random, sometimes corrupted the ways real servers corrupt them (a delta before its item, a
stray delta after ``arguments.done``, an item id naming another call, a changed ``call_id``, an
incomplete item, a splice, another end, a terminal output that disagrees), optionally with the
compatibility rules on. The expected outcome is computed by :class:`Model`, written here from
the protocol's rules (docs/protocols.md: routing, identity, snapshots, ends) without calling
``etf_otel``; the adapter must agree on dispatchability, ids and arguments.

A second family feeds arbitrary JSON-shaped events and checks that nothing raises.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etf_otel import ErrorCategory
from etf_otel.protocols._responses import ResponsesAssembler
from etf_otel.testing.responses import (
    MISSING,
    added,
    arguments_done,
    completed,
    created,
    delta,
    error,
    failed,
    function_call,
    incomplete,
    item_done,
    message_item,
    text_delta,
)

BUFFER, DROP = "buffer_early_deltas", "drop_post_done_delta"
CALL_IDS = ("call_a", "call_b", "call_c", "call_d")
SHARED_ITEM_ID = "__fake_id__"


# --- the independent model ---------------------------------------------------------------------


def same_json(left: str, right: str) -> bool:
    """Equal texts, or equal JSON values (the generated values hold no booleans, so == is enough)."""
    if left == right:
        return True
    try:
        return bool(json.loads(left) == json.loads(right))
    except ValueError:
        return False


def is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@dataclass
class Call:
    id: str | None = None
    empty: bool = False  # only "" so far
    rejected: bool = False
    name: str | None = None
    deltas: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)
    arguments_closed: bool = False
    closed: bool = False
    incomplete: bool = False
    done_text: str | None = None  # the arguments.done text since the last opening

    def identity(self, incoming: Any) -> None:
        """The identity table, for the values generated here (absent, null, "" and strings)."""
        if incoming is MISSING:
            return
        if incoming is None:
            self.rejected |= self.id is None  # initial_null; keep_null once established
        elif incoming == "":
            self.rejected |= self.id is not None  # empty_after_established; else a placeholder
            self.empty |= self.id is None
        elif self.id is None:
            self.id = incoming
        elif incoming != self.id:
            self.rejected = True  # id_conflict

    def naming(self, name: Any) -> None:
        if isinstance(name, str) and name:
            if self.name is None:
                self.name = name
            elif name != self.name:
                self.rejected = True  # name_conflict

    def arguments(self) -> str:
        joined = "".join(self.deltas)
        return joined or (self.claims[0] if self.claims else "")

    def contradicted(self) -> bool:
        return any(not same_json(self.arguments(), claim) for claim in self.claims)


@dataclass
class Model:
    """One response by the protocol's rules: routing, identity, snapshots, ends, the two rules."""

    rules: frozenset[str] = frozenset()
    started: bool = False
    rid: Any = None
    spliced: bool = False
    end: str | None = None
    unattributable: int = 0  # events attributable to no slot
    items: dict[int, bool] = field(default_factory=dict)  # index -> is a function call
    aliases: dict[str, int | None] = field(default_factory=dict)  # item id -> index, None when shared
    calls: dict[int, Call] = field(default_factory=dict)
    early: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    final: list[tuple[Any, Any, Any]] = field(default_factory=list)

    def run(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            if self.spliced:
                break  # the rest belongs to another response
            getattr(self, "on_" + event["type"].replace("response.", "").replace(".", "_"), lambda _: None)(event)
        self.unattributable += sum(map(len, self.early.values()))  # buffered, never opened

    def route(self, index: Any, item_id: Any) -> int | None:
        alias = self.aliases.get(item_id) if isinstance(item_id, str) else None
        if isinstance(index, int) and not isinstance(index, bool) and index >= 0:
            if alias is not None and alias != index and self.items.get(alias):
                return None
            return index
        return alias

    def on_created(self, event: dict[str, Any]) -> None:
        rid = event["response"].get("id")
        if not self.started:
            self.started, self.rid = True, rid
        elif not (isinstance(rid, str) and rid and rid == self.rid):
            self.spliced = True

    def on_output_item_added(self, event: dict[str, Any]) -> None:
        index, item = event["output_index"], event["item"]
        item_id = item.get("id")
        if isinstance(item_id, str) and item_id:
            self.aliases[item_id] = index if self.aliases.get(item_id, index) == index else None
        if item["type"] != "function_call":
            self.items.setdefault(index, False)
            return
        self.items[index] = True
        call = self.calls.setdefault(index, Call())
        call.identity(item.get("call_id", MISSING))
        call.naming(item.get("name"))
        call.arguments_closed = call.closed = False
        call.done_text = None
        if item.get("arguments"):
            call.claims.append(item["arguments"])
        for early in self.early.pop(index, []):
            if self.route(index, early.get("item_id")) != index:
                self.unattributable += 1
            else:
                self.apply(index, early)

    def apply(self, key: int, event: dict[str, Any]) -> None:
        call = self.calls[key]
        if event["type"].endswith(".delta"):
            text = event.get("delta")
            if not (call.arguments_closed or call.closed):
                call.deltas.append(text or "")
            elif not (
                DROP in self.rules
                and call.done_text is not None
                and text
                and same_json(call.arguments(), call.done_text)
            ):
                self.unattributable += 1
        elif call.closed:
            self.unattributable += 1
        else:
            if event.get("arguments"):
                call.claims.append(event["arguments"])
            call.naming(event.get("name"))
            call.arguments_closed = True
            call.done_text = event.get("arguments") if isinstance(event.get("arguments"), str) else None

    def on_argument_event(self, event: dict[str, Any]) -> None:
        key = self.route(event.get("output_index"), event.get("item_id"))
        holds = self.items.get(key) if key is not None else None
        if holds:
            self.apply(key, event)  # type: ignore[arg-type]
        elif holds is None:
            if key is not None and BUFFER in self.rules:
                self.early.setdefault(key, []).append(event)
            else:
                self.unattributable += 1

    on_function_call_arguments_delta = on_function_call_arguments_done = on_argument_event

    def on_output_item_done(self, event: dict[str, Any]) -> None:
        item = event["item"]
        if item["type"] != "function_call":
            return
        key = self.route(event.get("output_index"), item.get("id"))
        call = self.calls.get(key) if key is not None and self.items.get(key) else None
        if call is None or call.closed:
            self.unattributable += 1
            return
        call.identity(item.get("call_id", MISSING))
        call.naming(item.get("name"))
        if item.get("arguments"):
            call.claims.append(item["arguments"])
        call.incomplete |= item.get("status") == "incomplete"
        call.closed = call.arguments_closed = True

    def ending(self, how: str, event: dict[str, Any]) -> None:
        self.end = how
        output = event.get("response", {}).get("output") or []
        listed = [(i.get("call_id"), i.get("name"), i.get("arguments")) for i in output if i["type"] == "function_call"]
        self.final = listed or self.final

    def on_completed(self, event: dict[str, Any]) -> None:
        self.ending("complete", event)

    def on_incomplete(self, event: dict[str, Any]) -> None:
        self.ending("incomplete", event)

    def on_failed(self, event: dict[str, Any]) -> None:
        self.end = "failed"

    on_error = on_failed

    def expected(self) -> tuple[bool, int, list[tuple[int, str | None, str, bool]]]:
        """(dispatchable, unattributable events, [(index, id, arguments, proposed)] by index)."""
        calls = [(index, self.calls[index]) for index in sorted(self.calls)]
        ids = [call.id for _, call in calls if call.id is not None]
        bad_final = set()
        final_stray = False
        if self.final:
            by_id = {call.id: call for _, call in calls if call.id is not None}
            listed = set()
            for call_id, name, arguments in self.final:
                call = by_id.get(call_id)
                if call is None:
                    final_stray = True
                    continue
                listed.add(call_id)
                if name != call.name or not same_json(call.arguments(), arguments):
                    bad_final.add(call_id)
            bad_final |= set(by_id) - listed

        def valid(call: Call) -> bool:
            return not (
                call.rejected
                or call.id is None
                or call.name is None
                or not is_object(call.arguments())
                or call.contradicted()
                or call.incomplete
                or ids.count(call.id) > 1
                or call.id in bad_final
            )

        ended = self.end == "complete" and not self.spliced
        dispatchable = (
            ended and bool(calls) and not (self.unattributable or final_stray) and all(valid(c) for _, c in calls)
        )
        return (
            dispatchable,
            self.unattributable,
            [(index, c.id, c.arguments(), dispatchable) for index, c in calls],  # proposed only if it may run
        )


# --- generated scenarios -----------------------------------------------------------------------


arguments_text = st.dictionaries(
    st.sampled_from("abcxyz"), st.integers(-5, 5) | st.text('ab{}":, ', max_size=4), max_size=3
).map(lambda value: json.dumps(value, separators=(",", ":")))


@st.composite
def call_events(draw: st.DrawFn, index: int, call_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One call's events in wire order, and its entry for a terminal output."""
    text = draw(arguments_text)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=3)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    item_id = draw(st.sampled_from([MISSING, f"fc_{index}", f"fc_{index}", SHARED_ITEM_ID]))
    on_events = draw(st.sampled_from(["same", "same", "absent", "null", "rotated"]))
    event_id = {"same": item_id, "absent": MISSING, "null": None, "rotated": f"fc_rot_{index}"}[on_events]
    name = draw(st.sampled_from(["f", "g"]))
    opening_id = draw(st.sampled_from([call_id, call_id, call_id, ""]))
    closing_id = draw(st.sampled_from([call_id, call_id, call_id, MISSING, None, "call_changed"]))
    events = [added(index, call_id=opening_id, name=name, arguments="", id=item_id)]
    events += [delta(index, piece, event_id) for piece in pieces]
    if draw(st.booleans()):
        events.append(arguments_done(index, text, event_id))
    if draw(st.integers(0, 3)):
        status = draw(st.sampled_from(["completed", "completed", "incomplete"]))
        events.append(item_done(index, call_id=closing_id, name=name, arguments=text, id=item_id, status=status))
    return events, function_call(call_id, name, text)


@st.composite
def corrupted(draw: st.DrawFn, sequences: list[list[dict[str, Any]]], ids: list[Any]) -> None:
    """Corrupt the per-call sequences in place, the ways servers and gateways do."""
    for position, events in enumerate(sequences):
        kind = draw(st.sampled_from(["none"] * 4 + ["early", "stray", "alias", "early-alias"]))
        deltas = [at for at, event in enumerate(events) if event["type"].endswith(".delta")]
        if kind == "early" and deltas:
            events.insert(0, events.pop(deltas[0]))  # a delta before output_item.added
        elif kind == "stray":
            done = [at for at, event in enumerate(events) if event["type"].endswith("arguments.done")]
            if done:
                repeated = draw(st.sampled_from([events[deltas[-1]]["delta"] if deltas else "}", "", "}"]))
                events.insert(done[0] + 1, delta(events[0]["output_index"], repeated))
        elif kind in ("alias", "early-alias") and len(sequences) > 1:
            other = ids[(position + 1) % len(ids)]
            if isinstance(other, str):  # a delta naming the other call's item (before this one's, if early)
                events.insert(kind == "alias", delta(events[0]["output_index"], "", other))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[dict[str, Any]], frozenset[str]]:
    count = draw(st.integers(1, 3))
    indexes = draw(st.lists(st.integers(0, 4), min_size=count, max_size=count, unique=True))
    call_ids = [draw(st.sampled_from(CALL_IDS)) for _ in indexes]
    drawn = [draw(call_events(index, call_id)) for index, call_id in zip(indexes, call_ids, strict=True)]
    sequences = [events for events, _ in drawn]
    draw(corrupted(sequences, [events[0]["item"].get("id", MISSING) for events in sequences]))
    spare = next(index for index in range(6) if index not in indexes)
    sequences.append([added(spare, item=message_item(f"msg_{spare}")), text_delta(spare, "hi", f"msg_{spare}")])
    events: list[dict[str, Any]] = [created("resp_1")]
    while any(sequences):  # a random interleaving that keeps each sequence's order
        events.append(draw(st.sampled_from([s for s in sequences if s])).pop(0))
    if draw(st.integers(0, 9)) == 0:
        events.insert(draw(st.integers(1, len(events))), created(draw(st.sampled_from(["resp_1", "resp_2"]))))
    output = draw(st.sampled_from(["none", "none", "empty", "listed", "changed"]))
    listed = [entry for _, entry in drawn]
    if output == "changed":
        listed[0] = {**listed[0], "call_id": "call_other"}
    body = {"none": MISSING, "empty": [], "listed": listed, "changed": listed}[output]
    end = draw(st.sampled_from(["completed"] * 6 + ["incomplete", "failed", "error", "eof"]))
    if end == "completed":
        events.append(completed(body))
    elif end == "incomplete":
        events.append(incomplete("max_output_tokens", body))
    elif end != "eof":
        events.append(failed() if end == "failed" else error())
    rules = frozenset(draw(st.sets(st.sampled_from([BUFFER, DROP]))))
    return events, rules


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_adapter_agrees_with_the_model(scenario: tuple[list[dict[str, Any]], frozenset[str]]) -> None:
    events, rules = scenario
    model = Model(rules)
    model.run(events)
    dispatchable, unattributable, calls = model.expected()
    assembler = ResponsesAssembler(rules)
    for event in events:
        assembler.feed(event)
    result = assembler.finish()
    assert [(call.index, call.id, call.arguments, call.proposed) for call in result.calls] == calls
    assert sum(d.category is ErrorCategory.UNKNOWN_SLOT for d in result.diagnostics) == unattributable
    assert result.dispatchable is dispatchable


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=3))
def test_valid_streams_are_dispatchable(pieces: list[int]) -> None:
    """A sanity anchor for the model: uncorrupted streams are dispatchable for both."""
    events = [created()]
    for index, cut in enumerate(pieces):
        text = json.dumps({"k": index})
        events += [added(index, call_id=f"call_{index}", name="f", id=f"fc_{index}")]
        events += [delta(index, text[:cut], f"fc_{index}"), delta(index, text[cut:], f"fc_{index}")]
        events += [
            arguments_done(index, text, f"fc_{index}"),
            item_done(index, call_id=f"call_{index}", arguments=text),
        ]
    events.append(completed())
    model = Model()
    model.run(events)
    assembler = ResponsesAssembler()
    for event in events:
        assembler.feed(event)
    assert model.expected()[0] is assembler.finish().dispatchable is True


# --- nothing JSON-shaped raises ----------------------------------------------------------------


FIELDS = [
    "type",
    "output_index",
    "item_id",
    "item",
    "delta",
    "arguments",
    "name",
    "call_id",
    "id",
    "status",
    "response",
]
FIELDS += ["output", "incomplete_details", "reason"]
TYPES = ["response.created", "response.output_item.added", "response.function_call_arguments.delta"]
TYPES += ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
TYPES += ["response.incomplete", "response.failed", "error", "function_call", "message", "response.in_progress"]

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(TYPES + ["", "\ud800", "\x00", "fc_1", "call_1", "{}", '{"a":1}'])
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=3), inner, max_size=6)
    ),
    max_leaves=25,
)
events_like = st.fixed_dictionaries({"type": st.sampled_from(TYPES)}, optional=dict.fromkeys(FIELDS[1:], json_values))


@settings(max_examples=250, deadline=None)
@given(st.lists(events_like | json_values, max_size=20), st.sets(st.sampled_from([BUFFER, DROP])))
def test_arbitrary_json_shaped_events_never_raise(events: list[Any], rules: set[str]) -> None:
    assembler = ResponsesAssembler(rules, max_argument_chars=64)
    for event in events:
        assembler.feed(event)
    result = assembler.finish()
    assert assembler.finish() is result
    if result.dispatchable:
        assert all(call.proposed and call.id for call in result.calls)
    else:
        assert not any(call.proposed for call in result.calls)
