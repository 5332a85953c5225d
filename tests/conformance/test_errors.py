"""The errors no Retry nor Catch of ``States.ALL`` handles, and what a Task's timeout discards.

Source: AWS Step Functions Developer Guide, "Handling errors in Step Functions workflows",
https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html
"""

from __future__ import annotations

import time
from typing import Any

from tests.conformance.engine import FAIL, SUCCEED, Engine, machine, task

CATCH_ALL = [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}]
RETRY_ALL = [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1, "MaxAttempts": 3}]
#: Over the payload quota (256 KiB, as UTF-8).
LARGE = "x" * (256 * 1024 + 1)


def test_a_runtime_error_is_neither_retried_nor_caught_by_states_all(engine: Engine) -> None:
    """ "A States.Runtime error isn't retriable, and will always cause the execution to fail. A retry
    or catch on States.ALL won't catch States.Runtime errors."

    A ResultSelector reading a field the Lambda's answer lacks is such an error."""
    answer = engine.function("answer", lambda _: {"present": 1})
    run = engine.run(
        machine(
            "Read",
            Read=task(
                answer, ResultSelector={"absent.$": "$.Payload.absent"}, Retry=RETRY_ALL, Catch=CATCH_ALL
            ),
            Caught=FAIL,
        )
    )

    assert (run.status, run.error) == ("FAILED", "States.Runtime")
    assert "Caught" not in run.entered()
    assert len(engine.stand_ins.events["answer"]) == 1  # not retried
    assert engine.hooks.retry_waits == []


def test_a_runtime_error_is_not_caught_even_where_named(engine: Engine) -> None:
    """ "A States.Runtime error isn't retriable, and will always cause the execution to fail." """
    answer = engine.function("answer", lambda _: {})
    named = [{"ErrorEquals": ["States.Runtime"], "Next": "Caught"}]
    run = engine.run(
        machine("Read", Read=task(answer, ResultSelector={"a.$": "$.Payload.a"}, Catch=named), Caught=FAIL)
    )

    assert (run.status, run.error) == ("FAILED", "States.Runtime")


def test_an_answer_over_the_payload_quota_fails_the_execution_through_states_all(engine: Engine) -> None:
    """States.DataLimitExceeded: "A terminal error which cannot be caught by the States.ALL error
    type. Reported due to the following conditions: Output of a connector is larger than payload
    size quota." (and "The States.ALL error type [...] cannot catch the States.DataLimitExceeded
    terminal error")."""
    large = engine.function("large", lambda _: {"blob": LARGE})
    run = engine.run(machine("Large", Large=task(large, Retry=RETRY_ALL, Catch=CATCH_ALL), Caught=FAIL))

    assert (run.status, run.error) == ("FAILED", "States.DataLimitExceeded")
    assert len(engine.stand_ins.events["large"]) == 1


def test_a_catcher_that_names_the_data_limit_catches_it(engine: Engine) -> None:
    """ "A terminal error which cannot be caught by the States.ALL error type": by its own name it can."""
    large = engine.function("large", lambda _: {"blob": LARGE})
    named = [{"ErrorEquals": ["States.DataLimitExceeded"], "ResultPath": None, "Next": "Caught"}]
    run = engine.run(machine("Large", Large=task(large, Catch=named), Caught=SUCCEED))

    assert run.status == "SUCCEEDED"
    assert run.entered() == ["Large", "Caught"]


def test_a_task_input_over_the_payload_quota_after_parameters_fails_before_the_call(engine: Engine) -> None:
    """States.DataLimitExceeded: "After Parameters processing, the input of a state is larger than
    the payload size quota." (and not caught by States.ALL): the Lambda is never called."""
    function = engine.function("echo", lambda _: {"ok": True})
    half = "x" * (150 * 1024)
    parameters = {"FunctionName": function, "Payload": {"a.$": "$.half", "b.$": "$.half"}}
    run = engine.run(
        machine("Call", Call=task(function, Parameters=parameters, Catch=CATCH_ALL), Caught=FAIL),
        {"half": half},
    )

    assert (run.status, run.error) == ("FAILED", "States.DataLimitExceeded")
    assert "echo" not in engine.stand_ins.events


def test_a_state_output_over_the_payload_quota_fails_the_execution(engine: Engine) -> None:
    """States.DataLimitExceeded: "Output of a state is larger than payload size quota." """
    run = engine.run(
        machine(
            "Grow",
            Grow={"Type": "Pass", "Result": {"blob": LARGE}, "Next": "Done"},
            Done=SUCCEED,
        )
    )

    assert (run.status, run.error) == ("FAILED", "States.DataLimitExceeded")


def test_a_timed_out_task_records_no_success_from_its_late_answer(engine: Engine) -> None:
    """States.Timeout: "Reported when a Task state runs longer than the TimeoutSeconds value": the
    state fails with it and the execution moves on, so the abandoned call's answer is no part of it.

    (Page: https://docs.aws.amazon.com/step-functions/latest/dg/state-task.html, "TimeoutSeconds":
    "If the task runs longer than the specified seconds, this state fails with a States.Timeout
    error name.")"""

    def slow(_: dict[str, Any]) -> Any:
        time.sleep(1.4)
        return {"late": True}

    function = engine.function("slow", slow)
    timeouts = [{"ErrorEquals": ["States.Timeout"], "ResultPath": "$.error", "Next": "Timed Out"}]
    run = engine.run(
        machine("Slow", Slow=task(function, TimeoutSeconds=1, Catch=timeouts), Timed_Out=SUCCEED)
    )
    assert run.status == "SUCCEEDED"
    assert run.output["error"]["Error"] == "States.Timeout"
    assert engine.stand_ins.answered.wait(5)
    time.sleep(0.2)  # the late answer is back: give the engine the time to (not) record it

    history = engine.history(run.arn)
    assert [e["type"] for e in history if e["type"] in {"TaskSucceeded", "TaskTimedOut"}] == ["TaskTimedOut"]
