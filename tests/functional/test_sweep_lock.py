"""The sweeper's lease row: one sweep at a time without reserved concurrency (moto's DynamoDB).

The row lives in the claims table as template.yaml declares it; these tests check that one
conditional write decides who sweeps, that a dead sweep's lease runs out, that the row never looks
like a claim, and that the Lambda skips a tick while another sweep holds the lease.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from handlers import runtime as handler_runtime
from handlers import sweeper
from payment_saga.claims import ClaimsStore
from payment_saga.orders import ORDER_ID_PATTERN, Order
from payment_saga.sweep_lock import LEASE_MARGIN_SECONDS, SWEEP_LOCK_KEY, SweepLock, lease_for
from saga_local.runtime.api import LambdaContext
from tests.helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lock(dynamodb: Any, claims_table: str, clock: FakeClock) -> SweepLock:
    return SweepLock(claims_table, client=dynamodb, clock=clock)


def test_the_first_sweep_takes_the_lease_and_a_second_one_is_told_who_holds_it(lock: SweepLock) -> None:
    first = lock.acquire("sweep-a", lease_seconds=300)
    second = lock.acquire("sweep-b", lease_seconds=300)

    assert first.acquired
    assert not second.acquired
    assert (second.holder, second.expires_at) == ("sweep-a", first.expires_at)


def test_a_retried_invocation_finds_its_own_lease(lock: SweepLock, clock: FakeClock) -> None:
    """Lambda retries an asynchronous event with the same request id: that is the same sweep."""
    lock.acquire("sweep-a", lease_seconds=300)
    clock.now += 60

    again = lock.acquire("sweep-a", lease_seconds=300)

    assert again.acquired
    assert again.expires_at == int(clock.now) + 300


def test_a_dead_sweeps_lease_runs_out_and_the_next_tick_takes_over(lock: SweepLock, clock: FakeClock) -> None:
    lock.acquire("sweep-a", lease_seconds=300)  # then it dies without releasing
    clock.now += 299
    assert not lock.acquire("sweep-b", lease_seconds=300).acquired

    clock.now += 1
    assert lock.acquire("sweep-b", lease_seconds=300).acquired
    # The dead sweep, should it come back, can no longer release what is now someone else's.
    assert lock.release("sweep-a") is False
    assert not lock.acquire("sweep-c", lease_seconds=300).acquired


def test_a_finished_sweep_releases_the_lease_for_the_next_tick(lock: SweepLock) -> None:
    lock.acquire("sweep-a", lease_seconds=300)

    assert lock.release("sweep-a") is True
    assert lock.acquire("sweep-b", lease_seconds=300).acquired


def test_the_lease_outlasts_the_invocation_that_takes_it() -> None:
    assert lease_for(300_000) == 300 + LEASE_MARGIN_SECONDS
    assert lease_for(1) > 0


def test_the_lease_row_is_no_claim(
    lock: SweepLock, dynamodb: Any, claims_table: str, clock: FakeClock
) -> None:
    """No order id can collide with it, and the sweeper's discovery (the open-claims index) never
    lists it, however long ago its lease ran out."""
    assert not ORDER_ID_PATTERN.match(SWEEP_LOCK_KEY)
    lock.acquire("sweep-a", lease_seconds=1)
    store = ClaimsStore(claims_table, client=dynamodb, clock=clock)
    store.claim(Order("ORDER-001", 1000, "EUR", "cus_1", "pm_card_visa"), token="exec-1")

    found = [claim.order_id for claim in store.open_claims(lease_expired_before=int(clock.now) + 10**6)]

    assert found == ["ORDER-001"]
    assert store.get("ORDER-001") is not None


# -- the Lambda ------------------------------------------------------------------------------------


@pytest.fixture
def sweeper_env(monkeypatch: pytest.MonkeyPatch, claims_table: str) -> Iterator[None]:
    monkeypatch.setenv("CLAIMS_TABLE_NAME", claims_table)
    # No stale claim is seeded: the provider is built but never called.
    monkeypatch.setenv("PAYMENT_API_BASE", "http://127.0.0.1:9")
    monkeypatch.setenv("PAYMENT_API_KEY", "sk_test_not_a_real_key")
    monkeypatch.setenv("CLAIM_RETENTION_DAYS", "30")
    handler_runtime.reset()
    yield
    handler_runtime.reset()


def test_a_tick_that_overlaps_a_running_sweep_skips_it(
    sweeper_env: None, dynamodb: Any, claims_table: str, capfd: pytest.CaptureFixture[str]
) -> None:
    running = SweepLock(claims_table, client=dynamodb)
    assert running.acquire("sweep-running", lease_seconds=300).acquired

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result == {"skipped": True, "heldBy": "sweep-running"}
    assert "SweepSkipped" in capfd.readouterr().out  # the metric, as Powertools writes it


def test_a_sweep_releases_its_lease_when_it_ends(sweeper_env: None, dynamodb: Any, claims_table: str) -> None:
    first = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))
    second = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert "skipped" not in first
    assert "skipped" not in second, "the first sweep kept the lease after it ended"


class NextTickMidSweep:
    """The sweeper's provider, slow: while the sweep asks about its claim, the schedule's next tick
    comes (a minute later) and tries to take the lease. Then the provider cannot be reached."""

    def __init__(self, claims_table: str, dynamodb: Any) -> None:
        self.next_tick = SweepLock(claims_table, client=dynamodb, clock=lambda: time.time() + 60)
        self.took_the_lease: bool | None = None

    def search_attempt(self, order: Order, *, attempt: int, idempotency_key: str) -> Any:
        self.took_the_lease = self.next_tick.acquire("next-tick", lease_seconds=300).acquired
        raise OSError("network unreachable")


def test_a_tick_a_minute_into_a_long_sweep_finds_the_lease_still_held(
    sweeper_env: None, dynamodb: Any, claims_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000).claim(
        Order("ORDER-001", 1000, "EUR", "cus_1", "pm_card_visa"), token="dead-execution"
    )
    slow = NextTickMidSweep(claims_table, dynamodb)
    monkeypatch.setattr(handler_runtime, "provider", functools.cache(lambda: slow))  # reset() clears it

    with pytest.raises(RuntimeError, match="1 stale claim"):
        sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert slow.took_the_lease is False, "a second sweep started beside the first"
