"""The emulator's own copy of Stripe's currency rules: decimals, steps, minimums, maximums.

Written from Stripe's "Supported currencies" page (https://docs.stripe.com/currencies: "Zero-decimal
currencies", "Three-decimal currencies", "Special cases", "Minimum and maximum charge amounts"),
not from the product's table (``functions/payment_saga/currencies.py``): the emulator is what the
product is tested against, so a mistake copied into both would pass every test. A test compares the
two tables for every currency the product accepts (``tests/local/test_stripe_contract.py``).

Amounts are in the currency's minor unit as Stripe counts it on the wire. Codes are upper case here;
requests carry them lower case.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

#: "Zero-decimal currencies": the amount is in whole units (500 JPY is ``500``). Stripe's list also
#: names UGX, which its "Special cases" then sends with two decimals (below).
ZERO_DECIMAL: frozenset[str] = frozenset(
    """BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF VND VUV XAF XOF XPF""".split()  # noqa: SIM905 - Stripe's list
)

#: "Three-decimal currencies": 5.124 KWD is ``5124`` on the wire, but Stripe's payment partners
#: need the last digit to be 0 ("round amounts to the nearest ten").
THREE_DECIMAL: frozenset[str] = frozenset({"BHD", "JOD", "KWD", "OMR", "TND"})

#: "Special cases": zero-decimal in fact, sent with two decimals "where the decimal amount is always
#: 00" for backwards compatibility: 5 ISK is ``500``; ``550`` is refused.
WHOLE_UNITS_TWO_DECIMALS: frozenset[str] = frozenset({"ISK", "UGX"})

#: "Minimum and maximum charge amounts": the smallest charge in each listed currency, in minor units
#: (0.50 USD is ``50``, 50 JPY is ``50``). An unlisted currency has no minimum of its own (Stripe
#: applies its settlement currency's after conversion), so the emulator checks none for it. The
#: table has no BGN row: Bulgaria adopted the euro on 1 January 2026.
MINIMUM_CHARGE: Mapping[str, int] = MappingProxyType(
    {
        "USD": 50,
        "AED": 200,
        "ARS": 50,
        "AUD": 50,
        "BRL": 50,
        "CAD": 50,
        "CHF": 50,
        "COP": 50,
        "CZK": 1500,
        "DKK": 250,
        "EUR": 50,
        "GBP": 30,
        "HKD": 400,
        "HUF": 17500,
        "IDR": 50,
        "ILS": 50,
        "INR": 50,
        "JPY": 50,
        "KRW": 50,
        "MXN": 1000,
        "MYR": 200,
        "NOK": 300,
        "NZD": 50,
        "PHP": 50,
        "PLN": 200,
        "RON": 200,
        "RUB": 50,
        "SEK": 300,
        "SGD": 50,
        "THB": 1000,
        "ZAR": 50,
    }
)

#: "The amount value supports up to eight digits" (99,999,999: 999,999.99 in a two-decimal
#: currency), for every currency and payment method the saga uses.
MAXIMUM_CHARGE = 99_999_999


def step(currency: str) -> int:
    """What an amount must be a multiple of: 10 (three decimals), 100 (ISK, UGX), else 1."""
    if currency in THREE_DECIMAL:
        return 10
    if currency in WHOLE_UNITS_TWO_DECIMALS:
        return 100
    return 1


def minimum(currency: str) -> int:
    """The smallest amount the emulator accepts in ``currency`` (at least one step)."""
    return max(MINIMUM_CHARGE.get(currency, 1), step(currency))


def exponent(currency: str) -> int:
    """How many decimals the wire's amounts carry in ``currency`` (0, 2 or 3)."""
    if currency in ZERO_DECIMAL:
        return 0
    if currency in THREE_DECIMAL:
        return 3
    return 2
