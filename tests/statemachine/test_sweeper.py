"""Executions that end in Needs Reconciliation, then resolved by the sweeper: the real ASL, the real
handlers, a Stripe emulator. The claim an execution kept is completed with the one charge it made."""

from __future__ import annotations

import time

import boto3
import pytest

from payment_saga.claims import ClaimsStore, ReleaseReason
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import ReconcileOutcome, ReconcileReport, reconcile
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.runtime.faults import Fault
from tests.helpers import Saga, order

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


#: The sweeper's default grace (CLAIM_SEARCH_GRACE_SECONDS): a release is considered only after it.
GRACE = 3600


def sweep_after_the_grace(saga: Saga) -> ReconcileReport:
    """The sweeper as its schedule would run it once the lease and the grace ran out."""
    later = time.time() + LEASE + GRACE + 1
    store = ClaimsStore(
        saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: later
    )
    provider = StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url)
    try:
        return reconcile(store, provider, now=later, apply=True, search_grace_seconds=GRACE)
    finally:
        provider.close()


def test_with_the_search_two_hours_behind_the_sweeper_completes_a_landed_charge_and_never_releases_it(
    saga: Saga,
) -> None:
    # The search lags longer than the grace: the charge is not searchable when the sweeper decides.
    saga.provider.search_lag_seconds = 2 * 3600
    saga.provider.inject("fail_after_apply_replayed", order_id="ORDER-003")
    assert saga.driver.wait(saga.driver.start(order(), name="stuck")).error == "NeedsReconciliation"
    (landed,) = saga.provider.charges_for("ORDER-003")

    (decision,) = sweep_after_the_grace(saga).decisions

    # Released here, a redelivery would have charged attempt 2. The list shows the charge instead.
    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, landed.charge_id)
    assert saga.driver.claim("ORDER-003")["status"] == "COMPLETED"  # type: ignore[index]
    duplicate = saga.driver.wait(saga.driver.start(order(), name="redelivered"))
    assert duplicate.outcome == "DUPLICATE"
    assert saga.charges("ORDER-003") == 1


def test_a_decline_whose_release_failed_is_released_as_declined_and_its_redelivery_never_reaches_the_provider(
    saga: Saga,
) -> None:
    saga.provider.search_lag_seconds = 2 * 3600
    saga.faults.add(Fault("ReleaseClaimFunction", "start", "die", times=100))
    declined = order("ORDER-D", paymentMethod="pm_card_chargeDeclined")
    assert saga.driver.wait(saga.driver.start(declined, name="release-fails")).error == "ReleaseFailed"
    saga.faults.clear()
    creates = saga.provider.request_count("create")

    (decision,) = sweep_after_the_grace(saga).decisions

    assert (decision.outcome, decision.release_reason) == (ReconcileOutcome.RELEASED, ReleaseReason.DECLINED)
    claim = saga.driver.claim("ORDER-D")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "DECLINED")
    # A late redelivery of the declined attempt is a duplicate: the provider is not called again.
    assert saga.driver.wait(saga.driver.start(declined, name="late-redelivery")).outcome == "DUPLICATE"
    assert saga.provider.request_count("create") == creates
