"""Outcome Relay: the claims table's stream -> one outcome event per closing transition (an outbox).

The event source mapping (template.yaml) filters the stream down to writes that made a row
``COMPLETED`` or ``RELEASED`` (``payment_saga.outcomes.closing_transition`` checks again: a filter is
configuration, the rule lives in the domain). For each, ``OutcomeRelay`` publishes the outcome on the
bus and re-queues an order proven never charged, within its bound.

* Partial batch responses (Powertools' batch utility, ``ReportBatchItemFailures``): a record that
  fails is reported by its sequence number and Lambda retries from it; records before it are done.
* A record retried after a failure publishes its events again: they carry stable ids (consumers
  deduplicate), and a re-queued order sent twice is stopped by its claim.
* After the mapping's retries (bisecting the batch on a function error), what still fails goes to
  the on-failure queue: nothing is dropped silently (runbook: docs/runbook.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from handlers.runtime import client, count, env, log_event, logger, metrics, tracer
from payment_saga.outcomes import (
    DEFAULT_MAX_REQUEUE_ATTEMPTS,
    DEFAULT_REQUEUE_BASE_DELAY_SECONDS,
    OutcomeRelay,
    RequeuePolicy,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.outcomes import Relayed

processor = BatchProcessor(event_type=EventType.DynamoDBStreams)


def outcome_relay() -> OutcomeRelay:
    """The relay configured from the environment (clients come from the container's cache)."""
    return OutcomeRelay(
        events=client("events"),
        bus_name=env("OUTCOME_EVENT_BUS_NAME"),
        sqs=client("sqs"),
        orders_queue_url=env("ORDERS_QUEUE_URL"),
        policy=RequeuePolicy(
            max_attempts=int(env("MAX_REQUEUE_ATTEMPTS", str(DEFAULT_MAX_REQUEUE_ATTEMPTS))),
            base_delay_seconds=int(
                env("REQUEUE_BASE_DELAY_SECONDS", str(DEFAULT_REQUEUE_BASE_DELAY_SECONDS))
            ),
        ),
    )


def report(relayed: Relayed) -> None:
    """One log event and metric per outcome published; the re-queue and its exhaustion besides."""
    for event in relayed.events:
        log_event(
            "outcome_published",
            orderId=relayed.order_id,
            outcome=event.outcome.value,
            eventId=event.event_id,
            attempt=event.detail.get("attempt"),
            resolvedBy=event.detail.get("resolvedBy"),
        )
        count("OutcomePublished", Outcome=event.outcome.value)
    if relayed.requeued:
        log_event("order_requeued", orderId=relayed.order_id, delaySeconds=relayed.delay_seconds)
        count("OrderRequeued")
    if relayed.exhausted:
        # Never charged and not tried again: a person must decide (runbook: RequeueExhaustedAlarm).
        logger.error(
            "requeue_exhausted",
            extra={
                "event": "requeue_exhausted",
                "orderId": relayed.order_id,
                "reason": relayed.events[-1].detail.get("reason"),
            },
        )
        count("RequeueExhausted")


def record_handler(record: DynamoDBRecord) -> None:
    """Handle one stream record. Raising marks it (and, for Lambda, those after it) as failed."""
    change: dict[str, Any] = record.raw_event.get("dynamodb") or {}
    relayed = outcome_relay().relay(change.get("OldImage"), change.get("NewImage"))
    if relayed is not None:
        report(relayed)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """DynamoDB stream event source entry point; returns ``batchItemFailures`` (sequence numbers)."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
