"""The sweeper racing the saga: a takeover, a late Mark Complete or a release landing between what
the sweeper found and what it writes, a charge found for a claim released since, and writes that
recheck the lease and may be retried."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from payment_saga.claims import ClaimResult, ClaimsStore, ClaimStatus
from payment_saga.errors import ClaimLost
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import ReconcileOutcome, reconcile
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import ProviderEmulator
from tests.functional.sweeper_support import (
    GRACE,
    LEASE,
    ORDER,
    A,
    B,
    RacingProvider,
    charge,
    release_as_not_charged,
    row,
    sweep,
)

if TYPE_CHECKING:
    from tests.helpers import FakeClock


# -- races --------------------------------------------------------------------------------------


@pytest.mark.parametrize("charged", [True, False], ids=["would-complete", "would-release"])
def test_a_takeover_racing_the_sweeper_wins_and_the_sweeper_changes_nothing(
    charged: bool,
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
    dynamodb: Any,
    claims_table: str,
) -> None:
    store.claim(ORDER, token=A)
    if charged:
        charge(provider)
    clock.advance(LEASE + GRACE + 1)
    # A redelivery takes the expired lease over after the sweeper saw the claim, before it writes.
    racing = RacingProvider(provider, lambda: store.claim(ORDER, token=B))

    (decision,) = sweep(store, racing, clock).decisions

    assert decision.outcome is ReconcileOutcome.CHANGED
    assert "another token" in decision.reason
    item = row(dynamodb, claims_table)
    assert (item["status"]["S"], item["claimToken"]["S"], item["attempt"]["N"]) == ("CLAIMED", B, "1")
    assert "openClaim" in item
    assert "reconciledAt" not in item
    assert len(emulator.charges_for(ORDER.order_id)) == int(charged)


def test_a_late_mark_complete_racing_the_sweeper_is_left_as_it_wrote(
    store: ClaimsStore, provider: StripeProvider, clock: FakeClock, dynamodb: Any, claims_table: str
) -> None:
    store.claim(ORDER, token=A)
    landed = charge(provider)
    clock.advance(LEASE + 1)
    racing = RacingProvider(
        provider, lambda: store.complete(ORDER.order_id, token=A, charge_id=landed.charge_id)
    )

    (decision,) = sweep(store, racing, clock).decisions

    assert decision.outcome is ReconcileOutcome.CHANGED
    item = row(dynamodb, claims_table)
    assert (item["status"]["S"], item["chargeId"]["S"]) == ("COMPLETED", landed.charge_id)
    assert "reconciledAt" not in item


@pytest.mark.parametrize("then", ["released", "re-claimed under attempt 2"])
def test_a_charge_found_for_a_claim_released_since_completes_it_and_is_reported_for_the_alarm(
    then: str,
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
    dynamodb: Any,
    claims_table: str,
) -> None:
    store.claim(ORDER, token=A)
    landed = charge(provider)
    clock.advance(LEASE + 1)

    def race() -> None:
        release_as_not_charged(store)
        if then.startswith("re-claimed"):
            assert store.claim(ORDER, token=B).claim.attempt == 2

    (decision,) = sweep(store, RacingProvider(provider, race), clock).decisions

    assert (decision.outcome, decision.charge_id, decision.applied) == (
        ReconcileOutcome.CHARGE_ON_RELEASED,
        landed.charge_id,
        True,
    )
    # The claim now records the charge, so no further attempt charges the order.
    item = row(dynamodb, claims_table)
    assert (item["status"]["S"], item["chargeId"]["S"]) == ("COMPLETED", landed.charge_id)
    assert store.claim(ORDER, token="arn:aws:states:us-east-1:123456789012:execution:saga:C").result is (
        ClaimResult.DUPLICATE
    )
    assert len(emulator.charges_for(ORDER.order_id)) == 1


def test_a_charge_found_for_an_order_completed_with_another_charge_is_reported_as_two_charges(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    # Attempt 1 charged but was released on a wrong proof; attempt 2 charged and completed.
    store.claim(ORDER, token=A)
    landed = charge(provider)
    clock.advance(LEASE + 1)

    def race() -> None:
        release_as_not_charged(store)
        store.claim(ORDER, token=B)
        store.complete(ORDER.order_id, token=B, charge_id=charge(provider, attempt=2).charge_id)

    (decision,) = sweep(store, RacingProvider(provider, race), clock).decisions

    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.CHARGE_ON_RELEASED, landed.charge_id)
    assert "two charges" in decision.reason
    assert len(emulator.charges_for(ORDER.order_id)) == 2  # what the alarm's runbook refunds


def test_more_than_one_succeeded_payment_intent_for_an_attempt_is_reported_with_the_extras(
    store: ClaimsStore, clock: FakeClock, dynamodb: Any, claims_table: str
) -> None:
    # A provider that applied the same key twice (here: deduplication off).
    with ProviderEmulator(clock=clock, dedupe=False) as careless:
        provider = StripeProvider(LOCAL_API_KEY, api_base=careless.url)
        store.claim(ORDER, token=A)
        first = charge(provider)
        clock.advance(5)
        second = charge(provider)
        clock.advance(LEASE + 1)

        (decision,) = sweep(store, provider, clock).decisions
        provider.close()

    assert (decision.outcome, decision.charge_id, decision.extra_charge_ids) == (
        ReconcileOutcome.COMPLETED,
        first.charge_id,
        (second.charge_id,),
    )
    assert row(dynamodb, claims_table)["chargeId"]["S"] == first.charge_id


def test_the_write_rechecks_the_lease_whatever_discovery_believed(
    store: ClaimsStore, provider: StripeProvider, clock: FakeClock, dynamodb: Any, claims_table: str
) -> None:
    # Discovery runs on a clock far ahead (a skewed host, a lagging view): the lease is live.
    store.claim(ORDER, token=A)
    charge(provider)
    before = row(dynamodb, claims_table)

    report = reconcile(store, provider, now=clock.now + 10 * LEASE, apply=True, search_grace_seconds=GRACE)

    assert [d.outcome for d in report.decisions] == [ReconcileOutcome.CHANGED]
    assert row(dynamodb, claims_table) == before


def test_a_retried_sweeper_write_that_already_landed_is_reentrant(
    store: ClaimsStore, provider: StripeProvider, clock: FakeClock
) -> None:
    store.claim(ORDER, token=A)
    landed = charge(provider)
    clock.advance(LEASE + 1)
    (seen,) = store.open_claims(lease_expired_before=int(clock.now))

    first = store.complete_stale(seen, charge_id=landed.charge_id)
    again = store.complete_stale(seen, charge_id=landed.charge_id)

    assert first == again
    assert again.status is ClaimStatus.COMPLETED
    with pytest.raises(ClaimLost):
        store.release_stale(seen)  # the other outcome is not ours to write any more
