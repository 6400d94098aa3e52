"""Refused incoming ids are kept as keyed digests: recognised again, never kept (``rejected_incoming_id``)."""

from __future__ import annotations

import pickle

import pytest

from etf_otel.core import ResponseSlots
from etf_otel.core._identity import CompatibilityRule, IdentityRules
from etf_otel.core._lifecycle import LifecycleSlots
from etf_otel.core._linkage import MAX_CONCATENATED_DIGESTED, Conversation, concatenated
from etf_otel.core._refused import MAX_REFUSED_KEPT, NO_REFUSED, RefusedIds, id_digest
from etf_otel.core._vocabulary import ResponseEnd


def test_a_digest_is_keyed_truncated_and_not_the_id() -> None:
    length, digest = id_digest("call_secret")
    assert length == len("call_secret") and len(digest) == 16
    assert b"call_secret" not in digest
    assert id_digest("call_secret") == (length, digest) and id_digest("call_secre") != (length, digest)
    import hashlib

    assert digest != hashlib.sha256(b"call_secret").digest()[:16]  # keyed: not the plain hash


def test_refused_ids_are_recognised_by_their_digest_only() -> None:
    refused = RefusedIds.of(["call_2", "\ud800lone"])
    assert "call_2" in refused and "\ud800lone" in refused
    assert "call_3" not in refused and 2 not in refused and "call_2" not in NO_REFUSED
    assert bool(refused) and not NO_REFUSED and len(refused) == 2
    assert refused.lengths == {6, 5}
    assert b"call_2" not in pickle.dumps(refused)  # nothing of the id is kept
    assert refused.union(NO_REFUSED) is refused
    assert "call_9" in refused.union(RefusedIds.of(["call_9"]))


def test_the_conflicting_id_of_a_slot_is_refused_and_the_established_one_is_not() -> None:
    slots = ResponseSlots()
    slots.fragment(0, 0, "call_1", "get_a", '{"a":')
    slots.fragment(0, 0, "call_2", arguments="1}")  # id_conflict
    slots.fragment(0, 0, "call_1", "get_b")  # name_conflict, same id: no refused id
    slots.fragment(0, 0, 7)  # unsupported type: no id to keep
    slots.end()
    result = slots.finish()
    assert [call.id for call in result.calls] == ["call_1"]
    assert "call_2" in result.refused_ids and "call_1" not in result.refused_ids
    assert len(result.refused_ids) == 1


def test_an_id_on_a_fragment_that_reached_no_slot_is_refused() -> None:
    slots = ResponseSlots()
    slots.unindexed(0, "call_x", "get_a", "{}")
    slots.unindexed(0, "", "get_a", "{}")
    slots.end()
    assert len(slots.finish().refused_ids) == 1 and "call_x" in slots.finish().refused_ids

    inferred = ResponseSlots(IdentityRules.for_rules([CompatibilityRule.INFER_MISSING_INDEX]))
    inferred.unindexed(0, "call_y", "get_a", "{}")  # placed by the rule: established, not refused
    inferred.end()
    assert not inferred.finish().refused_ids


def test_a_continuation_that_changes_the_id_is_refused() -> None:
    slots = LifecycleSlots()
    slots.open(0, "call_a", "get_a")
    slots.ident(0, "call_changed")
    slots.close_slot(0)
    slots.ident(0, "call_late")  # the slot is closed: unknown_slot, its id refused too
    slots.end(ResponseEnd.COMPLETE)
    refused = slots.finish().refused_ids
    assert "call_changed" in refused and "call_late" in refused and "call_a" not in refused


def test_refused_ids_are_bounded_per_response() -> None:
    slots = ResponseSlots()
    slots.fragment(0, 0, "call_0", "get_a", "{}")
    for number in range(MAX_REFUSED_KEPT + 10):
        slots.fragment(0, 0, f"other_{number}")
    assert len(slots.finish().refused_ids) == MAX_REFUSED_KEPT


@pytest.mark.parametrize(
    ("call_id", "expected"),
    [
        ("call_1call_2", True),  # a proposal and a refused id: the openai SDK's merge of one slot
        ("call_2call_1", True),
        ("call_2call_2", True),
        ("call_2", False),  # the refused id itself is no concatenation
        ("call_1call_3", False),
        ("call_1xcall_2", False),
    ],
)
def test_concatenated_ids_take_refused_ids_by_their_digest(call_id: str, expected: bool) -> None:
    assert concatenated(call_id, ["call_1"], RefusedIds.of(["call_2"])) is expected


def test_long_ids_are_taken_apart_into_proposals_only() -> None:
    piece = "c" * (MAX_CONCATENATED_DIGESTED // 2 + 1)
    refused = RefusedIds.of([piece])
    assert concatenated(piece * 2, [], refused) is False  # past the digest bound
    assert concatenated(piece * 2, [piece]) is True
    assert concatenated("ab" * 10, [], RefusedIds.of(["ab" * 5])) is True


def test_a_conversation_keeps_the_latest_response_ids_and_refused_digests_bounded() -> None:
    conversation = Conversation(max_pending=2)
    refused = RefusedIds.of(["call_2"])
    conversation.responded(["a", "b", "c"], refused)
    assert conversation.response_ids == {"a", "b"} and conversation.refused is refused
    conversation.responded([])
    assert conversation.response_ids == frozenset() and conversation.refused is NO_REFUSED


def test_an_id_past_the_bound_is_not_taken_apart() -> None:
    from etf_otel.core._linkage import MAX_CONCATENATED_CHARS

    piece = "c" * (MAX_CONCATENATED_CHARS // 2 + 1)
    assert concatenated(piece * 2, [piece]) is False


def test_an_id_only_the_final_list_claims_is_refused() -> None:
    slots = LifecycleSlots()
    slots.open(0, "call_a", "get_a")
    slots.delta(0, "{}")
    slots.close_slot(0)
    slots.final_snapshot([("call_a", "get_a", "{}"), ("call_stray", "get_b", "{}"), (None, "get_c", "{}")])
    slots.end()
    result = slots.finish()
    assert not result.dispatchable
    assert "call_stray" in result.refused_ids and "call_a" not in result.refused_ids
    assert len(result.refused_ids) == 1
