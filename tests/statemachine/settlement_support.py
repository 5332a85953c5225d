"""What the state machine's settlement tests share: Stripe settling a debit through its webhook, a hook
run just before a retried Charge Payment reads its claim, and the outcome events the relay published."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from payment_saga import charging
from tests.helpers import Saga, deliver_webhook

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest

#: What the emulator's PaymentIntent becomes, and the webhook Stripe then sends about it.
SETTLEMENTS = {"succeeded": "succeeded", "requires_payment_method": "payment_failed"}


def stripe_settles(saga: Saga, order_id: str, status: str) -> None:
    """The bank answers: the PaymentIntent moves to ``status`` and Stripe's webhook is delivered and
    applied, on another thread."""
    (intent,) = saga.provider.payment_intents(order_id)
    saga.provider.set_status(intent["id"], status)
    stripe_side = threading.Thread(target=deliver_webhook, args=(saga, order_id, SETTLEMENTS[status]))
    stripe_side.start()
    stripe_side.join()


def published(saga: Saga, order_id: str) -> list[str]:
    saga.driver.relay()
    log = saga.driver.outcome_log
    assert log is not None
    return [e.detail_type for e in log.collect() if e.order_id == order_id]


def before_the_retry(
    saga: Saga, monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[str, str], object]
) -> list[str]:
    """Run ``meanwhile(order_id, token)`` once, just before a retried Charge Payment reads its claim:
    the first request has created the PaymentIntent by then."""
    real = charging.charge
    ran: list[str] = []

    def settle_first(step: charging.ChargeTry, **kwargs: Any) -> Any:
        order_id = step.order.order_id
        if step.retry_count >= 1 and saga.provider.payment_intents(order_id) and not ran:
            ran.append(order_id)
            meanwhile(order_id, step.token)
        return real(step, **kwargs)

    monkeypatch.setattr(charging, "charge", settle_first)
    return ran
