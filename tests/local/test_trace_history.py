"""Folding an execution history into steps (``saga_local/trace/history.py``), without an engine.

The histories here are built in the shape ``GetExecutionHistory`` returns (ids, ``previousEventId``,
one ``...EventDetails`` per event, as recorded by real runs in tests/local/test_trace.py), to pin the
rules of the fold on cases a real run rarely produces: a timeout, a state entered twice, events read
out of order, two Catch rules into one state.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from saga_local.trace import load_definition, trace_steps
from saga_local.trace.history import execution_error, matches

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)

DEFINITION: dict[str, Any] = {
    "StartAt": "Claim Order",
    "States": {
        "Claim Order": {
            "Type": "Task",
            "Next": "Charge Payment",
            "Catch": [{"ErrorEquals": ["DuplicateOrder"], "Next": "Duplicate Suppressed"}],
        },
        "Duplicate Suppressed": {"Type": "Succeed"},
        "Charge Payment": {
            "Type": "Task",
            "Next": "Mark Complete",
            "Catch": [
                {"ErrorEquals": ["PaymentDeclined"], "Next": "Release Claim"},
                {"ErrorEquals": ["States.ALL"], "Next": "Release Claim"},
            ],
        },
        "Mark Complete": {"Type": "Task", "End": True},
        "Release Claim": {"Type": "Task", "Next": "Payment Declined"},
        "Payment Declined": {"Type": "Fail", "Error": "PaymentDeclined", "Cause": "the card was declined"},
    },
}


def _lower_first(kind: str) -> str:
    return kind[:1].lower() + kind[1:]


class History:
    """Events as the engine records them: each one's ``previousEventId`` is the event before it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.add("ExecutionStarted", {"input": "{}"}, previous=0)

    def add(self, kind: str, details: dict[str, Any] | None = None, *, previous: int | None = None) -> int:
        number = len(self.events) + 1
        event: dict[str, Any] = {
            "type": kind,
            "id": number,
            "previousEventId": number - 1 if previous is None else previous,
            "timestamp": T0 + timedelta(milliseconds=100 * number),
        }
        if details is not None:
            # StateEntered/Exited events share one details key, whatever the state's type.
            key = "stateEnteredEventDetails" if kind.endswith("StateEntered") else None
            key = "stateExitedEventDetails" if kind.endswith("StateExited") else key
            event[key or _lower_first(kind) + "EventDetails"] = details
        self.events.append(event)
        return number

    def enter(self, name: str, kind: str = "Task") -> None:
        self.add(f"{kind}StateEntered", {"name": name, "input": json.dumps({"state": name})})

    def exit(self, name: str, kind: str = "Task") -> None:
        self.add(f"{kind}StateExited", {"name": name, "output": json.dumps({"done": name})})

    def attempt(self, error: str | None = None, cause: str = "") -> None:
        self.add("TaskScheduled", {"resourceType": "lambda", "resource": "invoke"})
        self.add("TaskStarted", {"resourceType": "lambda", "resource": "invoke"})
        if error is None:
            self.add("TaskSucceeded", {"output": "{}"})
        else:
            self.add("TaskFailed", {"error": error, "cause": cause})

    def task(self, name: str, *failures: str, then: str | None = "ok") -> None:
        """A Task state: an attempt per failure, then a successful one (``then=None``: no more)."""
        self.enter(name)
        for error in failures:
            self.attempt(error, cause=json.dumps({"errorMessage": f"{error} happened"}))
        if then is not None:
            self.attempt()
        self.exit(name)


def test_a_charged_order_is_one_succeeded_step_per_state_in_order() -> None:
    history = History()
    for name in ("Claim Order", "Charge Payment", "Mark Complete"):
        history.task(name)
    history.add("ExecutionSucceeded", {"output": "{}"})

    steps = trace_steps(history.events, DEFINITION)

    assert [(s.name, s.type, s.status, s.attempts) for s in steps] == [
        ("Claim Order", "Task", "succeeded", 1),
        ("Charge Payment", "Task", "succeeded", 1),
        ("Mark Complete", "Task", "succeeded", 1),
    ]
    assert [s.next for s in steps] == ["Charge Payment", "Mark Complete", None]
    assert steps[0].input == '{"state": "Claim Order"}'
    assert steps[0].output == '{"done": "Claim Order"}'
    assert steps[0].duration == pytest.approx(0.4)  # entered at event 2, exited at event 6
    # Every event of the execution belongs to one state, but the execution's start and end.
    owned = sorted(i for s in steps for i in s.event_ids)
    assert owned == list(range(2, len(history.events)))


def test_a_task_that_failed_twice_then_succeeded_is_retried_with_both_errors() -> None:
    history = History()
    history.task("Claim Order")
    history.task("Charge Payment", "Lambda.ServiceException", "Lambda.TooManyRequestsException")
    history.task("Mark Complete")
    history.add("ExecutionSucceeded", {"output": "{}"})

    charge = trace_steps(history.events, DEFINITION)[1]

    assert (charge.status, charge.attempts, charge.retries) == ("retried", 3, 2)
    assert [e for e, _ in charge.errors] == ["Lambda.ServiceException", "Lambda.TooManyRequestsException"]
    assert charge.retried_errors == charge.errors
    assert charge.next == "Mark Complete"
    assert charge.catch_index is None


def test_a_decline_is_caught_by_the_first_catch_rule_that_names_it() -> None:
    history = History()
    history.task("Claim Order")
    history.task("Charge Payment", "PaymentDeclined", then=None)
    history.task("Release Claim")
    history.enter("Payment Declined", "Fail")
    history.add("ExecutionFailed", {"error": "PaymentDeclined", "cause": "the card was declined"})

    steps = trace_steps(history.events, DEFINITION)

    charge, release, declined = steps[1:]
    assert (charge.status, charge.next, charge.attempts) == ("caught", "Release Claim", 1)
    assert (charge.catch_index, charge.catch_errors) == (0, ["PaymentDeclined"])
    assert charge.retried_errors == []  # the failure was caught, not retried
    assert release.status == "succeeded"
    assert (declined.type, declined.status) == ("Fail", "failed")
    assert declined.errors == [("PaymentDeclined", "the card was declined")]
    assert declined.exited is not None  # closed by the execution's end


def test_an_error_no_named_rule_matches_is_caught_by_states_all() -> None:
    history = History()
    history.task("Claim Order")
    history.task("Charge Payment", "ClaimLost", then=None)
    history.task("Release Claim")

    charge = trace_steps(history.events, DEFINITION)[1]

    assert (charge.status, charge.catch_index, charge.catch_errors) == ("caught", 1, ["States.ALL"])


def test_a_timed_out_execution_fails_the_state_it_was_in_with_states_timeout() -> None:
    history = History()
    history.task("Claim Order")
    history.enter("Charge Payment")
    history.add("TaskScheduled", {"resourceType": "lambda", "resource": "invoke"})
    history.add("ExecutionTimedOut", {})

    steps = trace_steps(history.events, DEFINITION)

    assert (steps[-1].name, steps[-1].status) == ("Charge Payment", "failed")
    assert steps[-1].errors == [("States.Timeout", "")]


def test_an_execution_still_in_a_state_leaves_it_running() -> None:
    history = History()
    history.task("Claim Order")
    history.enter("Charge Payment")
    history.add("TaskScheduled", {"resourceType": "lambda", "resource": "invoke"})
    history.add("TaskStarted", {"resourceType": "lambda", "resource": "invoke"})

    steps = trace_steps(history.events, DEFINITION)

    assert [(s.name, s.status) for s in steps] == [
        ("Claim Order", "succeeded"),
        ("Charge Payment", "running"),
    ]
    assert (steps[-1].exited, steps[-1].duration, steps[-1].next) == (None, None, None)


def test_a_state_entered_twice_is_two_steps_each_with_its_own_attempts() -> None:
    looping = {
        "StartAt": "Poll",
        "States": {
            "Poll": {"Type": "Task", "Next": "Done?"},
            "Done?": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.done", "BooleanEquals": True, "Next": "Finished"}],
                "Default": "Poll",
            },
            "Finished": {"Type": "Succeed"},
        },
    }
    history = History()
    history.task("Poll", "Lambda.ServiceException")
    history.enter("Done?", "Choice")
    history.exit("Done?", "Choice")
    history.task("Poll")
    history.enter("Done?", "Choice")
    history.exit("Done?", "Choice")
    history.enter("Finished", "Succeed")
    history.exit("Finished", "Succeed")
    history.add("ExecutionSucceeded", {"output": "{}"})

    steps = trace_steps(history.events, looping)

    assert [(s.name, s.status, s.attempts) for s in steps] == [
        ("Poll", "retried", 2),
        ("Done?", "succeeded", 1),
        ("Poll", "succeeded", 1),
        ("Done?", "succeeded", 1),
        ("Finished", "succeeded", 1),
    ]
    assert [s.next for s in steps] == ["Done?", "Poll", "Done?", "Finished", None]


def test_events_read_out_of_order_fold_as_the_engine_recorded_them() -> None:
    history = History()
    history.task("Claim Order")
    history.task("Charge Payment", "Lambda.ServiceException")
    history.task("Mark Complete")
    history.add("ExecutionSucceeded", {"output": "{}"})

    shuffled = list(reversed(history.events))

    assert trace_steps(shuffled, DEFINITION) == trace_steps(history.events, DEFINITION)


def test_the_execution_error_comes_from_its_end_event_when_describe_has_none() -> None:
    history = History()
    history.task("Claim Order")
    history.add("ExecutionFailed", {"error": "ClaimLost", "cause": "the lease expired"})

    assert execution_error({"status": "FAILED"}, history.events) == ("ClaimLost", "the lease expired")
    assert execution_error({"error": "X", "cause": "Y"}, history.events) == ("X", "Y")


@pytest.mark.parametrize(
    ("error", "error_equals", "expected"),
    [
        ("PaymentDeclined", ["PaymentDeclined"], True),
        ("PaymentDeclined", ["States.ALL"], True),
        ("Lambda.ServiceException", ["States.TaskFailed"], True),
        ("States.Timeout", ["States.TaskFailed"], False),  # a timeout is not a task failure
        ("States.Timeout", ["States.Timeout"], True),
        ("ClaimLost", ["PaymentDeclined", "ChargeNotAttempted"], False),
    ],
)
def test_error_equals_matches_as_the_engine_decides(
    error: str, error_equals: list[str], expected: bool
) -> None:
    assert matches(error, error_equals) is expected


def test_a_definition_is_read_from_json_or_yaml_and_must_start_at_a_state() -> None:
    assert load_definition(json.dumps(DEFINITION)) == DEFINITION
    assert load_definition("StartAt: A\nStates:\n  A: {Type: Succeed}\n")["States"] == {
        "A": {"Type": "Succeed"}
    }
    with pytest.raises(ValueError, match="StartAt 'B' names no state"):
        load_definition('{"StartAt": "B", "States": {"A": {"Type": "Succeed"}}}')
    with pytest.raises(ValueError, match="no 'States' object"):
        load_definition("[1, 2]")
