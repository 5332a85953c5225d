"""Outcome Relay: the claims table's stream -> one outcome event per closing transition (an outbox).

The event source mapping (template.yaml) filters the stream; ``payment_saga.outcomes`` decides
what each change publishes and re-queues, ``payment_saga.relaying`` why a batch stops at its first
failure and which records are parked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers.runtime import client, count, dumps, env, log_event, logger, metrics, tracer
from payment_saga import outcomes, relaying

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext


def outcome_relay() -> outcomes.OutcomeRelay:
    """The relay configured from the environment (clients come from the container's cache)."""
    attempts = int(env("MAX_REQUEUE_ATTEMPTS", str(outcomes.DEFAULT_MAX_REQUEUE_ATTEMPTS)))
    delay = int(env("REQUEUE_BASE_DELAY_SECONDS", str(outcomes.DEFAULT_REQUEUE_BASE_DELAY_SECONDS)))
    bus, queue = env("OUTCOME_EVENT_BUS_NAME"), env("ORDERS_QUEUE_URL")
    policy = outcomes.RequeuePolicy(attempts, delay)
    return outcomes.OutcomeRelay(client("events"), bus, client("sqs"), queue, policy)


def report(relayed: outcomes.Relayed) -> None:
    """One log event and metric per outcome published; the re-queue and its exhaustion besides (never
    charged and not tried again: a person must decide, runbook: RequeueExhaustedAlarm)."""
    for event in relayed.events:
        log_event("outcome_published", orderId=relayed.order_id, **relaying.published(event))
        count("OutcomePublished", Outcome=event.outcome.value)
    if relayed.requeued:
        log_event("order_requeued", orderId=relayed.order_id, delaySeconds=relayed.delay_seconds)
        count("OrderRequeued")
    if relayed.exhausted:
        reason = relayed.events[-1].detail.get("reason")
        logger.error(
            "requeue_exhausted",
            extra={"event": "requeue_exhausted", "orderId": relayed.order_id, "reason": reason},
        )
        count("RequeueExhausted")


def record_handler(record: dict[str, Any]) -> None:
    """Handle one stream record; raising stops the batch there (this record and the rest are retried)."""
    try:
        relayed = outcome_relay().relay(*relaying.images(record))
    except outcomes.UnreadableChange as exc:
        park(record, str(exc))
        return
    if relayed is not None:
        report(relayed)


def park(record: dict[str, Any], reason: str) -> None:
    """Send a record the relay can never read to the parking queue, whole, with its reason (once sent,
    the record is done: ``saga replay-parked`` replays it; runbook: OutcomeRelayFailed)."""
    parked = relaying.Parked.of(record, reason)
    queue = env("PARKED_RECORDS_QUEUE_URL")
    client("sqs").send_message(
        QueueUrl=queue, MessageBody=dumps(record), MessageAttributes=parked.attributes()
    )
    where = {"orderId": parked.order_id, "sequenceNumber": parked.sequence}
    logger.error("record_parked", extra={"event": "record_parked", **where, "reason": reason})
    count("OutcomeRecordParked")


def in_stream_order(records: list[dict[str, Any]]) -> PartialItemFailureResponse:
    """Handle ``records`` one by one; at the first that fails, report it and every one after it."""
    retried = relaying.in_stream_order(records, record_handler, _stalled)
    return {"batchItemFailures": [{"itemIdentifier": sequence} for sequence in retried]}


def _stalled(record: dict[str, Any], left: int) -> None:
    change = relaying.change_of(record)
    where = {"orderId": relaying.order_id_in(change), "sequenceNumber": change.get("SequenceNumber")}
    logger.exception("relay_stalled", extra={"event": "relay_stalled", **where, "recordsLeft": left})
    count("OutcomeRelayStalled")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """DynamoDB stream event source entry point; returns ``batchItemFailures`` (sequence numbers)."""
    return in_stream_order(list(event.get("Records") or []))
