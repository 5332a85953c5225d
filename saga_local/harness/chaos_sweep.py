"""Chaos's sweeps: the sweeper on a clock past every lease and the grace, then "later" played out."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga_local.aws.moto_adapter import deliver_delayed_messages
from saga_local.commands import simulate

if TYPE_CHECKING:
    from collections.abc import Callable, Sized

    from payment_saga.reconcile import ReconcileDecision
    from saga_local.aws.embedded import EmbeddedStack
    from saga_local.aws.stack import Stack

#: The pages one stale claim's proof may list in chaos's sweeps. A run packs thousands of orders into
#: minutes, so one attempt's window holds more PaymentIntents than the deployed sweeper's cap
#: (DEFAULT_LIST_PAGE_CAP) lets it read, and such a claim is left for a person by design
#: (tests/functional/test_sweeper.py shows that). Chaos judges the decisions, not a Lambda's time
#: budget: its sweeps read every page (in memory, against the emulator).
SWEEP_LIST_PAGE_CAP = 10_000
#: Rounds of "later" after the sweep, at most: delayed re-queues delivered, run, and swept again
#: (an order is re-queued at most MaxRequeueAttempts (5) times).
LATER_ROUNDS = 6
#: The sweeper's default wait before it trusts "the provider's search found nothing" (seconds).
SEARCH_GRACE_SECONDS = 3600


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
    from saga_local.commands.sweep import reconcile_stack

    report = reconcile_stack(stack, apply=True, now=now, list_page_cap=SWEEP_LIST_PAGE_CAP)
    return [Resolved.of(decision) for decision in report.decisions]


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


def _search_and_list_requests(stack: EmbeddedStack) -> dict[str, int]:
    return {endpoint: stack.provider.request_count(endpoint) for endpoint in ("search", "list")}
