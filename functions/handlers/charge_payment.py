"""Charge Payment: one confirmed PaymentIntent, keyed by the order and its attempt number.

Retrying this step is safe only because the provider call carries the order's idempotency key
(invariant 5): a retry after a timeout or a 5xx either replays the first result or applies once.
A retry that finds its claim already settled by Stripe's webhook charges nothing: completed, it hands
that charge on to Mark Complete; released declined for this attempt, it raises
``SettledBeforeChargeAnswer`` and the execution ends in "Settled Before Charge Answer".
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

# Imported at init, not on the first charge: this is the one function that calls Stripe at every
# invocation (payment_saga.payments imports the SDK on first use, so the other functions never load it).
import stripe  # noqa: F401

from handlers.runtime import claims_store, count, log_event, logger, metrics, provider, tracer
from payment_saga.api_keys import KeyModeMismatch
from payment_saga.claims import Settled, awaiting_before_charge_answer, settled_before_charge_answer
from payment_saga.errors import (
    ChargeNotAttempted,
    ClaimLost,
    PaymentDeclined,
    PaymentOutcomeUnknown,
    PaymentProcessing,
    SettledBeforeChargeAnswer,
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


def _settled_meanwhile(order_id: str, *, token: str, attempt: int) -> tuple[Claim | None, Settled | None]:
    """The claim, and how this attempt's own settlement closed it under this execution's token, if it
    did (a strongly consistent read, only after ``check_held`` refused; the domain's
    ``settled_before_charge_answer`` decides): ``(None, None)`` when the read fails or finds no row."""
    try:
        claim = claims_store().get(order_id)
    except Exception:  # noqa: BLE001 - a read that fails proves nothing: refuse, as check_held did
        return None, None
    if claim is None:
        return None, None
    return claim, settled_before_charge_answer(claim, token=token, attempt=attempt)


def _awaited_meanwhile(order_id: str, *, token: str, attempt: int) -> str | None:
    """The PaymentIntent Stripe's webhook recorded this attempt's claim as awaiting the settlement
    of, after the provider's answer was lost (a strongly consistent read; the domain's
    ``awaiting_before_charge_answer`` decides), or None: also when the read fails, which proves
    nothing and leaves the outcome unknown."""
    try:
        claim = claims_store().get(order_id)
    except Exception:  # noqa: BLE001 - a read that fails proves nothing: the outcome stays unknown
        return None
    return None if claim is None else awaiting_before_charge_answer(claim, token=token, attempt=attempt)


def _processing_said_by_webhook(
    order_id: str, key: str, payment_intent_id: str, unknown: PaymentOutcomeUnknown
) -> PaymentProcessing:
    """The answer the lost one would have been, as Stripe's webhook gave it: logged and counted as
    the provider's own ``processing`` answer is."""
    log_event("charge_processing", chargeId=payment_intent_id, learnedFrom="webhook", reason=str(unknown))
    count("ChargeProcessing")
    return PaymentProcessing(
        json.dumps(
            {
                "paymentIntentId": payment_intent_id,
                "status": "processing",
                "reason": f"payment for order {order_id} ({key}) settles later, as Stripe's webhook said",
            },
            sort_keys=True,
        ),
        payment_intent_id=payment_intent_id,
    )


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
        claim, settled = _settled_meanwhile(order.order_id, token=token, attempt=attempt)
        if claim is not None and settled is Settled.CHARGED:
            # A retry after a lost answer, and Stripe's webhook (or the sweeper) already completed the
            # claim with this attempt's PaymentIntent: the money moved, once. Hand that charge on, so
            # Mark Complete finds its own completion and the order ends charged, not in reconciliation.
            log_event("charge_completed_meanwhile", chargeId=claim.charge_id)
            count("ChargeCompletedMeanwhile")
            return {
                "chargeId": claim.charge_id,
                "status": "succeeded",
                "amount": order.amount,
                "currency": order.currency,
                "replayed": True,
            }
        if claim is not None and settled is Settled.DECLINED:
            # A retry after a lost answer, and Stripe's webhook already released the claim for this
            # attempt's failed PaymentIntent: nothing was charged, and the relay published the decline
            # from that write. Never charge again; the state machine ends it without a page.
            failed = claim.declined_intent_id or claim.settlement_intent_id
            log_event("settled_before_charge_answer", chargeId=failed, settled=settled.value)
            count("SettledBeforeChargeAnswer")
            raise SettledBeforeChargeAnswer(
                json.dumps(
                    {
                        "orderId": order.order_id,
                        "attempt": attempt,
                        "paymentIntentId": failed,
                        "settled": settled.value,
                        "status": claim.status.value,
                    },
                    sort_keys=True,
                )
            ) from exc
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
        awaited = _awaited_meanwhile(order.order_id, token=token, attempt=attempt)
        if awaited is not None:
            # The answer was lost, but Stripe's processing webhook recorded the wait on this very
            # attempt's claim: the provider said what the answer would have. Await Settlement, no page.
            raise _processing_said_by_webhook(order.order_id, key, awaited, exc) from exc
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
