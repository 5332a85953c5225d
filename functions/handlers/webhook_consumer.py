"""Webhook consumer: each verified Stripe PaymentIntent event from the webhook queue, applied to its claim.

The receiver (``handlers.webhook_receiver``) verified the signature and queued the event as Stripe
signed it. This function reads the event's claim (one strongly consistent read of the base table),
decides with ``payment_saga.webhooks`` (the rules beside the sweeper's) and makes the one conditional
write the decision leads to. Partial batch responses: one event that fails (DynamoDB throttled, a
body that is not a PaymentIntent event) is retried alone and, after the queue's ``maxReceiveCount``,
dead-lettered for a person (``WebhookDeadLetterAlarm``); its neighbours are not held back.

Every event is a structured log line with ``orderId`` (``webhook_<outcome>``) and a metric
(``WebhookApplied`` by ``Outcome``). The two findings that are money taken wrongly are logged at
ERROR and counted on the metrics the sweeper's alarms already watch: ``duplicate_charge`` /
``DuplicateCharge`` (a second succeeded PaymentIntent for one attempt) and
``charge_on_released_claim`` / ``ChargeOnReleasedClaim``. A PaymentIntent that names the order but
not its amount or currency is logged at ERROR too (``webhook_mismatch`` / ``WebhookMismatch``), and so
is an event whose ``livemode`` is not the stack's (``PAYMENT_API_MODE``, the mode of its API key):
``webhook_wrong_mode``, refused without a read or a write.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from handlers.runtime import claims_store, count, env, log_event, logger, metrics, tracer
from payment_saga.webhooks import WebhookOutcome, handle_event, parse_event

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.webhooks import WebhookDecision

processor = BatchProcessor(event_type=EventType.SQS)

#: Outcomes a person must look at, logged at ERROR under these names (each counted for its alarm).
_ALARMED = {
    WebhookOutcome.DUPLICATE_CHARGE: "duplicate_charge",
    WebhookOutcome.CHARGE_ON_RELEASED: "charge_on_released_claim",
    WebhookOutcome.MISMATCH: "webhook_mismatch",
    WebhookOutcome.WRONG_MODE: "webhook_wrong_mode",
}


def record_decision(decision: WebhookDecision, event_type: str) -> None:
    """One log event and one metric per event; an ERROR and an alarm's metric for money taken wrongly."""
    fields: dict[str, Any] = {
        "orderId": decision.order_id,
        "attempt": decision.attempt,
        "eventId": decision.event_id,
        "eventType": event_type,
        "paymentIntentId": decision.payment_intent_id,
        "reason": decision.reason,
        "applied": decision.applied,
    }
    name = _ALARMED.get(decision.outcome)
    if name is None:
        log_event(f"webhook_{decision.outcome.value}", **fields)
        count("WebhookApplied", Outcome=decision.outcome.value)
        return
    # As the sweeper logs them: chargeId is the charge the claim records, the others are to refund.
    fields["chargeId"] = decision.claim_charge_id
    if decision.outcome is WebhookOutcome.DUPLICATE_CHARGE:
        fields["duplicateChargeIds"] = [decision.payment_intent_id]
    logger.error(name, extra={"event": name, **fields})
    count("WebhookApplied", Outcome=decision.outcome.value)
    if decision.outcome is WebhookOutcome.DUPLICATE_CHARGE:
        count("DuplicateCharge")
    elif decision.outcome is WebhookOutcome.CHARGE_ON_RELEASED:
        count("ChargeOnReleasedClaim")
    elif decision.outcome is WebhookOutcome.MISMATCH:
        count("WebhookMismatch")


def record_handler(record: SQSRecord) -> None:
    """Apply one queued event. Raising marks only this record as failed (partial batch response)."""
    event = parse_event(json.loads(record.body))
    logger.append_keys(orderId=event.order_id)
    livemode = env("PAYMENT_API_MODE", "test") == "live"
    record_decision(handle_event(claims_store(), event, livemode=livemode), event.type)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    """SQS event source entry point; returns ``batchItemFailures``."""
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
