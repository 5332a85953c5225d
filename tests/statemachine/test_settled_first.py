"""A bank debit whose webhook settles the claim before the execution's own Await Settlement write lands.

The real ASL, the real handlers, the Stripe emulator forcing ``processing`` on the confirm, Stripe's
webhook signed by the real ``stripe`` SDK and applied by the real consumer on another thread (as on
AWS: Stripe is not the execution's invocation), and the outcome relay on the claims stream. The
settlement write fails its condition on a claim the webhook closed for this very attempt and
PaymentIntent: the execution ends in Settled Before Await, with no page and no second outcome.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers import runtime as handler_runtime
from tests.helpers import Saga, order
from tests.statemachine.settlement_support import published, stripe_settles

if TYPE_CHECKING:
    import pytest

    from saga_local.stack.driver import ExecutionResult
    from tests.network import Network

SETTLED_PATH = ["Claim Order", "Charge Payment", "Await Settlement", "Settled Before Await"]


def debit(saga: Saga, order_id: str) -> ExecutionResult:
    saga.provider.force_outcome("processing", order_id=order_id, times=1)
    return saga.driver.wait(saga.driver.start(order(order_id), name=f"{order_id}-debit"))


def webhook_before_the_await(saga: Saga, monkeypatch: pytest.MonkeyPatch, status: str) -> list[str]:
    """Stripe's webhook settles the claim just before Await Settlement's write is sent."""
    store = handler_runtime.claims_store()
    real = store.await_settlement
    delivered: list[str] = []

    def webhook_first(order_id: str, **kwargs: Any) -> Any:
        if not delivered:
            delivered.append(order_id)
            stripe_settles(saga, order_id, status)
        return real(order_id, **kwargs)

    monkeypatch.setattr(store, "await_settlement", webhook_first)
    return delivered


def test_a_debit_whose_succeeded_webhook_beats_the_await_ends_settled_charged_once_without_a_page(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    delivered = webhook_before_the_await(saga, monkeypatch, "succeeded")

    result = debit(saga, "ORDER-SEPA")

    assert delivered == ["ORDER-SEPA"]
    assert result.status == "SUCCEEDED", result
    assert result.path == SETTLED_PATH  # not Needs Reconciliation: nothing pages
    assert result.outcome == "SETTLED"
    (intent,) = saga.provider.payment_intents("ORDER-SEPA")
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", intent["id"])
    assert published(saga, "ORDER-SEPA") == ["OrderCharged"]  # one outcome, the webhook's
    assert saga.charges("ORDER-SEPA") == 1


def test_a_debit_whose_failed_webhook_beats_the_await_ends_settled_declined_without_a_page(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    webhook_before_the_await(saga, monkeypatch, "requires_payment_method")

    result = debit(saga, "ORDER-SEPA")

    assert result.path == SETTLED_PATH, result
    claim = saga.driver.claim("ORDER-SEPA")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "DECLINED")
    assert published(saga, "ORDER-SEPA") == ["OrderDeclined"]
    again = saga.driver.wait(saga.driver.start(order("ORDER-SEPA"), name="ORDER-SEPA-redelivered"))
    assert again.outcome == "DUPLICATE"  # the declined payment attempt never reaches the provider again
    assert saga.charges("ORDER-SEPA") == 0


def test_an_await_whose_answer_was_lost_while_the_webhook_completed_it_ends_settled(
    saga: Saga, network: Network
) -> None:
    """The execution's write lands, its answer is lost, the webhook completes the claim, and botocore
    sends the write again: it fails on the completed row, which is this attempt's own settlement."""
    network.then_normal()  # Claim Order's write
    network.then_answer_lost(meanwhile=lambda: stripe_settles(saga, "ORDER-SEPA", "succeeded"))

    result = debit(saga, "ORDER-SEPA")

    assert result.path == SETTLED_PATH, result
    assert published(saga, "ORDER-SEPA") == ["OrderPaymentProcessing", "OrderCharged"]
    assert saga.charges("ORDER-SEPA") == 1


def test_an_await_that_meets_a_claim_settled_by_another_payment_intent_still_needs_reconciliation(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only this attempt's own PaymentIntent settles it: a claim completed with another charge is two
    charges, and still pages."""
    store = handler_runtime.claims_store()
    real = store.await_settlement

    def another_intent(order_id: str, **kwargs: Any) -> Any:
        stripe_settles(saga, order_id, "succeeded")
        return real(order_id, **{**kwargs, "payment_intent_id": "pi_not_this_attempts"})

    monkeypatch.setattr(store, "await_settlement", another_intent)

    result = debit(saga, "ORDER-SEPA")

    assert result.error == "NeedsReconciliation", result
    assert "Settled Before Await" not in result.path
