"""Chaos's verdict: the invariants read from the table and the ledger, and the report that judges a run."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga_local.harness import simulate
from saga_local.harness.chaos_sweep import SEARCH_GRACE_SECONDS, SWEEPER_FUNCTION
from saga_local.harness.outcomes import OutcomeTally, tally

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saga_local.harness.chaos_plan import ChaosConfig
    from saga_local.harness.chaos_settlements import Backstop, KeyExpiry
    from saga_local.harness.chaos_sweep import Resolved
    from saga_local.harness.chaos_webhooks import WebhookSummary
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


def charged_without_money(
    order_ids: Iterable[str],
    claims: dict[str, dict[str, Any]],
    charges: Iterable[LedgerEntry],
    outcomes: OutcomeTally | None,
) -> list[str]:
    """Orders the saga says are charged with no money taken for them: a claim COMPLETED, or a final
    ``OrderCharged``, with no charge at the provider (one line each)."""
    charged = {charge.order_id for charge in charges if charge.order_id is not None}
    finals = outcomes.final_by_order if outcomes is not None else {}
    found = []
    for order_id in order_ids:
        if order_id in charged:
            continue
        if (claims.get(order_id) or {}).get("status") == "COMPLETED":
            found.append(f"{order_id}: claim COMPLETED, no charge at the provider")
        elif finals.get(order_id) == "OrderCharged":
            found.append(f"{order_id}: OrderCharged published, no charge at the provider")
    return found


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
    #: The webhooks' disorder and the bank debits (None: the run had webhooks off).
    webhooks: WebhookSummary | None = None
    #: Orders by what closed them (their last final outcome event's ``resolvedBy``).
    closed_by: dict[str, int] = field(default_factory=dict)
    #: Orders that waited in Awaiting Settlement, and those still waiting before the sweep (their
    #: settlement webhook lost or late: the hourly settlement check closes them after it).
    awaited_settlement: int = 0
    awaiting_before_sweep: int = 0
    #: Orders a delivered webhook had resolved whose claim was still open before the sweep, and
    #: orders paged after a webhook had closed them (one line each).
    webhook_left_open: list[str] = field(default_factory=list)
    #: Orders paged while their payment settled: Needs Reconciliation after Awaiting Settlement, or the
    #: sweeper's SettlementOverdue (one line each).
    settling_paged: list[str] = field(default_factory=list)
    #: Debits the sweeper found past their settlement window and could not ask the provider about
    #: (its search or list down in that tick): SettlementOverdue counted, closed by a later tick.
    overdue_unasked: list[str] = field(default_factory=list)
    #: Forged webhook messages planted on the queue, by kind, and the orders whose claim or charges
    #: they moved (one line each: a forgery believed).
    forgeries_planted: dict[str, int] = field(default_factory=dict)
    forgeries_believed: list[str] = field(default_factory=list)
    #: Orders charged with no money taken (:func:`charged_without_money`), one line each.
    charged_without_money: list[str] = field(default_factory=list)
    #: The hourly settlement checks (None: the run had webhooks off), and the redrives after Stripe
    #: forgot the idempotency key (None: none run).
    backstop: Backstop | None = None
    key_expiry: KeyExpiry | None = None

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
            "no order a webhook resolved left in Needs Reconciliation": not self.webhook_left_open,
            "no settling payment paged (Awaiting Settlement is a state)": not self.settling_paged,
            "no forged webhook moved a claim or money": not self.forgeries_believed,
            "no order charged without money taken": not self.charged_without_money,
            "no redrive after the idempotency key expired sent a second payment": self.key_expiry is None
            or not self.key_expiry.second_payments,
            "every awaiting debit closed within one settlement check of settling": self.backstop is None
            or not self.backstop.late,
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
            "webhooks": None if self.webhooks is None else self.webhooks.to_dict(),
            "closedBy": self.closed_by,
            "awaitedSettlement": self.awaited_settlement,
            "awaitingBeforeSweep": self.awaiting_before_sweep,
            "webhookLeftOpen": self.webhook_left_open,
            "settlingPaged": self.settling_paged,
            "overdueUnasked": self.overdue_unasked,
            "forgeriesPlanted": self.forgeries_planted,
            "forgeriesBelieved": self.forgeries_believed,
            "chargedWithoutMoney": self.charged_without_money,
            "settlementChecks": None if self.backstop is None else self.backstop.to_dict(),
            "keyExpiry": None if self.key_expiry is None else self.key_expiry.to_dict(),
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


# -- the report as text ------------------------------------------------------------------------


def render(report: ChaosReport) -> str:
    """The report of ``saga chaos``: ``saga simulate``'s report (before the sweep), then the faults,
    the webhooks, the sweep and the verdict."""
    lines = [simulate.render(dataclasses.replace(report.before, faults_injected={}, problems=[]))]
    lines.append(
        f"faults injected      {sum(report.faults_by_kind.values())} fired"
        f" (from {report.faults_planned} planned faults)"
    )
    lines.extend(f"  {n:6d}  {kind}" for kind, n in report.faults_by_kind.items())
    lines.append("  by function: " + _counts(report.faults_by_function))
    lines.append(report.outage_line)
    lines.append(report.throttle_line)
    lines.append(f"late writes          {_counts(report.late_writes)}")
    lines.append(f"redeliveries         {_counts(report.redeliveries)}")
    lines.append(f"dead letters         {report.dead_letters}")
    lines.append(f"declined attempts sent to the provider again  {len(report.declined_sent_again)}")
    lines.extend(_render_webhooks(report))
    lines.append(f"endings, before the sweep  {_counts(report.before.order_endings)}")
    lines.extend(_render_sweep(report))
    lines.extend(_render_outcomes(report))
    # What is wrong at the end: the report after the sweep names every double charge and every order
    # still lost. An order "lost" before it (its re-send still delayed on the queue) is not a problem.
    problems = report.violations_before + report.violations_after
    problems += report.declined_sent_again
    problems += report.webhook_left_open + report.settling_paged + report.forgeries_believed
    problems += report.charged_without_money
    problems += report.key_expiry.second_payments if report.key_expiry is not None else []
    problems += report.backstop.late if report.backstop is not None else []
    if report.outcomes is not None:
        problems += [f"{o}: no final outcome event" for o in report.outcomes.missing[:20]]
        problems += report.outcomes.problems[:20]
    problems += report.after.problems
    if problems:
        lines.append("problems")
        lines.extend(f"  {p}" for p in dict.fromkeys(problems))
    lines.append(f"total wall time      {report.wall_seconds:.1f} s")
    lines.append("verdict")
    lines.extend(f"  {'ok  ' if ok else 'FAIL'}  {check}" for check, ok in report.checks.items())
    lines.append("  PROMISE KEPT" if report.promise_kept else "  PROMISE BROKEN")
    return "\n".join(lines)


def _render_sweep(report: ChaosReport) -> list[str]:
    lines = [
        f"sweep                {len(report.sweep)} stale claims in {report.sweep_seconds:.1f} s:"
        f" {_counts(report.sweep_counts)}"
    ]
    lines.extend(f"  {resolved}" for resolved in report.sweep)
    lines.append(
        f"sweeper ticks        {sum(report.sweeper_ticks.values())} invocations of SweeperFunction:"
        f" {_counts(report.sweeper_ticks)}; {report.sweeper_faults} sweeper faults fired"
        f" (troubles around the ticks: {_counts(report.sweeper_troubles)})"
    )
    lines.append(f"endings, after the sweep   {_counts(report.after.order_endings)}")
    lines.append(f"closed by            {_counts(report.closed_by)}")
    lines.extend(simulate.render_money(report.after.money))
    return lines


def _render_webhooks(report: ChaosReport) -> list[str]:
    """The webhooks' disorder, the bank debits, and the orders that waited for their bank."""
    if report.webhooks is None:
        return ["webhooks             off (the sweeper alone closes what the executions left open)"]
    return [
        *report.webhooks.lines(),
        f"awaiting settlement  {report.awaited_settlement} orders waited (not an alarm);"
        f" {report.awaiting_before_sweep} still waiting before the sweep, their settlement webhook"
        " lost or late: the hourly settlement check closes them",
        *([report.backstop.line()] if report.backstop is not None else []),
        *([report.key_expiry.line()] if report.key_expiry is not None else []),
        f"charged, no money    {len(report.charged_without_money)} orders completed or announced charged"
        " with no charge at the provider",
        f"settlement overdue   {len(report.overdue_unasked)} counted while the provider could not answer"
        " the sweeper (its search or list down in that tick), closed by a later tick"
        + "".join(f"\n  {line}" for line in report.overdue_unasked),
        f"forged webhooks      {sum(report.forgeries_planted.values())} planted on the queue"
        f" ({_counts(report.forgeries_planted) or 'none'}); {len(report.forgeries_believed)} believed",
    ]


def _render_outcomes(report: ChaosReport) -> list[str]:
    """One line per outcome type, then each order's final outcome counted against the orders."""
    outcomes = report.outcomes
    if outcomes is None:
        return ["outcome events       none read: the stack has no outcome archive (OutcomeArchive=Enabled)"]
    lines = [
        f"outcome events       {sum(outcomes.by_type.values())} distinct"
        f" ({outcomes.duplicates} duplicate deliveries dropped by eventId)"
    ]
    lines.extend(f"  {n:6d}  {kind}" for kind, n in sorted(outcomes.by_type.items()))
    lines.append(
        f"final outcome events per order ({report.after.orders} orders: exactly one each, after"
        " declines of earlier payment attempts)"
    )
    lines.extend(f"  {n:6d}  {kind}" for kind, n in sorted(outcomes.by_final.items()))
    lines.append(f"  {len(outcomes.missing):6d}  without a final outcome event")
    lines.append(f"  {len(outcomes.charged_twice):6d}  with two OrderCharged")
    lines.append(f"  {len(outcomes.problems):6d}  with final events out of rule or against the ledger")
    lines.append(
        f"re-queued by the relay  {len(outcomes.requeued)} orders, ended: {_counts(report.requeued_endings)}"
    )
    lines.append(
        f"search lag           {report.search_lag_seconds:.0f} s"
        f" (the sweeper's grace: {SEARCH_GRACE_SECONDS} s);"
        f" the sweeps asked the search {report.sweeper_requests.get('search', 0)} times and the list"
        f" {report.sweeper_requests.get('list', 0)} times"
    )
    return lines


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none"
