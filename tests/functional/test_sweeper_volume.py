"""The sweeper at an account's volume: among a hundred thousand PaymentIntents of other orders, how
few requests prove an attempt (the customer's saved card narrows the list), and what it leaves to a
person within its page cap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from payment_saga.claims import ClaimResult, ClaimsStore, ReleaseReason
from payment_saga.errors import PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import ReconcileOutcome, reconcile
from saga_local.stripe_emulator import ENDPOINTS, SAVED_PAYMENT_METHOD, TEST_CUSTOMER, ProviderEmulator
from tests.functional.sweeper_support import (
    GRACE,
    LEASE,
    ORDER,
    A,
    B,
    assert_charged_once,
    charge,
    row,
    sweep,
)

if TYPE_CHECKING:
    from tests.helpers import FakeClock


# -- at an account's volume ---------------------------------------------------------------------

#: An order paid with a card saved to a Stripe Customer: every charge request names the customer.
SAVED = Order(
    "ORDER-SAVED", 15000, "BRL", "cus_123", SAVED_PAYMENT_METHOD, provider_customer_id=TEST_CUSTOMER
)
#: Stripe's default rate is 25 orders/s: a hundred thousand PaymentIntents in about an hour.
BUSY_ACCOUNT = 100_000


def requests_sent(emulator: ProviderEmulator) -> int:
    """Every request the SDK sent to the provider (each endpoint's count)."""
    return sum(emulator.request_count(endpoint) for endpoint in ENDPOINTS)


def busy_account(emulator: ProviderEmulator, clock: FakeClock, *, customer_share: int = 0) -> None:
    """A hundred thousand PaymentIntents of other orders around now, some of them the customer's."""
    start, end = int(clock.now) - 1800, int(clock.now) + LEASE + 1800
    emulator.add_history(BUSY_ACCOUNT - customer_share, created_from=start, created_to=end)
    emulator.add_history(customer_share, customer=TEST_CUSTOMER, created_from=start, created_to=end)


@pytest.mark.bulk
def test_among_a_hundred_thousand_payment_intents_a_customers_uncharged_claim_is_released_in_two_requests(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    busy_account(emulator, clock, customer_share=40)
    store.claim(SAVED, token=A)  # the holder died before its charge
    clock.advance(LEASE + GRACE + 1)
    sent = requests_sent(emulator)

    (decision,) = sweep(store, provider, clock).decisions

    assert (decision.outcome, decision.release_reason) == (
        ReconcileOutcome.RELEASED,
        ReleaseReason.NOT_CHARGED,
    )
    assert requests_sent(emulator) - sent == 2  # one search, one page of the customer's list
    assert emulator.charges_for(SAVED.order_id) == []
    outcome = store.claim(SAVED, token=B)
    assert (outcome.result, outcome.claim.attempt) == (ClaimResult.NEW_ATTEMPT, 2)


@pytest.mark.bulk
@pytest.mark.parametrize("lag", [0, 2 * 3600], ids=["search-current", "search-two-hours-behind"])
def test_among_a_hundred_thousand_payment_intents_a_customers_landed_charge_is_found_and_never_released(
    lag: int, store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    busy_account(emulator, clock, customer_share=40)
    emulator.search_lag_seconds = lag
    store.claim(SAVED, token=A)
    landed = charge(provider, SAVED)  # sent with the customer, then the holder died
    clock.advance(LEASE + GRACE + 1)
    sent = requests_sent(emulator)

    (decision,) = sweep(store, provider, clock).decisions

    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, landed.charge_id)
    # Found by the search when it is current (one request), else by the customer's list (one more).
    found_by, requests = ("list", 2) if lag else ("search", 1)
    assert found_by in decision.reason
    assert requests_sent(emulator) - sent == requests
    assert_charged_once(store, emulator, SAVED, landed.charge_id)


def test_a_charge_made_without_the_customer_by_the_attempts_first_holder_is_not_missed_after_a_takeover(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    """A charges attempt 1 with a one-off card (no customer) and dies. A copy of the order paid with
    the saved card (same amount, currency and customer: the same order) takes the attempt over; its
    charge carries the customer, so Stripe refuses it as the same key with other parameters, and B
    dies too. The claim's order now names the customer, but the one charge does not: the
    customer's list would not show it, and releasing would let attempt 2 charge again."""
    one_off = Order(SAVED.order_id, SAVED.amount, SAVED.currency, SAVED.customer_id, "pm_card_visa")
    emulator.search_lag_seconds = 4 * 3600
    store.claim(one_off, token=A)
    landed = charge(provider, one_off)
    clock.advance(LEASE + 1)
    assert store.claim(SAVED, token=B).result is ClaimResult.TAKEOVER
    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider, SAVED)
    clock.advance(LEASE + GRACE + 1)

    (decision,) = sweep(store, provider, clock).decisions

    assert (decision.outcome, decision.charge_id) == (ReconcileOutcome.COMPLETED, landed.charge_id)
    assert "list" in decision.reason
    assert len(emulator.charges_for(SAVED.order_id)) == 1


@pytest.mark.bulk
def test_an_order_without_a_customer_in_a_busy_account_stays_pending_for_a_person_within_the_page_cap(
    store: ClaimsStore,
    provider: StripeProvider,
    emulator: ProviderEmulator,
    clock: FakeClock,
    dynamodb: Any,
    claims_table: str,
) -> None:
    busy_account(emulator, clock)
    store.claim(ORDER, token=A)  # no providerCustomerId: nothing narrows the list but time
    later = Order(
        "ORDER-LATER", 2500, "USD", "cus_9", SAVED_PAYMENT_METHOD, provider_customer_id=TEST_CUSTOMER
    )
    clock.advance(10)
    store.claim(later, token=B)
    clock.advance(LEASE + GRACE + 1)
    before = row(dynamodb, claims_table)
    sent = requests_sent(emulator)

    report = reconcile(
        store, provider, now=clock.now, apply=True, search_grace_seconds=GRACE, list_page_cap=5
    )

    pending, released = report.decisions
    assert (pending.order_id, pending.outcome, pending.list_cap_reached) == (
        ORDER.order_id,
        ReconcileOutcome.PENDING,
        True,
    )
    assert "a person decides" in pending.reason
    assert row(dynamodb, claims_table) == before
    # The expensive claim cost its cap and no more, and did not hold up the sweep.
    assert (released.order_id, released.outcome) == ("ORDER-LATER", ReconcileOutcome.RELEASED)
    assert requests_sent(emulator) - sent == (1 + 5) + (1 + 1)


@pytest.mark.bulk
def test_the_list_window_is_the_attempts_own_however_long_the_claim_has_been_stale(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    # Nobody swept for a day while the account took a hundred thousand orders after the lease.
    store.claim(ORDER, token=A)
    emulator.add_history(
        BUSY_ACCOUNT, created_from=int(clock.now) + LEASE + 3600, created_to=int(clock.now) + 86_000
    )
    clock.advance(86_400)
    sent = requests_sent(emulator)

    (decision,) = sweep(store, provider, clock).decisions

    assert (decision.outcome, decision.release_reason) == (
        ReconcileOutcome.RELEASED,
        ReleaseReason.NOT_CHARGED,
    )
    assert requests_sent(emulator) - sent == 2
