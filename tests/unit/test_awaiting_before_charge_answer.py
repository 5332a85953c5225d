"""The row a Charge Payment whose outcome is unknown reads: only a settlement wait recorded on its own
open claim (by Stripe's processing webhook) turns the unknown outcome into the provider's answer."""

from __future__ import annotations

import dataclasses

import pytest

from payment_saga.claims import Claim, ClaimStatus, ReleaseReason, awaiting_before_charge_answer
from tests.unit.claim_support import OPEN

TOKEN = OPEN.claim_token
ATTEMPT = OPEN.attempt
AWAITING = dataclasses.replace(OPEN, settlement_intent_id="pi_debit")


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        pytest.param(AWAITING, "pi_debit", id="open, this token and attempt, awaiting: the webhook's answer"),
        pytest.param(OPEN, None, id="open and awaiting nothing: still unknown"),
        pytest.param(dataclasses.replace(AWAITING, claim_token="arn:other"), None, id="another token"),
        pytest.param(dataclasses.replace(AWAITING, attempt=ATTEMPT + 1), None, id="another attempt"),
        pytest.param(
            dataclasses.replace(AWAITING, status=ClaimStatus.COMPLETED, charge_id="pi_debit"),
            None,
            id="completed: not a wait",
        ),
        pytest.param(
            dataclasses.replace(AWAITING, status=ClaimStatus.RELEASED, release_reason=ReleaseReason.DECLINED),
            None,
            id="released: not a wait",
        ),
    ],
)
def test_only_a_wait_on_the_steps_own_open_claim_answers_for_it(claim: Claim, expected: str | None) -> None:
    assert awaiting_before_charge_answer(claim, token=TOKEN, attempt=ATTEMPT) == expected
