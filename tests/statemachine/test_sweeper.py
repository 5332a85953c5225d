"""Executions that end in Needs Reconciliation, then resolved by the sweeper: the real ASL, the real
handlers, a Stripe emulator. The claim an execution kept is completed with the one charge it made."""

from __future__ import annotations

import time

import boto3
import pytest

from payment_saga.claims import ClaimsStore
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import ReconcileOutcome, ReconcileReport, reconcile
from saga_local.faults import Fault
from saga_local.stack import LOCAL_API_KEY, REGION
from tests.statemachine.conftest import Saga, order

#: The template's default lease (ClaimLeaseSeconds): the sweeper looks once it has run out.
LEASE = 900


def sweep_after_the_lease(saga: Saga) -> ReconcileReport:
    """The sweeper as its schedule would run it once the lease ran out (the clocks moved on)."""
    later = time.time() + LEASE + 1
    store = ClaimsStore(
        saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: later
    )
    provider = StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url)
    try:
        return reconcile(store, provider, now=later, apply=True)
    finally:
        provider.close()


@pytest.mark.parametrize(
    "why",
    ["charge outcome unknown after every retry", "mark complete exhausted after the charge"],
)
def test_needs_reconciliation_is_completed_by_the_sweeper_with_the_one_charge(saga: Saga, why: str) -> None:
    if why.startswith("charge"):
        # The charge lands, Stripe answers 500 and replays that 500 for the key on every retry.
        saga.provider.inject("fail_after_apply_replayed", order_id="ORDER-003")
    else:
        saga.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100))
    result = saga.driver.wait(saga.driver.start(order(), name="stuck"))
    assert result.error == "NeedsReconciliation"
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]
    creates = saga.provider.request_count("create")

    report = sweep_after_the_lease(saga)

    (decision,) = report.decisions
    (landed,) = saga.provider.charges_for("ORDER-003")
    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, landed.charge_id)
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", landed.charge_id)
    assert saga.provider.request_count("create") == creates  # the sweeper only searched
    # A producer's duplicate afterwards is suppressed by the completed claim.
    duplicate = saga.driver.wait(saga.driver.start(order(), name="duplicate"))
    assert duplicate.outcome == "DUPLICATE"
    assert saga.charges("ORDER-003") == 1


def test_an_execution_that_never_reached_the_charge_is_left_pending_within_the_grace(saga: Saga) -> None:
    # Release Claim cannot run after a decline: the claim is kept, nothing was charged.
    saga.faults.add(Fault("ReleaseClaimFunction", "start", "die", times=100))
    result = saga.driver.wait(
        saga.driver.start(order("ORDER-D", paymentMethod="pm_card_chargeDeclined"), name="release-fails")
    )
    assert result.error == "ReleaseFailed"

    (decision,) = sweep_after_the_lease(saga).decisions

    # The search finds nothing, but it may lag by up to an hour: not proof yet.
    assert decision.outcome is ReconcileOutcome.PENDING
    assert saga.driver.claim("ORDER-D")["status"] == "CLAIMED"  # type: ignore[index]
