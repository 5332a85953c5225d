"""Release Claim: free the claim, but only on proof that nothing was charged (invariant 6).

The proof is the error that routed the execution here: a definitive decline, or a failure before the
provider was called on the attempt's first request. When the Claim step itself failed, the order is
first fenced against its write, and a claim that did land is released only if this execution started
the attempt and was never redriven. Any other error is ambiguous and the claim is kept: its lease
runs out and the sweeper asks the provider. The decisions, and why each is safe, are in
``payment_saga.releasing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, count, log_event, logger, metrics, tracer
from payment_saga import releasing
from payment_saga.orders import order_from_message

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


def _tell(release: releasing.Release) -> None:
    """One log line and one metric for what the step did."""
    if release.how is releasing.How.FENCED:
        log_event(
            "claim_fenced",
            reason="the failed claim can no longer land",
            fence=release.fence_result,
            holderStatus=release.holder_status,
            sendAgain=release.send_again,
        )
        count("ClaimFenced")
    elif release.how is releasing.How.KEPT:
        log_event("release_skipped", reason="no proof: attempt taken over, or execution redriven")
        count("ReleaseSkipped")
    else:
        log_event("claim_released", reason=release.reason, attempt=release.released_attempt)
        count("ClaimReleased")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"claimToken", "redriveCount", "state"}``: the state holds the order and the error.

    Output ``{"released", "reason", "attempt", "sendAgain"}``. Raises ``ReleaseRefused`` when the
    error proves nothing: the claim is kept.
    """
    state = event["state"]
    order = order_from_message(state["order"])
    token = event["claimToken"]
    logger.append_keys(orderId=order.order_id, execution=token)
    if "claimError" in state:
        redrives = int(event.get("redriveCount", 0))
        release = releasing.after_failed_claim(claims_store(), order, token=token, redrive_count=redrives)
    else:
        error = (state.get("error") or {}).get("Error")
        release = releasing.after_failed_charge(claims_store(), order, token=token, error=error)
    _tell(release)
    return release.output()
