"""Read the outcome events the saga published: from the archive queue, for tests, reports and ``saga events``.

The tally of a run's events against its orders is the harness's (:mod:`saga_local.harness.outcomes`);
their rendering is the command's (:mod:`saga_local.commands.events`).

The template's ``OutcomeArchive=Enabled`` (the local stack's default) adds a rule that copies every
event of the outcome bus to a queue; each message is the EventBridge event (``id``, ``source``,
``detail-type``, ``time``, ``detail``). Delivery is at least once, so an event may appear twice:
consumers, and every count here, deduplicate on ``detail.eventId``.

* :class:`OutcomeLog` drains the queue into memory (receive, then delete) and keeps everything it
  read, so a test or a report sees every event of its run once the queue is empty again.
* :func:`peek` reads every message without deleting any (each batch hidden while the next is read,
  then all shown again), for a person looking at a stack another process runs (``saga events``):
  fine for the few hundred events a local session makes.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

#: The outcomes after which nothing more happens to an order without a person or the producer
#: (``payment_saga.outcomes.FINAL_OUTCOMES``, by name: this module does not import the functions).
FINAL = frozenset({"OrderCharged", "OrderDeclined", "OrderConflict", "OrderNeedsAttention"})
#: Outcomes on the way to a final one: the order is not over.
INTERIM = frozenset({"OrderReleased", "OrderRequeued", "OrderNeedsReconciliation", "OrderPaymentProcessing"})
#: The end of a *message* the start function refused: it names no order (``orderId`` is null), and
#: the id its body claims (``claimedOrderId``) is untrusted, so it is never an order's outcome.
REJECTED = "OrderRejected"


@dataclass(frozen=True)
class OutcomeEvent:
    """One event as a subscriber receives it."""

    detail_type: str
    detail: dict[str, Any]
    time: str
    event_bus_id: str  # EventBridge's own id of this delivery (differs between duplicates)

    @property
    def event_id(self) -> str:
        return str(self.detail.get("eventId"))

    @property
    def order_id(self) -> str | None:
        value = self.detail.get("orderId")
        return str(value) if value is not None else None

    @property
    def claimed_order_id(self) -> str | None:
        """The order id a rejected body claims: untrusted, for a person only (never counted)."""
        value = self.detail.get("claimedOrderId")
        return str(value) if value is not None else None

    def concerns(self, order_id: str) -> bool:
        """Whether a person asking about ``order_id`` should see this event: the order's own events,
        and the rejections whose body claims it (shown as claims, never as the order's outcome)."""
        return order_id in (self.order_id, self.claimed_order_id)

    @property
    def final(self) -> bool:
        return self.detail_type in FINAL

    @classmethod
    def from_message(cls, body: str) -> OutcomeEvent:
        event = json.loads(body)
        return cls(
            detail_type=str(event.get("detail-type")),
            detail=dict(event.get("detail") or {}),
            time=str(event.get("time", "")),
            event_bus_id=str(event.get("id", "")),
        )

    def line(self) -> str:
        """One line for a person: when, what, which order, which attempt, how much, why."""
        d = self.detail
        when = _second(str(d.get("occurredAt") or self.time))
        parts = [f"{when:<20}", f"{self.detail_type:<25}", f"{d.get('orderId') or '-':<24}"]
        if d.get("attempt") is not None:
            parts.append(f"attempt {d['attempt']}")
        if isinstance(d.get("amount"), int) and d.get("currency"):
            parts.append(_money(d["amount"], str(d["currency"])))
        elif d.get("amount") is not None:
            parts.append(f"{d['amount']} {d.get('currency')}")
        if d.get("chargeId"):
            parts.append(str(d["chargeId"]))
        if d.get("resolvedBy") in ("sweeper", "webhook"):
            parts.append(f"({d['resolvedBy']})")
        if d.get("delaySeconds") is not None:
            parts.append(f"next attempt {d.get('nextAttempt')} in {d['delaySeconds']} s")
        if self.detail_type == REJECTED:
            parts.append(f"message {d.get('messageId')}")
            if self.claimed_order_id is not None:
                parts.append(f"(body claims {self.claimed_order_id}: untrusted, not its outcome)")
        if d.get("reason") and self.detail_type != "OrderCharged":
            parts.append(f"- {d['reason']}")
        return "  ".join(parts)


def _second(stamp: str) -> str:
    """``2026-12-01T18:57:43Z`` for any ISO 8601 time: the relay writes whole seconds, the state
    machine's ``$$.State.EnteredTime`` fractions and an offset, and one column should read as one."""
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        return stamp
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _money(amount: int, currency: str) -> str:
    """15000 BRL as the demo prints it: 150.00 BRL (the currency's own decimals)."""
    from saga_local.output import money

    return money(amount, currency)


def deduplicated(events: Iterable[OutcomeEvent]) -> list[OutcomeEvent]:
    """Each ``eventId`` once (the first delivery), in the order they came."""
    seen: set[str] = set()
    unique = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            unique.append(event)
    return unique


def in_outcome_order(events: Iterable[OutcomeEvent]) -> list[OutcomeEvent]:
    """One order's events ranked as a consumer ranks them, whatever order they arrived in.

    The relay's events carry ``sequence``, the claim row's version after the write they announce: it
    grows with every write of the row, so the higher one is the later outcome. The events of the
    state machine and the start function (``OrderConflict``, ``OrderNeedsReconciliation``,
    ``OrderRejected``) carry none (no claim write made them) and rank below every sequenced event:
    they are never final over one. Ties (the unsequenced among themselves, and the two events of one
    transition, of which at most one is final) keep their arrival order.
    """
    arrived = list(events)

    def rank(index: int) -> tuple[int, int, int]:
        sequence = arrived[index].detail.get("sequence")
        return (0, 0, index) if not isinstance(sequence, int) else (1, sequence, index)

    return [arrived[i] for i in sorted(range(len(arrived)), key=rank)]


class OutcomeLog:
    """Drains the archive queue into memory, keeping every event read (for tests and reports)."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self._events: list[OutcomeEvent] = []
        self._lock = threading.Lock()

    def collect(self) -> list[OutcomeEvent]:
        """Move what the queue holds now into the log; return every event read so far (duplicates too)."""
        with self._lock:
            while True:
                messages = self.sqs.receive_message(
                    QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
                ).get("Messages", [])
                if not messages:
                    break
                self._events.extend(OutcomeEvent.from_message(m["Body"]) for m in messages)
                self.sqs.delete_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
                    ],
                )
            return list(self._events)

    def events(self, order_id: str | None = None) -> list[OutcomeEvent]:
        """Every distinct event (by ``eventId``) read so far, for one order or all."""
        return [e for e in deduplicated(self.collect()) if order_id is None or e.order_id == order_id]

    def counts(self) -> Counter[str]:
        """Distinct events by type."""
        return Counter(e.detail_type for e in self.events())


def peek(sqs: Any, queue_url: str, *, hide_seconds: int = 30) -> list[OutcomeEvent]:
    """Every event on the queue, without deleting any (each delivery once, by EventBridge's id).

    Each batch read is hidden (``hide_seconds``) so that the next receive returns the messages after
    it, not the same ten again; once the queue answers empty, every message read is made visible
    again. A reader that dies half way leaves them hidden for ``hide_seconds`` at most.
    """
    found: dict[str, OutcomeEvent] = {}
    receipts: list[str] = []
    try:
        while True:
            messages = sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=hide_seconds,
                WaitTimeSeconds=0,
            ).get("Messages", [])
            if not messages:
                break
            for message in messages:
                receipts.append(message["ReceiptHandle"])
                found.setdefault(message["MessageId"], OutcomeEvent.from_message(message["Body"]))
    finally:
        for start in range(0, len(receipts), 10):
            batch = receipts[start : start + 10]
            sqs.change_message_visibility_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                    for i, handle in enumerate(batch)
                ],
            )
    return sorted(found.values(), key=_listed)


def _listed(event: OutcomeEvent) -> tuple[str, int, int, bool, float]:
    """Where a person reads it in a listing: by the second it happened (the one its line shows),
    then within that second by the events' own order.

    The relay's events name the claim's version they announce (``sequence``, which grows with every
    write of the row) and its times are whole seconds, so within a second the version orders them,
    and of the two events of one write the final one comes after the interim (a release, then the
    person it calls). The events no claim write made (a conflict, a needs-reconciliation, a
    rejection) follow the relay's of the same second, by their own time: theirs has fractions of a
    second, the relay's was cut to the second, so the two cannot be weighed within it, and an
    ``OrderConflict`` is not listed before the ``OrderCharged`` of the same second only because its
    time says ``.250`` and the charge's says nothing.
    """
    stamp = str(event.detail.get("occurredAt") or event.time)
    sequence = event.detail.get("sequence")
    if isinstance(sequence, int):
        return (_second(stamp), 0, sequence, event.final, 0.0)
    return (_second(stamp), 1, 0, event.final, _instant(stamp))


def _instant(stamp: str) -> float:
    """``stamp`` as seconds since the epoch (0 when it is no ISO 8601 time with a zone)."""
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return 0.0
    return moment.timestamp() if moment.tzinfo is not None else 0.0
