"""Outcome events: one event per outcome of an order, on an EventBridge bus the business subscribes to.

Most outcomes are read from the claims table's stream (a transactional outbox): an event is published
for a claim row's *closing transition*, the write that made its ``status`` ``COMPLETED`` or
``RELEASED``, and only for it. The row changed if and only if the event is published (at least once),
whatever path closed it: the saga, a retried step, the sweeper, a tombstone written by the fence of a
failed claim. The state machine's happy path pays no extra transition for it.

Per closing transition (:func:`closing_transition`, then :meth:`OutcomeRelay.relay`):

========================  =========================================================================
row becomes               events
========================  =========================================================================
COMPLETED                 ``OrderCharged``
RELEASED / DECLINED       ``OrderDeclined``
RELEASED / NOT_CHARGED    ``OrderReleased`` (proven never charged), then the order is sent again to
                          the orders queue with a delay and ``OrderRequeued`` is published, while
                          its attempt is below the bound; past it, ``OrderNeedsAttention``.
CLAIMED, awaiting         ``OrderPaymentProcessing`` (not a closing transition and not final: the
settlement                claim stays open until the payment settles, then closes as above)
========================  =========================================================================

The attempt number grows by one each time a released order is claimed again, so it bounds the
re-queues without a counter of its own: an order is tried at most ``max_attempts`` times.

The rare outcomes that leave no closing transition are published where they happen: ``OrderConflict``
and ``OrderNeedsReconciliation`` by the state machine (an ``events:putEvents`` task), ``OrderRejected``
(malformed message) by the start function. Their details are built with :func:`conflict_event_id`
and friends so every event id follows one scheme. See docs/outcome-events.md for the schema.

Delivery is at least once: a relay retried after a failure publishes again. Every event carries a
stable ``eventId`` derived from the transition (never a random id, never the time), so a consumer
deduplicates on it. The relay's events also carry ``sequence``, the row's ``version`` after the
write (every write of ``payment_saga.claims`` adds one), so a consumer finds an order's latest
outcome whatever order the events arrive in; the other publishers' events carry none and never
rank over one.

A change whose images cannot be read as a claim row raises :class:`UnreadableChange` before
anything is sent: retrying cannot help, and the handler parks the record instead of stalling on it.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from payment_saga.claims import Claim, ClaimStatus, ReleaseReason
from payment_saga.clock import Clock, iso_utc, system_clock
from payment_saga.orders import holds_card_number

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

#: A boto3 EventBridge client (no stubs installed for it: boto3-stubs[events] is not a dependency).
EventBridgeClient = Any

#: ``Source`` of every outcome event.
SOURCE = "payment-saga"
#: SQS's longest ``DelaySeconds``.
MAX_DELAY_SECONDS = 900
DEFAULT_MAX_REQUEUE_ATTEMPTS = 5
DEFAULT_REQUEUE_BASE_DELAY_SECONDS = 60


class Outcome(enum.StrEnum):
    """The ``DetailType`` of each outcome event."""

    CHARGED = "OrderCharged"
    DECLINED = "OrderDeclined"
    RELEASED = "OrderReleased"
    REQUEUED = "OrderRequeued"
    NEEDS_ATTENTION = "OrderNeedsAttention"
    CONFLICT = "OrderConflict"
    REJECTED = "OrderRejected"
    NEEDS_RECONCILIATION = "OrderNeedsReconciliation"
    #: The provider settles the payment later (a SEPA or ACH debit): the claim awaits settlement.
    #: Not final: ``OrderCharged`` or ``OrderDeclined`` follows when it settles.
    PAYMENT_PROCESSING = "OrderPaymentProcessing"


#: Outcomes after which nothing more happens to the order without a person or the producer.
#: ``OrderRejected`` is not one: it ends a *message* the saga refused to read, and a refused body
#: proves nothing about any order (whatever ``orderId`` it claims is carried apart, untrusted).
FINAL_OUTCOMES = frozenset({Outcome.CHARGED, Outcome.DECLINED, Outcome.CONFLICT, Outcome.NEEDS_ATTENTION})


#: How a write of the sweeper's settlement check marks the claim: it applies Stripe's answer through the
#: webhook consumer's writes (``webhookEventId``), with this prefix before the check's own id instead
#: of a Stripe event's. Its closures are the sweeper's, not a webhook's.
SETTLEMENT_CHECK_MARK = "settlement-check/"


class ResolvedBy(enum.StrEnum):
    SAGA = "saga"
    SWEEPER = "sweeper"
    WEBHOOK = "webhook"


class OutcomeNotPublished(Exception):
    """EventBridge refused an entry (``FailedEntryCount`` > 0): the caller must fail and be retried."""


class UnreadableChange(ValueError):
    """A claim row's change the relay can never read (an image missing an attribute, a value of the
    wrong type): retrying cannot help, so the record is parked with this as its reason."""


@dataclass(frozen=True)
class OutcomeEvent:
    """One outcome event: its ``DetailType`` and its ``Detail`` (``eventId`` first)."""

    outcome: Outcome
    detail: dict[str, Any]

    @property
    def event_id(self) -> str:
        return str(self.detail["eventId"])

    def entry(self, bus_name: str) -> dict[str, Any]:
        """The ``PutEvents`` entry for this event on ``bus_name``."""
        return {
            "EventBusName": bus_name,
            "Source": SOURCE,
            "DetailType": self.outcome.value,
            "Detail": json.dumps(self.detail, sort_keys=True, separators=(",", ":")),
        }


# -- event ids: one scheme for every publisher -------------------------------------------------


def attempt_event_id(order_id: str, attempt: int, what: str) -> str:
    """``ORDER-1/attempt-2/charged``: one per (order, attempt, outcome)."""
    return f"{order_id}/attempt-{attempt}/{what}"


def needs_reconciliation_event_id(order_id: str, attempt: int) -> str:
    """``ORDER-1/attempt-2/needs-reconciliation``: the attempt whose charge is unknown (the ASL builds it)."""
    return attempt_event_id(order_id, attempt, "needs-reconciliation")


def conflict_event_id(order_id: str, execution_name: str) -> str:
    """``ORDER-1/conflict/<execution name>``: each conflicting delivery is reported once."""
    return f"{order_id}/conflict/{execution_name}"


def rejected_event_id(message_id: str) -> str:
    """``rejected/<SQS MessageId>``: a malformed message may carry no order id at all."""
    return f"rejected/{message_id}"


#: An ``orderId`` as the message schema allows it (``orders.ORDER_ID_PATTERN``), quoted in a JSON body.
_ORDER_ID_IN_BODY = re.compile(r'"orderId"\s*:\s*"([A-Za-z0-9][A-Za-z0-9_.:-]{0,63})"')


def rejected_order_id(body: str) -> str | None:
    """The ``orderId`` a malformed body *claims*, for the event only (a linear regex, no parse).

    Untrusted: the body was refused, so nothing proves it is that order (a buggy or hostile producer
    can name any order, a charged one included). It is published as ``claimedOrderId``, never as
    ``orderId``, for a person tracing a producer's mistake; no consumer may act on it.

    A rejected body may not be JSON at all, or be nested deep enough to break a parser: this never
    decodes it. None when no well-formed id is found, when the body names more than one, or when the
    id holds a card number (the very reason it may have been refused: it must not reach the event).
    """
    found = {match.group(1) for match in _ORDER_ID_IN_BODY.finditer(body)}
    if len(found) != 1:
        return None
    claimed = found.pop()
    return None if holds_card_number(claimed) else claimed


def rejected_event(*, message_id: str, reason: str, claimed_order_id: str | None, now: float) -> OutcomeEvent:
    """``OrderRejected``: the start function dead-lettered a malformed message.

    The event names the message (``messageId``), not an order: ``orderId`` is always null, so a
    consumer keyed on it (cancel, refund, release stock) never acts on a body the saga refused. The
    id the body claims is ``claimedOrderId``, untrusted (:func:`rejected_order_id`).
    """
    return OutcomeEvent(
        Outcome.REJECTED,
        {
            "eventId": rejected_event_id(message_id),
            "orderId": None,
            "claimedOrderId": claimed_order_id,
            "attempt": None,
            "paymentAttempt": None,
            "amount": None,
            "currency": None,
            "chargeId": None,
            "reason": reason,
            "messageId": message_id,
            "occurredAt": iso_utc(now),
            "resolvedBy": ResolvedBy.SAGA.value,
        },
    )


# -- the outbox: closing transitions of a claim row --------------------------------------------


def _status(item: dict[str, Any] | None) -> str | None:
    if not item:
        return None
    value = item.get("status", {}).get("S")
    return str(value) if value is not None else None


def closing_transition(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Whether a write that turned ``old`` into ``new`` (DynamoDB items) closed a claim.

    True when the new row is ``COMPLETED`` or ``RELEASED`` and the old one was not in that same
    status (a row written for the first time included: the tombstone of a fenced claim). A write that
    leaves the status as it was (a resent complete, a fence added to a released row) closes nothing.
    The sweeper's lease row has no ``status`` and never closes.
    """
    status = _status(new)
    if status not in (ClaimStatus.COMPLETED.value, ClaimStatus.RELEASED.value):
        return False
    return _status(old) != status


def settlement_started(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """Whether a write made an open claim await settlement: the new row is ``CLAIMED`` with a
    ``settlementIntentId`` the old one did not have. A resent settlement write (the mark already
    there) starts nothing.
    """
    if _status(new) != ClaimStatus.CLAIMED.value or not (new or {}).get("settlementIntentId"):
        return False
    return not (old or {}).get("settlementIntentId")


def order_message(item: dict[str, Any]) -> dict[str, Any] | None:
    """The order's canonical message kept in the row's ``order`` map, or None (a row written before)."""
    stored = item.get("order", {}).get("M")
    if not stored:
        return None
    message: dict[str, Any] = {}
    for key, value in stored.items():
        if "N" in value:
            message[key] = int(value["N"])
        elif "S" in value:
            message[key] = value["S"]
    return message


def _resolved_by(old: dict[str, Any] | None, new: dict[str, Any]) -> ResolvedBy:
    """The webhook consumer marks its writes with ``webhookEventId``, the sweeper with ``reconciledAt``
    (its reconciliation) or a ``webhookEventId`` of :data:`SETTLEMENT_CHECK_MARK` (its settlement
    check); an earlier write's mark is not this write's."""
    event = new.get("webhookEventId", {}).get("S")
    if event and event != (old or {}).get("webhookEventId", {}).get("S"):
        return ResolvedBy.SWEEPER if event.startswith(SETTLEMENT_CHECK_MARK) else ResolvedBy.WEBHOOK
    mark = new.get("reconciledAt", {}).get("S")
    earlier = (old or {}).get("reconciledAt", {}).get("S")
    return ResolvedBy.SWEEPER if mark and mark != earlier else ResolvedBy.SAGA


@dataclass(frozen=True)
class RequeuePolicy:
    """How a released-never-charged order is sent again: ``max_attempts`` tries in all, backing off.

    The delay doubles from ``base_delay_seconds`` with each attempt, up to SQS's 900 s.
    """

    max_attempts: int = DEFAULT_MAX_REQUEUE_ATTEMPTS
    base_delay_seconds: int = DEFAULT_REQUEUE_BASE_DELAY_SECONDS

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or not 0 <= self.base_delay_seconds <= MAX_DELAY_SECONDS:
            raise ValueError("max_attempts must be >= 1 and base_delay_seconds within 0..900")

    def allows(self, attempt: int) -> bool:
        """Whether an order released at ``attempt`` may be tried again, as attempt ``attempt + 1``."""
        return attempt < self.max_attempts

    def delay(self, attempt: int) -> int:
        """Seconds before the next try of an order released at ``attempt`` (0 for a tombstone, 1, 2...)."""
        return int(min(MAX_DELAY_SECONDS, self.base_delay_seconds * 2 ** max(attempt - 1, 0)))


@dataclass(frozen=True)
class Closed:
    """A closing transition, read from the row's new image (and its old one)."""

    claim: Claim
    resolved_by: ResolvedBy
    occurred_at: str
    order: dict[str, Any] | None
    late_charge_attempt: int | None
    #: The row's ``version`` after this write (None for a row written before rows counted writes).
    sequence: int | None = None

    @classmethod
    def of(cls, old: dict[str, Any] | None, new: dict[str, Any], now: float) -> Closed:
        """Read the transition; raises :class:`UnreadableChange` when the images cannot be read."""
        try:
            claim = Claim.from_item(new)
            stamp = {ClaimStatus.COMPLETED: "completedAt", ClaimStatus.RELEASED: "releasedAt"}.get(
                claim.status, "awaitingSettlementAt"
            )
            late = new.get("lateChargeAttempt", {}).get("N")
            return cls(
                claim=claim,
                resolved_by=_resolved_by(old, new),
                occurred_at=new.get(stamp, {}).get("S") or iso_utc(now),
                order=order_message(new),
                late_charge_attempt=int(late) if late is not None else None,
                sequence=claim.version or None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # A shape error in the row itself: the same record fails the same way on every retry.
            raise UnreadableChange(f"the claim row's new image cannot be read: {exc!r}") from exc

    def event(self, outcome: Outcome, what: str, *, reason: str | None, **extra: Any) -> OutcomeEvent:
        claim = self.claim
        attempt = (
            self.late_charge_attempt if outcome is Outcome.CHARGED and self.late_charge_attempt else None
        )
        attempt = attempt or claim.attempt
        amount = (self.order or {}).get("amount")
        currency = (self.order or {}).get("currency")
        return OutcomeEvent(
            outcome,
            {
                "eventId": attempt_event_id(claim.order_id, attempt, what),
                "orderId": claim.order_id,
                "attempt": attempt,
                "paymentAttempt": claim.payment_attempt,
                "amount": amount,
                "currency": currency,
                "chargeId": claim.charge_id,
                "reason": reason,
                "occurredAt": self.occurred_at,
                "resolvedBy": self.resolved_by.value,
                "sequence": self.sequence,
                **extra,
            },
        )


def read_change(old: Any, new: Any, now: float) -> Closed | None:
    """The closing transition a change of a claim row makes (or the start of a wait for settlement,
    read the same way), or None when it publishes nothing.

    Reads only, sends nothing: what the relay does first, and what a dry run of a replay asks.

    Raises:
        UnreadableChange: the images can never be read as claim rows.
    """
    if new is not None and not isinstance(new, dict):
        raise UnreadableChange(f"the new image is not a DynamoDB item: {type(new).__name__}")
    if old is not None and not isinstance(old, dict):
        raise UnreadableChange(f"the old image is not a DynamoDB item: {type(old).__name__}")
    try:
        closing = new is not None and (closing_transition(old, new) or settlement_started(old, new))
    except (TypeError, AttributeError) as exc:
        raise UnreadableChange(f"the claim row's status cannot be read: {exc!r}") from exc
    if new is None or not closing:
        return None
    return Closed.of(old, new, now)


@dataclass(frozen=True)
class Relayed:
    """What the relay did for one closing transition (for the handler's logs and metrics)."""

    order_id: str
    events: tuple[OutcomeEvent, ...]
    requeued: bool = False
    exhausted: bool = False
    delay_seconds: int | None = None

    @property
    def outcomes(self) -> list[str]:
        return [event.outcome.value for event in self.events]


@dataclass
class OutcomeRelay:
    """Publishes the events of a claim row's closing transition, and re-queues what was never charged.

    Args:
        events: an EventBridge client; ``bus_name``: the outcome bus.
        sqs: an SQS client; ``orders_queue_url``: where a re-queued order goes.
        policy: how often and how late an order is re-queued.
        clock: for ``occurredAt`` when the row has no timestamp of its own.

    Every step is safe to repeat (the stream delivers at least once, and a failed batch is retried):
    events carry stable ids, and a re-queued order sent twice is stopped by its claim.
    """

    events: EventBridgeClient
    bus_name: str
    sqs: SQSClient
    orders_queue_url: str
    policy: RequeuePolicy = field(default_factory=RequeuePolicy)
    clock: Clock = system_clock

    def relay(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> Relayed | None:
        """Handle one change of a claim row; None when it closed nothing.

        Everything is read from the images before anything is sent, so a change that cannot be read
        has done nothing when it raises.

        Raises:
            UnreadableChange: the images can never be read (park the record; retrying cannot help).
            OutcomeNotPublished: an event was refused; nothing after it was done.
            botocore's ClientError: EventBridge or SQS failed; the change must be handled again.
        """
        closed = read_change(old, new, self.clock())
        if closed is None:
            return None
        claim = closed.claim
        if claim.awaiting_settlement:
            processing = closed.event(
                Outcome.PAYMENT_PROCESSING,
                "payment-processing",
                reason="processing",
                paymentIntentId=claim.settlement_intent_id,
                settleBy=iso_utc(claim.settle_by) if claim.settle_by is not None else None,
            )
            return self._published(claim.order_id, processing)
        if claim.status is ClaimStatus.COMPLETED:
            return self._published(claim.order_id, closed.event(Outcome.CHARGED, "charged", reason=None))
        if claim.release_reason is ReleaseReason.DECLINED:
            declined = closed.event(Outcome.DECLINED, "declined", reason=ReleaseReason.DECLINED.value)
            return self._published(claim.order_id, declined)
        released = closed.event(Outcome.RELEASED, "released", reason=ReleaseReason.NOT_CHARGED.value)
        self.publish(released)
        return self._requeue(closed, released)

    def _requeue(self, closed: Closed, released: OutcomeEvent) -> Relayed:
        claim = closed.claim
        why_not = self._cannot_requeue(closed)
        if why_not is not None:
            attention = closed.event(Outcome.NEEDS_ATTENTION, "needs-attention", reason=why_not)
            self.publish(attention)
            return Relayed(claim.order_id, (released, attention), exhausted=True)
        assert closed.order is not None
        delay = self.policy.delay(claim.attempt)
        self.sqs.send_message(
            QueueUrl=self.orders_queue_url,
            MessageBody=json.dumps(closed.order, sort_keys=True),
            DelaySeconds=delay,
            MessageAttributes={
                "requeuedAfterAttempt": {"DataType": "Number", "StringValue": str(claim.attempt)},
                "requeueEventId": {
                    "DataType": "String",
                    "StringValue": attempt_event_id(claim.order_id, claim.attempt, "requeued"),
                },
            },
        )
        requeued = closed.event(
            Outcome.REQUEUED,
            "requeued",
            reason=ReleaseReason.NOT_CHARGED.value,
            nextAttempt=claim.attempt + 1,
            delaySeconds=delay,
            maxAttempts=self.policy.max_attempts,
        )
        self.publish(requeued)
        return Relayed(claim.order_id, (released, requeued), requeued=True, delay_seconds=delay)

    def _cannot_requeue(self, closed: Closed) -> str | None:
        if closed.order is None:
            return "the claim row holds no order message to send again (written before rows kept it)"
        if not self.policy.allows(closed.claim.attempt):
            return (
                f"never charged after {closed.claim.attempt} attempt(s), the most allowed"
                f" (MaxRequeueAttempts {self.policy.max_attempts})"
            )
        return None

    def _published(self, order_id: str, event: OutcomeEvent) -> Relayed:
        self.publish(event)
        return Relayed(order_id, (event,))

    def publish(self, *events: OutcomeEvent) -> None:
        """``PutEvents`` on the bus; raises when any entry was refused."""
        publish(self.events, self.bus_name, *events)


def publish(client: EventBridgeClient, bus_name: str, *events: OutcomeEvent) -> None:
    """Put ``events`` on ``bus_name`` in one call; raise :class:`OutcomeNotPublished` if any is refused."""
    response = client.put_events(Entries=[event.entry(bus_name) for event in events])
    if response.get("FailedEntryCount"):
        failures = [
            f"{event.event_id}: {entry.get('ErrorCode')} {entry.get('ErrorMessage')}"
            for event, entry in zip(events, response.get("Entries", []), strict=False)
            if entry.get("ErrorCode")
        ]
        raise OutcomeNotPublished("; ".join(failures) or "PutEvents refused an entry")
