"""The functional tests' shared fixtures: the provider emulator on the test's clock, the official SDK's
provider against it, the claims store on that clock with the lease the tests advance past
(``sweeper_support.LEASE``), and the sweeper Lambda's environment. A module that needs another of one
of these names defines its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from handlers import runtime as handler_runtime
from payment_saga.claims import ClaimsStore
from payment_saga.payments import StripeProvider
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import ProviderEmulator
from tests.functional.sweeper_support import LEASE

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.helpers import FakeClock


@pytest.fixture
def emulator(clock: FakeClock) -> Iterator[ProviderEmulator]:
    # The emulator runs on the test's clock too: search lag and idempotency windows move with it.
    with ProviderEmulator(clock=clock) as emulator:
        yield emulator


@pytest.fixture
def provider(emulator: ProviderEmulator) -> Iterator[StripeProvider]:
    provider = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    yield provider
    provider.close()


@pytest.fixture
def store(dynamodb: Any, claims_table: str, clock: FakeClock) -> ClaimsStore:
    return ClaimsStore(claims_table, client=dynamodb, clock=clock, lease_seconds=LEASE)


@pytest.fixture
def sweeper_env(
    monkeypatch: pytest.MonkeyPatch, claims_table: str, emulator: ProviderEmulator
) -> Iterator[None]:
    monkeypatch.setenv("CLAIMS_TABLE_NAME", claims_table)
    monkeypatch.setenv("PAYMENT_API_BASE", emulator.url)
    monkeypatch.setenv("PAYMENT_API_KEY", LOCAL_API_KEY)
    monkeypatch.setenv("CLAIM_SEARCH_GRACE_SECONDS", "60")
    monkeypatch.setenv("CLAIM_RETENTION_DAYS", "30")
    handler_runtime.reset()
    yield
    handler_runtime.reset()
