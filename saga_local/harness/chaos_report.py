"""Chaos's verdict: the invariants read from the table and the ledger, and the report that judges a run."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga_local.harness import simulate
from saga_local.harness.chaos_sweep import SWEEPER_FUNCTION
from saga_local.harness.outcomes import OutcomeTally, tally

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saga_local.harness.chaos_plan import ChaosConfig
    from saga_local.harness.chaos_sweep import Resolved
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.stripe_emulator import LedgerEntry


def broken_invariants(
    order_ids: Iterable[str], claims: dict[str, dict[str, Any]], charges: Iterable[LedgerEntry]
) -> list[str]:
    """Invariants 1, 6 and 7, read from the claims table and the provider's ledger."""
    ledger: dict[str, list[LedgerEntry]] = defaultdict(list)
    for charge in charges:
        if charge.order_id is not None:
            ledger[charge.order_id].append(charge)
    problems: list[str] = []
    for order_id in order_ids:
        entries = ledger.get(order_id, [])
        claim = claims.get(order_id) or {}
        if len(entries) > 1:
            problems.append(f"invariant 1: {order_id} charged {len(entries)} times")
        if claim.get("status") == "RELEASED":
            attempt = int(claim["attempt"])
            early = [c.charge_id for c in entries if c.attempt is not None and int(c.attempt) <= attempt]
            if early:
                problems.append(f"invariant 6: {order_id} RELEASED at attempt {attempt} but charged {early}")
        if claim.get("status") == "COMPLETED" and [c.charge_id for c in entries] != [claim.get("chargeId")]:
            problems.append(
                f"invariant 7: {order_id} COMPLETED with {claim.get('chargeId')},"
                f" ledger {[c.charge_id for c in entries]}"
            )
    return problems


@dataclass
class ChaosReport:
    """``saga simulate``'s report before and after the sweep, and what chaos adds to it."""

    config: ChaosConfig
    before: simulate.Report
    after: simulate.Report
    faults_by_kind: dict[str, int]
    faults_by_function: dict[str, int]
    faults_planned: int
    redeliveries: dict[str, int]
    sweep: list[Resolved]
    sweep_seconds: float
    dead_letters: int
    violations_before: list[str]
    violations_after: list[str]
    wall_seconds: float
    #: Charges sent for a payment attempt the provider had already declined.
    declined_sent_again: list[str] = field(default_factory=list)
    late_writes: dict[str, int] = field(default_factory=dict)
    #: The provider's outage (:meth:`Outage.to_dict`).
    outage: dict[str, Any] = field(default_factory=dict)
    outage_line: str = "provider outage      none"
    #: Claim Order and Release Claim throttled together (:meth:`LambdaThrottle.to_dict`).
    throttle: dict[str, Any] = field(default_factory=dict)
    throttle_line: str = "lambda throttled     none"
    search_lag_seconds: float = 0.0
    #: Requests the sweeps sent to the provider's search and list.
    sweeper_requests: dict[str, int] = field(default_factory=dict)
    #: How the sweeper's ticks ended (swept, failed, skipped, throttled).
    sweeper_ticks: dict[str, int] = field(default_factory=dict)
    #: Ticks each of the troubles around the sweeper met (its secret unreadable, search or list down).
    sweeper_troubles: dict[str, int] = field(default_factory=dict)
    #: The outcome events counted against the orders (None: the stack archives no outcome event).
    outcomes: OutcomeTally | None = None

    @property
    def requeued_endings(self) -> dict[str, int]:
        """Orders the relay re-queued, by their final outcome (``none`` if they have none)."""
        if self.outcomes is None:
            return {}
        return dict(Counter(self.outcomes.final_by_order.get(o, "none") for o in self.outcomes.requeued))

    @property
    def sweeper_faults(self) -> int:
        """Faults that fired in the sweeper's ticks: at its points, and the troubles around them."""
        return self.faults_by_function.get(SWEEPER_FUNCTION, 0)

    @property
    def sweep_counts(self) -> dict[str, int]:
        return dict(Counter(r.outcome for r in self.sweep))

    @property
    def checks(self) -> dict[str, bool]:
        return {
            "no order charged twice": self.before.double_charged_orders == 0
            and self.after.double_charged_orders == 0,
            "no declined attempt sent to the provider again": not self.declined_sent_again,
            "no order lost": self.after.lost_orders == 0,
            "every needs-reconciliation resolved": self.after.needs_reconciliation == 0,
            "invariants 6 and 7 hold": not self.violations_before and not self.violations_after,
            "each order exactly one final outcome event": self.outcomes is not None and self.outcomes.exact,
        }

    @property
    def promise_kept(self) -> bool:
        return all(self.checks.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": dataclasses.asdict(self.config),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "faultsByKind": self.faults_by_kind,
            "faultsByFunction": self.faults_by_function,
            "faultsPlanned": self.faults_planned,
            "redeliveries": self.redeliveries,
            "lateWrites": self.late_writes,
            "sweep": [dataclasses.asdict(r) for r in self.sweep],
            "sweepCounts": self.sweep_counts,
            "sweepSeconds": self.sweep_seconds,
            "deadLetters": self.dead_letters,
            "declinedAttemptsSentAgain": self.declined_sent_again,
            "violationsBefore": self.violations_before,
            "violationsAfter": self.violations_after,
            "wallSeconds": self.wall_seconds,
            "outage": self.outage,
            "lambdaThrottle": self.throttle,
            "searchLagSeconds": self.search_lag_seconds,
            "sweeperRequests": self.sweeper_requests,
            "sweeperTicks": self.sweeper_ticks,
            "sweeperTroubles": self.sweeper_troubles,
            "sweeperFaults": self.sweeper_faults,
            "outcomeEvents": None if self.outcomes is None else self.outcomes.to_dict(),
            "requeuedEndings": self.requeued_endings,
            "checks": self.checks,
            "promiseKept": self.promise_kept,
        }


def count_outcome_events(stack: EmbeddedStack, order_ids: list[str]) -> OutcomeTally | None:
    """Every outcome event the run published (read from the archive queue), counted against its
    orders and the provider's ledger (:func:`saga_local.harness.outcomes.tally`); None without an archive."""
    log = stack.driver.outcome_log
    if log is None:
        return None
    ledger: dict[str, list[str]] = defaultdict(list)
    for charge in stack.provider.charges():
        if charge.order_id is not None:
            ledger[charge.order_id].append(charge.charge_id)
    return tally(log.collect(), order_ids, ledger)
