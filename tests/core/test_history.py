"""What a follow-up's judgement covers (docs/protocols.md, "Linkage across turns"): the answered turn
wherever it stands, its answers up to the next assistant turn, and drift never judged as a violation."""

from __future__ import annotations

import json

from etf_otel.core._history import (
    Drift,
    DriftKind,
    HistoryCall,
    HistoryResult,
    Shape,
    Turn,
    answered_turn,
    call_digest,
    judge_history,
)

WEATHER = {"city": "Paris"}
TIME = {"zone": "CET"}


def shape(call_id: str | None, name: str, arguments: object, proposed: bool = True) -> Shape:
    return Shape(call_id, name, call_digest(name, arguments), proposed)


def assistant(*calls: tuple[str | None, str, object]) -> Turn:
    return Turn(True, tuple(HistoryCall(call_id, name, arguments) for call_id, name, arguments in calls))


def results(*ids: str | None, error: bool = False) -> Turn:
    return Turn(False, results=tuple(HistoryResult(call_id, error=error) for call_id in ids))


USER = Turn(False)
ROUND_1 = [assistant(("call_a", "weather", WEATHER)), results("call_a")]
LATEST = [shape("call_b", "time", TIME)]


def test_call_digest_reads_json_text_and_objects_alike_and_refuses_what_is_not_json() -> None:
    assert call_digest("f", '{"b": 1, "a": 2}') == call_digest("f", {"a": 2, "b": 1})
    assert call_digest("f", "") == call_digest("f", None) == call_digest("f", {})
    assert call_digest("f", "{") is None
    assert call_digest("f", {"x": float("nan")}) is not None  # JSON as Python writes it
    assert call_digest("f", {1}) is not None  # default=str: never raises
    deep: object = []
    for _ in range(100_000):
        deep = [deep]
    assert call_digest("f", deep) is None  # too deep to encode: no digest rather than an error
    assert call_digest("f", "[" * 100_000) is None
    assert call_digest(None, {}) != call_digest("f", {})


def test_a_stateless_history_judges_only_the_latest_round() -> None:
    """Earlier rounds' calls and results are the earlier responses': never orphaned here."""
    turns = [USER, *ROUND_1, assistant(("call_b", "time", TIME)), results("call_b")]
    judgement = judge_history(turns, LATEST)
    assert judgement is not None
    assert (judgement.answered, judgement.result_ids, judgement.drift) == (3, ["call_b"], [])


def test_turns_after_the_answer_never_make_the_answered_call_unanswered() -> None:
    turns = [USER, assistant(("call_b", "time", TIME)), results("call_b"), Turn(True), USER]
    judgement = judge_history(turns, LATEST)
    assert judgement is not None and judgement.result_ids == ["call_b"]


def test_a_result_in_a_later_turn_that_answers_no_call_is_still_judged() -> None:
    turns = [USER, assistant(("call_b", "time", TIME)), results("call_b"), Turn(True), results("call_x")]
    judgement = judge_history(turns, LATEST)
    assert judgement is not None and judgement.result_ids == ["call_b", "call_x"]


def test_a_synthetic_round_after_the_answer_is_call_fabricated() -> None:
    turns = [
        USER,
        assistant(("call_b", "time", TIME)),
        results("call_b"),
        assistant(("search_1", "search_tools", {})),
        results("search_1"),
    ]
    judgement = judge_history(turns, LATEST)
    assert judgement is not None
    assert judgement.result_ids == ["call_b"]
    assert judgement.drift == [Drift(DriftKind.CALL_FABRICATED, None, "search_tools")]


def test_a_call_the_framework_added_to_the_answered_turn_and_answered_is_call_fabricated() -> None:
    turns = [USER, assistant(("call_b", "time", TIME), ("own_1", "note", {})), results("call_b", "own_1")]
    judgement = judge_history(turns, LATEST)
    assert judgement is not None
    assert judgement.result_ids == ["call_b"]
    assert judgement.drift == [Drift(DriftKind.CALL_FABRICATED, None, "note")]


def test_reused_ids_take_the_last_turn_that_carries_the_whole_call() -> None:
    """``call_0`` in every response: the turn with the same id, name and arguments is the answered one."""
    latest = [shape("call_0", "time", TIME)]
    turns = [
        USER,
        assistant(("call_0", "weather", WEATHER)),
        results("call_0"),
        assistant(("call_0", "time", TIME)),
        results("call_0"),
        assistant(("call_0", "other", {})),
        USER,
    ]
    assert answered_turn(turns, latest) == 3
    judgement = judge_history(turns, latest)
    assert judgement is not None and judgement.result_ids == ["call_0"]


def test_without_a_whole_match_the_last_turn_carrying_an_id_is_answered() -> None:
    turns = [USER, assistant(("call_b", "time", {"zone": "UTC"})), results("call_b")]
    assert answered_turn(turns, LATEST) == 1


def test_a_prefixed_id_answered_consistently_is_id_replaced() -> None:
    latest = [shape("call_0", "time", TIME), shape("call_1", "weather", WEATHER)]
    turns = [
        USER,
        assistant(("resp_9:call_0", "time", TIME), ("resp_9:call_1", "weather", WEATHER)),
        results("resp_9:call_0", "resp_9:call_1"),
    ]
    judgement = judge_history(turns, latest)
    assert judgement is not None
    assert judgement.result_ids == ["call_0", "call_1"]
    assert judgement.drift == [
        Drift(DriftKind.ID_REPLACED, "call_0", "time"),
        Drift(DriftKind.ID_REPLACED, "call_1", "weather"),
    ]


def test_an_unrelated_id_in_place_of_the_proposal_stays_a_finding() -> None:
    """An item id sent back as ``call_id`` matches by name and arguments but does not carry the id."""
    turns = [USER, assistant(("fc_77", "time", TIME)), results("fc_77")]
    judgement = judge_history(turns, LATEST)
    assert judgement is not None
    assert (judgement.result_ids, judgement.drift) == (["fc_77"], [])


def test_an_item_id_or_a_concatenation_is_never_id_replaced() -> None:
    item = Turn(True, (HistoryCall("xcall_bx", "time", TIME, item_id=True),))
    judgement = judge_history([USER, item, results("xcall_bx")], LATEST)
    assert judgement is not None and (judgement.result_ids, judgement.drift) == (["xcall_bx"], [])
    merged = [USER, assistant(("call_bcall_b", "time", TIME)), results("call_bcall_b")]
    judgement = judge_history(merged, LATEST, known=lambda call_id: call_id == "call_bcall_b")
    assert judgement is not None and (judgement.result_ids, judgement.drift) == (["call_bcall_b"], [])


def test_a_refused_call_answered_with_an_error_is_refusal_answered() -> None:
    rejected = [shape("call_r", "time", TIME, proposed=False)]
    turns = [USER, assistant(("call_r", "time", TIME)), results("call_r", error=True)]
    judgement = judge_history(turns, rejected)
    assert judgement is not None
    assert (judgement.result_ids, judgement.drift) == ([], [Drift(DriftKind.REFUSAL_ANSWERED, "call_r", "time")])


def test_a_refused_call_answered_without_an_error_stays_a_finding_unless_a_guard_refused_it() -> None:
    rejected = [shape("call_r", "time", TIME, proposed=False)]
    turns = [USER, assistant(("call_r", "time", TIME)), results("call_r")]
    judgement = judge_history(turns, rejected)
    assert judgement is not None and (judgement.result_ids, judgement.drift) == (["call_r"], [])
    guarded = judge_history(turns, rejected, refused=lambda call_id: True)
    assert guarded is not None and guarded.drift == [Drift(DriftKind.REFUSAL_ANSWERED, "call_r", "time")]


def test_an_id_the_rules_refused_answered_with_an_error_is_refusal_answered() -> None:
    rejected = [shape("call_kept", "time", "{", proposed=False)]  # arguments not JSON: the name decides
    turns = [USER, assistant(("call_refused", "time", TIME)), results("call_refused", error=True)]
    judgement = judge_history(
        turns, rejected, known=lambda call_id: call_id == "call_refused", rejected=lambda call_id: True
    )
    assert judgement is not None and judgement.drift == [Drift(DriftKind.REFUSAL_ANSWERED, None, "time")]


def test_a_framework_id_for_a_call_without_one_stays_a_finding() -> None:
    rejected = [shape(None, "time", TIME, proposed=False)]
    turns = [USER, assistant(("pyd_1", "time", TIME)), results("pyd_1")]
    judgement = judge_history(turns, rejected)
    assert judgement is not None and (judgement.answered, judgement.result_ids) == (1, ["pyd_1"])


def test_results_without_ids_and_for_no_call_of_the_turn_go_to_the_rules() -> None:
    turns = [USER, assistant(("call_b", "time", TIME), (None, "x", {})), results(None, "call_zz", "call_b")]
    judgement = judge_history(turns, LATEST)
    assert judgement is not None and judgement.result_ids == [None, "call_zz", "call_b"]


def test_no_turn_carries_the_calls() -> None:
    assert judge_history([USER, *ROUND_1], LATEST) is None
    assert answered_turn([USER, Turn(True)], LATEST) is None
    known = judge_history([USER, assistant(("x_b", "q", {}))], LATEST, known=lambda call_id: call_id == "x_b")
    assert known is not None and known.answered == 1


def test_a_later_call_answered_twice_is_fabricated_once_then_judged() -> None:
    turns = [
        USER,
        assistant(("call_b", "time", TIME)),
        results("call_b"),
        assistant(("own", "note", {}), (None, "x", {}), ("call_b", "time", TIME)),
        results("own", "own", "call_b"),
    ]
    judgement = judge_history(turns, LATEST, known=lambda call_id: call_id == "call_b")
    assert judgement is not None
    assert judgement.drift == [Drift(DriftKind.CALL_FABRICATED, None, "note")]
    assert judgement.result_ids == ["call_b", "own"]
    assert (
        json.dumps([kind.value for kind in DriftKind])
        == '["id_replaced", "call_fabricated", "refusal_answered", "id_invented"]'
    )


def test_shapes_keep_every_call_and_say_which_were_proposed() -> None:
    from etf_otel.protocols import CHAT_COMPLETIONS
    from etf_otel.protocols._chat_completions import assemble
    from etf_otel.testing.chat import chunk, finished, fragment

    result = assemble(
        finished(
            chunk(fragment(0, id="call_1", name="f", arguments='{"a": 1}')),
            chunk(fragment(1, id="call_2", name="g", arguments="{}")),
        )
    )
    from etf_otel.core._history import shapes

    kept = shapes(result)
    assert [(entry.call_id, entry.name, entry.proposed) for entry in kept] == [
        ("call_1", "f", True),
        ("call_2", "g", True),
    ]
    assert kept[0].digest == call_digest("f", {"a": 1})
    assert CHAT_COMPLETIONS.history is not None


def test_the_last_of_several_turns_carrying_an_id_is_taken_when_none_carries_the_whole_call() -> None:
    turns = [
        USER,
        assistant(("call_b", "time", {"zone": "A"})),
        results("call_b"),
        assistant(("call_b", "time", {"zone": "B"})),
        results("call_b"),
    ]
    assert answered_turn(turns, LATEST) == 3


def test_adjacent_answers_stand_in_the_turn_right_after_the_answered_one() -> None:
    """Anthropic: a result in a later user message before the next assistant turn answers nothing."""
    turns = [USER, assistant(("call_b", "time", TIME)), results("call_b"), results("call_b")]
    judgement = judge_history(turns, LATEST, adjacent=True)
    assert judgement is not None and judgement.result_ids == ["call_b", None]
    judgement = judge_history(turns, LATEST)
    assert judgement is not None and judgement.result_ids == ["call_b", "call_b"]  # a duplicate for the rules


def test_a_conversation_hands_its_request_drift_over_once() -> None:
    from etf_otel.core._linkage import Conversation

    conversation = Conversation()
    conversation.proposed(["call_b"])
    conversation.drift = (Drift(DriftKind.ID_REPLACED, "call_b", "time"),)
    assert conversation.take_drift() == (Drift(DriftKind.ID_REPLACED, "call_b", "time"),)
    assert conversation.take_drift() == ()
    assert conversation.pending == ("call_b",)  # the proposals are the settlement's, not the drift's
