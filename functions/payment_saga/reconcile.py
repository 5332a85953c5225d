"""Reconciliation: resolve claims whose lease ran out by asking the provider what happened.

A claim stays ``CLAIMED`` past its lease when no execution could learn or record how its charge
ended: the outcome stayed unknown after every retry, Mark Complete failed after the money moved,
the release was refused for lack of proof, or the execution died or timed out. No execution acts on
such a claim any more (the lease outlasts every execution, see template.yaml), and none may charge
it blind. The sweeper asks the provider instead, and never charges:

=========================================================  ======================================
What the provider shows for the claim's attempt             What the sweeper does
=========================================================  ======================================
a succeeded charge                                          ``complete_stale``: COMPLETED with it
no charge (none, or only failed ones), and the last charge  ``release_stale``: RELEASED,
request of the attempt is older than the search grace       ``NOT_CHARGED`` (a new attempt may
                                                            charge later)
no charge, but the search may still lag                     nothing: *pending*
a charge still in flight, a failed search, an answer that   nothing: *pending*
does not match the order
=========================================================  ======================================

Why each branch is safe:

* **Complete.** The provider's own record of a succeeded PaymentIntent with this order's
  ``metadata[orderId]`` and attempt number is proof that the money moved. Completing only stops
  further attempts; it charges nothing.
* **Release.** Stripe's search is eventually consistent (searchable within a minute normally, up
  to an hour behind during incidents), so "no charge" is evidence only once every charge request
  of the attempt is older than ``search_grace_seconds``. Those requests all happened before the
  lease ran out (the lease outlasts every execution that could act on the claim, retries
  included), so the grace is counted from the end of the lease, not from the start of the attempt:
  a takeover continues an attempt, and its requests can be much younger than the attempt.
* **Pending.** Doing nothing is always safe: the claim keeps every other execution from charging,
  and the next sweep asks again. A claim pending for long needs a person (the metric says so).
* **Races.** Discovery reads the ``OpenClaimsByLease`` index, which lags (allowed: DESIGN.md).
  Every change is one conditional write on the base table, fenced on what discovery saw -- still
  ``CLAIMED``, the same claim token, attempt and lease, and the lease run out -- so a claim taken
  over, completed or renewed since is left alone (*changed*). Two sweeps at once are therefore safe
  too: the second one's writes lose.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from payment_saga.errors import ClaimLost, PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import idempotency_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from payment_saga.claims import Claim, ClaimsStore
    from payment_saga.payments import PaymentProvider

#: Stripe: "Occasionally, propagation of new or updated data can be up to an hour behind during
#: outages." A search that finds nothing is trusted only once the attempt has been quiet this long.
DEFAULT_SEARCH_GRACE_SECONDS = 3600


class ReconcileOutcome(enum.StrEnum):
    """What the sweeper did (or, in a dry run, would do) with one stale claim."""

    COMPLETED = "completed"  # the attempt's charge was found: the claim is COMPLETED with it
    RELEASED = "released"  # no charge, long enough after the last request: RELEASED (NOT_CHARGED)
    PENDING = "pending"  # not decidable yet; left CLAIMED for the next sweep
    CHANGED = "changed"  # the claim changed since discovery (taken over, completed, renewed): left alone
    FAILED = "failed"  # an unexpected error on this claim; left CLAIMED for the next sweep


@dataclass(frozen=True)
class ReconcileDecision:
    """One stale claim: what the sweeper saw, decided and (when ``applied``) wrote."""

    order_id: str
    attempt: int
    claim_token: str
    lease_expires_at: int
    outcome: ReconcileOutcome
    reason: str
    charge_id: str | None = None
    applied: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "orderId": self.order_id,
            "attempt": self.attempt,
            "claimToken": self.claim_token,
            "leaseExpiresAt": self.lease_expires_at,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "chargeId": self.charge_id,
            "applied": self.applied,
        }


@dataclass
class ReconcileReport:
    """A sweep: every stale claim it looked at, in the order of their leases (oldest first).

    ``finished`` is false when the sweep stopped early (``keep_going`` said so); the claims it did
    not reach are left for the next sweep.
    """

    now: float
    apply: bool
    search_grace_seconds: int
    decisions: list[ReconcileDecision] = field(default_factory=list)
    finished: bool = True

    @property
    def counts(self) -> dict[str, int]:
        """How many claims ended each way (every outcome listed, zeros included)."""
        tally = dict.fromkeys((outcome.value for outcome in ReconcileOutcome), 0)
        for decision in self.decisions:
            tally[decision.outcome.value] += 1
        return tally

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "apply": self.apply,
            "searchGraceSeconds": self.search_grace_seconds,
            "finished": self.finished,
            "counts": self.counts,
            "decisions": [decision.to_dict() for decision in self.decisions],
        }


def reconcile(
    store: ClaimsStore,
    provider: PaymentProvider,
    *,
    now: float,
    apply: bool,
    search_grace_seconds: int = DEFAULT_SEARCH_GRACE_SECONDS,
    on_decision: Callable[[ReconcileDecision], None] | None = None,
    keep_going: Callable[[], bool] | None = None,
) -> ReconcileReport:
    """Resolve every open claim whose lease ran out before ``now``; see the module docstring.

    Args:
        store: the claims store (its clock re-checks the lease at the moment of each write).
        provider: asked with ``find_charge`` only; nothing here can charge.
        now: the sweep's time (seconds since the epoch): discovery and the search grace use it.
        apply: write the decisions; ``False`` is a dry run that only reports them.
        search_grace_seconds: how long after the lease ran out a search that finds nothing is
            trusted as proof that nothing was charged.
        on_decision: called with each decision as soon as it is made (logs and metrics).
        keep_going: asked before each claim; ``False`` ends the sweep there (a time budget).
    """
    if search_grace_seconds < 0:
        raise ValueError("search_grace_seconds must not be negative")
    report = ReconcileReport(now=now, apply=apply, search_grace_seconds=search_grace_seconds)
    for seen in store.open_claims(lease_expired_before=int(now)):
        if keep_going is not None and not keep_going():
            report.finished = False
            break
        decision = _settle(store, provider, seen, now=now, apply=apply, grace=search_grace_seconds)
        report.decisions.append(decision)
        if on_decision is not None:
            on_decision(decision)
    return report


def _settle(
    store: ClaimsStore, provider: PaymentProvider, seen: Claim, *, now: float, apply: bool, grace: int
) -> ReconcileDecision:
    def decided(outcome: ReconcileOutcome, reason: str, **extra: Any) -> ReconcileDecision:
        return ReconcileDecision(
            order_id=seen.order_id,
            attempt=seen.attempt,
            claim_token=seen.claim_token,
            lease_expires_at=seen.lease_expires_at,
            outcome=outcome,
            reason=reason,
            **extra,
        )

    try:
        key = idempotency_key(seen.order_id, seen.attempt)
        try:
            charge = provider.find_charge(searchable_order(seen), attempt=seen.attempt, idempotency_key=key)
        except PaymentOutcomeUnknown as exc:
            return decided(ReconcileOutcome.PENDING, f"the provider cannot tell yet: {exc}")
        if charge is not None:
            if apply:
                store.complete_stale(seen, charge_id=charge.charge_id)
            return decided(
                ReconcileOutcome.COMPLETED,
                f"the provider shows {charge.charge_id} ({charge.status}) for {key}",
                charge_id=charge.charge_id,
                applied=apply,
            )
        # Every charge request of the attempt was made while a lease on it was live: the attempt
        # has been quiet since the later of its start and the end of the lease seen.
        quiet_since = max(seen.attempt_started_at, seen.lease_expires_at)
        if now - quiet_since < grace:
            return decided(
                ReconcileOutcome.PENDING,
                f"no charge found for {key} yet, but the provider's search may lag: trusted after"
                f" {grace} s without a request, {int(quiet_since + grace - now)} s from now",
            )
        if apply:
            store.release_stale(seen)
        return decided(
            ReconcileOutcome.RELEASED,
            f"no charge for {key}, {int(now - quiet_since)} s after its last possible request",
            applied=apply,
        )
    except ClaimLost as exc:
        return decided(ReconcileOutcome.CHANGED, str(exc))
    except Exception as exc:  # noqa: BLE001 - one claim's failure must not stop the sweep of the others
        return decided(ReconcileOutcome.FAILED, f"{type(exc).__name__}: {exc}")


def searchable_order(claim: Claim) -> Order:
    """The order a claim was taken for, as far as the provider's search needs it.

    The claim keeps the order's amount, currency and customer (its fingerprint, ``Order.fingerprint``)
    but not the payment method, which the sweeper never needs: ``find_charge`` reads the order id,
    amount and currency. The payment method is left empty rather than invented: there is nothing
    this order could be charged to, should it ever reach a charge by mistake.
    """
    amount, currency, customer_id = claim.fingerprint.split("|", 2)
    return Order(
        order_id=claim.order_id,
        amount=int(amount),
        currency=currency,
        customer_id=customer_id,
        payment_method="",
        payment_attempt=claim.payment_attempt,
    )
