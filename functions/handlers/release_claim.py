"""Release Claim: free the claim, but only on proof that nothing was charged (invariant 6).

The proof is the error that routed the execution here (see ``payment_saga.proof``): a definitive
decline, or a failure before the provider was called on the attempt's first request. When the
Claim step itself failed, its write may still be in flight, so this first *fences* the order against
it (a conditional write, never a read); only if the claim did land, and this execution started the
attempt and was never redriven, is it released. Any other error is ambiguous and the claim is kept:
its lease runs out and the sweeper asks the provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, count, log_event, logger, metrics, tracer
from payment_saga.claims import FenceResult, ReleaseReason
from payment_saga.errors import ReleaseRefused
from payment_saga.orders import order_from_message
from payment_saga.proof import may_release_failed_claim, release_reason

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.orders import Order


#: Release Claim's ``reason`` when a failed Claim step's claim did land and cannot be proven uncharged:
#: kept, and the execution goes on to Needs Reconciliation (state "Claim Kept").
KEPT = "KEPT"


def _after_failed_claim(order: Order, token: str, redrive_count: int) -> dict[str, Any]:
    """The Claim step failed: fence its write off, then release only what provably charged nothing.

    ``sendAgain`` tells the state machine to put the order back on the queue itself: only when the
    fence met a row whose status it did not change, so no closing transition reaches the outcome
    relay (``Fence.must_send_again``). A tombstone or a release is re-queued by the relay.
    """
    store = claims_store()
    fence = store.fence_failed_claim(order, token=token)
    held = fence.claim
    if fence.result is not FenceResult.HELD or held is None:
        # Nothing of ours to release, and now nothing of ours can ever land.
        send_again = fence.must_send_again(order, token=token)
        log_event(
            "claim_fenced",
            reason="the failed claim can no longer land",
            fence=fence.result.value,
            holderStatus=held.status.value if held else None,
            sendAgain=send_again,
        )
        count("ClaimFenced")
        return {
            "released": False,
            "reason": ReleaseReason.NOT_CHARGED.value,
            "attempt": None,
            "sendAgain": send_again,
        }
    if not may_release_failed_claim(
        attempt_started_by=held.attempt_started_by, token=token, redrive_count=redrive_count
    ):
        # A takeover continues an attempt whose first holder may have charged; a redriven execution
        # may have charged in an earlier run. No proof, no release: the claim is kept, and the
        # execution ends in Needs Reconciliation (the sweeper asks the provider), not Claim Failed.
        log_event("release_skipped", reason="no proof: attempt taken over, or execution redriven")
        count("ReleaseSkipped")
        return {"released": False, "reason": KEPT, "attempt": held.attempt, "sendAgain": False}
    claim = store.release(
        order.order_id, token=token, reason=ReleaseReason.NOT_CHARGED, payment_attempt=order.payment_attempt
    )
    log_event("claim_released", reason=ReleaseReason.NOT_CHARGED.value, attempt=claim.attempt)
    count("ClaimReleased")
    # A closing transition: the outcome relay re-queues it.
    return {
        "released": True,
        "reason": ReleaseReason.NOT_CHARGED.value,
        "attempt": held.attempt,
        "sendAgain": False,
    }


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"claimToken", "redriveCount", "state"}``: the state holds the order and the error.

    Output ``{"released", "reason", "attempt", "sendAgain"}``.
    """
    state = event["state"]
    order = order_from_message(state["order"])
    token = event["claimToken"]
    logger.append_keys(orderId=order.order_id, execution=token)
    if "claimError" in state:
        return _after_failed_claim(order, token, int(event.get("redriveCount", 0)))
    error = (state.get("error") or {}).get("Error")
    reason = release_reason(error)
    if reason is None:
        raise ReleaseRefused(f"{error!r} does not prove that nothing was charged; the claim is kept")
    claim = claims_store().release(
        order.order_id, token=token, reason=reason, payment_attempt=order.payment_attempt
    )
    log_event("claim_released", reason=reason.value, attempt=claim.attempt)
    count("ClaimReleased")
    return {"released": True, "reason": reason.value, "attempt": claim.attempt, "sendAgain": False}
