"""What the local tests of the outcome relay share: the archived outcome bus, the relay held back and
let go, the parking queue's messages, and a closing row no retry can read."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from saga_local.stack.outcome_log import OutcomeLog
    from tests.helpers import Saga


def log(saga: Saga) -> OutcomeLog:
    assert saga.driver.outcome_log is not None, "the local stack archives the outcome bus"
    return saga.driver.outcome_log


def relay_later(saga: Saga) -> None:
    """Hold the relay back, so that the closing writes made meanwhile reach it in one batch."""
    saga.driver.relay_outcomes = False


def relay_now(saga: Saga, *, timeout: float = 120) -> None:
    saga.driver.relay_outcomes = True
    saga.driver.pump(timeout=timeout)


def parked(saga: Saga) -> list[dict[str, object]]:
    """The parking queue's messages (left there): the record, its reason and its orderId."""
    response = saga.driver.sqs.receive_message(
        QueueUrl=saga.stack.outputs["OutcomeRelayFailureQueueUrl"],
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        VisibilityTimeout=0,
    )
    return [
        {
            "record": json.loads(message["Body"]),
            **{name: value["StringValue"] for name, value in message["MessageAttributes"].items()},
        }
        for message in response.get("Messages", [])
    ]


def put_unreadable_row(saga: Saga, order_id: str) -> None:
    """A row that closes (COMPLETED) but is no claim: no token, no attempt. No retry can read it."""
    saga.driver.dynamodb.put_item(
        TableName=saga.stack.table_name,
        Item={"orderId": {"S": order_id}, "status": {"S": "COMPLETED"}},
    )
