"""The outcome relay's rules (functions/payment_saga/outcomes.py), on claim rows as DynamoDB holds them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from payment_saga.claims import order_attribute
from payment_saga.orders import order_from_message
from payment_saga.outcomes import (
    FINAL_OUTCOMES,
    MAX_DELAY_SECONDS,
    SETTLEMENT_CHECK_MARK,
    Outcome,
    OutcomeNotPublished,
    OutcomeRelay,
    RequeuePolicy,
    UnreadableChange,
    closing_transition,
    order_message,
    rejected_order_id,
)

ORDER = {
    "orderId": "ORDER-U1",
    "amount": 15000,
    "currency": "BRL",
    "customerId": "cus_123",
    "paymentMethod": "pm_card_visa",
}


def row(status: str, *, attempt: int = 1, **extra: Any) -> dict[str, Any]:
    """A claim row in DynamoDB's attribute-value form, as the stream carries it."""
    item: dict[str, Any] = {
        "orderId": {"S": "ORDER-U1"},
        "status": {"S": status},
        "claimToken": {"S": "arn:exec:1"},
        "attempt": {"N": str(attempt)},
        "fingerprint": {"S": "fp"},
        "paymentAttempt": {"S": "initial"},
        "leaseExpiresAt": {"N": "1790000900"},
        "attemptStartedAt": {"N": "1790000000"},
        "order": order_attribute(order_from_message(ORDER)),
    }
    for key, value in extra.items():
        item[key] = {"N": str(value)} if isinstance(value, int) else {"S": value}
    return item


class FakeEvents:
    def __init__(self, fail: bool = False) -> None:
        self.entries: list[dict[str, Any]] = []
        self.fail = fail

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        if self.fail:
            return {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "InternalFailure", "ErrorMessage": "x"}]}
        self.entries.extend(Entries)
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "e"} for _ in Entries]}


class FakeSqs:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> dict[str, Any]:
        self.sent.append(kwargs)
        return {"MessageId": "m"}


def relay(events: FakeEvents, sqs: FakeSqs, max_attempts: int = 5) -> OutcomeRelay:
    return OutcomeRelay(
        events=events,
        bus_name="outcomes",
        sqs=sqs,  # type: ignore[arg-type]
        orders_queue_url="https://sqs/orders",
        policy=RequeuePolicy(max_attempts=max_attempts, base_delay_seconds=60),
        clock=lambda: 1_790_000_000,
    )


# -- what closes a claim ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "closes"),
    [
        (row("CLAIMED"), row("COMPLETED", completedAt="2026-01-01T00:00:00Z"), True),
        (row("CLAIMED"), row("RELEASED", releaseReason="DECLINED"), True),
        (None, row("RELEASED", attempt=0, releaseReason="NOT_CHARGED"), True),  # the fence's tombstone
        (row("RELEASED"), row("COMPLETED"), True),  # the sweeper finds a late charge
        (row("COMPLETED"), row("COMPLETED"), False),  # a resent complete
        (row("RELEASED"), row("RELEASED"), False),  # a fence added to a released row
        (None, row("CLAIMED"), False),
        (row("RELEASED"), row("CLAIMED", attempt=2), False),
        (row("CLAIMED"), None, False),  # TTL deletion
        (None, {"orderId": {"S": "#sweeper-lock"}, "holder": {"S": "x"}}, False),
    ],
)
def test_only_a_write_that_makes_the_row_completed_or_released_closes_it(
    old: dict[str, Any] | None, new: dict[str, Any] | None, closes: bool
) -> None:
    assert closing_transition(old, new) is closes


def test_the_row_keeps_the_orders_canonical_message() -> None:
    assert order_message(row("RELEASED")) == order_from_message(ORDER).to_message()
    assert order_message({"orderId": {"S": "x"}}) is None


# -- events ---------------------------------------------------------------------------------------------


def test_a_completion_publishes_order_charged_with_a_stable_id() -> None:
    events, sqs = FakeEvents(), FakeSqs()
    new = row("COMPLETED", chargeId="pi_1", completedAt="2026-01-01T00:00:00Z")
    done = relay(events, sqs).relay(row("CLAIMED"), new)

    assert done is not None
    assert done.outcomes == ["OrderCharged"]
    (entry,) = events.entries
    assert (entry["Source"], entry["DetailType"], entry["EventBusName"]) == (
        "payment-saga",
        "OrderCharged",
        "outcomes",
    )
    detail = json.loads(entry["Detail"])
    assert detail["eventId"] == "ORDER-U1/attempt-1/charged"
    assert (detail["chargeId"], detail["amount"], detail["currency"]) == ("pi_1", 15000, "BRL")
    assert detail["occurredAt"] == "2026-01-01T00:00:00Z"
    assert detail["resolvedBy"] == "saga"
    assert sqs.sent == []


def awaiting(status: str = "CLAIMED", **extra: Any) -> dict[str, Any]:
    """A claim row awaiting the settlement of ``pi_debit`` (a SEPA debit in ``processing``)."""
    return row(
        status,
        settlementIntentId="pi_debit",
        awaitingSettlementSince=1_790_000_100,
        awaitingSettlementAt="2026-09-21T13:35:00Z",
        settleBy=1_791_814_500,
        **extra,
    )


def test_a_claim_that_starts_to_await_settlement_publishes_order_payment_processing_once() -> None:
    events, sqs = FakeEvents(), FakeSqs()
    started = relay(events, sqs).relay(row("CLAIMED", version=1), awaiting(version=2))
    resent = relay(events, sqs).relay(awaiting(version=2), awaiting(version=3))

    assert started is not None
    assert started.outcomes == ["OrderPaymentProcessing"]
    assert resent is None  # the same wait written again announces nothing
    (entry,) = events.entries
    detail = json.loads(entry["Detail"])
    assert detail["eventId"] == "ORDER-U1/attempt-1/payment-processing"
    assert (detail["paymentIntentId"], detail["chargeId"], detail["sequence"]) == ("pi_debit", None, 2)
    assert (detail["occurredAt"], detail["settleBy"]) == ("2026-09-21T13:35:00Z", "2026-10-12T14:15:00Z")
    assert "OrderPaymentProcessing" not in FINAL_OUTCOMES
    assert sqs.sent == []


def test_an_awaiting_claim_that_settles_publishes_its_final_outcome_after_the_processing_one() -> None:
    events, sqs = FakeEvents(), FakeSqs()
    relay(events, sqs).relay(awaiting(version=2), awaiting("COMPLETED", chargeId="pi_debit", version=3))
    relay(events, sqs).relay(awaiting(version=2), awaiting("RELEASED", releaseReason="DECLINED", version=3))

    assert [(e["DetailType"], json.loads(e["Detail"])["sequence"]) for e in events.entries] == [
        ("OrderCharged", 3),
        ("OrderDeclined", 3),
    ]


def test_every_event_of_a_transition_carries_the_rows_version_as_its_sequence() -> None:
    events, sqs = FakeEvents(), FakeSqs()
    relay(events, sqs).relay(
        row("CLAIMED", version=3), row("RELEASED", releaseReason="NOT_CHARGED", version=4)
    )
    relay(events, sqs).relay(row("CLAIMED", attempt=2, version=5), row("COMPLETED", attempt=2, version=6))

    details = [json.loads(entry["Detail"]) for entry in events.entries]
    assert [(d["eventId"], d["sequence"]) for d in details] == [
        ("ORDER-U1/attempt-1/released", 4),
        ("ORDER-U1/attempt-1/requeued", 4),
        ("ORDER-U1/attempt-2/charged", 6),
    ]


def test_a_row_written_before_rows_counted_their_writes_has_no_sequence() -> None:
    events, sqs = FakeEvents(), FakeSqs()
    relay(events, sqs).relay(row("CLAIMED"), row("COMPLETED"))

    assert json.loads(events.entries[0]["Detail"])["sequence"] is None


@pytest.mark.parametrize(
    "new",
    [
        {"orderId": {"S": "ORDER-U1"}, "status": {"S": "COMPLETED"}},  # no token, no attempt
        {**row("COMPLETED"), "attempt": {"N": "one"}},
        {**row("RELEASED"), "releaseReason": {"S": "LOST"}},
        {**row("COMPLETED"), "status": "COMPLETED"},  # not an attribute value
        ["not", "an", "item"],
    ],
    ids=["missing-attributes", "bad-number", "unknown-reason", "bare-status", "not-a-map"],
)
def test_a_change_that_can_never_be_read_raises_unreadable_and_sends_nothing(new: Any) -> None:
    events, sqs = FakeEvents(), FakeSqs()

    with pytest.raises(UnreadableChange):
        relay(events, sqs).relay(row("CLAIMED"), new)

    assert events.entries == []
    assert sqs.sent == []


def test_a_refused_publish_is_not_unreadable_so_the_record_stalls_and_is_retried() -> None:
    with pytest.raises(OutcomeNotPublished) as raised:
        relay(FakeEvents(fail=True), FakeSqs()).relay(row("CLAIMED"), row("COMPLETED"))

    assert not isinstance(raised.value, UnreadableChange)


def test_the_same_change_relayed_twice_publishes_the_same_event_id() -> None:
    events = FakeEvents()
    change = (row("CLAIMED"), row("RELEASED", releaseReason="DECLINED"))
    relay(events, FakeSqs()).relay(*change)
    relay(events, FakeSqs()).relay(*change)
    ids = {json.loads(e["Detail"])["eventId"] for e in events.entries}
    assert ids == {"ORDER-U1/attempt-1/declined"}


def test_a_late_charge_found_by_the_sweeper_names_its_own_attempt() -> None:
    events = FakeEvents()
    new = row(
        "COMPLETED", attempt=3, chargeId="pi_9", lateChargeAttempt=2, reconciledAt="2026-01-01T01:00:00Z"
    )
    relay(events, FakeSqs()).relay(row("RELEASED", attempt=3), new)
    detail = json.loads(events.entries[0]["Detail"])
    assert detail["eventId"] == "ORDER-U1/attempt-2/charged"
    assert detail["resolvedBy"] == "sweeper"


def test_a_mark_left_by_an_earlier_sweep_does_not_make_the_sagas_write_the_sweepers() -> None:
    events = FakeEvents()
    earlier = "2026-01-01T01:00:00Z"
    relay(events, FakeSqs()).relay(
        row("CLAIMED", attempt=2, reconciledAt=earlier), row("COMPLETED", attempt=2, reconciledAt=earlier)
    )
    assert json.loads(events.entries[0]["Detail"])["resolvedBy"] == "saga"


def test_a_claim_a_webhook_closed_is_published_as_resolved_by_the_webhook() -> None:
    events = FakeEvents()
    relay(events, FakeSqs()).relay(
        row("CLAIMED"),
        row("COMPLETED", chargeId="pi_1", webhookEventId="evt_1", reconciledAt="2026-01-01T01:00:00Z"),
    )
    assert json.loads(events.entries[0]["Detail"])["resolvedBy"] == "webhook"


def test_a_claim_the_settlement_check_closed_is_published_as_resolved_by_the_sweeper() -> None:
    """The hourly settlement check writes through the webhook consumer's writes; its closures are the
    sweeper's, so a subscriber can tell a webhook that came from a backstop that had to ask."""
    events = FakeEvents()
    relay(events, FakeSqs()).relay(
        row("CLAIMED"), row("COMPLETED", chargeId="pi_1", webhookEventId=SETTLEMENT_CHECK_MARK + "req-1")
    )
    assert json.loads(events.entries[0]["Detail"])["resolvedBy"] == "sweeper"


def test_a_refused_entry_raises_so_the_record_is_retried() -> None:
    with pytest.raises(OutcomeNotPublished):
        relay(FakeEvents(fail=True), FakeSqs()).relay(row("CLAIMED"), row("COMPLETED"))


# -- the re-queue -------------------------------------------------------------------------------------


def test_a_release_never_charged_is_sent_again_with_the_order_and_a_delay() -> None:
    events, sqs = FakeEvents(), FakeSqs()
    done = relay(events, sqs).relay(
        row("CLAIMED", attempt=2), row("RELEASED", attempt=2, releaseReason="NOT_CHARGED")
    )

    assert done is not None
    assert done.outcomes == ["OrderReleased", "OrderRequeued"]
    assert done.requeued
    (message,) = sqs.sent
    assert json.loads(message["MessageBody"]) == order_from_message(ORDER).to_message()
    assert message["DelaySeconds"] == 120
    requeued = json.loads(events.entries[-1]["Detail"])
    assert (requeued["eventId"], requeued["nextAttempt"]) == ("ORDER-U1/attempt-2/requeued", 3)


def test_past_the_bound_the_order_needs_attention_and_is_not_sent() -> None:
    events, sqs = FakeEvents(), FakeSqs()
    done = relay(events, sqs, max_attempts=3).relay(
        row("CLAIMED", attempt=3), row("RELEASED", attempt=3, releaseReason="NOT_CHARGED")
    )
    assert done is not None
    assert done.exhausted
    assert done.outcomes == ["OrderReleased", "OrderNeedsAttention"]
    assert sqs.sent == []


def test_a_row_without_its_order_needs_attention() -> None:
    events, sqs = FakeEvents(), FakeSqs()
    new = row("RELEASED", releaseReason="NOT_CHARGED")
    del new["order"]
    done = relay(events, sqs).relay(row("CLAIMED"), new)
    assert done is not None
    assert done.events[-1].outcome is Outcome.NEEDS_ATTENTION
    assert sqs.sent == []


def test_the_delay_doubles_per_attempt_up_to_sqs_limit() -> None:
    policy = RequeuePolicy(max_attempts=20, base_delay_seconds=60)
    assert [policy.delay(a) for a in range(7)] == [
        60,
        60,
        120,
        240,
        480,
        MAX_DELAY_SECONDS,
        MAX_DELAY_SECONDS,
    ]
    assert [policy.allows(a) for a in (0, 19, 20)] == [True, True, False]
    with pytest.raises(ValueError, match="base_delay_seconds"):
        RequeuePolicy(base_delay_seconds=901)


# -- a rejected message's order id ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "found"),
    [
        ('{"orderId": "ORDER-9", "amount": "1.50"}', "ORDER-9"),
        ("not json at all", None),
        ('{"orderId": "ORDER-9", "orderId": "ORDER-10"}', None),
        ('{"orderId": "bad id with spaces"}', None),
        ("[" * 10_000 + '"orderId": "ORDER-7"' + "]" * 10_000, "ORDER-7"),
        # a card number where the key belongs: never copied into the event or its log line
        ('{"orderId": "4242424242424242"}', None),
        ('{"orderId": "4242-4242-4242-4242"}', None),
        ('{"orderId": "ORDER-4242424242424242"}', None),
    ],
)
def test_a_rejected_body_names_its_order_only_when_it_is_plain(body: str, found: str | None) -> None:
    assert rejected_order_id(body) == found
