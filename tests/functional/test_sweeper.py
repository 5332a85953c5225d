"""The sweeper against DynamoDB's conditional semantics (moto, table from template.yaml) and a real
Stripe emulator through the real ``StripeProvider``: what it completes, releases, leaves alone, and
that it never charges."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from payment_saga.claims import Claim, ClaimResult, ClaimsStore, ClaimStatus, ReleaseReason
from payment_saga.errors import PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import AttemptRecord, StripeProvider
from payment_saga.reconcile import ReconcileOutcome, searchable_order
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import ProviderEmulator
from tests.functional.sweeper_support import (
    GRACE,
    LEASE,
    ORDER,
    A,
    B,
    RacingProvider,
    assert_charged_once,
    charge,
    row,
    sweep,
)

if TYPE_CHECKING:
    from tests.helpers import FakeClock


# -- completed ----------------------------------------------------------------------------------


def test_stale_claim_whose_charge_landed_is_completed_with_that_charge_and_nothing_is_charged(
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
    dynamodb: Any,
    claims_table: str,
) -> None:
    # The holder charged, then died before Mark Complete; its lease runs out.
    store.claim(ORDER, token=A)
    landed = charge(provider)
    clock.advance(LEASE + 1)
    creates = emulator.request_count("create")

    report = sweep(store, provider, clock)

    (decision,) = report.decisions
    assert (decision.outcome, decision.charge_id, decision.applied) == (
        ReconcileOutcome.COMPLETED,
        landed.charge_id,
        True,
    )
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, landed.charge_id)
    item = row(dynamodb, claims_table)
    assert "openClaim" not in item  # out of the sweeper's index
    assert "reconciledAt" in item
    assert emulator.request_count("create") == creates  # the sweeper only searched
    assert len(emulator.charges_for(ORDER.order_id)) == 1
    # A redelivery now finds the order done.
    assert store.claim(ORDER, token=B).result is ClaimResult.DUPLICATE


# -- released -----------------------------------------------------------------------------------


def test_stale_claim_with_no_charge_past_the_grace_is_released_and_a_redelivery_charges_once(
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
) -> None:
    # The holder died between claim and charge (seed 000's stuck CLAIMED row).
    store.claim(ORDER, token=A)
    clock.advance(LEASE + GRACE + 1)

    (decision,) = sweep(store, provider, clock).decisions

    assert decision.outcome is ReconcileOutcome.RELEASED
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.release_reason) == (ClaimStatus.RELEASED, ReleaseReason.NOT_CHARGED)
    assert emulator.charges_for(ORDER.order_id) == []
    # The release proved nothing was charged: the next delivery starts attempt 2 and charges once.
    outcome = store.claim(ORDER, token=B)
    assert (outcome.result, outcome.claim.attempt) == (ClaimResult.NEW_ATTEMPT, 2)
    store.complete(ORDER.order_id, token=B, charge_id=charge(provider, attempt=2).charge_id)
    assert [c.attempt for c in emulator.charges_for(ORDER.order_id)] == ["2"]
    assert sweep(store, provider, clock).decisions == []


def test_a_declined_attempt_whose_release_failed_is_released_as_declined_and_never_charged_again(
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
) -> None:
    declined = Order("ORDER-D", 15000, "BRL", "cus_123", "pm_card_chargeDeclined")
    store.claim(declined, token=A)
    with pytest.raises(Exception, match="declined"):
        charge(provider, declined)
    clock.advance(LEASE + GRACE + 1)

    (decision,) = sweep(store, provider, clock).decisions

    assert (decision.outcome, decision.release_reason) == (ReconcileOutcome.RELEASED, ReleaseReason.DECLINED)
    claim = store.get("ORDER-D")
    assert claim is not None
    assert (claim.status, claim.release_reason) == (ClaimStatus.RELEASED, ReleaseReason.DECLINED)
    assert emulator.charges_for("ORDER-D") == []
    # A late redelivery of the declined attempt never reaches the provider again.
    assert store.claim(declined, token=B).result is ClaimResult.DUPLICATE


def test_an_attempt_the_provider_never_saw_is_released_as_not_charged_once_the_list_confirms(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    store.claim(ORDER, token=A)
    clock.advance(LEASE + GRACE + 1)
    lists = emulator.request_count("list")

    (decision,) = sweep(store, provider, clock).decisions

    assert (decision.outcome, decision.release_reason) == (
        ReconcileOutcome.RELEASED,
        ReleaseReason.NOT_CHARGED,
    )
    assert "list" in decision.reason
    assert emulator.request_count("list") == lists + 1  # the release rests on the list, not the search


# -- pending ------------------------------------------------------------------------------------


def test_no_charge_found_within_the_grace_is_pending_and_the_claim_is_untouched(
    store: ClaimsStore, provider: StripeProvider, clock: FakeClock, dynamodb: Any, claims_table: str
) -> None:
    store.claim(ORDER, token=A)
    clock.advance(LEASE + 1)
    before = row(dynamodb, claims_table)

    (decision,) = sweep(store, provider, clock).decisions

    assert decision.outcome is ReconcileOutcome.PENDING
    assert "may lag" in decision.reason
    assert row(dynamodb, claims_table) == before


def test_with_a_two_hour_search_lag_the_sweeper_never_releases_a_claim_whose_charge_landed(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    """The search lags two hours, longer than the grace: only the list shows the charge."""
    emulator.search_lag_seconds = 2 * 3600
    store.claim(ORDER, token=A)
    landed = charge(provider)  # the holder charged, then died before Mark Complete

    decisions = []
    for _ in range((LEASE + 3 * 3600) // 300):  # a sweep every 5 minutes for three hours and more
        clock.advance(300)
        decisions += sweep(store, provider, clock).decisions

    assert ReconcileOutcome.RELEASED not in {d.outcome for d in decisions}
    completed = [d for d in decisions if d.outcome is ReconcileOutcome.COMPLETED]
    assert [d.charge_id for d in completed] == [landed.charge_id]
    # It was completed as soon as the grace ended, by the list, long before the search caught up.
    assert "list" in completed[0].reason
    assert_charged_once(store, emulator, ORDER, landed.charge_id)


def test_the_list_is_asked_exactly_the_grace_after_the_attempts_last_request(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    """The rule as documented: a search that finds nothing is trusted once ``search_grace_seconds``
    have passed since the lease ended, not a second before and not a second later."""
    store.claim(ORDER, token=A)
    clock.advance(LEASE + GRACE - 1)
    (decision,) = sweep(store, provider, clock).decisions
    assert decision.outcome is ReconcileOutcome.PENDING
    lists = emulator.request_count("list")

    clock.advance(1)
    (decision,) = sweep(store, provider, clock).decisions

    assert decision.outcome is ReconcileOutcome.RELEASED
    assert emulator.request_count("list") == lists + 1


def test_a_charge_stamped_by_a_provider_clock_behind_ours_is_still_found(
    store: ClaimsStore, clock: FakeClock
) -> None:
    """The provider's clock runs 30 s behind ours: the charge it stamps at the claim's very start
    is dated before the attempt began, and the list must still see it (its window has a margin)."""
    with ProviderEmulator(clock=lambda: clock.now - 30) as behind:
        behind.search_lag_seconds = 2 * 3600  # only the list can show it
        provider = StripeProvider(LOCAL_API_KEY, api_base=behind.url)
        try:
            store.claim(ORDER, token=A)
            landed = charge(provider)
            clock.advance(LEASE + GRACE + 1)
            (decision,) = sweep(store, provider, clock).decisions
        finally:
            provider.close()

    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, landed.charge_id)


def test_a_list_that_fails_leaves_the_claim_pending(
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
    dynamodb: Any,
    claims_table: str,
) -> None:
    store.claim(ORDER, token=A)
    clock.advance(LEASE + GRACE + 1)
    before = row(dynamodb, claims_table)
    emulator.inject("rate_limit", endpoint="list")

    (decision,) = sweep(store, provider, clock).decisions

    assert decision.outcome is ReconcileOutcome.PENDING
    assert "list" in decision.reason
    assert row(dynamodb, claims_table) == before


def test_a_charge_the_search_does_not_show_yet_is_not_mistaken_for_no_charge(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    emulator.search_lag_seconds = 1800  # an incident: the search is half an hour behind
    store.claim(ORDER, token=A)
    landed = charge(provider)
    clock.advance(LEASE + 1)

    assert sweep(store, provider, clock).decisions[0].outcome is ReconcileOutcome.PENDING

    clock.advance(1800)
    (decision,) = sweep(store, provider, clock).decisions
    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, landed.charge_id)
    assert len(emulator.charges_for(ORDER.order_id)) == 1


def test_the_grace_counts_from_the_end_of_the_lease_not_the_start_of_the_attempt(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    """A takeover continues an old attempt: its charge can be much younger than the attempt.

    A dies without charging; B takes the expired lease over 50 minutes later, keeps attempt 1,
    charges (the search lags 30 minutes), and dies too. When B's lease ends the attempt is more
    than an hour old, but B's charge is 15 minutes old and not searchable yet: releasing now would
    let the next delivery charge attempt 2 as well.
    """
    emulator.search_lag_seconds = 1800
    store.claim(ORDER, token=A)
    clock.advance(3000)
    assert store.claim(ORDER, token=B).result is ClaimResult.TAKEOVER
    landed = charge(provider)
    clock.advance(LEASE + 1)

    (decision,) = sweep(store, provider, clock).decisions

    assert decision.outcome is ReconcileOutcome.PENDING
    clock.advance(1800)
    (decision,) = sweep(store, provider, clock).decisions
    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, landed.charge_id)


def test_a_payment_still_processing_is_pending_until_it_settles(
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
    dynamodb: Any,
    claims_table: str,
) -> None:
    emulator.force_outcome("processing", order_id=ORDER.order_id)
    store.claim(ORDER, token=A)
    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider)
    clock.advance(LEASE + GRACE + 1)
    before = row(dynamodb, claims_table)

    (decision,) = sweep(store, provider, clock).decisions

    assert decision.outcome is ReconcileOutcome.PENDING
    assert "processing" in decision.reason
    assert row(dynamodb, claims_table) == before
    (intent,) = emulator.payment_intents(ORDER.order_id)
    emulator.set_status(intent["id"], "succeeded")
    (decision,) = sweep(store, provider, clock).decisions
    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, intent["id"])


# -- what is never touched ----------------------------------------------------------------------


def test_a_dry_run_reports_what_it_would_do_and_changes_nothing(
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
    dynamodb: Any,
    claims_table: str,
) -> None:
    store.claim(ORDER, token=A)
    landed = charge(provider)
    lost = Order("ORDER-004", 2500, "USD", "cus_9", "pm_card_visa")
    store.claim(lost, token=A)
    clock.advance(LEASE + GRACE + 1)
    before = {order_id: row(dynamodb, claims_table, order_id) for order_id in (ORDER.order_id, "ORDER-004")}

    report = sweep(store, provider, clock, apply=False)

    assert {(d.order_id, d.outcome, d.charge_id, d.applied) for d in report.decisions} == {
        (ORDER.order_id, ReconcileOutcome.COMPLETED, landed.charge_id, False),
        ("ORDER-004", ReconcileOutcome.RELEASED, None, False),
    }
    assert {order_id: row(dynamodb, claims_table, order_id) for order_id in before} == before
    assert len(emulator.charges()) == 1


def test_live_leases_are_never_touched(
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
    dynamodb: Any,
    claims_table: str,
) -> None:
    # An execution holds the claim and is between its charge and Mark Complete.
    store.claim(ORDER, token=A)
    charge(provider)
    clock.advance(LEASE - 1)
    before = row(dynamodb, claims_table)
    searches = emulator.request_count("search")

    report = sweep(store, provider, clock)

    assert report.decisions == []
    assert row(dynamodb, claims_table) == before
    assert emulator.request_count("search") == searches  # not even asked about


def test_one_claim_failing_does_not_stop_the_others(
    store: ClaimsStore, provider: StripeProvider, clock: FakeClock
) -> None:
    store.claim(ORDER, token=A)
    charge(provider)
    store.claim(Order("ORDER-004", 2500, "USD", "cus_9", "pm_card_visa"), token=A)
    clock.advance(LEASE + 1)

    class Broken(RacingProvider):
        def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> AttemptRecord:
            if order.order_id == "ORDER-004":
                raise RuntimeError("boom")
            return super().search_attempt(order, attempt=attempt, idempotency_key=idempotency_key)

    report = sweep(store, Broken(provider, lambda: None), clock)

    assert report.counts["completed"] == 1
    assert report.counts["failed"] == 1


def test_the_report_gives_the_age_of_the_oldest_attempt_it_left_open(
    store: ClaimsStore, provider: StripeProvider, clock: FakeClock
) -> None:
    # ORDER-003 waits longest and stays pending; ORDER-004, claimed later, is resolved (charged).
    store.claim(ORDER, token=A)
    clock.advance(600)
    later = Order("ORDER-004", 2500, "USD", "cus_9", "pm_card_visa")
    store.claim(later, token=A)
    charge(provider, later)
    clock.advance(LEASE + 1)

    report = sweep(store, provider, clock)

    assert (report.counts["pending"], report.counts["completed"]) == (1, 1)
    assert report.oldest_unresolved_age_seconds == 600 + LEASE + 1
    # Once nothing is left open, the age is 0: the alarm's reading goes back to normal.
    clock.advance(GRACE)
    assert sweep(store, provider, clock).counts["released"] == 1
    assert sweep(store, provider, clock).oldest_unresolved_age_seconds == 0


def test_a_claim_that_failed_counts_as_unresolved_in_the_age(
    store: ClaimsStore, provider: StripeProvider, clock: FakeClock
) -> None:
    store.claim(ORDER, token=A)
    clock.advance(LEASE + 1)

    class Broken(RacingProvider):
        def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> AttemptRecord:
            raise RuntimeError("boom")

    report = sweep(store, Broken(provider, lambda: None), clock)

    assert report.counts["failed"] == 1
    assert report.oldest_unresolved_age_seconds == LEASE + 1


def test_the_order_searched_for_is_rebuilt_from_the_claim_without_inventing_a_payment_method() -> None:
    claim = Claim(
        order_id="ORDER-7",
        status=ClaimStatus.CLAIMED,
        claim_token=A,
        attempt=3,
        fingerprint="15000|BRL|cus|with|bars",
        payment_attempt="retry-2",
        lease_expires_at=0,
        attempt_started_at=0,
    )
    order = searchable_order(claim)
    assert (order.order_id, order.amount, order.currency, order.customer_id) == (
        "ORDER-7",
        15000,
        "BRL",
        "cus|with|bars",
    )
    assert order.fingerprint == claim.fingerprint
    assert order.payment_method == ""
