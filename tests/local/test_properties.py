"""The promise, for any schedule of duplicates, customer retries and faults Hypothesis can think of.

Each example draws 1-2 orders. An order has 1-3 payment attempts (``initial``, then the customer's
``retry-1``, ``retry-2`` after a decline), each paid with a declining card or not, and 1-3 *waves*
(at least one per attempt) of 1-2 deliveries, one after the other (each wave waits until the
previous one has ended): every delivery names an attempt and a route, "direct" (StartExecution),
"sqs" (the queue and the start function) or "redelivered" (the same SQS message handed out twice). A
late redelivery of a declined attempt, or a customer's retry after a decline, is a later wave. On
top comes a fault schedule over every function and point: deaths, timeouts, out-of-memory,
throttles, DynamoDB throttles and 500s, stalls, executions stopped half-way, *applied, answer lost,
sent again* (``lost_answer``, through botocore's own retry) and *killed in flight* (``late_write``:
the Lambda dies with a write sent and the write lands after the state machine has moved on), plus
provider faults. The parts around the steps are faulted too, with the same fault points chaos uses
(:func:`~saga_local.runtime.faults.valid_points`), aimed by invocation number since their
invocations carry no order: the outcome relay (its PutEvents and SendMessage refused, throttled,
applied with the answer lost, sent by a relay that died; the relay dying or stalling around them),
besides a PutEvents answered with its entry refused (``FailedEntryCount``) and a record the relay
can never read (a poison record, beside the orders' closing writes); and the sweeper (its lock, the
index query, its writes and reads, a death or timeout mid-sweep), besides its key's secret that
cannot be read and the provider's search and list down during one sweep. Sweeps are part of the
schedule: the sweeper may run between waves, and always runs after the last, each time through
SweeperFunction itself (its handler, lock and role) on a clock past every lease and the search
grace, one tick after the other. Stripe's webhooks are drawn too, wired as `saga up` wires them (the
emulator's signed deliveries to the receiver's local function URL, the consumer on the webhook
queue): never delivered, or delivered with any of duplicates, reordering, delays, losses and the
endpoint down for a while (its deliveries retried on Stripe's schedule, compressed), so that a
webhook may close a claim while its execution still runs, after it ended, or before a sweep.
It runs them through the real ASL with the real handlers, waits
for every execution, lets every late write land, runs the sweeper, and checks the invariants of
docs/design.md at the provider, in the claims table and on the outcome bus:

1. at most one charge per order (the provider's ledger);
2. nothing lost: every order ends charged (COMPLETED, 1 charge), declined (RELEASED DECLINED, 0
   charges), or needs-reconciliation (CLAIMED) -- none left CLAIMED after the sweep, and a claim
   RELEASED as NOT_CHARGED by the sweeper is *lost* until the order is charged, unless
   every execution of the order ended ``ClaimFailed``, ``ClaimRetriedLater`` or ``ResendsExhausted``
   (visibly failed before anything was charged);
   and no execution that SUCCEEDED still holds the order's claim open (it reported a duplicate of
   itself: nothing will ever charge the order); once time has played out, every order has exactly
   one final outcome event (ranked by ``sequence``, after declines of earlier payment attempts, and
   agreeing with the provider's ledger: :func:`saga_local.harness.outcomes.tally`), and every attempt
   released as never charged was re-queued, its re-queue starting exactly one execution however
   often the relay sent it, or handed to a person;
5. no declined payment attempt, ``(orderId, paymentAttempt)``, is ever sent to the provider again
   (by another execution or under another idempotency key);
6. no RELEASED claim has a charge under any attempt up to its own;
7. no COMPLETED claim names another charge than the ledger's.

One stack serves every example (provisioning costs ~2 s); each example has its own order ids and
starts from a clean fault plan, so examples cannot interfere. On failure Hypothesis shrinks the
schedule and prints it as a readable list (see :class:`Scenario`).

Sampling is aimed where the protocol breaks, without fixing any schedule: every attempt of a
customer's story is delivered (the claim after a decline's release is where the order changes
hands), and half the lost answers and late writes hit the claim write. With hole 1 put back into
the claim write (``payment_saga/claims/claiming.py``, mutant ``claims-reclaim-resend-is-duplicate``:
a customer's retry re-claims after the decline, the answer is lost, the resend meets its own row and
is called a duplicate), sampling alone
finds it within 30-130 examples (six seeds); hole 2 (a late copy of a declined attempt charged)
within 10-15 (both measured before the relay's and the sweeper's faults were drawn too).

Every run first replays :data:`KNOWN`, the shrunk schedules of those two holes, so a regression of
either fails at once whatever the sampling draws; ``SAGA_PROPERTY_SAMPLING_ONLY=1`` leaves them out
(to measure what sampling alone finds).

``SAGA_PROPERTY_EXAMPLES`` sets the number of examples (25 by default; ``make property-long``
runs 500); the ``slow`` variant (``pytest -m slow``) runs ``SAGA_PROPERTY_SLOW_EXAMPLES`` (200).
With ``CI=true`` the examples are derandomized, so a CI run is reproducible.
``SAGA_PROPERTY_CHECKS`` (say ``5`` or ``2 (own claim open)``, see :data:`CHECKS`) asserts only
those checks: Hypothesis shrinks the first failure it finds, so hunting one hole while another is
open needs the others out of the way.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis import strategies as st

from handlers import runtime as handler_runtime
from handlers import sweeper
from payment_saga.claims import SECONDS_PER_DAY, ClaimsStore
from payment_saga.execution_names import requeue_execution_name
from payment_saga.outcomes import attempt_event_id
from payment_saga.reconcile import DEFAULT_SEARCH_GRACE_SECONDS
from payment_saga.sweep_lock import LEASE_MARGIN_SECONDS, SweepLock
from saga_local.aws.stack import REGION
from saga_local.harness.chaos_report import broken_invariants
from saga_local.harness.chaos_sweep import land_what_is_in_flight, play_out_later
from saga_local.harness.chaos_troubles import PROVIDER_ENDPOINTS
from saga_local.harness.outcomes import tally
from saga_local.harness.redelivery import redeliver
from saga_local.harness.simulate import settle
from saga_local.runtime.api import Throttled
from saga_local.runtime.faults import (
    KINDS,
    LANDS_AFTER,
    POINTS,
    START_FUNCTION,
    STEP_FUNCTIONS,
    Fault,
    call_error,
    declined_attempts_sent_again,
    kinds_at,
    valid_points,
)
from saga_local.stack.embedded import wire_webhooks
from saga_local.stripe_emulator import FAULT_KINDS, WebhookDisorder
from tests.helpers import order
from tests.local.conftest import lease_seconds

if TYPE_CHECKING:
    from collections.abc import Iterator

    from saga_local.stack.driver import ExecutionResult
    from saga_local.stack.outcome_log import OutcomeEvent
    from tests.helpers import Saga

ROUTES = ["direct", "sqs", "redelivered"]
EXAMPLES = int(os.environ.get("SAGA_PROPERTY_EXAMPLES", "25"))
#: Examples of the ``slow`` variant (``SAGA_PROPERTY_SLOW_EXAMPLES``).
SLOW_EXAMPLES = int(os.environ.get("SAGA_PROPERTY_SLOW_EXAMPLES", "200"))
DECLINING_CARD = "pm_card_chargeDeclined"
#: The function that writes the claim: where a lost answer or a late write is aimed half the time.
CLAIM_FUNCTION = "ClaimOrderFunction"
CHARGE_FUNCTION = "ChargePaymentFunction"
RELEASE_FUNCTION = "ReleaseClaimFunction"
#: The functions around the steps: their invocations carry no order (a batch of the claims table's
#: stream, a tick of the schedule), so their faults are aimed by invocation number, as chaos aims them.
RELAY_FUNCTION = "OutcomeRelayFunction"
SWEEPER_FUNCTION = "SweeperFunction"
#: The outcome types only the relay publishes (the start function and the state machine publish the
#: others): how a refused entry finds the relay's PutEvents.
RELAY_OUTCOMES = frozenset({"OrderCharged", "OrderDeclined", "OrderReleased", "OrderRequeued"})
#: What can go wrong around one sweep besides its own faults: its provider key's secret cannot be
#: read (the sweep fails before its first claim), or the provider's search and list are down.
SWEEP_TROUBLES = ("secret", "provider down")

# -- the schedule ------------------------------------------------------------------------------


def payment_attempt(index: int) -> str:
    """The producer's ``paymentAttempt``: ``initial``, then the customer's ``retry-1``, ``retry-2``."""
    return "initial" if index == 0 else f"retry-{index}"


@dataclass(frozen=True)
class OrderPlan:
    #: One per payment attempt: whether its card declines.
    declining: tuple[bool, ...]
    #: Waves of deliveries, one after the other; each delivery is (payment attempt index, route):
    #: "direct" (StartExecution), "sqs" (through the queue and the start function), or "redelivered"
    #: (through the queue, and the same message delivered once more before the poller's).
    waves: tuple[tuple[tuple[int, str], ...], ...]

    def message(self, order_id: str, attempt: int) -> dict[str, Any]:
        extra = {"paymentAttempt": payment_attempt(attempt)} if attempt else {}
        return order(
            order_id, paymentMethod=DECLINING_CARD if self.declining[attempt] else "pm_card_visa", **extra
        )


@dataclass(frozen=True)
class FaultSpec:
    """A :class:`Fault` aimed at an order of the example by index (ids change between examples)."""

    function: str
    point: str
    kind: str
    times: int
    order: int | None
    attempt: int | None
    seconds: float
    lands_after: str | None = None
    dies_as: str = "die"

    def fault(self, ids: list[str]) -> Fault:
        return Fault(
            self.function,
            self.point,
            self.kind,  # type: ignore[arg-type]
            times=self.times,
            order_id=None if self.order is None else ids[self.order],
            attempt=self.attempt,
            seconds=self.seconds,
            lands_after=self.lands_after,
            dies_as=self.dies_as,
        )

    def __str__(self) -> str:
        return str(self.fault([f"#{i}" for i in range(3)]))


@dataclass(frozen=True)
class ProviderFaultSpec:
    kind: str
    order: int
    times: int

    def __str__(self) -> str:
        return f"provider: {self.kind} on create (order #{self.order}, x{self.times})"


@dataclass(frozen=True)
class RefusedEntrySpec:
    """EventBridge answers the relay's ``call``-th PutEvents of the example with its entry refused
    (HTTP 200, ``FailedEntryCount`` 1, nothing put): only the relay's own reading of the answer sees it."""

    call: int

    def __str__(self) -> str:
        return f"{RELAY_FUNCTION}: PutEvents answered FailedEntryCount 1 on its call #{self.call}"


@dataclass(frozen=True)
class SweepTroubleSpec:
    """One of :data:`SWEEP_TROUBLES` during the example's ``sweep``-th sweep."""

    kind: str
    sweep: int

    def __str__(self) -> str:
        return f"{SWEEPER_FUNCTION}: {self.kind} during sweep #{self.sweep}"


@dataclass(frozen=True)
class WebhookSpec:
    """How Stripe's webhooks reach the stack in this example: each delivery fault on or off (a
    quarter of the events duplicated, reordered, delayed or never delivered), the endpoint down for
    the example's first moments (the deliveries meanwhile retried on Stripe's compressed schedule)."""

    duplicate: bool
    reorder: bool
    delay: bool
    lose: bool
    down: bool
    seed: int

    def disorder(self) -> WebhookDisorder:
        share = 0.25
        return WebhookDisorder(
            duplicate=share if self.duplicate else 0.0,
            reorder=share if self.reorder else 0.0,
            reorder_seconds=0.2,
            delay=share if self.delay else 0.0,
            delay_seconds=0.3,
            lose=share if self.lose else 0.0,
            down_seconds=0.3 if self.down else 0.0,
            seed=self.seed,
        )

    def __str__(self) -> str:
        kinds = [k for k in ("duplicate", "reorder", "delay", "lose", "down") if getattr(self, k)]
        return f"webhooks: delivered ({', '.join(kinds) or 'in order, once'}; seed {self.seed})"


#: No webhook reaches the stack: every delivery lost (the schedules of :data:`KNOWN`, found before
#: the stack had webhooks, and any example that draws none).
NO_WEBHOOKS = WebhookDisorder(lose=1.0)


@dataclass(frozen=True)
class Scenario:
    orders: tuple[OrderPlan, ...]
    faults: tuple[FaultSpec, ...]
    provider_faults: tuple[ProviderFaultSpec, ...]
    #: The relay's PutEvents answered with its entry refused (partly failing entries).
    refused_entries: tuple[RefusedEntrySpec, ...] = ()
    #: Before this wave, a row that closes but is no claim is written: a record the relay can never
    #: read (a poison record), in the stream beside the orders' closing writes.
    poison_before_wave: int | None = None
    #: After these waves, the sweeper runs (it always runs after the last one).
    sweep_after_waves: tuple[int, ...] = ()
    sweep_troubles: tuple[SweepTroubleSpec, ...] = ()
    #: How Stripe's webhooks are delivered (None: never).
    webhooks: WebhookSpec | None = None

    def __repr__(self) -> str:
        lines = ["Scenario:"]
        for i, plan in enumerate(self.orders):
            cards = ", ".join(
                f"{payment_attempt(a)} {DECLINING_CARD if d else 'pm_card_visa'}"
                for a, d in enumerate(plan.declining)
            )
            lines.append(f"  order #{i}: {cards}")
            for w, wave in enumerate(plan.waves, 1):
                lines.append(f"    wave {w}: " + ", ".join(f"{payment_attempt(a)} {r}" for a, r in wave))
        lines.extend(f"  {fault}" for fault in self.faults)
        lines.extend(f"  {fault}" for fault in self.provider_faults)
        lines.extend(f"  {refused}" for refused in self.refused_entries)
        if self.poison_before_wave is not None:
            lines.append(f"  an unreadable closing row written before wave {self.poison_before_wave + 1}")
        lines.extend(f"  the sweeper runs after wave {w + 1}" for w in self.sweep_after_waves)
        lines.extend(f"  {trouble}" for trouble in self.sweep_troubles)
        lines.append(f"  {self.webhooks}" if self.webhooks is not None else "  webhooks: none delivered")
        if not self.faults and not self.provider_faults:
            lines.append("  (no faults)")
        return "\n".join(lines)


def places(kind: str, functions: list[str]) -> list[tuple[str, str]]:
    """Every (function, point) where ``kind`` can happen."""
    return [(f, p) for f in functions for p in POINTS[f] if kind in kinds_at(f, p)]


@st.composite
def fault_specs(draw: st.DrawFn, orders: int, start_function: bool) -> FaultSpec:
    # The kind first, then where it can happen. The two kinds below the handler (a request applied
    # whose answer is lost, a write landing after its Lambda died) are a third of the draws each:
    # they are what breaks a claim protocol, and what sampling without them never saw.
    functions = [START_FUNCTION] if start_function else list(STEP_FUNCTIONS)
    family = draw(st.sampled_from(["lost_answer", "late_write", "other"]))
    others = [k for k in sorted(KINDS - {"lost_answer", "late_write"}) if places(k, functions)]
    kind = draw(st.sampled_from(others)) if family == "other" else family
    # Then the function, then the point: a function with few calls is hit as often as one with many.
    where = places(kind, functions)
    candidates = sorted({f for f, _ in where})
    if family != "other" and CLAIM_FUNCTION in candidates:
        # The claim write is the gate before the charge, in three forms (first claim, takeover, and
        # re-claim after a release), each of which can be sent twice or land late: half of these
        # faults are aimed at it, the other half anywhere (itself included). With hole 1 put back (a
        # re-claim's lost answer), unaimed sampling took ~130 and ~240 examples to find it (two
        # seeds) and missed it in 120 (a third); aimed, 32 to 124 (six seeds).
        candidates = draw(st.sampled_from([candidates, [CLAIM_FUNCTION]]))
    function = draw(st.sampled_from(candidates))
    point = draw(st.sampled_from([p for f, p in where if f == function]))
    late = kind == "late_write"
    lands_after = draw(st.sampled_from([LANDS_AFTER[function], None])) if late else None
    dies_as = draw(st.sampled_from(["die", "timeout"])) if late else "die"
    if function == START_FUNCTION:
        # A start invocation carries a batch, not one order. Two failures at most: a valid message
        # that fails maxReceiveCount (5) times is redriven to the dead-letter queue, by design.
        seconds = 0.3 if late else 0.05
        return FaultSpec(
            function, point, kind, draw(st.integers(1, 2)), None, None, seconds, lands_after, dies_as
        )
    seconds = 0.0
    if kind == "delay":
        seconds = draw(st.sampled_from([0.05, 0.2]))
    elif late:
        seconds = draw(st.sampled_from([0.3, 1.0]))
    # A lost answer or a late write may come in a storm: every call of the function, for a while.
    times = draw(st.sampled_from([1, 2, 4, 8]) if family != "other" else st.integers(1, 4))
    return FaultSpec(
        function,
        point,
        kind,
        times=times,
        order=draw(st.none() | st.integers(0, orders - 1)),
        attempt=draw(st.none() | st.integers(1, 3)),
        seconds=seconds,
        lands_after=lands_after,
        dies_as=dies_as,
    )


@st.composite
def around_fault_specs(draw: st.DrawFn, function: str, *, times: int) -> tuple[FaultSpec, ...]:
    """A fault of the relay or the sweeper: any kind at any point the function reaches
    (:func:`~saga_local.runtime.faults.valid_points`), aimed at one of its first invocations of the
    example or at any. ``stop`` is left out: neither is invoked by an execution.

    A sweep's first UpdateItem is always its lock; half the sweeper's UpdateItem faults come after a
    harmless one that takes the lock's turn (a short stall, or an answer lost and sent again, which
    the lock's write survives), so that they hit the sweep's next write: a claim's completion or
    release, or the lock's release."""
    point = draw(st.sampled_from(valid_points(function)))
    kind = draw(st.sampled_from([k for k in kinds_at(function, point) if k != "stop"]))
    late = kind == "late_write"
    seconds = 0.05 if kind == "delay" else 0.3 if late else 0.0
    attempt = draw(st.none() | st.integers(1, 3))
    fault = FaultSpec(
        function,
        point,
        kind,
        times=draw(st.integers(1, times)),
        order=None,
        attempt=attempt,
        seconds=seconds,
        dies_as=draw(st.sampled_from(["die", "timeout"])) if late else "die",
    )
    if function != SWEEPER_FUNCTION or not point.endswith(":dynamodb.UpdateItem") or not draw(st.booleans()):
        return (fault,)
    at_send = kind in ("lost_answer", "late_write")
    lock_turn = FaultSpec(
        function,
        point,
        "lost_answer" if at_send else "delay",
        times=1,
        order=None,
        attempt=attempt,
        seconds=0.0 if at_send else 0.01,
    )
    return (lock_turn, fault)


@st.composite
def order_plans(draw: st.DrawFn) -> OrderPlan:
    """A customer's story: ``initial``, and after each decline a retry, the last one with any card.

    Wave ``k`` delivers the story's attempt ``k`` (the last one once the story is told), or, ``back``
    attempts earlier, a late redelivery of an attempt the customer has moved on from.
    """
    attempts = draw(st.integers(1, 3))
    declining = (True,) * (attempts - 1) + (draw(st.booleans()),)
    # ``back`` is 0 half the time: the story in order, then and again a late copy of an earlier attempt.
    delivery = st.tuples(st.sampled_from([0, 0, 1, 2]), st.sampled_from(ROUTES))
    # At least one wave per attempt, so every retry the story has is delivered: the claim after a
    # decline's release is where the order changes hands (a story cut short tests nothing more).
    drawn = draw(st.lists(st.lists(delivery, min_size=1, max_size=2), min_size=attempts, max_size=3))
    waves = tuple(
        tuple((max(0, min(k, attempts - 1) - back), route) for back, route in wave)
        for k, wave in enumerate(drawn)
    )
    return OrderPlan(declining, waves)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(1, 2))
    orders = tuple(draw(order_plans()) for _ in range(n))
    via_sqs = any(route != "direct" for plan in orders for wave in plan.waves for _, route in wave)
    step_faults = draw(st.lists(fault_specs(n, start_function=False), max_size=4))
    start_faults = draw(st.lists(fault_specs(n, start_function=True), max_size=1)) if via_sqs else []
    start_faults = [f for f in start_faults if f.function == START_FUNCTION]
    provider_faults = draw(
        st.lists(
            st.builds(
                ProviderFaultSpec,
                kind=st.sampled_from(sorted(FAULT_KINDS)),
                order=st.integers(0, n - 1),
                times=st.integers(1, 3),
            ),
            max_size=2,
        )
    )
    # The relay's batch is retried from its failed record until it goes through; the sweeper's tick
    # fails at most twice, so a third sweep, within play_out_later's rounds, runs clean.
    relay_faults = [
        f for pair in draw(st.lists(around_fault_specs(RELAY_FUNCTION, times=3), max_size=2)) for f in pair
    ]
    sweeper_faults = [
        f for pair in draw(st.lists(around_fault_specs(SWEEPER_FUNCTION, times=2), max_size=2)) for f in pair
    ]
    refused = draw(st.lists(st.builds(RefusedEntrySpec, st.integers(1, 4)), max_size=1))
    waves = max(len(plan.waves) for plan in orders)
    poison = draw(st.none() | st.integers(0, waves - 1))
    sweep_after = draw(st.lists(st.integers(0, waves - 2), max_size=1)) if waves > 1 else []
    troubles = draw(
        st.lists(st.builds(SweepTroubleSpec, st.sampled_from(SWEEP_TROUBLES), st.integers(1, 2)), max_size=1)
    )
    flags = [st.booleans()] * 5
    webhooks = draw(st.none() | st.builds(WebhookSpec, *flags, st.integers(0, 2**16)))
    return Scenario(
        orders,
        tuple(step_faults + start_faults + relay_faults + sweeper_faults),
        tuple(provider_faults),
        refused_entries=tuple(refused),
        poison_before_wave=poison,
        sweep_after_waves=tuple(sweep_after),
        sweep_troubles=tuple(troubles),
        webhooks=webhooks,
    )


# -- running one example -----------------------------------------------------------------------


@dataclass
class Outcome:
    """What the ledger and the table say about each order of an example."""

    endings: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def run(saga: Saga, scenario: Scenario, ids: list[str], sweeps: SweepSchedule) -> None:
    saga.faults.clear()
    saga.provider.clear_faults()
    spec = scenario.webhooks
    saga.provider.webhooks.disorder = spec.disorder() if spec is not None else NO_WEBHOOKS
    for fault_spec in scenario.faults:
        saga.faults.add(fault_spec.fault(ids))
    for provider_spec in scenario.provider_faults:
        # A timeout is held briefly then cut: to the SDK, the same unknown outcome as a read timeout.
        seconds = 0.1 if provider_spec.kind == "timeout_after_apply" else None
        saga.provider.inject(
            provider_spec.kind,  # type: ignore[arg-type]
            order_id=ids[provider_spec.order],
            times=provider_spec.times,
            seconds=seconds,
        )
    for wave in range(max(len(plan.waves) for plan in scenario.orders)):
        if wave == scenario.poison_before_wave:
            put_unreadable_row(saga, f"POISON-{ids[0]}")
        run_wave(saga, scenario, ids, wave)
        if wave in scenario.sweep_after_waves:
            land_what_is_in_flight(saga)
            sweeps()
            settle(saga, timeout=120)
    # Every write still in the air lands now; one may start nothing, but let what it moved settle.
    saga.faults.late.land_all()
    settle(saga, timeout=120)


def put_unreadable_row(saga: Saga, order_id: str) -> None:
    """A row that closes (COMPLETED) but is no claim (no token, no attempt): its stream record can
    never be read, and the relay must park it without holding up the records behind it."""
    saga.driver.dynamodb.put_item(
        TableName=saga.stack.table_name, Item={"orderId": {"S": order_id}, "status": {"S": "COMPLETED"}}
    )


def later(saga: Saga, sweeps: SweepSchedule) -> None:
    """Time passes after the sweep, as ``saga chaos`` lets it pass: orders re-queued with a delay
    (behind an open payment attempt, or proven never charged) come back and run, and whatever they
    leave open is swept again, until a sweep finds nothing to decide."""
    play_out_later(saga, sweeps, settle_timeout=120)


class _Frozen:
    """Stands in for the ``time`` module in the sweeper's handler: its one use is ``time.time()``."""

    def __init__(self, at: float) -> None:
        self.at = at

    def time(self) -> float:
        return self.at


class SweepSchedule:
    """The sweeper's ticks, each one an invocation of SweeperFunction through the runtime (its handler,
    its sweep lock, its role, the faults aimed at it), on a clock past every lease and the search
    grace. Each tick is later than the last by more than a sweep's lock lease: a sweep killed holding
    the lock leaves it to run out by the next tick, as on AWS, rather than making every later one skip.

    Returns what the tick decided (one entry per claim it looked at), or one entry saying why it did
    not finish (``failed``, ``skipped``, ``throttled``), so that :func:`play_out_later` goes on.
    """

    def __init__(self, saga: Saga) -> None:
        self.saga = saga
        self.name = saga.stack.function_name(SWEEPER_FUNCTION)
        spec, environment = saga.stack.functions[self.name]
        self.lease = lease_seconds(saga)
        self.grace = int(environment.get("CLAIM_SEARCH_GRACE_SECONDS", DEFAULT_SEARCH_GRACE_SECONDS))
        self.tick = spec.timeout + LEASE_MARGIN_SECONDS + 1
        #: The last tick's clock: kept from one example to the next (they share the table and its lock).
        self.at = 0.0
        self.troubles: dict[int, str] = {}
        self.ran = 0
        self.ends: Counter[str] = Counter()

    def begin(self, troubles: tuple[SweepTroubleSpec, ...]) -> SweepSchedule:
        """A new example: its ticks are counted from 1 (as the fault plan counts invocations)."""
        self.troubles = {trouble.sweep: trouble.kind for trouble in troubles}
        self.ran = 0
        self.ends = Counter()
        return self

    def __call__(self) -> list[str]:
        self.ran += 1
        self.at = max(time.time() + self.lease + self.grace + 1, self.at + self.tick)
        at = self.at
        try:
            with pytest.MonkeyPatch.context() as patch, self._trouble(self.troubles.get(self.ran), patch):
                patch.setattr(sweeper, "time", _Frozen(at))
                patch.setattr(sweeper, "SweepLock", lambda *a, **k: SweepLock(*a, clock=lambda: at, **k))
                patch.setattr(sweeper, "claims_store", lambda: claims_store_at(at))
                invocation = self.saga.runtime.invoke(self.name, b"{}")
        except Throttled:
            return self._ended("throttled")
        if invocation.function_error:
            return self._ended("failed")
        result = json.loads(invocation.payload)
        if result.get("skipped"):
            return self._ended("skipped")
        self.ends["swept"] += 1
        return [outcome for outcome, n in result["counts"].items() for _ in range(n)]

    def _ended(self, how: str) -> list[str]:
        self.ends[how] += 1
        return [how]

    @contextlib.contextmanager
    def _trouble(self, kind: str | None, patch: pytest.MonkeyPatch) -> Iterator[None]:
        if kind == "provider down":
            for endpoint in PROVIDER_ENDPOINTS:
                self.saga.provider.set_failure_rate("fail_before_apply", 1.0, endpoint=endpoint)
            try:
                yield
            finally:
                for endpoint in PROVIDER_ENDPOINTS:
                    self.saga.provider.set_failure_rate("fail_before_apply", 0.0, endpoint=endpoint)
            return
        if kind == "secret":
            # A cold container without the key in its environment reads the secret, as deployed;
            # Secrets Manager keeps refusing (throttled past the SDK's retries).
            patch.delenv("PAYMENT_API_KEY")
            handler_runtime.provider.cache_clear()
            hooks = boto3._get_default_session().events
            hooks.register(SECRET_CALL, _secret_refused)
            try:
                yield
            finally:
                hooks.unregister(SECRET_CALL, _secret_refused)
                handler_runtime.provider.cache_clear()  # the next container has the key again
            return
        yield


#: botocore's event for the sweeper's one read of its key (Secrets Manager's service id, hyphenated).
SECRET_CALL = "before-call.secrets-manager.GetSecretValue"


def _secret_refused(model: Any = None, **_: Any) -> None:
    raise call_error("throttle_call", "secretsmanager.GetSecretValue", model)


def claims_store_at(at: float) -> ClaimsStore:
    """The sweeper's claims store (``handlers.runtime.claims_store``), on a clock stopped at ``at``."""
    return ClaimsStore(
        handler_runtime.env("CLAIMS_TABLE_NAME"),
        client=handler_runtime.client("dynamodb"),
        lease_seconds=int(handler_runtime.env("CLAIM_LEASE_SECONDS")),
        retention_seconds=int(handler_runtime.env("CLAIM_RETENTION_DAYS")) * SECONDS_PER_DAY,
        clock=lambda: at,
    )


@contextlib.contextmanager
def refusing_entries(refused: tuple[RefusedEntrySpec, ...]) -> Iterator[list[str]]:
    """EventBridge refuses the entry of the relay's PutEvents calls numbered in ``refused``: the call
    is answered, not sent (nothing is put), as EventBridge answers an entry it failed to take. Yields
    the event ids refused."""
    calls = {spec.call for spec in refused}
    made = itertools.count(1)
    refusals: list[str] = []

    def refuse(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        entries = json.loads(params.get("body") or b"{}").get("Entries", [])
        if not any(entry.get("DetailType") in RELAY_OUTCOMES for entry in entries):
            return None
        if next(made) not in calls:
            return None
        refusals.extend(json.loads(entry.get("Detail") or "{}").get("eventId", "?") for entry in entries)
        failed = {"ErrorCode": "InternalFailure", "ErrorMessage": "Internal service error."}
        answer = {"FailedEntryCount": len(entries), "Entries": [failed] * len(entries)}
        return AWSResponse("", 200, HTTPHeaders(), None), answer

    # The relay's client, which copied the session's hooks when it was made: register on its own.
    hooks: Any = handler_runtime.client("events").meta.events
    if calls:
        hooks.register(PUT_EVENTS_CALL, refuse)
    try:
        yield refusals
    finally:
        if calls:
            hooks.unregister(PUT_EVENTS_CALL, refuse)


PUT_EVENTS_CALL = "before-call.eventbridge.PutEvents"


def run_wave(saga: Saga, scenario: Scenario, ids: list[str], wave: int) -> None:
    """Send every delivery of this wave, then wait until every execution of it has ended."""
    arns: list[str] = []
    via_sqs = False
    for order_id, plan in zip(ids, scenario.orders, strict=True):
        if wave >= len(plan.waves):
            continue
        for copy, (attempt, route) in enumerate(plan.waves[wave]):
            message = plan.message(order_id, attempt)
            if route == "direct":
                arns.append(saga.driver.start(message, name=f"{order_id}-w{wave}-c{copy}"))
                continue
            [message_id] = saga.driver.send(message)
            via_sqs = True
            if route == "redelivered":
                # SQS hands the message out twice: here first, then to the poller (same MessageId).
                redeliver(saga.driver, message_id, json.dumps(message), receive_count=1)
    if via_sqs:
        settle(saga, timeout=120)
    for arn in arns:
        saga.driver.wait(arn, timeout=120)


def judge(saga: Saga, ids: list[str], *, swept: bool) -> Outcome:
    """Classify every order and list every broken invariant."""
    outcome = Outcome()
    claims = {order_id: saga.driver.claim(order_id) or {} for order_id in ids}
    ledger = [c for c in saga.provider.charges() if c.order_id in claims]
    outcome.violations.extend(broken_invariants(ids, claims, ledger))
    requests = [r for r in saga.runtime.charge_requests.requests if r.order_id in claims]
    outcome.violations.extend(f"invariant 5: {p}" for p in declined_attempts_sent_again(requests))
    executions = executions_by_order(saga, ids)
    for order_id, claim in claims.items():
        charges = sum(1 for c in ledger if c.order_id == order_id)
        ending, problem = classify(claim, charges, executions[order_id], swept=swept)
        outcome.endings[order_id] = ending
        if problem:
            outcome.violations.append(f"invariant {problem.format(order_id=order_id)}")
        outcome.violations.extend(own_claim_left_open(order_id, claim, executions[order_id]))
    if swept:
        # Once time has played out, every order has said how it ended, and every release was sent again.
        assert saga.driver.outcome_log is not None, "the local stack archives the outcome bus"
        events = [e for e in saga.driver.outcome_log.collect() if e.order_id in claims]
        charged = {o: [c.charge_id for c in ledger if c.order_id == o] for o in ids}
        counted = tally(events, ids, charged)
        outcome.violations.extend(
            f"invariant 2 (final outcome): {o}: no final outcome event" for o in counted.missing
        )
        outcome.violations.extend(f"invariant 2 (final outcome): {p}" for p in counted.problems)
        outcome.violations.extend(requeued_once(saga, events))
    return outcome


def requeued_once(saga: Saga, events: list[OutcomeEvent]) -> list[str]:
    """Every attempt released as never charged (``OrderReleased``) was re-queued (``OrderRequeued``),
    and that re-queue started exactly one execution however often it was sent, or it was handed to
    a person (``OrderNeedsAttention``, the re-queue bound)."""
    published = {event.event_id for event in events}
    started = Counter(arn.rpartition(":")[2] for arn in saga.driver.execution_arns())
    problems: list[str] = []
    for event in events:
        if event.detail_type != "OrderReleased" or event.order_id is None:
            continue
        attempt = int(event.detail["attempt"])
        requeue = attempt_event_id(event.order_id, attempt, "requeued")
        if requeue in published:
            runs = started[requeue_execution_name(requeue)]
            if runs != 1:
                problems.append(
                    f"invariant 2 (re-queued once): {event.order_id}: attempt {attempt} released NOT_CHARGED"
                    f" and re-queued; the re-queue started {runs} executions"
                )
        elif attempt_event_id(event.order_id, attempt, "needs-attention") not in published:
            problems.append(
                f"invariant 2 (re-queued once): {event.order_id}: attempt {attempt} released NOT_CHARGED,"
                " neither re-queued nor handed to a person"
            )
    return list(dict.fromkeys(problems))


#: Ends of an execution whose Claim step failed before anything was charged: fenced (the relay
#: re-queues a tombstone), sent back by the state machine, or sent back its most allowed times.
CLAIM_FAILED_ENDS = frozenset({"ClaimFailed", "ClaimRetriedLater", "ResendsExhausted"})


def classify(
    claim: dict[str, Any], charges: int, executions: dict[str, ExecutionResult], *, swept: bool
) -> tuple[str, str | None]:
    """An order's ending, and the broken invariant it shows (``{order_id}`` left to fill), if any."""
    status = claim.get("status")
    every_claim_failed = bool(executions) and {e.outcome for e in executions.values()} <= CLAIM_FAILED_ENDS
    if charges > 1:
        return "double-charged", None  # invariant 1, reported by broken_invariants
    if status == "COMPLETED" and charges == 1:
        return "charged", None
    if status == "RELEASED" and charges == 0 and claim.get("releaseReason") == "DECLINED":
        return "declined", None
    if status == "CLAIMED":
        return "needs-reconciliation", (
            "2 (still claimed): {order_id} still CLAIMED after the sweep" if swept else None
        )
    if (
        charges == 0
        and (status is None or claim.get("releaseReason") == "NOT_CHARGED")
        and every_claim_failed
    ):
        # Every claim write failed (or was fenced out): each execution ended in a failed claim, visibly,
        # before anything was charged. Nothing charged; the producer must send it again.
        return "claim-failed", None
    if status == "RELEASED" and charges == 0:
        # Proven never charged and not declined: not an end until someone charges it.
        return "lost", "2 (lost): {order_id} RELEASED NOT_CHARGED and never charged"
    return "lost", f"2 (lost): {{order_id}} is {status} with {charges} charge(s)"


def own_claim_left_open(
    order_id: str, claim: dict[str, Any], executions: dict[str, ExecutionResult]
) -> list[str]:
    """An execution that SUCCEEDED while its own claim stays open took itself for a duplicate."""
    holder = executions.get(str(claim.get("claimToken")))
    if claim.get("status") != "CLAIMED" or holder is None or holder.status != "SUCCEEDED":
        return []
    return [
        f"invariant 2 (own claim open): {order_id}: execution {holder.name} SUCCEEDED ({holder.outcome})"
        " (a duplicate of itself) and left its own claim CLAIMED: nothing will charge the order"
    ]


def executions_by_order(saga: Saga, ids: list[str]) -> dict[str, dict[str, ExecutionResult]]:
    """Each order's executions by ARN. Their names start with the order id:
    ``<orderId>-w<wave>-c<copy>`` here, ``<orderId>-<MessageId>`` from the start function, and
    ``<orderId>_attempt-<n>_requeued-...`` for an order the relay re-queued."""
    found: dict[str, dict[str, ExecutionResult]] = {order_id: {} for order_id in ids}
    for arn in saga.driver.execution_arns():
        name = arn.rpartition(":")[2]
        for order_id in ids:
            # A re-queue's execution: ``<orderId>_attempt-<n>_requeued-<digest>`` (requeue_execution_name).
            if name.startswith((f"{order_id}-", f"{order_id}_attempt-")):
                found[order_id][arn] = saga.driver.result(arn, with_path=False)
    return found


# -- the property ------------------------------------------------------------------------------


#: The checks, by the tag their violations start with (``invariant 2 (lost): ...``).
CHECKS = (
    "1",
    "2 (lost)",
    "2 (still claimed)",
    "2 (own claim open)",
    "2 (final outcome)",
    "2 (re-queued once)",
    "5",
    "6",
    "7",
)
#: ``SAGA_PROPERTY_CHECKS=5`` (comma-separated tags) asserts only those checks, to hunt one hole
#: without stopping at another (Hypothesis shrinks the first failure it finds). All by default.
CHECKED = {c.strip() for c in os.environ.get("SAGA_PROPERTY_CHECKS", ",".join(CHECKS)).split(",")}


def check(outcome: Outcome) -> None:
    """One assertion per check, so that Hypothesis shrinks a counterexample for each one broken (it
    tells failures apart by where they are raised)."""
    broken = {tag: [v for v in outcome.violations if v.startswith(f"invariant {tag}:")] for tag in CHECKS}
    broken = {tag: found if tag in CHECKED else [] for tag, found in broken.items()}
    assert not broken["1"], "\n".join(broken["1"])
    assert not broken["5"], "\n".join(broken["5"])
    assert not broken["2 (own claim open)"], "\n".join(broken["2 (own claim open)"])
    assert not broken["2 (lost)"], "\n".join(broken["2 (lost)"])
    assert not broken["2 (still claimed)"], "\n".join(broken["2 (still claimed)"])
    assert not broken["2 (final outcome)"], "\n".join(broken["2 (final outcome)"])
    assert not broken["2 (re-queued once)"], "\n".join(broken["2 (re-queued once)"])
    assert not broken["6"], "\n".join(broken["6"])
    assert not broken["7"], "\n".join(broken["7"])


#: The holes sampling found, as Hypothesis shrank them: hole 1 with its mutant (cut by hand from
#: three payment attempts to the two it needs), hole 2 on the code before its fix.
KNOWN = (
    # Hole 1: initial declined and released; the retry's re-claim applied, its answer lost, and the
    # resend found its own CLAIMED row: "a duplicate", the execution SUCCEEDED, nothing charged.
    Scenario(
        orders=(OrderPlan(declining=(True, False), waves=(((0, "direct"),), ((1, "direct"),))),),
        faults=(FaultSpec(CLAIM_FUNCTION, "after:dynamodb.UpdateItem", "lost_answer", 4, None, None, 0.0),),
        provider_faults=(),
    ),
    # Hole 2: initial and retry-1 declined, then a late redelivery of initial was charged.
    Scenario(
        orders=(
            OrderPlan(declining=(True, True), waves=(((0, "direct"),), ((1, "direct"),), ((0, "direct"),))),
        ),
        faults=(),
        provider_faults=(),
    ),
    # A hole in this harness, not in the saga: a Charge killed in flight (its request lands 0.3 s
    # later) right before a sweep whose clock is an hour ahead. The sweep saw no charge, released
    # the attempt NOT_CHARGED, the order was charged under the next one, then the held request
    # landed: "charged 2 times", in about one run in four, until every sweep first lands what is
    # in flight (land_what_is_in_flight). Sampling found it on 2026-12-01.
    Scenario(
        orders=(
            OrderPlan(
                declining=(True, False), waves=(((0, "redelivered"),), ((1, "sqs"),), ((0, "direct"),))
            ),
            OrderPlan(
                declining=(True, True), waves=(((0, "redelivered"), (0, "direct")), ((0, "redelivered"),))
            ),
        ),
        faults=(
            FaultSpec(
                CLAIM_FUNCTION, "after:dynamodb.UpdateItem", "late_write", 2, 1, 3, 0.3, RELEASE_FUNCTION
            ),
            FaultSpec(CLAIM_FUNCTION, "after:dynamodb.UpdateItem", "lost_answer", 1, None, None, 0.0),
            FaultSpec(
                RELEASE_FUNCTION,
                "after:dynamodb.UpdateItem",
                "late_write",
                4,
                1,
                None,
                1.0,
                CLAIM_FUNCTION,
                "timeout",
            ),
            FaultSpec(
                CHARGE_FUNCTION, "after:provider.charge", "late_write", 8, 0, None, 0.3, RELEASE_FUNCTION
            ),
            FaultSpec(START_FUNCTION, "after:sfn.StartExecution", "lost_answer", 2, None, None, 0.05),
        ),
        provider_faults=(
            ProviderFaultSpec("fail_after_apply_replayed", 1, 1),
            ProviderFaultSpec("fail_after_apply", 0, 2),
        ),
    ),
)
SAMPLING_ONLY = os.environ.get("SAGA_PROPERTY_SAMPLING_ONLY") == "1"

_examples = itertools.count()


@dataclass
class Hunt:
    """When sampling found its first counterexample: printed to stderr at once, before Hypothesis
    spends minutes shrinking it (pytest shows it under "Captured stderr call"; live with ``-s``)."""

    began: float = field(default_factory=time.monotonic)
    tried: int = 0
    found: bool = False

    def check(self, outcome: Outcome, when: str) -> None:
        try:
            check(outcome)
        except AssertionError as exc:
            if not self.found:
                self.found = True
                elapsed = time.monotonic() - self.began
                first = str(exc).partition("\n")[0]
                print(
                    f"\nfirst counterexample: example {self.tried} of the run ({when}), {elapsed:.0f} s"
                    f" in: {first}",
                    file=sys.stderr,
                    flush=True,
                )
            raise


def hold_the_promise(saga: Saga, examples: int) -> None:
    """Run :data:`KNOWN`, then ``examples`` drawn schedules, and print what they covered."""
    ran: Counter[str] = Counter()
    began = time.monotonic()
    hunt = Hunt()
    schedule = SweepSchedule(saga)
    # Stripe's webhooks as `saga up` wires them; their retries (a minute, five...) in milliseconds.
    url = wire_webhooks(
        saga.stack, saga.provider, lambda service: boto3.client(service, region_name=REGION), saga.driver
    )
    saga.provider.webhooks.time_scale = 0.001

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        derandomize=os.environ.get("CI") == "true",
        print_blob=True,
        phases=[p for p in Phase if not (SAMPLING_ONLY and p is Phase.explicit)],
    )
    @given(scenarios())
    @example(KNOWN[0])
    @example(KNOWN[1])
    @example(KNOWN[2])
    def promise_holds(scenario: Scenario) -> None:
        n = next(_examples)
        hunt.tried += 1
        ids = [f"PROP-{n:05d}-{i}" for i in range(len(scenario.orders))]
        note(repr(scenario))
        note(f"order ids: {ids}")
        sweeps = schedule.begin(scenario.sweep_troubles)
        with refusing_entries(scenario.refused_entries) as refused:
            run(saga, scenario, ids, sweeps)
            before = judge(saga, ids, swept=False)
            note(f"before the sweep: {before.endings}")
            hunt.check(before, "before the sweep")
            ran["examples"] += 1
            ran.update(before.endings.values())
            land_what_is_in_flight(saga)
            note(f"sweep: {sorted(Counter(sweeps()).items())}")
            later(saga, sweeps)
        ran.update(f"fired {kind}" for kind in saga.faults.fired_by_kind())
        for fault in saga.faults.faults:
            if fault.function in (RELAY_FUNCTION, SWEEPER_FUNCTION):
                ran[f"fired in {fault.function}"] += fault.fired
        ran["refused PutEvents entries"] += len(refused)
        ran["unreadable rows"] += scenario.poison_before_wave is not None
        ran.update(f"sweeps {how}" for how in sweeps.ends.elements())
        attempts = [a for a in saga.provider.webhooks.attempts() if a.order_id in ids]
        ran["webhook deliveries"] += sum(a.delivered for a in attempts)
        ran["webhook attempts failed"] += sum(not a.delivered for a in attempts)
        after = judge(saga, ids, swept=True)
        note(f"after the sweep: {after.endings}")
        hunt.check(after, "after the sweep")

    try:
        promise_holds()
    finally:
        url.stop()
    elapsed = time.monotonic() - began
    covered = ", ".join(f"{what} {n}" for what, n in sorted(ran.items()) if what != "examples")
    print(f"\n{ran['examples']} examples in {elapsed:.1f} s; endings before the sweep, faults fired, sweeps:")
    print(f"  {covered}")


def test_the_promise_holds_for_any_schedule_of_duplicates_and_faults(saga: Saga) -> None:
    hold_the_promise(saga, EXAMPLES)


@pytest.mark.slow
def test_the_promise_holds_for_many_more_schedules(saga: Saga) -> None:
    """The same property with :data:`SLOW_EXAMPLES` examples (``pytest -m slow``; a few minutes)."""
    hold_the_promise(saga, SLOW_EXAMPLES)
