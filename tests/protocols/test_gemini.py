"""The Gemini adapter, rule by rule (docs/protocols.md, "Gemini").

Each test builds the chunks before the one under test (the calls so far, a streamed call
still open, a finish reason already seen) and checks what the response became after it.
Every stream is also assembled from its ``model_dump()`` shape (snake_case keys, as the
``google-genai`` SDK's models dump them) and must give the very same result; and, when the SDK
takes every chunk of it, as the SDK's own objects, read inline and read with ``field()``: both
readings give the same result.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from types import SimpleNamespace
from typing import Any

import pytest

from etf_otel import ABSENT, ErrorCategory, IdentityRules, IdKind, StreamState, Transition
from etf_otel.core._results import AssemblyResult
from etf_otel.protocols import GEMINI, _gemini_arguments, detect, get
from etf_otel.protocols._gemini import GeminiAssembler, assemble
from etf_otel.protocols._gemini_arguments import SdkClasses
from etf_otel.testing.gemini import MISSING, blocked, call, chunk, error, leaf, stream, text

E = ErrorCategory
WEATHER = {"city": "Paris"}


def snake(value: Any, *, user: bool = False) -> Any:
    """``value`` with every wire key in snake_case; the keys of ``args`` (model output) are left alone."""
    if isinstance(value, list):
        return [snake(item, user=user) for item in value]
    if not isinstance(value, dict):
        return value
    if user:
        return {key: snake(item, user=True) for key, item in value.items()}
    return {
        re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower(): snake(item, user=key == "args") for key, item in value.items()
    }


_INLINED = (
    _gemini_arguments.RESPONSES,
    _gemini_arguments.CANDIDATES,
    _gemini_arguments.CONTENTS,
    _gemini_arguments.PARTS,
    _gemini_arguments.CALLS,
    _gemini_arguments.ENTRIES,
)


@contextmanager
def read_with_field() -> Iterator[None]:
    """No class is read inline: every SDK object is read with ``field()``, field by field."""
    saved = [dict(classes) for classes in _INLINED]
    learn = SdkClasses.__missing__
    try:
        SdkClasses.__missing__ = lambda self, kind: False  # type: ignore[method-assign]
        for classes in _INLINED:
            classes.clear()
        yield
    finally:
        SdkClasses.__missing__ = learn  # type: ignore[method-assign]
        for classes, before in zip(_INLINED, saved, strict=True):
            classes.clear()
            classes.update(before)


def sdk_objects(events: list[Any]) -> list[Any] | None:
    """``events`` as the ``google-genai`` SDK's ``GenerateContentResponse`` objects; ``None`` when it refuses one."""
    from google.genai import types
    from pydantic import ValidationError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an enum value the SDK does not know yet: it keeps it
            return [types.GenerateContentResponse.model_validate(event) for event in events]
    except ValidationError:
        return None


def run(events: list[Any], *allow: str) -> AssemblyResult:
    """Assemble ``events`` as camelCase wire JSON and as snake_case dumps: both give the same result.

    When the SDK takes them, its objects read inline give what they give read with ``field()``.
    """
    rules = IdentityRules.for_rules(allow)
    result = assemble(events, rules)
    assert assemble(snake(events), rules) == result
    objects = sdk_objects(events)
    if objects is not None:
        inline = assemble(objects, rules)
        with read_with_field():
            assert assemble(objects, rules) == inline
    return result


def summary(result: AssemblyResult) -> list[tuple[object, ...]]:
    return [
        (call.choice, call.index, call.id, call.name, call.arguments, tuple(c.value for c in call.categories))
        for call in result.calls
    ]


def categories(result: AssemblyResult) -> set[str]:
    return {category.value for category in result.categories}


# --- detection and the registry -----------------------------------------------------------------


def test_gemini_is_registered_and_detected_from_a_chunk() -> None:
    assert get("gemini") is GEMINI and GEMINI.assembler is GeminiAssembler
    assert detect(chunk(call("f"))) is GEMINI
    assert detect(blocked()) is GEMINI
    assert detect({"prompt_feedback": {"block_reason": "SAFETY"}}) is GEMINI
    assert detect({"candidates": [], "choices": []}) is not GEMINI  # a Chat Completions chunk
    assert detect({"candidates": [], "type": "x"}) is not GEMINI
    assert detect({"usageMetadata": {}}) is None and detect("text") is None


# --- 2.2 slots: the call ordinal, heads and continuations ----------------------------------------


def test_parallel_calls_in_one_chunk_are_two_slots_not_one() -> None:
    result = run(stream(chunk(call("get_weather", WEATHER), call("get_time", {"tz": "CET"}))))
    assert summary(result) == [
        (0, 0, None, "get_weather", '{"city":"Paris"}', ()),
        (0, 1, None, "get_time", '{"tz":"CET"}', ()),
    ]
    assert result.dispatchable and result.state is StreamState.COMPLETED


def test_parallel_calls_one_per_chunk_each_as_parts_0_get_their_own_ordinal() -> None:
    """Part positions restart in every chunk: keying by them would merge these two calls."""
    result = run(stream(chunk(call("a", {"x": 1})), chunk(call("b", {"y": 2})), chunk(call("a", {"x": 1}))))
    assert [(c.index, c.name, c.arguments) for c in result.calls] == [
        (0, "a", '{"x":1}'),
        (1, "b", '{"y":2}'),
        (2, "a", '{"x":1}'),  # without ids an equal call is a second call (2.6)
    ]
    assert result.dispatchable


@pytest.mark.parametrize(
    ("part", "expected"),
    [
        (call("f"), [(0, 0, None, "f", "{}", ())]),  # {name} alone: a parameterless whole call
        (call("f", None), [(0, 0, None, "f", "{}", ())]),  # args null: an unset Struct
        (call("f", {}), [(0, 0, None, "f", "{}", ())]),
        (call(args={"a": 1}), [(0, 0, None, None, '{"a":1}', ("missing_name",))]),  # args only: a head
        (call(id="c1"), [(0, 0, "c1", None, "{}", ("missing_name",))]),  # an id only: a head
        (call(name=""), []),  # no name, id or args: a continuation
        (call(will_continue=True), []),
        (call(partial_args=[leaf("$.a", number=1)]), []),
    ],
)
def test_what_a_part_is_when_no_streamed_call_is_open(part: dict[str, Any], expected: list[Any]) -> None:
    result = run(stream(chunk(text("thinking aloud")), chunk(part)))
    assert summary(result) == expected
    if not expected:
        assert categories(result) == {"unknown_slot"} and not result.dispatchable


def test_a_continuation_after_a_whole_call_is_unknown_slot_and_blocks_the_response() -> None:
    result = run(stream(chunk(call("f", {"a": 1})), chunk(call())))
    # The call is whole, but the stray continuation blocks the response: rejected with its category.
    assert summary(result) == [(0, 0, None, "f", '{"a":1}', ("unknown_slot",))]
    assert categories(result) == {"unknown_slot"} and not result.dispatchable


def test_a_nameless_part_after_a_whole_call_is_a_new_call_never_its_update() -> None:
    result = run(stream(chunk(call("f", {})), chunk(call(args={"a": 1}))))
    assert summary(result) == [
        (0, 0, None, "f", "{}", ("missing_name",)),  # whole itself, blocked by the nameless one
        (0, 1, None, None, '{"a":1}', ("missing_name",)),
    ]
    assert not result.dispatchable


def test_a_streamed_call_takes_every_call_part_until_one_without_will_continue() -> None:
    events = stream(
        chunk(call("get_weather", will_continue=True)),
        chunk(call(partial_args=[leaf("$.city", string="Par", will_continue=True)], will_continue=True)),
        chunk(call(partial_args=[leaf("$.city", string="is", will_continue=True)], will_continue=True)),
        chunk(call(partial_args=[leaf("$.city", string="")], will_continue=True)),
        chunk(call()),  # the terminator: functionCall {}
        chunk(call("get_time", {"tz": "CET"})),
    )
    result = run(events)
    assert summary(result) == [
        (0, 0, None, "get_weather", '{"city":"Paris"}', ()),
        (0, 1, None, "get_time", '{"tz":"CET"}', ()),
    ]
    assert result.calls[0].fragments == 5 and result.dispatchable


def test_the_last_partial_args_part_may_close_the_call_itself() -> None:
    events = stream(
        chunk(call("f", will_continue=True)),
        chunk(call(partial_args=[leaf("$.n", number=2)])),  # no willContinue: closes the call
        chunk(call()),  # nothing open any more
    )
    result = run(events)
    assert summary(result) == [(0, 0, None, "f", '{"n":2}', ("unknown_slot",))]  # whole, but blocked
    assert categories(result) == {"unknown_slot"}


def test_a_head_with_another_name_while_a_call_streams_is_name_conflict_not_a_new_call() -> None:
    """A dropped terminator cannot silently merge two calls: the second head joins the open call."""
    events = stream(
        chunk(call("read", will_continue=True, partial_args=[leaf("$.page", number=1)])),
        chunk(call("write", {"text": "x"})),
    )
    result = run(events)
    assert [(c.index, c.name, c.categories) for c in result.calls] == [
        (0, "read", (E.NAME_CONFLICT, E.SNAPSHOT_MISMATCH))
    ]
    assert not result.dispatchable


def test_a_repeated_path_after_a_dropped_terminator_is_invalid_arguments() -> None:
    events = stream(
        chunk(call("f", will_continue=True, partial_args=[leaf("$.a", number=1)])),
        chunk(call("f", will_continue=True, partial_args=[leaf("$.a", number=1)])),  # the same call again?
        chunk(call()),
    )
    assert summary(run(events)) == [(0, 0, None, "f", "", ("invalid_arguments",))]


def test_an_unclosed_streamed_call_at_stop_is_finalized_when_its_strings_are_closed() -> None:
    closed = stream(chunk(call("f", will_continue=True, partial_args=[leaf("$.a", string="x")], **{})))
    result = run([closed[0], chunk(call(will_continue=True)), closed[1]])
    assert summary(result) == [(0, 0, None, "f", '{"a":"x"}', ())] and result.dispatchable
    open_string = stream(
        chunk(call("f", will_continue=True, partial_args=[leaf("$.a", string="x", will_continue=True)]))
    )
    assert summary(run(open_string)) == [(0, 0, None, "f", "", ("invalid_arguments",))]


@pytest.mark.parametrize("index", [MISSING, None, 0])
def test_candidate_index_absent_or_null_is_zero(index: Any) -> None:
    result = run([chunk(call("f", {}), index=index), chunk(finish_reason="STOP", index=0)])
    assert summary(result) == [(0, 0, None, "f", "{}", ())] and result.dispatchable


@pytest.mark.parametrize("index", ["0", -1, 1.5, True, [0]])
def test_a_candidate_index_that_is_no_non_negative_integer_is_missing_index(index: Any) -> None:
    result = run(
        [
            chunk(call("f", {}), index=0),
            chunk(call("g", {}), text("between"), call("h", {}), index=index),
            chunk(finish_reason="STOP"),
        ]
    )
    assert summary(result) == [(0, 0, None, "f", "{}", ("missing_index",))]  # valid, but blocked
    assert categories(result) == {"missing_index"} and not result.dispatchable
    assert result.fragments == 3  # both calls of the bad candidate were counted


def test_candidates_have_their_own_slots_and_must_all_end() -> None:
    both = [
        chunk(call("f", {"a": 1}), index=0),
        chunk(call("f", {"a": 2}), index=1),
        chunk(finish_reason="STOP", index=0),
    ]
    result = run(both)
    assert [(c.choice, c.index, c.arguments) for c in result.calls] == [(0, 0, '{"a":1}'), (1, 0, '{"a":2}')]
    assert result.state is StreamState.TRUNCATED  # candidate 1 never got a finishReason
    result = run([*both, chunk(finish_reason="STOP", index=1)])
    assert result.dispatchable and result.finish_reasons == ("STOP", "STOP")


def test_parts_that_are_no_calls_are_ignored() -> None:
    parts = [text("hi"), {"thought": True, "text": "t"}, {"thoughtSignature": "c2ln"}, {"executableCode": {}}]
    result = run(stream(chunk(*parts), chunk(call("f", {})), {"candidates": [{"content": {"parts": "no"}}]}))
    assert summary(result) == [(0, 0, None, "f", "{}", ())] and result.dispatchable


def test_a_function_call_that_is_no_object_is_unknown_slot() -> None:
    result = run(stream(chunk({"functionCall": "f"})))
    assert categories(result) == {"unknown_slot"} and result.calls == ()


# --- 2.3 identity --------------------------------------------------------------------------------


@pytest.mark.parametrize("unset", [MISSING, None, ""])
def test_a_null_or_empty_id_is_unset_positional_identity(unset: Any) -> None:
    result = run(stream(chunk(call("f", {}, id=unset), call("g", {}, id=unset))))
    assert summary(result) == [(0, 0, None, "f", "{}", ()), (0, 1, None, "g", "{}", ())]
    assert [call.transition_count(Transition.POSITIONAL) for call in result.calls] == [1, 1]
    assert result.transition_counts()[Transition.POSITIONAL, IdKind.ABSENT] == 2
    assert {d.transition for d in result.diagnostics} == {Transition.AWAIT, Transition.POSITIONAL}
    assert result.dispatchable
    kinds = {MISSING: (IdKind.ABSENT, False), None: (IdKind.NULL, False), "": (IdKind.STRING, True)}
    assert {(d.id_kind, d.id_empty) for d in result.diagnostics[:2]} == {kinds[unset]}  # the kind that arrived


def test_an_unset_id_after_an_established_one_keeps_it() -> None:
    events = stream(
        chunk(call("f", id="c1", will_continue=True)),
        chunk(call(id=None, will_continue=True)),
        chunk(call(id="")),
    )
    result = run(events)
    assert summary(result) == [(0, 0, "c1", "f", "{}", ())] and result.dispatchable
    assert [(d.transition, d.id_kind, d.id_empty) for d in result.diagnostics] == [
        (Transition.ESTABLISH, IdKind.STRING, False),
        (Transition.KEEP_OMITTED, IdKind.NULL, False),
        (Transition.KEEP_OMITTED, IdKind.STRING, True),
    ]
    stray = run(stream(chunk(call(id=None))))
    assert stray.diagnostics[0].id_kind is IdKind.NULL and categories(stray) == {"unknown_slot"}


def test_a_streamed_id_less_call_counts_positional_once() -> None:
    events = stream(chunk(call("f", will_continue=True)), chunk(call(will_continue=True)), chunk(call(id=None)))
    result = run(events)
    assert result.calls[0].fragments == 3 and result.calls[0].transition_count(Transition.POSITIONAL) == 1


@pytest.mark.parametrize("bad", [7, True, ["c"], {"id": "c"}])
def test_an_id_that_is_no_string_is_unsupported_id_type(bad: Any) -> None:
    result = run(stream(chunk(call("f", {}, id=bad))))
    assert summary(result)[0][5][0] == "unsupported_id_type" and not result.dispatchable


def test_ids_establish_and_a_different_id_on_the_same_streamed_call_is_id_conflict() -> None:
    events = stream(
        chunk(call("f", id="c1", will_continue=True)),
        chunk(call(id="c1", will_continue=True)),  # the same id again: kept
        chunk(call(id=None, will_continue=True)),  # unset: kept
        chunk(call(id="c2")),
    )
    result = run(events)
    assert summary(result) == [(0, 0, "c1", "f", "{}", ("id_conflict",))]
    transitions = [d.transition for d in result.diagnostics]
    assert transitions == [
        Transition.ESTABLISH,
        Transition.KEEP_IDENTICAL,
        Transition.KEEP_OMITTED,
        Transition.REJECT,
    ]


def test_id_mode_an_id_less_sibling_is_missing_id() -> None:
    result = run(stream(chunk(call("f", {}, id="c1")), chunk(call("g", {}))))
    assert summary(result) == [(0, 0, "c1", "f", "{}", ("missing_id",)), (0, 1, None, "g", "{}", ("missing_id",))]
    assert not result.dispatchable  # one bad call blocks its siblings: c1 is rejected with its category
    assert all(call.transition_count(Transition.POSITIONAL) == 0 for call in result.calls)


def test_the_id_mode_is_per_candidate() -> None:
    events = [
        chunk(call("f", {}, id="c1"), index=0),
        chunk(call("f", {}), index=1),
        chunk(finish_reason="STOP", index=0),
        chunk(finish_reason="STOP", index=1),
    ]
    result = run(events)
    assert summary(result) == [(0, 0, "c1", "f", "{}", ()), (1, 0, None, "f", "{}", ())]
    assert result.calls[1].transition_count(Transition.POSITIONAL) == 1 and result.dispatchable


def test_require_call_id_makes_every_id_less_call_missing_id() -> None:
    events = stream(chunk(call("f", {}), call("g", {}, id="")))
    result = run(events, "require_call_id")
    assert [c.categories for c in result.calls] == [(E.MISSING_ID,), (E.MISSING_ID,)]
    assert not result.dispatchable and result.transition_counts()[Transition.POSITIONAL, IdKind.ABSENT] == 0
    assert run(stream(chunk(call("f", {}, id="c1"))), "require_call_id").dispatchable


def test_two_calls_with_one_id_are_duplicate_call_id_both() -> None:
    result = run(stream(chunk(call("f", {"a": 1}, id="c1")), chunk(call("f", {"a": 1}, id="c1"))))
    assert [c.categories for c in result.calls] == [(E.DUPLICATE_CALL_ID,), (E.DUPLICATE_CALL_ID,)]
    distinct = run(stream(chunk(call("f", {"a": 1}, id="c1")), chunk(call("f", {"a": 1}, id="c2"))))
    assert len(distinct.calls) == 2 and distinct.dispatchable


def test_names_are_set_once_and_an_empty_name_is_ignored() -> None:
    events = stream(chunk(call("f", will_continue=True)), chunk(call("", will_continue=True)), chunk(call("f")))
    assert summary(run(events)) == [(0, 0, None, "f", "{}", ())]


# --- 2.4 stream completion -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reasons", "state", "dispatchable", "reported"),
    [
        (["STOP"], StreamState.COMPLETED, True, ("STOP",)),
        (["STOP", "STOP", "STOP"], StreamState.COMPLETED, True, ("STOP",)),  # older endpoints: on every chunk
        (["MAX_TOKENS"], StreamState.COMPLETED, False, ("MAX_TOKENS",)),
        (["MALFORMED_FUNCTION_CALL"], StreamState.COMPLETED, False, ("MALFORMED_FUNCTION_CALL",)),
        (["UNEXPECTED_TOOL_CALL"], StreamState.COMPLETED, False, ("UNEXPECTED_TOOL_CALL",)),
        (["A_REASON_FROM_2027"], StreamState.COMPLETED, False, ("A_REASON_FROM_2027",)),
        (["STOP", "MAX_TOKENS"], StreamState.COMPLETED, False, ("MAX_TOKENS",)),  # a later reason makes it worse
        (["SAFETY", "STOP"], StreamState.COMPLETED, False, ("SAFETY",)),  # the worst reason wins
        (["FINISH_REASON_UNSPECIFIED"], StreamState.TRUNCATED, False, ()),  # the enum default: no reason
        (["CONTINUATION"], StreamState.TRUNCATED, False, ()),  # continued elsewhere: cut here
        (["CONTINUATION", "STOP"], StreamState.COMPLETED, True, ("STOP",)),  # continued in this stream
        ([""], StreamState.TRUNCATED, False, ()),
        ([], StreamState.TRUNCATED, False, ()),  # EOF before a finishReason
    ],
)
def test_the_end_is_decided_at_eof_by_every_finish_reason_seen(
    reasons: list[str], state: StreamState, dispatchable: bool, reported: tuple[str, ...]
) -> None:
    events = [chunk(call("f", {}), finish_reason=reasons[0] if reasons else MISSING)]
    events += [chunk(finish_reason=reason) for reason in reasons[1:]]
    result = run(events)
    assert (result.state, result.dispatchable, result.finish_reasons) == (state, dispatchable, reported)
    expected = {"STOP": set(), "TRUNCATED": {"truncated_stream"}}.get(reported[0] if reported else "TRUNCATED")
    assert categories(result) == (expected if expected is not None else {"incomplete_response"})


def test_an_incomplete_response_still_runs_the_assembly_checks_a_truncated_one_does_not() -> None:
    bad = chunk(call("f", "not an object"), call("g", {}, id="c1"))
    incomplete = run([bad, chunk(finish_reason="MAX_TOKENS")])
    assert [c.categories for c in incomplete.calls] == [
        (E.MISSING_ID, E.INVALID_ARGUMENTS, E.INCOMPLETE_RESPONSE),
        (E.INCOMPLETE_RESPONSE,),
    ]
    truncated = run([bad])
    assert [c.categories for c in truncated.calls] == [(E.TRUNCATED_STREAM,), (E.TRUNCATED_STREAM,)]


@pytest.mark.parametrize("after_stop", [False, True])
def test_an_in_band_error_fails_the_stream_even_after_stop(after_stop: bool) -> None:
    events = (
        [chunk(call("f", {})), chunk(finish_reason="STOP"), error()] if after_stop else [chunk(call("f", {})), error()]
    )
    result = run(events)
    assert result.state is StreamState.FAILED and categories(result) == {"truncated_stream"}


def test_only_an_object_that_starts_with_error_is_an_in_band_error() -> None:
    stray = {"candidates": [{"content": {"parts": [call("f", {})]}, "finishReason": "STOP"}], "error": {"x": 1}}
    assert run([stray]).dispatchable  # the SDK yields this chunk: it is no error object
    assert run([chunk(call("f", {})), chunk(finish_reason="STOP"), {"error": None}]).dispatchable
    assert run([chunk(call("f", {})), {}, chunk(finish_reason="STOP")]).dispatchable


def test_a_blocked_prompt_is_incomplete() -> None:
    result = run([blocked("PROHIBITED_CONTENT")])
    assert result.state is StreamState.COMPLETED and categories(result) == {"incomplete_response"}
    assert run([blocked("BLOCK_REASON_UNSPECIFIED"), *stream()]).rejections == ()  # the enum default blocks nothing


def test_a_text_only_response_is_complete_with_nothing_to_dispatch() -> None:
    result = run(stream(chunk(text("hello"))))
    assert (result.state, result.calls, result.rejections, result.dispatchable) == (
        StreamState.COMPLETED,
        (),
        (),
        False,
    )


def test_a_second_response_id_splices_the_stream_and_what_follows_is_ignored() -> None:
    events = [chunk(call("f", {})), chunk(call("g", {}), response_id="other", finish_reason="STOP")]
    events.append(chunk(finish_reason="STOP"))
    assembler = GeminiAssembler()
    for event in events:
        assembler.feed(event)
    result = assembler.finish()
    assert [c.name for c in result.calls] == ["f"] and result.state is StreamState.TRUNCATED
    assert assembler.ignored_events == 1 and not result.dispatchable
    no_id = run([chunk(call("f", {}), response_id=MISSING), chunk(finish_reason="STOP")])
    assert no_id.dispatchable  # chunks without responseId belong to the open response


def test_input_that_is_no_chunk_changes_nothing_and_finish_is_idempotent() -> None:
    assembler = GeminiAssembler()
    for event in ["text", 3, None, [1], chunk(call("f", {})), chunk(finish_reason="STOP")]:
        assembler.feed(event)
    assembler.feed_done()
    result = assembler.finish()
    assert assembler.ignored_events == 4 and result.dispatchable and assembler.finished
    assembler.feed(chunk(call("g", {})))
    assert assembler.finish() is result and assembler.ignored_events == 5


# --- 2.5 assembly --------------------------------------------------------------------------------


@pytest.mark.parametrize("args", ['{"a": 1}', ["a"], 3, True])
def test_args_that_are_no_object_are_invalid_never_parsed(args: Any) -> None:
    assert summary(run(stream(chunk(call("f", args))))) == [(0, 0, None, "f", "", ("invalid_arguments",))]


def test_args_json_lacks_are_invalid() -> None:
    result = assemble(stream(chunk(call("f", {"x": float("nan")}))))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


def test_partial_args_build_typed_leaves_by_json_path() -> None:
    leaves = [
        leaf("$.location", string="Par", will_continue=True),
        leaf("$.location", string="is"),
        leaf("$['unit name']", string="celsius"),
        leaf("$.days[0]", number=1),
        leaf("$.days[1]", number=2.5),
        leaf("$.days[0]", number=1),  # a revisit of a closed leaf: written again
    ]
    result = run(stream(chunk(call("f", will_continue=True)), chunk(call(partial_args=leaves[:5]))))
    assert result.calls[0].arguments == '{"location":"Paris","unit name":"celsius","days":[1,2.5]}'
    assert run(stream(chunk(call("f", will_continue=True)), chunk(call(partial_args=leaves)))).calls[0].categories == (
        E.INVALID_ARGUMENTS,
    )


def test_the_leaf_types_and_proto3_unset_values() -> None:
    entries = [
        leaf("$.s", string="x"),
        leaf("$.n", number=3),
        leaf("$.b", boolean=False),
        leaf("$.z", null=None),
        leaf("$.z2", null="NULL_VALUE"),
        {"jsonPath": "$.o", "stringValue": None, "numberValue": 4},  # a null value field counts as absent
        leaf("$.nested.deep[0].k", boolean=True),
    ]
    result = run(stream(chunk(call("f", will_continue=True)), chunk(call(partial_args=entries))))
    assert result.calls[0].arguments == (
        '{"s":"x","n":3,"b":false,"z":null,"z2":null,"o":4,"nested":{"deep":[{"k":true}]}}'
    )


def test_streamed_arguments_are_compared_as_json_values_with_snapshots() -> None:
    """An ``args`` claim on a streamed call must equal the leaves: ``1`` is ``1.0``, ``{}`` is a placeholder."""
    head = call("f", {}, will_continue=True, partial_args=[leaf("$.n", number=1.0)])
    equal = run(stream(chunk(head), chunk(call(args={"n": 1}))))
    assert equal.calls[0].categories == () and equal.dispatchable
    differs = run(stream(chunk(head), chunk(call(args={"n": 2}))))
    assert differs.calls[0].categories == (E.SNAPSHOT_MISMATCH,) and not differs.dispatchable


def test_a_streamed_call_without_partial_args_is_its_first_args_value() -> None:
    events = stream(chunk(call("f", {"a": 1}, will_continue=True)), chunk(call(args={"a": 1}, partial_args=[])))
    assert summary(run(events)) == [(0, 0, None, "f", '{"a":1}', ())]
    assert summary(run(stream(chunk(call("f", will_continue=True)), chunk(call())))) == [(0, 0, None, "f", "{}", ())]


# --- 2.6 calls repeated across chunks and 5 drop_repeated_call -----------------------------------


def test_drop_repeated_call_sets_a_whole_repeat_aside_and_counts_it() -> None:
    repeat = stream(chunk(call("f", {"a": 1}, id="c1")), chunk(call("f", {"a": 1.0}, id="c1")))
    result = run(repeat, "drop_repeated_call")
    assert summary(result) == [(0, 0, "c1", "f", '{"a":1}', ())] and result.dispatchable
    assert result.calls[0].transition_count(Transition.DROP_REPEAT) == 1 and result.fragments == 2
    assert [c.categories for c in run(repeat).calls] == [(E.DUPLICATE_CALL_ID,), (E.DUPLICATE_CALL_ID,)]


@pytest.mark.parametrize(
    "second",
    [
        call("f", {"a": 2}, id="c1"),  # other arguments
        call("g", {"a": 1}, id="c1"),  # another name
        call("f", {"a": 1}, id="c1", will_continue=True),  # not a whole call
        call("f", {"a": 1}, id="c1", partial_args=[]),
    ],
)
def test_drop_repeated_call_only_drops_exact_whole_repeats(second: dict[str, Any]) -> None:
    result = run(stream(chunk(call("f", {"a": 1}, id="c1")), chunk(second)), "drop_repeated_call")
    assert len(result.calls) == 2 and E.DUPLICATE_CALL_ID in result.categories


def test_drop_repeated_call_never_applies_to_id_less_calls() -> None:
    result = run(stream(chunk(call("f", {"a": 1})), chunk(call("f", {"a": 1}))), "drop_repeated_call")
    assert len(result.calls) == 2 and result.dispatchable
    invalid = run(stream(chunk(call("f", "x", id="c1")), chunk(call("f", "x", id="c1"))), "drop_repeated_call")
    assert len(invalid.calls) == 2  # arguments that are no object are never compared


# --- the description: follow-up, labels, call objects ---------------------------------------------


def _response(name: str, id: Any = MISSING) -> dict[str, Any]:
    return {"functionResponse": {k: v for k, v in (("id", id), ("name", name), ("response", {})) if v is not MISSING}}


def test_the_results_are_those_of_the_first_content_after_the_model_turn() -> None:
    contents = [
        {"role": "user", "parts": [text("weather?")]},
        {"role": "model", "parts": [call("f", {}, id="c0")]},
        {"role": "user", "parts": [_response("f", "c0")]},
        {"role": "model", "parts": [call("f", {}, id="c1"), call("g", {})]},
        {"role": "user", "parts": [_response("f", "c1"), text("note"), _response("g", "")]},
        {"role": "user", "parts": [_response("g", "late")]},
    ]
    assert GEMINI.result_ids(contents) == ["c1", None, None]
    assert GEMINI.result_ids({"contents": contents}) == ["c1", None, None]
    assert GEMINI.follow_up(contents) == (3, ["c1", None, None])
    assert GEMINI.result_ids([{"role": "user", "parts": [_response("f", "c9")]}]) == ["c9"]  # no model turn
    assert GEMINI.follow_up([{"role": "user", "parts": []}]) is None
    assert GEMINI.result_ids({"contents": "no"}) is None and GEMINI.result_ids(["no"]) is None
    assert GEMINI.result_ids([{"role": "user", "parts": "no"}]) == []


def test_slot_labels_and_call_objects() -> None:
    assert (GEMINI.slot_label(1, 2), GEMINI.slot_label(0, None)) == ("candidate 1 call 2", "candidate 0: no open call")
    assert GEMINI.call_fields({"id": "", "name": "f", "args": {"a": 1}}) == (ABSENT, "f", {"a": 1})
    assert GEMINI.call_fields({"name": "f", "arguments": "{}", "args": {}}) is None
    assert GEMINI.call_fields({"name": "f"}) is None and GEMINI.call_fields({"args": {}}) is None
    assert GEMINI.request_path == ":streamGenerateContent" and "MALFORMED_FUNCTION_CALL" in GEMINI.finish_reasons


class FinishReason(str, Enum):
    STOP = "STOP"
    MAX_TOKENS = "MAX_TOKENS"


def typed(value: Any, *, user: bool = False) -> Any:
    """A snake_case dump as objects read by attribute (the SDK's shape): finish reasons as enum members."""
    if isinstance(value, list):
        return [typed(item, user=user) for item in value]
    if not isinstance(value, dict) or user:
        return value
    fields = {key: typed(item, user=key == "args") for key, item in value.items()}
    if "finish_reason" in fields:
        fields["finish_reason"] = FinishReason(fields["finish_reason"])
    return SimpleNamespace(**fields)


@pytest.mark.parametrize("reason", ["STOP", "MAX_TOKENS"])
def test_typed_objects_read_by_attribute_assemble_like_the_json(reason: str) -> None:
    events = stream(
        chunk(call("f", will_continue=True)),
        chunk(call(partial_args=[leaf("$.a.b", string="x", will_continue=True)], will_continue=True)),
        chunk(call(partial_args=[leaf("$.a.b", string="y")])),
        chunk(call("g", {"n": 1}, id=None)),
        finish_reason=reason,
    )
    assembler = GeminiAssembler()
    for event in typed(snake(events)):
        assembler.feed(event)
    assert assembler.slots.finished is False
    result = assembler.finish()
    assert result == run(events) and result.calls[0].arguments == '{"a":{"b":"xy"}}'
    assert result.finish_reasons == (reason,)


def test_sdk_objects_missing_a_field_in_their_dict_are_read_with_field() -> None:
    """An SDK object lacking a field in ``__dict__`` (pydantic's ``model_construct`` can leave one out)
    is read field by field; here only unset fields are gone, so the result is the JSON's."""
    events = stream(
        chunk(call("f", will_continue=True), text("t")),
        chunk(call(partial_args=[leaf("$.a", string="x", will_continue=True)], will_continue=True)),
        chunk(call(partial_args=[leaf("$.a", string="y")])),
    )
    events.insert(0, {"candidates": [{"content": {"role": "model"}}], "responseId": "resp-gemini-1"})
    objects = sdk_objects(events)
    assert objects is not None
    for obj in objects:
        del obj.__dict__["prompt_feedback"]
        candidate = obj.candidates[0]
        del candidate.__dict__["citation_metadata"]
        if candidate.finish_reason is None:
            del candidate.__dict__["finish_reason"]
        parts = candidate.content.parts
        if parts is None:
            del candidate.content.__dict__["parts"]
        for part in parts or ():
            if part.function_call is None:
                del part.__dict__["function_call"]
            elif part.function_call.args is None:
                del part.function_call.__dict__["args"]
                for entry in part.function_call.partial_args or ():
                    del entry.__dict__["bool_value"]
    result = assemble(objects)
    assert result == run(events) and result.calls[0].arguments == '{"a":"xy"}'


class _Info:
    """What the inlined paths ask of a pydantic ``FieldInfo``."""

    def __init__(self, required: bool = False) -> None:
        self.required, self.default, self.default_factory = required, None, None

    def is_required(self) -> bool:
        return self.required


_LOOK_ALIKE_FIELDS = (
    *("response_id", "prompt_feedback", "candidates", "index", "content", "finish_reason", "parts"),
    *("function_call", "id", "name", "args", "partial_args", "will_continue"),
    *("json_path", "string_value", "number_value", "bool_value", "null_value", "error"),
)
_UNREAD = ("role", "model_version")


class _LookAlike:
    """Declares pydantic's ``model_fields`` (all of every role's) but has no ``__dict__``: read with field()."""

    __slots__ = (*_LOOK_ALIKE_FIELDS, *_UNREAD)
    model_config: dict[str, Any] = {}
    model_fields = {name: _Info(required=name == "candidates") for name in _LOOK_ALIKE_FIELDS if name != "error"}

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


def look_alike(value: Any, *, user: bool = False) -> Any:
    if isinstance(value, list):
        return [look_alike(item, user=user) for item in value]
    if not isinstance(value, dict) or user:
        return value
    return _LookAlike(**{key: look_alike(item, user=key == "args") for key, item in value.items()})


def test_objects_that_look_like_pydantic_models_but_are_not_are_read_with_field() -> None:
    events = stream(
        chunk(call("f", will_continue=True)),
        chunk(call(partial_args=[leaf("$.a", number=1)])),
        chunk(call("g", {"n": 1}, id="c2")),
    )
    assert [_LookAlike in classes for classes in _INLINED] == [False] * 6
    assert assemble(look_alike(snake(events))) == run(events)
    assert all(classes[_LookAlike] for classes in _INLINED)  # learned as a model: each read found no __dict__
    failed = GeminiAssembler()
    failed.feed(_LookAlike(error={"code": 500}))
    assert failed.finish().state is StreamState.FAILED


def test_a_class_whose_field_declarations_are_not_pydantic_s_is_read_with_field() -> None:
    odd = type("Odd", (), {"model_fields": {"index": object()}, "model_config": {}})
    classes = SdkClasses(("index",))
    assert classes[odd] is False and classes[SimpleNamespace] is False and odd in classes


def test_a_number_leaf_of_any_integer_size_is_a_number() -> None:
    huge = 10**400  # parsed JSON keeps it as an int: no float holds it
    events = stream(chunk(call("f", will_continue=True)), chunk(call(partial_args=[leaf("$.n", number=huge)])))
    assert summary(run(events)) == [(0, 0, None, "f", f'{{"n":{huge}}}', ())]


def test_a_later_response_is_another_response_id_after_every_candidate_ended() -> None:
    first = [chunk(call("f", {}), index=0), chunk(finish_reason="STOP", index=0)]
    second = [chunk(call("g", {}), response_id="resp-2"), chunk(finish_reason="STOP", response_id="resp-2")]
    assert GEMINI.later_responses([*first, "[DONE]", *second]) == [3]
    assert GEMINI.later_responses([first[0], *second]) == []  # before the end: a splice, judged by the adapter
    assert GEMINI.later_responses([*first, *first]) == []  # one responseId: no second response to tell
    two = [chunk(finish_reason="STOP", index=0), chunk(call("g", {}), index=1)]
    assert GEMINI.later_responses([*two, *second]) == []  # candidate 1 never ended
    odd = {"candidates": [{"index": [1]}, "no"], "responseId": "resp-gemini-1"}
    assert GEMINI.later_responses([odd, *first, *second]) == [3]


def test_a_complete_body_is_the_one_chunk_it_is_and_judged_as_a_whole() -> None:
    """``generateContent`` answers one ``GenerateContentResponse``: its calls are whole, its end is its reason."""
    from etf_otel.protocols._bodies import judge_body
    from etf_otel.protocols._gemini_description import body_events

    body = chunk(call("f", {"a": 1}), call("g"), finish_reason="STOP")
    assert body_events(body) == [body] and GEMINI.judges_bodies
    assert body_events(blocked()) == [blocked()]
    assert body_events(snake(body)) == [snake(body)]
    for no_body in ({}, {"candidates": None}, [body], "text", None, {"choices": []}):
        assert body_events(no_body) is None
    judged = judge_body(GEMINI, body, IdentityRules())
    assert judged is not None and judged.dispatchable
    positional = ((Transition.POSITIONAL, 1),)  # about the call, not a fragment: a body keeps it
    assert [(c.name, c.arguments, c.fragments, c.transitions) for c in judged.calls] == [
        ("f", '{"a":1}', 0, positional),
        ("g", "{}", 0, positional),
    ]
    cut = judge_body(GEMINI, chunk(call("f", {}), finish_reason="MAX_TOKENS"), IdentityRules())
    assert cut is not None and not cut.dispatchable and categories(cut) == {"incomplete_response"}


def test_opened_counts_the_calls_each_candidate_opened_so_far() -> None:
    assembler = GeminiAssembler()
    assert assembler.opened() == 0
    assembler.feed(chunk(call("f", {}), call("g", will_continue=True)))
    assembler.feed(chunk(call(partial_args=[leaf("$.a", number=1)])))  # a continuation opens nothing
    assert (assembler.opened(0), assembler.opened(1)) == (2, 0)
