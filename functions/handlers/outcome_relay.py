"""Outcome Relay: the claims table's stream -> one outcome event per closing transition (an outbox).

The event source mapping (template.yaml) filters the stream down to writes that made a row
``COMPLETED`` or ``RELEASED``, or made an open claim await settlement
(``payment_saga.outcomes.read_change`` checks again: a filter is configuration, the rule lives in the
domain). For each, ``OutcomeRelay`` publishes the outcome on the bus and re-queues an order proven
never charged, within its bound.

* In stream order, and stopping at the first failure: the records of a batch are handled one by
  one; the first that fails is reported in ``batchItemFailures`` with every record after it, none
  of which was touched. Lambda retries from the lowest reported sequence number, so an order's
  events are published in the order its claim changed, whatever fails on the way. (Powertools'
  ``BatchProcessor`` goes on after a failure, which publishes a later outcome of the order before
  an earlier one that is then retried: hence this loop.)
* A transient failure (EventBridge, SQS, a permission) stalls the shard: the mapping retries without
  limit, and ``OutcomeRelayIteratorAgeAlarm`` says how late the events are.
* A record that can never be read (``UnreadableChange``: its image has not the shape of a claim row)
  is parked: sent whole, with its reason, to the parking queue (``OutcomeRelayFailureQueue``,
  alarmed), and counted done, so it does not block the shard forever.
* A record retried after a failure publishes its events again: they carry stable ids (consumers
  deduplicate), and a re-queued order sent twice starts one execution (the start function names it
  after the message's ``requeueEventId``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers.runtime import client, count, dumps, env, log_event, logger, metrics, tracer
from payment_saga.outcomes import (
    DEFAULT_MAX_REQUEUE_ATTEMPTS,
    DEFAULT_REQUEUE_BASE_DELAY_SECONDS,
    OutcomeRelay,
    RequeuePolicy,
    UnreadableChange,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.outcomes import Relayed

#: A reason is for people; keep the attribute small.
MAX_REASON_LENGTH = 1024


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


def record_handler(record: dict[str, Any]) -> None:
    """Handle one stream record; raising stops the batch there (this record and the rest are retried)."""
    change = record.get("dynamodb")
    try:
        if not isinstance(change, dict):
            raise UnreadableChange("the stream record carries no 'dynamodb' change")
        relayed = outcome_relay().relay(change.get("OldImage"), change.get("NewImage"))
    except UnreadableChange as exc:
        park(record, str(exc))
        return
    if relayed is not None:
        report(relayed)


def park(record: dict[str, Any], reason: str) -> None:
    """Send a record the relay can never read to the parking queue, whole, with its reason.

    If the send fails the record fails and stalls the shard like any transient failure; once it
    is sent the record is done. ``saga replay-parked`` replays it (runbook: OutcomeRelayFailed).
    """
    change = _change_of(record)
    sequence = str(change.get("SequenceNumber", ""))
    order_id = _order_id_in(change)
    client("sqs").send_message(
        QueueUrl=env("PARKED_RECORDS_QUEUE_URL"),
        MessageBody=dumps(record),
        MessageAttributes={
            "parkReason": {"DataType": "String", "StringValue": reason[:MAX_REASON_LENGTH]},
            "sequenceNumber": {"DataType": "String", "StringValue": sequence or "-"},
            "orderId": {"DataType": "String", "StringValue": order_id or "-"},
        },
    )
    logger.error(
        "record_parked",
        extra={"event": "record_parked", "orderId": order_id, "sequenceNumber": sequence, "reason": reason},
    )
    count("OutcomeRecordParked")


def _change_of(record: dict[str, Any]) -> dict[str, Any]:
    change = record.get("dynamodb")
    return change if isinstance(change, dict) else {}


def _order_id_in(change: dict[str, Any]) -> str | None:
    """The order a change concerns, from its key, for the parked message and the log (may be absent)."""
    keys = change.get("Keys")
    value = keys.get("orderId") if isinstance(keys, dict) else None
    order_id = value.get("S") if isinstance(value, dict) else None
    return order_id if isinstance(order_id, str) else None


def in_stream_order(records: list[dict[str, Any]]) -> PartialItemFailureResponse:
    """Handle ``records`` one by one; at the first that fails, report it and every one after it."""
    for index, record in enumerate(records):
        try:
            record_handler(record)
        except Exception:  # noqa: BLE001 - any failure stalls here: this record and the rest are retried
            change = _change_of(record)
            logger.exception(
                "relay_stalled",
                extra={
                    "event": "relay_stalled",
                    "orderId": _order_id_in(change),
                    "sequenceNumber": change.get("SequenceNumber"),
                    "recordsLeft": len(records) - index,
                },
            )
            count("OutcomeRelayStalled")
            return {
                "batchItemFailures": [
                    {"itemIdentifier": str((later.get("dynamodb") or {}).get("SequenceNumber"))}
                    for later in records[index:]
                ]
            }
    return {"batchItemFailures": []}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """DynamoDB stream event source entry point; returns ``batchItemFailures`` (sequence numbers)."""
    return in_stream_order(list(event.get("Records") or []))
