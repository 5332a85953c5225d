"""The edges of "release only on proof" and of the charge's re-check, at the handlers the state machine calls.

Each scenario is one a redrive, a zombie Lambda or a late step can produce, and each was a mutant of
``scripts/mutants`` that no other test noticed. The steps are invoked as Step Functions invokes them
(the Lambda API of the in-process stack, with the payload the ASL builds), against the real claims
table and the Stripe emulator; what is asserted is what a customer sees: how many charges the
provider made, and whether the order stays held, is released, or is charged again.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import boto3
import pytest

from handlers import charge_payment
from handlers import runtime as handler_runtime
from payment_saga.claims import ClaimsStore
from payment_saga.orders import order_from_message
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from tests.helpers import Saga, order
from tests.network import Network

#: The execution whose steps these tests replay (a redriven one, a zombie...).
TOKEN = "arn:aws:states:us-east-1:123456789012:execution:payment-saga-PaymentSagaStateMachine:earlier"
LEASE = 900


def store_at(saga: Saga, now: float) -> ClaimsStore:
    """A writer on the claims table whose clock reads ``now``."""
    return ClaimsStore(
        saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: now
    )


def invoke(saga: Saga, function: str, event: dict[str, Any]) -> dict[str, Any]:
    """Invoke a step's Lambda as Step Functions does; the payload, or ``{"errorType": ...}``."""
    response = saga.driver.lambda_client.invoke(
        FunctionName=saga.stack.function_name(function), Payload=json.dumps(event)
    )
    answer: dict[str, Any] = json.loads(response["Payload"].read())
    return answer


def charge_event(attempt: int = 1, *, retry_count: int = 0, redrive_count: int = 0) -> dict[str, Any]:
    """The Charge Payment payload the ASL builds for TOKEN, the attempt's owner."""
    return {
        "order": order(),
        "claim": {"attempt": attempt, "how": "NEW", "attemptOwner": True},
        "claimToken": TOKEN,
        "retryCount": retry_count,
        "redriveCount": redrive_count,
    }


def charge_landed(saga: Saga, attempt: int = 1) -> None:
    """An earlier run's charge request for the attempt reached the provider and was applied."""
    StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url).charge(
        order_from_message(order()), attempt=attempt, idempotency_key=idempotency_key("ORDER-003", attempt)
    )


def test_a_redriven_charge_step_rejected_at_the_providers_door_keeps_the_claim(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 1 claimed and charged, then the execution failed before Mark Complete; the operator
    redrove it after the API key was rolled. The redriven step's first request gets a 401: that
    proves nothing about run 1's request, so the outcome is unknown, never "not attempted"."""
    store_at(saga, time.time()).claim(order_from_message(order()), token=TOKEN)
    charge_landed(saga)
    monkeypatch.setattr(
        charge_payment, "provider", lambda: StripeProvider("rolled-key", api_base=saga.provider.url)
    )

    answer = invoke(saga, "ChargePaymentFunction", charge_event(redrive_count=1))

    assert answer.get("errorType") == "PaymentOutcomeUnknown", answer  # -> Needs Reconciliation
    assert saga.charges("ORDER-003") == 1


def test_a_charge_is_not_sent_when_the_lease_runs_out_before_the_request_could_end(saga: Saga) -> None:
    """30 s of lease left is less than the Charge Lambda may take: the sweeper could judge the
    attempt while the request is in flight. The step refuses; nothing reaches the provider."""
    store_at(saga, time.time() - LEASE + 30).claim(order_from_message(order()), token=TOKEN)

    answer = invoke(saga, "ChargePaymentFunction", charge_event())

    assert answer.get("errorType") == "ClaimLost", answer
    assert saga.charges("ORDER-003") == 0
    assert saga.provider.payment_intents("ORDER-003") == []


def test_a_zombie_charge_of_an_attempt_its_execution_has_since_moved_past_charges_nothing(saga: Saga) -> None:
    """The execution's attempt 1 ran out of lease and the sweeper released it NOT_CHARGED; the
    execution, redriven, claimed attempt 2. A Charge step of attempt 1 still in flight (a zombie)
    must not charge under attempt 1's key: attempt 2 will charge, and that would be twice."""
    the_order = order_from_message(order())
    then = time.time() - 2 * LEASE
    store_at(saga, then).claim(the_order, token=TOKEN)
    stale = store_at(saga, time.time()).get("ORDER-003")
    assert stale is not None
    store_at(saga, time.time()).release_stale(stale)
    assert store_at(saga, time.time()).claim(the_order, token=TOKEN).claim.attempt == 2

    answer = invoke(saga, "ChargePaymentFunction", charge_event(attempt=1))

    assert answer.get("errorType") == "ClaimLost", answer
    assert saga.charges("ORDER-003") == 0


def test_a_redriven_execution_whose_claim_step_failed_does_not_release_what_it_may_have_charged(
    saga: Saga,
) -> None:
    """Run 1 claimed and charged; the redriven run's Claim step failed (its claim is there, its
    own). Being the attempt's owner is not proof any more: the claim is kept, and the next delivery
    of the order is a duplicate instead of a second charge."""
    store_at(saga, time.time()).claim(order_from_message(order()), token=TOKEN)
    charge_landed(saga)
    event = {
        "state": {"order": order(), "claimError": {"Error": "States.Timeout", "Cause": ""}},
        "claimToken": TOKEN,
        "redriveCount": 1,
    }

    answer = invoke(saga, "ReleaseClaimFunction", event)

    assert answer.get("released") is False, answer
    again = saga.driver.wait(saga.driver.start(order(), name="delivered-again"))
    assert again.outcome == "DUPLICATE", again
    assert saga.charges("ORDER-003") == 1


@pytest.mark.parametrize("error", ["PaymentOutcomeUnknown", "States.Timeout", "Lambda.Unknown", None])
def test_release_claim_refuses_an_error_that_does_not_prove_nothing_was_charged(
    saga: Saga, error: str | None
) -> None:
    """Whatever routes an execution to Release Claim by mistake, only a decline or a charge never
    sent releases: the claim of a charge that may have landed is kept for reconciliation."""
    store_at(saga, time.time()).claim(order_from_message(order()), token=TOKEN)
    charge_landed(saga)
    state: dict[str, Any] = {"order": order()}
    if error is not None:
        state["error"] = {"Error": error, "Cause": ""}

    answer = invoke(saga, "ReleaseClaimFunction", {"state": state, "claimToken": TOKEN, "redriveCount": 0})

    assert answer.get("errorType") == "ReleaseRefused", answer
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert claim["status"] == "CLAIMED"
    assert saga.charges("ORDER-003") == 1


def test_a_claim_step_that_died_after_winning_a_new_attempt_is_retried_into_that_attempt(saga: Saga) -> None:
    """The customer's retry after a decline wins attempt 2; the Claim Lambda never hears back and
    Step Functions retries it. The retry finds its own claim and must keep attempt 2 (attempt 1's
    key would replay the decline, and the claim would no longer match what the charge checks)."""
    declined = saga.driver.wait(saga.driver.start(order(paymentMethod="pm_card_chargeDeclined"), name="d"))
    assert declined.error == "PaymentDeclined"
    store = handler_runtime.claims_store()
    real = store._client
    network = Network(real)
    network.then_normal().then_applied_then_failed()  # first-claim write loses; the re-claim's answer is lost
    store._client = network  # type: ignore[assignment]
    try:
        retry = saga.driver.wait(saga.driver.start(order(paymentAttempt="retry-1"), name="retry"))
    finally:
        store._client = real

    assert retry.outcome == "CHARGED", retry
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], int(claim["attempt"])) == ("COMPLETED", 2)
    assert saga.charges("ORDER-003") == 1


def test_a_payment_key_that_cannot_be_read_sends_nothing_and_the_order_is_charged_once_it_can(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key, no request: the claim is released NOT_CHARGED (not kept for reconciliation), so
    the order goes through once the secret is there. The secret is the stack's own (the only one its
    role may read), scheduled for deletion by mistake and then restored under the same ARN."""
    monkeypatch.delitem(os.environ, "PAYMENT_API_KEY")
    secret_arn = os.environ["PAYMENT_API_KEY_SECRET_ARN"]
    secrets = boto3.client("secretsmanager", region_name=REGION)
    secrets.delete_secret(SecretId=secret_arn, RecoveryWindowInDays=7)
    handler_runtime.reset()

    first = saga.driver.wait(saga.driver.start(order(), name="no-secret"))

    assert first.error == "ChargeNotAttempted", first
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "NOT_CHARGED")
    secrets.restore_secret(SecretId=secret_arn)
    again = saga.driver.wait(saga.driver.start(order(), name="with-secret"))
    assert again.outcome == "CHARGED", again
    assert saga.charges("ORDER-003") == 1
