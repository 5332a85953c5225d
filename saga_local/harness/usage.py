"""Count what one order costs to run: state transitions, invocations, Lambda time, DynamoDB writes.

Counted from a real run (the execution's history and the runtime's records), not estimated, so
``saga cost`` and the figures in the README move when the state machine or the handlers change.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from saga_local.stack.driver import Driver

DYNAMODB_WRITES = {"UpdateItem", "PutItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
DYNAMODB_READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}


@dataclass(frozen=True)
class ExecutionUsage:
    """What one execution used. Step Functions bills every state entered and every retry."""

    state_transitions: int
    retries: int
    lambda_invocations: int
    lambda_ms: float
    dynamodb_writes: int
    dynamodb_reads: int


def transitions(history: list[dict[str, Any]]) -> tuple[int, int]:
    """(state transitions, retries) from an execution history."""
    entered = sum(1 for e in history if e["type"].endswith("StateEntered"))
    scheduled = sum(1 for e in history if e["type"] in ("TaskScheduled", "LambdaFunctionScheduled"))
    tasks = sum(1 for e in history if e["type"] == "TaskStateEntered")
    retries = scheduled - tasks
    return entered + retries, retries


def execution_usage(driver: Driver, runtime: Any, arn: str, *, before: int = 0) -> ExecutionUsage:
    """Usage of one execution, whose invocations are ``runtime.records[before:]`` (run it alone)."""
    history = driver.history(arn)
    total, retries = transitions(history)
    records = [r for r in runtime.records[before:] if r.function != "StartExecutionFunction"]
    return ExecutionUsage(
        state_transitions=total,
        retries=retries,
        lambda_invocations=len(records),
        lambda_ms=sum(r.duration_ms for r in records),
        dynamodb_writes=0,
        dynamodb_reads=0,
    )


def dynamodb_calls(calls: Counter[tuple[str, str]], *, exclude: set[str] | None = None) -> tuple[int, int]:
    """(writes, reads) among counted calls ``(function, "dynamodb.<Op>")``."""
    writes = reads = 0
    for (function, call), n in calls.items():
        if exclude and function in exclude:
            continue
        service, _, operation = call.partition(".")
        if service != "dynamodb":
            continue
        if operation in DYNAMODB_WRITES:
            writes += n
        elif operation in DYNAMODB_READS:
            reads += n
    return writes, reads


def measure_order_usage(stack: Any, body: dict[str, Any], *, sqs_requests_per_message: float = 1.2) -> Any:
    """Send one message through a running local stack and count what it used, as a ``cost.Usage``.

    Counted: state transitions (from the history), every Lambda invocation including the start
    function's, their durations rounded up to the millisecond times the function's memory, and the
    DynamoDB calls (a write is one request unit for a claim row under 1 KB; a failed conditional
    write costs one too). SQS requests per message are 1 send plus a receive and a delete per batch
    of 10 (1.2); the local batch holds one message, so that figure is not counted here.
    """
    import math

    from saga_local.harness.cost import Usage

    runtime, driver = stack.runtime, stack.driver
    before_records, before_calls = len(runtime.records), Counter(runtime.calls)
    before_arns = set(driver.execution_arns())
    driver.send(body)
    driver.pump()
    (arn,) = set(driver.execution_arns()) - before_arns
    total, _ = transitions(driver.history(arn))
    records = runtime.records[before_records:]
    memory = {spec.logical_id: spec.memory_mb for spec, _ in stack.stack.functions.values()}
    gb_seconds = sum(memory[r.function] / 1024 * math.ceil(r.duration_ms) / 1000 for r in records)
    writes, reads = dynamodb_calls(runtime.calls - before_calls)
    return Usage(
        state_transitions=total,
        lambda_invocations=len(records),
        lambda_gb_seconds=gb_seconds,
        dynamodb_wru=writes,
        dynamodb_rru=reads,
        sqs_requests=sqs_requests_per_message,
    )
