"""Webhook consumer: each doorbell from the webhook queue, answered by reading Stripe, applied to its claim.

The receiver (``handlers.webhook_receiver``) verified the signature and queued what identifies the
event (a doorbell). A queued message is a claim to check, not a fact: whoever could put it there, it
only names a PaymentIntent. This function reads that PaymentIntent from Stripe with the stack's own
key (one ``GET /v1/payment_intents/{id}``: another account's, or a forged id, reads as not found),
reads the claim its metadata names (one strongly consistent read of the base table), decides with
``payment_saga.webhooks`` on what Stripe answered now (the rules beside the sweeper's) and makes the
one conditional write the decision leads to. A read that fails (429, 5xx, a timeout) decides nothing:
the message is retried later. Partial batch responses: one doorbell that fails (Stripe or DynamoDB
unavailable, a body that is not a doorbell) is retried alone and, after the queue's
``maxReceiveCount``, dead-lettered for a person (``WebhookDeadLetterAlarm``); its neighbours are not
held back.

Every event is a structured log line with ``orderId`` (``webhook_<outcome>``) and a metric
(``WebhookApplied`` by ``Outcome``). The two findings that are money taken wrongly are logged at
ERROR and counted on the metrics the sweeper's alarms already watch: ``duplicate_charge`` /
``DuplicateCharge`` (a second succeeded PaymentIntent for one attempt) and
``charge_on_released_claim`` / ``ChargeOnReleasedClaim``. A PaymentIntent that names the order but
not its amount or currency is logged at ERROR too (``webhook_mismatch`` / ``WebhookMismatch``), and so
is an event whose ``livemode`` is not the stack's (``PAYMENT_API_MODE``, the mode of its API key):
``webhook_wrong_mode``, refused without a read or a write. A doorbell naming a PaymentIntent Stripe
does not have in this account is ``webhook_not_found`` (a WARNING: forged, or another account's).
Every read of Stripe is counted (``WebhookIntentRead``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, count, each_message, env, logger, metrics, provider, tracer
from payment_saga.webhooks import WebhookOutcome, answer_doorbell, log_line, parse_doorbell

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.webhooks import WebhookDecision


def record_decision(decision: WebhookDecision, event_type: str) -> None:
    """One log event and one metric per event; an ERROR and an alarm's metric for money taken wrongly."""
    line = log_line(decision, event_type)
    getattr(logger, line.level)(line.event, extra={"event": line.event, **line.fields})
    count("WebhookApplied", Outcome=decision.outcome.value)
    if decision.outcome is WebhookOutcome.DUPLICATE_CHARGE:
        count("DuplicateCharge")
    elif decision.outcome is WebhookOutcome.CHARGE_ON_RELEASED:
        count("ChargeOnReleasedClaim")
    elif decision.outcome is WebhookOutcome.MISMATCH:
        count("WebhookMismatch")


def record_handler(record: dict[str, Any]) -> None:
    """Answer one queued doorbell. Raising marks only this record as failed (partial batch response)."""
    bell = parse_doorbell(json.loads(record["body"]))
    livemode = env("PAYMENT_API_MODE", "test") == "live"
    if bell.livemode == livemode:  # a doorbell of the other mode is refused before any read
        count("WebhookIntentRead")
    decision = answer_doorbell(claims_store(), provider(), bell, livemode=livemode)
    logger.append_keys(orderId=decision.order_id)
    record_decision(decision, bell.type)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """SQS event source entry point; returns ``batchItemFailures``."""
    return each_message(event, record_handler)
