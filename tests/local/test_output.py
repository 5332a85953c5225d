"""How the ``saga`` commands print an amount: in the currency's own minor units, as Stripe counts them."""

from __future__ import annotations

import pytest

from saga_local.output import money


@pytest.mark.parametrize(
    ("amount", "currency", "printed"),
    [
        (15000, "BRL", "150.00 BRL"),  # field report 000's order
        (5, "BRL", "0.05 BRL"),
        (500, "JPY", "500 JPY"),  # zero-decimal: 500 minor units are 500 yen
        (1234, "KWD", "1.234 KWD"),  # three-decimal
    ],
)
def test_money_prints_minor_units_in_the_currency_decimals(amount: int, currency: str, printed: str) -> None:
    assert money(amount, currency) == printed
