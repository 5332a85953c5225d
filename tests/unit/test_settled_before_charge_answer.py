"""The rows of the settled-before-charge-answer decision: when a retried Charge Payment (its first
answer lost) finds its claim no longer open, the row says whether Stripe's webhook already settled
this attempt (no page, nothing charged again) or not (Needs Reconciliation). The retry knows no
PaymentIntent, so the row must name the one that settled it. Pure: claims as the re-check read them."""

from __future__ import annotations

import dataclasses

import pytest

from payment_saga.claims import Claim, ClaimStatus, ReleaseReason, Settled, settled_before_charge_answer
from tests.unit.claim_support import COMPLETED, DECLINED, HELD, PI, TOKEN, row


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        pytest.param(COMPLETED, Settled.CHARGED, id="completed-with-a-charge"),
        pytest.param(DECLINED, Settled.DECLINED, id="released-declined-naming-the-failed-intent"),
        pytest.param(
            row(status=ClaimStatus.RELEASED, release_reason=ReleaseReason.DECLINED, settlement_intent_id=PI),
            Settled.DECLINED,
            id="released-declined-while-awaiting-it",
        ),
        pytest.param(row(status=ClaimStatus.COMPLETED), None, id="completed-naming-no-charge"),
        pytest.param(
            dataclasses.replace(COMPLETED, claim_token="another"), None, id="completed-another-token"
        ),
        pytest.param(dataclasses.replace(COMPLETED, attempt=3), None, id="completed-another-attempt"),
        pytest.param(dataclasses.replace(DECLINED, declined_intent_id=None), None, id="declined-naming-none"),
        pytest.param(dataclasses.replace(DECLINED, claim_token="another"), None, id="declined-another-token"),
        pytest.param(dataclasses.replace(DECLINED, attempt=1), None, id="declined-another-attempt"),
        pytest.param(
            dataclasses.replace(DECLINED, release_reason=ReleaseReason.NOT_CHARGED),
            None,
            id="released-not-charged",
        ),
        pytest.param(HELD, None, id="still-claimed-its-lease-running-out"),
        pytest.param(row(settlement_intent_id=PI), None, id="still-awaiting-settlement"),
        pytest.param(row(claim_token="another"), None, id="taken-over"),
    ],
)
def test_only_this_attempts_own_settlement_ends_the_retried_charge_without_a_page(
    claim: Claim, expected: Settled | None
) -> None:
    assert settled_before_charge_answer(claim, token=TOKEN, attempt=2) is expected
