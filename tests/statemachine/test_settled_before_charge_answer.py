"""A bank debit whose Charge Payment answer is lost, and whose webhook settles the claim before the
step's retry runs.

The real ASL, the real handlers, the Stripe emulator (``processing`` forced on the confirm, then the
first create's answer lost after the provider applied it: ``PaymentOutcomeUnknown``, retried), Stripe's
webhook signed by the real ``stripe`` SDK and applied by the real consumer on another thread, and the
outcome relay on the claims stream. The retry's re-check finds the claim closed for this very attempt:
released declined, the execution ends in Settled Before Charge Answer; completed, Mark Complete finds
its own completion. Neither charges again, pages, or publishes a second outcome.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from handlers import runtime as handler_runtime
from payment_saga.claims import ReleaseReason
from tests.helpers import Saga, order
from tests.statemachine.settlement_support import before_the_retry, published, stripe_settles

if TYPE_CHECKING:
    import pytest

    from saga_local.stack.driver import ExecutionResult

SETTLED_PATH = ["Claim Order", "Charge Payment", "Settled Before Charge Answer"]


def debit_whose_answer_is_lost(saga: Saga, order_id: str) -> ExecutionResult:
    """The debit's create lands at the provider (``processing``) and its answer is lost: a 500."""
    saga.provider.force_outcome("processing", order_id=order_id, times=1)
    saga.provider.inject("fail_after_apply", order_id=order_id)
    return saga.driver.wait(saga.driver.start(order(order_id), name=f"{order_id}-debit"))


def test_a_debit_whose_failed_webhook_beats_the_charges_retry_ends_settled_declined_without_a_page(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = before_the_retry(
        saga, monkeypatch, lambda order_id, _: stripe_settles(saga, order_id, "requires_payment_method")
    )

    result = debit_whose_answer_is_lost(saga, "ORDER-SEPA")

    assert ran == ["ORDER-SEPA"]
    assert result.status == "SUCCEEDED", result
    assert result.path == SETTLED_PATH  # not Needs Reconciliation: nothing pages
    assert result.outcome == "SETTLED"
    assert len(saga.provider.payment_intents("ORDER-SEPA")) == 1  # the retry created no second one
    assert saga.invocations("ChargePaymentFunction") == 2
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "DECLINED")
    assert published(saga, "ORDER-SEPA") == ["OrderDeclined"]  # one outcome, the webhook's
    again = saga.driver.wait(saga.driver.start(order("ORDER-SEPA"), name="ORDER-SEPA-redelivered"))
    assert again.outcome == "DUPLICATE"  # the declined payment attempt never reaches the provider again
    assert saga.charges("ORDER-SEPA") == 0


def test_a_debit_whose_succeeded_webhook_beats_the_charges_retry_ends_charged_once_without_a_page(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    before_the_retry(saga, monkeypatch, lambda order_id, _: stripe_settles(saga, order_id, "succeeded"))

    result = debit_whose_answer_is_lost(saga, "ORDER-SEPA")

    assert result.outcome == "CHARGED", result
    assert result.path == ["Claim Order", "Charge Payment", "Mark Complete"]
    (intent,) = saga.provider.payment_intents("ORDER-SEPA")
    assert result.output["chargeId"] == intent["id"]  # type: ignore[index]
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", intent["id"])
    assert published(saga, "ORDER-SEPA") == ["OrderCharged"]
    assert saga.charges("ORDER-SEPA") == 1


def test_a_retried_charge_that_meets_a_declined_release_naming_no_payment_intent_still_needs_reconciliation(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a release that names the attempt's failed PaymentIntent settles it: a declined release
    that names none proves nothing about the charge whose answer was lost, and still pages."""

    def release_naming_none(order_id: str, token: str) -> None:
        # Not this invocation's write (its role may not release): another thread, as the webhook's is.
        def release() -> None:
            handler_runtime.claims_store().release(
                order_id, token=token, reason=ReleaseReason.DECLINED, payment_attempt="initial"
            )

        elsewhere = threading.Thread(target=release)
        elsewhere.start()
        elsewhere.join()

    before_the_retry(saga, monkeypatch, release_naming_none)

    result = debit_whose_answer_is_lost(saga, "ORDER-SEPA")

    assert result.error == "NeedsReconciliation", result
    assert "Settled Before Charge Answer" not in result.path
    assert saga.driver.claim("ORDER-SEPA")["releaseReason"] == "DECLINED"  # type: ignore[index]
    assert len(saga.provider.payment_intents("ORDER-SEPA")) == 1
