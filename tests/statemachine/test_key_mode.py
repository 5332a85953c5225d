"""A stack whose Stripe key is of the other mode than its PaymentApiMode, through the local stack: the
real ASL, the real handlers, the outcome relay and its re-queues, the Stripe emulator.

Its webhook consumer would refuse every event about the charges (their ``livemode`` is the key's), so
the Charge step refuses to call Stripe at all: nothing is sent, the claim is released with proof as
after the provider refusing the key (``ChargeNotAttempted``, which pages), and the re-queued copies end
the same way until the re-queue bound, where the order needs attention instead of looping.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from handlers import runtime as handler_runtime
from saga_local.aws import moto_adapter
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import ENDPOINTS
from tests.helpers import Saga, order
from tests.statemachine.observability_support import lines as log_lines

if TYPE_CHECKING:
    import pytest

    from tests.statemachine.observability_support import Captured


def test_a_test_key_on_a_live_stack_sends_nothing_and_the_order_needs_attention_at_the_bound(
    saga: Saga, monkeypatch: pytest.MonkeyPatch, captured: Captured
) -> None:
    # The local stack's key is a test key (sk_test_...); the stack is deployed as live.
    monkeypatch.setenv("PAYMENT_API_MODE", "live")
    handler_runtime.reset()

    first = saga.driver.wait(saga.driver.start(order(), name="wrong-mode"))

    assert first.error == "ChargeNotAttempted", first
    assert first.path[:3] == ["Claim Order", "Charge Payment", "Release Claim"]
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "NOT_CHARGED")
    lines = log_lines(captured.text())
    refusals = [line for line in lines if line.get("event") == "payment_key_mode_mismatch"]
    assert [(r["level"], r["orderId"], r["keyMode"], r["stackMode"]) for r in refusals] == [
        ("ERROR", "ORDER-003", "test", "live")
    ]
    assert sum(line.get("PaymentKeyModeMismatch", [0])[0] for line in lines) == 1  # the metric
    assert not any(LOCAL_API_KEY in json.dumps(line) for line in lines)  # never the key

    # The relay re-queues the order proven never charged; each copy is refused the same way, until
    # the attempt bound: then it needs attention, and nothing ever reached the provider.
    saga.driver.pump(timeout=180, busy=lambda: moto_adapter.deliver_delayed_messages() > 0)

    assert sum(saga.provider.request_count(endpoint) for endpoint in ENDPOINTS) == 0
    assert saga.provider.payment_intents() == []
    final = saga.driver.claim("ORDER-003")
    assert final is not None
    assert (final["status"], final["releaseReason"], int(final["attempt"])) == ("RELEASED", "NOT_CHARGED", 5)
    log = saga.driver.outcome_log
    assert log is not None
    kinds = [event.detail_type for event in log.events("ORDER-003")]
    assert kinds.count("OrderRequeued") == 4
    assert kinds[-1] == "OrderNeedsAttention"
    assert all(
        r.outcome == "ChargeNotAttempted" for r in map(saga.driver.result, saga.driver.execution_arns())
    )
