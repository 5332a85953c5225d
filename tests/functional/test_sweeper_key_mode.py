"""The sweeper Lambda with a key of the other mode than the stack's: it asks Stripe nothing, resolves
nothing, and fails (its Errors metric: SweeperErrorsAlarm), after logging which modes disagree."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import pytest

from handlers import sweeper
from payment_saga.api_keys import KeyModeMismatch
from payment_saga.claims import ClaimsStore, ClaimStatus
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

    with pytest.raises(KeyModeMismatch):
        sweeper.handler(event, LambdaContext("payment-saga-SweeperFunction", 256, 300))

    assert sum(emulator.request_count(endpoint) for endpoint in ENDPOINTS) == 0
    claim = ClaimsStore(claims_table, client=dynamodb).get(sweeping.ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.claim_token) == (ClaimStatus.CLAIMED, sweeping.A)  # left as it was
    refusals = [r for r in caplog.records if getattr(r, "event", None) == "payment_key_mode_mismatch"]
    assert [(r.levelname, r.keyMode, r.stackMode) for r in refusals] == [("ERROR", "test", "live")]  # type: ignore[attr-defined]
