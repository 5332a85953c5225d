"""Sweeper: resolves claims whose lease ran out, by asking the provider what happened (issue 4).

Run by a schedule (every 5 minutes, see template.yaml), it always applies what it decides: see
``payment_saga.reconcile`` for the decision table and why each branch is safe. It is the one
function that may read the ``OpenClaimsByLease`` index (discovery only, allowed to lag); every change
it makes is a conditional write on the base table, fenced on what it saw. It never charges.

Every decision is a structured log event with ``orderId`` (``reconciliation_completed``,
``reconciliation_released``, ``reconciliation_pending``, ``reconciliation_changed``,
``reconciliation_failed``) and a metric: ``ReconciliationResolved`` by ``Outcome``,
``ReconciliationPending`` (a claim that stays pending sweep after sweep needs a person) and
``ReconciliationFailed``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from handlers.runtime import claims_store, client, count, env, log_event, logger, metrics, provider, tracer
from payment_saga.reconcile import DEFAULT_SEARCH_GRACE_SECONDS, ReconcileOutcome, reconcile
from payment_saga.sweep_lock import SweepLock, lease_for

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
    if outcome in (ReconcileOutcome.COMPLETED, ReconcileOutcome.RELEASED):
        extra = {"chargeId": decision.charge_id} if decision.charge_id else {"releaseReason": "NOT_CHARGED"}
        log_event(f"reconciliation_{outcome.value}", **fields, **extra)
        count("ReconciliationResolved", Outcome=outcome.value)
    elif outcome is ReconcileOutcome.PENDING:
        log_event("reconciliation_pending", **fields)
        count("ReconciliationPending")
    elif outcome is ReconcileOutcome.CHANGED:
        # Someone else moved the claim on between discovery and the write: not an error.
        log_event("reconciliation_changed", **fields)
    else:
        logger.error("reconciliation_failed", extra={"event": "reconciliation_failed", **fields})
        count("ReconciliationFailed")


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


def _sweep(context: LambdaContext) -> dict[str, Any]:
    """One sweep, under the lease: resolve what it can before the time budget runs out."""
    report = reconcile(
        claims_store(),
        provider(),
        now=time.time(),
        apply=True,
        search_grace_seconds=int(env("CLAIM_SEARCH_GRACE_SECONDS", str(DEFAULT_SEARCH_GRACE_SECONDS))),
        on_decision=record_decision,
        keep_going=lambda: context.get_remaining_time_in_millis() > RESERVE_MILLIS,
    )
    counts = report.counts
    log_event("reconciliation_swept", finished=report.finished, **counts)
    if counts[ReconcileOutcome.FAILED.value]:
        raise RuntimeError(
            f"{counts[ReconcileOutcome.FAILED.value]} stale claim(s) could not be reconciled;"
            " see the reconciliation_failed log events"
        )
    return {"finished": report.finished, "counts": counts}
