"""A Lambda that dies right after one of its writes, then is retried by the state machine.

Every write the saga makes is followed by a death here, in every way Lambda can die. The promise:
still exactly one charge, and the order neither stuck nor skipped.
"""

from __future__ import annotations

import pytest

from saga_local.runtime.faults import Fault
from tests.helpers import Saga, order

WRITES = [
    ("ClaimOrderFunction", "after:dynamodb.UpdateItem"),
    ("ChargePaymentFunction", "after:provider.charge"),
    ("MarkCompleteFunction", "after:dynamodb.UpdateItem"),
    ("ChargePaymentFunction", "end"),  # handler returned, its response was lost
    ("ClaimOrderFunction", "end"),
    ("MarkCompleteFunction", "end"),
]


@pytest.mark.parametrize("kind", ["die", "timeout", "oom"])
@pytest.mark.parametrize(("function", "point"), WRITES)
def test_death_after_a_write_is_retried_and_charges_exactly_once(
    saga: Saga, function: str, point: str, kind: str
) -> None:
    saga.faults.add(Fault(function, point, kind))  # type: ignore[arg-type]

    result = saga.driver.wait(saga.driver.start(order(), name="crash"))

    assert saga.faults.fired(), "the fault must have fired"
    assert result.outcome == "CHARGED", result
    assert saga.charges("ORDER-003") == 1
    assert saga.driver.claim("ORDER-003")["status"] == "COMPLETED"  # type: ignore[index]
    assert saga.invocations(function) == 2


def test_death_after_the_release_write_still_ends_declined(saga: Saga) -> None:
    saga.faults.add(Fault("ReleaseClaimFunction", "after:dynamodb.UpdateItem", "die"))

    result = saga.driver.wait(saga.driver.start(order(paymentMethod="pm_card_chargeDeclined"), name="x"))

    assert result.error == "PaymentDeclined"
    assert saga.driver.claim("ORDER-003")["status"] == "RELEASED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 0


def test_death_after_start_execution_redelivers_and_reattaches(saga: Saga) -> None:
    saga.faults.add(Fault("StartExecutionFunction", "after:sfn.StartExecution", "die"))
    saga.driver.send(order())

    saga.driver.pump()

    assert saga.faults.fired()
    assert len(saga.driver.execution_arns()) == 1  # the redelivery found the same execution name
    assert saga.charges("ORDER-003") == 1


def test_throttled_lambda_is_retried_as_a_service_error(saga: Saga) -> None:
    saga.faults.add(Fault("ChargePaymentFunction", "start", "throttle", times=2))

    result = saga.driver.wait(saga.driver.start(order(), name="throttled"))

    assert result.outcome == "CHARGED"
    history = saga.driver.history(result.arn)
    errors = [e["taskFailedEventDetails"]["error"] for e in history if e["type"] == "TaskFailed"]
    assert errors == ["Lambda.TooManyRequestsException"] * 2
    assert saga.charges("ORDER-003") == 1


def test_without_provider_dedupe_a_charge_retried_after_death_would_double_charge(saga: Saga) -> None:
    """Why invariant 5 matters: the claim cannot help within one execution, the idempotency key does."""
    saga.provider.dedupe = False
    saga.faults.add(Fault("ChargePaymentFunction", "after:provider.charge", "die"))

    saga.driver.wait(saga.driver.start(order(), name="no-dedupe"))

    assert saga.charges("ORDER-003") == 2  # this is the failure the idempotency key exists to prevent
