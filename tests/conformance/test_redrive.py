"""What a redrive restarts, and the counters it resets or raises.

moto has no RedriveExecution: these run the adapter's (``saga_local.aws.moto_adapter.redrive_execution``).
Sources: AWS Step Functions API Reference, "RedriveExecution"
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_RedriveExecution.html), and the
Developer Guide's "Handling errors in Step Functions workflows"
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.engine import Engine, LambdaError, machine, task

RETRY_ONCE = [{"ErrorEquals": ["Boom"], "IntervalSeconds": 1, "MaxAttempts": 1}]


def two_steps(engine: Engine, second_fails: int) -> dict[str, Any]:
    """First (answers {"first": n}) then Second, which fails ``second_fails`` times, then answers
    the RedriveCount and RetryCount it was given."""
    first = engine.function("first", lambda event: {"first": len(engine.stand_ins.events["first"])})
    remaining = [second_fails]

    def second(event: dict[str, Any]) -> Any:
        if remaining[0] > 0:
            remaining[0] -= 1
            raise LambdaError("Boom")
        return event

    second_arn = engine.function("second", second)
    payload = {
        "input.$": "$",
        "redriveCount.$": "$$.Execution.RedriveCount",
        "retryCount.$": "$$.State.RetryCount",
    }
    return machine(
        "First",
        First=task(first, ResultSelector={"first.$": "$.Payload.first"}, ResultPath="$.first", Next="Second"),
        Second=task(
            second_arn,
            Parameters={"FunctionName": second_arn, "Payload": payload},
            ResultSelector={"seen.$": "$.Payload"},
            Retry=RETRY_ONCE,
        ),
    )


def test_a_redrive_continues_from_the_unsuccessful_step_with_its_input_and_reruns_no_successful_one(
    engine: Engine,
) -> None:
    """ "When you redrive an execution, it continues the failed execution from the unsuccessful step
    and uses the same input. Step Functions preserves the results and execution history of the
    successful steps, and doesn't rerun these steps when you redrive an execution. Redriven
    executions use the same state machine definition and execution ARN as the original execution
    attempt." """
    definition = two_steps(engine, second_fails=2)
    failed = engine.run(definition, {"order": "o-1"})
    assert (failed.status, failed.error) == ("FAILED", "Boom")
    second_input = engine.stand_ins.events["second"][0]["input"]

    redriven = engine.redrive(failed)

    assert redriven.status == "SUCCEEDED", redriven
    assert redriven.arn == failed.arn
    assert len(engine.stand_ins.events["first"]) == 1  # not rerun
    assert (
        engine.stand_ins.events["second"][-1]["input"]
        == second_input
        == {"order": "o-1", "first": {"first": 1}}
    )
    assert redriven.output["seen"]["input"] == second_input
    # The first run's history is kept, the redrive follows it.
    assert redriven.history[: len(failed.history)] == failed.history
    assert "ExecutionRedriven" in [event["type"] for event in redriven.history[len(failed.history) :]]


def test_a_redrive_raises_redrive_count_and_resets_the_retriers(engine: Engine) -> None:
    """Execution.RedriveCount counts the redrives. And: "If your redriven execution reruns a Task
    workflow state [...] for which you have defined retries, the retry attempt count for these
    states is reset to 0 to allow for the maximum number of attempts on redrive." Second used its one
    retry in the first run; redriven, it fails once more and its retrier still retries it."""
    definition = two_steps(engine, second_fails=3)
    failed = engine.run(definition)
    assert failed.status == "FAILED"

    redriven = engine.redrive(failed)

    assert redriven.status == "SUCCEEDED", redriven
    last = engine.stand_ins.events["second"][-1]
    assert (last["redriveCount"], last["retryCount"]) == (1, 1)
    assert [event["redriveCount"] for event in engine.stand_ins.events["second"]] == [0, 0, 1, 1]


def test_only_an_execution_that_did_not_succeed_can_be_redriven(engine: Engine) -> None:
    """RedriveExecution "Restarts unsuccessful executions of Standard workflows [...]. These include
    failed, aborted, or timed out executions." """
    succeeded = engine.run(two_steps(engine, second_fails=0))
    assert succeeded.status == "SUCCEEDED"

    with pytest.raises(ValueError, match="not failed, aborted or timed out"):
        engine.redrive(succeeded)
