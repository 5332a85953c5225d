"""Every path of statemachine/payment_saga.asl.json, executed for real, charges counted at the provider."""

from __future__ import annotations

import os

import pytest

from handlers import charge_payment
from handlers import runtime as handler_runtime
from payment_saga.payments import StripeProvider
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.runtime.faults import Fault
from tests.helpers import Saga, order

HAPPY = ["Claim Order", "Charge Payment", "Mark Complete"]


def test_happy_path_charges_once_and_completes_the_claim(saga: Saga) -> None:
    result = saga.driver.wait(saga.driver.start(order(), name="happy"))

    assert result.status == "SUCCEEDED", result
    assert result.path == HAPPY
    assert result.output is not None
    assert result.output["status"] == "CHARGED"
    assert saga.charges("ORDER-003") == 1
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert claim["status"] == "COMPLETED"
    assert claim["chargeId"] == result.output["chargeId"]


def test_duplicate_execution_succeeds_saying_so_with_the_holders_status(saga: Saga) -> None:
    saga.driver.wait(saga.driver.start(order(), name="first"))

    result = saga.driver.wait(saga.driver.start(order(), name="second"))

    assert result.status == "SUCCEEDED"
    assert result.path == ["Claim Order", "Duplicate Suppressed"]
    assert result.outcome == "DUPLICATE"
    assert result.holder_status == "COMPLETED"
    assert saga.charges("ORDER-003") == 1


def test_decline_releases_the_claim_and_fails_as_payment_declined(saga: Saga) -> None:
    result = saga.driver.wait(
        saga.driver.start(order("ORDER-DECLINED", paymentMethod="pm_card_chargeDeclined"), name="declined")
    )

    assert result.status == "FAILED"
    assert result.error == "PaymentDeclined"
    assert result.path == [
        "Claim Order",
        "Charge Payment",
        "Release Claim",
        "Why Released?",
        "Payment Declined",
    ]
    claim = saga.driver.claim("ORDER-DECLINED")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "DECLINED")
    assert saga.charges("ORDER-DECLINED") == 0


def test_same_order_id_with_another_amount_is_a_conflict_and_is_not_charged(saga: Saga) -> None:
    saga.driver.wait(saga.driver.start(order(), name="original"))

    result = saga.driver.wait(saga.driver.start(order(amount=99900), name="conflicting"))

    assert result.status == "FAILED"
    assert result.error == "OrderConflict"
    assert result.path == ["Claim Order", "Publish Conflict", "Order Conflict"]
    assert [c.amount for c in saga.provider.charges_for("ORDER-003")] == [15000]


def test_lost_response_is_retried_with_the_same_key_and_charges_once(saga: Saga) -> None:
    # The charge lands, then its response is lost (500): the retry replays the saved result.
    saga.provider.inject("fail_after_apply", order_id="ORDER-003")

    result = saga.driver.wait(saga.driver.start(order(), name="lost-response"))

    assert result.outcome == "CHARGED"
    assert result.output["chargeId"] == saga.provider.charges_for("ORDER-003")[0].charge_id  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1
    assert saga.invocations("ChargePaymentFunction") == 2


def test_unknown_charge_outcome_after_retries_keeps_the_claim_for_reconciliation(saga: Saga) -> None:
    # The charge lands but Stripe answers 500, and saves that 500 for the key: every retry replays it.
    saga.provider.inject("fail_after_apply_replayed", order_id="ORDER-003")

    result = saga.driver.wait(saga.driver.start(order(), name="unknown"))

    assert result.status == "FAILED"
    assert result.error == "NeedsReconciliation"
    assert result.path[-3:] == ["Charge Payment", "Publish Reconciliation", "Needs Reconciliation"]
    assert saga.invocations("ChargePaymentFunction") == 6  # 1 + 5 retries on PaymentOutcomeUnknown
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1  # the money moved once, and the claim says "ask"


def test_mark_complete_exhausted_needs_reconciliation_and_keeps_the_claim(saga: Saga) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100))

    result = saga.driver.wait(saga.driver.start(order(), name="complete-fails"))

    assert result.error == "NeedsReconciliation"
    assert result.path[-3:] == ["Mark Complete", "Publish Reconciliation", "Needs Reconciliation"]
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1


def test_release_exhausted_fails_and_leaves_the_claim_to_its_lease(saga: Saga) -> None:
    saga.faults.add(Fault("ReleaseClaimFunction", "start", "die", times=100))

    result = saga.driver.wait(
        saga.driver.start(order("ORDER-D", paymentMethod="pm_card_chargeDeclined"), name="release-fails")
    )

    assert result.error == "ReleaseFailed"
    assert result.path[-3:] == ["Release Claim", "Why Released?", "Release Failed"]
    assert saga.driver.claim("ORDER-D")["status"] == "CLAIMED"  # type: ignore[index]
    assert saga.charges("ORDER-D") == 0


def test_claim_that_keeps_failing_is_released_and_nothing_is_charged(saga: Saga) -> None:
    # Every attempt dies right after its write landed: the claim exists and is this execution's.
    saga.faults.add(Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", "die", times=100))

    result = saga.driver.wait(saga.driver.start(order(), name="claim-fails"))

    assert result.error == "ClaimFailed"
    assert result.path == ["Claim Order", "Release Claim", "Why Released?", "Claim Failed"]
    claim = saga.driver.claim("ORDER-003")
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "NOT_CHARGED")  # type: ignore[index]
    assert saga.charges("ORDER-003") == 0


def test_failure_before_the_provider_is_called_releases_the_claim(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, "PAYMENT_API_KEY", "not-a-valid-key")  # the provider answers 401
    handler_runtime.reset()

    result = saga.driver.wait(saga.driver.start(order(), name="not-attempted"))

    assert result.error == "ChargeNotAttempted"
    assert result.path[-3:] == ["Release Claim", "Why Released?", "Charge Not Attempted"]
    assert saga.driver.claim("ORDER-003")["releaseReason"] == "NOT_CHARGED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 0


def test_retry_waits_follow_the_asl_backoff(saga: Saga) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "start", "die", times=2))

    result = saga.driver.wait(saga.driver.start(order(), name="backoff"))

    assert result.outcome == "CHARGED"
    # States.ALL retrier: IntervalSeconds 1, BackoffRate 2, JitterStrategy FULL -> waits in [0,1], [0,2].
    assert len(saga.hooks.retry_waits) == 2
    assert 0 <= saga.hooks.retry_waits[0] <= 1
    assert 0 <= saga.hooks.retry_waits[1] <= 2


def test_failure_before_the_provider_on_a_retry_is_not_proof_and_keeps_the_claim(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first request landed and the Lambda died; every retry is rejected at the door (401).

    Stripe checks the API key before the idempotency key, so a 401 on a retry says nothing about
    the first request: releasing here would let the next delivery charge the customer again.
    """
    keys = iter([LOCAL_API_KEY] + ["rotated-and-invalid"] * 10)
    monkeypatch.setattr(
        charge_payment, "provider", lambda: StripeProvider(next(keys), api_base=saga.provider.url)
    )
    saga.faults.add(Fault("ChargePaymentFunction", "after:provider.charge", "die"))

    result = saga.driver.wait(saga.driver.start(order(), name="rotated"))

    assert result.error == "NeedsReconciliation"
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1
