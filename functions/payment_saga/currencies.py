"""Which currencies Stripe charges in, and the amount rules each one has. Data, not logic.

Source: Stripe's "Supported currencies" page (https://docs.stripe.com/currencies): the presentment
currencies for card payments, the zero-decimal and three-decimal lists, the special cases and the
minimum charge amounts. Codes are ISO 4217, upper case (we send them lower case, as Stripe asks).
Update this module when Stripe's page changes; ``tests/unit/test_orders.py`` pins the rules.

Amounts here are integers in the currency's minor unit *as Stripe counts it*, which is not always
ISO 4217's: ISK and UGX have no minor unit in ISO 4217 but Stripe still takes them with two
decimals that must be ``00``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Stripe's presentment currencies for card payments (the ``*`` ones on Stripe's page, which
#: American Express does not take, are included: the card brand is not known here), plus the
#: three-decimal currencies, which Stripe documents separately.
SUPPORTED_CURRENCIES: frozenset[str] = frozenset(
    """
    USD AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BHD BIF BMD BND BOB BRL BSD
    BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CVE CZK DJF DKK DOP DZD EGP ETB EUR FJD FKP GBP
    GEL GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR ISK JMD JOD JPY KES KGS KHR KMF KRW
    KWD KYD KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MUR MVR MWK MXN MYR MZN NAD
    NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SEK
    SGD SHP SLE SOS SRD STD SZL THB TJS TND TOP TRY TTD TWD TZS UAH UGX UYU UZS VND VUV WST
    XAF XCD XOF XPF YER ZAR ZMW
    """.split()  # noqa: SIM905 - a table of codes, laid out as Stripe's page lists them
)

#: Currencies Stripe's table listed that are no longer issued, and what to tell the producer: an
#: order in one is refused with that reason, not as an unknown code. BGN: Bulgaria adopted the euro
#: on 1 January 2026; Stripe maps Bulgaria to EUR across its systems (API changelog 2026-01-28.clover,
#: https://docs.stripe.com/changelog/clover/2026-01-28/bulgaria-currency-mapping-bgn-to-eur), its
#: minimums table has no lev row, and Bulgarian acquirers decline lev transactions since the changeover.
WITHDRAWN_CURRENCIES: Mapping[str, str] = MappingProxyType(
    {"BGN": "Bulgaria adopted the euro on 1 January 2026, replacing the lev (BGN): charge in EUR"}
)

#: The amount is in whole units: 500 JPY is ``500``.
ZERO_DECIMAL_CURRENCIES: frozenset[str] = frozenset(
    ["BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "VND", "VUV", "XAF", "XOF", "XPF"]
)

#: Three decimals (5.120 KWD is ``5120``), but Stripe's payment partners need the last digit to be
#: 0: "your integration must round amounts to the nearest ten".
THREE_DECIMAL_CURRENCIES: frozenset[str] = frozenset(["BHD", "JOD", "KWD", "OMR", "TND"])

#: Zero-decimal in fact, two decimals on the wire for backwards compatibility, "where the decimal
#: amount is always 00": 5 ISK is ``500``, and ``550`` is refused.
WHOLE_UNITS_AS_TWO_DECIMALS: frozenset[str] = frozenset({"ISK", "UGX"})

#: Stripe's minimum charge per currency, in minor units (0.50 USD is ``50``; 50 JPY is ``50``).
#: Stripe applies the minimum of the *settlement* currency after conversion; for a charge in the
#: currency it settles in (the usual case), this is the exact bound. A currency with no entry has
#: no documented minimum of its own: only its conversion into the account's settlement currency
#: decides, which cannot be known here, so Stripe may still refuse a very small amount in it (a 400
#: ``amount_too_small``, which the saga treats as "not attempted").
MINIMUM_AMOUNTS: Mapping[str, int] = MappingProxyType(
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

#: Stripe's largest amount for every currency and payment method (8 digits, 999,999.99 in a
#: two-decimal currency). Cards and a few currencies allow more, but not every payment method does.
MAX_AMOUNT = 99_999_999


def amount_step(currency: str) -> int:
    """The amount must be a multiple of this: 10 for three-decimal currencies, 100 for ISK/UGX, else 1."""
    if currency in THREE_DECIMAL_CURRENCIES:
        return 10
    if currency in WHOLE_UNITS_AS_TWO_DECIMALS:
        return 100
    return 1


def minimum_amount(currency: str) -> int:
    """The smallest amount Stripe is documented to accept in ``currency``, in minor units."""
    return max(MINIMUM_AMOUNTS.get(currency, 1), amount_step(currency))


def decimals(currency: str) -> int:
    """How many decimals ``currency``'s amounts carry on Stripe's wire (0, 2 or 3)."""
    if currency in ZERO_DECIMAL_CURRENCIES:
        return 0
    if currency in THREE_DECIMAL_CURRENCIES:
        return 3
    return 2
