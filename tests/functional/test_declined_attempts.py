"""Every declined payment attempt is remembered, however it was found to be declined.

A customer told "your card was refused" must never be charged by a late redelivery of that attempt,
whether the decline was seen by the Charge step (Release Claim) or later by the sweeper (its release
failed, the provider's records show the PaymentIntent failed), and however many attempts followed.
Runs the real conditional writes against moto's DynamoDB.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from payment_saga.claims import ClaimResult, ClaimsStore, ReleaseReason
from payment_saga.orders import Order
from tests.functional.sweeper_support import LEASE

ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_chargeDeclined")
RETRY_1 = replace(ORDER, payment_attempt="retry-1", payment_method="pm_card_visa_chargeDeclinedExpiredCard")
A, B, C = (f"arn:aws:states:us-east-1:123456789012:execution:saga:{n}" for n in "ABC")


def test_an_attempt_the_sweeper_found_declined_stays_declined_after_the_next_attempt_declines_too(
    store: ClaimsStore, clock: Any
) -> None:
    # "initial" was declined, but its Release Claim failed: the sweeper found the failed
    # PaymentIntent once the lease ran out, and released the claim DECLINED.
    store.claim(ORDER, token=A)
    clock.advance(LEASE + 1)
    seen = store.get(ORDER.order_id)
    assert seen is not None
    store.release_stale(seen, reason=ReleaseReason.DECLINED)
    # The customer retried with another card ("retry-1"): declined as well.
    assert store.claim(RETRY_1, token=B).result is ClaimResult.NEW_ATTEMPT
    store.release(ORDER.order_id, token=B, reason=ReleaseReason.DECLINED, payment_attempt="retry-1")

    late = store.claim(ORDER, token=C)  # a late redelivery of "initial"

    assert late.result is ClaimResult.DUPLICATE
    row = store.get(ORDER.order_id)
    assert row is not None
    assert row.declined_attempts == {"initial", "retry-1"}
