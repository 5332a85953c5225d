"""The start function's decisions: which execution a message starts, with what input, and what a
malformed message becomes.

* The execution's name is derived from the SQS MessageId (from ``requeueEventId`` for an order the
  outcome relay re-queued: :mod:`payment_saga.execution_names`) and its input is a pure function of
  the message, so a redelivery re-attaches to the execution it already started (``StartExecution``
  is idempotent for the same name and input) or, once that has closed, answers
  ``ExecutionAlreadyExists``: already handled, not failed. This only deduplicates envelopes; a
  producer's duplicate carries a new MessageId and is stopped by the claim.
* A malformed message is rejected on its first receipt: ``OrderRejected`` on the outcome bus, then
  the message sent to the dead-letter queue with its reason, and deleted from the source queue:
  retrying it cannot make it valid. The order parser raises nothing but ``InvalidOrder`` for any
  body (deep nesting, huge numbers and control characters included), so a bad body never fails the
  record and comes back until the queue's redrive moves it without a reason.
* The event first, then the dead-letter queue: a publish that fails fails the record before any
  copy is dead-lettered, so its retry sends the one copy (and the same ``eventId`` again). The other
  way round, every failed publish left one more copy behind. Only an outage that outlasts the
  queue's ``maxReceiveCount`` leaves the message to the queue's own redrive, which dead-letters it
  without a reason (alarmed as any).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from payment_saga.execution_names import execution_name
from payment_saga.outcomes import rejected_event, rejected_order_id

if TYPE_CHECKING:
    from collections.abc import Mapping

    from payment_saga.orders import Order
    from payment_saga.outcomes import OutcomeEvent

#: A reason is for people; keep the attribute small and never echo the body.
MAX_REASON_LENGTH = 1024


def execution_input(order: Order, message_id: str, requeues: int, *, max_requeues: int) -> str:
    """The execution input: deterministic (sorted keys, no clock, no receive count).

    ``requeue`` is how many times the state machine itself already sent this order back to the queue
    (behind another open payment attempt, after a failed Claim step), read from the message, and
    whether it may do so once more: ``next`` is the count its SendMessage writes (a string: SQS Number
    attributes are strings; the state machine reads it from the execution input).
    """
    allowed = requeues < max_requeues
    requeue = {"count": requeues, "next": str(requeues + 1), "allowed": allowed}
    execution = {"order": order.to_message(), "messageId": message_id, "requeue": requeue}
    return json.dumps(execution, sort_keys=True)


def requeue_count(attributes: Mapping[str, Any]) -> int:
    """The ``sagaRequeues`` message attribute the state machine's re-queues set; 0 when absent or bad."""
    value = (attributes.get("sagaRequeues") or {}).get("stringValue")
    try:
        return max(int(str(value)), 0) if value is not None else 0
    except ValueError:  # not a number: count it as never re-queued rather than fail the message
        return 0


def requeue_event_id(attributes: Mapping[str, Any]) -> str | None:
    """The ``requeueEventId`` attribute the outcome relay puts on a re-queued order, if any."""
    value = (attributes.get("requeueEventId") or {}).get("stringValue")
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Start:
    """The execution one valid message starts (or re-attaches to)."""

    order_id: str
    message_id: str
    name: str
    input: str

    @classmethod
    def of(cls, order: Order, message_id: str, attributes: Mapping[str, Any], *, max_requeues: int) -> Start:
        """Every copy of one re-queue (``requeueEventId``) has the same name but its own messageId in
        the input, so a second copy answers ``ExecutionAlreadyExists`` whether the first is running or
        closed: already handled, as for a redelivery."""
        name = execution_name(order.order_id, message_id, requeue_event_id(attributes))
        started = execution_input(order, message_id, requeue_count(attributes), max_requeues=max_requeues)
        return cls(order.order_id, message_id, name, started)


@dataclass(frozen=True)
class Rejection:
    """A malformed message: the ``OrderRejected`` event, and the dead-letter queue's attributes."""

    message_id: str
    reason: str
    event: OutcomeEvent

    @classmethod
    def of(cls, message_id: str, body: str, reason: str, *, now: float) -> Rejection:
        """The event names the message and, untrusted, the order the body claims (never logged as
        the order's id); the reason is cut to :data:`MAX_REASON_LENGTH`, the body never echoed."""
        event = rejected_event(
            message_id=message_id,
            reason=reason[:MAX_REASON_LENGTH],
            claimed_order_id=rejected_order_id(body),
            now=now,
        )
        return cls(message_id, reason, event)

    def dead_letter_attributes(self) -> dict[str, Any]:
        """The reason and the source message's id: nothing else read from the message."""
        return {
            "rejectionReason": {"DataType": "String", "StringValue": self.reason[:MAX_REASON_LENGTH]},
            "sourceMessageId": {"DataType": "String", "StringValue": self.message_id},
        }
