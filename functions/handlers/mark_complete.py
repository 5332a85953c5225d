"""Mark Complete: the fenced write that closes the claim once the money moved."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, count, log_event, logger, metrics, tracer
from payment_saga.errors import ClaimLost

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"orderId", "claimToken", "charge": {"chargeId", "amount", "currency"}, "attempt"}``.

    Output: the execution's result, ``{"orderId", "status": "CHARGED", "chargeId", "attempt",
    "amount", "currency"}`` (Mark Complete is the last state: no Pass state after it). Also when the
    claim was completed with this very charge by the execution that took the attempt over: the
    order is charged, once, and there is nothing to reconcile.
    """
    order_id = event["orderId"]
    token = event["claimToken"]
    charge = event["charge"]
    logger.append_keys(orderId=order_id, execution=token)
    try:
        claim = claims_store().complete(order_id, token=token, charge_id=charge["chargeId"])
    except ClaimLost as exc:
        logger.error("complete_refused", extra={"event": "complete_refused", "reason": str(exc)})
        count("CompleteRefused")
        raise
    if claim.claim_token != token:
        # Our attempt was taken over and the taker completed it with the charge the provider replayed
        # to it: the same PaymentIntent as ours. Counted apart: the completion is the taker's.
        log_event("claim_completed_by_takeover", chargeId=claim.charge_id, attempt=claim.attempt)
        count("ClaimCompletedByTakeover")
    else:
        log_event("claim_completed", chargeId=claim.charge_id, attempt=claim.attempt)
        count("ClaimCompleted")
    return {
        "orderId": order_id,
        "status": "CHARGED",
        "chargeId": claim.charge_id,
        "attempt": claim.attempt,
        "amount": charge["amount"],
        "currency": charge["currency"],
    }
