"""Release Claim: free the claim, but only on proof that nothing was charged (invariant 6).

The proof is the error that routed the execution here: a definitive decline, a failure before the
provider was called, or a failure of the Claim step itself (the charge never ran). Any other error
is ambiguous and this handler refuses to release: the claim then stays with the execution until
its lease runs out and the sweeper asks the provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, count, log_event, logger, metrics, tracer
from payment_saga.claims import ReleaseReason
from payment_saga.errors import ReleaseRefused

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

#: Error names (from the Charge step's Catch) that prove nothing was charged.
_PROOF = {"PaymentDeclined": ReleaseReason.DECLINED, "ChargeNotAttempted": ReleaseReason.NOT_CHARGED}


def release_reason(state: dict[str, Any]) -> ReleaseReason:
    """Decide the reason from the execution state, or refuse."""
    if "claimError" in state:  # Claim Order failed: the charge step never ran
        return ReleaseReason.NOT_CHARGED
    error = (state.get("error") or {}).get("Error")
    if error in _PROOF:
        return _PROOF[error]
    raise ReleaseRefused(f"{error!r} does not prove that nothing was charged; the claim is kept")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"claimToken", "state": <the execution state: order, and error or claimError>}``."""
    state = event["state"]
    order_id = state["order"]["orderId"]
    token = event["claimToken"]
    logger.append_keys(orderId=order_id, execution=token)
    reason = release_reason(state)
    store = claims_store()
    if "claimError" in state:
        current = store.get(order_id)
        if current is None or current.claim_token != token:
            # The failed claim never landed: there is nothing of ours to release.
            log_event("release_skipped", reason="claim not held by this execution")
            return {"released": False, "reason": reason.value}
        if current.attempt_started_by != token:
            # We took this attempt over from an expired lease: its first holder may have charged.
            # No proof, no release: the lease runs out again and the sweeper asks the provider.
            log_event("release_skipped", reason="attempt taken over; its first holder may have charged")
            return {"released": False, "reason": reason.value}
    claim = store.release(order_id, token=token, reason=reason)
    log_event("claim_released", reason=reason.value, attempt=claim.attempt)
    count("ClaimReleased")
    return {"released": True, "reason": reason.value, "attempt": claim.attempt}
