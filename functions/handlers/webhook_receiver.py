"""Webhook receiver: Stripe's signed events in through a Lambda function URL, a queue message out.

What each request is answered, and why, is ``payment_saga.receiving``'s. A PaymentIntent event is
queued as a doorbell (``handlers.webhook_consumer`` reads Stripe for the rest), answered 200 only
once SQS has it: if SQS fails, Stripe gets a 5xx and sends it again. Each answer is a log line
(``webhook_received`` with ``orderId``, ``webhook_dropped``, ``webhook_rejected``) and its metric.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from handlers import runtime
from handlers.runtime import client, count, env, log_event, logger, metrics, secret_string, tracer
from payment_saga.receiving import Dropped, Rejected, Request, SigningSecrets, receive
from payment_saga.webhooks import DEFAULT_TOLERANCE_SECONDS

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.receiving import Queued

#: How often a signature failure may read the secret again, and how old it may grow whatever happens.
SECRET_REFRESH_SECONDS = 60
SECRET_MAX_AGE_SECONDS = 300
#: The per-container cache, as runtime.py keeps its clients: one container, one cache.
_secrets = SigningSecrets(read=lambda arn: secret_string(arn), clock=lambda: time.time())


def reset() -> None:
    """Forget the cached signing secrets (tests; a new container does this by starting)."""
    _secrets.forget()


runtime.after_restore(reset)  # a SnapStart restore reads the signing secrets again


def _verified(payload: str, header: str | None) -> bool:
    return _secrets.verify(
        payload,
        header,
        source=env("WEBHOOK_SIGNING_SECRET_ARN"),
        tolerance=int(env("WEBHOOK_TOLERANCE_SECONDS", str(DEFAULT_TOLERANCE_SECONDS))),
        refresh_seconds=SECRET_REFRESH_SECONDS,
        max_age_seconds=SECRET_MAX_AGE_SECONDS,
    )


def _request(event: dict[str, Any]) -> Request:
    headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
    method = (event.get("requestContext") or {}).get("http", {}).get("method", "")
    body = str(event.get("body") or "")
    return Request(method, body, bool(event.get("isBase64Encoded")), headers.get("stripe-signature"))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input: a function URL request (payload format 2.0). Output: the HTTP answer Stripe reads."""
    verdict = receive(_request(event), _verified)
    if isinstance(verdict, Rejected):
        if verdict.signed:  # the alarm watches this one: Stripe's deliveries after a rolled secret
            count("WebhookSignatureRejected")
        logger.warning("webhook_rejected", extra={"event": "webhook_rejected", "reason": verdict.reason})
        count("WebhookRejected", Reason=verdict.reason)
    elif isinstance(verdict, Dropped):
        log_event(
            "webhook_dropped", eventId=verdict.event_id, eventType=verdict.event_type, reason=verdict.reason
        )
        count("WebhookDropped")
    else:
        _queue(verdict)
    body = json.dumps({"message": verdict.message})
    return {"statusCode": verdict.status, "headers": {"Content-Type": "application/json"}, "body": body}


def _queue(queued: Queued) -> None:
    client("sqs").send_message(QueueUrl=env("WEBHOOK_QUEUE_URL"), **queued.queue_message())
    log_event(
        "webhook_received",
        orderId=queued.claimed_order_id,
        eventId=queued.event_id,
        eventType=queued.event_type,
        paymentIntentId=queued.bell.payment_intent_id,
    )
    count("WebhookReceived")
