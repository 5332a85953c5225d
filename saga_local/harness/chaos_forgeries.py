"""Chaos's forgeries: webhook messages planted on the webhook queue, none of which may move a claim or money.

Whoever can send to the webhook queue (a role of the account that the queue's policy should have
stopped, an operator's mistaken redrive) can put any body there. The consumer believes none of it:
it reads the PaymentIntent the message names from Stripe with the stack's own key. Once the orders
have run and the sweeper closed what they left, :func:`plant` puts three kinds of forgery on the
queue for the orders already closed (completed, or released as declined: nothing legitimate moves
those claims any more):

* ``queue``: a whole event claiming ``payment_intent.succeeded`` for a declined order's real, failed
  PaymentIntent, with its order, attempt and amount (before the consumer read Stripe, this completed
  a released claim: an order charged with no money taken);
* ``foreign``: a doorbell for a succeeded PaymentIntent of another Stripe account whose metadata
  names our order (a connected account's), which our key cannot read;
* ``amount``: a whole Stripe event, as the receiver once queued them, whose body says ``succeeded``
  for another amount, naming an id Stripe never issued.

:func:`moved` then compares each planted order's claim row and charges with what they were: a row
whose ``version`` moved, or a charge added, is a forgery believed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from saga_local.stack.embedded import EmbeddedStack

#: Another Stripe account, for the foreign forgeries.
FOREIGN_ACCOUNT = "acct_1ChaosForeign"


@dataclass
class Planted:
    """What :func:`plant` put on the queue, and each target's claim and charges as they were."""

    by_kind: dict[str, int] = field(default_factory=dict)
    #: order id -> (claim version, number of charges) before the forgeries.
    before: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())


def plant(stack: EmbeddedStack, order_ids: list[str], *, count: int, seed: int) -> Planted:
    """Plant up to ``count`` forgeries of each kind on the webhook queue (see the module)."""
    claims = stack.driver.claims()
    rng = random.Random(seed)
    declined = [o for o in order_ids if _status(claims.get(o)) == ("RELEASED", "DECLINED")]
    completed = [o for o in order_ids if _status(claims.get(o))[0] == "COMPLETED"]
    planted = Planted()
    queue_url = stack.stack.resolver.refs["WebhookQueue"]
    sqs = stack.client("sqs")
    provider = stack.provider

    def send(order_id: str, kind: str, body: dict[str, Any]) -> None:
        claim = claims[order_id]
        planted.before.setdefault(
            order_id, (int(claim.get("version", 0)), len(provider.charges_for(order_id)))
        )
        sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(body))
        planted.by_kind[kind] = planted.by_kind.get(kind, 0) + 1

    for n, order_id in enumerate(rng.sample(declined, min(count, len(declined)))):
        failed = [i for i in provider.payment_intents(order_id) if i["status"] != "succeeded"]
        if failed:
            # The real PaymentIntent, said to have succeeded: right id, order, attempt and amount.
            intent = {**failed[0], "status": "succeeded", "amount_received": failed[0]["amount"]}
            send(order_id, "queue", _event(f"evt_forged_q{n}", intent))
    for n, order_id in enumerate(rng.sample(declined + completed, min(count, len(declined + completed)))):
        claim = claims[order_id]
        foreign = provider.add_foreign_intent(
            account=FOREIGN_ACCOUNT,
            order_id=order_id,
            attempt=int(claim.get("attempt", 1)),
            amount=int(claim["amount"]),
            currency=str(claim["currency"]),
        )
        send(order_id, "foreign", _doorbell(f"evt_forged_f{n}", foreign))
    for n, order_id in enumerate(rng.sample(completed, min(count, len(completed)))):
        claim = claims[order_id]
        send(
            order_id, "amount", _event(f"evt_forged_a{n}", _another_amount(f"pi_Forged{n}", order_id, claim))
        )
    return planted


def moved(stack: EmbeddedStack, planted: Planted) -> list[str]:
    """The planted orders whose claim row or charges changed since :func:`plant`: forgeries believed."""
    claims = stack.driver.claims()
    found = []
    for order_id, (version, charges) in sorted(planted.before.items()):
        now = int(claims.get(order_id, {}).get("version", 0))
        charged = len(stack.provider.charges_for(order_id))
        if (now, charged) != (version, charges):
            found.append(f"{order_id}: claim version {version} -> {now}, charges {charges} -> {charged}")
    return found


def _status(claim: dict[str, Any] | None) -> tuple[str | None, str | None]:
    if claim is None:
        return None, None
    return claim.get("status"), claim.get("releaseReason")


def _doorbell(event_id: str, payment_intent_id: str) -> dict[str, Any]:
    return {
        "eventId": event_id,
        "type": "payment_intent.succeeded",
        "paymentIntentId": payment_intent_id,
        "livemode": False,
        "created": 1,
    }


def _another_amount(intent_id: str, order_id: str, claim: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": intent_id,
        "object": "payment_intent",
        "status": "succeeded",
        "amount": int(claim["amount"]) + 1,
        "currency": str(claim["currency"]).lower(),
        "metadata": {"orderId": order_id, "attempt": str(claim.get("attempt", 1))},
    }


def _event(event_id: str, intent: dict[str, Any]) -> dict[str, Any]:
    """A whole Stripe event around ``intent``, as the receiver once queued events."""
    return {
        "id": event_id,
        "type": "payment_intent.succeeded",
        "created": 1,
        "livemode": False,
        "data": {"object": intent},
    }
