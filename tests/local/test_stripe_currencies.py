"""The product's currency table and the emulator's, each written from Stripe's page, agree.

The emulator refuses what Stripe refuses from its own table, so an order the product lets through
with the wrong decimals, step or minimum is refused locally as it would be in production. This test
names the currencies where the two tables differ; each such difference is a finding about one of
them, recorded below with what it means for an order, never silenced by copying one into the other.
"""

from __future__ import annotations

import pytest

from payment_saga import currencies as product
from saga_local.stripe_emulator import currencies as emulator

#: Currency -> why the product's minimum differs from the emulator's (Stripe's current table). None
#: does since BGN left the product's table (Bulgaria adopted the euro; Stripe's has no BGN row).
KNOWN_MINIMUM_DIFFERENCES: dict[str, tuple[int, int]] = {}


@pytest.mark.parametrize("currency", sorted(product.SUPPORTED_CURRENCIES))
def test_the_product_sends_amounts_with_the_decimals_and_step_stripe_documents(currency: str) -> None:
    assert product.decimals(currency) == emulator.exponent(currency)
    assert product.amount_step(currency) == emulator.step(currency)


def test_the_product_refuses_below_stripes_minimum_in_every_currency_it_accepts() -> None:
    differences = {
        currency: (product.minimum_amount(currency), emulator.minimum(currency))
        for currency in sorted(product.SUPPORTED_CURRENCIES)
        if product.minimum_amount(currency) != emulator.minimum(currency)
    }

    assert differences == KNOWN_MINIMUM_DIFFERENCES
    # A product minimum below Stripe's would let an order through that Stripe refuses: never allowed.
    assert all(ours >= stripes for ours, stripes in differences.values())


def test_the_product_never_sends_more_than_stripe_accepts() -> None:
    assert product.MAX_AMOUNT <= emulator.MAXIMUM_CHARGE


def test_the_emulators_rules_are_stripes_for_the_documented_examples() -> None:
    # The examples Stripe's page gives: 10 USD is 1000, 500 JPY is 500, 5.120 KWD is 5120 (a
    # multiple of ten), 5 ISK is 500 (the decimals always 00).
    assert (emulator.exponent("USD"), emulator.exponent("JPY"), emulator.exponent("KWD")) == (2, 0, 3)
    assert (emulator.step("KWD"), emulator.step("ISK"), emulator.step("UGX"), emulator.step("EUR")) == (
        10,
        100,
        100,
        1,
    )
    assert (emulator.minimum("USD"), emulator.minimum("GBP"), emulator.minimum("HUF")) == (50, 30, 17500)
    assert emulator.ZERO_DECIMAL.isdisjoint(emulator.THREE_DECIMAL | emulator.WHOLE_UNITS_TWO_DECIMALS)
