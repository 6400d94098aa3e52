"""The reference assembler: scoping, the case study, final validation (docs/identity-rules.md)."""

from __future__ import annotations

import enum
from typing import Any

import pytest

from etf_otel import (
    DONE,
    CompatibilityRule,
    ErrorCategory,
    IdKind,
    ReferenceAssembler,
    StreamState,
    Transition,
    Verdict,
    assemble,
)
from etf_otel.core._identity import ABSENT, IdState
from etf_otel.core._slots import ResponseSlots
from etf_otel.protocols._base import field
from etf_otel.testing.chat import MISSING, case_stream, chunk, finished, fragment

E = ErrorCategory


def categories(result: Any) -> list[ErrorCategory]:
    return [rejection.category for rejection in result.rejections]


# --- the case study -------------------------------------------------------------------


def test_control_and_target_streams_assemble_to_the_same_call() -> None:
    control = assemble(case_stream(MISSING))
    target = assemble(case_stream(None))
    assert control.dispatchable and target.dispatchable
    assert [(c.id, c.name, c.arguments) for c in control.proposals] == [("call-a", "read_page", '{"page":1}')]
    assert [(c.id, c.name, c.arguments) for c in target.proposals] == [("call-a", "read_page", '{"page":1}')]
    assert [d.transition for d in control.diagnostics] == [Transition.ESTABLISH, Transition.KEEP_OMITTED]
    assert [d.transition for d in target.diagnostics] == [Transition.ESTABLISH, Transition.KEEP_NULL]
    assert target.calls[0].transition_count(Transition.KEEP_NULL) == 1
    assert control.calls[0].transition_count(Transition.KEEP_NULL) == 0


def test_initial_null_is_rejected() -> None:
    result = assemble(finished(chunk(fragment(0, None, "read_page", "{}"))))
    assert categories(result) == [E.INITIAL_NULL, E.MISSING_ID]
    assert result.calls[0].id is None
    assert not result.dispatchable and result.proposals == ()


def test_null_on_a_new_index_does_not_borrow_the_neighbours_id() -> None:
    result = assemble(
        finished(
            chunk(fragment(0, "call-a", "read_page", "{}")),
            chunk(fragment(1, None, "save_report", "{}")),
        )
    )
    first, second = result.calls
    assert second.id is None and second.categories == (E.INITIAL_NULL, E.MISSING_ID)
    assert not result.dispatchable
    # The first call keeps its own id; its checks passed, but its sibling blocks the response.
    assert first.id == "call-a" and first.verdict is Verdict.REJECTED and first.categories == (E.INITIAL_NULL,)


def test_conflicting_id_is_rejected_and_the_established_id_kept() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", "{")), chunk(fragment(0, "call-b", arguments="}"))))
    assert result.calls[0].id == "call-a"
    assert result.calls[0].categories == (E.ID_CONFLICT,)
    assert not result.dispatchable


def test_empty_after_established_is_rejected_by_default() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", "{")), chunk(fragment(0, "", arguments="}"))))
    assert result.calls[0].categories == (E.EMPTY_AFTER_ESTABLISHED,)
    assert result.calls[0].id == "call-a"


@pytest.mark.parametrize("bad", [1, 0.5, True, ["call-a"], {"id": "call-a"}])
def test_unsupported_id_types_are_rejected(bad: Any) -> None:
    result = assemble(finished(chunk(fragment(0, bad, "f", "{}"))))
    assert result.calls[0].categories[0] is E.UNSUPPORTED_ID_TYPE
    assert result.calls[0].id is None


@pytest.mark.parametrize("arguments", ['{"page":', "[1, 2]", '"text"', "", "1", "NaN", '{"a": NaN}', "{} {}"])
def test_arguments_that_are_not_one_json_object_are_rejected(arguments: str) -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", arguments))))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)
    assert not result.dispatchable


def test_duplicate_final_ids_reject_both_calls() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", "{}")), chunk(fragment(1, "call-a", "g", "{}"))))
    assert [call.categories for call in result.calls] == [(E.DUPLICATE_CALL_ID,), (E.DUPLICATE_CALL_ID,)]
    assert not result.dispatchable


def test_duplicate_ids_across_choices_are_one_response() -> None:
    result = assemble(
        [
            chunk(fragment(0, "call-a", "f", "{}"), choice=0),
            chunk(fragment(0, "call-a", "f", "{}"), choice=1),
            DONE,
        ]
    )
    assert [call.categories for call in result.calls] == [(E.DUPLICATE_CALL_ID,), (E.DUPLICATE_CALL_ID,)]


def test_stream_cut_before_terminal_event_dispatches_nothing() -> None:
    stream = case_stream(None)[:2]
    result = assemble(stream)
    assert result.state is StreamState.TRUNCATED
    assert result.calls[0].categories == (E.TRUNCATED_STREAM,)
    assert result.proposals == ()


def test_empty_stream_is_truncated_with_a_response_level_rejection() -> None:
    result = assemble([])
    assert result.state is StreamState.TRUNCATED
    assert [(r.choice, r.index, r.category) for r in result.rejections] == [(None, None, E.TRUNCATED_STREAM)]


def test_text_only_response_is_complete_but_not_dispatchable() -> None:
    result = assemble([chunk(finish_reason="stop"), DONE])
    assert result.state is StreamState.COMPLETED
    assert result.rejections == () and not result.dispatchable
    assert result.finish_reasons == ("stop",)


def test_finish_reason_alone_ends_the_response() -> None:
    result = assemble([chunk(fragment(0, "call-a", "f", "{}")), chunk(finish_reason="tool_calls")])
    assert result.state is StreamState.COMPLETED and result.dispatchable


def test_done_alone_ends_the_response() -> None:
    result = assemble([chunk(fragment(0, "call-a", "f", "{}")), DONE])
    assert result.dispatchable


def test_finalization_waits_for_the_end_not_the_first_finish_reason() -> None:
    result = assemble(
        [
            chunk(fragment(0, "call-a", "f", '{"a":'), finish_reason="tool_calls"),
            chunk(fragment(0, arguments="1}")),
            chunk(finish_reason="tool_calls"),
            DONE,
        ]
    )
    assert result.calls[0].arguments == '{"a":1}'
    assert result.dispatchable
    assert result.finish_reasons == ("tool_calls",)


def test_every_choice_with_calls_needs_its_finish_reason_without_done() -> None:
    result = assemble(
        [
            chunk(fragment(0, "call-a", "f", "{}"), choice=0),
            chunk(fragment(0, "call-b", "f", "{}"), choice=1),
            chunk(finish_reason="tool_calls", choice=0),
        ]
    )
    assert result.state is StreamState.TRUNCATED


# --- scoping ---------------------------------------------------------------------------


def test_interleaved_slots_keep_their_own_arguments() -> None:
    result = assemble(
        finished(
            chunk(fragment(0, "call-a", "f", '{"x":'), fragment(1, "call-b", "g", '{"y":')),
            chunk(fragment(1, None, arguments="2}")),
            chunk(fragment(0, None, arguments="1}")),
        )
    )
    assert [(c.index, c.id, c.arguments) for c in result.calls] == [(0, "call-a", '{"x":1}'), (1, "call-b", '{"y":2}')]


def test_same_tool_index_on_two_choices_are_two_slots() -> None:
    result = assemble([chunk(fragment(0, "call-a", "f", "{}"), choice=0), chunk(fragment(0, None), choice=1), DONE])
    assert [(c.choice, c.id) for c in result.calls] == [(0, "call-a"), (1, None)]
    assert result.calls[1].categories[0] is E.INITIAL_NULL


def test_a_new_response_never_inherits_an_id() -> None:
    assemble(finished(chunk(fragment(0, "call-a", "f", "{}"))))
    result = assemble(finished(chunk(fragment(0, None, arguments="{}"))))
    assert result.calls[0].id is None


def test_first_index_of_one_is_fine() -> None:
    result = assemble(finished(chunk(fragment(1, "call-a", "f", "{}"))))
    assert result.dispatchable and result.calls[0].index == 1


@pytest.mark.parametrize("index", [MISSING, None, -1, "0", 1.0, True])
def test_fragment_without_usable_index_is_merged_nowhere_and_blocks_the_response(index: Any) -> None:
    result = assemble(
        finished(chunk(fragment(0, "call-a", "f", '{"a":')), chunk(fragment(index, None, arguments="1}")))
    )
    assert result.calls[0].arguments == '{"a":'
    assert (0, None, E.MISSING_INDEX) in [(r.choice, r.index, r.category) for r in result.rejections]
    assert not result.dispatchable
    assert result.diagnostics[-1].category is E.MISSING_INDEX


@pytest.mark.parametrize("bad_fragment", ["text", 3, None, ["index", 0]])
def test_fragment_that_is_not_an_object_is_missing_index(bad_fragment: Any) -> None:
    result = assemble(
        finished(
            chunk(fragment(0, "call-a", "f", "{}")),
            {"choices": [{"index": 0, "delta": {"tool_calls": [bad_fragment]}}]},
        )
    )
    assert E.MISSING_INDEX in categories(result)


# --- names and arguments -----------------------------------------------------------------


def test_name_is_set_once_and_never_concatenated() -> None:
    result = assemble(
        finished(
            chunk(fragment(0, "call-a", "read_file", "{")),
            chunk(fragment(0, None, "read_file", "}")),
            chunk(fragment(0, None, "", "")),
        )
    )
    assert result.calls[0].name == "read_file" and result.dispatchable


def test_different_name_is_a_name_conflict() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "read_file", "{")), chunk(fragment(0, None, "rm", "}"))))
    assert result.calls[0].name == "read_file"
    assert result.calls[0].categories == (E.NAME_CONFLICT,)
    assert result.diagnostics[-1].transition is Transition.KEEP_NULL
    assert result.diagnostics[-1].category is E.NAME_CONFLICT


def test_empty_first_name_waits_for_a_real_one() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "", "{")), chunk(fragment(0, None, "f", "}"))))
    assert result.calls[0].name == "f" and result.dispatchable


def test_missing_name_is_rejected() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", arguments="{}"))))
    assert result.calls[0].categories == (E.MISSING_NAME,)


def test_name_that_is_not_a_string_is_unusable() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", 42, "{}"))))
    assert result.calls[0].name is None
    assert result.calls[0].categories == (E.MISSING_NAME,)


def test_null_or_absent_arguments_add_nothing() -> None:
    result = assemble(
        finished(
            chunk(fragment(0, "call-a", "f", "{")),
            chunk(fragment(0, arguments=None)),
            chunk(fragment(0, arguments="}")),
        )
    )
    assert result.calls[0].arguments == "{}" and result.dispatchable


@pytest.mark.parametrize("bad", [{"a": 1}, 5, ["{}"], True])
def test_arguments_that_are_not_strings_are_invalid(bad: Any) -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", "{}")), chunk(fragment(0, arguments=bad))))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)
    assert result.calls[0].arguments == "{}"


@pytest.mark.parametrize("function", ["read_file", 3, ["f"]])
def test_function_that_is_not_an_object_is_invalid(function: Any) -> None:
    result = assemble(finished(chunk({"index": 0, "id": "call-a", "function": function})))
    assert result.calls[0].categories == (E.MISSING_NAME, E.INVALID_ARGUMENTS)


def test_type_field_is_ignored() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", "{}") | {"type": None})))
    assert result.dispatchable


def test_arguments_over_the_cap_are_invalid_and_stop_growing() -> None:
    assembler = ReferenceAssembler(max_argument_chars=8)
    for piece in ('{"a":', '"xx', 'xx"}'):
        assembler.feed(chunk(fragment(0, "call-a" if piece.startswith("{") else MISSING, "f", piece)))
    assembler.feed(DONE)
    call = assembler.finish().calls[0]
    assert call.categories == (E.INVALID_ARGUMENTS,)
    assert call.arguments == ""


# --- malformed chunks are tolerated --------------------------------------------------------


@pytest.mark.parametrize(
    "odd",
    [
        {},
        {"choices": None},
        {"choices": "x"},
        {"choices": [None]},
        {"choices": [{"delta": None}]},
        {"choices": [{"index": 0, "delta": "text"}]},
        {"choices": [{"index": "0", "delta": {"tool_calls": "x"}}]},
        {"choices": [{"index": -3, "delta": {}, "finish_reason": 5}]},
        [],
        "text",
        7,
        None,
    ],
)
def test_odd_chunks_never_raise(odd: Any) -> None:
    assembler = ReferenceAssembler()
    assembler.feed(odd)
    assembler.feed(chunk(fragment(0, "call-a", "f", "{}")))
    assembler.feed(DONE)
    assert assembler.finish().dispatchable


def test_choice_without_index_uses_its_position() -> None:
    result = assemble(
        [{"choices": [{"delta": {}}, {"delta": {"tool_calls": [fragment(0, "call-b", "f", "{}")]}}]}, b"[DONE]"]
    )
    assert result.calls[0].choice == 1


def test_finish_is_idempotent_and_releases_slot_state() -> None:
    assembler = ReferenceAssembler()
    assembler.feed(chunk(fragment(0, "call-a", "f", "{}")))
    assembler.feed_done()
    first = assembler.finish()
    assert assembler.finished
    assert assembler.finish() is first
    assert assembler.slots._slots == {}


# --- infer_missing_index -------------------------------------------------------------------


def test_infer_missing_index_assigns_calls_that_carry_their_own_ids() -> None:
    stream = finished(
        chunk({"id": "call-a", "function": {"name": "f", "arguments": "{}"}}),
        chunk({"id": "call-b", "function": {"name": "g", "arguments": "{}"}}),
    )
    strict = assemble(stream)
    assert not strict.dispatchable
    result = assemble(stream, allow=["infer_missing_index"])
    assert [(c.index, c.id) for c in result.calls] == [(0, "call-a"), (1, "call-b")]
    assert result.dispatchable
    assert [d.transition for d in result.diagnostics] == [
        Transition.INFER_INDEX,
        Transition.ESTABLISH,
        Transition.INFER_INDEX,
        Transition.ESTABLISH,
    ]
    assert result.calls[0].transition_count(Transition.INFER_INDEX) == 1


def test_infer_missing_index_continues_the_only_slot() -> None:
    result = assemble(
        finished(
            chunk({"id": "call-a", "function": {"name": "f", "arguments": "{"}}),
            chunk({"function": {"arguments": "}"}}),
        ),
        allow=["infer_missing_index"],
    )
    assert result.calls[0].arguments == "{}" and result.dispatchable


def test_infer_missing_index_matches_a_repeated_id() -> None:
    result = assemble(
        finished(
            chunk(fragment(0, "call-a", "f", "{"), fragment(1, "call-b", "g", "{}")),
            chunk({"id": "call-a", "function": {"arguments": "}"}}),
        ),
        allow=["infer_missing_index"],
    )
    assert result.calls[0].arguments == "{}" and result.dispatchable


def test_infer_missing_index_starts_at_zero_without_an_id() -> None:
    result = assemble(finished(chunk({"function": {"name": "f", "arguments": "{}"}})), allow=["infer_missing_index"])
    assert result.calls[0].index == 0
    assert result.calls[0].categories == (E.MISSING_ID,)


@pytest.mark.parametrize(
    "ambiguous",
    [
        {"function": {"arguments": "}"}},  # two slots: which one continues?
        {"id": 5, "function": {"arguments": "}"}},  # unsupported id type
        {"id": "call-c", "function": {"arguments": "}"}},  # a new id while a slot still lacks one
    ],
)
def test_infer_missing_index_refuses_ambiguity(ambiguous: dict[str, Any]) -> None:
    result = assemble(
        finished(chunk(fragment(0, "call-a", "f", "{}"), fragment(1, MISSING, "g", "{}")), chunk(ambiguous)),
        allow=["infer_missing_index"],
    )
    assert E.MISSING_INDEX in categories(result)


# --- SDK objects and field access ------------------------------------------------------------


def test_openai_sdk_chunks_assemble_like_dicts() -> None:
    chunk_model = pytest.importorskip("openai.types.chat").ChatCompletionChunk
    for continuation in (MISSING, None):
        sdk = [c if c == DONE else chunk_model.construct(**c) for c in case_stream(continuation)]
        dicts = assemble(case_stream(continuation))
        objects = assemble(sdk)
        assert objects.dispatchable
        assert [d.transition for d in objects.diagnostics] == [d.transition for d in dicts.diagnostics]
        assert objects.calls == dicts.calls


def test_openai_sdk_missing_index_is_absent_not_none() -> None:
    chunk_model = pytest.importorskip("openai.types.chat").ChatCompletionChunk
    sdk = chunk_model.construct(**chunk({"id": "call-a", "function": {"name": "f", "arguments": "{}"}}))
    result = assemble([sdk, DONE])
    assert result.diagnostics[0].category is E.MISSING_INDEX


def test_field_reads_attributes_extras_and_dict_subclasses() -> None:
    class Plain:
        index = 0

    class Model:
        __pydantic_fields_set__ = {"index"}
        __pydantic_extra__ = {"custom": 1}
        index = 2
        other = 3

    class MyDict(dict[str, Any]):
        pass

    assert field(Plain(), "index") == 0
    assert field(Plain(), "id") is ABSENT
    assert field(Model(), "index") == 2
    assert field(Model(), "other") is ABSENT
    assert field(Model(), "custom") == 1
    assert field(MyDict(id="x"), "id") == "x"
    assert field({"id": None}, "id") is None
    assert field({}, "id") is ABSENT


def test_string_and_number_subclasses_are_classified_by_their_base() -> None:
    class Id(str, enum.Enum):
        A = "call-a"

    class Num(int):
        pass

    class Seq(list[Any]):
        pass

    result = assemble(
        finished(chunk(fragment(0, Id.A, "f", "{}")), chunk(fragment(0, Num(3))), chunk(fragment(0, Seq())))
    )
    call = result.calls[0]
    assert call.id == "call-a"
    assert [d.id_kind.value for d in result.diagnostics] == ["string", "number", "array"]


def test_slot_close_records_the_end_time() -> None:
    ticks = iter(range(100))
    slots = ResponseSlots(clock=lambda: next(ticks))
    slots.fragment(0, 0, "call-a", "f", "{}")
    slots.close(0, 0)
    slots.close(0, 0)
    slots.close(0, 5)
    slots.end()
    call = slots.finish().calls[0]
    assert (call.opened_ns, call.closed_ns) == (0, 1)


def test_rejected_fragments_carry_only_bounded_fields() -> None:
    result = assemble(finished(chunk(fragment(0, "call-secret", "f", "{}")), chunk(fragment(0, "call-other"))))
    rejected = result.calls[0].rejected_fragments
    assert len(rejected) == 1
    assert "call-other" not in repr(rejected)
    assert rejected[0].category is E.ID_CONFLICT and rejected[0].prior_id_present


def test_fragment_rejected_for_id_and_name_keeps_both_categories() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", "{}")), chunk(fragment(0, "call-b", "g"))))
    assert result.calls[0].categories == (E.ID_CONFLICT, E.NAME_CONFLICT)
    assert result.diagnostics[-1].category is E.ID_CONFLICT
    assert result.categories == (E.ID_CONFLICT, E.NAME_CONFLICT)


def test_result_counters_feed_the_metrics() -> None:
    result = assemble(
        finished(
            chunk(fragment(0, "call-a", "f", "{")), chunk(fragment(0, None, arguments="}")), chunk(fragment(0, ""))
        )
    )
    assert result.transition_counts() == {
        (Transition.ESTABLISH, IdKind.STRING): 1,
        (Transition.KEEP_NULL, IdKind.NULL): 1,
        (Transition.REJECT, IdKind.STRING): 1,
    }
    assert result.identity_errors() == {(E.EMPTY_AFTER_ESTABLISHED, IdKind.STRING, True, True): 1}
    assert not result.calls[0].proposed


def test_explicit_rules_object_is_used() -> None:
    from etf_otel import IdentityRules
    from etf_otel.core._identity import DEFAULT_RULES

    assembler = ReferenceAssembler(rules=IdentityRules(["empty_continuation"]))
    assert assembler.slots.rules.rules == {CompatibilityRule.EMPTY_CONTINUATION, *DEFAULT_RULES}
    assert repr(ABSENT) == "ABSENT"
    assert IdentityRules().decide(IdState.ESTABLISHED, "call-a", None).transition is Transition.KEEP_NULL


def test_unknown_python_types_are_objects() -> None:
    result = assemble(finished(chunk(fragment(0, object(), "f", "{}"))))
    assert result.diagnostics[0].id_kind is IdKind.OBJECT
    assert result.calls[0].categories[0] is E.UNSUPPORTED_ID_TYPE


def test_string_arguments_after_invalid_ones_are_not_kept() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", 5)), chunk(fragment(0, arguments="{}"))))
    assert result.calls[0].arguments == ""
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)


def test_transition_counts_per_slot_hold_each_compatibility_transition() -> None:
    result = assemble(
        finished(
            chunk({"id": "call-a", "function": {"name": "f", "arguments": "{"}}),
            chunk(fragment(0, None, arguments="}")),
        ),
        allow=["infer_missing_index"],
    )
    call = result.calls[0]
    assert call.transition_count(Transition.KEEP_NULL) == 1
    assert call.transition_count(Transition.INFER_INDEX) == 1
    assert call.transition_count(Transition.KEEP_EMPTY) == 0


def test_infer_missing_index_never_adopts_a_fragment_that_is_not_an_object() -> None:
    result = assemble(
        finished(chunk(fragment(0, "call-a", "f", "{}")), {"choices": [{"index": 0, "delta": {"tool_calls": [None]}}]}),
        allow=["infer_missing_index"],
    )
    assert [c.fragments for c in result.calls] == [1]
    assert E.MISSING_INDEX in categories(result)


def test_plain_objects_are_read_like_sdk_objects() -> None:
    from types import SimpleNamespace

    def choice(fragment: object) -> object:
        return SimpleNamespace(index=0, delta=SimpleNamespace(tool_calls=[fragment]), finish_reason=None)

    first = SimpleNamespace(index=0, id="call-a", function=SimpleNamespace(name="f", arguments="{"))
    continuation = SimpleNamespace(index=0, function=SimpleNamespace(arguments="}"))  # no id attribute: absent
    nameless = SimpleNamespace(index=0, id=None, function=SimpleNamespace())  # function without fields
    result = assemble([SimpleNamespace(choices=[choice(f)]) for f in (first, continuation, nameless)] + [DONE])
    assert [d.transition for d in result.diagnostics] == [
        Transition.ESTABLISH,
        Transition.KEEP_OMITTED,
        Transition.KEEP_NULL,
    ]
    assert (result.calls[0].id, result.calls[0].arguments) == ("call-a", "{}")
    assert result.dispatchable


def test_decide_classifies_strings_against_the_established_id() -> None:
    from etf_otel import IdentityRules

    rules = IdentityRules()
    assert rules.decide(IdState.ESTABLISHED, "call-a", "call-a").transition is Transition.KEEP_IDENTICAL
    assert rules.decide(IdState.ESTABLISHED, "call-a", "call-b").category is E.ID_CONFLICT
    assert rules.decide(IdState.NONE, None, "call-b").transition is Transition.ESTABLISH
    assert rules.decide(IdState.ESTABLISHED, "call-a", "").category is E.EMPTY_AFTER_ESTABLISHED


def test_diagnostics_past_the_cap_are_counted_not_listed() -> None:
    slots = ResponseSlots(max_diagnostics=3)
    slots.fragment(0, 0, "call-a", "f", "{")
    for _ in range(600):  # many tiny pieces: compacted, and past the diagnostics cap
        slots.fragment(0, 0, None, arguments=" ")
    slots.fragment(0, 0, "call-b", arguments="}")
    for _ in range(70):
        slots.fragment(0, 0, "call-c")
    slots.end()
    result = slots.finish()
    call = result.calls[0]
    assert len(result.diagnostics) == 3 and result.diagnostics_dropped == 669
    assert result.transition_counts()[Transition.KEEP_NULL, IdKind.NULL] == 600
    assert result.identity_errors()[E.ID_CONFLICT, IdKind.STRING, True, False] == 71
    assert call.transition_count(Transition.KEEP_NULL) == 600
    assert call.arguments == "{" + " " * 600 + "}"
    assert (len(call.rejected_fragments), call.rejected_count) == (64, 71)


def test_missing_index_fragments_are_one_rejection_per_choice() -> None:
    result = assemble(finished(chunk(fragment(0, "call-a", "f", "{}")), *[chunk(fragment(None)) for _ in range(5)]))
    assert [r.category for r in result.rejections].count(E.MISSING_INDEX) == 1


def test_done_as_a_string_subclass_and_objects_without_choices() -> None:
    class Sentinel(str):
        pass

    assembler = ReferenceAssembler()
    assembler.feed(object())  # no choices attribute: nothing to do
    assembler.feed(chunk(fragment(0, "call-a", "f", "{}")))
    assembler.feed(Sentinel("[DONE]"))
    assert assembler.finish().dispatchable


@pytest.mark.parametrize("function", ["{}", '{"a":1}', 3, ["{}"]])
def test_a_function_that_is_not_an_object_makes_the_arguments_invalid(function: Any) -> None:
    """A string ``function`` is not arguments, even when it reads as a JSON object."""
    result = assemble(finished(chunk(fragment(0, "call-a", "f")), chunk({"index": 0, "function": function})))
    assert result.calls[0].categories == (E.INVALID_ARGUMENTS,)
    assert not result.dispatchable
