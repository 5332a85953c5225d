"""TimeoutSeconds on a Task and on the whole execution. These wait for real (a second each: the
shortest timeout there is), so there are two of them.

Source: AWS Step Functions Developer Guide, "Handling errors in Step Functions workflows",
https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html
"""

from __future__ import annotations

import threading
from typing import Any

from tests.conformance.engine import SUCCEED, Engine, machine, task


def test_a_task_past_its_timeout_seconds_fails_with_states_timeout_which_a_retrier_can_retry(
    engine: Engine,
) -> None:
    """States.Timeout: "Reported when a Task state runs longer than the TimeoutSeconds value"; the
    guide's "Handling a timeout using Retry" retries it like any other error."""
    released = threading.Event()
    calls: list[int] = []

    def slow_then_fast(_: dict[str, Any]) -> Any:
        calls.append(1)
        if len(calls) == 1:
            released.wait(3)  # the first call outlives the state's one second
        return {"ok": True}

    function = engine.function("slow", slow_then_fast)
    retry = [{"ErrorEquals": ["States.Timeout"], "IntervalSeconds": 1, "MaxAttempts": 1}]
    try:
        run = engine.run(machine("Call", Call=task(function, TimeoutSeconds=1, Retry=retry)))
    finally:
        released.set()

    assert run.status == "SUCCEEDED"
    assert [e["type"] for e in run.history if e["type"] in {"TaskTimedOut", "TaskSucceeded"}] == [
        "TaskTimedOut",
        "TaskSucceeded",
    ]
    assert len(calls) == 2


def test_an_execution_past_its_timeout_seconds_times_out(engine: Engine) -> None:
    """States.Timeout: "A States.Timeout error is also reported when an entire state machine
    execution runs longer than the specified TimeoutSeconds value." The saga's definition sets 600:
    an execution stopped there has published nothing, and its claim stays open for the sweeper."""
    released = threading.Event()

    def stuck(_: dict[str, Any]) -> Any:
        released.wait(3)
        return {"ok": True}

    function = engine.function("stuck", stuck)
    definition = machine("Call", Call=task(function, Next="After"), After=SUCCEED)
    definition["TimeoutSeconds"] = 1
    try:
        run = engine.run(definition)
    finally:
        released.set()

    assert run.status == "TIMED_OUT"
    assert "After" not in run.entered()
