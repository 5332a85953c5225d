"""The rows of the settled-before-await decision: when Await Settlement's write fails its condition, the
row it failed on says whether Stripe's webhook already settled this attempt with this PaymentIntent
(no page) or not (Needs Reconciliation). Pure: claims as the failed write returned them."""

from __future__ import annotations

import dataclasses

import pytest

from payment_saga.claims import Claim, ClaimStatus, ReleaseReason, Settled, settled_before_await
from tests.unit.claim_support import COMPLETED, DECLINED, HELD, PI, TOKEN, row


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        pytest.param(COMPLETED, Settled.CHARGED, id="completed-with-this-intent"),
        pytest.param(
            row(status=ClaimStatus.COMPLETED, charge_id=PI, settlement_intent_id=PI),
            Settled.CHARGED,
            id="completed-after-awaiting-it",
        ),
        pytest.param(DECLINED, Settled.DECLINED, id="released-declined-for-this-intent"),
        pytest.param(
            row(status=ClaimStatus.RELEASED, release_reason=ReleaseReason.DECLINED, settlement_intent_id=PI),
            Settled.DECLINED,
            id="released-declined-while-awaiting-it",
        ),
        pytest.param(
            row(status=ClaimStatus.COMPLETED, charge_id="pi_other"), None, id="completed-with-another"
        ),
        pytest.param(
            dataclasses.replace(COMPLETED, claim_token="another"), None, id="completed-another-token"
        ),
        pytest.param(dataclasses.replace(COMPLETED, attempt=3), None, id="completed-another-attempt"),
        pytest.param(
            dataclasses.replace(DECLINED, declined_intent_id="pi_other"), None, id="declined-for-another"
        ),
        pytest.param(dataclasses.replace(DECLINED, declined_intent_id=None), None, id="declined-naming-none"),
        pytest.param(dataclasses.replace(DECLINED, claim_token="another"), None, id="declined-another-token"),
        pytest.param(dataclasses.replace(DECLINED, attempt=1), None, id="declined-another-attempt"),
        pytest.param(
            dataclasses.replace(DECLINED, release_reason=ReleaseReason.NOT_CHARGED),
            None,
            id="released-not-charged",
        ),
        pytest.param(HELD, None, id="still-claimed"),
        pytest.param(row(settlement_intent_id="pi_other"), None, id="awaiting-another"),
        pytest.param(row(claim_token="another"), None, id="taken-over"),
    ],
)
def test_only_this_attempts_own_settlement_ends_the_await_without_a_page(
    claim: Claim, expected: Settled | None
) -> None:
    assert settled_before_await(claim, token=TOKEN, attempt=2, payment_intent_id=PI) is expected
