"""The order message: parsing, validation and the order's fingerprint.

Rejection reasons never quote a value from the message: they go to logs and to the dead-letter
queue, and a malformed message may carry a card number where a field was expected.

The producer's ``orderId`` is the business key (invariant 4). ``amount`` is an integer in the
currency's minor unit (15000 = 150.00 BRL); a float, a bool or a numeric string is rejected, never
rounded. Unknown fields are ignored so producers can add to the message without breaking us.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from payment_saga.errors import InvalidOrder

#: Stripe's largest amount is 99,999,999 minor units; above it the provider would reject the call.
MAX_AMOUNT = 99_999_999
#: Keys, names and tokens are bounded so a hostile message cannot bloat the claims table.
MAX_ID_LENGTH = 64
ORDER_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}$")
CURRENCY_PATTERN = re.compile(r"^[A-Z]{3}$")
DEFAULT_PAYMENT_ATTEMPT = "initial"


@dataclass(frozen=True)
class Order:
    """A validated order. Immutable: the same message always yields an equal ``Order``."""

    order_id: str
    amount: int
    currency: str
    customer_id: str
    payment_method: str
    payment_attempt: str = DEFAULT_PAYMENT_ATTEMPT

    @property
    def fingerprint(self) -> str:
        """What must match for two messages to be the same order (invariant 8).

        The payment method and the producer's payment attempt are left out on purpose: a
        customer who retries a declined order with another card is still paying the same order.
        """
        return f"{self.amount}|{self.currency}|{self.customer_id}"

    def to_message(self) -> dict[str, Any]:
        """The canonical message form (the execution input's ``order``)."""
        return {
            "orderId": self.order_id,
            "amount": self.amount,
            "currency": self.currency,
            "customerId": self.customer_id,
            "paymentMethod": self.payment_method,
            "paymentAttempt": self.payment_attempt,
        }


def parse_order_body(body: str) -> Order:
    """Parse an SQS message body into an :class:`Order`, or raise :class:`InvalidOrder` with a reason."""
    try:
        data = json.loads(body)
    except (TypeError, ValueError) as exc:
        # The decoder's message quotes the body: keep it out of the reason (it may hold a card number).
        raise InvalidOrder(f"body is not valid JSON (line {getattr(exc, 'lineno', '?')})") from None
    return order_from_message(data)


def order_from_message(data: Any) -> Order:
    """Validate a decoded message. Every rejection names the field and what is wrong with it."""
    if not isinstance(data, dict):
        raise InvalidOrder(f"body must be a JSON object, got {type(data).__name__}")
    order_id = _string(data, "orderId")
    if not ORDER_ID_PATTERN.match(order_id):
        raise InvalidOrder(
            "orderId must be 1-64 characters of letters, digits and _.:- starting with a letter or digit"
        )
    amount = data.get("amount")
    # bool is a subclass of int in Python: True must not become a 1-cent charge.
    if not isinstance(amount, int) or isinstance(amount, bool):
        raise InvalidOrder(f"amount must be an integer in minor units, got {type(amount).__name__}")
    if not 0 < amount <= MAX_AMOUNT:
        raise InvalidOrder(f"amount must be between 1 and {MAX_AMOUNT} minor units")
    currency = _string(data, "currency")
    if not CURRENCY_PATTERN.match(currency):
        raise InvalidOrder("currency must be a three-letter ISO 4217 code in upper case")
    customer_id = _string(data, "customerId")
    payment_method = _string(data, "paymentMethod")
    payment_attempt = data.get("paymentAttempt", DEFAULT_PAYMENT_ATTEMPT)
    if not isinstance(payment_attempt, str) or not 0 < len(payment_attempt) <= MAX_ID_LENGTH:
        raise InvalidOrder(f"paymentAttempt must be a string of 1-{MAX_ID_LENGTH} characters")
    return Order(
        order_id=order_id,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        payment_method=payment_method,
        payment_attempt=payment_attempt,
    )


def _string(data: dict[str, Any], field: str) -> str:
    value = data.get(field)
    if value is None:
        raise InvalidOrder(f"{field} is required")
    if not isinstance(value, str) or not value.strip():
        raise InvalidOrder(f"{field} must be a non-empty string")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidOrder(f"{field} must be at most {MAX_ID_LENGTH} characters")
    return value
