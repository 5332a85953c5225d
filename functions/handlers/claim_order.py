"""Claim Order: the conditional write on ``orderId`` that admits (at most) one charge."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, count, log_event, logger, metrics, tracer
from payment_saga.claims import ClaimResult
from payment_saga.errors import ClaimBusy, DuplicateOrder, OrderConflict
from payment_saga.orders import order_from_message
from payment_saga.payments import idempotency_key

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"order": {...}, "claimToken": "<execution id>"}``.

    Output when the claim is won (always the same keys, so the state machine's ``ResultSelector``
    never misses one): ``outcome`` (``WON``), ``how``, ``attempt``, ``idempotencyKey``,
    ``holderStatus``, and ``attemptOwner``: whether this execution started the attempt (false after
    a takeover, even when a retried Claim step then finds the claim its own), which the release and
    the charge's "nothing was charged" proofs require.

    Raises:
        DuplicateOrder: the claim was not won (someone else holds or finished the order); its
            message is JSON ``{"orderId", "holderStatus", "how"}``.
    """
    order = order_from_message(event["order"])
    token = event["claimToken"]
    logger.append_keys(orderId=order.order_id, execution=token)
    try:
        outcome = claims_store().claim(order, token=token)
    except OrderConflict:
        log_event("order_conflict")
        count("OrderConflict")
        raise
    claim = outcome.claim
    logger.append_keys(attempt=claim.attempt)
    if outcome.result is ClaimResult.BUSY:
        log_event("claim_busy", holderStatus=claim.status.value, holderPaymentAttempt=claim.payment_attempt)
        count("ClaimBusy")
        raise ClaimBusy(
            json.dumps({"orderId": order.order_id, "holderStatus": claim.status.value, "how": "BUSY"})
        )
    if not outcome.result.won:
        log_event("skip_duplicate", holderStatus=claim.status.value, holder=claim.claim_token)
        count("DuplicateSuppressed", Layer="claim")
        raise DuplicateOrder(
            json.dumps({"orderId": order.order_id, "holderStatus": claim.status.value, "how": "DUPLICATE"})
        )
    log_event("claim_won", how=outcome.result.value)
    count("ClaimWon")
    return {
        "outcome": "WON",
        "how": outcome.result.value,
        "attempt": claim.attempt,
        "idempotencyKey": idempotency_key(order.order_id, claim.attempt),
        "holderStatus": claim.status.value,
        "attemptOwner": claim.attempt_started_by == token,
    }
