"""Sweeper: resolves claims whose lease ran out, by asking the provider what happened.

Run by a schedule (every 5 minutes, see template.yaml), it always applies what it decides: see
``payment_saga.reconcile`` for the decision table and why each branch is safe. It is the one
function that may read the ``OpenClaimsByLease`` index (discovery only, allowed to lag); every change
it makes is a conditional write on the base table, fenced on what it saw. It never charges.

Every decision is a structured log event with ``orderId`` (``reconciliation_completed``,
``reconciliation_released`` with its ``releaseReason`` NOT_CHARGED or DECLINED,
``reconciliation_pending``, ``reconciliation_changed``, ``reconciliation_failed``) and a metric:
``ReconciliationResolved`` by ``Outcome``, ``ReconciliationPending``, ``ReconciliationListCapped``
(pending because the attempt's window holds more PaymentIntents than the list may read,
``CLAIM_LIST_PAGE_CAP`` pages of 100: it stays so until a person decides), ``ReconciliationChanged``
and ``ReconciliationFailed``.

Every sweep that ran (not one that skipped its tick) also publishes, by ``FunctionName`` so that
each stack's alarms read their own sweeper:

* ``SweepCompleted``: the heartbeat. A skip publishes none: it is healthy only if the sweep holding
  the lease completes, and that sweep publishes its own. A sweeper that fails before it reaches a
  claim (the secret, the sweep lock, the index) publishes none either, and the heartbeat alarm fires.
* ``OldestUnresolvedClaimAge`` (seconds): how long ago the oldest attempt the sweep left pending or
  failed started, 0 when it left none; the pending alarm watches it.

Two findings are money taken wrongly, logged at ERROR and counted for an alarm each (runbook:
docs/runbook.md):

* ``charge_on_released_claim`` / ``ChargeOnReleasedClaim``: the provider shows a succeeded charge
  for an attempt whose claim was released (or re-claimed under a later attempt) since; the claim
  is now COMPLETED with that charge so nothing charges the order again, but a later attempt may
  already have: check for a second charge and refund it.
* ``duplicate_charge`` / ``DuplicateCharge`` (one per extra charge): more than one succeeded
  PaymentIntent for one attempt; the oldest is the order's charge, refund the others.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from handlers.runtime import (
    claims_store,
    client,
    count,
    env,
    log_event,
    logger,
    measure,
    metrics,
    provider,
    tracer,
)
from payment_saga.backstop import check_awaiting_settlements
from payment_saga.reconcile import (
    DEFAULT_LIST_PAGE_CAP,
    DEFAULT_SEARCH_GRACE_SECONDS,
    ReconcileOutcome,
    reconcile,
)
from payment_saga.sweep_lock import SweepLock, lease_for
from payment_saga.webhooks import WebhookOutcome

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.reconcile import ReconcileDecision

#: Stop starting claims when less time than this is left: one search (its HTTP timeout is
#: PAYMENT_API_TIMEOUT_SECONDS) and one write must fit. The rest waits for the next sweep.
RESERVE_MILLIS = 30_000


def record_decision(decision: ReconcileDecision) -> None:
    """One log event and one metric per decision."""
    fields = {
        "orderId": decision.order_id,
        "attempt": decision.attempt,
        "claimToken": decision.claim_token,
        "reason": decision.reason,
    }
    outcome = decision.outcome
    if decision.extra_charge_ids:
        record_duplicate_charges(decision)
    if outcome is ReconcileOutcome.COMPLETED:
        log_event("reconciliation_completed", **fields, chargeId=decision.charge_id)
        count("ReconciliationResolved", Outcome=outcome.value)
    elif outcome is ReconcileOutcome.RELEASED:
        reason = decision.release_reason.value if decision.release_reason else None
        log_event("reconciliation_released", **fields, releaseReason=reason)
        count("ReconciliationResolved", Outcome=outcome.value)
    elif outcome is ReconcileOutcome.CHARGE_ON_RELEASED:
        # A release (or a later attempt) rested on "nothing was charged", and the provider shows
        # otherwise: a double charge in the making, or made. A person must look now.
        logger.error(
            "charge_on_released_claim",
            extra={
                "event": "charge_on_released_claim",
                **fields,
                "chargeId": decision.charge_id,
                "applied": decision.applied,
            },
        )
        count("ChargeOnReleasedClaim")
    elif outcome is ReconcileOutcome.PENDING:
        log_event(
            "reconciliation_pending",
            **fields,
            listCapReached=decision.list_cap_reached,
            settlementOverdue=decision.settlement_overdue,
        )
        count("ReconciliationPending")
        if decision.list_cap_reached:
            count("ReconciliationListCapped")
        if decision.settlement_overdue:
            # A debit still unsettled past the window its payment method allows: SettlementOverdueAlarm.
            count("SettlementOverdue")
    elif outcome is ReconcileOutcome.CHANGED:
        # Someone else moved the claim on between discovery and the write: not an error.
        log_event("reconciliation_changed", **fields)
        count("ReconciliationChanged")
    else:
        logger.error("reconciliation_failed", extra={"event": "reconciliation_failed", **fields})
        count("ReconciliationFailed")


def record_duplicate_charges(decision: ReconcileDecision) -> None:
    """More than one succeeded PaymentIntent for one attempt: invariant 1 broken, refund the extras."""
    logger.error(
        "duplicate_charge",
        extra={
            "event": "duplicate_charge",
            "orderId": decision.order_id,
            "attempt": decision.attempt,
            "chargeId": decision.charge_id,
            "duplicateChargeIds": list(decision.extra_charge_ids),
        },
    )
    for _ in decision.extra_charge_ids:
        count("DuplicateCharge")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Input: the schedule's event (``events/sweeper.json``), only logged. Output: the counts.

    Raises after sweeping every claim it could when one of them failed unexpectedly, so that the
    failure shows in the function's Errors metric; the next sweep tries that claim again.

    One sweep at a time (``payment_saga.sweep_lock``): a tick that finds the lease held skips.
    """
    logger.append_keys(scheduledTime=(event or {}).get("scheduledTime"))
    if (event or {}).get("check") == "settlements":
        return _check_settlements(context, (event or {}).get("executionId") or context.aws_request_id)
    lock = SweepLock(env("CLAIMS_TABLE_NAME"), client=client("dynamodb"))
    lease_seconds = lease_for(context.get_remaining_time_in_millis())
    lease = lock.acquire(context.aws_request_id, lease_seconds=lease_seconds)
    if not lease.acquired:
        log_event("reconciliation_skipped", heldBy=lease.holder, heldUntil=lease.expires_at)
        count("SweepSkipped")
        return {"skipped": True, "heldBy": lease.holder}
    try:
        return _sweep(context)
    finally:
        lock.release(context.aws_request_id)


def _check_settlements(context: LambdaContext, check_id: str) -> dict[str, Any]:
    """The hourly settlement backstop (``payment_saga.backstop``): no sweep lock, since it only applies
    what Stripe says through the same fenced writes as the webhook, and two at once lose nothing."""
    outcomes: dict[str, int] = {}
    failed = 0
    livemode = env("PAYMENT_API_MODE", "test") == "live"
    for found in check_awaiting_settlements(
        claims_store(),
        provider(),
        livemode=livemode,
        check_id=f"settlement-check/{check_id}",
        keep_going=lambda: context.get_remaining_time_in_millis() > RESERVE_MILLIS,
    ):
        if isinstance(found, Exception):
            failed += 1
            logger.warning(
                "settlement_check_failed", extra={"event": "settlement_check_failed", "reason": str(found)}
            )
            count("SettlementCheckFailed")
            continue
        outcomes[found.outcome.value] = outcomes.get(found.outcome.value, 0) + 1
        fields = {
            "orderId": found.order_id,
            "attempt": found.attempt,
            "paymentIntentId": found.payment_intent_id,
            "outcome": found.outcome.value,
            "reason": found.reason,
            "applied": found.applied,
        }
        if found.outcome in _SETTLEMENT_ALARMS:
            logger.error(
                _SETTLEMENT_ALARMS[found.outcome],
                extra={"event": _SETTLEMENT_ALARMS[found.outcome], **fields},
            )
            count(_SETTLEMENT_ALARM_METRICS[found.outcome])
            count("SettlementChecked", Outcome=found.outcome.value)
        else:
            log_event("settlement_checked", **fields)
            count("SettlementChecked", Outcome=found.outcome.value)
    log_event("settlement_check_done", failed=failed, **outcomes)
    count("SettlementCheckCompleted", FunctionName=context.function_name)
    return {"settlementCheck": outcomes, "failed": failed}


#: What the backstop can find that is money taken wrongly: logged at ERROR, on the sweeper's alarms.
_SETTLEMENT_ALARMS = {
    WebhookOutcome.DUPLICATE_CHARGE: "duplicate_charge",
    WebhookOutcome.CHARGE_ON_RELEASED: "charge_on_released_claim",
    WebhookOutcome.MISMATCH: "webhook_mismatch",
}
_SETTLEMENT_ALARM_METRICS = {
    WebhookOutcome.DUPLICATE_CHARGE: "DuplicateCharge",
    WebhookOutcome.CHARGE_ON_RELEASED: "ChargeOnReleasedClaim",
    WebhookOutcome.MISMATCH: "WebhookMismatch",
}


def _sweep(context: LambdaContext) -> dict[str, Any]:
    """One sweep, under the lease: resolve what it can before the time budget runs out."""
    report = reconcile(
        claims_store(),
        provider(),
        now=time.time(),
        apply=True,
        search_grace_seconds=int(env("CLAIM_SEARCH_GRACE_SECONDS", str(DEFAULT_SEARCH_GRACE_SECONDS))),
        list_page_cap=int(env("CLAIM_LIST_PAGE_CAP", str(DEFAULT_LIST_PAGE_CAP))),
        on_decision=record_decision,
        keep_going=lambda: context.get_remaining_time_in_millis() > RESERVE_MILLIS,
    )
    counts = report.counts
    age = report.oldest_unresolved_age_seconds
    log_event("reconciliation_swept", finished=report.finished, oldestUnresolvedAgeSeconds=age, **counts)
    # Published before a failed claim raises: the sweep itself ran (ReconciliationFailed alarms on
    # the claim), and the failed claim's age counts as unresolved.
    count("SweepCompleted", FunctionName=context.function_name)
    measure("OldestUnresolvedClaimAge", age, MetricUnit.Seconds, FunctionName=context.function_name)
    if counts[ReconcileOutcome.FAILED.value]:
        raise RuntimeError(
            f"{counts[ReconcileOutcome.FAILED.value]} stale claim(s) could not be reconciled;"
            " see the reconciliation_failed log events"
        )
    return {"finished": report.finished, "counts": counts}
