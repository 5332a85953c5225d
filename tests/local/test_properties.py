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
provider faults. It runs them through the real ASL with the real handlers, waits for every
execution, lets every late write land, runs the sweeper, and checks the invariants of docs/design.md at
the provider and in the claims table:

1. at most one charge per order (the provider's ledger);
2. nothing lost: every order ends charged (COMPLETED, 1 charge), declined (RELEASED DECLINED, 0
   charges), or needs-reconciliation (CLAIMED) -- none left CLAIMED after the sweep, and a claim
   RELEASED as NOT_CHARGED by the sweeper is *lost* until the order is charged, unless
   every execution of the order ended ``ClaimFailed``, ``ClaimRetriedLater`` or ``ResendsExhausted``
   (visibly failed before anything was charged);
   and no execution that SUCCEEDED still holds the order's claim open (it reported a duplicate of
   itself: nothing will ever charge the order);
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
claims.py (mutant ``claims-reclaim-resend-is-duplicate``: a customer's retry re-claims after the
decline, the answer is lost, the resend meets its own row and is called a duplicate), sampling alone
finds it within 30-130 examples (six seeds); hole 2 (a late copy of a declined attempt charged)
within 10-15.

Every run first replays :data:`KNOWN`, the shrunk schedules of those two holes, so a regression of
either fails at once whatever the sampling draws; ``SAGA_PROPERTY_SAMPLING_ONLY=1`` leaves them out
(to measure what sampling alone finds).

``SAGA_PROPERTY_EXAMPLES`` sets the number of examples (25 by default; ``make property-long``
runs 500). With ``CI=true`` the examples are derandomized, so a CI run is reproducible.
``SAGA_PROPERTY_CHECKS`` (say ``5`` or ``2 (own claim open)``, see :data:`CHECKS`) asserts only
those checks: Hypothesis shrinks the first failure it finds, so hunting one hole while another is
open needs the others out of the way.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis import strategies as st

from saga_local.commands.chaos import broken_invariants, land_what_is_in_flight, play_out_later
from saga_local.commands.simulate import settle
from saga_local.runtime.faults import (
    KINDS,
    LANDS_AFTER,
    POINTS,
    START_FUNCTION,
    STEP_FUNCTIONS,
    Fault,
    declined_attempts_sent_again,
    kinds_at,
    redeliver,
)
from saga_local.stripe_emulator import FAULT_KINDS
from tests.helpers import order
from tests.local.conftest import sweep

if TYPE_CHECKING:
    from saga_local.aws.driver import ExecutionResult
    from tests.helpers import Saga

ROUTES = ["direct", "sqs", "redelivered"]
EXAMPLES = int(os.environ.get("SAGA_PROPERTY_EXAMPLES", "25"))
DECLINING_CARD = "pm_card_chargeDeclined"
#: The function that writes the claim: where a lost answer or a late write is aimed half the time.
CLAIM_FUNCTION = "ClaimOrderFunction"
CHARGE_FUNCTION = "ChargePaymentFunction"
RELEASE_FUNCTION = "ReleaseClaimFunction"

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
class Scenario:
    orders: tuple[OrderPlan, ...]
    faults: tuple[FaultSpec, ...]
    provider_faults: tuple[ProviderFaultSpec, ...]

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
    return Scenario(orders, tuple(step_faults + start_faults), tuple(provider_faults))


# -- running one example -----------------------------------------------------------------------


@dataclass
class Outcome:
    """What the ledger and the table say about each order of an example."""

    endings: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def run(saga: Saga, scenario: Scenario, ids: list[str]) -> None:
    saga.faults.clear()
    saga.provider.clear_faults()
    for spec in scenario.faults:
        saga.faults.add(spec.fault(ids))
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
        run_wave(saga, scenario, ids, wave)
    # Every write still in the air lands now; one may start nothing, but let what it moved settle.
    saga.faults.late.land_all()
    settle(saga, timeout=120)


def later(saga: Saga) -> None:
    """Time passes after the sweep, as ``saga chaos`` lets it pass: orders re-queued with a delay
    (behind an open payment attempt, or proven never charged) come back and run, and whatever they
    leave open is swept again, until a sweep finds nothing to decide."""
    play_out_later(saga, lambda: sweep(saga).decisions, settle_timeout=120)


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
    return outcome


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
    ``<orderId>-w<wave>-c<copy>`` here, ``<orderId>-<MessageId>`` from the start function."""
    found: dict[str, dict[str, ExecutionResult]] = {order_id: {} for order_id in ids}
    for arn in saga.driver.execution_arns():
        name = arn.rpartition(":")[2]
        for order_id in ids:
            if name.startswith(f"{order_id}-"):
                found[order_id][arn] = saga.driver.result(arn, with_path=False)
    return found


# -- the property ------------------------------------------------------------------------------


#: The checks, by the tag their violations start with (``invariant 2 (lost): ...``).
CHECKS = ("1", "2 (lost)", "2 (still claimed)", "2 (own claim open)", "5", "6", "7")
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


def test_the_promise_holds_for_any_schedule_of_duplicates_and_faults(saga: Saga) -> None:
    ran: Counter[str] = Counter()
    began = time.monotonic()
    hunt = Hunt()

    @settings(
        max_examples=EXAMPLES,
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
        run(saga, scenario, ids)
        before = judge(saga, ids, swept=False)
        note(f"before the sweep: {before.endings}")
        hunt.check(before, "before the sweep")
        ran["examples"] += 1
        ran.update(before.endings.values())
        ran.update(f"fired {kind}" for kind in saga.faults.fired_by_kind())
        land_what_is_in_flight(saga)
        report = sweep(saga)
        note(f"sweep: {report.counts}")
        later(saga)
        after = judge(saga, ids, swept=True)
        note(f"after the sweep: {after.endings}")
        hunt.check(after, "after the sweep")

    promise_holds()
    elapsed = time.monotonic() - began
    tally = ", ".join(f"{what} {n}" for what, n in sorted(ran.items()) if what != "examples")
    print(f"\n{ran['examples']} examples in {elapsed:.1f} s; endings before the sweep, faults fired: {tally}")
