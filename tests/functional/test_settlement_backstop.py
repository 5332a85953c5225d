"""The sweeper's settlement backstop against moto (the claims table and its open-claims index from
template.yaml) and the Stripe emulator: a debit whose webhook never came ends within the hour it
settled in, by Stripe's answer read with the stack's key, and a debit still settling is left alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from payment_saga.backstop import check_awaiting_settlements
from payment_saga.claims import ClaimResult, ClaimStatus, ReleaseReason
from payment_saga.errors import PaymentProcessing
from payment_saga.orders import Order
from payment_saga.payments import idempotency_key
from payment_saga.webhooks import WebhookDecision, WebhookOutcome

if TYPE_CHECKING:
    from payment_saga.claims import ClaimsStore
    from payment_saga.payments import StripeProvider
    from saga_local.stripe_emulator import ProviderEmulator

A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"


def debit_awaiting(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, order_id: str
) -> str:
    """A debit confirmed into ``processing`` whose claim awaits its settlement (Await Settlement ran)."""
    order = Order(order_id, 15000, "EUR", "cus_123", "pm_card_visa")
    store.claim(order, token=A)
    emulator.force_outcome("processing", order_id=order_id)
    with pytest.raises(PaymentProcessing) as processing:
        provider.charge(order, attempt=1, idempotency_key=idempotency_key(order_id, 1))
    intent = processing.value.payment_intent_id
    store.await_settlement(order_id, token=A, attempt=1, payment_intent_id=intent)
    return intent


def check(store: ClaimsStore, provider: StripeProvider) -> list[WebhookDecision]:
    found = list(check_awaiting_settlements(store, provider, livemode=False, check_id="1"))
    assert all(isinstance(f, WebhookDecision) for f in found), found
    return [f for f in found if isinstance(f, WebhookDecision)]


def test_a_settled_debit_whose_webhook_never_came_is_completed_by_the_next_check(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    settled = debit_awaiting(store, provider, emulator, "ORDER-PAID")
    failed = debit_awaiting(store, provider, emulator, "ORDER-BOUNCED")
    waiting = debit_awaiting(store, provider, emulator, "ORDER-WAITING")
    emulator.set_status(settled, "succeeded")
    emulator.set_status(failed, "requires_payment_method")

    decisions = {d.order_id: d.outcome for d in check(store, provider)}

    assert decisions == {
        "ORDER-PAID": WebhookOutcome.COMPLETED,
        "ORDER-BOUNCED": WebhookOutcome.RELEASED,
        "ORDER-WAITING": WebhookOutcome.LEFT,
    }
    paid = store.get("ORDER-PAID")
    bounced = store.get("ORDER-BOUNCED")
    still = store.get("ORDER-WAITING")
    assert paid is not None
    assert bounced is not None
    assert still is not None
    assert (paid.status, paid.charge_id) == (ClaimStatus.COMPLETED, settled)
    assert (bounced.status, bounced.release_reason) == (ClaimStatus.RELEASED, ReleaseReason.DECLINED)
    assert (still.status, still.settlement_intent_id) == (ClaimStatus.CLAIMED, waiting)
    # Nothing was charged by the check, and no copy of a settled order charges again.
    assert len(emulator.charges_for("ORDER-PAID")) == 1
    assert emulator.charges_for("ORDER-BOUNCED") == []
    assert store.claim(Order("ORDER-PAID", 15000, "EUR", "cus_123", "pm_card_visa"), token=B).result is (
        ClaimResult.DUPLICATE
    )


def test_stripe_unreachable_leaves_every_awaiting_claim_for_the_next_check(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    intent = debit_awaiting(store, provider, emulator, "ORDER-PAID")
    emulator.set_status(intent, "succeeded")
    emulator.inject("fail_before_apply", endpoint="retrieve")
    found = list(check_awaiting_settlements(store, provider, livemode=False, check_id="1"))
    assert len(found) == 1
    assert isinstance(found[0], Exception)
    claim = store.get("ORDER-PAID")
    assert claim is not None
    assert claim.status is ClaimStatus.CLAIMED  # nothing written on a failed read
    assert [d.outcome for d in check(store, provider)] == [WebhookOutcome.COMPLETED]


def test_only_claims_awaiting_a_settlement_are_asked_about(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    store.claim(Order("ORDER-CARD", 15000, "BRL", "cus_123", "pm_card_visa"), token=A)
    debit_awaiting(store, provider, emulator, "ORDER-WAITING")
    before = emulator.request_count("retrieve")
    assert [d.order_id for d in check(store, provider)] == ["ORDER-WAITING"]
    assert emulator.request_count("retrieve") - before == 1  # one read per awaiting claim


def test_a_claim_awaiting_a_payment_intent_stripe_does_not_have_is_reported_and_left_as_it_is(
    store: ClaimsStore, provider: StripeProvider
) -> None:
    store.claim(Order("ORDER-ODD", 15000, "EUR", "cus_123", "pm_card_visa"), token=A)
    store.await_settlement("ORDER-ODD", token=A, attempt=1, payment_intent_id="pi_NotAtStripe")
    (decision,) = check(store, provider)
    assert (decision.outcome, decision.order_id, decision.applied) == (
        WebhookOutcome.NOT_FOUND,
        "ORDER-ODD",
        False,
    )
    claim = store.get("ORDER-ODD")
    assert claim is not None
    assert (claim.status, claim.settlement_intent_id) == (ClaimStatus.CLAIMED, "pi_NotAtStripe")


def test_a_check_out_of_time_asks_stripe_about_nothing_more(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    debit_awaiting(store, provider, emulator, "ORDER-WAITING")
    before = emulator.request_count("retrieve")
    found = list(
        check_awaiting_settlements(store, provider, livemode=False, check_id="1", keep_going=lambda: False)
    )
    assert found == []
    assert emulator.request_count("retrieve") == before
