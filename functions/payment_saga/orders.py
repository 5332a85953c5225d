"""The order message: parsing, validation and the order's fingerprint.

The schema, with every rule and the reason each one exists, is documented for producers in
``docs/order-message.md``; keep the two in step.

Rejection reasons never quote a value from the message: they go to logs and to the dead-letter
queue, and a malformed message may carry a card number where a field was expected.

The producer's ``orderId`` is the business key (invariant 4). ``amount`` is an integer in the
currency's minor unit (15000 = 150.00 BRL); a float, a bool or a numeric string is rejected, never
rounded. Unknown fields are ignored so producers can add to the message without breaking us.

:func:`parse_order_body` raises nothing but :class:`InvalidOrder` for any text it is given: a body
that could not be decoded must reach the dead-letter queue with its reason on its first receipt,
not be retried until the queue's redrive sends it there without one.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, NoReturn

from payment_saga.currencies import (
    MAX_AMOUNT,
    SUPPORTED_CURRENCIES,
    THREE_DECIMAL_CURRENCIES,
    WITHDRAWN_CURRENCIES,
    amount_step,
    minimum_amount,
)
from payment_saga.errors import InvalidOrder

__all__ = [
    "DEFAULT_PAYMENT_ATTEMPT",
    "FIELDS",
    "MAX_AMOUNT",
    "MAX_BODY_CHARACTERS",
    "MAX_ID_LENGTH",
    "MAX_NESTING_DEPTH",
    "Order",
    "holds_card_number",
    "order_from_message",
    "parse_order_body",
]

#: An order is a few hundred characters; unknown fields are allowed, but not without bound.
MAX_BODY_CHARACTERS = 64 * 1024
#: An order is one object deep. Python's JSON decoder recurses once per level and raises
#: RecursionError (not ValueError) somewhere near a thousand: bound the depth before decoding.
MAX_NESTING_DEPTH = 32
#: Keys, names and tokens are bounded so a hostile message cannot bloat the claims table.
MAX_ID_LENGTH = 64
ORDER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}")
CURRENCY_PATTERN = re.compile(r"[A-Z]{3}")
#: Stripe object ids and test tokens (``pm_1Nx...``, ``pm_card_visa``, ``card_...``).
PAYMENT_METHOD_PATTERN = re.compile(r"[A-Za-z0-9_]{1,64}")
#: A Stripe Customer id.
PROVIDER_CUSTOMER_PATTERN = re.compile(r"cus_[A-Za-z0-9_]{1,60}")
#: ``paymentAttempt``: the orderId's characters. It is written into the idempotency key, Stripe
#: metadata, the claims table and every outcome event, so it is no place for free text.
PAYMENT_ATTEMPT_PATTERN = ORDER_ID_PATTERN
DEFAULT_PAYMENT_ATTEMPT = "initial"
#: A card number (PAN) is 13 to 19 digits; producers often write it in groups.
_PAN_DIGITS = range(13, 20)
_PAN_SEPARATORS = frozenset(" -")
#: The fields this module reads; any other is ignored.
FIELDS = frozenset(
    {"orderId", "amount", "currency", "customerId", "paymentMethod", "paymentAttempt", "providerCustomerId"}
)

#: Control characters (NUL, newline, escape...), invisible format characters (zero-width joiners,
#: bidirectional overrides), lone surrogates (which cannot even be encoded to send on) and line or
#: paragraph separators: none belongs in an id, and each makes two ids that look equal differ.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


@dataclass(frozen=True)
class Order:
    """A validated order. Immutable: the same message always yields an equal ``Order``.

    ``provider_customer_id`` is the Stripe Customer (``cus_...``) that a saved payment method is
    attached to; Stripe refuses such a payment method unless the charge names its customer. It is
    None for a payment method that belongs to no customer.
    """

    order_id: str
    amount: int
    currency: str
    customer_id: str
    payment_method: str
    payment_attempt: str = DEFAULT_PAYMENT_ATTEMPT
    provider_customer_id: str | None = None

    @property
    def fingerprint(self) -> str:
        """What must match for two messages to be the same order (invariant 8).

        What is owed and by whom: the amount, the currency and our customer. How it is paid is
        left out on purpose: the payment method, the provider customer it is saved under and the
        producer's payment attempt. A customer who retries a declined order with another card, a
        saved one (with its provider customer) or a one-off one (without), is still paying the
        same order, and must not be reported as a conflict. Leaving them out cannot let one
        attempt be charged twice: the claim gates the attempt, and a second message of the same
        attempt that pays another way is sent with the same idempotency key and other parameters,
        which Stripe refuses (``idempotency_error``: reconciliation, never a second charge).
        """
        return f"{self.amount}|{self.currency}|{self.customer_id}"

    def to_message(self) -> dict[str, Any]:
        """The canonical message form (the execution input's ``order``)."""
        message: dict[str, Any] = {
            "orderId": self.order_id,
            "amount": self.amount,
            "currency": self.currency,
            "customerId": self.customer_id,
            "paymentMethod": self.payment_method,
            "paymentAttempt": self.payment_attempt,
        }
        if self.provider_customer_id is not None:
            message["providerCustomerId"] = self.provider_customer_id
        return message


def parse_order_body(body: str) -> Order:
    """Parse an SQS message body into an :class:`Order`, or raise :class:`InvalidOrder` with a reason."""
    return order_from_message(_decode(body))


def order_from_message(data: Any) -> Order:
    """Validate a decoded message. Every rejection names the field and what is wrong with it."""
    if not isinstance(data, dict):
        raise InvalidOrder(f"body must be a JSON object, got {_json_type(data)}")
    # The card check first, as for paymentAttempt: 4242 4242 4242 4242 breaks the pattern too, and the
    # producer must learn that it sent card data. The key is copied into every log line, event, claim
    # row, execution name and Stripe's metadata, so a card number there is the worst place for one.
    order_id = _no_card_number(_text(data, "orderId"), "orderId")
    if not ORDER_ID_PATTERN.fullmatch(order_id):
        raise InvalidOrder(
            "orderId must be 1-64 characters of letters, digits and _.:- starting with a letter or digit"
        )
    amount = data.get("amount")
    # bool is a subclass of int in Python: True must not become a 1-cent charge.
    if not isinstance(amount, int) or isinstance(amount, bool):
        raise InvalidOrder(f"amount must be an integer in minor units, got {_json_type(amount)}")
    currency = _text(data, "currency")
    if not CURRENCY_PATTERN.fullmatch(currency):
        raise InvalidOrder("currency must be a three-letter ISO 4217 code in upper case")
    if currency in WITHDRAWN_CURRENCIES:
        raise InvalidOrder(f"currency is no longer issued: {WITHDRAWN_CURRENCIES[currency]}")
    if currency not in SUPPORTED_CURRENCIES:
        raise InvalidOrder("currency is not one the payment provider charges in")
    _check_amount(amount, currency)
    customer_id = _no_card_number(_text(data, "customerId"), "customerId")
    payment_method = _no_card_number(_text(data, "paymentMethod"), "paymentMethod")
    if not PAYMENT_METHOD_PATTERN.fullmatch(payment_method):
        raise InvalidOrder("paymentMethod must be a provider payment method id (letters, digits and _)")
    # The card check first: a card number in groups breaks the pattern too, and the producer must
    # learn that it sent card data, not only that a space is not allowed.
    payment_attempt = _no_card_number(
        _text(data, "paymentAttempt", default=DEFAULT_PAYMENT_ATTEMPT), "paymentAttempt"
    )
    if not PAYMENT_ATTEMPT_PATTERN.fullmatch(payment_attempt):
        raise InvalidOrder(
            "paymentAttempt must be 1-64 characters of letters, digits and _.:-"
            " starting with a letter or digit"
        )
    provider_customer_id = _optional_text(data, "providerCustomerId")
    if provider_customer_id is not None:
        _no_card_number(provider_customer_id, "providerCustomerId")
        if not PROVIDER_CUSTOMER_PATTERN.fullmatch(provider_customer_id):
            raise InvalidOrder("providerCustomerId must be a Stripe Customer id (cus_ and letters or digits)")
    return Order(
        order_id=order_id,
        amount=amount,
        currency=currency,
        customer_id=customer_id,
        payment_method=payment_method,
        payment_attempt=payment_attempt,
        provider_customer_id=provider_customer_id,
    )


# -- decoding ------------------------------------------------------------------------------------


def _decode(body: Any) -> Any:
    if not isinstance(body, str):
        raise InvalidOrder(f"body must be text, got {type(body).__name__}")
    if len(body) > MAX_BODY_CHARACTERS:
        raise InvalidOrder(f"body is longer than {MAX_BODY_CHARACTERS} characters")
    if _nesting_depth(body) > MAX_NESTING_DEPTH:
        raise InvalidOrder(f"body nests arrays or objects more than {MAX_NESTING_DEPTH} levels deep")
    try:
        return json.loads(body, object_pairs_hook=_object_without_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        # The decoder's message quotes the body: keep it out of the reason (it may hold a card number).
        raise InvalidOrder(f"body is not valid JSON (line {exc.lineno})") from None
    except ValueError:
        # Python refuses to convert an integer literal of more than 4,300 digits.
        raise InvalidOrder("body is not valid JSON (a number is too long to decode)") from None
    except RecursionError:
        # Unreachable after the depth bound; kept so that no body can ever escape as another error.
        raise InvalidOrder("body nests too deeply to decode") from None


def _nesting_depth(body: str) -> int:
    """How deep arrays and objects nest, counted outside string literals (stops past the bound).

    One pass, character by character: linear in the body whatever it holds (a regular expression
    for string literals backtracks quadratically on a body of escaped quotes).
    """
    depth = deepest = 0
    in_string = escaped = False
    for char in body:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_NESTING_DEPTH:
                break
        elif char in "]}":
            depth -= 1
    return deepest


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # {"amount": 100, "amount": 99999}: the decoder keeps the last, another reader may keep the
    # first. A message that two readers understand differently is never charged.
    seen: set[str] = set()
    for key, _ in pairs:  # one pass with a set: linear, whatever the number of keys
        if key in seen:
            # A field name of ours may be named; any other key is the producer's text.
            raise InvalidOrder(
                f"field {key} appears twice" if key in FIELDS else "a field appears twice in an object"
            )
        seen.add(key)
    return dict(pairs)


def _no_constant(name: str) -> NoReturn:
    # NaN, Infinity and -Infinity: Python's decoder accepts them, JSON does not.
    raise InvalidOrder("body is not valid JSON (NaN or Infinity)")


# -- fields --------------------------------------------------------------------------------------


def _check_amount(amount: int, currency: str) -> None:
    if amount > MAX_AMOUNT:
        raise InvalidOrder(f"amount must be at most {MAX_AMOUNT} minor units")
    minimum = minimum_amount(currency)
    if amount < minimum:
        raise InvalidOrder(
            f"amount is below the payment provider's minimum charge for the currency ({minimum} minor units)"
        )
    step = amount_step(currency)
    if amount % step:
        if currency in THREE_DECIMAL_CURRENCIES:
            raise InvalidOrder(
                "amount must be a multiple of 10 in a three-decimal currency (the last digit must be 0)"
            )
        raise InvalidOrder(
            f"amount must be a multiple of {step} in this currency (whole units written with two decimals)"
        )


def _text(data: dict[str, Any], field: str, *, default: str | None = None) -> str:
    """A required string field (or an optional one with a default when it is absent)."""
    if field not in data:
        if default is not None:
            return default
        raise InvalidOrder(f"{field} is required")
    value = data[field]
    if value is None and default is None:
        raise InvalidOrder(f"{field} is required")
    if not isinstance(value, str):
        raise InvalidOrder(f"{field} must be a string, got {_json_type(value)}")
    if not value.strip():
        raise InvalidOrder(f"{field} must be a non-empty string")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidOrder(f"{field} must be at most {MAX_ID_LENGTH} characters")
    if any(unicodedata.category(char) in _FORBIDDEN_CATEGORIES for char in value):
        raise InvalidOrder(f"{field} must not contain control, invisible or separator characters")
    if value != value.strip():
        raise InvalidOrder(f"{field} must not start or end with whitespace")
    return value


def _no_card_number(value: str, field: str) -> str:
    """``value``, unless it holds what looks like a card number: refuse it, naming only the field.

    A card number where an id was expected would be written to Stripe metadata, the claims table,
    the execution history, every outcome event and a log line (PCI DSS scope for all of them).
    """
    if holds_card_number(value):
        raise InvalidOrder(
            f"{field} must not hold a card number (13-19 digits passing the Luhn check):"
            " card data never goes in an order message"
        )
    return value


def holds_card_number(value: str) -> bool:
    """Whether ``value`` holds a run of 13-19 digits, spaces and dashes between them ignored
    (``4242 4242-4242 4242``), that passes the Luhn check: what every card number looks like.
    One pass over the value."""
    digits: list[int] = []
    for char in [*value, "\x00"]:  # the sentinel closes the last run
        if "0" <= char <= "9":
            digits.append(ord(char) - ord("0"))
        elif char in _PAN_SEPARATORS and digits:
            continue  # a separator inside a run: 4242 4242 ... is one run
        else:
            if len(digits) in _PAN_DIGITS and _luhn(digits):
                return True
            digits = []
    return False


def _luhn(digits: list[int]) -> bool:
    """Whether ``digits`` pass the Luhn checksum every card number carries."""
    total = 0
    for position, digit in enumerate(reversed(digits)):
        if position % 2:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def _optional_text(data: dict[str, Any], field: str) -> str | None:
    if field not in data:
        return None
    if data[field] is None:
        raise InvalidOrder(f"{field} must be a string when present (leave it out otherwise)")
    return _text(data, field)


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (never the value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number with a decimal point or exponent" if isinstance(value, float) else "integer"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
