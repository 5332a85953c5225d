"""The sweeper against DynamoDB's conditional semantics (moto, table from template.yaml) and a real
Stripe emulator through the real ``StripeProvider``: what it completes, releases, leaves alone, and
that it never charges."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest

from handlers import runtime as handler_runtime
from handlers import sweeper
from payment_saga.claims import Claim, ClaimResult, ClaimsStore, ClaimStatus, ReleaseReason
from payment_saga.errors import ClaimLost, PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import AttemptRecord, Charge, StripeProvider, idempotency_key
from payment_saga.reconcile import ReconcileOutcome, ReconcileReport, reconcile, searchable_order
from payment_saga.sweep_lock import SweepLock
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.runtime.api import LambdaContext
from saga_local.stripe_emulator import ENDPOINTS, SAVED_PAYMENT_METHOD, TEST_CUSTOMER, ProviderEmulator
from saga_local.template import ROOT, load_template

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.helpers import FakeClock

ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"
LEASE = 900
GRACE = 3600


@pytest.fixture
def emulator(clock: FakeClock) -> Iterator[ProviderEmulator]:
    # The emulator runs on the test's clock too: search lag and idempotency windows move with it.
    with ProviderEmulator(clock=clock) as emulator:
        yield emulator


@pytest.fixture
def provider(emulator: ProviderEmulator) -> Iterator[StripeProvider]:
    provider = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    yield provider
    provider.close()


@pytest.fixture
def store(dynamodb: Any, claims_table: str, clock: FakeClock) -> ClaimsStore:
    return ClaimsStore(claims_table, client=dynamodb, clock=clock, lease_seconds=LEASE)


def charge(provider: StripeProvider, order: Order = ORDER, attempt: int = 1) -> Charge:
    """The holder's charge, made before it died."""
    return provider.charge(order, attempt=attempt, idempotency_key=idempotency_key(order.order_id, attempt))


def row(dynamodb: Any, table: str, order_id: str = ORDER.order_id) -> dict[str, Any]:
    item: dict[str, Any] = dynamodb.get_item(
        TableName=table, Key={"orderId": {"S": order_id}}, ConsistentRead=True
    )["Item"]
    return item


def assert_charged_once(store: ClaimsStore, emulator: ProviderEmulator, order: Order, charge_id: str) -> None:
    """The claim is completed with ``charge_id``, a later delivery is a duplicate, one charge in all."""
    claim = store.get(order.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, charge_id)
    assert store.claim(order, token=B).result is ClaimResult.DUPLICATE
    assert len(emulator.charges_for(order.order_id)) == 1


def sweep(store: ClaimsStore, provider: Any, clock: FakeClock, *, apply: bool = True) -> ReconcileReport:
    return reconcile(store, provider, now=clock.now, apply=apply, search_grace_seconds=GRACE)


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


# -- races --------------------------------------------------------------------------------------


class RacingProvider:
    """Runs ``race`` between the sweeper's discovery and its write, then answers as ``provider``."""

    def __init__(self, provider: StripeProvider, race: Callable[[], object]) -> None:
        self.provider = provider
        self.race = race

    def charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge:
        raise AssertionError("the sweeper must never charge")

    def find_charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge | None:
        raise AssertionError("the sweeper searches with search_attempt")

    def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> AttemptRecord:
        self.race()
        return self.provider.search_attempt(order, attempt=attempt, idempotency_key=idempotency_key)

    def list_attempt(
        self, order: Order, *, attempt: int, idempotency_key: str, **window: Any
    ) -> AttemptRecord:
        return self.provider.list_attempt(order, attempt=attempt, idempotency_key=idempotency_key, **window)


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


def release_as_not_charged(store: ClaimsStore, token: str = A) -> None:
    """A release whose proof was wrong: the holder releases an attempt whose charge did land."""
    store.release(ORDER.order_id, token=token, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")


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


# -- the Lambda ---------------------------------------------------------------------------------


@pytest.fixture
def sweeper_env(
    monkeypatch: pytest.MonkeyPatch, claims_table: str, emulator: ProviderEmulator
) -> Iterator[None]:
    monkeypatch.setenv("CLAIMS_TABLE_NAME", claims_table)
    monkeypatch.setenv("PAYMENT_API_BASE", emulator.url)
    monkeypatch.setenv("PAYMENT_API_KEY", LOCAL_API_KEY)
    monkeypatch.setenv("CLAIM_SEARCH_GRACE_SECONDS", "60")
    monkeypatch.setenv("CLAIM_RETENTION_DAYS", "30")
    handler_runtime.reset()
    yield
    handler_runtime.reset()


def test_the_sweeper_lambda_completes_and_releases_and_logs_each_decision(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The Lambda runs on the real clock: seed claims taken 5,000 s before it (lease 900 s).
    past = ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000)
    past.claim(ORDER, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    landed = charge(holder)
    holder.close()
    past.claim(Order("ORDER-004", 2500, "USD", "cus_9", "pm_card_visa"), token=A)
    event = json.loads((ROOT / "events" / "sweeper.json").read_text())

    result = sweeper.handler(event, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["counts"] == {
        "completed": 1,
        "released": 1,
        "pending": 0,
        "changed": 0,
        "charge_on_released": 0,
        "failed": 0,
    }
    store = ClaimsStore(claims_table, client=dynamodb)
    assert store.get(ORDER.order_id).charge_id == landed.charge_id  # type: ignore[union-attr]
    assert store.get("ORDER-004").status is ClaimStatus.RELEASED  # type: ignore[union-attr]
    events = {(getattr(r, "event", None), getattr(r, "orderId", None)) for r in caplog.records}
    assert ("reconciliation_completed", ORDER.order_id) in events
    assert ("reconciliation_released", "ORDER-004") in events
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    metrics = {  # Powertools writes metrics as CloudWatch embedded metric format lines
        (metric["Name"], tuple(sorted(set(dimensions) - {"service"})))
        for line in lines
        for directive in (line.get("_aws") or {}).get("CloudWatchMetrics", [])
        for metric in directive["Metrics"]
        for dimensions in directive["Dimensions"]
    }
    assert ("ReconciliationResolved", ("Outcome",)) in metrics


def test_a_sweep_with_less_time_left_than_one_claim_needs_leaves_it_for_the_next_tick(
    sweeper_env: None, dynamodb: Any, claims_table: str, emulator: ProviderEmulator
) -> None:
    # A claim the sweeper would complete, and an invocation with 25 s left: less than one search and
    # one write need (RESERVE_MILLIS). Starting it anyway risks Lambda killing the sweep mid-claim.
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    charge(holder)
    holder.close()

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 25))

    assert result["finished"] is False
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def test_a_sweeper_deployed_with_a_longer_grace_waits_that_long_before_it_releases(
    sweeper_env: None, dynamodb: Any, claims_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A provider whose search lags up to two hours: the stack sets a two-hour grace. The claim's lease
    # ran out 4,100 s ago, past the default grace (3,600 s) but not past the stack's.
    monkeypatch.setenv("CLAIM_SEARCH_GRACE_SECONDS", "7200")
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert (result["counts"]["pending"], result["counts"]["released"]) == (1, 0)
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def emitted_metrics(out: str, *, function_name: str | None = None) -> dict[str, float]:
    """Metric name -> total over the embedded metric format lines Powertools printed: those with no
    dimension but the service, or with ``function_name`` those broken down by ``FunctionName``."""
    dimensions = ["service"] if function_name is None else ["FunctionName", "service"]
    totals: dict[str, float] = {}
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        for directive in (record.get("_aws") or {}).get("CloudWatchMetrics", []):
            if sorted(directive["Dimensions"][0]) != dimensions or len(directive["Dimensions"]) != 1:
                continue
            if function_name is not None:
                assert record["FunctionName"] == function_name
            for metric in directive["Metrics"]:
                value = record[metric["Name"]]
                totals[metric["Name"]] = totals.get(metric["Name"], 0) + sum(
                    value if isinstance(value, list) else [value]
                )
    return totals


def test_the_sweeper_lambda_alarms_on_a_charge_for_a_released_claim_and_on_duplicate_charges(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    past = ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    # ORDER-003: charged, then released on a wrong proof while the sweeper looked.
    past.claim(ORDER, token=A)
    landed = charge(holder)
    # ORDER-004: charged twice under one attempt (the provider applied the key twice).
    double = Order("ORDER-004", 2500, "USD", "cus_9", "pm_card_visa")
    past.claim(double, token=A)
    emulator.dedupe = False
    both = {charge(holder, double).charge_id, charge(holder, double).charge_id}
    emulator.dedupe = True
    holder.close()

    def racing() -> RacingProvider:
        released: list[bool] = []

        def race() -> None:
            if not released:
                released.append(True)
                release_as_not_charged(ClaimsStore(claims_table, client=dynamodb))

        return RacingProvider(StripeProvider(LOCAL_API_KEY, api_base=emulator.url), race)

    monkeypatch.setattr(sweeper, "provider", racing)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert (result["counts"]["charge_on_released"], result["counts"]["completed"]) == (1, 1)
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).charge_id == landed.charge_id  # type: ignore[union-attr]
    errors = {
        (getattr(r, "event", None), getattr(r, "orderId", None)): r
        for r in caplog.records
        if r.levelname == "ERROR"
    }
    assert ("charge_on_released_claim", ORDER.order_id) in errors
    duplicate = errors[("duplicate_charge", "ORDER-004")]
    kept, extras = duplicate.chargeId, duplicate.duplicateChargeIds  # type: ignore[attr-defined]
    assert (len(extras), {kept, *extras}) == (1, both)
    totals = emitted_metrics(capfd.readouterr().out)
    assert (totals.get("ChargeOnReleasedClaim"), totals.get("DuplicateCharge")) == (1, 1)


def test_the_sweeper_lambda_counts_each_extra_charge_of_an_attempt_charged_three_times(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The provider applied one key three times: two refunds are owed, and the alarm must say two.
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    emulator.dedupe = False
    charges = {charge(holder).charge_id for _ in range(3)}
    emulator.dedupe = True
    holder.close()

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert (len(charges), result["counts"]["completed"]) == (3, 1)
    assert emitted_metrics(capfd.readouterr().out).get("DuplicateCharge") == 2


def test_the_sweeper_lambda_counts_a_claim_it_cannot_prove_within_the_list_cap_and_leaves_it_claimed(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    claimed_at = int(time.time()) - 5000
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: claimed_at).claim(ORDER, token=A)
    # More PaymentIntents of other orders in the attempt's window than ten pages of the list.
    emulator.add_history(1500, created_from=claimed_at - 300, created_to=claimed_at + LEASE)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert (result["finished"], result["counts"]["pending"]) == (True, 1)
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]
    (pending,) = [r for r in caplog.records if getattr(r, "event", None) == "reconciliation_pending"]
    assert (pending.orderId, pending.listCapReached) == (ORDER.order_id, True)  # type: ignore[attr-defined]
    totals = emitted_metrics(capfd.readouterr().out)
    assert (totals.get("ReconciliationPending"), totals.get("ReconciliationListCapped")) == (1, 1)


def test_the_sweeper_lambda_logs_a_decline_as_declined(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Claim and charge on the emulator's clock (weeks before the Lambda's): the list's window is
    # the claim's, and the PaymentIntent must fall in it.
    assert clock.now < time.time() - 5000
    declined = Order("ORDER-D", 15000, "BRL", "cus_123", "pm_card_chargeDeclined")
    ClaimsStore(claims_table, client=dynamodb, clock=clock).claim(declined, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    with pytest.raises(Exception, match="declined"):
        charge(holder, declined)
    holder.close()

    sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    (released,) = [r for r in caplog.records if getattr(r, "event", None) == "reconciliation_released"]
    assert (released.orderId, released.releaseReason) == ("ORDER-D", "DECLINED")  # type: ignore[attr-defined]


class UnreachableProvider:
    """A provider the sweeper cannot reach: every search fails before an answer."""

    def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> AttemptRecord:
        raise OSError("network unreachable")


def a_stale_claim_the_provider_cannot_be_asked_about(
    dynamodb: Any, claims_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose lease ran out long ago, and a sweeper whose provider is unreachable."""
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)
    monkeypatch.setattr(sweeper, "provider", UnreachableProvider)


def test_the_sweeper_lambda_fails_visibly_when_a_claim_could_not_be_reconciled(
    sweeper_env: None, dynamodb: Any, claims_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_stale_claim_the_provider_cannot_be_asked_about(dynamodb, claims_table, monkeypatch)

    with pytest.raises(RuntimeError, match="1 stale claim"):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))
    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def test_a_claim_the_sweeper_lambda_could_not_reconcile_is_counted_for_its_alarm(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    a_stale_claim_the_provider_cannot_be_asked_about(dynamodb, claims_table, monkeypatch)

    with pytest.raises(RuntimeError):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert emitted_metrics(capfd.readouterr().out).get("ReconciliationFailed") == 1


def function_metrics(out: str, function_name: str) -> dict[str, float]:
    """Metric name -> value over the embedded metric format lines broken down by ``FunctionName``."""
    return emitted_metrics(out, function_name=function_name)


def test_a_sweep_publishes_its_heartbeat_and_the_age_of_the_claim_it_left_pending(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A claim whose lease ran out 100 s ago: its search finds nothing and the grace has not passed.
    monkeypatch.setenv("CLAIM_SEARCH_GRACE_SECONDS", "3600")
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - LEASE - 100).claim(ORDER, token=A)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["counts"]["pending"] == 1
    readings = function_metrics(capfd.readouterr().out, "payment-saga-SweeperFunction")
    assert readings["SweepCompleted"] == 1
    assert LEASE + 100 <= readings["OldestUnresolvedClaimAge"] < LEASE + 200


def test_a_sweep_with_nothing_to_do_still_beats_and_reads_zero(
    sweeper_env: None, capfd: pytest.CaptureFixture[str]
) -> None:
    sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    readings = function_metrics(capfd.readouterr().out, "payment-saga-SweeperFunction")
    assert (readings["SweepCompleted"], readings["OldestUnresolvedClaimAge"]) == (1, 0)


def test_a_sweep_that_fails_on_a_claim_still_beats_and_counts_the_claim_unresolved(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    a_stale_claim_the_provider_cannot_be_asked_about(dynamodb, claims_table, monkeypatch)

    with pytest.raises(RuntimeError):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    readings = function_metrics(capfd.readouterr().out, "payment-saga-SweeperFunction")
    assert readings["SweepCompleted"] == 1
    assert readings["OldestUnresolvedClaimAge"] >= 5000


def test_a_sweep_that_finds_the_lock_held_publishes_no_heartbeat(
    sweeper_env: None, dynamodb: Any, claims_table: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A skip is healthy only if the sweep holding the lease completes: that sweep beats, not this one."""
    SweepLock(claims_table, client=dynamodb).acquire("another-sweep", lease_seconds=300)

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["skipped"] is True
    out = capfd.readouterr().out
    assert "SweepCompleted" not in function_metrics(out, "payment-saga-SweeperFunction")
    assert emitted_metrics(out).get("SweepSkipped") == 1


def test_a_sweeper_that_fails_before_its_first_claim_publishes_no_heartbeat(
    sweeper_env: None, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The index query fails (a permission taken away, say): the sweep never reaches a claim.
    def refused(self: ClaimsStore, **_: Any) -> Any:
        raise RuntimeError("AccessDeniedException: dynamodb:Query")

    monkeypatch.setattr(ClaimsStore, "open_claims", refused)

    with pytest.raises(RuntimeError, match="AccessDenied"):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert "SweepCompleted" not in function_metrics(capfd.readouterr().out, "payment-saga-SweeperFunction")


def test_a_sweeper_without_the_retention_setting_refuses_rather_than_guessing_one(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A charged claim the sweeper would complete, with a TTL: it must not pick one of its own.
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(ORDER, token=A)
    holder = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    charge(holder)
    holder.close()
    monkeypatch.delenv("CLAIM_RETENTION_DAYS")

    with pytest.raises(RuntimeError, match="CLAIM_RETENTION_DAYS"):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def test_the_sample_event_is_what_the_schedule_sends() -> None:
    schedule = load_template()["Resources"]["SweeperFunction"]["Properties"]["Events"]["Sweep"]
    sent = json.loads(schedule["Properties"]["Input"])
    sample = json.loads((ROOT / "events" / "sweeper.json").read_text())
    assert schedule["Properties"]["ScheduleExpression"] == "rate(5 minutes)"
    assert set(sample) == set(sent)
    assert sample["source"] == sent["source"]


@pytest.mark.parametrize(("page_cap", "outcome"), [(None, "pending"), ("20", "released")])
def test_the_sweeper_lambda_lists_as_many_pages_as_its_page_cap_allows(
    sweeper_env: None,
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    page_cap: str | None,
    outcome: str,
) -> None:
    # 1,200 PaymentIntents of other orders during the lease: more than the default 10 pages list.
    if page_cap is not None:
        monkeypatch.setenv("CLAIM_LIST_PAGE_CAP", page_cap)
    began = time.time() - 5000
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: began).claim(ORDER, token=A)
    emulator.add_history(1200, created_from=int(began), created_to=int(began) + LEASE)
    event = json.loads((ROOT / "events" / "sweeper.json").read_text())

    result = sweeper.handler(event, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["counts"][outcome] == 1
    status = ClaimsStore(claims_table, client=dynamodb).get(ORDER.order_id).status  # type: ignore[union-attr]
    assert status is (ClaimStatus.CLAIMED if outcome == "pending" else ClaimStatus.RELEASED)
