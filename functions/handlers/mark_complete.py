"""Mark Complete: the fenced write that closes the claim once the money moved.

The same function makes the state machine's other write on a held claim, in state "Await
Settlement": a payment the provider settles later keeps the claim open, fenced on its token. When
Stripe's webhook settled the attempt first, that write raises ``SettledBeforeAwait`` and the
execution ends in "Settled Before Await".
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, count, log_event, logger, metrics, tracer
from payment_saga.errors import ClaimLost, SettledBeforeAwait

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


def settling_intent(error: dict[str, Any]) -> str:
    """The PaymentIntent named by Charge Payment's ``PaymentProcessing`` as the state machine caught it.

    ``error`` is the Catch's ``{"Error", "Cause"}``; ``Cause`` is Lambda's error JSON, whose
    ``errorMessage`` is the JSON the provider client wrote (``payments.PaymentProcessing``).
    """
    message = json.loads(error["Cause"])["errorMessage"]
    intent = json.loads(message)["paymentIntentId"]
    if not isinstance(intent, str) or not intent:
        raise ValueError("PaymentProcessing names no PaymentIntent")
    return intent


def _await_settlement(event: dict[str, Any]) -> dict[str, Any]:
    order_id = event["orderId"]
    token = event["claimToken"]
    attempt = int(event["attempt"])
    intent = settling_intent(event["settlement"])
    try:
        claim = claims_store().await_settlement(
            order_id, token=token, attempt=attempt, payment_intent_id=intent
        )
    except SettledBeforeAwait as exc:
        # Stripe's webhook settled this attempt with this PaymentIntent first: the order has its end,
        # published by the relay from the webhook's write. The state machine ends it without a page.
        log_event(
            "settled_before_await", chargeId=intent, attempt=attempt, settled=json.loads(str(exc))["settled"]
        )
        count("SettledBeforeAwait")
        raise
    except ClaimLost as exc:
        logger.error("settlement_refused", extra={"event": "settlement_refused", "reason": str(exc)})
        count("SettlementRefused")
        raise
    log_event("awaiting_settlement", chargeId=intent, attempt=attempt, settleBy=claim.settle_by)
    count("AwaitingSettlement")
    return {"orderId": order_id, "paymentIntentId": intent, "attempt": attempt, "settleBy": claim.settle_by}


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
    token = event["claimToken"]
    charge = event["charge"]
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
