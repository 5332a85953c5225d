"""What a verified Stripe PaymentIntent event does to a claim: the webhook's rules, beside the sweeper's.

Stripe pushes every change of a PaymentIntent to the webhook endpoint: at least once, in no
guaranteed order, retried for up to three days. The receiver verifies the signature and queues the
event; this module decides what it means for the order's claim and makes the one conditional write
that follows. It charges nothing and asks the provider nothing: the verified event is the provider's
own statement about one PaymentIntent, and the claim row is the saga's about the attempt.

The event names the order and the attempt in the metadata the Charge step writes on every
PaymentIntent (``metadata[orderId]``, ``metadata[attempt]``), so the claim it concerns is one
strongly consistent read of the base table away (no index: the charge path's rule, invariant 3, is
kept here too, although nothing here can charge).

=============================================  ===========================  ==========================
The event (the PaymentIntent's snapshot)       The claim                    Decision (write)
=============================================  ===========================  ==========================
``succeeded``, the claim's attempt             CLAIMED                      COMPLETE: ``complete``
                                                                            fenced on the holder's
                                                                            token, with this PI
``succeeded``, the claim's attempt             COMPLETED with this PI       LEAVE (a duplicate or a
                                                                            late event)
``succeeded``, the claim's attempt             COMPLETED with another PI    DUPLICATE_CHARGE: no
                                                                            write, alarm, refund one
``succeeded``, the claim's attempt or an       RELEASED, or moved on to a   CHARGE_ON_RELEASED:
earlier one                                    later attempt                ``complete_released``,
                                                                            alarm
``payment_failed`` / ``canceled``, the         CLAIMED, no charge recorded, RELEASE_DECLINED:
claim's attempt, the PI failed for good        awaiting no other PI         ``release`` fenced on the
                                                                            holder's token
``payment_failed`` / ``canceled``              anything else                LEAVE (a succeeded PI of
                                                                            the attempt, or a release,
                                                                            already decided)
``processing``, the claim's attempt            CLAIMED, no charge recorded, AWAIT_SETTLEMENT:
                                               awaiting nothing yet         ``await_settlement``
                                                                            fenced on the holder's
                                                                            token, with this PI
``processing``, ``requires_action``, any       any other                    LEAVE: in flight, not
status that is not final                                                    proof of anything
no ``orderId``/``attempt`` metadata, no        -                            IGNORE: not a PaymentIntent
claim, an attempt the claim never reached                                   of this saga's, or gone
amount or currency other than the claim's      -                            MISMATCH: no write, logged
                                                                            for a person
=============================================  ===========================  ==========================

Why each is safe:

* **Complete.** A verified ``succeeded`` PaymentIntent of the claim's attempt is the proof the
  sweeper looks for, delivered instead of searched. The write is Mark Complete's own, fenced on the
  holder's token: the execution's later Mark Complete (same token, same PaymentIntent: the attempt's
  idempotency key replays that very PaymentIntent) finds it done and succeeds; a takeover since
  (another token) makes the write lose, and the event is decided again on the new row. The lease is
  not checked: the money moved.
* **Release as declined.** A PaymentIntent in ``requires_payment_method`` after its confirm, or
  ``canceled``, charged nothing and never will without another confirm, which only the Charge step
  could send and never does. It is the proof a decline is for the Charge step (invariant 6). The
  release is Release Claim's own write, fenced on the holder's token and payment attempt: the
  execution's own Release Claim (same token, same reason) is re-entrant on it, and the payment
  attempt joins ``declinedAttempts``, so no redelivery of it reaches the provider again. Only while
  no charge is recorded for the attempt: a ``succeeded`` PaymentIntent decided first wins.
* **Await settlement.** A ``processing`` PaymentIntent of the claim's attempt is a payment the
  provider settles later (a SEPA or ACH debit): the claim is kept, as Charge Payment's own "Await
  Settlement" step keeps it (the same write, fenced on the holder's token, re-entrant for the same
  PaymentIntent), so that the sweeper does not poll it before its settle-by deadline, even when the
  execution never learned the answer. It writes no charge and releases nothing: only the
  ``succeeded`` or ``payment_failed`` event that follows ends it. A claim awaiting a PaymentIntent is
  released only on the failure of that very PaymentIntent.
* **Reordered, duplicated, late.** Every rule reads the claim as it is now and moves it only forward
  (CLAIMED to COMPLETED or RELEASED), never back: a ``processing`` after ``succeeded`` is LEAVE, a
  second delivery of any event meets the row its first one wrote and is LEAVE, a ``payment_failed``
  after the claim completed is LEAVE.
* **Two charges.** A second succeeded PaymentIntent for one attempt (the provider applied two creates
  of the attempt) and a succeeded PaymentIntent for an attempt whose claim was released are the
  sweeper's two alarms (``DuplicateCharge``, ``ChargeOnReleasedClaim``), raised here as soon as the
  provider says so. A charge on a released claim also completes it (``complete_released``) so that
  no later attempt charges the order again.
* **Not ours.** Without the saga's metadata, or without a claim (another system's PaymentIntent on
  the same account, a claim long expired), an event changes nothing. The same for an attempt the
  claim has not reached: nothing this saga sent can carry it.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from payment_saga.claims import ClaimStatus, ReleaseReason
from payment_saga.errors import ClaimLost

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from payment_saga.claims import Claim, ClaimsStore
    from payment_saga.intents import IntentReader, IntentReading

#: The event types the endpoint is subscribed to and the consumer acts on (docs/webhooks.md lists
#: them for the Stripe dashboard). Any other type is answered 200 by the receiver and dropped.
PAYMENT_INTENT_EVENTS = frozenset(
    {
        "payment_intent.succeeded",
        "payment_intent.payment_failed",
        "payment_intent.canceled",
        "payment_intent.processing",
        "payment_intent.requires_action",
    }
)
#: The event types whose PaymentIntent, failed for good, proves that nothing was charged.
_FAILURE_EVENTS = frozenset({"payment_intent.payment_failed", "payment_intent.canceled"})
#: Statuses in which a PaymentIntent has not charged and cannot without a further confirm of ours.
FAILED_STATUSES = frozenset({"requires_payment_method", "canceled"})
#: A row that changed between the read and the write is read and decided again, at most this often.
MAX_ROUNDS = 3


class WebhookOutcome(enum.StrEnum):
    """What one PaymentIntent event did (or would do) to its order's claim."""

    COMPLETED = "completed"  # the claim is COMPLETED with the event's PaymentIntent
    AWAITING_SETTLEMENT = "awaiting_settlement"  # the claim is kept, awaiting the PaymentIntent's settlement
    RELEASED = "released"  # the claim is RELEASED as DECLINED
    LEFT = "left"  # nothing to do: in flight, a duplicate, late, or decided already
    IGNORED = "ignored"  # not this saga's PaymentIntent, or no claim to act on
    NOT_FOUND = "not_found"  # Stripe has no such PaymentIntent in this account: forged, or another account's
    MISMATCH = "mismatch"  # names the order but not its amount or currency: a person looks
    DUPLICATE_CHARGE = "duplicate_charge"  # a second succeeded PaymentIntent for one attempt: refund one
    CHARGE_ON_RELEASED = "charge_on_released"  # charged, but the attempt's claim was released: alarm
    WRONG_MODE = "wrong_mode"  # a live event for a test stack, or a test event for a live one: refused


@dataclass(frozen=True)
class PaymentIntentEvent:
    """The parts of a verified Stripe ``payment_intent.*`` event that the rules read.

    ``order_id`` and ``attempt`` come from the metadata the Charge step writes (None when absent or
    malformed: not this saga's). ``created`` is the event's time (Unix seconds, Stripe's clock).
    """

    event_id: str
    type: str
    payment_intent_id: str
    status: str
    amount: int
    currency: str
    created: int
    order_id: str | None
    attempt: int | None
    livemode: bool = False
    #: Read from Stripe: the PaymentIntent failed for good after its confirm (``canceled``, or
    #: ``requires_payment_method`` with the confirm's ``last_payment_error``), whatever the event's type.
    confirmed_failure: bool = False

    @property
    def failed_for_good(self) -> bool:
        """The PaymentIntent charged nothing and never will without a further confirm of ours."""
        return self.status in FAILED_STATUSES and (self.type in _FAILURE_EVENTS or self.confirmed_failure)


@dataclass(frozen=True)
class Doorbell:
    """What the receiver queues of a verified event: what identifies it, nothing the rules decide on.

    The consumer reads the PaymentIntent it names from Stripe with the stack's own key and decides on
    that answer (:func:`answer_doorbell`). So a body planted on the queue, replayed, reordered or
    of another account can at most make the consumer read a PaymentIntent: what Stripe answers about
    it is the only thing that moves a claim. No customer data, no client secret is queued.
    """

    event_id: str
    type: str
    payment_intent_id: str
    livemode: bool
    created: int

    def to_message(self) -> dict[str, Any]:
        """The queue message body (JSON)."""
        return {
            "eventId": self.event_id,
            "type": self.type,
            "paymentIntentId": self.payment_intent_id,
            "livemode": self.livemode,
            "created": self.created,
        }


class MalformedEvent(ValueError):
    """The event's JSON has not the shape of a Stripe PaymentIntent event."""


def parse_event(event: Mapping[str, Any]) -> PaymentIntentEvent:
    """A Stripe event object (``{"id", "type", "created", "data": {"object": PaymentIntent}}``).

    Raises :class:`MalformedEvent` when a field the rules need is missing or of the wrong type. The
    metadata is read leniently: an absent or non-numeric ``attempt`` is an event for a PaymentIntent
    this saga did not create, not a malformed event.
    """
    try:
        intent = event["data"]["object"]
        metadata = intent.get("metadata") or {}
        parsed = PaymentIntentEvent(
            event_id=_text(event["id"]),
            type=_text(event["type"]),
            payment_intent_id=_text(intent["id"]),
            status=_text(intent["status"]),
            amount=_integer(intent["amount"]),
            currency=_text(intent["currency"]).upper(),
            created=_integer(event["created"]),
            order_id=_optional_text(metadata.get("orderId")),
            attempt=_attempt(metadata.get("attempt")),
            livemode=event.get("livemode") is True,
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise MalformedEvent(f"not a PaymentIntent event: {type(exc).__name__} {exc}") from None
    if intent.get("object", "payment_intent") != "payment_intent":
        raise MalformedEvent(f"event {parsed.event_id} does not carry a PaymentIntent")
    return parsed


def doorbell_of_event(event: Mapping[str, Any]) -> Doorbell:
    """The :class:`Doorbell` of a verified Stripe ``payment_intent.*`` event (the receiver's).

    Raises :class:`MalformedEvent` when it does not name a PaymentIntent.
    """
    try:
        intent = event["data"]["object"]
        if intent.get("object", "payment_intent") != "payment_intent":
            raise TypeError("the event does not carry a PaymentIntent")
        return _doorbell(event, intent, id_key="id", intent_key="id")
    except (KeyError, TypeError, AttributeError) as exc:
        raise MalformedEvent(f"not a PaymentIntent event: {type(exc).__name__} {exc}") from None


def parse_doorbell(body: Mapping[str, Any]) -> Doorbell:
    """A queued doorbell (:meth:`Doorbell.to_message`), or a whole Stripe event as the receiver queued
    them before it queued doorbells (only its identifiers are read).

    Raises :class:`MalformedEvent` when the body is neither.
    """
    if "data" in body:
        return doorbell_of_event(body)
    try:
        return _doorbell(body, body, id_key="eventId", intent_key="paymentIntentId")
    except (KeyError, TypeError) as exc:
        raise MalformedEvent(f"not a webhook doorbell: {type(exc).__name__} {exc}") from None


def _doorbell(
    fields: Mapping[str, Any], intent: Mapping[str, Any], *, id_key: str, intent_key: str
) -> Doorbell:
    """The one place a :class:`Doorbell` is built: the event's id under ``id_key`` in ``fields``, its
    ``type``, ``livemode`` and ``created`` there too, the PaymentIntent's id under ``intent_key`` in
    ``intent``. Raises the KeyError or TypeError of a missing or mistyped field, read in that order;
    each caller says what the body was not."""
    return Doorbell(
        event_id=_text(fields[id_key]),
        type=_text(fields["type"]),
        payment_intent_id=_text(intent[intent_key]),
        livemode=fields.get("livemode") is True,
        created=_integer(fields["created"]),
    )


def reading_event(
    reading: IntentReading, *, event_id: str, event_type: str | None = None
) -> PaymentIntentEvent:
    """The rules' view of a PaymentIntent as Stripe answered a read of it now.

    ``event_type`` is the doorbell's (what rang); without one (the sweeper's backstop) the type is the
    one Stripe sends for the PaymentIntent's current status. The status, amount, currency, livemode and
    metadata are always Stripe's answer, never the doorbell's.
    """
    if event_type is None:
        event_type = _EVENT_OF_STATUS.get(reading.status, "payment_intent.requires_action")
        if reading.status == "requires_payment_method" and not reading.failed_after_confirm:
            event_type = "payment_intent.requires_action"
    return PaymentIntentEvent(
        event_id=event_id,
        type=event_type,
        payment_intent_id=reading.payment_intent_id,
        status=reading.status,
        amount=reading.amount,
        currency=reading.currency,
        created=reading.created,
        order_id=reading.order_id,
        attempt=reading.attempt,
        livemode=reading.livemode,
        confirmed_failure=reading.failed_after_confirm,
    )


#: The event Stripe sends when a PaymentIntent enters each status (the sweeper's backstop reads a
#: status without an event: it applies what that event would).
_EVENT_OF_STATUS = {
    "succeeded": "payment_intent.succeeded",
    "requires_payment_method": "payment_intent.payment_failed",
    "canceled": "payment_intent.canceled",
    "processing": "payment_intent.processing",
    "requires_action": "payment_intent.requires_action",
}


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {type(value).__name__}")
    return value


def _optional_text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _attempt(value: Any) -> int | None:
    # The Charge step writes str(attempt), attempt >= 1.
    if isinstance(value, str) and value.isdigit() and value == str(int(value)) and int(value) >= 1:
        return int(value)
    return None


@dataclass(frozen=True)
class WebhookDecision:
    """What one event does to its claim, and (when ``applied``) what was written."""

    outcome: WebhookOutcome
    reason: str
    event_id: str
    payment_intent_id: str
    order_id: str | None
    attempt: int | None
    #: The claim as the decision saw it; the write is fenced on it.
    seen: Claim | None = None
    #: The charge the claim holds (the order's) next to a DUPLICATE_CHARGE or CHARGE_ON_RELEASED.
    claim_charge_id: str | None = None
    applied: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "reason": self.reason,
            "eventId": self.event_id,
            "paymentIntentId": self.payment_intent_id,
            "orderId": self.order_id,
            "attempt": self.attempt,
            "claimChargeId": self.claim_charge_id,
            "applied": self.applied,
        }


def decide(event: PaymentIntentEvent, claim: Claim | None) -> WebhookDecision:
    """The decision for ``event`` given its order's claim as it is now (pure; see the module table)."""

    def decided(outcome: WebhookOutcome, reason: str, **extra: Any) -> WebhookDecision:
        return WebhookDecision(
            outcome=outcome,
            reason=reason,
            event_id=event.event_id,
            payment_intent_id=event.payment_intent_id,
            order_id=event.order_id,
            attempt=event.attempt,
            seen=claim,
            **extra,
        )

    pi = event.payment_intent_id
    if event.type not in PAYMENT_INTENT_EVENTS:
        return decided(WebhookOutcome.IGNORED, f"{event.type} is not an event the saga acts on")
    if event.order_id is None or event.attempt is None:
        return decided(WebhookOutcome.IGNORED, f"{pi} carries no saga orderId and attempt: not ours")
    if claim is None:
        return decided(WebhookOutcome.IGNORED, f"no claim for order {event.order_id}: not ours, or expired")
    if event.attempt > claim.attempt:
        return decided(
            WebhookOutcome.IGNORED,
            f"{pi} names attempt {event.attempt}, the claim is at attempt {claim.attempt}: nothing of ours",
        )
    amount, currency, _ = claim.fingerprint.split("|", 2)
    if (event.amount, event.currency) != (int(amount), currency):
        return decided(
            WebhookOutcome.MISMATCH,
            f"{pi} is for {event.amount} {event.currency}, order {event.order_id} for {amount} {currency}",
        )
    current_attempt = event.attempt == claim.attempt
    if event.status == "succeeded":
        return _succeeded(event, claim, current_attempt, decided)
    if event.failed_for_good:
        awaited = claim.settlement_intent_id
        if (
            current_attempt
            and claim.status is ClaimStatus.CLAIMED
            and claim.charge_id is None
            and awaited in (None, event.payment_intent_id)
        ):
            return decided(
                WebhookOutcome.RELEASED, f"{pi} of attempt {event.attempt} is {event.status}: nothing charged"
            )
        return decided(
            WebhookOutcome.LEFT,
            f"{pi} is {event.status}; the claim is {claim.status.value} at attempt {claim.attempt}:"
            " decided already",
        )
    if (
        event.status == "processing"
        and current_attempt
        and claim.status is ClaimStatus.CLAIMED
        and claim.charge_id is None
        and claim.settlement_intent_id is None
    ):
        return decided(
            WebhookOutcome.AWAITING_SETTLEMENT, f"{pi} of attempt {event.attempt} settles later: claim kept"
        )
    return decided(WebhookOutcome.LEFT, f"{pi} is {event.status}: not final, the claim stays as it is")


def _succeeded(
    event: PaymentIntentEvent,
    claim: Claim,
    current_attempt: bool,
    decided: Callable[..., WebhookDecision],
) -> WebhookDecision:
    pi = event.payment_intent_id
    if claim.status is ClaimStatus.COMPLETED and claim.charge_id == pi:
        return decided(WebhookOutcome.LEFT, f"the claim is completed with {pi} already")
    if current_attempt and claim.status is ClaimStatus.CLAIMED:
        return decided(WebhookOutcome.COMPLETED, f"{pi} of attempt {event.attempt} succeeded")
    if current_attempt and claim.status is ClaimStatus.COMPLETED:
        return decided(
            WebhookOutcome.DUPLICATE_CHARGE,
            f"{pi} of attempt {event.attempt} succeeded, and the claim is completed with {claim.charge_id}:"
            " two charges for one attempt, refund one",
            claim_charge_id=claim.charge_id,
        )
    # RELEASED at this attempt, or the order moved on to a later attempt: the release said nothing
    # was charged under this attempt, and the provider says otherwise.
    return decided(
        WebhookOutcome.CHARGE_ON_RELEASED,
        f"{pi} of attempt {event.attempt} succeeded, but the claim is {claim.status.value} at attempt"
        f" {claim.attempt}: check for a second charge and refund it",
        claim_charge_id=claim.charge_id,
    )


def apply(store: ClaimsStore, decision: WebhookDecision) -> WebhookDecision:
    """Make the conditional write ``decision`` leads to; returns it with ``applied`` set.

    Raises:
        ClaimLost: the row changed since the decision read it (the caller decides again).
    """
    seen = decision.seen
    if decision.outcome is WebhookOutcome.COMPLETED:
        assert seen is not None
        store.complete(
            seen.order_id,
            token=seen.claim_token,
            charge_id=decision.payment_intent_id,
            webhook_event=decision.event_id,
        )
    elif decision.outcome is WebhookOutcome.AWAITING_SETTLEMENT:
        assert seen is not None
        store.await_settlement(
            seen.order_id,
            token=seen.claim_token,
            attempt=seen.attempt,
            payment_intent_id=decision.payment_intent_id,
        )
    elif decision.outcome is WebhookOutcome.RELEASED:
        assert seen is not None
        store.release(
            seen.order_id,
            token=seen.claim_token,
            reason=ReleaseReason.DECLINED,
            payment_attempt=seen.payment_attempt,
            webhook_event=decision.event_id,
            payment_intent_id=decision.payment_intent_id,
        )
    elif decision.outcome is WebhookOutcome.CHARGE_ON_RELEASED:
        assert seen is not None
        assert decision.attempt is not None
        try:
            store.complete_released(
                seen.order_id,
                attempt=decision.attempt,
                charge_id=decision.payment_intent_id,
                webhook_event=decision.event_id,
            )
        except ClaimLost:
            # Completed with another charge since (or gone): two charges, and nothing to write.
            # The alarm stands all the same; deciding again would only say so again.
            return decision
    else:
        return decision
    return dataclasses.replace(decision, applied=True)


def handle_event(store: ClaimsStore, event: PaymentIntentEvent, *, livemode: bool = False) -> WebhookDecision:
    """Read the event's claim (strongly consistent), decide, write; decide again if the row moved.

    ``livemode`` is the stack's mode (its API key: ``sk_live_`` or ``sk_test_``). An event of the other
    mode is WRONG_MODE and nothing is read or written: a test payment is no proof about a live
    order, and the other way round, whatever orderId its metadata carries (an endpoint registered,
    or a signing secret copied, in the wrong mode).

    Idempotent: a second delivery meets what the first wrote and is LEFT. Raises :class:`ClaimLost`
    when the row kept changing for :data:`MAX_ROUNDS` reads (the queue delivers the event again).
    """
    if event.livemode != livemode:
        return WebhookDecision(
            outcome=WebhookOutcome.WRONG_MODE,
            reason=_wrong_mode(event.event_id, event.livemode, livemode),
            event_id=event.event_id,
            payment_intent_id=event.payment_intent_id,
            order_id=event.order_id,
            attempt=event.attempt,
        )
    for _ in range(MAX_ROUNDS):
        claim = store.get(event.order_id) if event.order_id else None
        decision = decide(event, claim)
        try:
            return apply(store, decision)
        except ClaimLost:
            continue
    raise ClaimLost(
        f"order {event.order_id}: the claim kept changing while event {event.event_id} was applied"
    )


def answer_doorbell(
    store: ClaimsStore, reader: IntentReader, bell: Doorbell, *, livemode: bool = False
) -> WebhookDecision:
    """Read the PaymentIntent ``bell`` names from Stripe (the stack's own key), then decide and write
    on what Stripe answered (:func:`handle_event`): the webhook is a doorbell, not the news.

    An id this account has no PaymentIntent for (forged, mistyped, another account's) is NOT_FOUND and
    nothing is written; a doorbell or a PaymentIntent of the other mode is WRONG_MODE. Reordered and
    repeated doorbells stop mattering: each reads the PaymentIntent as it is now.

    Raises:
        PaymentOutcomeUnknown: the read failed (429, 5xx, a timeout): nothing was decided, and the
            queue rings again later.
        ClaimLost: the claim kept changing (as :func:`handle_event`).
    """

    def refused(outcome: WebhookOutcome, reason: str) -> WebhookDecision:
        return WebhookDecision(
            outcome=outcome,
            reason=reason,
            event_id=bell.event_id,
            payment_intent_id=bell.payment_intent_id,
            order_id=None,
            attempt=None,
        )

    if bell.livemode != livemode:
        return refused(WebhookOutcome.WRONG_MODE, _wrong_mode(bell.event_id, bell.livemode, livemode))
    reading = reader.retrieve_intent(bell.payment_intent_id)
    if reading is None:
        return refused(
            WebhookOutcome.NOT_FOUND,
            f"Stripe has no PaymentIntent {bell.payment_intent_id} in this account: forged, or another"
            " account's; nothing read from the event is believed",
        )
    event = reading_event(reading, event_id=bell.event_id, event_type=bell.type)
    return handle_event(store, event, livemode=livemode)


def _wrong_mode(event_id: str, event_live: bool, stack_live: bool) -> str:
    return (
        f"event {event_id} is {'live' if event_live else 'test'} mode, the stack"
        f" {'live' if stack_live else 'test'} mode: refused"
    )


# -- what the consumer says ----------------------------------------------------------------------

#: Outcomes a person must look at, logged at ERROR under these names (each counted for its alarm).
ALARMED = {
    WebhookOutcome.DUPLICATE_CHARGE: "duplicate_charge",
    WebhookOutcome.CHARGE_ON_RELEASED: "charge_on_released_claim",
    WebhookOutcome.MISMATCH: "webhook_mismatch",
    WebhookOutcome.WRONG_MODE: "webhook_wrong_mode",
}


@dataclass(frozen=True)
class LogLine:
    """One structured log line: its level (a ``logging`` method's name), its event and its fields."""

    level: str
    event: str
    fields: dict[str, Any]


def log_line(decision: WebhookDecision, event_type: str) -> LogLine:
    """The line that says what one event did, with ``orderId``: ``webhook_<outcome>`` at INFO, a
    PaymentIntent Stripe does not have here at WARNING, and an outcome a person must look at at ERROR
    under its :data:`ALARMED` name, with the charge the claim records (``chargeId``) and, for a second
    charge, the one to refund (``duplicateChargeIds``), as the sweeper logs them."""
    fields: dict[str, Any] = {
        "orderId": decision.order_id,
        "attempt": decision.attempt,
        "eventId": decision.event_id,
        "eventType": event_type,
        "paymentIntentId": decision.payment_intent_id,
        "reason": decision.reason,
        "applied": decision.applied,
    }
    name = ALARMED.get(decision.outcome)
    if name is None:
        level = "warning" if decision.outcome is WebhookOutcome.NOT_FOUND else "info"
        return LogLine(level, f"webhook_{decision.outcome.value}", fields)
    fields["chargeId"] = decision.claim_charge_id
    if decision.outcome is WebhookOutcome.DUPLICATE_CHARGE:
        fields["duplicateChargeIds"] = [decision.payment_intent_id]
    return LogLine("error", name, fields)


# -- the signature -------------------------------------------------------------------------------

#: Stripe's own default tolerance (``stripe.Webhook.DEFAULT_TOLERANCE``): a signed request older than
#: this is refused, so a captured request cannot be replayed later. Stripe signs every retry anew.
DEFAULT_TOLERANCE_SECONDS = 300


def signing_secrets_from_string(raw: str) -> tuple[str, ...]:
    """The endpoint's signing secrets in a secret's string: ``whsec_...`` alone, or JSON
    ``{"signingSecrets": ["whsec_new", "whsec_old"]}`` while a rotation has two valid at once.

    Error messages never quote a secret.
    """
    text = raw.strip()
    if not text:
        raise ValueError("the webhook signing secret is empty")
    if not text.startswith("{"):
        return (text,)
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError("the webhook signing secret looks like JSON but does not parse") from None
    listed = data.get("signingSecrets") if isinstance(data, dict) else None
    if (
        not isinstance(listed, list)
        or not listed
        or not all(isinstance(s, str) and s.strip() for s in listed)
    ):
        raise ValueError('the webhook signing secret is JSON without a "signingSecrets" list of strings')
    return tuple(s.strip() for s in listed)


def signature_valid(payload: str, header: str | None, secrets: tuple[str, ...], *, tolerance: int) -> bool:
    """Whether ``header`` (``Stripe-Signature``) signs ``payload`` with one of ``secrets``, recently.

    The Stripe SDK's own verification (``WebhookSignature.verify_header``: HMAC-SHA256 of
    ``<t>.<payload>``, compared in constant time, ``t`` within ``tolerance`` seconds of now), tried
    with each secret: during a rotation either secret may be the one Stripe signed with.
    """
    import stripe  # only the receiver verifies: the consumer and the rest never load the SDK

    for secret in secrets:
        try:
            stripe.WebhookSignature.verify_header(payload, header, secret, tolerance=tolerance)
        except Exception:  # noqa: BLE001, S112 - whatever the header holds, a failed check is a refusal
            # SignatureVerificationError, and what the SDK raises on a header it cannot even compare
            # (a non-ASCII character: TypeError from hmac.compare_digest): never a function error.
            continue
        return True
    return False
