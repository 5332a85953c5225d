"""The sweeper Lambda with a key of the other mode than the stack's: it asks Stripe nothing, resolves
nothing, and fails (its Errors metric: SweeperErrorsAlarm), after logging which modes disagree. It reads
the key only for a claim that needs Stripe: a sweep with nothing stale reads none."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from typing import TYPE_CHECKING, Any

import pytest

from handlers import runtime as handler_runtime
from handlers import sweeper
from payment_saga.api_keys import KeyModeMismatch
from payment_saga.claims import ClaimsStore, ClaimStatus
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import ProviderUnavailable
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.runtime.api import LambdaContext
from saga_local.stripe_emulator import ENDPOINTS
from saga_local.template import ROOT
from tests.functional import sweeper_support as sweeping

if TYPE_CHECKING:
    from saga_local.stripe_emulator import ProviderEmulator


def test_the_sweeper_with_a_key_of_the_other_mode_asks_stripe_nothing_and_fails(
    sweeper_env: None,
    dynamodb: Any,
    claims_table: str,
    emulator: ProviderEmulator,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("PAYMENT_API_MODE", "live")  # the key is a test key
    past = ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000)
    past.claim(sweeping.ORDER, token=sweeping.A)  # stale: its lease ran out long ago
    event = json.loads((ROOT / "events" / "sweeper.json").read_text())

    with pytest.raises(ProviderUnavailable) as failed:
        sweeper.handler(event, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert isinstance(failed.value.__cause__, KeyModeMismatch)
    assert sum(emulator.request_count(endpoint) for endpoint in ENDPOINTS) == 0
    claim = ClaimsStore(claims_table, client=dynamodb).get(sweeping.ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.claim_token) == (ClaimStatus.CLAIMED, sweeping.A)  # left as it was
    refusals = [r for r in caplog.records if getattr(r, "event", None) == "payment_key_mode_mismatch"]
    assert [(r.levelname, r.keyMode, r.stackMode) for r in refusals] == [("ERROR", "test", "live")]  # type: ignore[attr-defined]


def test_a_sweep_with_nothing_stale_reads_no_key_and_still_beats(
    sweeper_env: None,
    emulator: ProviderEmulator,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Nothing stale, nothing awaiting a settlement: no key is read, so a key of the other mode is not
    # met here (Charge Payment and the webhook consumer meet it first) and the heartbeat goes on.
    monkeypatch.setenv("PAYMENT_API_MODE", "live")

    result = sweeper.handler({}, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert result["finished"] is True
    assert "SweepCompleted" in capfd.readouterr().out
    assert not [r for r in caplog.records if getattr(r, "event", None) == "payment_key_mode_mismatch"]
    assert sum(emulator.request_count(endpoint) for endpoint in ENDPOINTS) == 0


def test_a_sweep_builds_the_stripe_client_only_for_a_claim_that_needs_it(
    sweeper_env: None, dynamodb: Any, claims_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[StripeProvider] = []

    def build() -> StripeProvider:
        built.append(StripeProvider(LOCAL_API_KEY, api_base=os.environ["PAYMENT_API_BASE"]))
        return built[-1]

    monkeypatch.setattr(handler_runtime, "provider", functools.cache(build))  # reset() clears it
    context = LambdaContext("payment-saga-SweeperFunction", 256, 300)

    assert sweeper.handler({}, context)["counts"]["pending"] == 0
    assert sweeper.handler({"check": "settlements"}, context)["settlementCheck"] == {}
    assert built == []  # nothing stale, nothing awaiting a settlement: no client, no SDK loaded for it

    past = ClaimsStore(claims_table, client=dynamodb, clock=lambda: time.time() - 5000)
    for order_id in ("ORDER-LAZY-1", "ORDER-LAZY-2"):
        past.claim(dataclasses.replace(sweeping.ORDER, order_id=order_id), token=sweeping.A)
    assert sum(sweeper.handler({}, context)["counts"].values()) == 2
    assert len(built) == 1  # one client for the sweep, whatever the number of claims
