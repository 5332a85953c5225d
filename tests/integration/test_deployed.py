"""Against a deployed stack (`sam deploy`): the seed-000 lab on the real queue, real Step Functions.

Run with ``AWS_SAM_STACK_NAME=payment-saga pytest tests/integration -m integration`` and AWS
credentials for the account; the provider key is read from the stack's secret (use a Stripe
*test* key there). Skipped, with the reason, when either is missing.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import pytest

pytestmark = pytest.mark.integration

STACK = os.environ.get("AWS_SAM_STACK_NAME")


def _credentials_present() -> bool:
    if not STACK:
        return False
    import boto3

    return boto3.session.Session().get_credentials() is not None


if not _credentials_present():
    pytest.skip(
        "needs a deployed stack: set AWS_SAM_STACK_NAME and AWS credentials (sam deploy first)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    import boto3

    from saga_local.stack.targets import stack_outputs

    cloudformation = boto3.client("cloudformation")
    outputs = stack_outputs(cloudformation, STACK or "")
    resources = cloudformation.describe_stack_resources(StackName=STACK)["StackResources"]
    physical = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources}
    return {"outputs": outputs, "physical": physical}


def _executions_for(sfn: Any, state_machine: str, order_id: str, expected: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found: list[Any] = []
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=state_machine):
            found.extend(e for e in page["executions"] if e["name"].startswith(order_id + "-"))
        if len(found) >= expected and all(e["status"] != "RUNNING" for e in found):
            return found
        time.sleep(5)
    raise TimeoutError(f"executions for {order_id} did not finish")


def test_seed_000_lab_on_the_deployed_stack_charges_once(stack: dict[str, Any]) -> None:
    import boto3

    from payment_saga.api_keys import stripe_secret_from_string
    from payment_saga.orders import order_from_message
    from payment_saga.payments import StripeProvider, idempotency_key

    order_id = f"ORDER-IT-{uuid.uuid4().hex[:12]}"
    order = {
        "orderId": order_id,
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_it",
        "paymentMethod": "pm_card_visa",
    }
    sqs = boto3.client("sqs")
    for _ in range(4):
        sqs.send_message(QueueUrl=stack["outputs"]["OrdersQueueUrl"], MessageBody=json.dumps(order))

    sfn = boto3.client("stepfunctions")
    executions = _executions_for(sfn, stack["outputs"]["PaymentSagaStateMachineArn"], order_id, 4)

    outputs = [
        json.loads(sfn.describe_execution(executionArn=e["executionArn"]).get("output") or "{}")
        for e in executions
    ]
    statuses = sorted("DUPLICATE" if "duplicate" in o else o.get("status") for o in outputs)
    assert statuses == ["CHARGED", "DUPLICATE", "DUPLICATE", "DUPLICATE"]
    charged = next(e for e, o in zip(executions, outputs, strict=True) if o.get("status") == "CHARGED")
    history = sfn.get_execution_history(executionArn=charged["executionArn"])["events"]
    entered = [e["stateEnteredEventDetails"]["name"] for e in history if e["type"].endswith("StateEntered")]
    assert entered == ["Claim Order", "Charge Payment", "Mark Complete"]

    secret_arn = boto3.client("lambda").get_function_configuration(
        FunctionName=stack["physical"]["ChargePaymentFunction"]
    )["Environment"]["Variables"]["PAYMENT_API_KEY_SECRET_ARN"]
    raw = boto3.client("secretsmanager").get_secret_value(SecretId=secret_arn)["SecretString"]
    provider = StripeProvider(stripe_secret_from_string(raw))
    # Stripe's search is eventually consistent: give it a minute to index the charge.
    deadline = time.monotonic() + 120
    found = None
    while found is None and time.monotonic() < deadline:
        found = provider.find_charge(
            order_from_message(order), attempt=1, idempotency_key=idempotency_key(order_id, 1)
        )
        time.sleep(10)
    assert found is not None
    assert found.amount == 15000


def _logged_execution_failed(logs: Any, log_group: str, execution_arn: str) -> str:
    """The ExecutionFailed event the state machine logged for ``execution_arn`` (log delivery lags)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        events = logs.filter_log_events(
            logGroupName=log_group, filterPattern='{ $.type = "ExecutionFailed" }', startTime=0
        )["events"]
        for event in events:
            if json.loads(event["message"]).get("execution_arn") == execution_arn:
                return str(event["message"])
        time.sleep(10)
    raise TimeoutError(f"no ExecutionFailed log event for {execution_arn}")


def test_a_failed_execution_s_error_reaches_the_log_the_failure_alarms_count(stack: dict[str, Any]) -> None:
    """The failure alarms count ExecutionFailed log events by ``$.details.error``, and the state machine
    logs with IncludeExecutionData false: AWS does not say the error survives that. Here it is checked on
    a real log event, against the metric filters as deployed (docs/deploy.md, "Failures that alarm").
    """
    import boto3

    order_id = f"ORDER-IT-{uuid.uuid4().hex[:12]}"
    declined = {
        "orderId": order_id,
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_it",
        "paymentMethod": "pm_card_chargeDeclined",
    }
    boto3.client("sqs").send_message(
        QueueUrl=stack["outputs"]["OrdersQueueUrl"], MessageBody=json.dumps(declined)
    )
    sfn = boto3.client("stepfunctions")
    (execution,) = _executions_for(sfn, stack["outputs"]["PaymentSagaStateMachineArn"], order_id, 1)
    assert sfn.describe_execution(executionArn=execution["executionArn"])["error"] == "PaymentDeclined"

    logs = boto3.client("logs")
    log_group = stack["physical"]["PaymentSagaStateMachineLogGroup"]
    message = _logged_execution_failed(logs, log_group, execution["executionArn"])

    assert json.loads(message)["details"]["error"] == "PaymentDeclined"
    counted = {
        transformation["metricName"]
        for metric_filter in logs.describe_metric_filters(logGroupName=log_group)["metricFilters"]
        if logs.test_metric_filter(filterPattern=metric_filter["filterPattern"], logEventMessages=[message])[
            "matches"
        ]
        for transformation in metric_filter["metricTransformations"]
    }
    assert counted == {"ExecutionsDeclined"}
