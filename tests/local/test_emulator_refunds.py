"""The emulator's refunds (``POST /v1/refunds``), through the real stripe SDK: what the DuplicateCharge
runbook does to an extra charge, rehearsed locally. Idempotent by key, as every Stripe POST is; a
charge refunded in full cannot be refunded again; nothing but a succeeded charge can be refunded."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import stripe

from payment_saga.orders import Order
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import ProviderEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

#: A deprecated name of the pinned stripe SDK (``StripeClient.refunds``, now ``StripeClient.v1.refunds``)
#: fails here: the refunds are sent as the SDK's current API sends them.
pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning")


@pytest.fixture
def emulator() -> Iterator[ProviderEmulator]:
    with ProviderEmulator() as running:
        yield running


def charged(emulator: ProviderEmulator, order_id: str, method: str = "pm_card_visa") -> str:
    """A PaymentIntent the saga's own provider client made for an order."""
    provider = StripeProvider(LOCAL_API_KEY, api_base=emulator.url, timeout_seconds=2.0)
    try:
        order = Order(order_id, 15000, "BRL", "cus_123", method)
        return provider.charge(order, attempt=1, idempotency_key=idempotency_key(order_id, 1)).charge_id
    finally:
        provider.close()


def client(emulator: ProviderEmulator) -> stripe.StripeClient:
    return stripe.StripeClient(LOCAL_API_KEY, base_addresses={"api": emulator.url})


def test_a_refund_sent_twice_with_one_key_refunds_the_charge_once(emulator: ProviderEmulator) -> None:
    intent = charged(emulator, "ORDER-RF-1")
    refunds = client(emulator).v1.refunds

    first = refunds.create({"payment_intent": intent}, {"idempotency_key": "refund-ORDER-RF-1"})
    again = refunds.create({"payment_intent": intent}, {"idempotency_key": "refund-ORDER-RF-1"})

    assert first.id == again.id
    assert (first.amount, first.currency, first.status) == (15000, "brl", "succeeded")
    assert [r["id"] for r in emulator.refunds(intent)] == [first.id]


def test_a_charge_refunded_in_full_is_not_refunded_again(emulator: ProviderEmulator) -> None:
    intent = charged(emulator, "ORDER-RF-2")
    stripe_client = client(emulator)
    stripe_client.v1.refunds.create({"payment_intent": intent, "amount": 5000})
    stripe_client.v1.refunds.create({"payment_intent": intent})  # the rest: 10000

    with pytest.raises(stripe.InvalidRequestError) as refused:
        stripe_client.v1.refunds.create({"payment_intent": intent})

    assert refused.value.code == "charge_already_refunded"
    assert [r["amount"] for r in emulator.refunds(intent)] == [5000, 10000]


def test_only_a_succeeded_charge_can_be_refunded(emulator: ProviderEmulator) -> None:
    stripe_client = client(emulator)

    with pytest.raises(stripe.InvalidRequestError) as unknown:
        stripe_client.v1.refunds.create({"payment_intent": "pi_3nothing"})
    with pytest.raises(stripe.InvalidRequestError) as missing:
        stripe_client.v1.refunds.create({})

    assert unknown.value.code == "resource_missing"
    assert missing.value.param == "payment_intent"
    assert emulator.refunds() == []
