"""Retriers and catchers: which one applies, how often, how long the engine waits between attempts.

Source: AWS Step Functions Developer Guide, "Handling errors in Step Functions workflows",
https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html
The waits are the ones the engine asked for (``EngineHooks.retry_waits``): nothing sleeps here.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.engine import FAIL, SUCCEED, Engine, failing, machine, task


def test_only_the_first_matching_retrier_applies(engine: Engine) -> None:
    """ "Step Functions scans through the retriers in the order listed in the array. When the error
    name appears in the value of a retrier's ErrorEquals field, the state machine makes retry
    attempts as defined in the Retry field." """
    function = engine.function("flaky", failing("Boom", "Boom", then={"ok": True}))
    retry = [
        {"ErrorEquals": ["Boom"], "IntervalSeconds": 7, "MaxAttempts": 2, "BackoffRate": 1},
        {"ErrorEquals": ["States.ALL"], "IntervalSeconds": 1, "MaxAttempts": 5},
    ]
    run = engine.run(machine("Call", Call=task(function, Retry=retry)))

    assert run.status == "SUCCEEDED"
    assert engine.hooks.retry_waits == [7, 7]


def test_max_attempts_counts_retries_and_then_normal_error_handling_resumes(engine: Engine) -> None:
    """MaxAttempts: "A positive integer that represents the maximum number of retry attempts (3 by
    default). If the error recurs more times than specified, retries cease and normal error
    handling resumes." """
    function = engine.function("broken", failing("Boom"))
    retry = [{"ErrorEquals": ["Boom"], "MaxAttempts": 2}]
    run = engine.run(
        machine(
            "Call",
            Call=task(function, Retry=retry, Catch=[{"ErrorEquals": ["Boom"], "Next": "Caught"}]),
            Caught=FAIL,
        )
    )

    assert (run.status, run.error) == ("FAILED", "Caught")
    assert len(engine.stand_ins.events["broken"]) == 3  # the call and two retries


def test_max_attempts_defaults_to_three(engine: Engine) -> None:
    """MaxAttempts: "[...] the maximum number of retry attempts (3 by default)." """
    function = engine.function("broken", failing("Boom"))
    run = engine.run(machine("Call", Call=task(function, Retry=[{"ErrorEquals": ["Boom"]}])))

    assert (run.status, run.error) == ("FAILED", "Boom")
    assert len(engine.stand_ins.events["broken"]) == 4


def test_max_attempts_zero_never_retries_and_stops_the_scan(engine: Engine) -> None:
    """MaxAttempts: "A value of 0 specifies that the error is never retried." The saga's first
    retrier of each Task lists its definitive errors with 0, ahead of a States.ALL retrier."""
    function = engine.function("declined", failing("Declined"))
    retry = [
        {"ErrorEquals": ["Declined"], "MaxAttempts": 0},
        {"ErrorEquals": ["States.ALL"], "MaxAttempts": 3},
    ]
    run = engine.run(machine("Call", Call=task(function, Retry=retry)))

    assert (run.status, run.error) == ("FAILED", "Declined")
    assert len(engine.stand_ins.events["declined"]) == 1
    assert engine.hooks.retry_waits == []


def test_a_retriers_attempts_count_across_errors_it_matches(engine: Engine) -> None:
    """Example 4: "A retrier's parameters apply across all visits to the retrier in the context of
    a single-state execution." ErrorA, ErrorB, ErrorC, ErrorB: "The first two errors match the first
    retrier and cause waits of one and two seconds. The third error matches the second retrier and
    causes a wait of five seconds. The fourth error also matches the first retrier. However, it
    already reached its maximum of two retries (MaxAttempts) for that particular error. Therefore,
    that retrier fails and the execution redirects the workflow to the Z state through the Catch
    field." """
    function = engine.function("x", failing("ErrorA", "ErrorB", "ErrorC", "ErrorB", then={"never": True}))
    retry = [
        {"ErrorEquals": ["ErrorA", "ErrorB"], "IntervalSeconds": 1, "BackoffRate": 2.0, "MaxAttempts": 2},
        {"ErrorEquals": ["ErrorC"], "IntervalSeconds": 5},
    ]
    catch = [{"ErrorEquals": ["States.ALL"], "Next": "Z"}]
    run = engine.run(machine("X", X=task(function, Retry=retry, Catch=catch), Z=SUCCEED))

    assert run.entered() == ["X", "Z"]
    assert engine.hooks.retry_waits == [1, 2, 5]


def test_backoff_multiplies_the_interval_up_to_max_delay_seconds(engine: Engine) -> None:
    """Example 2 (JitterStrategy left out): "The following example makes three retry attempts and
    limits the wait time resulting from BackoffRate at 5 seconds. The first retry takes place after
    waiting for three seconds. The second and third retry attempts take place after waiting for five
    seconds after the preceding retry attempt because of the maximum wait time limit set by
    MaxDelaySeconds." """
    function = engine.function("broken", failing("Boom"))
    retry = [
        {
            "ErrorEquals": ["Boom"],
            "IntervalSeconds": 3,
            "MaxAttempts": 3,
            "BackoffRate": 2,
            "MaxDelaySeconds": 5,
        }
    ]
    engine.run(machine("Call", Call=task(function, Retry=retry)))

    assert engine.hooks.retry_waits == [3, 5, 5]


@pytest.mark.parametrize("seed", range(5))
def test_full_jitter_draws_each_wait_between_zero_and_the_capped_backoff(engine: Engine, seed: int) -> None:
    """JitterStrategy: "If you set JitterStrategy as FULL, the first retry interval is randomized
    between 0 and 2 seconds, the second retry interval is randomized between 0 and 4 seconds, and
    the third retry interval is randomized between 0 and 8 seconds." (MaxAttempts 3, IntervalSeconds
    2, BackoffRate 2), each interval first capped by MaxDelaySeconds, here 5 seconds, the way the
    saga's retriers are written."""
    function = engine.function("broken", failing("Boom"))
    retry = [
        {
            "ErrorEquals": ["Boom"],
            "IntervalSeconds": 2,
            "MaxAttempts": 3,
            "BackoffRate": 2,
            "MaxDelaySeconds": 5,
            "JitterStrategy": "FULL",
        }
    ]
    engine.run(machine("Call", Call=task(function, Retry=retry)))

    waits = engine.hooks.retry_waits
    assert len(waits) == 3
    assert all(0 <= wait <= bound for wait, bound in zip(waits, [2, 4, 5], strict=True)), waits


def test_only_the_first_matching_catcher_applies(engine: Engine) -> None:
    """ "Step Functions scans through the catchers in the order listed in the array. When the error
    name appears in the value of a catcher's ErrorEquals field, the state machine transitions to the
    state named in the Next field." """
    function = engine.function("broken", failing("Boom"))
    catch = [
        {"ErrorEquals": ["Other"], "Next": "Other"},
        {"ErrorEquals": ["Boom"], "Next": "First"},
        {"ErrorEquals": ["States.ALL"], "Next": "Other"},
    ]
    run = engine.run(machine("Call", Call=task(function, Catch=catch), First=SUCCEED, Other=FAIL))

    assert run.entered() == ["Call", "First"]


def test_retriers_run_before_the_catcher(engine: Engine) -> None:
    """ "When a state has both Retry and Catch fields, Step Functions uses any appropriate retriers
    first. If the retry policy fails to resolve the error, Step Functions applies the matching
    catcher transition." """
    function = engine.function("flaky", failing("Boom", then={"ok": True}))
    run = engine.run(
        machine(
            "Call",
            Call=task(
                function,
                Retry=[{"ErrorEquals": ["Boom"]}],
                Catch=[{"ErrorEquals": ["Boom"], "Next": "Caught"}],
            ),
            Caught=FAIL,
        )
    )

    assert run.status == "SUCCEEDED"


def test_a_catchers_result_path_adds_the_error_output_to_the_input(engine: Engine) -> None:
    """ "the catcher adds the error output to the input as a field named error-info if there isn't
    already a field with this name in the input." The saga's catchers put it at $.error, and its
    Choice states read $.error.Error."""
    function = engine.function("broken", failing("Boom"))
    catch = [{"ErrorEquals": ["Boom"], "ResultPath": "$.error", "Next": "Caught"}]
    run = engine.run(machine("Call", Call=task(function, Catch=catch), Caught=SUCCEED), {"order": "o-1"})

    output: dict[str, Any] = run.output
    assert output["order"] == "o-1"
    assert output["error"]["Error"] == "Boom"
    assert "Cause" in output["error"]


def test_a_catcher_without_result_path_replaces_the_input_with_the_error_output(engine: Engine) -> None:
    """ "For JSONPath workflows, if you don't specify the ResultPath field, it defaults to $, which
    selects and overwrites the entire input." """
    function = engine.function("broken", failing("Boom"))
    run = engine.run(
        machine(
            "Call", Call=task(function, Catch=[{"ErrorEquals": ["Boom"], "Next": "Caught"}]), Caught=SUCCEED
        ),
        {"order": "o-1"},
    )

    assert set(run.output) == {"Error", "Cause"}
