"""Chaos's sweeps: SweeperFunction on a clock past every lease and the grace, then "later" played out.

Every sweep is EventBridge Scheduler's tick of the real SweeperFunction, invoked through the stack's
runtime (its handler, its sweep lock, its role, the faults aimed at it), with the handler's clock
moved past every lease and the search grace. A tick that fails (the function dies, times out, is
throttled, meets an AWS error, cannot read its key's secret, or finds the provider's search or list
down) is followed by the next tick, as Scheduler's next run follows it five minutes later, until one
sweeps to the end. The sweeper lists every page a claim's proof needs (``CLAIM_LIST_PAGE_CAP``): a run
packs thousands of orders into minutes, and chaos judges the decisions, not a Lambda's time budget.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from unittest import mock

import boto3

from payment_saga.claims import DEFAULT_SETTLEMENT_WINDOW_DAYS, SECONDS_PER_DAY, ClaimsStore
from payment_saga.sweep_lock import LEASE_MARGIN_SECONDS, SWEEP_LOCK_KEY, SweepLock
from saga_local.aws.moto_adapter import deliver_delayed_messages
from saga_local.harness import simulate
from saga_local.runtime.api import Throttled
from saga_local.runtime.faults import call_error
from saga_local.runtime.runtimes import InProcessRuntime

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sized

    from payment_saga.reconcile import ReconcileDecision
    from saga_local.aws.stack import Stack
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.stripe_emulator import Endpoint, ProviderEmulator

#: The pages one stale claim's proof may list in chaos's sweeps (the sweeper's ``CLAIM_LIST_PAGE_CAP``).
#: A run packs thousands of orders into minutes, so one attempt's window holds more PaymentIntents
#: than the deployed sweeper's cap (10) lets it read, and such a claim is left for a person by design
#: (tests/functional/test_sweeper_lambda.py shows that). Chaos judges the decisions, not a Lambda's time
#: budget: its sweeps read every page (in memory, against the emulator).
SWEEP_LIST_PAGE_CAP = 10_000
#: Rounds of "later" after the sweep, at most: delayed re-queues delivered, run, and swept again
#: (an order is re-queued at most MaxRequeueAttempts (5) times).
LATER_ROUNDS = 6
#: The sweeper's default wait before it trusts "the provider's search found nothing" (seconds).
SEARCH_GRACE_SECONDS = 3600
#: The function chaos's sweeps invoke, as the template's schedule does.
SWEEPER_FUNCTION = "SweeperFunction"
#: What can go wrong around one tick besides the function's own fault points: its provider key's
#: secret cannot be read (the sweep fails before its first claim), or the provider's search or its
#: list is down (every request to it fails, nothing applied).
SWEEP_TROUBLES = ("secret unreadable", "search down", "list down")
#: Ticks one sweep may take before chaos gives up on it: far more than the faults aimed at the
#: sweeper's ticks (one per tick, on the first ticks only), so a sweep that never finishes is a fault
#: of the sweeper, not of the plan.
MAX_TICKS_PER_SWEEP = 30
#: botocore's event for the sweeper's one read of its key (Secrets Manager's service id, hyphenated).
KEY_READ_EVENT = "before-call.secrets-manager.GetSecretValue"
#: The provider's endpoint each "down" trouble fails.
_DOWN: dict[str, Endpoint] = {"search down": "search", "list down": "list"}


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
    #: A debit still unsettled past its settlement window: SettlementOverdueAlarm pages.
    settlement_overdue: bool = False

    @classmethod
    def of(cls, decision: ReconcileDecision) -> Resolved:
        outcome = getattr(decision.outcome, "value", str(decision.outcome))
        return cls(
            decision.order_id,
            decision.attempt,
            outcome,
            decision.reason,
            decision.charge_id,
            decision.settlement_overdue,
        )

    def __str__(self) -> str:
        charge = f" with {self.charge_id}" if self.charge_id else ""
        return f"{self.order_id}  attempt {self.attempt}  {self.outcome}{charge}: {self.reason}"


class SweeperTicks:
    """EventBridge Scheduler's ticks of SweeperFunction, on a clock past every lease and the search grace.

    Each tick is an invocation through the stack's runtime, with the handler's ``time``, its sweep
    lock's clock and its claims store's clock stopped at the tick's moment, and ``CLAIM_LIST_PAGE_CAP``
    at :data:`SWEEP_LIST_PAGE_CAP`. Each tick is later than the last by more than a sweep's lock lease:
    a sweep killed holding the lock leaves it to run out by the next tick, as on AWS, rather than
    making every later one skip. ``troubles`` maps a tick's number (from 1, as the fault plan counts
    the function's invocations) to one of :data:`SWEEP_TROUBLES`. With ``past_settlement`` the clock
    is past the settlement window too (``SETTLEMENT_WINDOW_DAYS``): a claim awaiting a bank debit
    keeps its lease until its settle-by deadline, and only a sweep after it closes a debit whose
    settlement webhook was lost.

    The clock is moved by replacing names in the handler's module, which only works with the
    handlers in this process (``runtime="inprocess"``, as chaos runs them).
    """

    def __init__(
        self, stack: EmbeddedStack, *, troubles: dict[int, str] | None = None, past_settlement: bool = False
    ) -> None:
        if not isinstance(stack.runtime, InProcessRuntime):
            raise ValueError("chaos moves the sweeper's clock in this process: run the stack in-process")
        unknown = set((troubles or {}).values()) - set(SWEEP_TROUBLES)
        if unknown:
            raise ValueError(f"unknown sweep troubles {sorted(unknown)}: one of {SWEEP_TROUBLES}")
        self.stack = stack
        self.name = stack.stack.function_name(SWEEPER_FUNCTION)
        spec, environment = stack.stack.functions[self.name]
        self.lease = claim_lease_seconds(stack.stack)
        self.grace = int(environment.get("CLAIM_SEARCH_GRACE_SECONDS", SEARCH_GRACE_SECONDS))
        #: How far past now each tick is: every lease, or the settlement window if longer.
        self.horizon = self.lease
        if past_settlement:
            window = int(environment.get("SETTLEMENT_WINDOW_DAYS", DEFAULT_SETTLEMENT_WINDOW_DAYS))
            self.horizon = max(self.lease, window * SECONDS_PER_DAY)
        self.interval = spec.timeout + LEASE_MARGIN_SECONDS + 1
        self.troubles = dict(troubles or {})
        #: The last tick's clock. A sweep's lock row keeps the clock of the sweep that last held it:
        #: the first tick comes after it, as Scheduler's next tick comes after the last sweep.
        self.at = self._last_lease_end()
        self.ticks = 0
        #: How the ticks ended: ``swept`` (to the end), ``stopped early`` (its time budget ran out
        #: first), ``failed``, ``skipped``, ``throttled``.
        self.ends: Counter[str] = Counter()
        #: Ticks in which each trouble refused a call (a trouble on a tick that never needed the
        #: search or the list refused nothing).
        self.troubles_fired: Counter[str] = Counter()
        self._source = next(
            s
            for s in stack.schedule_sources(compress=1.0)
            if s.function_name == self.name and s.schedule.event_name == "Sweep"
        )

    def tick(self) -> tuple[str, list[Resolved]]:
        """One tick: how it ended, and what it decided (a failed tick may have decided some claims)."""
        from handlers import sweeper

        self.ticks += 1
        self.at = max(time.time() + self.horizon + self.grace + 1, self.at + self.interval)
        at = self.at
        decided: list[Resolved] = []
        record = sweeper.record_decision

        def recorded(decision: ReconcileDecision) -> None:
            decided.append(Resolved.of(decision))
            record(decision)

        def stopped() -> float:
            return at

        self._source.clock = stopped
        with contextlib.ExitStack() as patches:
            patches.enter_context(self._trouble(self.troubles.get(self.ticks)))
            patches.enter_context(
                mock.patch.dict(os.environ, {"CLAIM_LIST_PAGE_CAP": str(SWEEP_LIST_PAGE_CAP)})
            )
            patches.enter_context(mock.patch.object(sweeper, "time", _Frozen(at)))
            patches.enter_context(
                mock.patch.object(sweeper, "SweepLock", functools.partial(SweepLock, clock=stopped))
            )
            patches.enter_context(
                mock.patch.object(sweeper, "claims_store", functools.partial(_claims_store_at, at))
            )
            patches.enter_context(mock.patch.object(sweeper, "record_decision", recorded))
            try:
                invocation = self.stack.runtime.invoke(self.name, self._source.event())
            except Throttled:
                end = "throttled"
            else:
                end = "failed" if invocation.function_error else _ended(json.loads(invocation.payload))
        self.ends[end] += 1
        return end, decided

    def _last_lease_end(self) -> float:
        """When the last sweep's lease on the sweep lock ended (0 if no sweep ever ran)."""
        item = self.stack.driver.dynamodb.get_item(
            TableName=self.stack.stack.table_name, Key={"orderId": {"S": SWEEP_LOCK_KEY}}, ConsistentRead=True
        ).get("Item", {})
        return float(item.get("sweepLeaseExpiresAt", {}).get("N", "0"))

    @contextlib.contextmanager
    def _trouble(self, kind: str | None) -> Iterator[None]:
        from handlers import runtime as handler_runtime

        endpoint = _DOWN.get(kind or "")
        if kind is not None and endpoint is not None:
            before = self.stack.provider.request_count(endpoint)
            self.stack.provider.set_failure_rate("fail_before_apply", 1.0, endpoint=endpoint)
            try:
                yield
            finally:
                self.stack.provider.set_failure_rate("fail_before_apply", 0.0, endpoint=endpoint)
                if self.stack.provider.request_count(endpoint) > before:  # it refused a request
                    self.troubles_fired[kind] += 1
            return
        if kind == "secret unreadable":
            # A cold container without the key in its environment reads the secret, as deployed;
            # Secrets Manager keeps refusing (throttled past the SDK's retries).
            refused = 0

            def refuse(model: Any = None, **_: Any) -> None:
                nonlocal refused
                refused += 1
                raise call_error("throttle_call", "secretsmanager.GetSecretValue", model)

            # The default session: the handlers' clients copy its hooks when they are made.
            hooks = boto3._get_default_session().events
            handler_runtime.payment_key.cache_clear()
            handler_runtime.provider.cache_clear()
            hooks.register(KEY_READ_EVENT, refuse)
            try:
                with mock.patch.dict(os.environ):
                    os.environ.pop("PAYMENT_API_KEY", None)
                    yield
            finally:
                hooks.unregister(KEY_READ_EVENT, refuse)
                if refused:
                    self.troubles_fired[kind] += 1
                handler_runtime.payment_key.cache_clear()
                handler_runtime.provider.cache_clear()  # the next container has the key again
            return
        yield


def _ended(result: dict[str, Any]) -> str:
    """How a tick the function answered ended, from its answer."""
    if result.get("skipped"):
        return "skipped"
    # The handler stops taking claims when its time budget (the function's timeout, in wall time)
    # is nearly spent, and leaves the rest to the next tick.
    return "swept" if result.get("finished", True) else "stopped early"


class _Frozen:
    """Stands in for the ``time`` module in the sweeper's handler: its one use is ``time.time()``."""

    def __init__(self, at: float) -> None:
        self.at = at

    def time(self) -> float:
        return self.at


def _claims_store_at(at: float) -> ClaimsStore:
    """The sweeper's claims store (``handlers.runtime.claims_store``), on a clock stopped at ``at``."""
    from handlers import runtime as handler_runtime

    return ClaimsStore(
        handler_runtime.env("CLAIMS_TABLE_NAME"),
        client=handler_runtime.client("dynamodb"),
        lease_seconds=int(handler_runtime.env("CLAIM_LEASE_SECONDS")),
        retention_seconds=int(handler_runtime.env("CLAIM_RETENTION_DAYS")) * SECONDS_PER_DAY,
        clock=lambda: at,
    )


def sweep(ticks: SweeperTicks) -> list[Resolved]:
    """One sweep: ticks until one sweeps to the end, every request a failed tick left in flight landed
    before the next (the five minutes between ticks). A tick that stopped early, its time budget
    spent on a long sweep, is followed by the next as well: chaos judges the decisions, not the
    budget. What every tick of it decided."""
    decided: list[Resolved] = []
    for _ in range(MAX_TICKS_PER_SWEEP):
        end, resolved = ticks.tick()
        decided.extend(resolved)
        if end == "swept":
            return decided
        land_what_is_in_flight(ticks.stack)
    raise RuntimeError(
        f"the sweeper did not finish a sweep in {MAX_TICKS_PER_SWEEP} ticks: {dict(ticks.ends)}"
    )


def wait_for_settlements(provider: ProviderEmulator, *, timeout: float = 120.0) -> None:
    """Until no PaymentIntent is ``processing``: the bank answered every debit.

    Before a sweep whose clock is past the settlement window: on an account the bank answers within
    days, long before the window ends; a sweep that jumped past it while a debit still waited on its
    real-time settlement would page for a world the run rules out.
    """
    deadline = time.monotonic() + timeout
    while any(i["status"] == "processing" for i in provider.payment_intents()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"debits still processing after {timeout} s")
        time.sleep(0.2)


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
        if stack.provider.settle_seconds is not None:
            wait_for_settlements(stack.provider)  # the bank answers within the settlement window
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


def sweep_and_play_out_later(
    stack: EmbeddedStack, ticks: SweeperTicks
) -> tuple[list[Resolved], Counter[str]]:
    """Sweep (:func:`sweep`, by ``ticks``), then :func:`play_out_later`. Returns what the sweeps did,
    and the requests they sent to the provider's search and list."""
    requests: Counter[str] = Counter()
    swept: list[Resolved] = []

    def sweep_now() -> list[Resolved]:
        asked = _search_and_list_requests(stack)
        resolved = sweep(ticks)
        requests.update({k: n - asked[k] for k, n in _search_and_list_requests(stack).items()})
        swept.extend(resolved)
        return resolved

    land_what_is_in_flight(stack)
    sweep_now()
    play_out_later(stack, sweep_now)
    return swept, requests


def _search_and_list_requests(stack: EmbeddedStack) -> dict[str, int]:
    return {endpoint: stack.provider.request_count(endpoint) for endpoint in ("search", "list")}
