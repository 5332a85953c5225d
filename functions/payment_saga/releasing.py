"""Release Claim's decisions: free the claim, but only on proof that nothing was charged (invariant 6).

The proof is the error that routed the execution here (``payment_saga.proof``): a definitive
decline, or a failure before the provider was called on the attempt's first request. Any other error
is ambiguous: ``ReleaseRefused``, and the claim is kept (its lease runs out and the sweeper asks the
provider).

When the Claim step itself failed, its write may still be in flight, so the order is first *fenced*
against it (a conditional write, never a read):

======================================================  ==========================================
What the fence met                                      What Release Claim does
======================================================  ==========================================
no claim of this execution (a tombstone now stands      **fenced**: nothing to release, and now
there, or the token joined another row's fence)         nothing of ours can ever land
this execution's claim, on an attempt it started, in    **released** ``NOT_CHARGED``: its charge
an execution never redriven                             step never ran
this execution's claim, on an attempt taken over, or    **kept**: the earlier holder or run may
in a redriven execution                                 have charged; Needs Reconciliation
======================================================  ==========================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from payment_saga.claims import FenceResult, ReleaseReason
from payment_saga.errors import ReleaseRefused
from payment_saga.proof import may_release_failed_claim, release_reason

if TYPE_CHECKING:
    from payment_saga.claims import Claim, ClaimsStore, Fence
    from payment_saga.orders import Order

#: Release Claim's ``reason`` when a failed Claim step's claim did land and cannot be proven uncharged:
#: kept, and the execution goes on to Needs Reconciliation (state "Claim Kept").
KEPT = "KEPT"


class How(enum.Enum):
    """Which of the module's ends a Release Claim step came to."""

    RELEASED = "released"
    FENCED = "fenced"
    KEPT = "kept"


@dataclass(frozen=True)
class Release:
    """What one Release Claim step did: the step's output, and what its log line tells."""

    how: How
    reason: str
    #: The output's ``attempt``: the released or kept claim's, None when the fence met nothing of ours.
    attempt: int | None
    #: Whether the state machine must put the order back on the queue itself (``Fence.must_send_again``).
    send_again: bool = False
    #: The row as the release wrote it (``RELEASED`` only).
    released: Claim | None = None
    #: What the fence of a failed Claim step met (``FENCED`` only).
    fence: Fence | None = None

    @property
    def released_attempt(self) -> int | None:
        """The attempt the release wrote (``RELEASED`` only)."""
        return self.released.attempt if self.released is not None else None

    @property
    def fence_result(self) -> str | None:
        """What the fence did (``FenceResult``), or None when there was no fence."""
        return self.fence.result.value if self.fence is not None else None

    @property
    def holder_status(self) -> str | None:
        """The status of the row the fence met, or None for a tombstone or no fence."""
        held = self.fence.claim if self.fence is not None else None
        return held.status.value if held is not None else None

    def output(self) -> dict[str, Any]:
        """The step's output: ``{"released", "reason", "attempt", "sendAgain"}``."""
        return {
            "released": self.how is How.RELEASED,
            "reason": self.reason,
            "attempt": self.attempt,
            "sendAgain": self.send_again,
        }


def _release(store: ClaimsStore, order: Order, *, token: str, reason: ReleaseReason) -> Claim:
    return store.release(order.order_id, token=token, reason=reason, payment_attempt=order.payment_attempt)


def after_failed_charge(store: ClaimsStore, order: Order, *, token: str, error: str | None) -> Release:
    """The Charge step failed with ``error`` (its Catch's ``Error``): release on proof, else raise
    ``ReleaseRefused`` and keep the claim."""
    reason = release_reason(error)
    if reason is None:
        raise ReleaseRefused(f"{error!r} does not prove that nothing was charged; the claim is kept")
    claim = _release(store, order, token=token, reason=reason)
    return Release(How.RELEASED, reason.value, claim.attempt, released=claim)


def after_failed_claim(store: ClaimsStore, order: Order, *, token: str, redrive_count: int) -> Release:
    """The Claim step failed: fence its write off, then release only what provably charged nothing.

    ``send_again`` only when the fence met a row whose status it did not change, so no closing
    transition reaches the outcome relay (``Fence.must_send_again``). A tombstone or a release is
    re-queued by the relay.
    """
    fence = store.fence_failed_claim(order, token=token)
    held = fence.claim
    if fence.result is not FenceResult.HELD or held is None:
        # Nothing of ours to release, and now nothing of ours can ever land.
        send_again = fence.must_send_again(order, token=token)
        return Release(How.FENCED, ReleaseReason.NOT_CHARGED.value, None, send_again, fence=fence)
    if not may_release_failed_claim(
        attempt_started_by=held.attempt_started_by, token=token, redrive_count=redrive_count
    ):
        # A takeover continues an attempt whose first holder may have charged; a redriven execution
        # may have charged in an earlier run. No proof, no release: the claim is kept, and the
        # execution ends in Needs Reconciliation (the sweeper asks the provider), not Claim Failed.
        return Release(How.KEPT, KEPT, held.attempt)
    # A closing transition: the outcome relay re-queues it.
    claim = _release(store, order, token=token, reason=ReleaseReason.NOT_CHARGED)
    return Release(How.RELEASED, ReleaseReason.NOT_CHARGED.value, held.attempt, released=claim)
