"""Property tests of the reference assembler over random interleaved streams (docs/identity-rules.md).

Each generated scenario is several slots (tool indices 0-3, sometimes two choices), each
with its own ordered fragments, interleaved at random and packed into chunks at random,
ended by a random terminal event (or none). The expected outcome is computed here,
independently of ``etf_otel``, straight from the tables of docs/identity-rules.md; the assembler must agree.
A second family feeds arbitrary JSON-shaped values and only checks that nothing raises
and that the invariants of a dispatchable response hold.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etf_otel import DONE, AssemblyResult, ErrorCategory, ReferenceAssembler, StreamState, Verdict
from etf_otel.testing.chat import MISSING

E = ErrorCategory
Key = tuple[int, int]

SHARED_IDS = ("shared-1", "shared-2")
UNINDEXED_ID = "call-unindexed"
UNINDEXED_MARKER = "<unindexed>"
BAD_INDICES: tuple[Any, ...] = (MISSING, None, -1, "0", 1.5, True, [0], {"i": 0})
UNSUPPORTED_IDS: tuple[Any, ...] = (0, 7, -3, 1.5, True, False, [], ["call-x"], {}, {"id": "call-x"})
TERMINALS = ("done", "finish", "finish_and_done", "early_finish", "early_and_final", "partial_finish", "none")


@dataclass(frozen=True)
class Frag:
    """One tool-call fragment as the wire carries it; ``MISSING`` leaves a key out."""

    choice: int
    index: Any
    id: Any
    name: Any
    arguments: Any

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.index is not MISSING:
            out["index"] = self.index
        if self.id is not MISSING:
            out["id"] = self.id
        out["type"] = "function"
        function: dict[str, Any] = {}
        if self.name is not MISSING:
            function["name"] = self.name
        if self.arguments is not MISSING:
            function["arguments"] = self.arguments
        if function:
            out["function"] = function
        return out


@dataclass
class Scenario:
    choices: int
    slots: dict[Key, list[Frag]]
    unindexed: list[Frag]
    order: list[Frag]
    chunks: list[Any]
    finished_choices: frozenset[int]
    done: bool
    allow: tuple[str, ...]


@dataclass
class ExpectedCall:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    arguments_invalid: bool = False
    categories: set[ErrorCategory] = field(default_factory=set)


# --- the independent model -------------------------------------------------------------


def _reject_constant(token: str) -> Any:
    raise ValueError(token)


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text, parse_constant=_reject_constant), dict)
    except ValueError:
        return False


def first_string_id(frags: list[Frag]) -> str | None:
    """The first non-empty string id a slot's fragments carried: the one that must survive."""
    return next((f.id for f in frags if type(f.id) is str and f.id), None)


def model(scenario: Scenario) -> tuple[dict[Key, ExpectedCall], bool, bool]:
    """Expected calls, whether the stream ended properly, and whether it is dispatchable."""
    empty_ok = "empty_continuation" in scenario.allow
    calls: dict[Key, ExpectedCall] = {}
    for key, frags in scenario.slots.items():
        call = calls[key] = ExpectedCall()
        for frag in frags:
            incoming = frag.id
            if incoming is MISSING:
                pass
            elif incoming is None:
                if call.id is None:
                    call.categories.add(E.INITIAL_NULL)
            elif type(incoming) is str:
                if not incoming:
                    if call.id is not None and not empty_ok:
                        call.categories.add(E.EMPTY_AFTER_ESTABLISHED)
                elif call.id is None:
                    call.id = incoming
                elif incoming != call.id:
                    call.categories.add(E.ID_CONFLICT)
            else:
                call.categories.add(E.UNSUPPORTED_ID_TYPE)
            if type(frag.name) is str and frag.name:
                if call.name is None:
                    call.name = frag.name
                elif frag.name != call.name:
                    call.categories.add(E.NAME_CONFLICT)
            if type(frag.arguments) is str:
                call.arguments.append(frag.arguments)
            elif frag.arguments is not MISSING and frag.arguments is not None:
                call.arguments_invalid = True
    ended = scenario.done or (
        bool(scenario.finished_choices) and all(choice in scenario.finished_choices for choice, _ in scenario.slots)
    )
    id_counts = Counter(call.id for call in calls.values() if call.id is not None)
    for call in calls.values():
        if call.id is None:
            call.categories.add(E.MISSING_ID)
        elif id_counts[call.id] > 1:
            call.categories.add(E.DUPLICATE_CALL_ID)
        if call.name is None:
            call.categories.add(E.MISSING_NAME)
        if call.arguments_invalid or not _json_object("".join(call.arguments)):
            call.categories.add(E.INVALID_ARGUMENTS)
        if not ended:
            call.categories.add(E.TRUNCATED_STREAM)
    dispatchable = ended and bool(calls) and not scenario.unindexed and not any(c.categories for c in calls.values())
    return calls, ended, dispatchable


# --- strategies -------------------------------------------------------------------------


def _split(draw: st.DrawFn, text: str, pieces: int) -> list[str]:
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), min_size=pieces - 1, max_size=pieces - 1)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@st.composite
def slot_fragments(draw: st.DrawFn, choice: int, index: int) -> list[Frag]:
    """The ordered fragments of one slot: well behaved, sharing an id, or anything goes."""
    own = (f"call-{choice}-{index}-a", f"call-{choice}-{index}-b")
    fn = f"fn_{choice}_{index}"
    marker = f"<{choice}.{index}>"
    count = draw(st.integers(1, 6))
    mode = draw(st.sampled_from(("proper", "shared", "wild")))

    if mode == "wild":
        ids = draw(
            st.lists(
                st.sampled_from((MISSING, None, "", *own, *SHARED_IDS, *UNSUPPORTED_IDS)),
                min_size=count,
                max_size=count,
            )
        )
        names = draw(st.lists(st.sampled_from((MISSING, None, "", fn, "other_fn")), min_size=count, max_size=count))
    else:
        first = own[0] if mode == "proper" else draw(st.sampled_from(SHARED_IDS))
        lead: list[Any] = [first] if draw(st.booleans()) else ["", first]
        follow = st.sampled_from((MISSING, None, first, ""))
        ids = (lead + draw(st.lists(follow, min_size=count, max_size=count)))[:count]
        names = [fn] + [draw(st.sampled_from((MISSING, None, "", fn))) for _ in range(count - 1)]

    if draw(st.booleans()):  # arguments that assemble to a JSON object naming the slot
        text = json.dumps({"slot": marker, "v": draw(st.text(max_size=6))})
        arguments: list[Any] = _split(draw, text, count)
        arguments = [draw(st.sampled_from(("", None, MISSING))) if not piece else piece for piece in arguments]
    else:  # arbitrary pieces, every string one carrying the slot's marker
        arguments = draw(
            st.lists(
                st.one_of(
                    st.sampled_from(("{", "}", '"a":1', ",", "")).map(lambda piece: piece + marker),
                    st.sampled_from((None, MISSING, 3, ["x"], {"a": 1}, True)),
                ),
                min_size=count,
                max_size=count,
            )
        )
    return [Frag(choice, index, i, n, a) for i, n, a in zip(ids, names, arguments, strict=True)]


def _choice_entry(choice: int, frags: list[Frag], finish: str | None) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant"}
    if frags:
        delta["tool_calls"] = [frag.wire() for frag in frags]
    return {"index": choice, "delta": delta, "finish_reason": finish}


def _chunk(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": "chatcmpl-prop", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": entries}


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    choices = draw(st.sampled_from((1, 1, 2)))
    keys = draw(
        st.lists(st.tuples(st.integers(0, choices - 1), st.integers(0, 3)), unique=True, min_size=0, max_size=5)
    )
    allow: tuple[str, ...] = draw(st.sampled_from(((), ("empty_continuation",))))
    slots = {key: draw(slot_fragments(*key)) for key in sorted(keys)}
    unindexed: list[Frag] = []
    if draw(st.integers(0, 9)) == 0:
        for _ in range(draw(st.integers(1, 2))):
            unindexed.append(
                Frag(
                    draw(st.integers(0, choices - 1)),
                    draw(st.sampled_from(BAD_INDICES)),
                    draw(st.sampled_from((UNINDEXED_ID, MISSING, None))),
                    draw(st.sampled_from((MISSING, "unindexed_fn"))),
                    UNINDEXED_MARKER,
                )
            )

    labels: list[Key | None] = [key for key, frags in slots.items() for _ in frags] + [None] * len(unindexed)
    queues = {key: list(frags) for key, frags in slots.items()}
    spare = list(unindexed)
    order = [queues[label].pop(0) if label is not None else spare.pop(0) for label in draw(st.permutations(labels))]

    # Pack consecutive fragments into chunks; one chunk may carry both choices.
    groups: list[list[Frag]] = []
    for frag in order:
        if not groups or draw(st.booleans()):
            groups.append([])
        groups[-1].append(frag)

    terminal = draw(st.sampled_from(TERMINALS))
    done = terminal in ("done", "finish_and_done")
    early = terminal in ("early_finish", "early_and_final")
    final = terminal in ("finish", "finish_and_done", "early_and_final")
    finished_choices: set[int] = set()
    chunks: list[Any] = []
    for group in groups:
        entries = []
        for choice in dict.fromkeys(frag.choice for frag in group):
            finish = None
            if early and choice not in finished_choices:
                finish = "tool_calls"
                finished_choices.add(choice)
            entries.append(_choice_entry(choice, [f for f in group if f.choice == choice], finish))
        chunks.append(_chunk(entries))
    if final:
        chunks.append(_chunk([_choice_entry(choice, [], "tool_calls") for choice in range(choices)]))
        finished_choices.update(range(choices))
    elif terminal == "partial_finish":
        chunks.append(_chunk([_choice_entry(0, [], "tool_calls")]))
        finished_choices.add(0)
    if done:
        chunks.append(DONE)
    return Scenario(choices, slots, unindexed, order, chunks, frozenset(finished_choices), done, allow)


def run(scenario: Scenario) -> AssemblyResult:
    assembler = ReferenceAssembler(scenario.allow)
    for chunk in scenario.chunks:
        assembler.feed(chunk)
    return assembler.finish()


def assert_dispatchable_invariants(result: AssemblyResult) -> None:
    """Dispatchable implies: every call proposed, with an id, a name and object arguments; ids unique.

    Not dispatchable implies: no call proposed, each rejected with at least one category.
    """
    if not result.dispatchable:
        assert result.proposals == ()
        assert all(call.verdict is Verdict.REJECTED and call.categories for call in result.calls)
        return
    assert result.state is StreamState.COMPLETED
    assert result.rejections == ()
    assert result.calls and result.proposals == result.calls
    for call in result.proposals:
        assert call.verdict is Verdict.PROPOSED and call.categories == ()
        assert type(call.id) is str and call.id
        assert type(call.name) is str and call.name
        assert isinstance(json.loads(call.arguments), dict)
    ids = [call.id for call in result.proposals]
    assert len(ids) == len(set(ids))


# --- properties over interleaved slots ---------------------------------------------------

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_assembly_matches_the_spec_model(scenario: Scenario) -> None:
    result = run(scenario)
    expected, ended, dispatchable = model(scenario)

    assert [(call.choice, call.index) for call in result.calls] == sorted(scenario.slots)
    assert result.state is (StreamState.COMPLETED if ended else StreamState.TRUNCATED)
    assert result.fragments == len(scenario.order)
    for call in result.calls:
        want = expected[call.choice, call.index]
        assert call.id == want.id
        assert call.name == want.name
        if want.categories or dispatchable:
            assert set(call.categories) == want.categories
        else:  # its own checks passed, but the response is blocked: rejected with the blocking category
            assert call.categories == (result.rejections[0].category,)
        assert call.verdict is (Verdict.PROPOSED if dispatchable else Verdict.REJECTED)
        assert call.fragments == len(scenario.slots[call.choice, call.index])
    if (
        result.rejections and result.calls
    ):  # the blocking category: a fragment of no slot's, else the first rejected slot's
        first_rejected = next((expected[key].categories for key in sorted(expected) if expected[key].categories), set())
        assert result.rejections[0].category in ({E.MISSING_INDEX} if scenario.unindexed else first_rejected)
    wanted_rejections: set[tuple[int | None, int | None, ErrorCategory]] = {
        (key[0], key[1], category) for key, call in expected.items() for category in call.categories
    }
    wanted_rejections |= {(frag.choice, None, E.MISSING_INDEX) for frag in scenario.unindexed}
    if not ended and not scenario.slots:
        wanted_rejections.add((None, None, E.TRUNCATED_STREAM))
    assert {(r.choice, r.index, r.category) for r in result.rejections} == wanted_rejections
    assert result.dispatchable is dispatchable
    assert_dispatchable_invariants(result)


@SETTINGS
@given(scenarios())
def test_an_established_id_is_never_cleared_or_replaced(scenario: Scenario) -> None:
    result = run(scenario)
    for call in result.calls:
        own = scenario.slots[call.choice, call.index]
        assert call.id == first_string_id(own)
        # No call ever carries an id that no fragment of its own slot carried.
        assert call.id is None or call.id in {frag.id for frag in own if type(frag.id) is str}
        assert call.id != UNINDEXED_ID


@SETTINGS
@given(scenarios())
def test_slots_never_exchange_arguments(scenario: Scenario) -> None:
    result = run(scenario)
    for call in result.calls:
        own = scenario.slots[call.choice, call.index]
        pieces = [frag.arguments for frag in own if type(frag.arguments) is str]
        joined = "".join(pieces)
        marker = f"<{call.choice}.{call.index}>"
        if any(frag.arguments not in (MISSING, None) and type(frag.arguments) is not str for frag in own):
            assert E.INVALID_ARGUMENTS in call.categories
            assert joined.startswith(call.arguments)  # whatever is kept is its own, in order
        else:
            assert call.arguments == joined
        assert UNINDEXED_MARKER not in call.arguments
        other_markers = {f"<{c}.{i}>" for c, i in scenario.slots if (c, i) != (call.choice, call.index)}
        assert not any(other in call.arguments for other in other_markers)
        assert call.arguments.count(marker) == joined[: len(call.arguments)].count(marker)


@SETTINGS
@given(scenarios())
def test_no_proposal_comes_out_of_a_truncated_stream(scenario: Scenario) -> None:
    truncated = _truncate(scenario)
    result = run(truncated)
    assert result.state is StreamState.TRUNCATED
    assert result.proposals == ()
    assert not result.dispatchable
    assert E.TRUNCATED_STREAM in result.categories
    assert all(E.TRUNCATED_STREAM in call.categories for call in result.calls)


def _truncate(scenario: Scenario) -> Scenario:
    """The same stream with every terminal event removed, as if the connection dropped."""
    chunks: list[Any] = []
    for chunk in scenario.chunks:
        if chunk == DONE:
            continue
        entries = [{**entry, "finish_reason": None} for entry in chunk["choices"]]
        chunks.append({**chunk, "choices": entries})
    return Scenario(
        scenario.choices,
        scenario.slots,
        scenario.unindexed,
        scenario.order,
        chunks,
        frozenset(),
        False,
        scenario.allow,
    )


@SETTINGS
@given(scenarios())
def test_finish_is_idempotent_and_dispatchable_implies_valid_calls(scenario: Scenario) -> None:
    assembler = ReferenceAssembler(scenario.allow)
    for chunk in scenario.chunks:
        assembler.feed(chunk)
    first = assembler.finish()
    assert assembler.finished
    assert assembler.finish() == first
    assert assembler.finish() == first
    assert_dispatchable_invariants(first)


# --- nothing JSON-shaped makes it raise ---------------------------------------------------

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)
ids: st.SearchStrategy[Any] = st.sampled_from((MISSING, None, "", "call-a", "call-b")) | json_values
indices: st.SearchStrategy[Any] = st.sampled_from((MISSING, 0, 1, 2, -1)) | json_values


def _maybe(key: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), values.map(lambda value: {key: value}))


def _merge(parts: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part)
    return out


functions = st.one_of(
    json_values,
    st.tuples(
        _maybe("name", st.sampled_from(("read_page", "", None)) | json_values),
        _maybe("arguments", st.sampled_from(('{"a":1}', "{", "}", "", None)) | json_values),
    ).map(_merge),
)
fragments = st.one_of(
    json_values,
    st.tuples(_maybe("index", indices), _maybe("id", ids), _maybe("function", functions)).map(_merge),
)
deltas = st.one_of(json_values, _maybe("tool_calls", st.one_of(json_values, st.lists(fragments, max_size=4))))
choice_entries = st.one_of(
    json_values,
    st.tuples(
        _maybe("index", indices),
        _maybe("delta", deltas),
        _maybe("finish_reason", st.sampled_from(("tool_calls", "stop", "", None)) | json_values),
    ).map(_merge),
)
chunks_any = st.one_of(
    json_values,
    st.just(DONE),
    _maybe("choices", st.one_of(json_values, st.lists(choice_entries, max_size=3))),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(chunks_any, max_size=8),
    st.sampled_from(
        ((), ("empty_continuation",), ("infer_missing_index",), ("empty_continuation", "infer_missing_index"))
    ),
)
def test_the_assembler_never_raises_on_json_shaped_input(chunks: list[Any], allow: tuple[str, ...]) -> None:
    assembler = ReferenceAssembler(allow)
    for chunk in chunks:
        assembler.feed(chunk)
    first = assembler.finish()
    assert assembler.finish() == first
    # One identity decision per fragment; an inferred index is recorded as a decision of its own.
    if "infer_missing_index" in allow:
        assert len(first.diagnostics) >= first.fragments
    else:
        assert len(first.diagnostics) == first.fragments
    assert all(isinstance(rejection.category, ErrorCategory) for rejection in first.rejections)
    assert_dispatchable_invariants(first)
    if DONE not in chunks and not any(
        isinstance(chunk, dict)
        and isinstance(chunk.get("choices"), list)
        and any(isinstance(entry, dict) and entry.get("finish_reason") for entry in chunk["choices"])
        for chunk in chunks
    ):
        assert first.proposals == ()
        assert not first.dispatchable
