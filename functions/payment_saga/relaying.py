"""The outcome relay's batch: the claims table's stream records, handled in order, and those parked.

What one change publishes and re-queues is :class:`payment_saga.outcomes.OutcomeRelay`'s. Around it:

* In stream order, and stopping at the first failure (:func:`in_stream_order`): the records of a
  batch are handled one by one; the first that fails is reported in ``batchItemFailures`` with
  every record after it, none of which was touched. Lambda retries from the lowest reported
  sequence number, so an order's events are published in the order its claim changed, whatever
  fails on the way. (Powertools' ``BatchProcessor`` goes on after a failure, which publishes a later
  outcome of the order before an earlier one that is then retried: hence this loop.)
* A transient failure (EventBridge, SQS, a permission) stalls the shard: the mapping retries without
  limit, and ``OutcomeRelayIteratorAgeAlarm`` says how late the events are.
* A record that can never be read (``UnreadableChange``: its image has not the shape of a claim row)
  is parked (:class:`Parked`): sent whole, with its reason, to the parking queue
  (``OutcomeRelayFailureQueue``, alarmed), and counted done, so it does not block the shard forever.
* A record retried after a failure publishes its events again: they carry stable ids (consumers
  deduplicate), and a re-queued order sent twice starts one execution (the start function names it
  after the message's ``requeueEventId``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from payment_saga.outcomes import UnreadableChange

if TYPE_CHECKING:
    from collections.abc import Callable

    from payment_saga.outcomes import OutcomeEvent

#: A reason is for people; keep the attribute small.
MAX_REASON_LENGTH = 1024

StreamRecord = dict[str, Any]


def change_of(record: StreamRecord) -> dict[str, Any]:
    """The record's ``dynamodb`` change; empty when it carries none."""
    change = record.get("dynamodb")
    return change if isinstance(change, dict) else {}


def order_id_in(change: dict[str, Any]) -> str | None:
    """The order a change concerns, from its key, for the parked message and the log (may be absent)."""
    keys = change.get("Keys")
    value = keys.get("orderId") if isinstance(keys, dict) else None
    order_id = value.get("S") if isinstance(value, dict) else None
    return order_id if isinstance(order_id, str) else None


def images(record: StreamRecord) -> tuple[Any, Any]:
    """The change's old and new images.

    Raises:
        UnreadableChange: the record carries no ``dynamodb`` change.
    """
    change = record.get("dynamodb")
    if not isinstance(change, dict):
        raise UnreadableChange("the stream record carries no 'dynamodb' change")
    return change.get("OldImage"), change.get("NewImage")


def published(event: OutcomeEvent) -> dict[str, Any]:
    """What a log line says of an outcome event published (besides its order's id)."""
    return {
        "outcome": event.outcome.value,
        "eventId": event.event_id,
        "attempt": event.detail.get("attempt"),
        "resolvedBy": event.detail.get("resolvedBy"),
    }


def in_stream_order(
    records: list[StreamRecord],
    handle: Callable[[StreamRecord], None],
    stalled: Callable[[StreamRecord, int], None],
) -> list[str]:
    """Handle ``records`` one by one; at the first that fails, call ``stalled(record, records left)``
    (while the failure is being handled, so a log line can carry it) and return the sequence numbers
    of that record and every one after it, to be retried. Empty when every record was handled."""
    for index, record in enumerate(records):
        try:
            handle(record)
        except Exception:  # noqa: BLE001 - any failure stalls here: this record and the rest are retried
            stalled(record, len(records) - index)
            return [str((later.get("dynamodb") or {}).get("SequenceNumber")) for later in records[index:]]
    return []


@dataclass(frozen=True)
class Parked:
    """A record the relay can never read, as it is sent to the parking queue.

    If the send fails the record fails and stalls the shard like any transient failure; once it is
    sent the record is done.
    """

    order_id: str | None
    sequence: str
    reason: str

    @classmethod
    def of(cls, record: StreamRecord, reason: str) -> Parked:
        change = change_of(record)
        return cls(order_id_in(change), str(change.get("SequenceNumber", "")), reason)

    def attributes(self) -> dict[str, Any]:
        """The message attributes: the reason (cut short), the sequence number and the order, if known."""
        return {
            "parkReason": {"DataType": "String", "StringValue": self.reason[:MAX_REASON_LENGTH]},
            "sequenceNumber": {"DataType": "String", "StringValue": self.sequence or "-"},
            "orderId": {"DataType": "String", "StringValue": self.order_id or "-"},
        }
