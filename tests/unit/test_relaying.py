"""The outcome relay's batch, directly: records handled in stream order, the first failure stopping
the batch there (it and every record after it retried, none of them touched), and what a record the
relay can never read is parked with."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from payment_saga.outcomes import Outcome, OutcomeEvent, UnreadableChange
from payment_saga.relaying import Parked, images, in_stream_order, published


def record(sequence: str, order_id: str = "ORDER-003") -> dict[str, Any]:
    return {
        "eventName": "MODIFY",
        "dynamodb": {
            "SequenceNumber": sequence,
            "Keys": {"orderId": {"S": order_id}},
            "OldImage": {"status": {"S": "CLAIMED"}},
            "NewImage": {"status": {"S": "COMPLETED"}},
        },
    }


class Relay:
    """Handles records, failing on the sequence numbers it is told to; notes what it touched."""

    def __init__(self, *failing: str) -> None:
        self.failing = set(failing)
        self.handled: list[str] = []
        self.stalled: list[tuple[str, int, bool]] = []

    def handle(self, rec: dict[str, Any]) -> None:
        sequence = rec["dynamodb"]["SequenceNumber"]
        if sequence in self.failing:
            raise RuntimeError("PutEvents failed")
        self.handled.append(sequence)

    def stall(self, rec: dict[str, Any], left: int) -> None:
        self.stalled.append((rec["dynamodb"]["SequenceNumber"], left, sys.exc_info()[0] is RuntimeError))


def test_a_batch_that_never_fails_is_handled_in_stream_order_and_nothing_is_retried() -> None:
    relay = Relay()

    retried = in_stream_order([record("1"), record("2"), record("3")], relay.handle, relay.stall)

    assert retried == []
    assert relay.handled == ["1", "2", "3"]
    assert relay.stalled == []


def test_the_first_failure_stops_the_batch_and_it_is_retried_with_every_record_after_it() -> None:
    relay = Relay("2")

    retried = in_stream_order([record("1"), record("2"), record("3"), record("4")], relay.handle, relay.stall)

    assert retried == ["2", "3", "4"]
    assert relay.handled == ["1"]  # 3 and 4 never touched: their events cannot overtake 2's
    assert relay.stalled == [("2", 3, True)]  # told while the failure is in hand, for the log


def test_the_images_of_a_change_are_read_and_a_record_without_one_is_unreadable() -> None:
    old, new = images(record("1"))

    assert (old, new) == ({"status": {"S": "CLAIMED"}}, {"status": {"S": "COMPLETED"}})
    with pytest.raises(UnreadableChange, match="no 'dynamodb' change"):
        images({"eventName": "MODIFY"})


def test_a_parked_record_names_its_order_its_sequence_and_a_reason_cut_short() -> None:
    parked = Parked.of(record("42", "ORDER-9"), "x" * 2000)

    assert (parked.order_id, parked.sequence) == ("ORDER-9", "42")
    attributes = parked.attributes()
    assert attributes["orderId"]["StringValue"] == "ORDER-9"
    assert attributes["sequenceNumber"]["StringValue"] == "42"
    assert attributes["parkReason"]["StringValue"] == "x" * 1024


@pytest.mark.parametrize("rec", [{}, {"dynamodb": "not a change"}, {"dynamodb": {"Keys": {"orderId": 3}}}])
def test_a_record_too_broken_to_name_its_order_is_still_parked(rec: dict[str, Any]) -> None:
    attributes = Parked.of(rec, "unreadable").attributes()

    assert attributes["orderId"]["StringValue"] == "-"
    assert attributes["sequenceNumber"]["StringValue"] == "-"


def test_an_outcome_published_is_logged_with_its_event_id_attempt_and_who_resolved_it() -> None:
    event = OutcomeEvent(
        Outcome.CHARGED, {"eventId": "ORDER-3/attempt-1/charged", "attempt": 1, "resolvedBy": "saga"}
    )

    assert published(event) == {
        "outcome": Outcome.CHARGED.value,
        "eventId": "ORDER-3/attempt-1/charged",
        "attempt": 1,
        "resolvedBy": "saga",
    }
