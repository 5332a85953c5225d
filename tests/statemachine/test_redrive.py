"""A failed execution redriven, though the runbook says to send the order again instead: the saga's
steps rerun from the unsuccessful one (the adapter's RedriveExecution,
``saga_local.aws.moto_adapter.redrive_execution``), and the promise holds."""

from __future__ import annotations

import json

import pytest

from saga_local.aws.moto_adapter import redrive_execution
from saga_local.runtime.api import Invocation
from tests.helpers import Saga, order


def test_a_charge_step_failed_on_its_answer_and_redriven_follows_its_charge_and_completes(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Charge Payment answer lacks chargeId once: AWS fails the execution there (States.Runtime),
    # after the charge landed. The redrive reruns Charge Payment only, with RedriveCount 1: the
    # attempt's charge is followed, never created again (promise 11), and the claim completes with it.
    charge_function = saga.stack.function_name("ChargePaymentFunction")
    real_invoke = saga.runtime.invoke
    mangled: list[int] = []

    def invoke(name: str, payload: bytes) -> Invocation:
        answer = real_invoke(name, payload)
        if name == charge_function and not answer.function_error and not mangled:
            body = json.loads(answer.payload)
            del body["chargeId"]
            mangled.append(1)
            return Invocation(json.dumps(body).encode())
        return answer

    monkeypatch.setattr(saga.runtime, "invoke", invoke)
    arn = saga.driver.start(order(), name="redriven")
    failed = saga.driver.wait(arn)
    assert (failed.error, failed.path[-1]) == ("States.Runtime", "Charge Payment")
    (landed,) = saga.provider.charges_for("ORDER-003")
    creates = saga.provider.request_count("create")

    assert redrive_execution(arn) == 1
    redriven = saga.driver.wait(arn)

    assert redriven.outcome == "CHARGED", redriven
    assert redriven.path[: len(failed.path)] == failed.path
    assert redriven.path[len(failed.path) :] == ["Charge Payment", "Mark Complete"]
    assert saga.provider.request_count("create") == creates
    assert saga.charges("ORDER-003") == 1
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", landed.charge_id)
