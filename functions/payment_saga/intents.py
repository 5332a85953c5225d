"""What Stripe says about one PaymentIntent, read by its id with the stack's own key.

The webhook consumer, the charge step and the sweeper's settlement backstop decide on this, never on
what a queued message or a row claims: the key reads only the stack's own account, so another
account's PaymentIntent, or an id nobody created, is never read at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class IntentReading:
    """One PaymentIntent as Stripe answers ``GET /v1/payment_intents/{id}`` with the stack's own key.

    What the webhook consumer, the charge step and the sweeper decide on instead of anything a message
    or a row claims: the key reads only the stack's own account, so a PaymentIntent of another account
    (or an id nobody created) is never read at all (``StripeProvider.retrieve_intent``
    answers None). ``order_id`` and ``attempt`` come from the metadata the Charge step writes (None when
    absent or malformed: not this saga's). ``failed_after_confirm`` is true when the PaymentIntent
    failed for good: ``canceled``, or back in ``requires_payment_method`` with the error its confirm
    left (``last_payment_error``).
    """

    payment_intent_id: str
    status: str
    amount: int
    currency: str
    livemode: bool
    created: int
    order_id: str | None
    attempt: int | None
    failed_after_confirm: bool = False


class IntentReader(Protocol):
    """What the rules that follow a known PaymentIntent need from the provider: one read by id."""

    def retrieve_intent(self, payment_intent_id: str) -> IntentReading | None:
        """The PaymentIntent as it is now; None when this account has none by that id.

        Raises PaymentOutcomeUnknown when the read failed (429, 5xx, timeout, our key refused).
        """
        ...


def reading_of(
    payment_intent_id: str,
    status: str,
    amount: int,
    currency: str,
    livemode: bool | None,
    created: int,
    metadata: dict[str, Any],
    *,
    failed: bool,
) -> IntentReading:
    """An :class:`IntentReading` from a PaymentIntent's fields. ``failed``: it carries the error its
    confirm left (``last_payment_error``)."""
    written = metadata.get("attempt")
    # The Charge step writes str(attempt), attempt >= 1; anything else is not this saga's metadata.
    attempt = (
        int(written) if isinstance(written, str) and written.isdigit() and written == str(int(written)) else 0
    )
    order_id = metadata.get("orderId")
    return IntentReading(
        payment_intent_id=payment_intent_id,
        status=status,
        amount=amount,
        currency=currency.upper(),
        livemode=livemode is True,
        created=created,
        order_id=order_id if isinstance(order_id, str) and order_id else None,
        attempt=attempt if attempt >= 1 else None,
        failed_after_confirm=status == "canceled" or (status == "requires_payment_method" and failed),
    )
