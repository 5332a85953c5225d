"""Stripe's webhooks through the local stack: the real ASL, the real handlers (the receiver invoked as a
function URL invokes it, the consumer polled from the webhook queue with its role), the Stripe
emulator's own PaymentIntents, signatures by the real ``stripe`` SDK. No sweeper runs in these tests:
the webhook alone resolves the claim an execution could not."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

import boto3

from payment_saga import charging
from saga_local.aws.stack import REGION
from saga_local.runtime.faults import Fault
from tests.helpers import Saga, deliver_webhook, order, webhook_event_source
from tests.statemachine.settlement_support import before_the_retry

if TYPE_CHECKING:
    import pytest


def finals(saga: Saga, order_id: str) -> list[str]:
    saga.driver.relay()
    log = saga.driver.outcome_log
    assert log is not None
    return [e.detail_type for e in log.collect() if e.order_id == order_id and e.final]


def test_a_charge_whose_mark_complete_never_answered_is_completed_by_its_webhook_without_the_sweeper(
    saga: Saga,
) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100))
    result = saga.driver.wait(saga.driver.start(order(), name="lost-answer"))
    assert result.error == "NeedsReconciliation"
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]

    deliver_webhook(saga, "ORDER-003", "succeeded")

    (landed,) = saga.provider.charges_for("ORDER-003")
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", landed.charge_id)
    assert finals(saga, "ORDER-003") == ["OrderCharged"]
    duplicate = saga.driver.wait(saga.driver.start(order(), name="duplicate"))
    assert duplicate.outcome == "DUPLICATE"
    assert saga.charges("ORDER-003") == 1


def test_a_decline_whose_release_never_ran_is_released_by_its_failed_webhook(saga: Saga) -> None:
    declined = order("ORDER-D", paymentMethod="pm_card_chargeDeclined")
    saga.faults.add(Fault("ReleaseClaimFunction", "start", "die", times=100))
    result = saga.driver.wait(saga.driver.start(declined, name="release-fails"))
    assert result.error == "ReleaseFailed"

    deliver_webhook(saga, "ORDER-D", "payment_failed")

    claim = saga.driver.claim("ORDER-D")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "DECLINED")
    assert finals(saga, "ORDER-D") == ["OrderDeclined"]
    again = saga.driver.wait(saga.driver.start(declined, name="redelivered"))
    assert again.outcome == "DUPLICATE"  # the declined payment attempt never reaches the provider again
    assert saga.charges("ORDER-D") == 0


def test_a_webhook_that_completes_the_claim_before_the_charges_retry_ends_the_order_charged(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The charge lands and its answer is lost; Stripe's webhook beats the step's retry. The retry finds
    the claim completed with its own PaymentIntent: charged once, and no reconciliation to page."""
    saga.faults.add(Fault("ChargePaymentFunction", "after:provider.charge", "die", times=1))
    delivered: list[str] = []

    def webhook_first(order_id: str, _token: str) -> None:
        delivered.append(order_id)
        # Stripe, the receiver and the consumer are not this invocation: another thread, as on AWS.
        stripe_side = threading.Thread(target=deliver_webhook, args=(saga, order_id, "succeeded"))
        stripe_side.start()
        stripe_side.join()

    before_the_retry(saga, monkeypatch, webhook_first)
    result = saga.driver.wait(saga.driver.start(order(), name="webhook-first"))

    assert delivered == ["ORDER-003"]
    assert result.outcome == "CHARGED", result
    assert result.path == ["Claim Order", "Charge Payment", "Mark Complete"]
    (landed,) = saga.provider.charges_for("ORDER-003")
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", landed.charge_id)
    assert finals(saga, "ORDER-003") == ["OrderCharged"]


def test_a_live_mode_event_signed_for_a_test_stack_completes_nothing(saga: Saga) -> None:
    """The stack's key is a test key (PaymentApiMode=test): a live event, however well signed (the live
    endpoint's secret copied into the test stack's), is no proof about its orders."""
    saga.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100))
    saga.driver.wait(saga.driver.start(order(), name="live-event"))

    deliver_webhook(saga, "ORDER-003", "succeeded", livemode=True)

    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert claim["status"] == "CLAIMED"
    assert "OrderCharged" not in finals(saga, "ORDER-003")
    deliver_webhook(saga, "ORDER-003", "succeeded")  # the test-mode event: completes it
    assert saga.driver.claim("ORDER-003")["status"] == "COMPLETED"  # type: ignore[index]


def test_a_webhook_that_settles_the_order_during_the_charges_last_try_ends_it_charged_without_a_page(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first create lands and its answer is lost; every retry meets Stripe refusing (429). During the
    last try, while its request is in flight, Stripe's webhook completes the claim: the step reads the
    claim after the unknown outcome, Stripe confirms the charge, and the order ends charged, not paged."""
    saga.provider.inject("fail_after_apply", order_id="ORDER-003")
    real = charging.charge
    delivered: list[int] = []

    def webhook_during_the_last_try(step: charging.ChargeTry, **kwargs: Any) -> Any:
        provider = kwargs.pop("provider")
        if step.retry_count == 1:  # from here on Stripe answers 429, before the key could replay
            saga.provider.inject("rate_limit", order_id="ORDER-003", times=20)
        if step.retry_count < 5:  # PaymentOutcomeUnknown's retrier: MaxAttempts 5
            return real(step, provider=provider, **kwargs)

        class SettledMeanwhile:
            def charge(self, order: Any, **charge_kwargs: Any) -> Any:
                delivered.append(step.retry_count)
                stripe_side = threading.Thread(
                    target=deliver_webhook, args=(saga, order.order_id, "succeeded")
                )
                stripe_side.start()
                stripe_side.join()
                return provider().charge(order, **charge_kwargs)  # Stripe still refuses it: unknown

            def follow(self, order: Any, **follow_kwargs: Any) -> Any:
                return provider().follow(order, **follow_kwargs)

        return real(step, provider=SettledMeanwhile, **kwargs)

    monkeypatch.setattr(charging, "charge", webhook_during_the_last_try)
    result = saga.driver.wait(saga.driver.start(order(), name="webhook-last-try"))

    assert delivered == [5]
    assert result.outcome == "CHARGED", result
    assert result.path == ["Claim Order", "Charge Payment", "Mark Complete"]
    (landed,) = saga.provider.charges_for("ORDER-003")
    assert result.output["chargeId"] == landed.charge_id  # type: ignore[index]
    assert finals(saga, "ORDER-003") == ["OrderCharged"]  # and no OrderNeedsReconciliation


def test_a_succeeded_event_planted_on_the_queue_completes_nothing_and_the_order_is_charged_once(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first charge request never reaches Stripe (a 500 before it applies); before the retry,
    someone who can send to the webhook queue plants a whole "succeeded" event for the order, with its
    amount and attempt and a PaymentIntent id Stripe never issued. Believed, it would complete the
    claim and the retry would hand that PaymentIntent on: charged, with no money taken. The consumer
    reads Stripe instead, which has no such PaymentIntent: the retry charges, once."""
    saga.provider.inject("fail_before_apply", order_id="ORDER-003")
    message = order()
    forged = {
        "id": "evt_forged",
        "type": "payment_intent.succeeded",
        "created": 1,
        "livemode": False,
        "data": {
            "object": {
                "id": "pi_NeverIssuedByStripe",
                "object": "payment_intent",
                "status": "succeeded",
                "amount": message["amount"],
                "currency": str(message["currency"]).lower(),
                "metadata": {"orderId": message["orderId"], "attempt": "1"},
            }
        },
    }
    planted: list[str] = []

    def plant_before_the_retry(step: charging.ChargeTry, **kwargs: Any) -> Any:
        if step.retry_count == 1 and not planted:
            planted.append(step.order.order_id)
            with saga.runtime.outside_invocation():
                boto3.client("sqs", region_name=REGION).send_message(
                    QueueUrl=saga.stack.resolver.refs["WebhookQueue"], MessageBody=json.dumps(forged)
                )
                assert webhook_event_source(saga).poll_once() == 1
        return real(step, **kwargs)

    real = charging.charge
    monkeypatch.setattr(charging, "charge", plant_before_the_retry)
    result = saga.driver.wait(saga.driver.start(message, name="forged-succeeded"))

    assert planted == ["ORDER-003"]
    assert result.outcome == "CHARGED", result
    (landed,) = saga.provider.charges_for("ORDER-003")  # the money moved, once
    assert result.output["chargeId"] == landed.charge_id  # type: ignore[index]
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert claim["chargeId"] == landed.charge_id  # not the planted PaymentIntent
