"""Counted, not estimated: what one order costs on the happy path and on a duplicate.

These numbers are the product's cost model (``saga cost``); the test pins them so a change to the
state machine or the handlers that adds a transition, an invocation or a write is a visible diff.
"""

from __future__ import annotations

import json
from collections import Counter

from saga_local.harness.usage import dynamodb_calls, execution_usage
from tests.helpers import Saga, order


def run_alone(saga: Saga, name: str) -> tuple[dict[str, float], dict[str, int]]:
    before_records = len(saga.runtime.records)
    before_calls = Counter(saga.runtime.calls)
    arn = saga.driver.start(order(), name=name)
    result = saga.driver.wait(arn)
    usage = execution_usage(saga.driver, saga.runtime, arn, before=before_records)
    writes, reads = dynamodb_calls(saga.runtime.calls - before_calls)
    counts = {
        "state_transitions": usage.state_transitions,
        "lambda_invocations": usage.lambda_invocations,
        "dynamodb_writes": writes,
        "dynamodb_reads": reads,
    }
    print(f"{name}: {result.outcome} {json.dumps(counts)}")
    return {"ms": usage.lambda_ms}, counts


def test_happy_path_and_duplicate_cost_exactly_this_much(saga: Saga) -> None:
    _, happy = run_alone(saga, "happy")
    _, duplicate = run_alone(saga, "duplicate")

    # Reads: Charge Payment re-checks, strongly consistent, that it still holds the attempt.
    # Claim Order, Charge Payment, Mark Complete: the floor for three Lambda steps.
    assert happy == {
        "state_transitions": 3,
        "lambda_invocations": 3,
        "dynamodb_writes": 2,
        "dynamodb_reads": 1,
    }
    # Claim Order (its conditional write fails, and still costs a write unit), caught into the
    # Succeed state Duplicate Suppressed.
    assert duplicate == {
        "state_transitions": 2,
        "lambda_invocations": 1,
        "dynamodb_writes": 1,
        "dynamodb_reads": 0,
    }
