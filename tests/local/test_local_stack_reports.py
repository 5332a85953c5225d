"""The local stack under load, and what `saga simulate` reports of it.

* a report counts only its own run, on a stack that ran other orders before;
* a batch slower than the (compressed) visibility timeout is not delivered twice, nor dead-lettered;
* every lost order comes with its reason;
* retired executions leave moto, keep their names and still count in the report;
* a lost order names the execution to trace, and the run records it for ``saga trace``.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest
from moto.dynamodb.models.dynamo_type import Item
from moto.stepfunctions.models import StateMachine
from moto.stepfunctions.parser import utils as engine_utils

from saga_local import output
from saga_local.harness import simulate
from saga_local.runtime.faults import START_FUNCTION, Fault, FaultPlan
from saga_local.stack import archive
from saga_local.stack.embedded import EmbeddedStack
from saga_local.stripe_emulator import SAVED_PAYMENT_METHOD

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    with (
        output.handlers_quiet(),
        EmbeddedStack(runtime="inprocess", visibility_timeout=30, quiet=True) as running,
    ):
        yield running


def test_a_report_counts_only_its_own_run(stack: EmbeddedStack) -> None:
    with output.handlers_quiet():
        first = simulate.run(stack, orders=12, copies=2, concurrency=2, seed=1, prefix="OWN1")
        second = simulate.run(stack, orders=20, copies=1, concurrency=2, seed=2, prefix="OWN2")
    assert first.executions == 24
    assert first.duplicates_suppressed == {"start": 0, "claim": 12}
    # Fresh orders delivered once: 20 executions, nothing stopped, whatever ran on the stack before.
    assert second.executions == 20
    assert second.duplicates_suppressed == {"start": 0, "claim": 0}
    assert second.execution_outcomes == {"SUCCEEDED": 20}
    assert second.charges == second.charged == 20
    assert sum(m.billed for m in second.money) == sum(o["amount"] for o in simulate.make_orders(20, seed=2))
    assert second.promise_kept


def test_retired_executions_leave_moto_keep_their_names_and_still_count(stack: EmbeddedStack) -> None:
    tracked = (len(StateMachine.instances_tracked), len(Item.instances_tracked))  # type: ignore[attr-defined]
    with output.handlers_quiet():
        report = simulate.run(stack, orders=6, copies=1, concurrency=2, seed=3, prefix="RET")
    driver = stack.driver
    listed_before = len(driver.execution_arns())
    assert driver.retire_executions(closed_for=0) >= 6
    assert len(driver.execution_arns()) < listed_before
    name = next(e.name for e in driver.executions(order_ids=["ORDER-RET-000000"]))
    # Step Functions refuses a closed execution's name: a redelivery is still stopped at the start.
    with pytest.raises(driver.sfn.exceptions.ExecutionAlreadyExists):
        driver.sfn.start_execution(stateMachineArn=stack.stack.state_machine_arn, name=name, input="{}")
    # Nothing else keeps a retired execution alive: not moto's model registry (its state machine
    # copy, its items' versions), not the engine's list of the threads it started.
    assert len(StateMachine.instances_tracked) == tracked[0]  # type: ignore[attr-defined]
    assert len(Item.instances_tracked) == tracked[1]  # type: ignore[attr-defined]
    assert all(thread.is_alive() for thread in engine_utils.TMP_THREADS)
    orders = simulate.make_orders(6, seed=3, prefix="RET")
    again = simulate.measure(stack, orders, deliveries=6, wall_seconds=1.0)
    assert again.executions == report.executions == 6
    assert again.execution_outcomes == {"SUCCEEDED": 6}
    assert again.charged == 6


def test_every_lost_order_comes_with_its_reason(stack: EmbeddedStack) -> None:
    # An order never sent, and one whose delivery the start function always fails until SQS
    # dead-letters it (maxReceiveCount 5).
    never = {**simulate.make_orders(1, seed=4, prefix="NEVER")[0]}
    doomed = simulate.make_orders(1, seed=5, prefix="DOOM")[0]
    stack.faults.add(Fault(START_FUNCTION, "start", "die", times=10))  # only its delivery runs meanwhile
    sqs = stack.driver.sqs
    sqs.set_queue_attributes(QueueUrl=stack.stack.queue_url, Attributes={"VisibilityTimeout": "1"})
    stack.driver.event_source.visibility_timeout = 1
    try:
        stack.driver.send(doomed)
        with output.handlers_quiet():
            simulate.settle(stack, pollers=1, timeout=60)
    finally:
        sqs.set_queue_attributes(QueueUrl=stack.stack.queue_url, Attributes={"VisibilityTimeout": "30"})
        stack.driver.event_source.visibility_timeout = None
        stack.faults.clear()
    report = simulate.measure(stack, [never, doomed], deliveries=2, wall_seconds=1.0)
    assert report.lost_orders == 2
    assert report.dead_lettered == 1
    assert report.lost_reasons == {
        "no claim; no execution: its delivery never started one": 1,
        "no claim; dead-lettered: every receive failed, redriven by the queue": 1,
    }
    assert all("lost (no claim;" in problem for problem in report.problems)
    assert "lost, by reason" in simulate.render(report)


def test_a_batch_slower_than_the_visibility_timeout_is_delivered_once() -> None:
    # Every start invocation takes 2.5 s against a 1 s visibility timeout, with a second poller
    # waiting: the batch must not come back while it runs (received again, it would be
    # dead-lettered after 5 receives on a busier machine).
    slow = FaultPlan([Fault(START_FUNCTION, "start", "delay", times=100, seconds=2.5)])
    with (
        output.handlers_quiet(),
        EmbeddedStack(runtime="inprocess", visibility_timeout=1, faults=slow, quiet=True) as running,
    ):
        orders = simulate.make_orders(3, seed=6, prefix="SLOW")
        for order in orders:
            running.driver.send(order)
        simulate.settle(running, pollers=2, timeout=60)
        stats = running.driver.event_source.stats
        report = simulate.measure(running, orders, deliveries=3, wall_seconds=1.0)
    assert stats.messages == 3, f"received {stats.messages} times: a batch came back while it ran"
    assert stats.extended >= 1
    assert report.charged == 3
    assert report.dead_lettered == 0
    assert report.promise_kept
    assert json.loads(json.dumps(report.to_dict()))["lost_reasons"] == {}


def test_a_lost_order_names_the_execution_to_trace_and_the_run_records_it(tmp_path: Path) -> None:
    # A saved card sent without its customer: refused by the provider every time, never charged,
    # re-queued up to its bound: the order is not charged, so the report counts it lost. Its own
    # stack: an in-process stack started after the module's points the functions elsewhere.
    lost = {**simulate.make_orders(1, seed=8, prefix="TRACE")[0], "paymentMethod": SAVED_PAYMENT_METHOD}
    environment = dict(os.environ)
    try:
        with (
            output.handlers_quiet(),
            EmbeddedStack(runtime="inprocess", visibility_timeout=30, quiet=True) as running,
        ):
            running.driver.send(lost)
            simulate.settle(running, pollers=1, timeout=180)
            report = simulate.measure(running, [lost], deliveries=1, wall_seconds=1.0)
            recorded = simulate.record_unhappy(running, directory=tmp_path)
    finally:
        os.environ.clear()
        os.environ.update(environment)

    (problem,) = report.problems
    name = problem.split("saga trace ")[1].split()[0]
    assert name.startswith(lost["orderId"] + "-")
    assert "(ChargeNotAttempted)" in problem
    assert name in recorded.by_error["ChargeNotAttempted"]
    assert f"e.g. saga trace {recorded.by_error['ChargeNotAttempted'][0]}" in "\n".join(
        simulate.render_recorded(recorded)
    )
    kept = archive.load(name, tmp_path)  # what `saga trace NAME` reads once the stack is gone
    assert kept is not None
    assert kept.description["status"] == "FAILED"
