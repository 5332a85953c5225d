"""The lab's ``IDEMPOTENCY=0`` switch, for ``saga demo`` only: bypass the claim, to show what it prevents.

One switch, one seam. The local runtime's ``guard_off`` (``EmbeddedStack(guard=False)``) starts each
worker process with ``GUARD_OFF_ENV`` (:mod:`saga_local.runtime.api`) set, and the worker calls
:func:`disable_claim_guard` before it imports the handler. That puts :class:`UnguardedClaimsStore`
where the handlers' store factory (``handlers.runtime.claims_store``) finds ``ClaimsStore``;
nothing else is touched.

The class overrides the store's methods through ``@override``, so mypy fails the build the day one of
them is renamed or its signature changes, instead of the demo quietly charging once (the first act
then shows four charges no more: ``tests/local/test_demo.py`` checks it does).

Nothing under ``functions/`` knows this module exists, and ``sam deploy`` never ships it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from payment_saga import claims
from payment_saga.claims import Claim, ClaimOutcome, ClaimResult, ClaimsStore, ClaimStatus

if TYPE_CHECKING:
    from typing_extensions import override

    from payment_saga.orders import Order
else:  # Python 3.11 has no typing.override; the check is mypy's, at runtime it is the identity.

    def override(method: Any) -> Any:
        return method


class UnguardedClaimsStore(ClaimsStore):
    """A claims store with no gate: every claim wins as a new first attempt; re-checks always pass."""

    @override
    def claim(self, order: Order, *, token: str) -> ClaimOutcome:
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

    @override
    def complete(
        self, order_id: str, *, token: str, charge_id: str, webhook_event: str | None = None
    ) -> Claim:
        now = int(self._clock())
        return Claim(order_id, ClaimStatus.COMPLETED, token, 1, "", "", now, now, charge_id=charge_id)

    @override
    def check_held(self, order_id: str, *, token: str, attempt: int, margin_seconds: int) -> Claim:
        # Charge Payment re-reads the claim before charging; with the guard off there is none to read.
        now = int(self._clock())
        return Claim(order_id, ClaimStatus.CLAIMED, token, attempt, "", "", now + margin_seconds, now)

    @override
    def get(self, order_id: str) -> Claim | None:
        # Charge Payment reads its claim first: with the guard off no claim was written, so it reads an
        # open one that records nothing (and is always still held, below).
        row = super().get(order_id)
        if row is not None:
            return row
        now = int(self._clock())
        return Claim(order_id, ClaimStatus.CLAIMED, "", 1, "", "", now + self.lease_seconds, now)

    @override
    def still_held(self, claim: Claim, *, token: str, attempt: int, margin_seconds: int) -> bool:
        return True


def disable_claim_guard() -> None:
    """Have the handlers' store factory build :class:`UnguardedClaimsStore` (call before importing one)."""
    claims.ClaimsStore = UnguardedClaimsStore  # type: ignore[misc]
