"""What the sweeper's tests share: the order and the tokens, the lease and the grace, the holder's
charge, and a provider that races the sweeper (their fixtures are in conftest.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from payment_saga.claims import ClaimResult, ClaimsStore, ClaimStatus, ReleaseReason
from payment_saga.orders import Order
from payment_saga.payments import AttemptRecord, Charge, StripeProvider, idempotency_key
from payment_saga.reconcile import ReconcileReport, reconcile
from saga_local.stripe_emulator import ProviderEmulator

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.helpers import FakeClock


ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"
LEASE = 900
GRACE = 3600


def charge(provider: StripeProvider, order: Order = ORDER, attempt: int = 1) -> Charge:
    """The holder's charge, made before it died."""
    return provider.charge(order, attempt=attempt, idempotency_key=idempotency_key(order.order_id, attempt))


def row(dynamodb: Any, table: str, order_id: str = ORDER.order_id) -> dict[str, Any]:
    item: dict[str, Any] = dynamodb.get_item(
        TableName=table, Key={"orderId": {"S": order_id}}, ConsistentRead=True
    )["Item"]
    return item


def assert_charged_once(store: ClaimsStore, emulator: ProviderEmulator, order: Order, charge_id: str) -> None:
    """The claim is completed with ``charge_id``, a later delivery is a duplicate, one charge in all."""
    claim = store.get(order.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, charge_id)
    assert store.claim(order, token=B).result is ClaimResult.DUPLICATE
    assert len(emulator.charges_for(order.order_id)) == 1


def sweep(store: ClaimsStore, provider: Any, clock: FakeClock, *, apply: bool = True) -> ReconcileReport:
    return reconcile(store, provider, now=clock.now, apply=apply, search_grace_seconds=GRACE)


class RacingProvider:
    """Runs ``race`` between the sweeper's discovery and its write, then answers as ``provider``."""

    def __init__(self, provider: StripeProvider, race: Callable[[], object]) -> None:
        self.provider = provider
        self.race = race

    def charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge:
        raise AssertionError("the sweeper must never charge")

    def find_charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge | None:
        raise AssertionError("the sweeper searches with search_attempt")

    def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> AttemptRecord:
        self.race()
        return self.provider.search_attempt(order, attempt=attempt, idempotency_key=idempotency_key)

    def list_attempt(
        self, order: Order, *, attempt: int, idempotency_key: str, **window: Any
    ) -> AttemptRecord:
        return self.provider.list_attempt(order, attempt=attempt, idempotency_key=idempotency_key, **window)


def release_as_not_charged(store: ClaimsStore, token: str = A) -> None:
    """A release whose proof was wrong: the holder releases an attempt whose charge did land."""
    store.release(ORDER.order_id, token=token, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")
