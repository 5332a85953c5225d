"""Mark Complete's decisions: close the claim once the money moved, or record that it awaits settlement.

* **Complete**: the fenced write that marks this execution's claim ``COMPLETED`` with the charge
  (``ClaimsStore.complete``). It also lands when the claim was completed with this very charge by
  the execution that took the attempt over (the provider replayed the same PaymentIntent to it): the
  order is charged, once, and there is nothing to reconcile, but the completion is the taker's and
  is told apart. Anything else is ``ClaimLost``.
* **Await settlement** (state "Await Settlement"): a payment the provider settles later keeps the
  claim open, fenced on its token, until the PaymentIntent named by Charge Payment's
  ``PaymentProcessing`` settles. When Stripe's webhook settled the attempt first, the write raises
  ``SettledBeforeAwait`` and the execution ends in "Settled Before Await".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from payment_saga.claims import Claim, ClaimsStore
    from payment_saga.errors import SettledBeforeAwait


def settling_intent(error: dict[str, Any]) -> str:
    """The PaymentIntent named by Charge Payment's ``PaymentProcessing`` as the state machine caught it.

    ``error`` is the Catch's ``{"Error", "Cause"}``; ``Cause`` is Lambda's error JSON, whose
    ``errorMessage`` is the JSON the provider client wrote (``payments.PaymentProcessing``).
    """
    message = json.loads(error["Cause"])["errorMessage"]
    intent = json.loads(message)["paymentIntentId"]
    if not isinstance(intent, str) or not intent:
        raise ValueError("PaymentProcessing names no PaymentIntent")
    return intent


def settled_as(exc: SettledBeforeAwait) -> Any:
    """How the webhook closed the claim first (``CHARGED`` or ``DECLINED``), from the error's JSON."""
    return json.loads(str(exc))["settled"]


@dataclass(frozen=True)
class Completed:
    """A claim closed with the charge: by this execution, or by the one that took its attempt over."""

    claim: Claim
    by_takeover: bool

    def output(self, order_id: str, charge: dict[str, Any]) -> dict[str, Any]:
        """The execution's result: ``{"orderId", "status": "CHARGED", "chargeId", "attempt", "amount",
        "currency"}``, the amount and currency as Charge Payment handed them on."""
        return {
            "orderId": order_id,
            "status": "CHARGED",
            "chargeId": self.claim.charge_id,
            "attempt": self.claim.attempt,
            "amount": charge["amount"],
            "currency": charge["currency"],
        }


def complete(store: ClaimsStore, order_id: str, *, token: str, charge_id: str) -> Completed:
    """Mark ``token``'s claim ``COMPLETED`` with ``charge_id``; raises ``ClaimLost`` if it cannot land."""
    claim = store.complete(order_id, token=token, charge_id=charge_id)
    # Our attempt was taken over and the taker completed it with the charge the provider replayed to
    # it: the same PaymentIntent as ours. Told apart: the completion is the taker's.
    return Completed(claim, by_takeover=claim.claim_token != token)


@dataclass(frozen=True)
class Settlement:
    """The Await Settlement step: ``{"orderId", "claimToken", "attempt", "settlement"}``, where
    ``settlement`` is the caught ``PaymentProcessing``."""

    order_id: str
    token: str
    attempt: int
    intent: str

    @classmethod
    def of(cls, event: dict[str, Any]) -> Settlement:
        """Read the step's input; raises ``ValueError`` when the error names no PaymentIntent."""
        return cls(
            event["orderId"], event["claimToken"], int(event["attempt"]), settling_intent(event["settlement"])
        )

    def await_on(self, store: ClaimsStore) -> Claim:
        """Record that the claim awaits the PaymentIntent's settlement; raises ``SettledBeforeAwait``
        when the webhook settled it first, ``ClaimLost`` when the claim is no longer ours."""
        return store.await_settlement(
            self.order_id, token=self.token, attempt=self.attempt, payment_intent_id=self.intent
        )

    def output(self, claim: Claim) -> dict[str, Any]:
        """``{"orderId", "paymentIntentId", "attempt", "settleBy"}``."""
        return {
            "orderId": self.order_id,
            "paymentIntentId": self.intent,
            "attempt": self.attempt,
            "settleBy": claim.settle_by,
        }
