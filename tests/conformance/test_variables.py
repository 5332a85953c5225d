"""Workflow variables in a JSONPath state machine: what ``Assign`` sets and where it can be read.

Source: AWS Step Functions Developer Guide, "Passing data between states with variables"
(https://docs.aws.amazon.com/step-functions/latest/dg/workflow-variables.html) and "Fail workflow
state" (https://docs.aws.amazon.com/step-functions/latest/dg/state-fail.html).

The saga's one re-queue path relies on these: the way into it (a Catch, a Choice rule) assigns how
long the order waits and the error the execution ends with, the SQS task reads them in its
Parameters, and the Fail state after it reads them in ErrorPath and CausePath.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.engine import SUCCEED, Engine, failing, machine, task

SEND_BACK = {"delaySeconds": 900, "error": "ClaimBusy", "cause": "behind another open payment attempt"}
ENDED = {"Type": "Fail", "ErrorPath": "$sendBack.error", "CausePath": "$sendBack.cause"}


def read_back(function: str) -> dict[str, Any]:
    """A Task that hands the variables to a function, as the saga's SQS task hands them to SQS."""
    return task(
        function,
        Parameters={
            "FunctionName": function,
            "Payload": {"delaySeconds.$": "$sendBack.delaySeconds", "next.$": "$nextRequeue"},
        },
        ResultPath=None,
        Next="Ended",
    )


def test_a_catch_assigns_a_variable_that_a_later_task_and_fail_state_read(engine: Engine) -> None:
    """ "Assign" in a Catcher; "To reference a variable, prepend the name with a dollar sign"; a Fail
    state's ErrorPath and CausePath are paths like any other."""
    claim = engine.function("claim", failing("ClaimBusy"))
    send = engine.function("send", lambda _: {})
    catch = [
        {
            "ErrorEquals": ["ClaimBusy"],
            "ResultPath": "$.busy",
            "Assign": {"sendBack": SEND_BACK, "nextRequeue": "1"},
            "Next": "Send",
        }
    ]
    run = engine.run(
        machine(
            "Claim",
            Claim=task(claim, Catch=catch, Next="Done"),
            Send=read_back(send),
            Ended=ENDED,
            Done=SUCCEED,
        )
    )

    assert engine.stand_ins.events["send"] == [{"delaySeconds": 900, "next": "1"}]
    assert (run.status, run.error, run.cause) == (
        "FAILED",
        "ClaimBusy",
        "behind another open payment attempt",
    )


@pytest.mark.parametrize(
    ("state_input", "next_requeue"),
    [({}, "1"), ({"requeue": {"allowed": True, "next": "3"}}, "3")],
)
def test_a_choice_rule_assigns_only_when_it_matches(
    engine: Engine, state_input: dict[str, Any], next_requeue: str
) -> None:
    """ "Assign" in a Choice rule takes effect when that rule is the one followed; a rule's Assign can
    read the context object (``$$.Execution.Input``). The saga's "Requeue Allowed?" counts an
    execution started without ``$.requeue`` as never re-queued this way.

    Its rules are written as ``Not`` and ``And``: moto and LocalStack keep the ``Assign`` of such a
    rule but drop it from a bare data-test rule (``{"Variable": ..., "IsPresent": false}``); and
    they read a rule's ``$.`` path in the rule's boolean, not in the state input, so the count is
    read from the execution input, where the start function wrote it."""
    send = engine.function("send", lambda _: {})
    is_present = {"Variable": "$.requeue", "IsPresent": True}
    choice = {
        "Type": "Choice",
        "Choices": [
            {"Not": is_present, "Assign": {"nextRequeue": "1"}, "Next": "Send"},
            {
                "And": [is_present, {"Variable": "$.requeue.allowed", "BooleanEquals": True}],
                "Assign": {"nextRequeue.$": "$$.Execution.Input.requeue.next"},
                "Next": "Send",
            },
        ],
        "Default": "Done",
    }
    first = {"Type": "Pass", "Assign": {"sendBack": SEND_BACK}, "Next": "Allowed"}
    run = engine.run(
        machine("First", First=first, Allowed=choice, Send=read_back(send), Ended=ENDED, Done=SUCCEED),
        state_input,
    )

    assert engine.stand_ins.events["send"] == [{"delaySeconds": 900, "next": next_requeue}]
    assert (run.status, run.error) == ("FAILED", "ClaimBusy")
