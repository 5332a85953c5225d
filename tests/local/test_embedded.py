"""The embedded local stack end to end: moto's server, worker processes as Lambda, the SQS event source.

Worker processes die for real here (exit, hang past the timeout, exhaust their memory limit): the
state machine sees the error names Lambda gives, retries, and the stack itself survives.
"""

from __future__ import annotations

import gc
import json
import os
import urllib.request

import boto3
import pytest

from saga_local.aws.embedded import EmbeddedStack
from saga_local.runtime.faults import Fault, FaultPlan
from tests.helpers import order


@pytest.fixture(scope="module")
def workers() -> EmbeddedStack:
    faults = FaultPlan()
    with EmbeddedStack(runtime="workers", faults=faults, visibility_timeout=1, max_workers=2) as stack:
        yield stack


def failed_errors(stack: EmbeddedStack, arn: str) -> list[str]:
    return [
        e["taskFailedEventDetails"]["error"] for e in stack.driver.history(arn) if e["type"] == "TaskFailed"
    ]


def test_real_clients_reach_the_stack_over_http(workers: EmbeddedStack) -> None:
    sfn = boto3.client(
        "stepfunctions",
        endpoint_url=workers.endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    machines = sfn.list_state_machines()["stateMachines"]
    assert [m["stateMachineArn"] for m in machines] == [workers.stack.state_machine_arn]
    with urllib.request.urlopen(f"{workers.provider.url}/_emulator/charges", timeout=5) as response:  # noqa: S310
        assert response.status == 200


@pytest.mark.parametrize(
    ("kind", "error"),
    [("die", "Runtime.ExitError"), ("oom", "Runtime.OutOfMemory"), ("timeout", "Sandbox.Timedout")],
)
def test_a_worker_that_dies_after_its_write_is_reported_as_lambda_would_and_the_order_charges_once(
    workers: EmbeddedStack, kind: str, error: str
) -> None:
    order_id = f"ORDER-W-{kind}"
    workers.faults.add(Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", kind, order_id=order_id))  # type: ignore[arg-type]

    result = workers.driver.wait(workers.driver.start(order(order_id), name=f"worker-{kind}"), timeout=120)

    assert result.outcome == "CHARGED"
    assert failed_errors(workers, result.arn) == [error]
    assert len(workers.provider.charges_for(order_id)) == 1


def test_four_deliveries_through_sqs_charge_once(workers: EmbeddedStack) -> None:
    workers.driver.send(order("ORDER-W-SQS"), copies=4)

    workers.driver.pump(pollers=2, timeout=120)

    assert len(workers.provider.charges_for("ORDER-W-SQS")) == 1
    assert workers.driver.claim("ORDER-W-SQS")["status"] == "COMPLETED"  # type: ignore[index]


def test_a_message_that_keeps_failing_reaches_the_dead_letter_queue_after_max_receives(
    workers: EmbeddedStack,
) -> None:
    # The start function dies on every batch that carries it: SQS redelivers, then redrives it.
    body = json.dumps(order("ORDER-W-POISON"))
    workers.faults.add(Fault("StartExecutionFunction", "start", "die", times=5))
    workers.driver.send(body)

    workers.driver.pump(timeout=120)

    assert workers.driver.event_source.stats.invocation_errors >= 5
    dead = [m["Body"] for m in workers.driver.dead_letters()]
    assert body in dead
    assert workers.provider.charges_for("ORDER-W-POISON") == []


def test_a_running_stack_keeps_its_startup_objects_out_of_the_collectors_walks_and_gives_them_back() -> None:
    # Full collections over the ~400,000 objects alive at startup made an order cost 44.8 ms of
    # CPU instead of about 35; a process that runs many stacks (this test suite) must get them back
    # when each stops, or what they hold in cycles would never be freed.
    environment = dict(os.environ)
    try:
        with EmbeddedStack(runtime="inprocess"):
            assert gc.get_freeze_count() > 100_000
    finally:
        os.environ.clear()
        os.environ.update(environment)
    assert gc.get_freeze_count() == 0
