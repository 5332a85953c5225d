"""The one Lambda a team would otherwise write: Powertools' ``@idempotent`` (DynamoDB persistence) around
a charge through the ``stripe`` SDK, with Logger, Metrics and Tracer. ``bench/cold_start.py`` measures the
saga's cold order against its single cold invocation, built as a plain ``sam build`` ships it.

Written the way Powertools' and Stripe's documentation show it: the API key read from Secrets Manager
with Powertools' parameters utility (cached for the container), the idempotency record keyed by the order.
"""

from __future__ import annotations

import os
from typing import Any

import stripe
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)

logger = Logger()
tracer = Tracer()
metrics = Metrics()
persistence = DynamoDBPersistenceLayer(table_name=os.environ["IDEMPOTENCY_TABLE_NAME"])
config = IdempotencyConfig(event_key_jmespath="orderId", expires_after_seconds=24 * 3600)


def _client() -> stripe.StripeClient:
    secret: Any = parameters.get_secret(
        os.environ["PAYMENT_API_KEY_SECRET_ARN"], transform="json", max_age=300
    )
    base = os.environ.get("PAYMENT_API_BASE")
    return stripe.StripeClient(secret["apiKey"], base_addresses={"api": base} if base else None)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(config=config, persistence_store=persistence)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Charge the order ``{"orderId", "amount", "currency", "paymentMethod", ...}`` once."""
    logger.append_keys(orderId=event["orderId"])
    intent = _client().v1.payment_intents.create(
        {
            "amount": int(event["amount"]),
            "currency": str(event["currency"]).lower(),
            "payment_method": event["paymentMethod"],
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "confirm": True,
            "off_session": True,
            "metadata": {"orderId": event["orderId"]},
        },
        {"idempotency_key": f"order/{event['orderId']}"},
    )
    logger.info("charged", extra={"chargeId": intent.id, "status": intent.status})
    metrics.add_metric(name="Charged", unit=MetricUnit.Count, value=1)
    return {"orderId": event["orderId"], "chargeId": intent.id, "status": intent.status}
