"""Charge Payment: one confirmed PaymentIntent, keyed by the order and its attempt number.

Retrying this step is safe only because the provider call carries the order's idempotency key
(invariant 5): a retry after a timeout or a 5xx either replays the first result or applies once.
Every try reads its claim first and never creates a second PaymentIntent for an attempt whose claim
records one: the decisions, and why each is safe, are in ``payment_saga.charging``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Imported at init, not on the first charge: this is the one function that calls Stripe at every
# invocation (payment_saga.payments imports the SDK on first use, so the other functions never load it).
import stripe  # noqa: F401

from handlers.runtime import claims_store, count, logger, metrics, provider, tracer
from payment_saga import charging
from payment_saga.api_keys import KeyModeMismatch
from payment_saga.errors import ChargeNotAttempted
from payment_saga.orders import order_from_message

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.payments import StripeProvider


def _provider() -> StripeProvider:
    try:
        return provider()
    except KeyModeMismatch as exc:
        # The key is of the other mode than the stack's (runtime.provider logged and counted it): nothing
        # was sent, so the claim may be released with proof, as after the provider refusing the key.
        raise ChargeNotAttempted(f"payment provider refused before any request: {exc}") from exc


def _journal(event: str, metric: str, *, level: str = "info", **fields: Any) -> None:
    getattr(logger, level)(event, extra={"event": event, **fields})
    count(metric)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input ``{"order", "claim": {"attempt", "how", ...}, "claimToken", "retryCount", "redriveCount"}``.

    Output: the charge (``chargeId``, ``status``, ``amount``, ``currency``, ``replayed``).
    """
    step = charging.ChargeTry(
        order=order_from_message(event["order"]),
        attempt=int(event["claim"]["attempt"]),
        token=event["claimToken"],
        retry_count=int(event.get("retryCount", 0)),
        redrive_count=int(event.get("redriveCount", 0)),
        attempt_owner=event["claim"].get("attemptOwner") is True,
    )
    logger.append_keys(orderId=step.order.order_id, attempt=step.attempt, execution=step.token)
    charge = charging.charge(step, store=claims_store(), provider=_provider, journal=_journal)
    return {
        "chargeId": charge.charge_id,
        "status": charge.status,
        "amount": charge.amount,
        "currency": charge.currency,
        "replayed": charge.replayed,
    }
