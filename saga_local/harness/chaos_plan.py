"""Chaos's fault plan: how much of everything, and the faults drawn from ``--seed`` before a run."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, get_args

from saga_local.harness.chaos_sweep import SWEEP_TROUBLES, SWEEPER_FUNCTION
from saga_local.harness.simulate import DECLINING_CARD
from saga_local.runtime.faults import (
    LANDS_AFTER,
    POINTS,
    SEND_KINDS,
    START_FUNCTION,
    STEP_FUNCTIONS,
    Fault,
    kinds_at,
    valid_points,
)
from saga_local.stripe_emulator import FaultKind as ProviderFaultKind

PROVIDER_FAULT_KINDS: tuple[ProviderFaultKind, ...] = get_args(ProviderFaultKind)
#: The outcome relay: faulted by invocation, as the start function is.
RELAY_FUNCTION = "OutcomeRelayFunction"
#: The sweeper's ticks that faults are aimed at (from 1). A run ticks more often than this: at least
#: once per round of "later", and once more after each tick that failed.
SWEEPER_TICKS_FAULTED = 12


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
    #: Per sweeper tick (of the first :data:`SWEEPER_TICKS_FAULTED`) without a trouble: one fault at one
    #: of its points. High, since a run has only a handful of ticks (a 1,000-order run about six).
    sweeper_fault_rate: float = 0.8
    #: Per sweeper tick (of the first :data:`SWEEPER_TICKS_FAULTED`): its key's secret unreadable, or
    #: the provider's search or list down, for that tick.
    sweep_trouble_rate: float = 0.4
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
    #: Stripe's webhooks on (the receiver served, the consumer polling), delivered in disorder, and a
    #: share of the orders paid by bank debit. Off: the run of before webhooks, the sweeper alone.
    webhooks: bool = True
    #: Per order that does not decline: paid by bank debit, its Charge answered ``processing``.
    debit_rate: float = 0.1
    #: Per bank debit: it settles as failed (the bank refused it) rather than succeeded.
    debit_fail_rate: float = 0.3
    #: Real seconds a bank debit takes to settle (days on a real account).
    settle_seconds: float = 3.0
    #: Stripe's webhook retry waits (a minute, five, half an hour, ...) multiplied by this.
    webhook_time_scale: float = 0.005
    #: Per webhook event: delivered twice.
    webhook_duplicate_rate: float = 0.1
    #: Per webhook event: held back :attr:`webhook_reorder_seconds`, so the next event overtakes it.
    #: Longer than :attr:`settle_seconds`: a card's PaymentIntent has one event, so only a debit's
    #: ``processing`` can be overtaken, by its settlement's event, which comes that much later.
    webhook_reorder_rate: float = 0.1
    webhook_reorder_seconds: float = 4.5
    #: Per webhook event: its first delivery waits up to :attr:`webhook_delay_seconds`.
    webhook_delay_rate: float = 0.2
    webhook_delay_seconds: float = 3.0
    #: Per webhook event: never delivered (the sweeper is the backstop).
    webhook_lose_rate: float = 0.05
    #: Webhook events sent before the endpoint goes down (a 1,000-order run sends about 1,200).
    webhook_down_after_events: int = 300
    #: How long the endpoint answers nothing (0: never down): Stripe retries on its schedule.
    webhook_down_seconds: float = 20.0
    #: Forged messages of each kind planted on the webhook queue once the orders ran (a "succeeded"
    #: for a declined order's failed PaymentIntent, another account's PaymentIntent naming our order,
    #: a whole event for another amount): none may move a claim or money (``chaos_forgeries``).
    forgeries: int = 5
    #: Orders of their own paid by bank debit, each stopped in Charge Payment after its create, its
    #: PaymentIntent recorded by the processing webhook, and redriven after Stripe forgot the
    #: idempotency key (24 hours): none may be charged twice (``chaos_settlements``).
    expired_key_redrives: int = 4


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
    #: The sweeper's tick number -> what goes wrong around it (one of ``SWEEP_TROUBLES``).
    sweep_troubles: dict[int, str] = field(default_factory=dict)
    #: orderId -> how its bank debit settles (``succeeded`` or ``failed``), for the orders paid by one.
    debits: dict[str, str] = field(default_factory=dict)


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
    _plan_sweeper(schedule, config, rng)
    if config.webhooks:
        schedule.debits = plan_debits(orders, config)
    return schedule


def plan_debits(orders: list[dict[str, Any]], config: ChaosConfig) -> dict[str, str]:
    """The orders paid by bank debit, and how each settles. Drawn from a generator of their own, so
    that turning debits on or off leaves the faults of a seed as they were. Declining cards are
    left out: they decline at the confirm and never reach ``processing``."""
    rng = random.Random(config.seed + 2)
    debits: dict[str, str] = {}
    for order in orders:
        if order["paymentMethod"] == DECLINING_CARD:
            continue
        if rng.random() < config.debit_rate:
            debits[order["orderId"]] = "failed" if rng.random() < config.debit_fail_rate else "succeeded"
    return debits


def _plan_sweeper(schedule: FaultSchedule, config: ChaosConfig, rng: random.Random) -> None:
    """The sweeper's invocations are its schedule's ticks: aimed at by number too, each faulted tick
    dealt the next of its points from a shuffled deck, so that a run reaches every one of them.

    One thing goes wrong per tick, a trouble around it or a fault in it: a fault that ends the tick
    before its first claim would leave a trouble with the search or the list nothing to refuse."""
    points: list[str] = []
    for tick in range(1, SWEEPER_TICKS_FAULTED + 1):
        if rng.random() < config.sweep_trouble_rate:
            schedule.sweep_troubles[tick] = rng.choice(SWEEP_TROUBLES)
        elif rng.random() < config.sweeper_fault_rate:
            if not points:
                points = list(valid_points(SWEEPER_FUNCTION))
                rng.shuffle(points)
            schedule.faults.extend(_sweeper_faults(points.pop(), tick, rng))


def _sweeper_faults(point: str, tick: int, rng: random.Random) -> list[Fault]:
    """A fault of any kind at ``point`` of the sweeper's ``tick``-th invocation.

    A sweep's first UpdateItem is always its lock: half the UpdateItem faults come after a harmless
    one that takes the lock's turn (a short stall, or an answer lost and sent again, which the lock's
    write survives), so that they hit the sweep's next write: a claim's completion or release, or the
    lock's release.
    """
    kind = rng.choice([k for k in kinds_at(SWEEPER_FUNCTION, point) if k != "stop"])
    seconds = round(rng.uniform(0.05, 0.3), 2) if kind in ("delay", "late_write") else 0.0
    dies_as = rng.choice(["die", "timeout"]) if kind == "late_write" else "die"
    fault = Fault(SWEEPER_FUNCTION, point, kind, attempt=tick, seconds=seconds, dies_as=dies_as)  # type: ignore[arg-type]
    if not point.endswith(":dynamodb.UpdateItem") or rng.random() < 0.5:
        return [fault]
    at_send = kind in SEND_KINDS
    lock_turn = Fault(
        SWEEPER_FUNCTION,
        point,
        "lost_answer" if at_send else "delay",
        attempt=tick,
        seconds=0.0 if at_send else 0.01,
    )
    return [lock_turn, fault]


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
