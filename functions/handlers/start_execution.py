"""Start Lambda: SQS batch -> one Step Functions execution per valid message.

* Partial batch responses (Powertools' batch utility): a message that fails is retried alone, so a
  poison message never blocks the ones beside it.
* A malformed message is sent to the dead-letter queue at once, with its reason as a message
  attribute, and deleted from the source queue: retrying it cannot make it valid. The domain's
  parser raises nothing but ``InvalidOrder`` for any body (deep nesting, huge numbers and control
  characters included), so a bad body never fails the record and comes back to be retried until
  the queue's redrive moves it without a reason: it is rejected on its first receipt.
* The execution's name is derived from the SQS MessageId (from ``requeueEventId`` for an order the
  outcome relay re-queued) and its input is a pure function of the
  message, so a redelivery re-attaches to the execution it already started (``StartExecution`` is
  idempotent for the same name and input) or, once that has closed, answers
  ``ExecutionAlreadyExists``: already handled, not failed. This only deduplicates envelopes; a
  producer's duplicate carries a new MessageId and is stopped by the claim.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from handlers.runtime import client, count, env, log_event, logger, metrics, tracer
from payment_saga.errors import InvalidOrder
from payment_saga.execution_names import execution_name
from payment_saga.orders import Order, parse_order_body
from payment_saga.outcomes import publish, rejected_event, rejected_order_id

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

processor = BatchProcessor(event_type=EventType.SQS)

#: A reason is for people; keep the attribute small and never echo the body.
MAX_REASON_LENGTH = 1024


def execution_input(order: Order, message_id: str, requeues: int = 0) -> str:
    """The execution input: deterministic (sorted keys, no clock, no receive count).

    ``requeue`` is how many times the state machine itself already sent this order back to the queue
    (behind another open payment attempt, after a failed Claim step), read from the message, and
    whether it may do so once more: ``next`` is the count its SendMessage writes (a string: SQS Number
    attributes are strings; the state machine reads it from the execution input).
    """
    allowed = requeues < int(env("MAX_STATE_MACHINE_REQUEUES"))
    requeue = {"count": requeues, "next": str(requeues + 1), "allowed": allowed}
    execution = {"order": order.to_message(), "messageId": message_id, "requeue": requeue}
    return json.dumps(execution, sort_keys=True)


def requeue_count(record: SQSRecord) -> int:
    """The ``sagaRequeues`` message attribute the state machine's re-queues set; 0 when absent or bad."""
    attribute = (record.get("messageAttributes") or {}).get("sagaRequeues") or {}
    value = attribute.get("stringValue")
    try:
        return max(int(str(value)), 0) if value is not None else 0
    except ValueError:  # not a number: count it as never re-queued rather than fail the message
        return 0


def start(order: Order, message_id: str, requeue_event_id: str | None = None, *, requeues: int = 0) -> str:
    """Start (or re-attach to) the execution for one message. Returns its name.

    Every copy of one re-queue (``requeue_event_id``) has the same name but its own messageId in the
    input, so a second copy answers ``ExecutionAlreadyExists`` whether the first is running or closed:
    already handled, as for a redelivery.
    """
    name = execution_name(order.order_id, message_id, requeue_event_id)
    sfn = client("stepfunctions")
    try:
        response = sfn.start_execution(
            stateMachineArn=env("STATE_MACHINE_ARN"),
            name=name,
            input=execution_input(order, message_id, requeues),
        )
    except sfn.exceptions.ExecutionAlreadyExists:
        log_event("execution_already_started", orderId=order.order_id, messageId=message_id, execution=name)
        count("DuplicateSuppressed", Layer="start")
        return name
    log_event(
        "execution_started",
        orderId=order.order_id,
        messageId=message_id,
        executionArn=response["executionArn"],
    )
    count("ExecutionStarted")
    return name


def reject(record: SQSRecord, reason: str) -> None:
    """Send a malformed message to the dead-letter queue with its reason (and nothing else read from it)."""
    client("sqs").send_message(
        QueueUrl=env("DEAD_LETTER_QUEUE_URL"),
        MessageBody=record.body,
        MessageAttributes={
            "rejectionReason": {"DataType": "String", "StringValue": reason[:MAX_REASON_LENGTH]},
            "sourceMessageId": {"DataType": "String", "StringValue": record.message_id},
        },
    )
    log_event(
        "message_rejected",
        messageId=record.message_id,
        reason=reason,
        receiveCount=record.attributes.approximate_receive_count,
    )
    count("MalformedMessage")


def record_handler(record: SQSRecord) -> None:
    """Handle one SQS record. Raising marks only this record as failed (partial batch response)."""
    try:
        order = parse_order_body(record.body)
    except InvalidOrder as exc:
        # The event first, then the dead-letter queue: a publish that fails fails the record before
        # any copy is dead-lettered, so its retry sends the one copy (and the same eventId again).
        # The other way round, every failed publish left one more copy behind.
        publish_rejected(record, str(exc))
        reject(record, str(exc))
        return
    start(order, record.message_id, requeue_event_id(record), requeues=requeue_count(record))


def requeue_event_id(record: SQSRecord) -> str | None:
    """The ``requeueEventId`` attribute the outcome relay puts on a re-queued order, if any."""
    attribute = (record.raw_event.get("messageAttributes") or {}).get("requeueEventId") or {}
    value = attribute.get("stringValue")
    return value if isinstance(value, str) and value else None


def publish_rejected(record: SQSRecord, reason: str) -> None:
    """``OrderRejected`` on the outcome bus, before the message is dead-lettered.

    If this fails the record fails and comes back, nothing dead-lettered yet; the event, sent again,
    has the same ``eventId``. Only an outage that outlasts the queue's ``maxReceiveCount`` leaves the
    message to the queue's own redrive, which dead-letters it without a reason (alarmed as any).
    """
    event = rejected_event(
        message_id=record.message_id,
        reason=reason[:MAX_REASON_LENGTH],
        claimed_order_id=rejected_order_id(record.body),
        now=time.time(),
    )
    publish(client("events"), env("OUTCOME_EVENT_BUS_NAME"), event)
    log_event(
        "outcome_published",
        outcome=event.outcome.value,
        eventId=event.event_id,
        messageId=record.message_id,
        # Untrusted: the refused body's claim, never logged as the order's id.
        claimedOrderId=event.detail["claimedOrderId"],
    )
    count("OutcomePublished", Outcome=event.outcome.value)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """SQS event source entry point; returns ``batchItemFailures``."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
