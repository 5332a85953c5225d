"""A payment that settles later (a SEPA or ACH debit confirmed into ``processing``), through the local
stack: the real ASL, the real handlers, the Stripe emulator forcing ``processing`` on the confirm, the
outcome relay on the claims stream, Stripe's webhooks signed by the real ``stripe`` SDK, and the
sweeper's ``reconcile`` on the emulator. The execution ends in Awaiting Settlement with the claim
kept; the webhook ends the order; the sweeper only looks past the settle-by deadline."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import boto3

from payment_saga.claims import DEFAULT_SETTLEMENT_WINDOW_DAYS, SECONDS_PER_DAY, ClaimsStore
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import ReconcileOutcome, ReconcileReport, reconcile
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.runtime.faults import Fault
from tests.helpers import Saga, deliver_webhook, order

if TYPE_CHECKING:
    from saga_local.stack.driver import ExecutionResult

WINDOW = DEFAULT_SETTLEMENT_WINDOW_DAYS * SECONDS_PER_DAY
AWAITING_PATH = ["Claim Order", "Charge Payment", "Await Settlement", "Awaiting Settlement"]


def settles_later(saga: Saga, order_id: str = "ORDER-SEPA") -> ExecutionResult:
    """The order's confirm answers ``processing`` once, as a SEPA debit's does."""
    saga.provider.force_outcome("processing", order_id=order_id, times=1)
    return saga.driver.wait(saga.driver.start(order(order_id), name=f"{order_id}-debit"))


def published(saga: Saga, order_id: str) -> list[dict[str, Any]]:
    """The order's outcome events, as the relay published them from the claims stream so far."""
    saga.driver.relay()
    log = saga.driver.outcome_log
    assert log is not None
    return [{"type": e.detail_type, **e.detail} for e in log.collect() if e.order_id == order_id]


def sweep_at(saga: Saga, now: float) -> ReconcileReport:
    """The sweeper as its schedule would run it at ``now``."""
    store = ClaimsStore(
        saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: now
    )
    provider = StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url)
    try:
        return reconcile(store, provider, now=now, apply=True)
    finally:
        provider.close()


def test_a_debit_that_settles_later_ends_awaiting_settlement_with_its_claim_kept_and_no_page(
    saga: Saga,
) -> None:
    before = int(time.time())  # the store counts whole seconds
    result = settles_later(saga)

    assert result.status == "SUCCEEDED", result
    assert result.outcome == "AWAITING_SETTLEMENT"
    assert result.path == AWAITING_PATH  # not Needs Reconciliation: nothing pages
    (intent,) = saga.provider.payment_intents("ORDER-SEPA")
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert (claim["status"], claim["settlementIntentId"]) == ("CLAIMED", intent["id"])
    assert "chargeId" not in claim
    assert "expiresAt" not in claim
    assert int(claim["leaseExpiresAt"]) == int(claim["settleBy"]) >= before + WINDOW
    (processing,) = published(saga, "ORDER-SEPA")
    assert processing["type"] == "OrderPaymentProcessing"
    assert (processing["paymentIntentId"], processing["chargeId"]) == (intent["id"], None)
    assert processing["eventId"] == "ORDER-SEPA/attempt-1/payment-processing"
    assert processing["sequence"] == int(claim["version"])
    # Meanwhile every copy of the order is a duplicate: nothing confirms the debit twice.
    copy = saga.driver.wait(saga.driver.start(order("ORDER-SEPA"), name="ORDER-SEPA-copy"))
    assert copy.outcome == "DUPLICATE"
    assert len(saga.provider.payment_intents("ORDER-SEPA")) == 1


def test_an_await_settlement_that_died_after_its_write_is_retried_into_awaiting_settlement(
    saga: Saga,
) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "after:dynamodb.UpdateItem", "die", times=1))

    result = settles_later(saga)

    assert result.path[-1] == "Awaiting Settlement", result  # its write found again, no page
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert claim["status"] == "CLAIMED"
    assert [e["type"] for e in published(saga, "ORDER-SEPA")] == ["OrderPaymentProcessing"]


def test_the_succeeded_webhook_completes_an_awaiting_claim_once_and_late_events_change_nothing(
    saga: Saga,
) -> None:
    settles_later(saga)
    (intent,) = saga.provider.payment_intents("ORDER-SEPA")
    saga.provider.set_status(intent["id"], "succeeded")  # the bank paid, days later

    deliver_webhook(saga, "ORDER-SEPA", "succeeded")
    deliver_webhook(saga, "ORDER-SEPA", "succeeded")  # Stripe delivers at least once
    completed = saga.driver.claim("ORDER-SEPA")
    saga.provider.set_status(intent["id"], "processing")  # as an older snapshot would show it
    deliver_webhook(saga, "ORDER-SEPA", "processing")  # late, out of order

    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", intent["id"])
    assert claim == completed
    assert [e["type"] for e in published(saga, "ORDER-SEPA")] == ["OrderPaymentProcessing", "OrderCharged"]
    assert saga.charges("ORDER-SEPA") == 1


def test_the_payment_failed_webhook_releases_an_awaiting_claim_as_declined(saga: Saga) -> None:
    settles_later(saga)
    (intent,) = saga.provider.payment_intents("ORDER-SEPA")
    saga.provider.set_status(intent["id"], "requires_payment_method")  # the debit bounced

    deliver_webhook(saga, "ORDER-SEPA", "payment_failed")
    released = saga.driver.claim("ORDER-SEPA")
    deliver_webhook(saga, "ORDER-SEPA", "payment_failed")  # again
    deliver_webhook(saga, "ORDER-SEPA", "processing")  # late

    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "DECLINED")
    assert claim == released
    assert [e["type"] for e in published(saga, "ORDER-SEPA")] == ["OrderPaymentProcessing", "OrderDeclined"]
    again = saga.driver.wait(saga.driver.start(order("ORDER-SEPA"), name="ORDER-SEPA-redelivered"))
    assert again.outcome == "DUPLICATE"  # the declined payment attempt never reaches the provider again
    assert saga.charges("ORDER-SEPA") == 0


def test_the_sweeper_leaves_an_awaiting_claim_before_its_window_and_resolves_it_after(saga: Saga) -> None:
    settles_later(saga)
    (intent,) = saga.provider.payment_intents("ORDER-SEPA")
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    settle_by = int(claim["settleBy"])

    # Long past the lease and the search grace, but before the window: not even found.
    early = sweep_at(saga, time.time() + 2 * SECONDS_PER_DAY)
    assert early.decisions == []
    assert early.oldest_unresolved_age_seconds == 0

    # Past the window, still processing: overdue, pending, alarmed apart from the pending age.
    overdue = sweep_at(saga, settle_by + 1)
    (decision,) = overdue.decisions
    assert (decision.outcome, decision.settlement_overdue) == (ReconcileOutcome.PENDING, True)
    assert overdue.oldest_unresolved_age_seconds == 0
    assert saga.driver.claim("ORDER-SEPA") == claim

    # Settled, and the webhook never came: the sweeper completes it with the debit.
    saga.provider.set_status(intent["id"], "succeeded")
    settled = sweep_at(saga, settle_by + 301)
    (decision,) = settled.decisions
    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, intent["id"])
    done = saga.driver.claim("ORDER-SEPA")
    assert done is not None
    assert (done["status"], done["chargeId"]) == ("COMPLETED", intent["id"])
    assert [e["type"] for e in published(saga, "ORDER-SEPA")] == ["OrderPaymentProcessing", "OrderCharged"]


def test_the_sweeper_releases_a_debit_that_failed_past_its_window_as_declined(saga: Saga) -> None:
    settles_later(saga)
    (intent,) = saga.provider.payment_intents("ORDER-SEPA")
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    saga.provider.set_status(intent["id"], "requires_payment_method")

    report = sweep_at(saga, int(claim["settleBy"]) + 1)

    (decision,) = report.decisions
    assert (decision.outcome, decision.release_reason) == (ReconcileOutcome.RELEASED, "DECLINED")
    released = saga.driver.claim("ORDER-SEPA")
    assert released is not None
    assert (released["status"], released["releaseReason"]) == ("RELEASED", "DECLINED")
