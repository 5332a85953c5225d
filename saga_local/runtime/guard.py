"""The lab's ``IDEMPOTENCY=0`` switch, for ``saga demo`` only: bypass the claim, to show what it prevents.

This module lives in ``saga_local`` and is applied only inside the local stack's worker processes
when the stack is started with the guard off. Nothing under ``functions/`` knows it exists, and
``sam deploy`` never ships it.
"""

from __future__ import annotations

from typing import Any


def disable_claim_guard() -> None:
    """Every claim "wins" as a new first attempt; completions and the charge's re-check always pass."""
    from payment_saga.claims import Claim, ClaimOutcome, ClaimResult, ClaimsStore, ClaimStatus

    def claim(self: ClaimsStore, order: Any, *, token: str) -> ClaimOutcome:
        now = int(self._clock())
        row = Claim(
            order.order_id,
            ClaimStatus.CLAIMED,
            token,
            1,
            order.fingerprint,
            order.payment_attempt,
            now + self.lease_seconds,
            now,
        )
        return ClaimOutcome(ClaimResult.NEW, row)

    def complete(self: ClaimsStore, order_id: str, *, token: str, charge_id: str) -> Claim:
        now = int(self._clock())
        return Claim(order_id, ClaimStatus.COMPLETED, token, 1, "", "", now, now, charge_id=charge_id)

    def check_held(self: ClaimsStore, order_id: str, **_kwargs: Any) -> None:
        return None

    ClaimsStore.claim = claim  # type: ignore[method-assign]
    ClaimsStore.complete = complete  # type: ignore[method-assign]
    # Charge Payment re-reads the claim before charging; with the guard off there is none to read.
    ClaimsStore.check_held = check_held  # type: ignore[method-assign,assignment]
