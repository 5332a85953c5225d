"""What a path that finds nothing does, how a Choice tests a field's presence, and the context
object's counters.

Sources: AWS Step Functions Developer Guide, "Handling errors in Step Functions workflows"
(https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html), "Choice workflow
state" (https://docs.aws.amazon.com/step-functions/latest/dg/state-choice.html) and "Accessing
execution data from the Context object" (https://docs.aws.amazon.com/step-functions/latest/dg/input-output-contextobject.html).

Not pinned: a Choice comparison (not IsPresent) whose Variable finds nothing. The local engine takes
it as no match and goes on; no AWS sentence found says what AWS does, so the saga never relies on it
(each comparison on a field that may be absent is guarded by IsPresent).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.engine import FAIL, SUCCEED, Engine, failing, machine, task

CATCH_ALL = [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}]


def test_an_output_path_that_finds_nothing_fails_the_execution_uncaught(engine: Engine) -> None:
    """States.Runtime: "Often these are caused by errors at runtime, such as attempting to apply
    InputPath or OutputPath on a null JSON payload. [...] A retry or catch on States.ALL won't catch
    States.Runtime errors." """
    function = engine.function("answer", lambda _: {"present": 1})
    run = engine.run(
        machine("Call", Call=task(function, OutputPath="$.Payload.absent", Catch=CATCH_ALL), Caught=FAIL)
    )

    assert (run.status, run.error) == ("FAILED", "States.Runtime")


def test_a_result_selector_over_a_present_field_keeps_only_what_it_selects(engine: Engine) -> None:
    """The saga's Tasks read a Lambda's answer through ResultSelector (``$.Payload.<field>``): with
    every field present the effective result is exactly the selection."""
    function = engine.function("answer", lambda _: {"chargeId": "pi_1", "extra": True})
    run = engine.run(
        machine(
            "Call",
            Call=task(function, ResultSelector={"chargeId.$": "$.Payload.chargeId"}, ResultPath="$.charge"),
        ),
        {"order": "o-1"},
    )

    assert run.output == {"order": "o-1", "charge": {"chargeId": "pi_1"}}


def is_present(present: bool, then: str) -> dict[str, Any]:
    return {"Variable": "$.requeue", "IsPresent": present, "Next": then}


@pytest.mark.parametrize(
    ("state_input", "expected"), [({}, "Absent"), ({"requeue": {"count": 1}}, "Present")]
)
def test_is_present_tells_a_missing_field_from_a_present_one(
    engine: Engine, state_input: dict[str, Any], expected: str
) -> None:
    """Choice, data-test expression "IsPresent": it matches when the field the Variable names is in
    the input, "IsPresent": false when it is not; no error either way (the saga's "Requeue Allowed?"
    counts a first re-queue this way)."""
    choice = {"Type": "Choice", "Choices": [is_present(False, "Absent"), is_present(True, "Present")]}
    run = engine.run(machine("Test", Test=choice, Absent=SUCCEED, Present=SUCCEED), state_input)

    assert run.entered() == ["Test", expected]


def test_a_choice_comparing_a_missing_field_fails_the_execution(engine: Engine) -> None:
    """A comparison (not IsPresent) whose Variable finds nothing fails the state with States.Runtime,
    "Invalid path '$.error.Error': The choice state's condition path references an invalid value."
    (AWS's own cause, which the separately written aws-local-stepfunctions reproduces; no guide
    sentence states it). States.Runtime "will always cause the execution to fail"."""
    choice = {
        "Type": "Choice",
        "Choices": [{"Variable": "$.error.Error", "StringEquals": "PaymentDeclined", "Next": "Declined"}],
        "Default": "Other",
    }
    run = engine.run(machine("Test", Test=choice, Declined=SUCCEED, Other=SUCCEED), {})

    assert (run.status, run.error) == ("FAILED", "States.Runtime")
    assert "condition path references an invalid value" in (run.cause or "")


def test_a_guarded_comparison_reads_nothing_when_the_guard_fails(engine: Engine) -> None:
    """ "And" with "IsPresent": true first: the saga's "Why Released?" reads $.error.Error only when
    $.error is there; without it the Default applies."""
    guarded = {
        "And": [
            {"Variable": "$.error", "IsPresent": True},
            {"Variable": "$.error.Error", "StringEquals": "PaymentDeclined"},
        ],
        "Next": "Declined",
    }
    choice = {"Type": "Choice", "Choices": [guarded], "Default": "Other"}
    run = engine.run(machine("Test", Test=choice, Declined=SUCCEED, Other=SUCCEED), {})

    assert run.entered() == ["Test", "Other"]


def test_state_retry_count_is_the_number_of_retries_so_far(engine: Engine) -> None:
    """Context object, State.RetryCount: the number of retries of the current state, 0 on its first
    attempt (the saga's Charge step sends it as ``retryCount``)."""
    function = engine.function("flaky", failing("Boom", "Boom", then={"ok": True}))
    parameters = {"FunctionName": function, "Payload": {"retryCount.$": "$$.State.RetryCount"}}
    run = engine.run(
        machine("Call", Call=task(function, Parameters=parameters, Retry=[{"ErrorEquals": ["Boom"]}]))
    )

    assert run.status == "SUCCEEDED"
    assert [event["retryCount"] for event in engine.stand_ins.events["flaky"]] == [0, 1, 2]


def test_execution_redrive_count_is_zero_on_an_execution_never_redriven(engine: Engine) -> None:
    """Context object, Execution.RedriveCount: "The number of times the execution was redriven"
    (0 until a redrive): the saga's Charge and Release steps read it, and a path to a field the
    context object lacks would fail the state with States.Runtime."""
    function = engine.function("charge", lambda event: {"seen": event["redriveCount"]})
    parameters = {"FunctionName": function, "Payload": {"redriveCount.$": "$$.Execution.RedriveCount"}}
    run = engine.run(
        machine(
            "Call", Call=task(function, Parameters=parameters, ResultSelector={"seen.$": "$.Payload.seen"})
        )
    )

    assert run.status == "SUCCEEDED", run
    assert run.output == {"seen": 0}
