"""Redriving the orders dead-letter queue is safe: every well-formed order ends charged exactly once,
however many copies come round, and a malformed one goes back to the dead-letter queue with its reason.

End to end on the embedded local stack (moto, the real ASL and handlers, the Stripe emulator); the
redrive's own mechanics (the move task's polling, a crash between send and delete, messages that
come back while it runs) against moto's SQS and botocore's Stubber.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.stub import Stubber

from saga_local.aws.stack import REGION
from saga_local.harness.redrive import DEAD_LETTER_SENDERS_SID, RedriveReport, redrive
from saga_local.stack.embedded import EmbeddedStack
from tests.helpers import failed_receives

if TYPE_CHECKING:
    pass

MALFORMED = "this is not an order"


def order(order_id: str) -> dict[str, Any]:
    return {
        "orderId": order_id,
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_123",
        "paymentMethod": "pm_card_visa",
    }


def redrive_stack(stack: EmbeddedStack, **options: Any) -> RedriveReport:
    return redrive(
        stack.client("sqs"),
        dead_letter_queue_url=stack.stack.dead_letter_queue_url,
        source_queue_url=stack.stack.queue_url,
        source_arn=stack.stack.resolver.attrs[("OrdersQueue", "Arn")],
        dlq_arn=stack.stack.resolver.attrs[("OrdersDeadLetterQueue", "Arn")],
        **options,
    )


def dead_letter(stack: EmbeddedStack, body: dict[str, Any], copies: int) -> None:
    """Messages that failed 5 times land on the dead-letter queue as they were sent, received as often
    (SQS moves the message itself, receive count and all; moto stamps no DeadLetterQueueSourceArn)."""
    failed_receives(stack.client("sqs"), stack.stack.dead_letter_queue_url, json.dumps(body), copies)


def test_redrive_charges_every_well_formed_order_once_and_returns_the_malformed_one(
    stack: EmbeddedStack,
) -> None:
    # Given orders already charged, and a malformed message the start function rejected...
    charged = [order("ORDER-R1"), order("ORDER-R2")]
    for body in charged:
        stack.driver.send(body)
    stack.driver.send(MALFORMED)
    stack.driver.pump()
    assert [len(stack.provider.charges_for(o["orderId"])) for o in charged] == [1, 1]
    # ...and on the dead-letter queue many copies of those, and of orders never processed.
    never = [order("ORDER-R3"), order("ORDER-R4")]
    for body in charged:
        dead_letter(stack, body, copies=6)
    for body in never:
        dead_letter(stack, body, copies=3)

    report = redrive_stack(stack)
    stack.driver.pump()

    assert (report.method, report.moved, report.ok) == ("by-hand", 2 * 6 + 2 * 3 + 1, True)
    for body in charged + never:
        assert len(stack.provider.charges_for(body["orderId"])) == 1, body["orderId"]
        assert (stack.driver.claim(body["orderId"]) or {}).get("status") == "COMPLETED"
    (letter,) = stack.driver.dead_letters()
    assert letter["Body"] == MALFORMED
    assert letter["MessageAttributes"]["rejectionReason"]["StringValue"].startswith("body is not valid JSON")


def test_a_valid_order_put_straight_on_the_dead_letter_queue_is_not_redriven(stack: EmbeddedStack) -> None:
    """Anyone with sqs:SendMessage on the dead-letter queue (its policy stops them on AWS) could drop
    an order there for the next redrive to charge: only what came through the orders queue goes back."""
    sqs = stack.client("sqs")
    sqs.send_message(QueueUrl=stack.stack.dead_letter_queue_url, MessageBody=json.dumps(order("ORDER-INJ")))
    forged_rejection = {"rejectionReason": {"DataType": "String", "StringValue": "amount must be an integer"}}
    sqs.send_message(
        QueueUrl=stack.stack.dead_letter_queue_url,
        MessageBody=json.dumps(order("ORDER-INJ-2")),
        MessageAttributes=forged_rejection,
    )
    dead_letter(stack, order("ORDER-FAILED"), copies=1)

    report = redrive_stack(stack)
    stack.driver.pump()

    assert (report.moved, report.untrusted, report.ok) == (1, 2, False)
    assert len(stack.provider.charges_for("ORDER-FAILED")) == 1
    assert stack.provider.charges_for("ORDER-INJ") == []
    assert stack.provider.charges_for("ORDER-INJ-2") == []
    left = sorted(json.loads(m["Body"])["orderId"] for m in stack.driver.dead_letters())
    assert left == ["ORDER-INJ", "ORDER-INJ-2"], "left where they were, for a person"
    # What the person reads (`saga redrive --apply`): tests/local/test_cli.py's
    # test_redrive_leaves_a_valid_order_nothing_shows_came_through_the_orders_queue.


def test_a_crash_between_send_and_delete_duplicates_and_never_loses(stack: EmbeddedStack) -> None:
    bodies = [order(f"ORDER-C{i}") for i in range(3)]
    for body in bodies:
        dead_letter(stack, body, copies=1)
    sqs = stack.client("sqs")

    def crash(**_: Any) -> None:
        raise ConnectionError("the redrive died after sending")

    sqs.meta.events.register_first("before-call.sqs.DeleteMessageBatch", crash)
    # Visibility 0: the originals the crashed redrive received are visible again at once.
    with pytest.raises(ConnectionError):
        redrive(
            sqs,
            dead_letter_queue_url=stack.stack.dead_letter_queue_url,
            source_queue_url=stack.stack.queue_url,
            source_arn=stack.stack.resolver.attrs[("OrdersQueue", "Arn")],
            dlq_arn=stack.stack.resolver.attrs[("OrdersDeadLetterQueue", "Arn")],
            visibility_timeout=0,
        )
    assert stack.driver.queue_depth() == 3  # the copies made it
    assert stack.driver.queue_depth(stack.stack.dead_letter_queue_url) == 3  # and the originals stayed

    report = redrive_stack(stack)  # run again: the originals go round a second time
    stack.driver.pump()

    assert report.moved == 3
    for body in bodies:
        assert len(stack.provider.charges_for(body["orderId"])) == 1
    assert stack.driver.outcomes()["DUPLICATE"] == 3  # each second copy stopped by the claim
    assert stack.driver.dead_letters() == []


# -- the redrive's mechanics ---------------------------------------------------------------------------


@pytest.fixture
def queues(aws: None) -> dict[str, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    dlq = sqs.create_queue(QueueName="orders-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    source = sqs.create_queue(
        QueueName="orders",
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})},
    )["QueueUrl"]
    source_arn = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return {"dlq": dlq, "dlq_arn": dlq_arn, "source": source, "source_arn": source_arn}


def test_messages_rejected_again_during_the_redrive_are_left_on_the_dead_letter_queue(
    queues: dict[str, str],
) -> None:
    """The start function rejects a malformed copy straight back while the redrive still runs: the
    redrive must leave it there, not send it round forever."""
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.send_message(
        QueueUrl=queues["dlq"],
        MessageBody=MALFORMED,
        MessageAttributes={
            "rejectionReason": {"DataType": "String", "StringValue": "body is not valid JSON (line 1)"},
            "sourceMessageId": {"DataType": "String", "StringValue": "first-delivery"},
            "traceparent": {"DataType": "String", "StringValue": "00-abc-def-01"},
        },
    )
    forwarded: list[dict[str, Any]] = []

    def start_function_rejects(params: dict[str, Any], **_: Any) -> None:
        # As handlers/start_execution.reject would, for each copy as soon as it lands.
        for entry in params["Entries"]:
            forwarded.append(entry)

    def reject_back(parsed: dict[str, Any], **_: Any) -> None:
        for ok in parsed.get("Successful", []):
            sqs.send_message(
                QueueUrl=queues["dlq"],
                MessageBody=MALFORMED,
                MessageAttributes={
                    "rejectionReason": {
                        "DataType": "String",
                        "StringValue": "body is not valid JSON (line 1)",
                    },
                    "sourceMessageId": {"DataType": "String", "StringValue": ok["MessageId"]},
                },
            )

    sqs.meta.events.register("provide-client-params.sqs.SendMessageBatch", start_function_rejects)
    sqs.meta.events.register("after-call.sqs.SendMessageBatch", reject_back)

    report = redrive(
        sqs,
        dead_letter_queue_url=queues["dlq"],
        source_queue_url=queues["source"],
        source_arn=queues["source_arn"],
        dlq_arn=queues["dlq_arn"],
        use_move_task=False,
    )

    assert (report.moved, report.left) == (1, 1)
    # The copy carried the producer's attributes, not the old rejection.
    (entry,) = forwarded
    assert set(entry["MessageAttributes"]) == {"traceparent"}
    # The message that came back is visible again for the next look at the queue.
    (back,) = sqs.receive_message(QueueUrl=queues["dlq"], MessageAttributeNames=["All"])["Messages"]
    assert back["Body"] == MALFORMED


def admits_only_the_start_function(stub: Stubber, queues: dict[str, str]) -> None:
    """The dead-letter queue's policy as the template deploys it: the move task may move it all."""
    policy = {"Statement": [{"Sid": DEAD_LETTER_SENDERS_SID, "Effect": "Deny", "Principal": "*"}]}
    stub.add_response(
        "get_queue_attributes",
        {"Attributes": {"Policy": json.dumps(policy)}},
        {"QueueUrl": queues["dlq"], "AttributeNames": ["Policy"]},
    )


def test_without_the_dead_letter_policy_on_aws_the_redrive_checks_each_message(
    queues: dict[str, str],
) -> None:
    """SQS's move task moves everything: on a dead-letter queue anyone may write to, the redrive moves
    by hand instead and leaves a valid order that was never on the orders queue."""
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.send_message(QueueUrl=queues["dlq"], MessageBody=json.dumps(order("ORDER-INJ")))

    report = redrive(
        sqs,
        dead_letter_queue_url=queues["dlq"],
        source_queue_url=queues["source"],
        source_arn=queues["source_arn"],
        dlq_arn=queues["dlq_arn"],
    )

    assert (report.method, report.moved, report.untrusted) == ("by-hand", 0, 1)
    assert "OnlyTheStartFunctionDeadLetters" in (report.move_task_refused or "")
    assert sqs.receive_message(QueueUrl=queues["source"]).get("Messages") is None


def test_on_aws_the_redrive_is_sqs_own_move_task_followed_to_its_end(queues: dict[str, str]) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    earlier = {
        "SourceArn": queues["dlq_arn"],
        "DestinationArn": queues["source_arn"],
        "Status": "COMPLETED",
        "StartedTimestamp": 1_700_000_000_000,
        "ApproximateNumberOfMessagesMoved": 4,
    }
    ours = {
        "SourceArn": queues["dlq_arn"],
        "DestinationArn": queues["source_arn"],
        "StartedTimestamp": 1_790_000_000_000,
    }
    listed = {"SourceArn": queues["dlq_arn"], "MaxResults": 10}
    waits: list[float] = []
    with Stubber(sqs) as stub:
        admits_only_the_start_function(stub, queues)
        stub.add_response("list_message_move_tasks", {"Results": [earlier]}, listed)
        stub.add_response(
            "start_message_move_task",
            {"TaskHandle": "task-1"},
            {"SourceArn": queues["dlq_arn"], "DestinationArn": queues["source_arn"]},
        )
        stub.add_response(
            "list_message_move_tasks",
            {"Results": [{**ours, "TaskHandle": "task-1", "Status": "RUNNING"}, earlier]},
            listed,
        )
        # Once it has ended, the task handle is no longer listed: ours is the task that was not there before.
        stub.add_response(
            "list_message_move_tasks",
            {"Results": [{**ours, "Status": "COMPLETED", "ApproximateNumberOfMessagesMoved": 7}, earlier]},
            listed,
        )

        report = redrive(
            sqs,
            dead_letter_queue_url=queues["dlq"],
            source_queue_url=queues["source"],
            source_arn=queues["source_arn"],
            dlq_arn=queues["dlq_arn"],
            sleep=waits.append,
        )
        stub.assert_no_pending_responses()

    assert report == RedriveReport(method="move-task", moved=7, task_status="COMPLETED")
    assert waits == [2.0]


def test_a_failed_move_task_is_reported_with_its_reason(queues: dict[str, str]) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    listed = {"SourceArn": queues["dlq_arn"], "MaxResults": 10}
    with Stubber(sqs) as stub:
        admits_only_the_start_function(stub, queues)
        stub.add_response("list_message_move_tasks", {"Results": []}, listed)
        stub.add_response("start_message_move_task", {"TaskHandle": "task-2"}, None)
        failed = {
            "Status": "FAILED",
            "FailureReason": "AccessDenied",
            "StartedTimestamp": 1,
            "SourceArn": "x",
        }
        stub.add_response("list_message_move_tasks", {"Results": [failed]}, listed)

        report = redrive(
            sqs,
            dead_letter_queue_url=queues["dlq"],
            source_queue_url=queues["source"],
            source_arn=queues["source_arn"],
            dlq_arn=queues["dlq_arn"],
            use_move_task=True,
        )

    assert (report.ok, report.task_status, report.failure_reason) == (False, "FAILED", "AccessDenied")
