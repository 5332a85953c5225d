"""Charge Payment: one confirmed PaymentIntent, keyed by the order and its attempt number.

Retrying this step is safe only because the provider call carries the order's idempotency key
(invariant 5): a retry after a timeout or a 5xx either replays the first result or applies once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Imported at init, not on the first charge: this is the one function that calls Stripe at every
# invocation (payment_saga.payments imports the SDK on first use, so the other functions never load it).
import stripe  # noqa: F401

from handlers.runtime import claims_store, count, log_event, logger, metrics, provider, tracer
from payment_saga.api_keys import KeyModeMismatch
from payment_saga.claims import ClaimStatus
from payment_saga.errors import (
    ChargeNotAttempted,
    ClaimLost,
    PaymentDeclined,
    PaymentOutcomeUnknown,
    PaymentProcessing,
)
from payment_saga.orders import order_from_message
from payment_saga.payments import idempotency_key
from payment_saga.proof import first_request_of_attempt

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.claims import Claim
    from payment_saga.payments import StripeProvider


#: A charge is only sent while the claim's lease has at least this long to run: longer than this
#: function's timeout, so the sweeper cannot decide about the attempt while the request is in flight.
LEASE_MARGIN_SECONDS = 60


def _provider() -> StripeProvider:
    try:
        return provider()
    except KeyModeMismatch as exc:
        # The key is of the other mode than the stack's (runtime.provider logged and counted it): nothing
        # was sent, so the claim may be released with proof, as after the provider refusing the key.
        raise ChargeNotAttempted(f"payment provider refused before any request: {exc}") from exc
    except Exception as exc:  # any failure here is before the provider was called
        raise ChargeNotAttempted(f"payment provider unavailable: {type(exc).__name__}") from exc


def _completed_for_this_attempt(order_id: str, *, token: str, attempt: int) -> Claim | None:
    """The claim, if it is COMPLETED under this execution's token at this attempt (a strongly
    consistent read, only after ``check_held`` refused): the one charge of the attempt is recorded."""
    try:
        claim = claims_store().get(order_id)
    except Exception:  # noqa: BLE001 - a read that fails proves nothing: refuse, as check_held did
        return None
    if (
        claim is not None
        and claim.status is ClaimStatus.COMPLETED
        and claim.claim_token == token
        and claim.attempt == attempt
        and claim.charge_id is not None
    ):
        return claim
    return None


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"order", "claim": {"attempt", "how", ...}, "claimToken", "retryCount", "redriveCount"}``.

    Output: the charge (``chargeId``, ``status``, ``amount``, ``currency``, ``replayed``).
    """
    order = order_from_message(event["order"])
    attempt = int(event["claim"]["attempt"])
    # Derived here, not taken from the input: the key is a function of the order and attempt only.
    key = idempotency_key(order.order_id, attempt)
    token = event["claimToken"]
    logger.append_keys(orderId=order.order_id, attempt=attempt, execution=token)
    try:
        claims_store().check_held(
            order.order_id, token=token, attempt=attempt, margin_seconds=LEASE_MARGIN_SECONDS
        )
    except ClaimLost as exc:
        done = _completed_for_this_attempt(order.order_id, token=token, attempt=attempt)
        if done is not None:
            # A retry after a lost answer, and Stripe's webhook (or the sweeper) already completed the
            # claim with this attempt's PaymentIntent: the money moved, once. Hand that charge on, so
            # Mark Complete finds its own completion and the order ends charged, not in reconciliation.
            log_event("charge_completed_meanwhile", chargeId=done.charge_id)
            count("ChargeCompletedMeanwhile")
            return {
                "chargeId": done.charge_id,
                "status": "succeeded",
                "amount": order.amount,
                "currency": order.currency,
                "replayed": True,
            }
        logger.error("charge_refused", extra={"event": "charge_refused", "reason": str(exc)})
        count("ChargeRefused")
        raise
    try:
        charge = _provider().charge(order, attempt=attempt, idempotency_key=key)
    except ChargeNotAttempted as exc:
        if first_request_of_attempt(
            retry_count=int(event.get("retryCount", 0)),
            redrive_count=int(event.get("redriveCount", 0)),
            attempt_owner=event["claim"].get("attemptOwner") is True,
        ):
            log_event("charge_not_attempted", reason=str(exc))
            count("ChargeNotAttempted")
            raise
        # This request did not reach the provider, but an earlier one with the same key may have
        # (Stripe checks the API key before the idempotency key): no proof, so no release.
        logger.warning(
            "charge_outcome_unknown", extra={"event": "charge_outcome_unknown", "reason": str(exc)}
        )
        count("ChargeOutcomeUnknown")
        raise PaymentOutcomeUnknown(
            f"not attempted on retry; an earlier request may have landed: {exc}"
        ) from exc
    except PaymentDeclined as exc:
        log_event("charge_declined", declineCode=exc.decline_code)
        count("ChargeDeclined")
        raise
    except PaymentProcessing as exc:
        # Not unknown: the provider settles it later and says how in a webhook. The state machine
        # keeps the claim for it (Await Settlement); nothing to retry, nothing to page.
        log_event("charge_processing", chargeId=exc.payment_intent_id)
        count("ChargeProcessing")
        raise
    except PaymentOutcomeUnknown as exc:
        logger.warning(
            "charge_outcome_unknown", extra={"event": "charge_outcome_unknown", "reason": str(exc)}
        )
        count("ChargeOutcomeUnknown")
        raise
    log_event("charge_applied", chargeId=charge.charge_id, replayed=charge.replayed, amount=charge.amount)
    count("ChargeReplayed" if charge.replayed else "ChargeApplied")
    return {
        "chargeId": charge.charge_id,
        "status": charge.status,
        "amount": charge.amount,
        "currency": charge.currency,
        "replayed": charge.replayed,
    }
