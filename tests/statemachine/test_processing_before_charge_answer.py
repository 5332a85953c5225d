"""A bank debit whose Charge Payment never learns its answer, while Stripe's webhook says it is processing.

The real ASL, the real handlers, the Stripe emulator (``processing`` forced on the confirm, and the
first create applied with a 500 saved under its idempotency key, which Stripe replays to every retry
for 24 hours: the step's own answer never arrives), Stripe's
``payment_intent.processing`` webhook signed by the real ``stripe`` SDK and applied by the real
consumer on another thread, and the outcome relay on the claims stream. The webhook records the wait
on the open claim; the retry's own answer is still unknown, and the claim says what it would have
been: the execution ends in Awaiting Settlement, not in Needs Reconciliation, and nothing pages.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from tests.helpers import Saga, deliver_webhook, order
from tests.statemachine.settlement_support import before_the_retry, published

if TYPE_CHECKING:
    import pytest

    from saga_local.stack.driver import ExecutionResult

AWAITING_PATH = ["Claim Order", "Charge Payment", "Await Settlement", "Awaiting Settlement"]


def debit_whose_answer_never_arrives(saga: Saga, order_id: str) -> ExecutionResult:
    """The debit's create lands at the provider (``processing``) and a 500 is saved as its answer."""
    saga.provider.force_outcome("processing", order_id=order_id, times=1)
    saga.provider.inject("fail_after_apply_replayed", order_id=order_id)
    return saga.driver.wait(saga.driver.start(order(order_id), name=f"{order_id}-debit"))


def stripe_says_processing(saga: Saga, order_id: str, _token: str) -> None:
    """Stripe's processing webhook lands, on another thread, as the consumer runs."""
    stripe_side = threading.Thread(target=deliver_webhook, args=(saga, order_id, "processing"))
    stripe_side.start()
    stripe_side.join()


def test_a_debit_whose_answer_never_arrives_ends_awaiting_settlement_as_the_webhook_said(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = before_the_retry(saga, monkeypatch, lambda o, t: stripe_says_processing(saga, o, t))

    result = debit_whose_answer_never_arrives(saga, "ORDER-SEPA")

    assert ran == ["ORDER-SEPA"]
    assert result.status == "SUCCEEDED", result
    assert result.path == AWAITING_PATH  # not Needs Reconciliation: nothing pages
    (intent,) = saga.provider.payment_intents("ORDER-SEPA")  # no second PaymentIntent
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert (claim["status"], claim["settlementIntentId"]) == ("CLAIMED", intent["id"])
    assert published(saga, "ORDER-SEPA") == ["OrderPaymentProcessing"]  # no OrderNeedsReconciliation
    assert saga.charges("ORDER-SEPA") == 0  # the bank has not answered yet


def test_a_charge_whose_answer_never_arrives_and_no_webhook_said_anything_still_needs_reconciliation(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim alone decides, and only a wait the webhook recorded on it: without one, the outcome
    stays unknown and the order goes to reconciliation, as before."""

    result = debit_whose_answer_never_arrives(saga, "ORDER-SEPA")

    assert result.error == "NeedsReconciliation", result
    assert "Await Settlement" not in result.path
    assert published(saga, "ORDER-SEPA") == ["OrderNeedsReconciliation"]
