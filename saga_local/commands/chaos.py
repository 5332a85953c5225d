"""``saga chaos``: many orders, duplicate deliveries and random faults everywhere; then the sweeper.

Every order is sent ``--copies`` times through SQS (``saga simulate``'s producer), and faults are
drawn at random, reproducibly from ``--seed``:

* for each order and each step function (Claim, Charge, Mark Complete, Release), with
  :attr:`ChaosConfig.step_fault_rate`, one fault of any kind at any point of that function
  (:data:`~saga_local.runtime.faults.POINTS`, :func:`~saga_local.runtime.faults.kinds_at`): deaths, timeouts,
  out-of-memory, Lambda throttles, DynamoDB throttles and 500s, stalls, requests applied whose
  answer is lost and that botocore (or the provider's HTTP client) sends again, and writes sent by
  a Lambda that dies and landing later, after the state machine moved on; sometimes aimed at a
  later invocation (a retry) rather than the first;
* on the start function, with :attr:`ChaosConfig.start_fault_rate` per invocation (a batch);
* on the outcome relay, with :attr:`ChaosConfig.relay_fault_rate` per invocation (a batch of the
  claims table's stream): any kind at any of its points (its PutEvents and SendMessage refused,
  throttled, applied with the answer lost, or the relay dying around them), so that the shard
  stalls and is retried from the failed record, and a re-queue sent twice must still run once;
* at the provider, with :attr:`ChaosConfig.provider_fault_rate` per order: every kind the
  emulator injects (500 before or after applying, a 500 saved under the key, resets, hangs);
* with :attr:`ChaosConfig.stop_rate` per order, the execution is stopped half-way (``stop``);
* with :attr:`ChaosConfig.redelivery_rate` per delivery, SQS delivers a message again (same
  MessageId), half of them while the execution it started runs and half after it ended;
* with :attr:`ChaosConfig.retry_rate` per declined order, the customer pays again (a new
  ``paymentAttempt``, with a card that works or not), and the first attempt arrives once more
  afterwards: a declined attempt must never reach the provider again;
* a provider outage (:class:`Outage`): from :attr:`ChaosConfig.outage_start_seconds` into the run,
  for :attr:`ChaosConfig.outage_seconds` of wall time (3 minutes by default), every call to every
  endpoint of the provider fails (a 500 before anything is applied). The charges of that window
  end in Needs Reconciliation with their claims kept; the sweeper releases them NOT_CHARGED and the
  outcome relay puts them back on the orders queue, where they must be charged exactly once;
* Lambda's concurrency exhausted (:class:`LambdaThrottle`): from
  :attr:`ChaosConfig.throttle_start_seconds` into the run, for :attr:`ChaosConfig.throttle_seconds`
  (a minute by default), every invocation of Claim Order and Release Claim is throttled, retries
  included: a failed claim that cannot even be fenced, which the state machine itself must send
  back to the orders queue;
* the provider's search lags :attr:`ChaosConfig.search_lag_seconds` (two hours by default), longer
  than the sweeper's grace (one hour): the search sees none of the run's PaymentIntents, so every
  release rests on the list (``GET /v1/payment_intents``) and every completion the sweeper makes
  was found there.

Then every write still in flight lands, the sweeper runs with a clock past every lease and the
search grace, and "later" is played out: the relay re-queues what was released, delayed messages
are delivered, they run, and what they leave open is swept again, until nothing moves. The report
says, at the provider's ledger and in the claims table: charges, double charges, lost orders (a
claim released NOT_CHARGED is lost until the order is charged), declined attempts sent to the
provider again, the money ordered and billed per currency, how each order ended before and after
the sweep, which orders the sweeper resolved and how, the outage and the search lag, the outcome
events (one line per type) counted against the orders
(:func:`saga_local.harness.outcomes.tally`: after deduplication by ``eventId`` every order has
exactly one final outcome event, or declines of earlier payment attempts before it, and it agrees
with the provider's ledger), and the verdict.
The exit status is 0 only if the promise held: no order charged twice, none lost, no declined
attempt sent again, every needs-reconciliation resolved, invariants 6 (release only on proof) and
7 (the completed charge is the ledger's) unbroken, and the outcome events exact.

The stack is the embedded one, in-process (``retry_time_scale=0``: the ASL's Retry waits are
recorded, not slept), with a short visibility timeout so redriven messages come back in seconds.
The handlers' JSON logs go to ``--log-file`` (discarded by default).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import sys
import threading
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from saga_local.aws.moto_adapter import deliver_delayed_messages
from saga_local.commands.arguments import Parser, count, html_file, seconds
from saga_local.harness import simulate
from saga_local.harness.outcomes import OutcomeTally, tally
from saga_local.harness.redelivery import redeliver
from saga_local.runtime.faults import (
    LANDS_AFTER,
    POINTS,
    START_FUNCTION,
    STEP_FUNCTIONS,
    Fault,
    declined_attempts_sent_again,
    kinds_at,
    valid_points,
)
from saga_local.stripe_emulator import Endpoint
from saga_local.stripe_emulator import FaultKind as ProviderFaultKind

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sized

    from payment_saga.reconcile import ReconcileDecision
    from saga_local.aws.stack import Stack
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.stripe_emulator import LedgerEntry, ProviderEmulator, ProviderFault

PROVIDER_FAULT_KINDS: tuple[ProviderFaultKind, ...] = get_args(ProviderFaultKind)
#: Every endpoint the provider emulator serves: an outage fails them all.
PROVIDER_ENDPOINTS: tuple[Endpoint, ...] = get_args(Endpoint)
#: The pages one stale claim's proof may list in chaos's sweeps. A run packs thousands of orders into
#: minutes, so one attempt's window holds more PaymentIntents than the deployed sweeper's cap
#: (DEFAULT_LIST_PAGE_CAP) lets it read, and such a claim is left for a person by design
#: (tests/functional/test_sweeper.py shows that). Chaos judges the decisions, not a Lambda's time
#: budget: its sweeps read every page (in memory, against the emulator).
SWEEP_LIST_PAGE_CAP = 10_000
#: The outcome relay: faulted by invocation, as the start function is.
RELAY_FUNCTION = "OutcomeRelayFunction"
#: Rounds of "later" after the sweep, at most: delayed re-queues delivered, run, and swept again
#: (an order is re-queued at most MaxRequeueAttempts (5) times).
LATER_ROUNDS = 6
#: The sweeper's default wait before it trusts "the provider's search found nothing" (seconds).
SEARCH_GRACE_SECONDS = 3600


@dataclass(frozen=True)
class ChaosConfig:
    """How much of everything. Rates are probabilities; the defaults are what ``make chaos`` runs."""

    orders: int = 1000
    copies: int = 4
    concurrency: int = 4
    seed: int = 7
    decline_rate: float = 0.1
    #: Per order and step function: one fault at a random point of that function.
    step_fault_rate: float = 0.15
    #: Per start-function invocation (one SQS batch).
    start_fault_rate: float = 0.03
    #: Per outcome-relay invocation (one batch of the claims stream).
    relay_fault_rate: float = 0.3
    #: Per order: one provider fault.
    provider_fault_rate: float = 0.05
    #: Per order: the execution that reaches the chosen point is stopped there.
    stop_rate: float = 0.01
    #: Per delivery: SQS delivers the message again (half while running, half after the end).
    redelivery_rate: float = 0.02
    #: Per declined order: the customer pays again under a new ``paymentAttempt``.
    retry_rate: float = 0.5
    #: Seconds before a message the start function failed is delivered again.
    visibility_timeout: int = 2
    #: Wall-time seconds into the run when the provider goes down (:class:`Outage`).
    outage_start_seconds: float = 60.0
    #: How long every call to the provider fails (0: no outage).
    outage_seconds: float = 180.0
    #: How far behind the provider's search is: longer than the sweeper's grace.
    search_lag_seconds: float = 7200.0
    #: Wall-time seconds into the run when Claim Order and Release Claim start being throttled.
    throttle_start_seconds: float = 20.0
    #: How long every invocation of both is throttled (0: never).
    throttle_seconds: float = 60.0


@dataclass(frozen=True)
class ProviderFaultPlan:
    kind: ProviderFaultKind
    order_id: str
    times: int


@dataclass
class FaultSchedule:
    """Everything the run injects, drawn before it starts."""

    faults: list[Fault] = field(default_factory=list)
    provider: list[ProviderFaultPlan] = field(default_factory=list)


def plan_faults(orders: list[dict[str, Any]], config: ChaosConfig, rng: random.Random) -> FaultSchedule:
    """Draw the run's faults (see the module docstring); the same seed gives the same schedule."""
    schedule = FaultSchedule()
    # Each function deals its kinds from a shuffled deck: every kind is drawn as often as any other.
    decks: dict[str, list[str]] = {function: [] for function in STEP_FUNCTIONS}
    for order in orders:
        order_id = order["orderId"]
        for function in STEP_FUNCTIONS:
            if rng.random() < config.step_fault_rate:
                if not decks[function]:
                    decks[function] = _kinds(function)
                    rng.shuffle(decks[function])
                schedule.faults.append(_step_fault(function, decks[function].pop(), order_id, rng))
        if rng.random() < config.stop_rate:
            function = rng.choice(STEP_FUNCTIONS)
            schedule.faults.append(Fault(function, rng.choice(POINTS[function]), "stop", order_id=order_id))
        if rng.random() < config.provider_fault_rate:
            schedule.provider.append(
                ProviderFaultPlan(rng.choice(PROVIDER_FAULT_KINDS), order_id, rng.randint(1, 2))
            )
    # A start invocation carries a batch of messages, not one order: aim at invocations by number.
    batches = math.ceil(len(orders) * config.copies / 10)
    for invocation in range(1, batches + 1):
        if rng.random() < config.start_fault_rate:
            point = rng.choice(POINTS[START_FUNCTION])
            kind = rng.choice(kinds_at(START_FUNCTION, point))
            seconds = round(rng.uniform(0.05, 0.3), 2) if kind == "delay" else 0.0
            schedule.faults.append(Fault(START_FUNCTION, point, kind, attempt=invocation, seconds=seconds))  # type: ignore[arg-type]
    # The relay's invocations carry stream batches, not orders: aim at them by number too (a run has
    # fewer relay invocations than orders; a fault aimed past the last one never fires).
    relay_points = valid_points(RELAY_FUNCTION)
    for invocation in range(1, len(orders) + 1):
        if rng.random() < config.relay_fault_rate:
            point = rng.choice(relay_points)
            kind = rng.choice([k for k in kinds_at(RELAY_FUNCTION, point) if k != "stop"])
            seconds = round(rng.uniform(0.05, 0.3), 2) if kind in ("delay", "late_write") else 0.0
            schedule.faults.append(Fault(RELAY_FUNCTION, point, kind, attempt=invocation, seconds=seconds))  # type: ignore[arg-type]
    return schedule


def _kinds(function: str) -> list[str]:
    """Every kind but ``stop`` (drawn on its own) that can happen somewhere in ``function``."""
    return sorted({k for point in POINTS[function] for k in kinds_at(function, point)} - {"stop"})


def _step_fault(function: str, kind: str, order_id: str, rng: random.Random) -> Fault:
    """One fault of ``kind`` at a point of ``function`` where it can happen, for one order."""
    point = rng.choice([p for p in POINTS[function] if kind in kinds_at(function, p)])
    seconds = 0.0
    if kind == "delay":
        seconds = round(rng.uniform(0.05, 0.3), 2)
    elif kind == "late_write":
        seconds = round(rng.uniform(0.2, 1.5), 2)
    return Fault(
        function,
        point,
        kind,  # type: ignore[arg-type]
        # At most 3: the claim can then never fail in every one of its 4 tries.
        times=rng.randint(1, 3),
        order_id=order_id,
        attempt=rng.choice([None, None, None, 1, 2, 3]),
        seconds=seconds,
        lands_after=rng.choice([LANDS_AFTER[function], None]) if kind == "late_write" else None,
        dies_as=rng.choice(["die", "timeout"]) if kind == "late_write" else "die",
    )


# -- redeliveries ------------------------------------------------------------------------------


class Redeliverer:
    """SQS delivering messages again: same MessageId, same body, while or after their execution runs."""

    def __init__(self, stack: EmbeddedStack, orders: list[dict[str, Any]], *, budget: int, seed: int) -> None:
        self.stack = stack
        self.bodies = {order["orderId"]: json.dumps(order) for order in orders}  # as send_all sends them
        self.budget_running = budget - budget // 2
        self.budget_after = budget // 2
        self.counts: Counter[str] = Counter()
        self._done: set[str] = set()
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._while_running, name="chaos-redeliveries", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _while_running(self) -> None:
        sfn = self.stack.driver.sfn
        arn = self.stack.stack.state_machine_arn
        while self.counts["while running"] < self.budget_running and not self._stop.wait(0.25):
            running = sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
            for execution in self._rng.sample(running, min(2, len(running))):
                self._redeliver(execution["executionArn"], "while running")

    def after_the_end(self) -> None:
        arns = [a for a in self.stack.driver.execution_arns() if a not in self._done]
        for arn in self._rng.sample(arns, min(self.budget_after, len(arns))):
            self._redeliver(arn, "after the end")

    def _redeliver(self, arn: str, when: str) -> None:
        if arn in self._done:
            return
        self._done.add(arn)
        execution = json.loads(self.stack.driver.sfn.describe_execution(executionArn=arn)["input"])
        if execution["order"]["orderId"] not in self.bodies:
            return
        # The message as the start function read it: the same order gives the same execution input.
        body = json.dumps(execution["order"])
        result = redeliver(self.stack.driver, execution["messageId"], body)
        self.counts[when] += 1
        if result.failed:
            self.counts["failed (SQS would deliver again)"] += 1


# -- the provider's outage ---------------------------------------------------------------------


class Outage:
    """The provider down for a window of wall time: every call to every endpoint fails.

    From ``start_after`` seconds after :meth:`start` for ``seconds``, a failure rate of 1 on each
    endpoint the emulator serves (``fail_before_apply``: a 500, nothing applied, as when Stripe's
    API is down); then the rates are removed again, leaving every other fault of the run in place.
    ``calls_failed`` counts the requests that reached the provider meanwhile (each one failed,
    unless a fault aimed at its order was due first). An outage that has not begun when the run
    is over never happens (:meth:`finish`); one under way lasts its whole window.
    """

    def __init__(self, provider: ProviderEmulator, *, start_after: float, seconds: float) -> None:
        self.provider = provider
        self.start_after = start_after
        self.seconds = seconds
        self.began: float | None = None  # seconds after start()
        self.ended: float | None = None
        self.calls_failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="chaos-provider-outage", daemon=True)
        self._clock = time.monotonic()

    def start(self) -> None:
        if self.seconds > 0:
            self._clock = time.monotonic()
            self._thread.start()

    def finish(self) -> None:
        """Wait until the outage is over (it lasts its whole window, even past the last order); one
        that has not begun yet is called off."""
        with self._lock:
            if self.began is None:
                self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def abort(self) -> None:
        """End the outage now (the run failed)."""
        self._stop.set()
        self.finish()

    def _run(self) -> None:
        if self._stop.wait(self.start_after):
            return
        with self._lock:
            if self._stop.is_set():  # called off meanwhile
                return
            before = self._requests()
            self.began = time.monotonic() - self._clock
            for endpoint in PROVIDER_ENDPOINTS:
                self.provider.set_failure_rate("fail_before_apply", 1.0, endpoint=endpoint)
        try:
            self._stop.wait(self.seconds)
        finally:
            for endpoint in PROVIDER_ENDPOINTS:
                self.provider.set_failure_rate("fail_before_apply", 0.0, endpoint=endpoint)
            self.ended = time.monotonic() - self._clock
            self.calls_failed = self._requests() - before

    def _requests(self) -> int:
        return sum(self.provider.request_count(endpoint) for endpoint in PROVIDER_ENDPOINTS)

    def to_dict(self) -> dict[str, Any]:
        return {
            "startAfterSeconds": self.start_after,
            "seconds": self.seconds,
            "began": None if self.began is None else round(self.began, 1),
            "ended": None if self.ended is None else round(self.ended, 1),
            "callsFailed": self.calls_failed,
        }

    def line(self) -> str:
        if self.began is None or self.ended is None:
            return "provider outage      none"
        return (
            f"provider outage      {self.ended - self.began:.0f} s, from {self.began:.0f} s to"
            f" {self.ended:.0f} s into the run: every call failed (500 before applying),"
            f" {self.calls_failed} calls"
        )


# -- Lambda's concurrency exhausted ------------------------------------------------------------

#: The functions a throttle window hits together: a Claim step that fails, and the step that would
#: fence it, so that nothing is written (the small-account case docs/deploy.md sizes for).
THROTTLED_TOGETHER = ("ClaimOrderFunction", "ReleaseClaimFunction")


class LambdaThrottle:
    """Every invocation of :data:`THROTTLED_TOGETHER` throttled for a window of wall time.

    From ``start_after`` seconds after :meth:`start` for ``seconds``, one ``throttle`` fault per
    function, at ``start``, for any order and any number of times, that stops firing when the window
    ends (``Fault.until``). A window that has not begun when the run is over never happens.
    """

    def __init__(self, stack: Any, *, start_after: float, seconds: float) -> None:
        self.stack = stack
        self.start_after = start_after
        self.seconds = seconds
        self.began: float | None = None
        self.faults: list[Fault] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._clock = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="chaos-lambda-throttle", daemon=True)

    def start(self) -> None:
        if self.seconds > 0:
            self._clock = time.monotonic()
            self._thread.start()

    def finish(self) -> None:
        """Call off a window that has not begun; one under way runs out by itself."""
        with self._lock:
            self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        if self._stop.wait(self.start_after):
            return
        with self._lock:
            if self._stop.is_set():
                return
            self.began = time.monotonic() - self._clock
            until = time.monotonic() + self.seconds
            self.faults = [
                Fault(function, "start", "throttle", times=10**9, until=until)
                for function in THROTTLED_TOGETHER
            ]
            self.stack.faults.extend(self.faults)

    @property
    def throttles(self) -> int:
        return sum(fault.fired for fault in self.faults)

    def to_dict(self) -> dict[str, Any]:
        return {
            "functions": list(THROTTLED_TOGETHER),
            "startAfterSeconds": self.start_after,
            "seconds": self.seconds,
            "began": None if self.began is None else round(self.began, 1),
            "throttles": self.throttles,
        }

    def line(self) -> str:
        if self.began is None:
            return "lambda throttled     none"
        return (
            f"lambda throttled     {self.seconds:.0f} s from {self.began:.0f} s into the run:"
            f" {' and '.join(THROTTLED_TOGETHER)}, {self.throttles} invocations refused"
        )


# -- checking ----------------------------------------------------------------------------------


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


def claim_lease_seconds(stack: Stack) -> int:
    """The claim lease the functions run with (``CLAIM_LEASE_SECONDS``, from template.yaml)."""
    for _, environment in stack.functions.values():
        if "CLAIM_LEASE_SECONDS" in environment:
            return int(environment["CLAIM_LEASE_SECONDS"])
    raise LookupError("no function has CLAIM_LEASE_SECONDS")


@dataclass(frozen=True)
class Resolved:
    """One stale claim the sweeper looked at, and what it did."""

    order_id: str
    attempt: int
    outcome: str  # completed, released, pending, changed, failed
    reason: str
    charge_id: str | None = None

    @classmethod
    def of(cls, decision: ReconcileDecision) -> Resolved:
        outcome = getattr(decision.outcome, "value", str(decision.outcome))
        return cls(decision.order_id, decision.attempt, outcome, decision.reason, decision.charge_id)

    def __str__(self) -> str:
        charge = f" with {self.charge_id}" if self.charge_id else ""
        return f"{self.order_id}  attempt {self.attempt}  {self.outcome}{charge}: {self.reason}"


def sweep(stack: EmbeddedStack, *, now: float) -> list[Resolved]:
    """Run the sweeper (``apply=True``) at ``now``: what it did per claim."""
    from saga_local.harness.sweep import reconcile_stack

    report = reconcile_stack(stack, apply=True, now=now, list_page_cap=SWEEP_LIST_PAGE_CAP)
    return [Resolved.of(decision) for decision in report.decisions]


# -- the run -----------------------------------------------------------------------------------


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
    #: The outcome events counted against the orders (None: the stack archives no outcome event).
    outcomes: OutcomeTally | None = None

    @property
    def requeued_endings(self) -> dict[str, int]:
        """Orders the relay re-queued, by their final outcome (``none`` if they have none)."""
        if self.outcomes is None:
            return {}
        return dict(Counter(self.outcomes.final_by_order.get(o, "none") for o in self.outcomes.requeued))

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
            "outcomeEvents": None if self.outcomes is None else self.outcomes.to_dict(),
            "requeuedEndings": self.requeued_endings,
            "checks": self.checks,
            "promiseKept": self.promise_kept,
        }


def run_chaos(
    stack: EmbeddedStack,
    config: ChaosConfig,
    *,
    progress: Callable[[int, int, float], None] | None = None,
) -> ChaosReport:
    """Inject, run (``simulate.run``) through the outage, redeliver, land late writes, measure, sweep
    and play out later, measure again, and count the outcome events against the orders."""
    began = time.monotonic()
    rng = random.Random(config.seed)
    orders = simulate.make_orders(config.orders, decline_rate=config.decline_rate, seed=config.seed)
    schedule = plan_faults(orders, config, rng)
    stack.faults.extend(schedule.faults)
    provider_faults = _inject_provider_faults(stack, schedule)
    stack.provider.search_lag_seconds = config.search_lag_seconds
    redeliveries = Redeliverer(
        stack,
        orders,
        budget=round(config.orders * config.copies * config.redelivery_rate),
        seed=config.seed + 1,
    )
    outage = Outage(stack.provider, start_after=config.outage_start_seconds, seconds=config.outage_seconds)
    throttle = LambdaThrottle(
        stack, start_after=config.throttle_start_seconds, seconds=config.throttle_seconds
    )
    outage.start()
    throttle.start()
    redeliveries.start()
    try:
        ran = simulate.run(
            stack,
            orders=config.orders,
            copies=config.copies,
            concurrency=config.concurrency,
            decline_rate=config.decline_rate,
            seed=config.seed,
            progress=progress,
            retry_rate=config.retry_rate,
        )
    except BaseException:
        outage.abort()
        raise
    finally:
        redeliveries.stop()
        throttle.finish()
    outage.finish()  # the outage lasts its whole window; what it left open is settled below
    redeliveries.after_the_end()
    simulate.settle(stack)
    stack.faults.late.land_all()  # every write still in flight lands before anything is judged
    simulate.settle(stack)
    order_ids = [order["orderId"] for order in orders]
    before = simulate.measure(stack, orders, deliveries=ran.deliveries, wall_seconds=ran.wall_seconds)
    violations_before = broken_invariants(order_ids, stack.driver.claims(), stack.provider.charges())

    sweep_began = time.monotonic()
    swept, sweeper_requests = sweep_and_play_out_later(stack)
    sweep_seconds = time.monotonic() - sweep_began
    after = simulate.measure(stack, orders, deliveries=ran.deliveries, wall_seconds=ran.wall_seconds)
    violations_after = broken_invariants(order_ids, stack.driver.claims(), stack.provider.charges())

    by_kind = Counter(stack.faults.fired_by_kind())
    by_function: Counter[str] = Counter()
    for fault in schedule.faults + throttle.faults:
        by_function[fault.function] += fault.fired
    for provider_fault in provider_faults:
        by_kind[f"provider {provider_fault.kind}"] += provider_fault.fired
        by_function["provider"] += provider_fault.fired
    requests = getattr(stack.runtime, "charge_requests", None)
    return ChaosReport(
        config=config,
        before=before,
        after=after,
        faults_by_kind={k: n for k, n in sorted(by_kind.items()) if n},
        faults_by_function={k: n for k, n in sorted(by_function.items()) if n},
        faults_planned=len(schedule.faults) + len(provider_faults),
        redeliveries=dict(redeliveries.counts),
        sweep=swept,
        sweep_seconds=round(sweep_seconds, 2),
        dead_letters=len(stack.driver.dead_letters()),
        violations_before=violations_before,
        violations_after=violations_after or [],
        wall_seconds=round(time.monotonic() - began, 2),
        declined_sent_again=declined_attempts_sent_again(requests.requests) if requests else [],
        late_writes={
            "landed": len(stack.faults.late.landed),
            "failed to land": len(stack.faults.late.failed),
        },
        outage=outage.to_dict(),
        outage_line=outage.line(),
        throttle=throttle.to_dict(),
        throttle_line=throttle.line(),
        search_lag_seconds=stack.provider.search_lag_seconds,
        sweeper_requests=dict(sweeper_requests),
        outcomes=count_outcome_events(stack, order_ids),
    )


#: Rounds of landing and settling before a sweep: each landing may start work that sends more.
MAX_LANDING_ROUNDS = 10


def land_what_is_in_flight(stack: Any) -> None:
    """Before a sweep whose clock is past every lease and the search grace: every request still in
    flight lands, and what it moves settles, until nothing is held.

    The sweeper may release a claim as never charged only because every request of its attempt has
    reached the provider by the end of the grace (an hour after the lease). A ``late_write`` lands
    within :data:`~saga_local.runtime.faults.LATE_WRITE_SECONDS` of being sent, far inside that
    hour; a sweep that jumps the clock past the grace while one is still held would show the
    sweeper a world the fault model rules out (a charge request arriving an hour late), and blame
    the saga for the double charge that follows.
    """
    for _ in range(MAX_LANDING_ROUNDS):
        simulate.settle(stack)
        if not stack.faults.late.pending():
            return
        stack.faults.late.land_all()
    raise RuntimeError(f"requests still in flight after {MAX_LANDING_ROUNDS} rounds of landing them")


def play_out_later(stack: Any, sweep_once: Callable[[], Sized], *, settle_timeout: float = 600.0) -> None:
    """After a sweep, let later happen until nothing moves (at most :data:`LATER_ROUNDS` rounds: an
    order is re-queued at most MaxRequeueAttempts times): the outcome relay re-queues what the
    sweeper released NOT_CHARGED, orders re-queued with a delay (behind an open attempt, or by the
    relay) come back, they run, and what they leave open is swept again by ``sweep_once`` (which
    returns what it decided), with every request in flight landed first. The last thing that
    happens is a sweep that decides nothing, or the last round."""
    for _ in range(LATER_ROUNDS):
        simulate.settle(stack, timeout=settle_timeout)
        stack.faults.late.land_all()
        delivered = deliver_delayed_messages()
        land_what_is_in_flight(stack)  # the sweep's clock is past every lease and the grace
        decided = sweep_once()  # every round, a round that delivered included
        if not delivered and not decided:
            return


def sweep_and_play_out_later(stack: EmbeddedStack) -> tuple[list[Resolved], Counter[str]]:
    """Sweep with a clock past every lease and the grace, then :func:`play_out_later`. Returns
    what the sweeps did, and the requests they sent to the provider's search and list."""
    lease = claim_lease_seconds(stack.stack)
    requests: Counter[str] = Counter()
    swept: list[Resolved] = []

    def sweep_now() -> list[Resolved]:
        asked = _search_and_list_requests(stack)
        resolved = sweep(stack, now=time.time() + lease + SEARCH_GRACE_SECONDS + 1)
        requests.update({k: n - asked[k] for k, n in _search_and_list_requests(stack).items()})
        swept.extend(resolved)
        return resolved

    land_what_is_in_flight(stack)
    sweep_now()
    play_out_later(stack, sweep_now)
    return swept, requests


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


def _search_and_list_requests(stack: EmbeddedStack) -> dict[str, int]:
    return {endpoint: stack.provider.request_count(endpoint) for endpoint in ("search", "list")}


def _inject_provider_faults(stack: EmbeddedStack, schedule: FaultSchedule) -> list[ProviderFault]:
    injected: list[ProviderFault] = []
    for planned in schedule.provider:
        # A hang is held briefly, then cut: to the SDK the same unknown outcome as a read timeout.
        seconds = 0.2 if planned.kind == "timeout_after_apply" else None
        injected.append(
            stack.provider.inject(
                planned.kind, order_id=planned.order_id, times=planned.times, seconds=seconds
            )
        )
    return injected


def render(report: ChaosReport) -> str:
    """``saga simulate``'s report (before the sweep), then the faults, the sweep and the verdict."""
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
    lines.append(f"endings, before the sweep  {_counts(report.before.order_endings)}")
    lines.extend(_render_sweep(report))
    lines.extend(_render_outcomes(report))
    # What is wrong at the end: the report after the sweep names every double charge and every order
    # still lost. An order "lost" before it (its re-send still delayed on the queue) is not a problem.
    problems = report.violations_before + report.violations_after
    problems += report.declined_sent_again
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
    lines.append(f"endings, after the sweep   {_counts(report.after.order_endings)}")
    lines.extend(simulate.render_money(report.after.money))
    return lines


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
        f"final outcome events per order ({report.before.orders} orders: exactly one each, after"
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


# -- entry point -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="saga chaos",
        description="Many orders, duplicates and random faults everywhere; then the sweeper.",
    )
    defaults = ChaosConfig()
    parser.add_argument("--orders", type=count(), default=defaults.orders, help="distinct orders")
    parser.add_argument("--copies", type=count(), default=defaults.copies, help="deliveries of each order")
    parser.add_argument(
        "--concurrency", type=count(), default=defaults.concurrency, help="concurrent SQS pollers"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="the same seed draws the same faults")
    parser.add_argument(
        "--outage-start",
        type=seconds,
        default=defaults.outage_start_seconds,
        help="seconds into the run when the provider goes down",
    )
    parser.add_argument(
        "--outage-seconds",
        type=seconds,
        default=defaults.outage_seconds,
        help="how long every call to the provider fails (0: no outage)",
    )
    parser.add_argument(
        "--throttle-start",
        type=seconds,
        default=defaults.throttle_start_seconds,
        help="seconds into the run when Claim Order and Release Claim start being throttled",
    )
    parser.add_argument(
        "--throttle-seconds",
        type=seconds,
        default=defaults.throttle_seconds,
        help="how long both are throttled on every invocation (0: never)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--html",
        type=html_file,
        metavar="PATH",
        help="also write the report as a page, with a trace page per execution that did not succeed"
        " in PATH's name + -traces/ (default: no page)",
    )
    parser.add_argument("--log-file", help="where the functions' JSON logs go (default: discarded)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the chaos; 0 if the promise held, 1 if it broke, 2 if it could not be judged (no sweeper)."""
    args = build_parser().parse_args(argv)
    config = ChaosConfig(
        orders=args.orders,
        copies=args.copies,
        concurrency=args.concurrency,
        seed=args.seed,
        outage_start_seconds=args.outage_start,
        outage_seconds=args.outage_seconds,
        throttle_start_seconds=args.throttle_start,
        throttle_seconds=args.throttle_seconds,
    )
    from saga_local.stack.embedded import EmbeddedStack

    progress = None if args.json else simulate.progress_bar
    # Powertools warns on every invocation that publishes no metric (a duplicate, a death).
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    # The in-process handlers log (and print their metrics) to stdout: keep it for the report.
    with (
        open(args.log_file or os.devnull, "a", encoding="utf-8") as logs,
        contextlib.redirect_stdout(logs),
        EmbeddedStack(
            runtime="inprocess", retry_time_scale=0, visibility_timeout=config.visibility_timeout
        ) as stack,
    ):
        report = run_chaos(stack, config, progress=progress)
        # The stack stops with this command: what did not succeed is kept for `saga trace NAME`.
        recorded = simulate.record_unhappy(stack)
    if args.json:
        print(json.dumps({**report.to_dict(), "recorded": recorded.to_dict()}, indent=2))
    else:
        sys.stderr.write("\n")
        print("\n".join([render(report), *simulate.render_recorded(recorded)]))
    # After the report is printed: a page that cannot be written costs the page, not the run.
    if args.html:
        simulate.write_html_report(args.html, report.to_dict(), recorded, kind="chaos")
    return 0 if report.promise_kept else 1


if __name__ == "__main__":
    sys.exit(main())
