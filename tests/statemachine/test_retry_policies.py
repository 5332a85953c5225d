"""The state machine's Retry rules, executed: what is retried, what is not, and how far.

Throttling is the Lambda service saying "later", so it gets its own, longer retrier; a definitive
answer (a decline, a duplicate, a conflict, a claim lost to another execution) is final, and
retrying it only delays the outcome and pays for invocations that cannot change it. Each test is
the scenario that tells one rule of statemachine/payment_saga.asl.json from a plausible wrong one
(see ``scripts/mutants``); charges are counted at the Stripe emulator.
"""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from handlers import runtime as handler_runtime
from payment_saga.claims import ClaimsStore
from payment_saga.orders import order_from_message
from saga_local.aws.stack import REGION
from saga_local.runtime.faults import Fault
from tests.helpers import Saga, order
from tests.network import Network

#: More throttles in a row than the catch-all retrier (3 retries) absorbs, fewer than the Lambda one (6).
BURST = 5
LEASE = 900


def another_execution_takes_the_claim_over(saga: Saga) -> None:
    """Another execution takes the order's claim over, as it may once the lease ran out."""
    later = time.time() + LEASE + 1
    store = ClaimsStore(
        saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: later
    )
    # Called from inside a step's invocation: the other execution's write is not that step's call.
    with saga.runtime.outside_invocation():
        outcome = store.claim(order_from_message(order()), token="another-execution")
    assert outcome.result.value == "TAKEOVER"


@pytest.mark.parametrize("function", ["ClaimOrderFunction", "ChargePaymentFunction"])
def test_a_burst_of_throttling_is_waited_out_and_the_order_is_charged_once(saga: Saga, function: str) -> None:
    saga.faults.add(Fault(function, "start", "throttle", times=BURST))

    result = saga.driver.wait(saga.driver.start(order(), name="throttled"))

    assert result.outcome == "CHARGED", result
    assert sum(saga.faults.fired().values()) == BURST
    assert saga.charges("ORDER-003") == 1


def test_a_decline_is_final_and_the_customer_hears_of_it_without_retries(saga: Saga) -> None:
    result = saga.driver.wait(saga.driver.start(order(paymentMethod="pm_card_chargeDeclined"), name="d"))

    assert result.error == "PaymentDeclined", result
    assert saga.invocations("ChargePaymentFunction") == 1
    assert saga.charges("ORDER-003") == 0


@pytest.mark.parametrize(
    "second", [order(), order(amount=99900)], ids=["duplicate", "same-order-id-another-amount"]
)
def test_a_duplicate_or_a_conflict_is_final_at_the_first_claim_write(
    saga: Saga, second: dict[str, Any]
) -> None:
    first = saga.driver.wait(saga.driver.start(order(), name="first"))
    assert first.outcome == "CHARGED"

    result = saga.driver.wait(saga.driver.start(second, name="second"))

    assert result.outcome in ("DUPLICATE", "OrderConflict"), result
    assert saga.invocations("ClaimOrderFunction") == 2  # one each
    assert saga.charges("ORDER-003") == 1


def test_an_order_that_is_not_valid_is_not_retried(saga: Saga) -> None:
    """An execution started by hand (the console, a script) with a malformed order."""
    result = saga.driver.wait(saga.driver.start(order(amount=150.0), name="by-hand"))

    assert result.status == "FAILED", result
    assert saga.invocations("ClaimOrderFunction") == 1
    assert saga.driver.claim("ORDER-003") is None
    assert saga.charges("ORDER-003") == 0


def test_a_charge_step_that_lost_its_claim_is_final_and_charges_nothing(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is taken over between Claim Order and the charge's re-check (a step that started
    after its lease ran out): no retry can win it back, so the step is not retried."""
    store = handler_runtime.claims_store()
    real_get = store.get

    def taken_over_first(order_id: str) -> Any:
        another_execution_takes_the_claim_over(saga)
        return real_get(order_id)

    monkeypatch.setattr(store, "get", taken_over_first)

    result = saga.driver.wait(saga.driver.start(order(), name="outlived"))

    assert result.error == "NeedsReconciliation", result
    assert saga.invocations("ChargePaymentFunction") == 1
    assert saga.charges("ORDER-003") == 0


def test_a_completion_refused_because_the_claim_changed_hands_is_final(saga: Saga) -> None:
    """The money moved, then another execution took the claim over before Mark Complete: the
    completion can never succeed, so it goes to reconciliation at once (the charge is found there)."""
    store = handler_runtime.claims_store()
    real = store._client
    network = Network(real)
    network.then_normal().then_before(lambda: another_execution_takes_the_claim_over(saga))
    store._client = network  # type: ignore[assignment]
    try:
        result = saga.driver.wait(saga.driver.start(order(), name="complete-refused"))
    finally:
        store._client = real

    assert result.error == "NeedsReconciliation", result
    assert saga.invocations("MarkCompleteFunction") == 1
    assert saga.charges("ORDER-003") == 1
