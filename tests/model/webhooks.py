"""Stripe's webhook deliveries in the model: the emulator's events, the real consumer applying them.

Every PaymentIntent write of the emulator calls its webhook sender's ``changed`` hook, which turns a
change of status into a Stripe Event (``payment_intent.succeeded``, ``payment_failed``,
``processing``, ``requires_action``, ``canceled``) for each endpoint subscribed to it.
:class:`ModelWebhooks` is that sender, the emulator's own (the same rules: one event per change of
status, ``payment_failed`` only for a confirm that failed, the endpoint's ``enabled_events``), with
its delivery thread replaced by the model's outbox: each event waits in ``State.outbox`` until the
model delivers it, any number of times, in any order, interleaved with every other step, or loses it.

A delivery is one invocation of the real webhook consumer (``handlers.webhook_consumer``) on one SQS
record whose body is the doorbell the receiver queues once the signature is verified (made by the
receiver's own ``doorbell_of_event``; the receiver's signature check is not modelled). So each
delivery reads the PaymentIntent from the emulator with the stack's key and makes the domain's
decision on Stripe's answer (``payment_saga.webhooks.answer_doorbell``) and its conditional write on
moto; a delivery the consumer fails (its partial batch response) stays in the outbox, as SQS
delivers it again. The events a create makes may also be delivered inside the Charge invocation that
sent it, between the provider applying it and the step reading its answer (``World._on_provider``).

The provider's side: no test payment method settles later in the emulator, so the model stands two
of its succeeding test cards for the methods that do (:data:`FORCED_OUTCOMES`): the emulator's
``force_outcome`` makes their confirm end ``processing`` (a SEPA or ACH debit) or ``requires_action``,
and a ``processing`` PaymentIntent settles later, as succeeded or failed, by the model's ``settle``
action (the emulator's own ``set_status``, as its settlement timer calls it).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from payment_saga.webhooks import PAYMENT_INTENT_EVENTS, doorbell_of_event
from saga_local.stripe_emulator.webhooks import WebhookSender

if TYPE_CHECKING:
    from collections.abc import Callable

#: A payment method whose confirm ends ``processing``: a bank debit (SEPA, ACH) that settles later.
DEBIT = "pm_card_visa_debit"
#: A payment method whose confirm ends ``requires_action`` (the provider client then cancels it).
NEEDS_ACTION = "pm_card_mastercard"
#: The status the model forces on the confirm of each stand-in payment method.
FORCED_OUTCOMES = {DEBIT: "processing", NEEDS_ACTION: "requires_action"}
#: How a ``processing`` PaymentIntent settles: the status the emulator moves it to.
SETTLEMENTS = {"succeeded": "succeeded", "failed": "requires_payment_method"}

WEBHOOK_QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:stripe-webhooks"


class ModelWebhooks(WebhookSender):
    """The emulator's webhook sender, delivering into the model's outbox instead of over HTTP.

    ``outbox()`` is the model's list the events join; ``sent_status()`` its dict of the last status an
    event was sent for per PaymentIntent (the sender's own bookkeeping, kept in the model's state
    so that it is saved and restored with it).
    """

    def __init__(
        self,
        clock: Callable[[], float],
        outbox: Callable[[], list[dict[str, Any]]],
        sent_status: Callable[[], dict[str, str]],
    ) -> None:
        super().__init__(clock)
        self._outbox = outbox
        self._status_of = sent_status
        self._sent_status = sent_status()
        self.register("https://webhooks.model/stripe", sorted(PAYMENT_INTENT_EVENTS))

    def restored(self) -> None:
        """The model's state was restored: follow its bookkeeping, forget the events made since."""
        self._sent_status = self._status_of()
        self._events.clear()

    def _start(self) -> None:
        """No delivery thread: the model delivers."""

    def _schedule(self, endpoint_id: str, event: dict[str, Any]) -> None:
        del endpoint_id  # one endpoint
        self._outbox().append(json.loads(json.dumps(event)))


def forced_outcome(body: bytes) -> str | None:
    """The status the model forces on a create request's confirm (by its ``payment_method``), or None."""
    methods = parse_qs(body.decode()).get("payment_method") or []
    return FORCED_OUTCOMES.get(methods[0]) if methods else None


def event_key(event: dict[str, Any]) -> list[Any]:
    """What of an event in the outbox decides its delivery (its id last: the explorer renames ids)."""
    intent = event["data"]["object"]
    return [
        event["type"],
        intent["id"],
        intent["status"],
        (intent.get("metadata") or {}).get("attempt"),
        intent["amount"],
        event["id"],
    ]


def forged_succeeded(attempt: int, amount: int, currency: str, now: int) -> dict[str, Any]:
    """A ``payment_intent.succeeded`` someone made up: the order's id, attempt, amount and currency
    (none of them secret), a PaymentIntent id the provider never issued, no signature."""
    return {
        "id": "evt_forgedByTheModel0",
        "object": "event",
        "type": "payment_intent.succeeded",
        "created": now,
        "livemode": False,
        "data": {
            "object": {
                "id": "pi_forgedByTheModel0",
                "object": "payment_intent",
                "status": "succeeded",
                "amount": amount,
                "currency": currency.lower(),
                "metadata": {"orderId": "ORDER-1", "attempt": str(attempt)},
            }
        },
    }


def describe(event: dict[str, Any]) -> str:
    """``processing of pi_... (attempt 1)``, for the trace."""
    intent = event["data"]["object"]
    attempt = (intent.get("metadata") or {}).get("attempt")
    return f"{event['type'].removeprefix('payment_intent.')} of {intent['id']} (attempt {attempt})"


def sqs_record(event: dict[str, Any], number: int, now: int, *, planted: bool = False) -> dict[str, Any]:
    """The webhook queue's SQS record the consumer receives for one delivery of ``event`` (``planted``:
    the whole event, as a sender other than the receiver would queue it)."""
    # What the receiver queues of a verified event (its own function and line): the doorbell.
    body = event if planted else doorbell_of_event(event).to_message()
    return {
        "messageId": f"webhook-{number:06d}",
        "receiptHandle": f"receipt-webhook-{number:06d}",
        "body": json.dumps(body, sort_keys=True),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(now * 1000)},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": WEBHOOK_QUEUE_ARN,
        "awsRegion": "us-east-1",
    }
