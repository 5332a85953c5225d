"""Sweeper: resolves claims whose lease ran out, by asking the provider what happened; it never charges.

Every 5 minutes (template.yaml), one sweep at a time (``payment_saga.sweep_lock``), and hourly the
settlement check. Decisions, and why each is safe: ``payment_saga.reconcile``; what they log and count:
``payment_saga.sweeping``. Every sweep that ran publishes, by ``FunctionName``, ``SweepCompleted`` (the
heartbeat: none for a skipped tick, nor for a sweep stopped before deciding anything, by the lock, the
index, or a key it cannot use) and ``OldestUnresolvedClaimAge`` (read by the pending alarm).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from handlers import runtime
from handlers.runtime import claims_store, client, count, env, log_event, logger, measure, metrics, tracer
from payment_saga import sweeping
from payment_saga.reconcile import DEFAULT_LIST_PAGE_CAP, DEFAULT_SEARCH_GRACE_SECONDS, reconcile
from payment_saga.sweep_lock import SweepLock, lease_for

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from payment_saga.reconcile import ReconcileDecision

#: No claim is started with less time left: one search (PAYMENT_API_TIMEOUT_SECONDS) and one write must fit.
RESERVE_MILLIS = 30_000


def record_decision(decision: ReconcileDecision) -> None:
    runtime.tell(*sweeping.said_of_decision(decision))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The schedule's event (``events/sweeper.json``) in, the counts out; raises when a claim failed."""
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


def _check_settlements(context: LambdaContext, check_id: str) -> dict[str, Any]:  # no lock: see sweeping
    tally = sweeping.check_settlements(
        claims_store(),
        runtime.stripe_on_first_use(),
        livemode=env("PAYMENT_API_MODE", "test") == "live",
        check_id=check_id,
        keep_going=lambda: context.get_remaining_time_in_millis() > RESERVE_MILLIS,
        tell=runtime.tell,
    )
    log_event("settlement_check_done", failed=tally.failed, **tally.outcomes)
    count("SettlementCheckCompleted", FunctionName=context.function_name)
    return {"settlementCheck": tally.outcomes, "failed": tally.failed}


def _sweep(context: LambdaContext) -> dict[str, Any]:
    report = reconcile(
        claims_store(),
        runtime.stripe_on_first_use(),
        now=time.time(),
        apply=True,
        search_grace_seconds=int(env("CLAIM_SEARCH_GRACE_SECONDS", str(DEFAULT_SEARCH_GRACE_SECONDS))),
        list_page_cap=int(env("CLAIM_LIST_PAGE_CAP", str(DEFAULT_LIST_PAGE_CAP))),
        on_decision=record_decision,
        keep_going=lambda: context.get_remaining_time_in_millis() > RESERVE_MILLIS,
    )
    counts, age = report.counts, report.oldest_unresolved_age_seconds
    log_event("reconciliation_swept", finished=report.finished, oldestUnresolvedAgeSeconds=age, **counts)
    # Published before a failed claim raises: the sweep ran (ReconciliationFailed alarms on the claim).
    count("SweepCompleted", FunctionName=context.function_name)
    measure("OldestUnresolvedClaimAge", age, MetricUnit.Seconds, FunctionName=context.function_name)
    if counts["failed"]:
        raise RuntimeError(f"{counts['failed']} stale claim(s) could not be reconciled")
    return {"finished": report.finished, "counts": counts}
