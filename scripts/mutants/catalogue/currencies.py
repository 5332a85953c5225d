"""currencies.py: the product's copy of Stripe's currency rules (decimals, steps, minimums).

A rule wrong here sends Stripe an amount in the wrong unit (a hundred times the price, or a
hundredth), or lets an order through that Stripe refuses (released and re-queued until a person
looks). The Stripe emulator keeps its own copy of Stripe's table, and the test comparing the two
kills each of these.
"""

from __future__ import annotations

from model import Catalogue

CURRENCY_TESTS = ("tests/local/test_stripe_currencies.py", "tests/unit/test_orders.py")

CURRENCIES = Catalogue("functions/payment_saga/currencies.py", CURRENCY_TESTS)

CURRENCIES.text(
    "currencies-three-decimal-forgotten",
    'frozenset(["BHD", "JOD", "KWD", "OMR", "TND"])',
    'frozenset(["BHD", "JOD", "OMR", "TND"])',
    "KWD is sent as a two-decimal currency: 5.120 KWD goes out as 51.20",
)
CURRENCIES.text(
    "currencies-zero-decimal-extra",
    '["BIF", "CLP", "DJF", "GNF", "JPY",',
    '["BIF", "CLP", "DJF", "GNF", "JPY", "HUF",',
    "HUF is sent as a zero-decimal currency: 175.00 HUF goes out as 1.75",
)
CURRENCIES.text(
    "currencies-minimum-lowered",
    '"GBP": 30,',
    '"GBP": 3,',
    "an order of 0.05 GBP passes the product and is refused by Stripe",
)
CURRENCIES.text(
    "currencies-whole-units-forgotten",
    'frozenset({"ISK", "UGX"})',
    'frozenset({"ISK"})',
    "550 UGX (5.50) passes the product; Stripe refuses a UGX amount whose decimals are not 00",
)
