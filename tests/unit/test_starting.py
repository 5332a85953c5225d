"""The start function's decisions, directly: the execution a message starts (a redelivery and every
copy of one re-queue name the same one, with an input that is a function of the message alone) and
what a malformed message becomes."""

from __future__ import annotations

import json

import pytest

from payment_saga.execution_names import requeue_execution_name
from payment_saga.orders import Order
from payment_saga.outcomes import Outcome
from payment_saga.starting import MAX_REASON_LENGTH, Rejection, Start, requeue_count

ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
MESSAGE_ID = "4d9b3c1e-0000-4000-8000-000000000001"


def attribute(value: str) -> dict[str, str]:
    return {"stringValue": value, "dataType": "String"}


def test_a_redelivered_message_starts_the_same_execution_with_the_same_input() -> None:
    first = Start.of(ORDER, MESSAGE_ID, {}, max_requeues=3)
    again = Start.of(ORDER, MESSAGE_ID, {}, max_requeues=3)

    assert first == again
    assert first.name == f"ORDER-003-{MESSAGE_ID}"
    assert json.loads(first.input) == {
        "order": ORDER.to_message(),
        "messageId": MESSAGE_ID,
        "requeue": {"count": 0, "next": "1", "allowed": True},
    }


def test_every_copy_of_one_requeue_starts_one_execution_each_with_its_own_message_id() -> None:
    attributes = {"requeueEventId": attribute("ORDER-003/attempt-1/requeued")}

    one = Start.of(ORDER, "message-1", attributes, max_requeues=3)
    two = Start.of(ORDER, "message-2", attributes, max_requeues=3)

    assert one.name == two.name == requeue_execution_name("ORDER-003/attempt-1/requeued")
    assert json.loads(one.input)["messageId"] == "message-1"


@pytest.mark.parametrize(("requeues", "allowed"), [("0", True), ("2", True), ("3", False), ("7", False)])
def test_the_state_machine_may_requeue_an_order_only_below_the_bound(requeues: str, allowed: bool) -> None:
    started = Start.of(ORDER, MESSAGE_ID, {"sagaRequeues": attribute(requeues)}, max_requeues=3)

    requeue = json.loads(started.input)["requeue"]
    assert requeue == {"count": int(requeues), "next": str(int(requeues) + 1), "allowed": allowed}


@pytest.mark.parametrize("value", ["not a number", "-4", ""])
def test_a_requeue_count_that_is_absent_or_bad_counts_as_never_requeued(value: str) -> None:
    assert requeue_count({"sagaRequeues": attribute(value)}) == 0
    assert requeue_count({}) == 0
    assert requeue_count({"sagaRequeues": None}) == 0


def test_a_malformed_message_is_rejected_naming_the_message_and_only_claiming_the_order() -> None:
    body = '{"orderId": "ORDER-9", "amount": "lots"}'

    rejection = Rejection.of(MESSAGE_ID, body, "amount must be an integer", now=1_790_000_000)

    assert rejection.event.outcome is Outcome.REJECTED
    assert rejection.event.event_id == f"rejected/{MESSAGE_ID}"
    assert rejection.event.detail["orderId"] is None
    assert rejection.event.detail["claimedOrderId"] == "ORDER-9"
    assert rejection.dead_letter_attributes() == {
        "rejectionReason": {"DataType": "String", "StringValue": "amount must be an integer"},
        "sourceMessageId": {"DataType": "String", "StringValue": MESSAGE_ID},
    }
    assert body not in json.dumps(rejection.dead_letter_attributes())


def test_a_long_reason_is_cut_for_the_event_and_the_queue_but_kept_whole_for_the_log() -> None:
    reason = "x" * (MAX_REASON_LENGTH + 10)

    rejection = Rejection.of(MESSAGE_ID, "{not json", reason, now=1_790_000_000)

    assert rejection.reason == reason
    assert rejection.event.detail["reason"] == reason[:MAX_REASON_LENGTH]
    assert rejection.dead_letter_attributes()["rejectionReason"]["StringValue"] == reason[:MAX_REASON_LENGTH]
