"""Every outcome of an order is published once, through the real state machine, relay and bus.

The stack is the one ``sam deploy`` would create (``template.yaml``): the claims table's stream read
by the outcome relay through its event source mapping (filter, batches, partial failures: emulated
by ``saga_local.aws.stream_source``), the outcome bus, and its archive queue (on locally) from which the
events are read back. "Exactly one per order" is after deduplication by ``eventId``, since delivery
is at least once.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from payment_saga.execution_names import requeue_execution_name
from saga_local import cli
from saga_local.aws.stack import REGION
from saga_local.harness.outcomes import final_outcomes, tally
from saga_local.harness.usage import transitions
from saga_local.runtime.faults import Fault, call_error
from saga_local.stack.outcome_log import OutcomeEvent
from saga_local.stripe_emulator import SAVED_PAYMENT_METHOD
from saga_local.template import ROOT
from tests.helpers import order
from tests.local.conftest import sweep
from tests.local.outcome_support import log, parked, put_unreadable_row, relay_later, relay_now

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.helpers import Saga


#: How botocore names EventBridge's PutEvents in its events (what a fault point names).
PUT_EVENTS = "eventbridge.PutEvents"


def kinds(events: list[OutcomeEvent]) -> list[str]:
    return [event.detail_type for event in events]


@pytest.fixture
def saga_events(deployed: str, capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """What ``saga events --stack NAME [--order-id ID] [--json]`` prints, as a person runs it."""

    def run(*, order_id: str | None = None, raw: bool = False) -> str:
        args = ["events", "--stack", deployed, "--region", REGION]
        args += ["--order-id", order_id] if order_id else []
        args += ["--json"] if raw else []
        capsys.readouterr()
        assert cli.main(args) == 0
        return capsys.readouterr().out

    return run


def test_a_charged_order_delivered_three_times_publishes_one_order_charged(saga: Saga) -> None:
    saga.driver.send(order("ORDER-EV-1"), copies=3)
    saga.driver.pump(timeout=60)

    events = log(saga).events("ORDER-EV-1")
    assert kinds(events) == ["OrderCharged"]
    (charged,) = events
    assert charged.event_id == "ORDER-EV-1/attempt-1/charged"
    assert charged.detail["amount"] == 15000
    assert charged.detail["currency"] == "BRL"
    assert charged.detail["attempt"] == 1
    assert charged.detail["chargeId"] == saga.provider.charges_for("ORDER-EV-1")[0].charge_id
    assert charged.detail["resolvedBy"] == "saga"
    assert charged.detail["occurredAt"].endswith("Z")
    assert saga.charges("ORDER-EV-1") == 1


def test_a_declined_order_publishes_order_declined_and_is_not_sent_again(saga: Saga) -> None:
    saga.driver.send(order("ORDER-EV-2", paymentMethod="pm_card_chargeDeclined"))
    saga.driver.pump(timeout=60)

    events = log(saga).events("ORDER-EV-2")
    assert kinds(events) == ["OrderDeclined"]
    assert events[0].detail["reason"] == "DECLINED"
    assert len(saga.driver.execution_arns()) == 1, "a decline is an end: no re-queue"


def test_a_conflicting_order_publishes_order_conflict_from_the_state_machine(saga: Saga) -> None:
    saga.driver.send(order("ORDER-EV-3"))
    saga.driver.pump(timeout=60)
    (message_id,) = saga.driver.send(order("ORDER-EV-3", amount=99900))
    saga.driver.pump(timeout=60)

    events = log(saga).events("ORDER-EV-3")
    assert kinds(events) == ["OrderCharged", "OrderConflict"]
    conflict = events[1]
    assert conflict.event_id.startswith("ORDER-EV-3/conflict/")
    assert conflict.event_id.endswith(message_id), "the execution's name ends with the SQS MessageId"
    assert conflict.detail["amount"] == 99900, "the conflicting delivery's order, not the charged one"
    assert saga.charges("ORDER-EV-3") == 1


def test_a_malformed_message_publishes_order_rejected_with_its_reason(saga: Saga) -> None:
    body = json.dumps({"orderId": "ORDER-EV-4", "amount": "150.00", "currency": "BRL"})
    (message_id,) = saga.driver.send(body)
    saga.driver.pump(timeout=60)

    rejected = [e for e in log(saga).events() if e.detail_type == "OrderRejected"]
    assert [e.event_id for e in rejected] == [f"rejected/{message_id}"]
    assert rejected[0].order_id is None, "a refused body speaks for no order"
    assert rejected[0].detail["messageId"] == message_id
    assert rejected[0].claimed_order_id == "ORDER-EV-4"
    assert "amount" in rejected[0].detail["reason"]
    assert len(saga.driver.dead_letters()) == 1
    assert saga.driver.claim("ORDER-EV-4") is None
    assert final_outcomes(log(saga).collect()) == {}, "a rejection is no order's outcome"


def test_a_malformed_body_claiming_a_charged_order_leaves_its_final_outcome_charged(
    saga: Saga, saga_events: Callable[..., str]
) -> None:
    """A buggy or hostile producer sends a refused body naming an order already charged: the order's
    subscribers still see OrderCharged as its end, and only a person reading the claim sees it."""
    saga.driver.send(order("SEC-1"))
    saga.driver.pump(timeout=60)
    forged = json.dumps({"orderId": "SEC-1", "amount": "15000", "currency": "BRL", "customerId": "cus_1"})
    (message_id,) = saga.driver.send(forged)
    saga.driver.pump(timeout=60)

    # Read by saga events first: the log below empties the archive queue.
    text = saga_events(order_id="SEC-1")
    claim_line = next(line for line in text.splitlines() if "OrderRejected" in line)
    assert message_id in claim_line
    assert "body claims SEC-1: untrusted" in claim_line
    delivered = log(saga).collect()
    assert final_outcomes(delivered) == {"SEC-1": ["OrderCharged"]}
    ledger = {"SEC-1": [charge.charge_id for charge in saga.provider.charges_for("SEC-1")]}
    counted = tally(delivered, ["SEC-1"], ledger)
    assert counted.exact, counted.problems
    assert counted.final_by_order == {"SEC-1": "OrderCharged"}
    assert kinds(log(saga).events("SEC-1")) == ["OrderCharged"], "no event keyed on the order's id"
    (rejected,) = [e for e in log(saga).events() if e.detail_type == "OrderRejected"]
    assert (rejected.order_id, rejected.claimed_order_id) == (None, "SEC-1")
    assert saga.charges("SEC-1") == 1


def test_a_rejection_whose_event_fails_once_is_dead_lettered_once_with_its_reason(saga: Saga) -> None:
    """EventBridge refuses the OrderRejected once: the message comes back and is rejected again, and
    the dead-letter queue holds one copy of it, with its reason, not one per try."""
    saga.faults.add(Fault("StartExecutionFunction", "before:eventbridge.PutEvents", "error_call"))
    body = json.dumps({"orderId": "ORDER-EV-4B", "amount": "150.00", "currency": "BRL"})
    (message_id,) = saga.driver.send(body)
    saga.driver.pump(timeout=60)

    assert saga.faults.fired_by_kind() == {"error_call": 1}
    letters = saga.driver.dead_letters()
    assert len(letters) == 1, letters
    assert "amount" in json.dumps(letters[0])
    rejected = [e for e in log(saga).events() if e.detail_type == "OrderRejected"]
    assert [e.event_id for e in rejected] == [f"rejected/{message_id}"]


def test_an_unknown_charge_publishes_needs_reconciliation_then_the_sweepers_charge(saga: Saga) -> None:
    # The charge lands, but Stripe saves a 500 for the key: every retry replays it.
    saga.provider.inject("fail_after_apply_replayed", order_id="ORDER-EV-5")
    saga.driver.send(order("ORDER-EV-5"))
    saga.driver.pump(timeout=120)
    assert kinds(log(saga).events("ORDER-EV-5")) == ["OrderNeedsReconciliation"]

    sweep(saga)
    saga.driver.pump(timeout=60)

    events = log(saga).events("ORDER-EV-5")
    assert kinds(events) == ["OrderNeedsReconciliation", "OrderCharged"]
    assert events[0].event_id == "ORDER-EV-5/attempt-1/needs-reconciliation"
    assert events[0].detail["reason"] == "PaymentOutcomeUnknown"
    assert events[1].detail["resolvedBy"] == "sweeper"
    assert saga.charges("ORDER-EV-5") == 1


def test_a_claim_that_failed_is_sent_again_and_charged_without_a_person(saga: Saga) -> None:
    # Every try of the first execution's Claim step dies before its write: Claim Failed, and Release
    # Claim leaves a RELEASED / NOT_CHARGED tombstone (attempt 0) that the relay re-queues.
    saga.faults.add(Fault("ClaimOrderFunction", "start", "die", times=4, order_id="ORDER-EV-6"))
    saga.driver.send(order("ORDER-EV-6"))
    saga.driver.pump(timeout=120)

    outcomes = sorted(r.outcome for r in saga.driver.results(with_path=False) if r.order_id == "ORDER-EV-6")
    assert outcomes == ["CHARGED", "ClaimFailed"]
    events = log(saga).events("ORDER-EV-6")
    assert kinds(events) == ["OrderReleased", "OrderRequeued", "OrderCharged"]
    assert events[1].detail["nextAttempt"] == 1
    assert events[2].detail["attempt"] == 1
    assert saga.charges("ORDER-EV-6") == 1


def test_a_claim_the_sweeper_released_after_an_outage_is_sent_again_and_charged(saga: Saga) -> None:
    # The charge step dies before it reaches the provider, on every try: an ambiguous failure, so the
    # claim is kept (Needs Reconciliation); later the sweeper finds no charge and releases it.
    saga.faults.add(Fault("ChargePaymentFunction", "start", "die", times=4, order_id="ORDER-EV-7"))
    saga.driver.send(order("ORDER-EV-7"))
    saga.driver.pump(timeout=120)
    assert saga.charges("ORDER-EV-7") == 0

    sweep(saga)
    saga.driver.pump(timeout=120)

    events = log(saga).events("ORDER-EV-7")
    assert kinds(events) == ["OrderNeedsReconciliation", "OrderReleased", "OrderRequeued", "OrderCharged"]
    assert events[1].detail["resolvedBy"] == "sweeper"
    assert events[3].detail["attempt"] == 2
    assert saga.charges("ORDER-EV-7") == 1
    assert final_outcomes(log(saga).collect())["ORDER-EV-7"] == ["OrderCharged"]


def test_an_order_never_charged_is_tried_max_times_then_needs_attention_and_alarms(
    saga: Saga, capsys: pytest.CaptureFixture[str]
) -> None:
    # A saved card sent without its customer: Stripe refuses the request itself (400), nothing is
    # charged, every time. MaxRequeueAttempts (5) attempts, then a person.
    saga.driver.send(order("ORDER-EV-8", paymentMethod=SAVED_PAYMENT_METHOD))
    saga.driver.pump(timeout=180)

    results = [r for r in saga.driver.results(with_path=False) if r.order_id == "ORDER-EV-8"]
    assert [r.outcome for r in results] == ["ChargeNotAttempted"] * 5
    events = log(saga).events("ORDER-EV-8")
    assert kinds(events) == ["OrderReleased", "OrderRequeued"] * 4 + ["OrderReleased", "OrderNeedsAttention"]
    assert [e.detail["attempt"] for e in events if e.detail_type == "OrderReleased"] == [1, 2, 3, 4, 5]
    assert "MaxRequeueAttempts 5" in events[-1].detail["reason"]
    assert saga.charges("ORDER-EV-8") == 0
    printed = capsys.readouterr().out
    assert '"RequeueExhausted":[1.0]' in printed, "the metric RequeueExhaustedAlarm watches"


def test_every_order_of_a_mixed_run_has_exactly_one_final_outcome(saga: Saga) -> None:
    orders = {
        "ORDER-MIX-1": order("ORDER-MIX-1"),
        "ORDER-MIX-2": order("ORDER-MIX-2", paymentMethod="pm_card_chargeDeclined"),
        "ORDER-MIX-3": order("ORDER-MIX-3", currency="USD", amount=2500),
    }
    for body in orders.values():
        saga.driver.send(body, copies=2)
    saga.driver.pump(timeout=120)

    finals = final_outcomes(log(saga).collect())
    assert finals == {
        "ORDER-MIX-1": ["OrderCharged"],
        "ORDER-MIX-2": ["OrderDeclined"],
        "ORDER-MIX-3": ["OrderCharged"],
    }


def test_the_outbox_costs_no_state_transition_and_a_conflict_costs_one(saga: Saga) -> None:
    saga.driver.send(order("ORDER-EV-9"))
    saga.driver.pump(timeout=60)
    saga.driver.send(order("ORDER-EV-9", amount=99900))
    saga.driver.pump(timeout=60)

    by_outcome = {
        result.outcome: transitions(saga.driver.history(result.arn))[0]
        for result in saga.driver.results(with_path=False)
        if result.order_id == "ORDER-EV-9"
    }
    assert by_outcome == {"CHARGED": 3, "OrderConflict": 3}
    assert kinds(log(saga).events("ORDER-EV-9")) == ["OrderCharged", "OrderConflict"]


def test_saga_events_lists_each_event_once_for_a_person(saga: Saga, saga_events: Callable[..., str]) -> None:
    saga.driver.send(order("ORDER-EV-10"), copies=2)
    saga.driver.send(order("ORDER-EV-11", paymentMethod="pm_card_chargeDeclined"))
    saga.driver.pump(timeout=60)

    text = saga_events()
    lines = text.splitlines()
    assert any(
        line.split()[1:4] == ["OrderCharged", "ORDER-EV-10", "attempt"] and "150.00 BRL" in line
        for line in lines
    )
    assert any(line.split()[1:3] == ["OrderDeclined", "ORDER-EV-11"] for line in lines)
    assert all(line.split()[0].endswith("Z") for line in lines[:-2]), "each event says when, in UTC"
    assert lines[-1] == "2 events: 1 OrderCharged, 1 OrderDeclined"
    only = saga_events(order_id="ORDER-EV-11", raw=True)
    assert [json.loads(line)["detailType"] for line in only.splitlines()] == ["OrderDeclined"]
    assert sorted(kinds(log(saga).events())) == ["OrderCharged", "OrderDeclined"], "still there for the log"


def test_saga_events_shows_the_state_machines_times_as_the_relays_in_whole_utc_seconds(
    saga: Saga, saga_events: Callable[..., str]
) -> None:
    # OrderCharged comes from the relay (whole seconds); OrderConflict from the state machine, whose
    # $$.State.EnteredTime carries fractions and an offset.
    saga.driver.send(order("ORDER-EV-14"))
    saga.driver.pump(timeout=60)
    saga.driver.send(order("ORDER-EV-14", amount=99900))
    saga.driver.pump(timeout=60)

    text = saga_events(order_id="ORDER-EV-14")

    lines = text.splitlines()[:-2]
    assert sorted(line.split()[1] for line in lines) == ["OrderCharged", "OrderConflict"]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", line.split()[0]) for line in lines), lines


def archived(detail_type: str, detail: dict[str, Any], *, time: str) -> str:
    """An event as the outcome bus's rule puts it on the archive queue."""
    envelope = {"version": "0", "id": f"{detail_type}-{detail['eventId']}", "source": "payment-saga"}
    return json.dumps({**envelope, "detail-type": detail_type, "time": time, "detail": detail})


def test_saga_events_lists_an_orders_events_of_one_second_by_their_sequence_then_time(
    saga: Saga, saga_events: Callable[..., str]
) -> None:
    # All three in one second, arrived in the wrong order: the state machine's conflict (its time
    # has a fraction, it has no sequence), then the relay's charge and the wait before it (whole
    # seconds; the claim's version after each write).
    order_id, second = "ORDER-EV-SAME-SECOND", "2026-12-01T10:00:05"
    common = {"orderId": order_id, "amount": 15000, "currency": "BRL", "resolvedBy": "saga"}
    events = [
        archived(
            "OrderConflict",
            {**common, "eventId": f"{order_id}/conflict/exec-2", "occurredAt": f"{second}.250+00:00"},
            time=f"{second}Z",
        ),
        archived(
            "OrderCharged",
            {**common, "eventId": f"{order_id}/attempt-1/charged", "sequence": 3, "occurredAt": f"{second}Z"},
            time=f"{second}Z",
        ),
        archived(
            "OrderPaymentProcessing",
            {
                **common,
                "eventId": f"{order_id}/attempt-1/processing",
                "sequence": 2,
                "occurredAt": f"{second}Z",
            },
            time=f"{second}Z",
        ),
    ]
    for body in events:
        saga.driver.sqs.send_message(QueueUrl=saga.stack.outputs["OutcomeArchiveQueueUrl"], MessageBody=body)

    listed = [line.split()[1] for line in saga_events(order_id=order_id).splitlines()[:-2]]
    raw = [json.loads(line)["detailType"] for line in saga_events(order_id=order_id, raw=True).splitlines()]

    assert listed == ["OrderPaymentProcessing", "OrderCharged", "OrderConflict"]
    assert raw == listed


def test_saga_events_shows_every_event_past_the_first_ten_and_each_orders_final_one(
    saga: Saga, saga_events: Callable[..., str]
) -> None:
    # The runbook's RequeueExhausted case makes ten events (five releases, four re-queues, then a
    # person); a charged order behind them makes the eleventh: more than one batch of the queue.
    saga.driver.send(order("ORDER-EV-12", paymentMethod=SAVED_PAYMENT_METHOD))
    saga.driver.send(order("ORDER-EV-13"))
    saga.driver.pump(timeout=180)

    every = saga_events(raw=True)
    charged = saga_events(order_id="ORDER-EV-13", raw=True)
    exhausted = saga_events(order_id="ORDER-EV-12")

    assert len(every.splitlines()) == 11
    assert [json.loads(line)["detailType"] for line in charged.splitlines()] == ["OrderCharged"]
    assert exhausted.splitlines()[-1].startswith("10 events:")
    assert "OrderNeedsAttention" in exhausted.splitlines()[-3]
    assert len(log(saga).events()) == 11, "read without deleting: every event is still on the queue"


def test_the_relay_on_its_sample_event_publishes_a_charge_and_a_decline(saga: Saga) -> None:
    """``sam local invoke OutcomeRelayFunction -e events/outcome_relay.json`` does this against AWS."""
    event = json.loads((ROOT / "events" / "outcome_relay.json").read_text(encoding="utf-8"))
    response = saga.driver.lambda_client.invoke(
        FunctionName=saga.stack.function_name("OutcomeRelayFunction"), Payload=json.dumps(event)
    )
    assert response.get("FunctionError") is None
    assert json.loads(response["Payload"].read()) == {"batchItemFailures": []}
    assert [(e.detail_type, e.event_id) for e in log(saga).events()] == [
        ("OrderCharged", "ORDER-201/attempt-1/charged"),
        ("OrderDeclined", "ORDER-202/attempt-1/declined"),
    ]


# -- counting the events against the orders (``saga chaos``'s count) ------------------------------


def event(
    kind: str, order_id: str, attempt: int, payment_attempt: str = "initial", **detail: str
) -> OutcomeEvent:
    what = {"OrderCharged": "charged", "OrderDeclined": "declined", "OrderNeedsAttention": "needs-attention"}
    return OutcomeEvent(
        detail_type=kind,
        detail={
            "eventId": f"{order_id}/attempt-{attempt}/{what.get(kind, kind)}",
            "orderId": order_id,
            "attempt": attempt,
            "paymentAttempt": payment_attempt,
            **detail,
        },
        time="2026-11-30T16:10:01Z",
        event_bus_id=f"bus-{order_id}-{attempt}-{kind}",
    )


def test_a_decline_then_the_customers_paid_retry_is_one_order_that_ended_charged() -> None:
    events = [
        event("OrderDeclined", "A", 1),
        event("OrderCharged", "A", 2, "retry-1", chargeId="pi_a"),
        event("OrderDeclined", "B", 1),
        event("OrderDeclined", "B", 2, "retry-1"),  # the customer's second card declined too
        event("OrderCharged", "C", 1, chargeId="pi_c"),
        event("OrderCharged", "C", 1, chargeId="pi_c"),  # delivered twice: one event
    ]

    counted = tally(events, ["A", "B", "C"], {"A": ["pi_a"], "C": ["pi_c"]})

    assert counted.exact, counted.problems
    assert counted.final_by_order == {"A": "OrderCharged", "B": "OrderDeclined", "C": "OrderCharged"}
    assert counted.by_final == {"OrderCharged": 2, "OrderDeclined": 1}
    assert counted.duplicates == 1


def test_an_order_without_a_final_event_or_with_two_ends_breaks_the_count() -> None:
    events = [
        event("OrderNeedsReconciliation", "LOST", 1),
        event("OrderReleased", "LOST", 1),  # released, never re-queued nor charged: no end
        event("OrderCharged", "TWICE", 1, chargeId="pi_1"),
        event("OrderCharged", "TWICE", 2, chargeId="pi_2"),
        event("OrderCharged", "AFTER", 1, chargeId="pi_3"),
        event("OrderDeclined", "AFTER", 2, "retry-1"),  # nothing may follow a charge
        event("OrderDeclined", "SAME", 1),
        event("OrderNeedsAttention", "SAME", 2),  # two ends of one payment attempt
    ]
    ledger = {"TWICE": ["pi_1", "pi_2"], "AFTER": ["pi_3"]}

    counted = tally(events, ["LOST", "TWICE", "AFTER", "SAME"], ledger)

    assert not counted.exact
    assert counted.missing == ["LOST"]
    assert counted.charged_twice == ["TWICE"]
    assert sorted({p.split(":")[0] for p in counted.problems}) == ["AFTER", "SAME", "TWICE"]


def test_the_final_outcome_must_agree_with_the_providers_ledger() -> None:
    events = [event("OrderCharged", "A", 1, chargeId="pi_a"), event("OrderDeclined", "B", 1)]

    counted = tally(events, ["A", "B"], {"A": ["pi_other"], "B": ["pi_b"]})

    assert counted.problems == [
        "A: OrderCharged with pi_a, the provider has pi_other",
        "B: ended OrderDeclined, but the provider charged pi_b",
    ]


# -- the relay publishes in stream order, re-queues once, parks what it can never read ------------


def test_a_failed_publish_is_retried_before_the_orders_later_outcome_is_published(saga: Saga) -> None:
    # Attempt 1 declined, then the customer's retry charged, both closing writes in one relay batch;
    # the first PutEvents of the batch (OrderDeclined) fails once.
    relay_later(saga)
    saga.driver.send(order("ORDER-SEQ-1", paymentMethod="pm_card_chargeDeclined"))
    saga.driver.pump(timeout=60)
    saga.driver.send(order("ORDER-SEQ-1", paymentAttempt="retry-1"))
    saga.driver.pump(timeout=60)
    saga.faults.add(Fault("OutcomeRelayFunction", f"before:{PUT_EVENTS}", "error_call"))

    relay_now(saga)

    assert saga.faults.faults[-1].fired == 1, "the publish failed once"
    events = log(saga).events("ORDER-SEQ-1")
    assert kinds(events) == ["OrderDeclined", "OrderCharged"], "published in the order the claim changed"
    declined, charged = events
    assert declined.detail["sequence"] < charged.detail["sequence"]
    claim = saga.driver.claim("ORDER-SEQ-1")
    assert claim is not None
    assert charged.detail["sequence"] == int(claim["version"]), "the claim row's version"
    ledger = {"ORDER-SEQ-1": [c.charge_id for c in saga.provider.charges_for("ORDER-SEQ-1")]}
    for arrival in (events, events[::-1]):  # whatever order a consumer reads them in
        counted = tally(arrival, ["ORDER-SEQ-1"], ledger)
        assert counted.exact, counted.problems
        assert counted.final_by_order == {"ORDER-SEQ-1": "OrderCharged"}


def test_a_record_that_can_never_be_read_is_parked_and_the_release_behind_it_requeued_once(
    saga: Saga,
) -> None:
    # In one batch: an unreadable row, then the tombstone of ORDER-SEQ-2's failed claim (released
    # NOT_CHARGED). Parking the first fails twice (SQS down): the relay stalls on it, twice, and
    # touches nothing behind it; then it parks it and re-queues the order, once.
    relay_later(saga)
    put_unreadable_row(saga, "ORDER-POISON")
    saga.faults.add(Fault("ClaimOrderFunction", "start", "die", times=4, order_id="ORDER-SEQ-2"))
    saga.driver.send(order("ORDER-SEQ-2"))
    saga.driver.pump(timeout=120)
    saga.faults.add(Fault("OutcomeRelayFunction", "before:sqs.SendMessage", "error_call", times=2))

    relay_now(saga)

    assert saga.runtime.sends[("OutcomeRelayFunction", "sqs.SendMessage")] == 2, "one park, one re-queue"
    outcomes = sorted(r.outcome for r in saga.driver.results(with_path=False) if r.order_id == "ORDER-SEQ-2")
    assert outcomes == ["CHARGED", "ClaimFailed"], "re-queued exactly once"
    assert kinds(log(saga).events("ORDER-SEQ-2")) == ["OrderReleased", "OrderRequeued", "OrderCharged"]
    assert log(saga).events("ORDER-POISON") == []
    (parked_record,) = parked(saga)
    assert parked_record["orderId"] == "ORDER-POISON"
    assert "claimToken" in str(parked_record["parkReason"])
    assert parked_record["record"]["dynamodb"]["NewImage"]["status"] == {"S": "COMPLETED"}  # type: ignore[index]
    assert saga.charges("ORDER-SEQ-2") == 1


def test_a_requeue_sent_twice_by_a_retried_relay_starts_one_execution(saga: Saga) -> None:
    # The relay dies right after its SendMessage landed (before OrderRequeued is published): the
    # record is retried and the order is sent again. Both copies name the same execution.
    saga.faults.add(Fault("ClaimOrderFunction", "start", "die", times=4, order_id="ORDER-SEQ-3"))
    saga.faults.add(Fault("OutcomeRelayFunction", "after:sqs.SendMessage", "die"))
    saga.driver.send(order("ORDER-SEQ-3"))
    saga.driver.pump(timeout=120)

    assert saga.runtime.sends[("OutcomeRelayFunction", "sqs.SendMessage")] == 2, "two copies sent"
    results = [r for r in saga.driver.results(with_path=False) if r.order_id == "ORDER-SEQ-3"]
    assert sorted(r.outcome for r in results) == ["CHARGED", "ClaimFailed"], "one execution for the re-queue"
    requeue_name = requeue_execution_name("ORDER-SEQ-3/attempt-0/requeued")
    assert [r.arn.rsplit(":", 1)[-1] for r in results if r.outcome == "CHARGED"] == [requeue_name]
    assert kinds(log(saga).events("ORDER-SEQ-3")) == ["OrderReleased", "OrderRequeued", "OrderCharged"]
    assert saga.charges("ORDER-SEQ-3") == 1


def test_a_requeue_whose_publish_failed_after_its_send_starts_one_execution(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The relay's SendMessage lands, then its PutEvents of OrderRequeued fails once: the record is
    # reported failed and retried, and the order is sent again. Both copies name one execution.
    saga.faults.add(Fault("ClaimOrderFunction", "start", "die", times=4, order_id="ORDER-SEQ-4"))
    failures = [call_error("error_call", PUT_EVENTS)]

    def fail_the_first_requeued(params: dict[str, Any], **_: Any) -> None:
        if failures and any(e["DetailType"] == "OrderRequeued" for e in params.get("Entries", [])):
            raise failures.pop()

    hooks = boto3._get_default_session().events  # the session the handlers' clients come from
    hooks.register(f"provide-client-params.{PUT_EVENTS}", fail_the_first_requeued)
    try:
        saga.driver.send(order("ORDER-SEQ-4"))
        saga.driver.pump(timeout=120)
    finally:
        hooks.unregister(f"provide-client-params.{PUT_EVENTS}", fail_the_first_requeued)

    assert failures == [], "the publish of OrderRequeued failed once"
    assert saga.runtime.sends[("OutcomeRelayFunction", "sqs.SendMessage")] == 2, "two copies sent"
    results = [r for r in saga.driver.results(with_path=False) if r.order_id == "ORDER-SEQ-4"]
    assert sorted(r.outcome for r in results) == ["CHARGED", "ClaimFailed"], "one execution for the re-queue"
    assert kinds(log(saga).events("ORDER-SEQ-4")) == ["OrderReleased", "OrderRequeued", "OrderCharged"]
    assert saga.charges("ORDER-SEQ-4") == 1
