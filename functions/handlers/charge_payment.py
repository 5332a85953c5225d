"""Charge Payment: one confirmed PaymentIntent, keyed by the order and its attempt number.

Retrying this step is safe only because the provider call carries the order's idempotency key
(invariant 5): a retry after a timeout or a 5xx either replays the first result or applies once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers.runtime import count, log_event, logger, metrics, provider, tracer
from payment_saga.errors import ChargeNotAttempted, PaymentDeclined, PaymentOutcomeUnknown
from payment_saga.orders import order_from_message
from payment_saga.payments import idempotency_key

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.payments import StripeProvider


def _provider() -> StripeProvider:
    try:
        return provider()
    except Exception as exc:  # noqa: BLE001 - any failure here is before the provider was called
        raise ChargeNotAttempted(f"payment provider unavailable: {type(exc).__name__}") from exc


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"order": {...}, "claim": {"attempt": n, ...}}``; output the charge."""
    order = order_from_message(event["order"])
    attempt = int(event["claim"]["attempt"])
    # Derived here, not taken from the input: the key is a function of the order and attempt only.
    key = idempotency_key(order.order_id, attempt)
    logger.append_keys(orderId=order.order_id, attempt=attempt, execution=event.get("claimToken"))
    payments = _provider()
    try:
        charge = payments.charge(order, attempt=attempt, idempotency_key=key)
    except PaymentDeclined as exc:
        log_event("charge_declined", declineCode=exc.decline_code)
        count("ChargeDeclined")
        raise
    except PaymentOutcomeUnknown as exc:
        logger.warning("charge_outcome_unknown", extra={"event": "charge_outcome_unknown", "reason": str(exc)})
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
