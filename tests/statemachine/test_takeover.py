"""A claim whose holder died: another execution takes the expired lease over and keeps the attempt.

The holder may have charged before it died. The attempt number, and so the idempotency key, is
kept, so the provider replays that charge instead of making a second one; and the new holder,
which did not start the attempt, can never prove that nothing was charged, so it never releases.
"""

from __future__ import annotations

import json
import time

import boto3
import pytest

from handlers import charge_payment
from payment_saga.claims import ClaimsStore
from payment_saga.orders import order_from_message
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.runtime.faults import Fault
from tests.helpers import Saga, order

DEAD = "arn:aws:states:us-east-1:123456789012:execution:payment-saga-PaymentSagaStateMachine:dead-holder"


def seed_expired_claim(saga: Saga, *, charged: bool) -> None:
    """The dead holder: claimed 2,000 s ago (lease 900 s), and maybe charged before dying."""
    store = ClaimsStore(
        saga.stack.table_name,
        client=boto3.client("dynamodb", region_name=REGION),
        clock=lambda: time.time() - 2000,
    )
    store.claim(order_from_message(order()), token=DEAD)
    if charged:
        provider = StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url)
        provider.charge(
            order_from_message(order()), attempt=1, idempotency_key=idempotency_key("ORDER-003", 1)
        )


def test_takeover_after_the_holder_charged_replays_that_charge(saga: Saga) -> None:
    seed_expired_claim(saga, charged=True)

    result = saga.driver.wait(saga.driver.start(order(), name="taker"))

    assert result.outcome == "CHARGED"
    assert saga.charges("ORDER-003") == 1
    assert result.output["chargeId"] == saga.provider.charges_for("ORDER-003")[0].charge_id  # type: ignore[index]


def test_takeover_whose_claim_step_keeps_failing_does_not_release(saga: Saga) -> None:
    seed_expired_claim(saga, charged=True)
    saga.faults.add(Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", "die", times=100))

    result = saga.driver.wait(saga.driver.start(order(), name="taker"))

    assert result.error == "ClaimFailed"
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert claim["status"] == "CLAIMED"  # kept: a release would let the next delivery charge again
    assert saga.charges("ORDER-003") == 1


def test_takeover_rejected_at_the_providers_door_goes_to_reconciliation(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_expired_claim(saga, charged=True)
    monkeypatch.setattr(
        charge_payment, "provider", lambda: StripeProvider("bad-key", api_base=saga.provider.url)
    )

    result = saga.driver.wait(saga.driver.start(order(), name="taker"))

    assert result.error == "NeedsReconciliation"
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1


def test_a_charge_step_that_outlived_its_claim_does_not_charge(saga: Saga) -> None:
    """A redriven (or zombie) Charge Payment, after its attempt was taken over and completed."""
    seed_expired_claim(saga, charged=False)
    taker = saga.driver.wait(saga.driver.start(order(), name="taker"))
    assert taker.outcome == "CHARGED"
    event = {
        "order": order(),
        "claim": {"attempt": 1, "how": "NEW", "attemptOwner": True},
        "claimToken": DEAD,
        "retryCount": 0,
        "redriveCount": 1,
    }

    response = saga.driver.lambda_client.invoke(
        FunctionName=saga.stack.function_name("ChargePaymentFunction"), Payload=json.dumps(event)
    )

    assert json.loads(response["Payload"].read())["errorType"] == "ClaimLost"
    assert saga.charges("ORDER-003") == 1
