"""The two faults below the handler: *applied, answer lost, sent again* and *killed in flight*.

``lost_answer`` lets a request reach the service (moto, the provider emulator), drops its answer,
and lets botocore's own standard retry (or, for the provider, the HTTP client) send the identical
request again. ``late_write`` holds a request sent by a Lambda that then dies, and lets it land
after the state machine has moved on. Each test shows the request really was applied (or landed)
at the service, by an effect the handler could not have produced on its own.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from saga_local.aws.stack import REGION
from saga_local.runtime.faults import ChargeRequest, Fault, declined_attempts_sent_again
from tests.helpers import order

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.helpers import Saga

TABLE = "lost-answer-probe"


def client(service: str) -> Any:
    # Standard retries, as the handlers' clients; the service is named at run time.
    return boto3.client(service, region_name=REGION)  # type: ignore[call-overload]


def _counter_table() -> Any:
    dynamodb = client("dynamodb")
    dynamodb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return dynamodb


def update_item() -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    dynamodb = _counter_table()

    def call() -> Any:
        return dynamodb.update_item(
            TableName=TABLE,
            Key={"id": {"S": "n"}},
            UpdateExpression="ADD hits :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValues="ALL_NEW",
        )

    # Not idempotent on purpose: two applications show that the first send did land.
    return call, lambda answer: int(answer["Attributes"]["hits"]["N"])


def put_item() -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    dynamodb = _counter_table()

    def call() -> Any:
        dynamodb.put_item(
            TableName=TABLE,
            Item={"id": {"S": "p"}},
            ConditionExpression="attribute_not_exists(id)",
        )

    # The resend finds the item its own first send wrote: its condition fails.
    return call, lambda answer: answer


def get_item() -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    dynamodb = _counter_table()
    dynamodb.put_item(TableName=TABLE, Item={"id": {"S": "g"}, "v": {"S": "x"}})
    return (
        lambda: dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "g"}}, ConsistentRead=True),
        lambda answer: answer["Item"]["v"]["S"],
    )


def send_message() -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    sqs = client("sqs")
    url = sqs.create_queue(QueueName="lost-answer-probe")["QueueUrl"]

    def messages(_: Any) -> int:
        return int(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
                "Attributes"
            ]["ApproximateNumberOfMessages"]
        )

    return lambda: sqs.send_message(QueueUrl=url, MessageBody="hello"), messages


def get_secret_value() -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    secrets = client("secretsmanager")
    secrets.create_secret(Name="lost-answer-probe", SecretString="sk_test_not_a_real_key")
    return (
        lambda: secrets.get_secret_value(SecretId="lost-answer-probe"),
        lambda answer: answer["SecretString"],
    )


@pytest.mark.parametrize(
    ("call", "setup", "effect"),
    [
        # The counter was incremented twice: the first send was applied, then sent again.
        ("dynamodb.UpdateItem", update_item, 2),
        ("dynamodb.GetItem", get_item, "x"),
        # SQS is at-least-once: the resent message is a second message.
        ("sqs.SendMessage", send_message, 2),
        ("secrets-manager.GetSecretValue", get_secret_value, "sk_test_not_a_real_key"),
    ],
)
def test_a_lost_answer_is_applied_then_sent_again_by_botocore(
    saga: Saga, call: str, setup: Callable[[], tuple[Callable[[], Any], Callable[[Any], Any]]], effect: Any
) -> None:
    make_call, observe = setup()
    saga.faults.add(Fault("ProbeFunction", f"after:{call}", "lost_answer", probe=True))

    with saga.runtime.acting_as("ProbeFunction"):
        answer = make_call()

    assert observe(answer) == effect
    assert saga.runtime.sends[("ProbeFunction", call)] == 2  # the first send, then botocore's
    assert saga.faults.fired_by_kind() == {"lost_answer": 1}


def test_a_resent_conditional_put_finds_its_own_first_write(saga: Saga) -> None:
    make_call, _ = put_item()
    saga.faults.add(Fault("ProbeFunction", "after:dynamodb.PutItem", "lost_answer", probe=True))

    with saga.runtime.acting_as("ProbeFunction"), pytest.raises(Exception, match="ConditionalCheckFailed"):
        make_call()

    # The very write the caller sent is there; only its answer was lost.
    assert client("dynamodb").get_item(TableName=TABLE, Key={"id": {"S": "p"}}).get("Item")


def test_step_functions_calls_lose_their_answer_and_are_sent_again(saga: Saga) -> None:
    sfn = client("stepfunctions")
    arn = saga.stack.state_machine_arn
    body = json.dumps({"order": order("LOST-SFN"), "messageId": "m-1"}, sort_keys=True)
    # A stalled claim keeps the execution running until it is stopped.
    saga.faults.add(Fault("ClaimOrderFunction", "start", "delay", seconds=5, order_id="LOST-SFN"))
    saga.faults.add(Fault("ProbeFunction", "after:sfn.StartExecution", "lost_answer", probe=True))
    saga.faults.add(Fault("ProbeFunction", "after:sfn.StopExecution", "lost_answer", probe=True))

    with saga.runtime.acting_as("ProbeFunction"):
        started = sfn.start_execution(stateMachineArn=arn, name="lost-sfn", input=body)
    while not any(e["type"] == "TaskScheduled" for e in saga.driver.history(started["executionArn"])):
        time.sleep(0.02)  # (moto cannot stop an execution before its first state has begun)
    with saga.runtime.acting_as("ProbeFunction"):
        sfn.stop_execution(executionArn=started["executionArn"], error="Probe", cause="lost answer")

    # The same name and input: the resent StartExecution re-attached to the execution it started.
    assert [e["name"] for e in sfn.list_executions(stateMachineArn=arn)["executions"]] == ["lost-sfn"]
    assert saga.driver.wait(started["executionArn"]).status == "ABORTED"
    assert saga.runtime.sends[("ProbeFunction", "sfn.StartExecution")] == 2
    assert saga.runtime.sends[("ProbeFunction", "sfn.StopExecution")] == 2


def test_a_claim_whose_answer_was_lost_is_resent_and_finds_its_own_write(saga: Saga) -> None:
    saga.faults.add(Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", "lost_answer"))

    result = saga.driver.wait(saga.driver.start(order("LOST-1"), name="lost-1"))

    assert result.status == "SUCCEEDED"
    assert saga.charges("LOST-1") == 1
    assert (saga.driver.claim("LOST-1") or {})["status"] == "COMPLETED"
    assert saga.runtime.sends[("ClaimOrderFunction", "dynamodb.UpdateItem")] == 2
    assert saga.invocations("ClaimOrderFunction", "LOST-1") == 1  # absorbed inside boto3


def test_a_charge_whose_answer_was_lost_is_sent_again_with_the_same_key(saga: Saga) -> None:
    saga.faults.add(Fault("ChargePaymentFunction", "after:provider.charge", "lost_answer"))

    result = saga.driver.wait(saga.driver.start(order("LOST-2"), name="lost-2"))

    assert result.status == "SUCCEEDED"
    assert saga.charges("LOST-2") == 1
    assert saga.runtime.sends[("ChargePaymentFunction", "provider.charge")] == 2
    [intent] = saga.provider.payment_intents("LOST-2")  # the second send was a replay
    [request] = [r for r in saga.runtime.charge_requests.requests if r.order_id == "LOST-2"]
    assert request.outcome == "charged"
    assert request.idempotency_key == "payment-saga/LOST-2/attempt-1"
    assert intent["status"] == "succeeded"


def test_a_claim_killed_in_flight_lands_after_release_claim_ran(saga: Saga) -> None:
    # Every try of the Claim step dies with its write sent; the writes land once Release Claim ran.
    saga.faults.add(
        Fault(
            "ClaimOrderFunction",
            "after:dynamodb.UpdateItem",
            "late_write",
            times=4,
            order_id="LATE-1",
            lands_after="ReleaseClaimFunction",
            dies_as="timeout",
            seconds=30,
        )
    )

    result = saga.driver.wait(saga.driver.start(order("LATE-1"), name="late-1"))
    saga.faults.late.land_all()

    assert result.outcome == "ClaimFailed"
    claim_errors = [r.error_type for r in saga.runtime.records if r.function == "ClaimOrderFunction"]
    assert claim_errors == ["Sandbox.Timedout"] * 4
    [release] = [r for r in saga.runtime.records if r.function == "ReleaseClaimFunction"]
    assert len(saga.faults.late.landings) == 4
    assert all(landed_at >= release.ended_at for _, landed_at in saga.faults.late.landings)
    assert saga.faults.late.failed == []  # each reached DynamoDB (whether its condition let it in)
    assert saga.charges("LATE-1") == 0


def test_a_late_write_lands_on_its_timer_when_nothing_triggers_it(saga: Saga) -> None:
    saga.faults.add(
        Fault(
            "MarkCompleteFunction",
            "after:dynamodb.UpdateItem",
            "late_write",
            order_id="LATE-2",
            seconds=0.2,
        )
    )

    result = saga.driver.wait(saga.driver.start(order("LATE-2"), name="late-2"))
    deadline_wait = saga.faults.late
    deadline_wait.land_all()

    # Mark Complete died with its write sent; its retry completed the claim; the first write
    # landed later and, re-entrant for the same token and charge, changed nothing.
    assert result.status == "SUCCEEDED"
    assert [r.error_type for r in saga.runtime.records if r.function == "MarkCompleteFunction"] == [
        "Runtime.ExitError",
        None,
    ]
    assert len(saga.faults.late.landings) == 1
    assert (saga.driver.claim("LATE-2") or {})["status"] == "COMPLETED"
    assert saga.charges("LATE-2") == 1


def _request(sent: int, attempt: str, key: str, token: str, answered: int, outcome: str) -> ChargeRequest:
    return ChargeRequest(sent, "O-1", attempt, key, token, answered, outcome)


def test_the_audit_catches_a_declined_attempt_sent_again() -> None:
    declined = _request(1, "initial", "k/attempt-1", "exec-a", 2, "declined")
    same_step_again = _request(3, "initial", "k/attempt-1", "exec-a", 4, "declined")  # a retry: fine
    retry = _request(5, "retry-1", "k/attempt-2", "exec-b", 6, "declined")
    late_copy = _request(7, "initial", "k/attempt-3", "exec-c", 8, "declined")  # hole 2
    concurrent = _request(0, "initial", "k/attempt-1", "exec-z", 9, "declined")  # sent before: fine

    problems = declined_attempts_sent_again([declined, same_step_again, retry, late_copy, concurrent])

    assert problems == [
        "declined attempt sent again: O-1 paymentAttempt 'initial' was declined under k/attempt-1"
        " and sent again under k/attempt-3"
    ]


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        ({"point": "before:dynamodb.UpdateItem", "kind": "lost_answer"}, "only at 'after:<call>'"),
        ({"point": "start", "kind": "late_write"}, "only at 'after:<call>'"),
        ({"point": "after:dynamodb.GetItem", "kind": "late_write"}, "needs a write"),
        ({"point": "after:dynamodb.UpdateItem", "kind": "late_write", "dies_as": "oom"}, "dies_as"),
    ],
)
def test_a_lost_answer_or_late_write_that_cannot_happen_is_refused(
    fault: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        Fault("ClaimOrderFunction", **fault)
