"""The order message contract (docs/order-message.md): every rule, edge and rejection reason.

A body either becomes an ``Order`` or raises ``InvalidOrder`` with a reason that names the field,
never quotes the message, and is the same on every receipt: nothing else may escape, or the start
Lambda would retry a body that can never become valid.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from payment_saga import currencies
from payment_saga.errors import InvalidOrder
from payment_saga.orders import (
    FIELDS,
    MAX_AMOUNT,
    MAX_BODY_CHARACTERS,
    MAX_NESTING_DEPTH,
    Order,
    order_from_message,
    parse_order_body,
)

#: A test card number (Stripe's Visa test number): it must never appear in a reason.
CARD_NUMBER = "4242424242424242"


def message(**changes: Any) -> dict[str, Any]:
    """The seed-000 order (150.00 BRL), with fields changed or (value ``...``) removed."""
    base: dict[str, Any] = {
        "orderId": "ORDER-003",
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_123",
        "paymentMethod": "pm_card_visa",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not ...}


def body(**changes: Any) -> str:
    return json.dumps(message(**changes))


def reason(raw: str) -> str:
    with pytest.raises(InvalidOrder) as caught:
        parse_order_body(raw)
    return str(caught.value)


# -- what is accepted ------------------------------------------------------------------------------


def test_a_well_formed_order_parses_with_the_default_attempt_and_no_provider_customer() -> None:
    order = parse_order_body(body())

    assert order == Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
    assert (order.payment_attempt, order.provider_customer_id) == ("initial", None)


def test_unknown_fields_are_ignored_and_optional_ones_read() -> None:
    order = parse_order_body(
        body(paymentAttempt="retry-1", providerCustomerId="cus_NffrFeUfNV2Hib", note={"any": [1, 2]})
    )

    assert (order.payment_attempt, order.provider_customer_id) == ("retry-1", "cus_NffrFeUfNV2Hib")


@pytest.mark.parametrize(
    ("amount", "currency"),
    [
        (50, "USD"),  # exactly Stripe's minimum, 0.50 USD
        (30, "GBP"),
        (50, "BRL"),
        (50, "JPY"),  # zero-decimal: 50 yen, not 0.50
        (17500, "HUF"),
        (1000, "MXN"),
        (5120, "KWD"),  # three-decimal, rounded to ten: 5.120 KWD
        (10, "BHD"),
        (500, "ISK"),  # 5 ISK, written with two decimals that are 00
        (1, "XCD"),  # no documented minimum of its own
        (MAX_AMOUNT, "USD"),
    ],
)
def test_amounts_at_the_edges_stripe_accepts_are_accepted(amount: int, currency: str) -> None:
    order = parse_order_body(body(amount=amount, currency=currency))

    assert (order.amount, order.currency) == (amount, currency)


def test_brackets_inside_a_string_are_text_not_nesting() -> None:
    order = parse_order_body(body(note="[" * 5000 + "{" * 5000))

    assert order.order_id == "ORDER-003"


def test_escaped_quotes_and_backslashes_do_not_end_a_string_early() -> None:
    assert parse_order_body(body(note='\\"' + "[" * 100)).amount == 15000
    assert parse_order_body(body(note="\\", extra=[[1]])).amount == 15000
    assert "levels deep" in reason(body(note="\\", extra=[[[0]]], deep="x" + "]" * 50) + "[" * 40)


def test_an_object_nested_to_the_bound_is_accepted() -> None:
    nested: Any = 1
    for _ in range(MAX_NESTING_DEPTH - 1):
        nested = {"n": nested}

    assert parse_order_body(body(extra=nested)).amount == 15000


def test_a_body_of_exactly_the_bound_is_an_order_and_one_character_more_is_not() -> None:
    padding = MAX_BODY_CHARACTERS - len(body(note=""))
    at_the_bound = body(note="x" * padding)
    assert len(at_the_bound) == MAX_BODY_CHARACTERS

    assert parse_order_body(at_the_bound).amount == 15000
    assert f"longer than {MAX_BODY_CHARACTERS} characters" in reason(body(note="x" * (padding + 1)))


def test_ids_of_exactly_64_characters_are_accepted_in_every_field() -> None:
    order = parse_order_body(
        body(orderId="O" * 64, customerId="c" * 64, paymentMethod="p" * 64, paymentAttempt="r" * 64)
    )

    assert (order.order_id, order.customer_id) == ("O" * 64, "c" * 64)
    assert (order.payment_method, order.payment_attempt) == ("p" * 64, "r" * 64)


# -- what is rejected, and why ---------------------------------------------------------------------

REJECTED = {
    # amount: an integer of minor units, never anything that could be rounded into one
    "float amount": (body(amount=15000.0), "amount must be an integer in minor units"),
    "exponent amount": ('{"orderId": "O", "amount": 1.5e4}', "amount must be an integer"),
    "true amount": (body(amount=True), "amount must be an integer in minor units, got boolean"),
    "false amount": (body(amount=False), "amount must be an integer in minor units, got boolean"),
    "numeric string amount": (body(amount="15000"), "amount must be an integer in minor units, got string"),
    "null amount": (body(amount=None), "amount must be an integer in minor units, got null"),
    "missing amount": (body(amount=...), "amount must be an integer in minor units, got null"),
    "zero amount": (body(amount=0), "below the payment provider's minimum"),
    "negative amount": (body(amount=-15000), "below the payment provider's minimum"),
    "amount over the maximum": (body(amount=MAX_AMOUNT + 1), "amount must be at most 99999999"),
    "huge integer literal": ('{"amount": ' + "9" * 5000 + "}", "a number is too long to decode"),
    # Stripe's minimum charge, in the currency's minor unit
    "USD below 0.50": (body(amount=49, currency="USD"), "minimum charge for the currency (50 minor units)"),
    "GBP below 0.30": (body(amount=29, currency="GBP"), "(30 minor units)"),
    "BRL below 0.50": (body(amount=49), "(50 minor units)"),
    "JPY below 50 yen": (body(amount=49, currency="JPY"), "(50 minor units)"),
    "HUF below 175": (body(amount=17499, currency="HUF"), "(17500 minor units)"),
    "MXN below 10": (body(amount=999, currency="MXN"), "(1000 minor units)"),
    "a currency without a minimum still needs one unit": (body(amount=0, currency="XCD"), "(1 minor units)"),
    # decimals
    "KWD not rounded to ten": (body(amount=5124, currency="KWD"), "multiple of 10 in a three-decimal"),
    "BHD not rounded to ten": (body(amount=1001, currency="BHD"), "the last digit must be 0"),
    "ISK fraction": (body(amount=550, currency="ISK"), "multiple of 100 in this currency"),
    "UGX fraction": (body(amount=150, currency="UGX"), "multiple of 100 in this currency"),
    # currency
    "currency with a trailing newline": (body(currency="BRL\n"), "currency must not contain control"),
    "lower-case currency": (body(currency="brl"), "three-letter ISO 4217 code in upper case"),
    "padded currency": (body(currency=" BRL"), "currency must not start or end with whitespace"),
    "not a currency": (body(currency="XXX"), "currency is not one the payment provider charges in"),
    "ISO but not Stripe": (body(currency="XAU"), "currency is not one the payment provider charges in"),
    "lev since the euro": (body(currency="BGN"), "currency is no longer issued: Bulgaria adopted the euro"),
    "numeric currency": (body(currency=986), "currency must be a string, got integer"),
    # orderId
    "orderId with a trailing newline": (body(orderId="ORDER-1\n"), "orderId must not contain control"),
    "orderId with a space": (body(orderId="ORDER 1"), "orderId must be 1-64 characters"),
    "orderId starting with punctuation": (body(orderId="-ORDER"), "starting with a letter or digit"),
    "orderId too long": (body(orderId="O" * 65), "orderId must be at most 64 characters"),
    "orderId missing": (body(orderId=...), "orderId is required"),
    "orderId null": (body(orderId=None), "orderId is required"),
    "orderId a number": (body(orderId=3), "orderId must be a string, got integer"),
    "orderId empty": (body(orderId=""), "orderId must be a non-empty string"),
    # control and invisible characters, in every string field
    "NUL in customerId": (body(customerId="cus\x00123"), "customerId must not contain control"),
    "escape in paymentMethod": (body(paymentMethod="pm_card\x1bvisa"), "paymentMethod must not contain"),
    "DEL in paymentAttempt": (body(paymentAttempt="retry\x7f"), "paymentAttempt must not contain control"),
    "zero-width space in orderId": (body(orderId="ORDER\u200b1"), "orderId must not contain control"),
    "bidi override in customerId": (body(customerId="cus_\u202e321"), "customerId must not contain"),
    "line separator in paymentAttempt": (body(paymentAttempt="a\u2028b"), "paymentAttempt must not contain"),
    "lone surrogate in customerId": (body(customerId="cus_\ud800"), "customerId must not contain control"),
    "tab in providerCustomerId": (body(providerCustomerId="cus_\t1"), "providerCustomerId must not contain"),
    "whitespace around customerId": (body(customerId=" cus_123"), "must not start or end with whitespace"),
    "blank customerId": (body(customerId="   "), "customerId must be a non-empty string"),
    # the other fields
    "paymentMethod with punctuation": (body(paymentMethod="pm-card-visa"), "provider payment method id"),
    "paymentMethod missing": (body(paymentMethod=...), "paymentMethod is required"),
    "paymentAttempt null": (body(paymentAttempt=None), "paymentAttempt must be a string, got null"),
    "paymentAttempt a number": (body(paymentAttempt=2), "paymentAttempt must be a string, got integer"),
    "paymentAttempt empty": (body(paymentAttempt=""), "paymentAttempt must be a non-empty string"),
    "paymentAttempt too long": (body(paymentAttempt="r" * 65), "paymentAttempt must be at most 64"),
    "providerCustomerId not a Customer": (body(providerCustomerId="acct_1"), "a Stripe Customer id"),
    "providerCustomerId only the prefix": (body(providerCustomerId="cus_"), "a Stripe Customer id"),
    "providerCustomerId null": (body(providerCustomerId=None), "providerCustomerId must be a string when"),
    "providerCustomerId a number": (body(providerCustomerId=7), "providerCustomerId must be a string, got"),
    "paymentAttempt with a space": (
        body(paymentAttempt="two tries"),
        "paymentAttempt must be 1-64 characters",
    ),
    "paymentAttempt with a slash": (body(paymentAttempt="a/b"), "letters, digits and _.:-"),
    "paymentAttempt starting with a dash": (body(paymentAttempt="-1"), "starting with a letter or digit"),
    # card numbers where an id was expected: Stripe's test numbers pass the Luhn check
    "card number as orderId": (body(orderId=CARD_NUMBER), "orderId must not hold a card number"),
    "dashed card number as orderId": (
        body(orderId="4242-4242-4242-4242"),
        "orderId must not hold a card number",
    ),
    "spaced card number as orderId": (
        body(orderId="4242 4242 4242 4242"),
        "orderId must not hold a card number",
    ),
    "card number inside orderId": (
        body(orderId=f"ORDER-{CARD_NUMBER}"),
        "orderId must not hold a card number",
    ),
    "card number as customerId": (body(customerId=CARD_NUMBER), "customerId must not hold a card number"),
    "grouped card number in paymentAttempt": (
        body(paymentAttempt="4000-0566-5566-5556"),
        "paymentAttempt must not hold a card number",
    ),
    "spaced card number in customerId": (
        body(customerId="4000 0566 5566 5556"),
        "customerId must not hold a card number",
    ),
    "card number inside customerId": (body(customerId=f"c-{CARD_NUMBER}-x"), "must not hold a card number"),
    "13-digit card number": (body(customerId="4222222222222"), "customerId must not hold a card number"),
    "19-digit card number": (body(customerId="6011000990139424009"), "must not hold a card number"),
    "card number as paymentMethod": (body(paymentMethod=CARD_NUMBER), "paymentMethod must not hold a card"),
    "card number in providerCustomerId": (
        body(providerCustomerId=f"cus_{CARD_NUMBER}"),
        "providerCustomerId must not hold a card number",
    ),
    # the body itself
    "not JSON": ("{not json", "body is not valid JSON (line 1)"),
    "empty body": ("", "body is not valid JSON"),
    "an array": ("[]", "body must be a JSON object, got array"),
    "a string": ('"ORDER-003"', "body must be a JSON object, got string"),
    "a number": ("15000", "body must be a JSON object, got integer"),
    "null": ("null", "body must be a JSON object, got null"),
    "10 KB of nested brackets": ("[" * 10_240, "nests arrays or objects more than 32 levels deep"),
    "balanced deep nesting": ("[" * 5000 + "]" * 5000, "more than 32 levels deep"),
    "deep objects under a field": (
        '{"orderId": "O", "x": ' + '{"a": ' * 1000 + "1" + "}" * 1000 + "}",
        "more than 32 levels deep",
    ),
    # ~60,000 escaped quotes: one pass over the body (a regular expression took 40 s on this)
    "unterminated escaped quotes": ('"' + '\\"' * 30_000, "body is not valid JSON (line 1)"),
    "too long": (body(note="x" * MAX_BODY_CHARACTERS), f"longer than {MAX_BODY_CHARACTERS} characters"),
    "NaN": ('{"orderId": "O", "amount": NaN}', "not valid JSON (NaN or Infinity)"),
    "Infinity": ('{"orderId": "O", "amount": -Infinity}', "not valid JSON (NaN or Infinity)"),
    "a field twice": ('{"amount": 100, "amount": 15000}', "field amount appears twice"),
    "an unknown key twice": ('{"x": 1, "x": 2}', "a field appears twice in an object"),
}


@pytest.mark.parametrize(("raw", "expected"), REJECTED.values(), ids=REJECTED.keys())
def test_a_bad_body_is_rejected_with_a_reason_that_names_what_is_wrong(raw: str, expected: str) -> None:
    assert expected in reason(raw)


@pytest.mark.parametrize("raw", [None, b'{"orderId": "ORDER-003"}', 42])
def test_a_body_that_is_not_text_is_rejected_not_crashed_on(raw: Any) -> None:
    assert reason(raw).startswith("body must be text")


@pytest.mark.parametrize(
    "raw",
    [
        body(orderId=CARD_NUMBER + "\n"),
        body(amount=CARD_NUMBER),
        body(amount=float(CARD_NUMBER)),
        body(currency=CARD_NUMBER[:3]),
        body(customerId=CARD_NUMBER + "\x00"),
        body(paymentMethod=f"card {CARD_NUMBER}"),
        body(providerCustomerId=CARD_NUMBER),
        body(paymentAttempt=CARD_NUMBER * 5),
        '{"card": ' + CARD_NUMBER + ", oops}",
        '{"' + CARD_NUMBER + '": 1, "' + CARD_NUMBER + '": 2}',
        "[" * 100 + CARD_NUMBER,
    ],
)
def test_a_reason_never_quotes_the_message(raw: str) -> None:
    text = reason(raw)

    assert CARD_NUMBER not in text
    assert CARD_NUMBER[:6] not in text


@pytest.mark.parametrize(
    "customer_id",
    [
        "4242424242424241",  # 16 digits failing the Luhn check: a number, not a card
        "424242424242",  # 12 digits passing it: too short for a card
        "42424242424242424242",  # 20 digits: too long for one
        "customer-4242-4242",  # two short groups
        "cus_123",
    ],
)
def test_digits_that_cannot_be_a_card_number_are_accepted(customer_id: str) -> None:
    assert parse_order_body(body(customerId=customer_id)).customer_id == customer_id


@pytest.mark.parametrize(
    "order_id",
    [
        "4242424242424241",  # 16 digits failing the Luhn check
        "ORDER-424242424242",  # 12 digits passing it
        "00424242424242424242",  # 20 digits: longer than any card number
        "ORDER-4242_4242424242",  # the underscore ends a run: 4 digits, then 10
        "ORDER-003",
    ],
)
def test_an_order_id_that_cannot_be_a_card_number_is_accepted(order_id: str) -> None:
    assert parse_order_body(body(orderId=order_id)).order_id == order_id


def test_a_card_shaped_order_id_is_refused_by_name_without_quoting_it() -> None:
    """The orderId is the one field copied everywhere (logs, events, the claim's key, the execution's
    name, Stripe's metadata): a card number there is refused as in any other id, never quoted."""
    for order_id in (CARD_NUMBER, "4242-4242-4242-4242", "4242 4242 4242 4242"):
        text = reason(body(orderId=order_id))

        assert text == (
            "orderId must not hold a card number (13-19 digits passing the Luhn check):"
            " card data never goes in an order message"
        )
        assert "4242" not in text


def test_a_card_shaped_value_is_dead_lettered_like_any_invalid_message() -> None:
    """The rejection is InvalidOrder (the start function dead-letters it with this reason) and never
    quotes the number it refused."""
    text = reason(body(paymentAttempt="4000 0566 5566 5556"))

    assert text.startswith("paymentAttempt")
    assert "4000" not in text


def test_a_key_repeated_after_thousands_of_others_is_found() -> None:
    """A body at the size limit, of thousands of keys, the last one a repeat: the one pass that
    replaced a count per key (quadratic: 0.5 s at this size) still finds it."""
    keys = [f"k{i}" for i in range(MAX_BODY_CHARACTERS // 12)]
    raw = "{" + ", ".join(f'"{key}": 1' for key in keys) + ', "k0": 2}'
    assert len(raw) <= MAX_BODY_CHARACTERS

    assert reason(raw) == "a field appears twice in an object"


def test_the_first_problem_is_reported_in_a_stable_order() -> None:
    """Same body, same reason, on every receipt (the DLQ and the logs agree)."""
    raw = body(orderId="ORDER 1", amount=1.5, currency="brl")

    assert reason(raw) == reason(raw)
    assert reason(raw).startswith("orderId")


# -- nothing but InvalidOrder, whatever arrives -----------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_is_an_order_or_an_invalid_order(raw: str) -> None:
    with contextlib.suppress(InvalidOrder):
        parse_order_body(raw)


#: Values that are valid for some field and edge values for others.
NEAR_MISSES = st.sampled_from(
    ["BRL", "USD", "JPY", "KWD", "ISK", "brl", "XXX", "pm_card_visa", "cus_A1", "O-1\n", 49, 5125, 15000.0]
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(FIELDS)), JSON_VALUES | NEAR_MISSES, max_size=3).map(
        lambda changes: message(**changes)
    )
)
def test_any_json_object_is_an_order_or_an_invalid_order(data: dict[str, Any]) -> None:
    try:
        order = parse_order_body(json.dumps(data))
    except InvalidOrder:
        return
    # What was accepted obeys the contract, and survives the trip through the execution input.
    assert isinstance(order.amount, int)
    assert not isinstance(order.amount, bool)
    assert order.amount >= currencies.minimum_amount(order.currency)
    assert order.amount % currencies.amount_step(order.currency) == 0
    assert order_from_message(json.loads(json.dumps(order.to_message()))) == order


# -- the order's identity ----------------------------------------------------------------------------


def test_the_fingerprint_is_what_is_owed_and_by_whom_not_how_it_is_paid() -> None:
    order = parse_order_body(body())
    saved_card = parse_order_body(
        body(paymentMethod="pm_1NsavedCard", providerCustomerId="cus_NffrFeUfNV2Hib", paymentAttempt="r2")
    )

    assert saved_card.fingerprint == order.fingerprint
    assert parse_order_body(body(amount=15001)).fingerprint != order.fingerprint
    assert parse_order_body(body(currency="USD")).fingerprint != order.fingerprint
    assert parse_order_body(body(customerId="cus_456")).fingerprint != order.fingerprint


def test_the_execution_input_names_the_provider_customer_only_when_there_is_one() -> None:
    plain = parse_order_body(body())
    saved = parse_order_body(body(providerCustomerId="cus_NffrFeUfNV2Hib"))

    # Orders without one keep the execution input they always had (same name and input on a
    # redelivery of a message sent before this field existed).
    assert "providerCustomerId" not in plain.to_message()
    assert saved.to_message()["providerCustomerId"] == "cus_NffrFeUfNV2Hib"
    assert order_from_message(saved.to_message()) == saved
    assert order_from_message(plain.to_message()) == plain


# -- the currency data -------------------------------------------------------------------------------


def test_every_currency_with_a_rule_is_one_stripe_charges_in() -> None:
    ruled = (
        set(currencies.MINIMUM_AMOUNTS)
        | currencies.ZERO_DECIMAL_CURRENCIES
        | currencies.THREE_DECIMAL_CURRENCIES
        | currencies.WHOLE_UNITS_AS_TWO_DECIMALS
    )

    assert ruled <= currencies.SUPPORTED_CURRENCIES
    assert all(len(code) == 3 and code.isupper() for code in currencies.SUPPORTED_CURRENCIES)
    assert currencies.ZERO_DECIMAL_CURRENCIES.isdisjoint(currencies.THREE_DECIMAL_CURRENCIES)


@pytest.mark.parametrize(
    ("currency", "decimals", "step", "minimum"),
    [("USD", 2, 1, 50), ("JPY", 0, 1, 50), ("KWD", 3, 10, 10), ("ISK", 2, 100, 100), ("XCD", 2, 1, 1)],
)
def test_each_currency_has_its_decimals_step_and_minimum(
    currency: str, decimals: int, step: int, minimum: int
) -> None:
    assert currencies.decimals(currency) == decimals
    assert currencies.amount_step(currency) == step
    assert currencies.minimum_amount(currency) == minimum
