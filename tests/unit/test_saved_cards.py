"""Saved cards need their Customer: StripeProvider against the provider emulator, over real HTTP.

A PaymentMethod attached to a Stripe Customer can only be used in a PaymentIntent that names that
customer; Stripe answers 400 otherwise. The order's optional ``providerCustomerId`` carries it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from payment_saga.errors import ChargeNotAttempted
from payment_saga.orders import Order
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import (
    OTHER_TEST_CUSTOMER,
    SAVED_PAYMENT_METHOD,
    TEST_CUSTOMER,
    ProviderEmulator,
)


@pytest.fixture
def emulator() -> Iterator[ProviderEmulator]:
    with ProviderEmulator() as running:
        yield running


@pytest.fixture
def provider(emulator: ProviderEmulator) -> Iterator[StripeProvider]:
    client = StripeProvider(LOCAL_API_KEY, api_base=emulator.url, timeout_seconds=2.0)
    yield client
    client.close()


def saved_card_order(provider_customer_id: str | None, **changes: Any) -> Order:
    fields: dict[str, Any] = {
        "order_id": "ORDER-SAVED",
        "amount": 15000,
        "currency": "BRL",
        "customer_id": "customer-42",
        "payment_method": SAVED_PAYMENT_METHOD,
        "provider_customer_id": provider_customer_id,
    }
    fields.update(changes)
    return Order(**fields)


def charge(provider: StripeProvider, order: Order) -> Any:
    return provider.charge(order, attempt=1, idempotency_key=idempotency_key(order.order_id, 1))


def test_a_saved_card_is_charged_in_the_name_of_its_customer(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    result = charge(provider, saved_card_order(TEST_CUSTOMER))

    assert result.status == "succeeded"
    [entry] = emulator.charges()
    assert (entry.order_id, entry.amount, entry.currency) == ("ORDER-SAVED", 15000, "BRL")
    intent = emulator.payment_intent(result.charge_id)
    assert intent is not None
    assert intent["customer"] == TEST_CUSTOMER
    assert intent["metadata"]["customerId"] == "customer-42"  # our customer stays in the metadata


def test_a_saved_card_without_its_customer_is_refused_and_nothing_is_charged(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    with pytest.raises(ChargeNotAttempted, match="belongs to the Customer"):
        charge(provider, saved_card_order(None))

    assert emulator.charges() == []
    assert emulator.payment_intents("ORDER-SAVED") == []


def test_a_saved_card_named_with_another_customer_is_refused(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    with pytest.raises(ChargeNotAttempted, match="does not have a payment method"):
        charge(provider, saved_card_order(OTHER_TEST_CUSTOMER))

    assert emulator.charges() == []


def test_a_customer_the_provider_does_not_know_is_refused(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    with pytest.raises(ChargeNotAttempted, match="No such customer"):
        charge(provider, saved_card_order("cus_NoSuchCustomer"))

    assert emulator.charges() == []


def test_a_one_off_card_may_be_charged_with_or_without_a_customer(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    with_customer = charge(
        provider, saved_card_order(TEST_CUSTOMER, order_id="ORDER-A", payment_method="pm_card_visa")
    )
    without = charge(provider, saved_card_order(None, order_id="ORDER-B", payment_method="pm_card_visa"))

    assert with_customer.status == without.status == "succeeded"
    assert len(emulator.charges()) == 2
