"""A client that gives up mid-request, under load: the provider emulator's side of a dropped connection.

When a Charge's HTTP call times out, the SDK closes the connection while the emulator may still be
reading the request, applying it, or writing the answer into a socket nobody reads (the
``BrokenPipe`` a loaded local stack used to print). Whichever of those happened, the saga's retry
with the same idempotency key must end with exactly one charge per order, and the emulator must go
on serving everyone else, without a traceback on stderr.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import TYPE_CHECKING

import pytest

from payment_saga.errors import PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import ProviderEmulator

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ORDERS = 40
THREADS = 8
RETRIES = 20


@pytest.fixture
def emulator() -> Iterator[ProviderEmulator]:
    with ProviderEmulator() as running:
        yield running


def _order(n: int) -> Order:
    return Order(
        order_id=f"ORDER-DROP-{n:03d}",
        amount=1000 + n,
        currency="BRL",
        customer_id="cus_123",
        payment_method="pm_card_visa",
    )


def _retry_as_the_state_machine_does(charge: Callable[[], object]) -> None:
    """Charge's Retry on ``PaymentOutcomeUnknown``: the same key again, after a wait. While the
    abandoned request is still being applied, the provider answers 409 "in progress" to the key."""
    for _ in range(RETRIES - 1):
        try:
            charge()
        except PaymentOutcomeUnknown:
            time.sleep(0.05)
        else:
            return
    charge()


def test_a_client_that_gives_up_mid_request_loses_no_order_and_charges_none_twice(
    emulator: ProviderEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    impatient_outcomes: list[str] = []
    errors: list[BaseException] = []
    pending = list(range(ORDERS))
    lock = threading.Lock()

    def customer() -> None:
        # One connection per thread, as in Lambda: the SDK's HTTP client keeps one per thread.
        impatient = StripeProvider(LOCAL_API_KEY, api_base=emulator.url, timeout_seconds=0.002)
        patient = StripeProvider(LOCAL_API_KEY, api_base=emulator.url, timeout_seconds=10.0)
        try:
            while True:
                with lock:
                    if not pending:
                        return
                    n = pending.pop()
                order = _order(n)
                key = idempotency_key(order.order_id, 1)
                try:
                    impatient.charge(order, attempt=1, idempotency_key=key)
                    impatient_outcomes.append("answered")
                except PaymentOutcomeUnknown:
                    impatient_outcomes.append("gave up")
                _retry_as_the_state_machine_does(
                    functools.partial(patient.charge, order, attempt=1, idempotency_key=key)
                )
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            impatient.close()
            patient.close()

    threads = [threading.Thread(target=customer) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert impatient_outcomes.count("gave up") > 0, "no client gave up: the test dropped no connection"
    charged = sorted(entry.order_id or "" for entry in emulator.charges())
    assert charged == sorted(_order(n).order_id for n in range(ORDERS))  # each order exactly once
    assert "Traceback" not in capfd.readouterr().err
