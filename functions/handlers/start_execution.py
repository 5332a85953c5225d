"""Start Lambda: SQS batch -> one Step Functions execution per valid message.

Which execution a message starts (so that a redelivery re-attaches to it) and what a malformed
message becomes are ``payment_saga.starting``'s. Partial batch responses (``runtime.each_message``):
a message that fails is retried alone, so a poison message never blocks its neighbours.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from handlers.runtime import client, count, each_message, env, log_event, logger, metrics, tracer
from payment_saga.errors import InvalidOrder
from payment_saga.orders import parse_order_body
from payment_saga.outcomes import publish
from payment_saga.starting import Rejection, Start

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext


def record_handler(record: dict[str, Any]) -> None:
    """Start (or re-attach to) one message's execution, or reject the message. Raising marks only
    this record as failed (partial batch response)."""
    try:
        order = parse_order_body(record["body"])
    except InvalidOrder as exc:
        reject(record, Rejection.of(record["messageId"], record["body"], str(exc), now=time.time()))
        return
    attributes = record.get("messageAttributes") or {}
    requeues = int(env("MAX_STATE_MACHINE_REQUEUES"))
    run = Start.of(order, record["messageId"], attributes, max_requeues=requeues)
    sfn = client("stepfunctions")
    try:
        response = sfn.start_execution(
            stateMachineArn=env("STATE_MACHINE_ARN"), name=run.name, input=run.input
        )
    except sfn.exceptions.ExecutionAlreadyExists:
        log_event(
            "execution_already_started", orderId=run.order_id, messageId=run.message_id, execution=run.name
        )
        count("DuplicateSuppressed", Layer="start")
        return
    arn = response["executionArn"]
    log_event("execution_started", orderId=run.order_id, messageId=run.message_id, executionArn=arn)
    count("ExecutionStarted")


def reject(record: dict[str, Any], rejection: Rejection) -> None:
    """``OrderRejected`` on the outcome bus, then the message to the dead-letter queue with its reason
    (and nothing else read from it): in this order, so that a failed publish never leaves a copy
    behind (``payment_saga.starting``)."""
    event = rejection.event
    publish(client("events"), env("OUTCOME_EVENT_BUS_NAME"), event)
    log_event(
        "outcome_published",
        outcome=event.outcome.value,
        eventId=event.event_id,
        messageId=rejection.message_id,
        # Untrusted: the refused body's claim, never logged as the order's id.
        claimedOrderId=event.detail["claimedOrderId"],
    )
    count("OutcomePublished", Outcome=event.outcome.value)
    client("sqs").send_message(
        QueueUrl=env("DEAD_LETTER_QUEUE_URL"),
        MessageBody=record["body"],
        MessageAttributes=rejection.dead_letter_attributes(),
    )
    receives = int(record.get("attributes", {}).get("ApproximateReceiveCount", 0))
    message_id = record["messageId"]
    log_event("message_rejected", messageId=message_id, reason=rejection.reason, receiveCount=receives)
    count("MalformedMessage")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """SQS event source entry point; returns ``batchItemFailures``."""
    return each_message(event, record_handler)
