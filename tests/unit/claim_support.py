"""What the unit tests of the claim's decision tables share: the open claim every row starts from, and
the claim one execution holds at its second attempt, with the rows that close it for a PaymentIntent."""

from __future__ import annotations

import dataclasses

from payment_saga.claims import Claim, ClaimStatus, ReleaseReason

A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"

OPEN = Claim(
    order_id="ORDER-003",
    status=ClaimStatus.CLAIMED,
    claim_token=A,
    attempt=1,
    fingerprint="15000|BRL|cus_123",
    payment_attempt="1",
    lease_expires_at=1_790_000_900,
    attempt_started_at=1_790_000_000,
    attempt_started_by=A,
)

PI = "pi_this_attempts"
#: The webhook rules' open claim, held by this execution at attempt 2 and awaiting nothing yet.
HELD = dataclasses.replace(OPEN, attempt=2)
TOKEN = HELD.claim_token


def row(**changes: object) -> Claim:
    """The held claim with ``changes``: the row a write or a re-check found."""
    return dataclasses.replace(HELD, **changes)  # type: ignore[arg-type]


COMPLETED = row(status=ClaimStatus.COMPLETED, charge_id=PI)
DECLINED = row(status=ClaimStatus.RELEASED, release_reason=ReleaseReason.DECLINED, declined_intent_id=PI)
