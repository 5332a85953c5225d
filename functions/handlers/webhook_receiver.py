"""Webhook receiver: Stripe's signed events in through a Lambda function URL, a queue message out.

Stripe expects a 2xx within seconds, retries anything else for up to three days, and disables an
endpoint that keeps failing. So this function does only what must happen before the answer:

* verify the ``Stripe-Signature`` header with the Stripe SDK's own verification, against every
  signing secret in the secret (two while a rotation has both valid), with a timestamp tolerance;
  a request that fails it is answered 400 and changes nothing: the signature is the endpoint's only
  authentication (the URL's AuthType is NONE), so nobody but Stripe can move a claim through it;
* answer 400 to a body that is not a JSON event, 200 to an event type the saga does not act on
  (dropped: it is Stripe's expectation, and what Stripe would retry is nothing we need);
* answer 200 to an event of another Stripe account (``account`` set: a Connect endpoint's) and drop
  it: this saga charges on its own account only, so such an event is never about its PaymentIntents;
* queue, for each verified PaymentIntent event, only what identifies it (a doorbell: event id, type,
  PaymentIntent id, ``livemode``, ``created``; no customer data, no client secret), and answer 200
  only once SQS has it. If SQS fails, the function fails, Stripe gets a 5xx and sends the event
  again: nothing is lost. The consumer reads that PaymentIntent from Stripe with the stack's own key
  and applies what Stripe answers (``handlers.webhook_consumer``): the event's own body is believed
  for nothing but its identifiers.

Every answer is a structured log line (``webhook_received`` with ``orderId``, ``webhook_dropped``
with its reason, ``webhook_rejected`` with its reason) and a metric (``WebhookReceived``,
``WebhookDropped``, ``WebhookRejected`` by ``Reason``).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import TYPE_CHECKING, Any

from handlers.runtime import (
    after_restore,
    client,
    count,
    env,
    log_event,
    logger,
    metrics,
    secret_string,
    tracer,
)
from payment_saga.webhooks import (
    DEFAULT_TOLERANCE_SECONDS,
    PAYMENT_INTENT_EVENTS,
    MalformedEvent,
    doorbell_of_event,
    signature_valid,
    signing_secrets_from_string,
)

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

SIGNATURE_HEADER = "stripe-signature"
#: The secret is read once per container, and again on a signature failure at most this often: a
#: rotation (a new secret added, or the old one removed) takes effect without a deploy, and a flood of
#: forged requests cannot turn into a flood of Secrets Manager calls.
SECRET_REFRESH_SECONDS = 60
#: And whatever happens, at least this often: a secret taken out of the secret (the end of a
#: rotation, or a leak) stops verifying within this time in every warm container.
SECRET_MAX_AGE_SECONDS = 300

#: The per-container cache: the secret's ARN, its signing secrets, and when they were read.
_cache: tuple[str, tuple[str, ...], float] = ("", (), 0.0)


def _signing_secrets(*, refresh: bool = False) -> tuple[str, ...]:
    global _cache  # as runtime.py keeps its clients: one container, one cache
    arn = env("WEBHOOK_SIGNING_SECRET_ARN")
    cached_arn, cached, read_at = _cache
    if cached and cached_arn == arn and not refresh and time.time() - read_at < SECRET_MAX_AGE_SECONDS:
        return cached
    _cache = (arn, signing_secrets_from_string(secret_string(arn)), time.time())
    return _cache[1]


def _read_at() -> float:
    return _cache[2]


def reset() -> None:
    """Forget the cached signing secrets (tests; a new container does this by starting)."""
    global _cache
    _cache = ("", (), 0.0)


after_restore(reset)  # a SnapStart restore reads the signing secrets again (handlers.runtime.after_restore)


def _verified(payload: str, header: str | None) -> bool:
    tolerance = int(env("WEBHOOK_TOLERANCE_SECONDS", str(DEFAULT_TOLERANCE_SECONDS)))
    if signature_valid(payload, header, _signing_secrets(), tolerance=tolerance):
        return True
    if not header or time.time() - _read_at() < SECRET_REFRESH_SECONDS:
        return False
    # Perhaps the secret was rotated since this container read it: read it again, once.
    return signature_valid(payload, header, _signing_secrets(refresh=True), tolerance=tolerance)


def _answer(status: int, message: str) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"message": message}),
    }


def _reject(reason: str, message: str, status: int = 400) -> dict[str, Any]:
    logger.warning("webhook_rejected", extra={"event": "webhook_rejected", "reason": reason})
    count("WebhookRejected", Reason=reason)
    return _answer(status, message)


def _body(event: dict[str, Any]) -> str | None:
    body = event.get("body") or ""
    if not event.get("isBase64Encoded"):
        return str(body)
    try:
        return base64.b64decode(body, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input: a function URL request (payload format 2.0). Output: the HTTP answer Stripe reads."""
    method = (event.get("requestContext") or {}).get("http", {}).get("method", "")
    if method != "POST":
        return _reject("method", "POST only", 405)
    payload = _body(event)
    if payload is None:
        return _reject("malformed", "the body is not UTF-8")
    headers = {str(k).lower(): v for k, v in (event.get("headers") or {}).items()}
    header = headers.get(SIGNATURE_HEADER)
    if not _verified(payload, header):
        # Stale, forged, unsigned or signed with a secret we do not hold: nothing is read from it.
        if header:
            # Signed, but not with a secret we hold, or too old: what Stripe's own deliveries look like
            # after the endpoint's secret was rolled and not updated here. The alarm watches this one.
            count("WebhookSignatureRejected")
        return _reject("signature", "the Stripe-Signature header does not verify")
    try:
        data = json.loads(payload)
        event_id, event_type = data["id"], data["type"]
        if not isinstance(event_id, str) or not isinstance(event_type, str):
            raise TypeError("id and type must be strings")
    except (ValueError, TypeError, KeyError):
        return _reject("malformed", "the body is not a Stripe event")
    if event_type not in PAYMENT_INTENT_EVENTS:
        return _drop(event_id, event_type, "an event type the saga does not act on")
    if data.get("account"):
        # A connected account's event (a Connect endpoint, or its secret configured here): its
        # PaymentIntents are not this account's, and the consumer's read with our key would not find
        # them. Answered 200 so that Stripe stops sending it; counted, so a person sees the setup.
        return _drop(event_id, event_type, "an event of another Stripe account")
    try:
        bell = doorbell_of_event(data)
    except MalformedEvent:
        return _reject("malformed", "the event does not name a PaymentIntent")
    client("sqs").send_message(
        QueueUrl=env("WEBHOOK_QUEUE_URL"),
        MessageBody=json.dumps(bell.to_message(), sort_keys=True),
        MessageAttributes={
            "eventId": {"DataType": "String", "StringValue": event_id},
            "eventType": {"DataType": "String", "StringValue": event_type},
        },
    )
    log_event(
        "webhook_received",
        orderId=_claimed_order_id(data),
        eventId=event_id,
        eventType=event_type,
        paymentIntentId=bell.payment_intent_id,
    )
    count("WebhookReceived")
    return _answer(200, "queued")


def _drop(event_id: str, event_type: str, reason: str) -> dict[str, Any]:
    log_event("webhook_dropped", eventId=event_id, eventType=event_type, reason=reason)
    count("WebhookDropped")
    return _answer(200, "ignored")


def _claimed_order_id(data: dict[str, Any]) -> str | None:
    """The orderId the event's PaymentIntent metadata names, for the log line only (never queued:
    the consumer reads it from Stripe)."""
    intent = (data.get("data") or {}).get("object") or {}
    metadata = intent.get("metadata") if isinstance(intent, dict) else None
    value = metadata.get("orderId") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) and value else None
