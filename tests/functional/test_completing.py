"""Mark Complete's decisions (``payment_saga.completing``) against DynamoDB's conditional semantics (moto,
the table from template.yaml): a charge closes the claim once, a completion the taker of the attempt
already made with the same charge is this execution's end too (told apart), and a settlement the
webhook recorded first ends the wait without a page."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from payment_saga import completing
from payment_saga.claims import ClaimResult, ClaimStatus
from payment_saga.errors import ClaimLost, SettledBeforeAwait
from payment_saga.orders import Order

if TYPE_CHECKING:
    from payment_saga.claims import ClaimsStore
    from tests.helpers import FakeClock

ORDER = Order("ORDER-DONE", 15000, "EUR", "cus_123", "pm_card_visa")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"
PI = "pi_this_attempts"
CHARGE = {"chargeId": PI, "amount": 15000, "currency": "EUR"}


def caught(intent: Any) -> dict[str, str]:
    """Charge Payment's ``PaymentProcessing`` as the state machine's Catch hands it on."""
    message = json.dumps({"paymentIntentId": intent})
    return {"Error": "PaymentProcessing", "Cause": json.dumps({"errorMessage": message})}


def awaiting(intent: str = PI) -> dict[str, Any]:
    return {"orderId": ORDER.order_id, "claimToken": A, "attempt": 1, "settlement": caught(intent)}


def test_a_charge_closes_this_executions_claim(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)

    done = completing.complete(store, ORDER.order_id, token=A, charge_id=PI)

    assert not done.by_takeover
    assert done.output(ORDER.order_id, CHARGE) == {
        "orderId": ORDER.order_id,
        "status": "CHARGED",
        "chargeId": PI,
        "attempt": 1,
        "amount": 15000,
        "currency": "EUR",
    }
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, PI)


def test_the_same_charge_completed_by_the_taker_is_this_executions_end_told_apart(
    store: ClaimsStore, clock: FakeClock
) -> None:
    store.claim(ORDER, token=A)
    clock.advance(901)
    assert store.claim(ORDER, token=B).result is ClaimResult.TAKEOVER
    store.complete(ORDER.order_id, token=B, charge_id=PI)  # the provider replayed A's PaymentIntent to B

    done = completing.complete(store, ORDER.order_id, token=A, charge_id=PI)

    assert done.by_takeover
    assert done.output(ORDER.order_id, CHARGE)["chargeId"] == PI


def test_another_charge_on_a_completed_claim_is_refused(store: ClaimsStore, clock: FakeClock) -> None:
    """Two charges for one order: not an end, the order needs reconciliation."""
    store.claim(ORDER, token=A)
    clock.advance(901)
    store.claim(ORDER, token=B)
    store.complete(ORDER.order_id, token=B, charge_id="pi_another")

    with pytest.raises(ClaimLost):
        completing.complete(store, ORDER.order_id, token=A, charge_id=PI)


def test_the_settlement_names_the_payment_intent_charge_payment_was_told_of() -> None:
    assert completing.settling_intent(caught(PI)) == PI
    for nothing in ("", None, 42):
        with pytest.raises(ValueError, match="names no PaymentIntent"):
            completing.settling_intent(caught(nothing))


def test_awaiting_settlement_keeps_the_claim_open_until_settle_by(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    wait = completing.Settlement.of(awaiting())

    claim = wait.await_on(store)

    assert claim.status is ClaimStatus.CLAIMED
    assert claim.settle_by is not None
    assert wait.output(claim) == {
        "orderId": ORDER.order_id,
        "paymentIntentId": PI,
        "attempt": 1,
        "settleBy": claim.settle_by,
    }


def test_a_settlement_the_webhook_recorded_first_says_how_it_ended(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.complete(ORDER.order_id, token=A, charge_id=PI)  # Stripe's webhook: payment_intent.succeeded

    with pytest.raises(SettledBeforeAwait) as settled:
        completing.Settlement.of(awaiting()).await_on(store)

    assert completing.settled_as(settled.value) == "CHARGED"


def test_awaiting_another_payment_intent_on_a_settled_claim_is_refused(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.complete(ORDER.order_id, token=A, charge_id="pi_another")

    with pytest.raises(ClaimLost) as refused:
        completing.Settlement.of(awaiting()).await_on(store)

    assert not isinstance(refused.value, SettledBeforeAwait)
