"""orders.py: what the start function accepts as an order, and what makes two messages one order.

A rule weakened here lets a message through that Stripe refuses (the order is released and
re-queued until a person looks), that two readers understand differently (a duplicated key), that
rounds money (a float or a boolean amount) or that bloats and confuses the claims table (an id too
long, with control characters); a rule tightened by one rejects a valid order to the dead-letter
queue. A wrong fingerprint charges a different order under a claimed key, or calls a customer's
retry with another card a conflict.
"""

from __future__ import annotations

from model import Catalogue

ORDER_TESTS = ("tests/unit/test_orders.py", "tests/statemachine/test_order_messages.py")

ORDERS = Catalogue("functions/payment_saga/orders.py", ORDER_TESTS)

# -- the body ----------------------------------------------------------------------------------------

ORDERS.text(
    "orders-body-bound-off-by-one",
    "if len(body) > MAX_BODY_CHARACTERS:",
    "if len(body) > MAX_BODY_CHARACTERS + 1:",
    "a body one character over the bound is decoded",
)
ORDERS.text(
    "orders-body-bound-tightened",
    "if len(body) > MAX_BODY_CHARACTERS:",
    "if len(body) >= MAX_BODY_CHARACTERS:",
    "a body of exactly the bound is rejected",
)
ORDERS.text(
    "orders-depth-bound-tightened",
    "if _nesting_depth(body) > MAX_NESTING_DEPTH:",
    "if _nesting_depth(body) >= MAX_NESTING_DEPTH:",
    "an order nested exactly to the bound is dead-lettered",
)
ORDERS.text(
    "orders-depth-bound-removed",
    "if _nesting_depth(body) > MAX_NESTING_DEPTH:",
    "if False:",
    "a deeply nested body reaches the decoder (RecursionError near a thousand levels, caught late)",
)
ORDERS.text(
    "orders-depth-counts-brackets-in-strings",
    "        elif char == '\"':\n            in_string = True\n",
    "",
    "brackets inside a string value count as nesting: a note of '[' characters rejects the order",
)
ORDERS.text(
    "orders-depth-escape-ends-string",
    '            elif char == "\\\\":\n                escaped = True\n',
    "",
    'an escaped quote ends a string early: the brackets after \\" are counted as nesting',
)
ORDERS.text(
    "orders-duplicate-keys-accepted",
    "        if key in seen:\n",
    "        if False:\n",
    "a message with a field twice is read by the last one ({amount: 100, amount: 99999} charges 99999)",
)
ORDERS.text(
    "orders-nan-accepted",
    "object_pairs_hook=_object_without_duplicates, parse_constant=_no_constant",
    "object_pairs_hook=_object_without_duplicates",
    "NaN and Infinity, which JSON does not have, are decoded",
)

# -- the fields --------------------------------------------------------------------------------------

ORDERS.text(
    "orders-order-id-any-first-character",
    'ORDER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\\-]{0,63}")',
    'ORDER_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:\\-]{1,64}")',
    "an orderId may start with punctuation ('-ORDER'), which the documented rule refuses",
)
ORDERS.text(
    "orders-order-id-prefix-match",
    "if not ORDER_ID_PATTERN.fullmatch(order_id):",
    "if not ORDER_ID_PATTERN.match(order_id):",
    "only the start of an orderId is checked: 'ORDER 1' (a space) is a key",
)
ORDERS.text(
    "orders-order-id-one-short",
    'ORDER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\\-]{0,63}")',
    'ORDER_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\\-]{0,62}")',
    "an orderId of exactly 64 characters, which the contract allows, is dead-lettered",
)
ORDERS.text(
    "orders-id-length-off-by-one",
    "if len(value) > MAX_ID_LENGTH:",
    "if len(value) > MAX_ID_LENGTH + 1:",
    "a field of 65 characters is accepted (the bound that keeps the claims table small)",
)
ORDERS.text(
    "orders-id-length-tightened",
    "if len(value) > MAX_ID_LENGTH:",
    "if len(value) >= MAX_ID_LENGTH:",
    "a field of exactly 64 characters is rejected",
)
ORDERS.text(
    "orders-bool-amount",
    "if not isinstance(amount, int) or isinstance(amount, bool):",
    "if not isinstance(amount, int):",
    "true is an amount of 1 minor unit (bool is an int in Python)",
)
ORDERS.text(
    "orders-float-amount",
    "if not isinstance(amount, int) or isinstance(amount, bool):",
    "if not isinstance(amount, (int, float)) or isinstance(amount, bool):",
    "15000.0 is an amount: a float is taken for minor units instead of being refused",
)
ORDERS.text(
    "orders-lower-case-currency",
    'CURRENCY_PATTERN = re.compile(r"[A-Z]{3}")',
    'CURRENCY_PATTERN = re.compile(r"[A-Za-z]{3}")',
    "a lower-case currency passes the shape check (it is then refused as not supported, with the"
    " wrong reason for the producer)",
)
ORDERS.text(
    "orders-unsupported-currency",
    "    if currency not in SUPPORTED_CURRENCIES:\n"
    '        raise InvalidOrder("currency is not one the payment provider charges in")\n',
    "",
    "a currency Stripe does not charge in is claimed and sent: refused by the provider, re-queued",
)
ORDERS.text(
    "orders-withdrawn-currency-unexplained",
    "if currency in WITHDRAWN_CURRENCIES:",
    "if False:",
    "an order in a currency no longer issued (the lev) is refused as an unknown code: the producer is"
    " not told to charge in the euro",
)
ORDERS.text(
    "orders-max-amount-off-by-one",
    "if amount > MAX_AMOUNT:",
    "if amount > MAX_AMOUNT + 1:",
    "an amount one minor unit over Stripe's maximum is sent to the provider",
)
ORDERS.text(
    "orders-max-amount-tightened",
    "if amount > MAX_AMOUNT:",
    "if amount >= MAX_AMOUNT:",
    "Stripe's maximum amount itself is rejected",
)
ORDERS.text(
    "orders-minimum-off-by-one",
    "if amount < minimum:",
    "if amount < minimum - 1:",
    "an amount one minor unit below the currency's minimum charge is sent to the provider",
)
ORDERS.text(
    "orders-minimum-tightened",
    "if amount < minimum:",
    "if amount <= minimum:",
    "exactly the currency's minimum charge is rejected",
)
ORDERS.text(
    "orders-step-ignored",
    "    if amount % step:\n",
    "    if amount % step and False:\n",
    "5124 KWD (not rounded to ten) is sent: Stripe refuses three-decimal amounts not ending in 0",
)
ORDERS.text(
    "orders-payment-method-unchecked",
    "if not PAYMENT_METHOD_PATTERN.fullmatch(payment_method):",
    "if False:",
    "a payment method with punctuation (not a provider id) is sent to the provider",
)
ORDERS.text(
    "orders-provider-customer-unchecked",
    "        if not PROVIDER_CUSTOMER_PATTERN.fullmatch(provider_customer_id):",
    "        if False:",
    "a providerCustomerId that is no Stripe Customer (acct_1) is sent with the charge",
)
ORDERS.text(
    "orders-provider-customer-null",
    "    if data[field] is None:\n"
    '        raise InvalidOrder(f"{field} must be a string when present (leave it out otherwise)")\n',
    "",
    "providerCustomerId: null is rejected as 'required' (an optional field): the wrong reason",
)
ORDERS.text(
    "orders-blank-text",
    "if not value.strip():",
    "if not value:",
    "a blank field ('   ') is rejected for its whitespace, not as empty: the wrong reason",
)
ORDERS.text(
    "orders-control-characters",
    "if any(unicodedata.category(char) in _FORBIDDEN_CATEGORIES for char in value):",
    "if False:",
    "a customerId with a NUL or a zero-width space is stored: two ids that look equal differ",
)
ORDERS.text(
    "orders-surrounding-whitespace",
    "if value != value.strip():",
    "if False:",
    "' cus_123' and 'cus_123' are two customers: the same order is a conflict with itself",
)
ORDERS.text(
    "orders-null-required-field",
    "if value is None and default is None:",
    "if value is None and default is not None:",
    "orderId: null is rejected as 'must be a string, got null' instead of 'required'",
)

# -- the order's identity ----------------------------------------------------------------------------

ORDERS.text(
    "orders-fingerprint-without-amount",
    'return f"{self.amount}|{self.currency}|{self.customer_id}"',
    'return f"{self.currency}|{self.customer_id}"',
    "the same orderId for another amount is the same order: charged, not reported as a conflict",
    tests=("tests/unit/test_orders.py", "tests/statemachine/test_seeds.py"),
)
ORDERS.text(
    "orders-fingerprint-with-payment-method",
    'return f"{self.amount}|{self.currency}|{self.customer_id}"',
    'return f"{self.amount}|{self.currency}|{self.customer_id}|{self.payment_method}"',
    "a customer's retry with another card after a decline is reported as a conflict, never charged",
    tests=("tests/unit/test_orders.py", "tests/functional/test_declined_attempts.py"),
)
ORDERS.text(
    "orders-message-drops-provider-customer",
    '        message["providerCustomerId"] = self.provider_customer_id\n',
    "        pass\n",
    "the execution input loses the saved card's customer: Stripe refuses the charge every time",
)
ORDERS.text(
    "orders-order-id-card-number-accepted",
    'order_id = _no_card_number(_text(data, "orderId"), "orderId")',
    'order_id = _text(data, "orderId")',
    "a card number as orderId reaches every log line, outcome event, claim key and Stripe's metadata",
)
