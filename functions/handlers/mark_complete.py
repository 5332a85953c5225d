"""Mark Complete: the fenced write that closes the claim once the money moved.

The same function makes the state machine's other write on a held claim, in state "Await
Settlement": a payment the provider settles later keeps the claim open, fenced on its token. When
Stripe's webhook settled the attempt first, that write raises ``SettledBeforeAwait`` and the
execution ends in "Settled Before Await". The decisions are in ``payment_saga.completing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, count, log_event, logger, metrics, tracer
from payment_saga import completing
from payment_saga.errors import ClaimLost, SettledBeforeAwait

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


def _await_settlement(event: dict[str, Any]) -> dict[str, Any]:
    wait = completing.Settlement.of(event)
    try:
        claim = wait.await_on(claims_store())
    except SettledBeforeAwait as exc:
        # Stripe's webhook settled this attempt with this PaymentIntent first: the order has its end,
        # published by the relay from the webhook's write. The state machine ends it without a page.
        settled = completing.settled_as(exc)
        log_event("settled_before_await", chargeId=wait.intent, attempt=wait.attempt, settled=settled)
        count("SettledBeforeAwait")
        raise
    except ClaimLost as exc:
        logger.error("settlement_refused", extra={"event": "settlement_refused", "reason": str(exc)})
        count("SettlementRefused")
        raise
    log_event("awaiting_settlement", chargeId=wait.intent, attempt=wait.attempt, settleBy=claim.settle_by)
    count("AwaitingSettlement")
    return wait.output(claim)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"orderId", "claimToken", "charge": {"chargeId", "amount", "currency"}, "attempt"}``.

    Output: the execution's result, ``{"orderId", "status": "CHARGED", "chargeId", "attempt",
    "amount", "currency"}`` (Mark Complete is the last state: no Pass state after it). Also when the
    claim was completed with this very charge by the execution that took the attempt over: the
    order is charged, once, and there is nothing to reconcile.

    With ``"settlement"`` (state "Await Settlement": ``{"orderId", "claimToken", "attempt",
    "settlement": <the caught PaymentProcessing>}``) it records that the claim awaits the
    settlement of the PaymentIntent instead; output ``{"orderId", "paymentIntentId", "attempt",
    "settleBy"}``.
    """
    logger.append_keys(orderId=event["orderId"], execution=event["claimToken"])
    if "settlement" in event:
        return _await_settlement(event)
    order_id = event["orderId"]
    charge = event["charge"]
    try:
        done = completing.complete(
            claims_store(), order_id, token=event["claimToken"], charge_id=charge["chargeId"]
        )
    except ClaimLost as exc:
        logger.error("complete_refused", extra={"event": "complete_refused", "reason": str(exc)})
        count("CompleteRefused")
        raise
    if done.by_takeover:
        log_event("claim_completed_by_takeover", chargeId=done.claim.charge_id, attempt=done.claim.attempt)
        count("ClaimCompletedByTakeover")
    else:
        log_event("claim_completed", chargeId=done.claim.charge_id, attempt=done.claim.attempt)
        count("ClaimCompleted")
    return done.output(order_id, charge)
