"""Each fault kind fires where it is aimed, and the saga keeps its promise through it.

The real ASL runs in moto with the real handlers in-process (the ``saga`` fixture); charges are
counted at the provider emulator's ledger and claims read from the table.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
import pytest
from botocore.exceptions import ClientError

from payment_saga.execution_names import execution_name
from saga_local.aws.stack import REGION
from saga_local.harness.redelivery import redeliver
from saga_local.runtime.faults import CALLS, POINTS, Fault, FaultPlan, call_error, valid_points
from saga_local.template import load_template
from tests.helpers import order
from tests.local.conftest import sweep

if TYPE_CHECKING:
    from tests.helpers import Saga


def task_errors(saga: Saga, arn: str) -> list[str]:
    return [
        e["taskFailedEventDetails"]["error"] for e in saga.driver.history(arn) if e["type"] == "TaskFailed"
    ]


def error_types(saga: Saga, function: str) -> list[str | None]:
    return [r.error_type for r in saga.runtime.records if r.function == function]


# -- the fault model ---------------------------------------------------------------------------


def test_call_error_is_the_exception_boto3_raises_after_its_retries() -> None:
    client = boto3.client("dynamodb", region_name=REGION)
    model = client.meta.service_model.operation_model("UpdateItem")

    throttled = call_error("throttle_call", "dynamodb.UpdateItem", model)
    failed = call_error("error_call", "dynamodb.UpdateItem", model)

    assert isinstance(throttled, client.exceptions.ProvisionedThroughputExceededException)
    assert throttled.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert "(reached max retries: 2)" in str(throttled)
    assert isinstance(failed, client.exceptions.InternalServerError)
    assert failed.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    # No model (a worker that lost it): still a ClientError with the code the handler would read.
    plain = call_error("throttle_call", "sfn.StartExecution")
    assert type(plain) is ClientError
    assert plain.response["Error"]["Code"] == "ThrottlingException"


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        ({"point": "after:dynamodb.UpdateItem", "kind": "throttle"}, "only at 'start'"),
        ({"point": "start", "kind": "throttle_call"}, "before:<service>"),
        ({"point": "before:provider.charge", "kind": "error_call"}, "before:<service>"),
        ({"point": "start", "kind": "delay"}, "seconds > 0"),
        ({"point": "middle", "kind": "die"}, "bad point"),
        ({"point": "start", "kind": "explode"}, "unknown fault kind"),
        ({"point": "start", "kind": "die", "attempt": 0}, "count from 1"),
    ],
)
def test_a_fault_that_cannot_happen_is_refused(fault: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Fault("ClaimOrderFunction", **fault)


def test_attempt_targets_only_that_invocation_of_the_function_for_that_order() -> None:
    plan = FaultPlan([Fault("F", "start", "die", times=5, order_id="A", attempt=2, probe=True)])

    fired = []
    for order_id in ["A", "B", "A", "A", "B"]:
        invocation = plan.begin("F", order_id)
        fired.append(plan.take("F", "start", order_id, invocation) is not None)

    assert fired == [False, False, True, False, False]
    plan.clear()
    assert plan.begin("F", "A") == 1  # counts start again on a cleared plan


# -- DynamoDB throttles and 500s ---------------------------------------------------------------


def test_throttled_claim_write_fails_the_step_as_boto3_would_and_is_retried(saga: Saga) -> None:
    saga.faults.add(Fault("ClaimOrderFunction", "before:dynamodb.UpdateItem", "throttle_call", times=2))

    result = saga.driver.wait(saga.driver.start(order(), name="throttled-claim"))

    assert result.outcome == "CHARGED", result
    assert task_errors(saga, result.arn) == ["ProvisionedThroughputExceededException"] * 2
    assert saga.charges("ORDER-003") == 1
    assert saga.driver.claim("ORDER-003")["status"] == "COMPLETED"  # type: ignore[index]


def test_dynamodb_500_on_mark_complete_is_retried_and_the_claim_completes(saga: Saga) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "before:dynamodb.UpdateItem", "error_call"))

    result = saga.driver.wait(saga.driver.start(order(), name="complete-500"))

    assert result.outcome == "CHARGED", result
    assert task_errors(saga, result.arn) == ["InternalServerError"]
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", result.output["chargeId"])  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1


def test_claim_writes_that_never_land_fail_the_claim_visibly_and_charge_nothing(saga: Saga) -> None:
    saga.faults.add(Fault("ClaimOrderFunction", "before:dynamodb.UpdateItem", "error_call", times=100))

    result = saga.driver.wait(saga.driver.start(order(), name="claim-down"))

    assert result.error == "ClaimFailed"
    # No claim write landed, and none ever can: Release Claim fenced the order with a tombstone,
    # released NOT_CHARGED at attempt 0 (which the outcome relay re-queues).
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"], claim["attempt"]) == ("RELEASED", "NOT_CHARGED", "0")
    assert saga.charges("ORDER-003") == 0


def test_dynamodb_down_after_the_charge_keeps_the_claim_and_the_sweeper_completes_it(saga: Saga) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "before:dynamodb.UpdateItem", "throttle_call", times=100))

    result = saga.driver.wait(saga.driver.start(order(), name="complete-down"))

    assert result.error == "NeedsReconciliation"
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1
    sweep(saga)
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == (
        "COMPLETED",
        saga.provider.charges_for("ORDER-003")[0].charge_id,
    )


# -- latency -----------------------------------------------------------------------------------


def test_delay_stalls_the_invocation_and_it_goes_on(saga: Saga) -> None:
    saga.faults.add(Fault("ChargePaymentFunction", "before:provider.charge", "delay", seconds=0.3))

    result = saga.driver.wait(saga.driver.start(order(), name="slow-charge"))

    assert result.outcome == "CHARGED"
    [charge] = [r for r in saga.runtime.records if r.function == "ChargePaymentFunction"]
    assert charge.duration_ms >= 300
    assert charge.error_type is None
    assert saga.charges("ORDER-003") == 1


def test_delay_past_the_timeout_after_the_write_is_a_timeout_and_the_retry_is_reentrant(
    saga: Saga,
) -> None:
    name = saga.stack.function_name("MarkCompleteFunction")
    spec, environment = saga.runtime.functions[name]
    saga.runtime.functions[name] = (dataclasses.replace(spec, timeout=1), environment)
    saga.faults.add(Fault("MarkCompleteFunction", "after:dynamodb.UpdateItem", "delay", seconds=5))

    result = saga.driver.wait(saga.driver.start(order(), name="stalled-complete"))

    assert result.outcome == "CHARGED"
    assert error_types(saga, "MarkCompleteFunction") == ["Sandbox.Timedout", None]
    assert saga.driver.claim("ORDER-003")["status"] == "COMPLETED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1


# -- per attempt -------------------------------------------------------------------------------


def test_faults_aimed_at_the_first_and_second_invocation_fire_there_only(saga: Saga) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "start", "timeout", attempt=1))
    saga.faults.add(Fault("MarkCompleteFunction", "after:dynamodb.UpdateItem", "die", attempt=2))
    saga.faults.add(Fault("MarkCompleteFunction", "start", "oom", attempt=4))  # never reached

    result = saga.driver.wait(saga.driver.start(order(), name="per-attempt"))

    assert result.outcome == "CHARGED"
    assert error_types(saga, "MarkCompleteFunction") == ["Sandbox.Timedout", "Runtime.ExitError", None]
    assert [f.fired for f in saga.faults.faults] == [1, 1, 0]
    assert saga.charges("ORDER-003") == 1


def test_a_retried_charge_that_dies_after_the_replay_still_charges_once(saga: Saga) -> None:
    saga.provider.inject("fail_after_apply", order_id="ORDER-003")  # invocation 1: charged, 500
    saga.faults.add(Fault("ChargePaymentFunction", "after:provider.charge", "die", attempt=2))

    result = saga.driver.wait(saga.driver.start(order(), name="replay-dies"))

    assert result.outcome == "CHARGED"
    assert error_types(saga, "ChargePaymentFunction") == ["PaymentOutcomeUnknown", "Runtime.ExitError", None]
    assert saga.charges("ORDER-003") == 1


# -- SQS redelivers a message whose execution already started ----------------------------------


def test_redelivery_while_running_and_after_the_end_reattaches_to_the_one_execution(saga: Saga) -> None:
    body = json.dumps(order())
    [message_id] = saga.driver.send(order())
    # The charge stalls, so the redelivery certainly finds the execution running.
    saga.faults.add(Fault("ChargePaymentFunction", "before:provider.charge", "delay", seconds=1))

    first = redeliver(saga.driver, message_id, body, receive_count=1)
    [arn] = saga.driver.execution_arns()
    assert arn.endswith(":" + execution_name("ORDER-003", message_id))
    assert saga.driver.sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
    while_running = redeliver(saga.driver, message_id, body)
    result = saga.driver.wait(arn)
    after_the_end = redeliver(saga.driver, message_id, body, receive_count=3)
    saga.driver.pump()  # and SQS itself delivers the message once more

    assert [first.failed, while_running.failed, after_the_end.failed] == [False, False, False]
    assert saga.driver.execution_arns() == [arn]
    assert result.outcome == "CHARGED"
    assert saga.charges("ORDER-003") == 1
    assert saga.invocations("StartExecutionFunction") == 4
    assert saga.invocations("ClaimOrderFunction") == 1


# -- an execution stopped half-way -------------------------------------------------------------


def test_execution_stopped_after_the_charge_leaves_a_claim_the_sweeper_completes(saga: Saga) -> None:
    saga.faults.add(Fault("ChargePaymentFunction", "after:provider.charge", "stop"))

    result = saga.driver.wait(saga.driver.start(order(), name="stopped"))
    duplicate = saga.driver.wait(saga.driver.start(order(), name="redelivered"))

    assert result.status == "ABORTED"
    assert "Mark Complete" not in result.path
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 1
    assert (duplicate.outcome, duplicate.holder_status) == ("DUPLICATE", "CLAIMED")
    sweep(saga)
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == (
        "COMPLETED",
        saga.provider.charges_for("ORDER-003")[0].charge_id,
    )
    assert saga.charges("ORDER-003") == 1


def test_execution_stopped_after_the_claim_leaves_a_claim_the_sweeper_releases(saga: Saga) -> None:
    saga.faults.add(Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", "stop"))

    result = saga.driver.wait(saga.driver.start(order(), name="stopped"))

    assert result.status == "ABORTED"
    assert "Charge Payment" not in result.path
    assert saga.driver.claim("ORDER-003")["status"] == "CLAIMED"  # type: ignore[index]
    sweep(saga)
    assert saga.driver.claim("ORDER-003")["status"] == "RELEASED"  # type: ignore[index]
    assert saga.charges("ORDER-003") == 0
    # Released with proof that nothing was charged: the next delivery charges, once.
    again = saga.driver.wait(saga.driver.start(order(), name="after-the-sweep"))
    assert again.outcome == "CHARGED"
    assert saga.charges("ORDER-003") == 1


# -- the same kinds in worker processes (the local stack's runtime) ----------------------------


def test_call_errors_delays_stops_lost_answers_and_late_writes_fire_in_worker_processes_too() -> None:
    from saga_local.stack.embedded import EmbeddedStack

    plan = FaultPlan(
        [
            Fault("ClaimOrderFunction", "before:dynamodb.UpdateItem", "throttle_call", order_id="W-1"),
            Fault(
                "MarkCompleteFunction", "before:dynamodb.UpdateItem", "error_call", order_id="W-1", attempt=1
            ),
            Fault("ChargePaymentFunction", "before:provider.charge", "delay", seconds=0.5, order_id="W-2"),
            Fault("ChargePaymentFunction", "after:provider.charge", "stop", order_id="W-3"),
            Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", "lost_answer", order_id="W-4"),
            Fault("ChargePaymentFunction", "after:provider.charge", "lost_answer", order_id="W-4"),
            Fault(
                "MarkCompleteFunction", "after:dynamodb.UpdateItem", "late_write", order_id="W-5", seconds=0.2
            ),
        ]
    )
    ids = [f"W-{i}" for i in range(1, 6)]
    with EmbeddedStack(runtime="workers", faults=plan, max_workers=1) as stack:
        arns = [stack.driver.start(order(order_id), name=order_id.lower()) for order_id in ids]
        results = [stack.driver.wait(arn, timeout=120) for arn in arns]
        plan.late.land_all()
        claims = [stack.driver.claim(order_id) or {} for order_id in ids]
        charges = [len(stack.provider.charges_for(order_id)) for order_id in ids]
        intents = len(stack.provider.payment_intents("W-4"))
        errors = {(r.function, r.order_id, r.error_type) for r in stack.runtime.records if r.error_type}
        [slow] = [
            r for r in stack.runtime.records if r.function == "ChargePaymentFunction" and r.order_id == "W-2"
        ]

    assert [r.status for r in results] == ["SUCCEEDED", "SUCCEEDED", "ABORTED", "SUCCEEDED", "SUCCEEDED"]
    assert [c.get("status") for c in claims] == [
        "COMPLETED",
        "COMPLETED",
        "CLAIMED",
        "COMPLETED",
        "COMPLETED",
    ]
    assert charges == [1, 1, 1, 1, 1]
    assert intents == 1  # W-4's resent create was replayed under its idempotency key
    # W-4's lost answers were absorbed by the resends; W-5's killed Mark Complete was retried.
    assert errors == {
        ("ClaimOrderFunction", "W-1", "ProvisionedThroughputExceededException"),
        ("MarkCompleteFunction", "W-1", "InternalServerError"),
        ("MarkCompleteFunction", "W-5", "Runtime.ExitError"),
    }
    assert slow.duration_ms >= 500
    assert plan.fired_by_kind() == {
        "delay": 1,
        "error_call": 1,
        "late_write": 1,
        "lost_answer": 2,
        "stop": 1,
        "throttle_call": 1,
    }
    assert len(plan.late.landings) == 1  # the parent held W-5's write and sent it later
    assert plan.late.failed == []


# -- the points a fault may name ---------------------------------------------------------------


def test_a_point_on_a_call_the_function_never_makes_is_refused_with_its_points() -> None:
    # EventBridge's IAM prefix is "events", but botocore names its calls "eventbridge".
    with pytest.raises(ValueError, match="never reaches") as refused:
        Fault("StartExecutionFunction", "before:events.PutEvents")

    assert "before:eventbridge.PutEvents" in str(refused.value)
    assert "after:sqs.SendMessage" in str(refused.value)
    assert Fault("StartExecutionFunction", "before:eventbridge.PutEvents").point in valid_points(
        "StartExecutionFunction"
    )


def test_a_fault_for_a_function_the_template_does_not_have_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown function 'ClaimFunction'"):
        Fault("ClaimFunction", "start")


def test_every_point_chaos_aims_at_is_one_the_function_reaches() -> None:
    for function, points in POINTS.items():
        assert set(points) <= set(valid_points(function)), function


def aws_calls_allowed(template: dict[str, Any], function: str) -> set[str]:
    """The calls the function's role allows, named as botocore names them (``eventbridge.PutEvents``)."""
    resources = template["Resources"]
    properties = resources[function]["Properties"]
    policies = list(properties.get("Policies") or [])
    role = properties.get("Role", {}).get("Fn::GetAtt", [None])[0]
    if role:
        policies += resources[role]["Properties"]["Policies"]
    statements = []
    for policy in policies:
        if "Fn::If" in policy:
            policy = policy["Fn::If"][1]
        statements += policy.get("PolicyDocument", policy).get("Statement", [])
    session = botocore.session.get_session()
    names = {}  # IAM prefix -> botocore's name of the service in its events
    for service in ("dynamodb", "stepfunctions", "sqs", "events", "secretsmanager", "kms"):
        model = session.get_service_model(service)
        names[model.metadata["endpointPrefix"]] = model.service_id.hyphenize()
    allowed = set()
    for statement in statements:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        for action in actions:
            prefix, _, operation = action.partition(":")
            if prefix in {"logs", "xray"}:
                continue  # the platform's (Lambda's log and trace writes), not the handler's calls
            allowed.add(f"{names[prefix]}.{operation}")
    return allowed


def test_every_call_a_fault_may_name_is_one_the_functions_role_allows() -> None:
    """A call spelled as IAM spells it (``events.PutEvents``), or one the function may not make, is
    no point: the template's permissions are what each function can call."""
    template = load_template()
    for function, calls in CALLS.items():
        allowed = aws_calls_allowed(template, function)
        for call in calls:
            if call != "provider.charge":
                assert call in allowed, f"{function}: {call} is not among its permissions {sorted(allowed)}"


def test_every_call_the_handlers_make_when_the_saga_runs_is_a_point(saga: Saga) -> None:
    """The calls the runtime sees each handler make, on a charge, a decline, a malformed message and
    a claim that never lands: a fault can be aimed at each of them."""
    saga.driver.send("{not json")
    saga.driver.send(order("POINTS-1"))
    saga.driver.pump()
    saga.driver.wait(saga.driver.start(order("POINTS-2", paymentMethod="pm_card_chargeDeclined"), name="p2"))
    saga.faults.add(
        Fault(
            "ClaimOrderFunction", "before:dynamodb.UpdateItem", "error_call", times=100, order_id="POINTS-3"
        )
    )
    saga.driver.wait(saga.driver.start(order("POINTS-3"), name="p3"))

    seen: dict[str, set[str]] = {}
    for function, call in saga.runtime.calls:
        seen.setdefault(function, set()).add(call)
    assert {"dynamodb.PutItem", "dynamodb.UpdateItem"} <= seen[
        "ReleaseClaimFunction"
    ]  # the fence's tombstone
    assert {"sqs.SendMessage", "eventbridge.PutEvents"} <= seen["StartExecutionFunction"]
    for function, calls in seen.items():
        assert calls <= set(CALLS[function]), f"{function} makes {sorted(calls - set(CALLS[function]))}"
