"""Reconciliation: resolve claims whose lease ran out by asking the provider what happened.

A claim stays ``CLAIMED`` past its lease when no execution could learn or record how its charge
ended: the outcome stayed unknown after every retry, Mark Complete failed after the money moved,
the release was refused for lack of proof, or the execution died or timed out. No execution acts on
such a claim any more (the lease outlasts every execution, see template.yaml), and none may charge
it blind. The sweeper asks the provider instead, and never charges:

=========================================================  ======================================
What the provider shows for the claim's attempt             What the sweeper does
=========================================================  ======================================
a succeeded charge (search or list)                         ``complete_stale``: COMPLETED with it
the same, but the claim was released (or re-claimed        ``complete_released``: COMPLETED with
under a later attempt) since discovery                      it; *charge_on_released*, an alarm
no charge in the search, the grace has passed, and the      ``release_stale``: RELEASED,
list confirms: no PaymentIntent of the attempt at all       ``NOT_CHARGED`` (a new attempt may
                                                            charge later)
... the list shows only failed ones (declined, canceled)    ``release_stale``: RELEASED,
                                                            ``DECLINED``
no charge in the search within the grace                    nothing: *pending*
a charge still in flight, a failed search or list, an       nothing: *pending*
answer that does not match the order
more PaymentIntents in the attempt's window than the        nothing: *pending*, with
list may read (``list_page_cap`` pages)                     ``list_cap_reached``: a person decides
=========================================================  ======================================

Why each branch is safe:

* **Complete.** The provider's own record of a succeeded PaymentIntent with this order's
  ``metadata[orderId]`` and attempt number is proof that the money moved. Completing only stops
  further attempts; it charges nothing.
* **Release.** "No charge" must be proven, not inferred from a search: Stripe's search is
  eventually consistent (usually a minute behind, "up to an hour" during incidents, and no bound
  in its current guide). So the search is only the fast path. Before any release the sweeper asks
  ``GET /v1/payment_intents`` (the list, which Stripe does not index lazily) for the PaymentIntents
  created in the attempt's window (:func:`attempt_window`) and matches the metadata itself. Only
  when the list shows no succeeded and no in-flight PaymentIntent of the attempt is the claim
  released. The grace (``search_grace_seconds`` after the end of the lease) is kept as a second
  line: it is counted from the end of the lease, not the start of the attempt, because a takeover
  continues an attempt, and its requests can be much younger.
* **The window.** Every charge request of the attempt was sent while a lease on it was live:
  Charge Payment re-reads the claim (``check_held``) and sends only with more of the lease left
  than its own timeout, and each takeover keeps the attempt and renews the lease. So every request
  was sent in ``[attemptStartedAt, leaseExpiresAt]`` of the claim seen (the latest lease: the
  write is fenced on it), and Stripe executes a create inside the request that sent it and stamps
  ``created`` then. The window is that, widened by :data:`CLOCK_MARGIN_SECONDS` on each side for
  the two clocks and a request still crossing the network. It does not grow with how long the
  claim has been stale: the list used to run to *now*, at least 75 minutes (the 15-minute lease
  plus the hour of grace) and more at every sweep, which adds only PaymentIntents created after
  the attempt's last request could have been.
* **Whose PaymentIntents.** The list cannot filter on metadata, but it filters on the Stripe
  Customer. When the order names one (``providerCustomerId``) and the attempt was never taken over
  (``attemptStartedBy`` is still the execution that started it), one execution sent every request
  of the attempt, each with that ``customer``, so the attempt's PaymentIntents are among that
  customer's: the sweeper lists only those, a handful of requests whatever the account's volume.
  A taken-over attempt may have been continued by an order paid another way (the takeover matches
  the fingerprint, not the payment method or its customer), and an order without a customer has
  nothing to filter on: those list the whole account in the window.
* **Bounded.** Either list stops after ``list_page_cap`` pages (:data:`DEFAULT_LIST_PAGE_CAP`) and
  the claim stays *pending* with ``list_cap_reached`` set (its own metric): a person decides (the
  runbook). One claim cannot hold up a sweep: past the cap it is left for a person, and the
  sweep's own ``keep_going`` is asked before each further page too.
* **Declined.** When the list shows the attempt's PaymentIntents and every one of them failed for
  good, the provider declined the attempt: the release says ``DECLINED`` and the claims store
  remembers the payment attempt as declined, so no redelivery of it reaches the provider again.
* **Charge on a released claim.** Discovery saw the claim open, the provider shows its attempt
  charged, and by the time of the write the claim was released (a release whose proof was wrong)
  or re-claimed under a later attempt, which may charge again or already has. The claim is marked
  COMPLETED with the charge (``complete_released``) so no further attempt charges, and the decision
  is reported as *charge_on_released* for the sweeper to alarm on: a person checks for a second
  charge and refunds it.
* **Pending.** Doing nothing is always safe: the claim keeps every other execution from charging,
  and the next sweep asks again. A claim pending for long needs a person (the metric says so).
* **Awaiting settlement.** A claim whose payment settles later (a SEPA or ACH debit) has its lease
  moved to its settle-by deadline, so discovery does not find it before: the provider's webhook
  settles it first. Found past the deadline, it is asked about like any other (its list window ends
  when it started to await settlement); still in flight, it is pending with ``settlement_overdue``
  (its own alarm), outside the pending age.
* **Races.** Discovery reads the ``OpenClaimsByLease`` index, which lags (allowed: docs/design.md).
  Every change is one conditional write on the base table, fenced on what discovery saw -- still
  ``CLAIMED``, the same claim token, attempt and lease, and the lease run out -- so a claim taken
  over, completed or renewed since is left alone (*changed*). Two sweeps at once are therefore safe
  too: the second one's writes lose.

More than one succeeded PaymentIntent for one attempt (the provider applied two creates of the
attempt: a key forgotten after 24 hours, or a provider fault) is reported in the decision's
``extra_charge_ids``, for the sweeper to log and count: someone must refund them.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from payment_saga.claims import NO_OWNER, ClaimStatus, ReleaseReason
from payment_saga.errors import ClaimLost, PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import ListTooLong, idempotency_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from payment_saga.claims import Claim, ClaimsStore
    from payment_saga.payments import AttemptReader, AttemptRecord

#: Stripe: "Occasionally, propagation of new or updated data can be up to an hour behind during
#: outages." Since the list confirms every release, this is no longer what makes a release safe:
#: it is how long after the lease the sweeper waits before it lists, so that most charges are found
#: by the search (one request) and the list is asked only for attempts that charged nothing.
DEFAULT_SEARCH_GRACE_SECONDS = 3600
#: The list's ``created`` window is widened by this on both sides: the claim's times are ours, a
#: PaymentIntent's ``created`` is Stripe's, and the two clocks may disagree by a few seconds; a
#: request may also still be crossing the network when the Lambda that sent it gives up.
CLOCK_MARGIN_SECONDS = 600
#: The most pages (of 100) the list may read for one claim. A customer's own PaymentIntents in the
#: attempt's window are a page; the whole account's in the window (about 35 minutes) fit up to
#: about 0.5 orders/s. Ten pages at Stripe's usual few hundred milliseconds each keep a claim to
#: seconds; past the cap the claim is pending for a person, not a sweep that times out.
DEFAULT_LIST_PAGE_CAP = 10


class ProviderUnavailable(Exception):
    """The provider could not be had at all (its key unreadable or of the other mode): no claim can be
    asked about, so the sweep stops at the first one that needs it, every claim left as it was."""


class ReconcileOutcome(enum.StrEnum):
    """What the sweeper did (or, in a dry run, would do) with one stale claim."""

    COMPLETED = "completed"  # the attempt's charge was found: the claim is COMPLETED with it
    RELEASED = "released"  # proven not charged (list): RELEASED, NOT_CHARGED or DECLINED
    PENDING = "pending"  # not decidable yet; left CLAIMED for the next sweep
    CHANGED = "changed"  # the claim changed since discovery (taken over, completed, renewed): left alone
    CHARGE_ON_RELEASED = "charge_on_released"  # charged, but released or re-claimed since: alarm
    FAILED = "failed"  # an unexpected error on this claim; left CLAIMED for the next sweep


#: What a sweep leaves open for the next one: the claim stays CLAIMED, the order waits.
_UNRESOLVED = frozenset({ReconcileOutcome.PENDING, ReconcileOutcome.FAILED})


@dataclass(frozen=True)
class ReconcileDecision:
    """One stale claim: what the sweeper saw, decided and (when ``applied``) wrote."""

    order_id: str
    attempt: int
    claim_token: str
    lease_expires_at: int
    outcome: ReconcileOutcome
    reason: str
    #: When the claim's attempt started (epoch seconds): how long the order has waited for an answer.
    attempt_started_at: int = 0
    charge_id: str | None = None
    applied: bool = False
    #: RELEASED only: why (``NOT_CHARGED`` or ``DECLINED``).
    release_reason: ReleaseReason | None = None
    #: Further succeeded PaymentIntents of the same attempt: double charges to refund.
    extra_charge_ids: tuple[str, ...] = ()
    #: PENDING only: the attempt's window held more PaymentIntents than the list may read. It stays
    #: pending at every sweep: a person decides (runbook).
    list_cap_reached: bool = False
    #: PENDING only: the claim awaits a payment the provider settles later, and its settle-by deadline
    #: has passed without a settlement: its own alarm (``SettlementOverdue``), not the pending age.
    settlement_overdue: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "orderId": self.order_id,
            "attempt": self.attempt,
            "claimToken": self.claim_token,
            "leaseExpiresAt": self.lease_expires_at,
            "attemptStartedAt": self.attempt_started_at,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "chargeId": self.charge_id,
            "applied": self.applied,
            "releaseReason": self.release_reason.value if self.release_reason else None,
            "extraChargeIds": list(self.extra_charge_ids),
            "listCapReached": self.list_cap_reached,
            "settlementOverdue": self.settlement_overdue,
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

    @property
    def oldest_unresolved_age_seconds(self) -> int:
        """Seconds since the oldest attempt this sweep left open (pending or failed) started; 0 if none.

        A claim is pending by design for up to its lease plus the search grace after its attempt
        started (the list is asked only then): an age well past that is a claim the sweeper cannot
        resolve by itself, which is what the pending alarm watches. The sweeper publishes it every
        sweep, so that a skipped sweep leaves a gap, not a reset.
        """
        ages = [
            int(self.now - decision.attempt_started_at)
            for decision in self.decisions
            if decision.outcome in _UNRESOLVED and not decision.settlement_overdue
        ]
        return max([0, *ages])

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "apply": self.apply,
            "searchGraceSeconds": self.search_grace_seconds,
            "finished": self.finished,
            "counts": self.counts,
            "oldestUnresolvedAgeSeconds": self.oldest_unresolved_age_seconds,
            "decisions": [decision.to_dict() for decision in self.decisions],
        }


def reconcile(
    store: ClaimsStore,
    provider: AttemptReader,
    *,
    now: float,
    apply: bool,
    search_grace_seconds: int = DEFAULT_SEARCH_GRACE_SECONDS,
    on_decision: Callable[[ReconcileDecision], None] | None = None,
    keep_going: Callable[[], bool] | None = None,
    list_page_cap: int = DEFAULT_LIST_PAGE_CAP,
) -> ReconcileReport:
    """Resolve every open claim whose lease ran out before ``now``; see the module docstring.

    Args:
        store: the claims store (its clock re-checks the lease at the moment of each write).
        provider: asked with ``search_attempt`` and ``list_attempt`` only; nothing here can charge.
        now: the sweep's time (seconds since the epoch): discovery, the grace and the list's window
            use it.
        apply: write the decisions; ``False`` is a dry run that only reports them.
        search_grace_seconds: how long after the lease ran out the attempt may be released (once the
            list confirms that nothing was charged).
        on_decision: called with each decision as soon as it is made (logs and metrics).
        keep_going: asked before each claim and each further page of a list; ``False`` ends the
            sweep there (a time budget): a claim whose list it stopped is pending.
        list_page_cap: the most pages of 100 the list may read for one claim (see the module
            docstring); past it the claim is pending with ``list_cap_reached``.
    """
    if search_grace_seconds < 0:
        raise ValueError("search_grace_seconds must not be negative")
    if list_page_cap < 1:
        raise ValueError("list_page_cap must be at least 1")
    report = ReconcileReport(now=now, apply=apply, search_grace_seconds=search_grace_seconds)
    sweep = _Sweep(
        store=store,
        provider=provider,
        now=now,
        apply=apply,
        grace=search_grace_seconds,
        page_cap=list_page_cap,
        keep_going=keep_going,
    )
    for seen in store.open_claims(lease_expired_before=int(now)):
        if keep_going is not None and not keep_going():
            report.finished = False
            break
        decision = _settle(sweep, seen)
        report.decisions.append(decision)
        if on_decision is not None:
            on_decision(decision)
    return report


@dataclass(frozen=True)
class _Sweep:
    """What every claim of one sweep is settled with: :func:`reconcile`'s arguments, checked."""

    store: ClaimsStore
    provider: AttemptReader
    now: float
    apply: bool
    grace: int
    page_cap: int
    keep_going: Callable[[], bool] | None


class _Decide:
    """Builds the decisions about one seen claim."""

    def __init__(self, seen: Claim) -> None:
        self.seen = seen

    def __call__(self, outcome: ReconcileOutcome, reason: str, **extra: Any) -> ReconcileDecision:
        return ReconcileDecision(
            order_id=self.seen.order_id,
            attempt=self.seen.attempt,
            claim_token=self.seen.claim_token,
            lease_expires_at=self.seen.lease_expires_at,
            attempt_started_at=self.seen.attempt_started_at,
            outcome=outcome,
            reason=reason,
            **extra,
        )


def _settle(sweep: _Sweep, seen: Claim) -> ReconcileDecision:
    decision = _ask_provider(sweep, seen)
    if seen.awaiting_settlement and decision.outcome is ReconcileOutcome.PENDING:
        # Its lease ran to the settle-by deadline, so the sweeper sees it only past that: the provider
        # took longer to settle than the payment method allows. A person looks (the runbook).
        return dataclasses.replace(
            decision,
            reason=f"the settlement of {seen.settlement_intent_id} is overdue: {decision.reason}",
            settlement_overdue=True,
        )
    return decision


def _ask_provider(sweep: _Sweep, seen: Claim) -> ReconcileDecision:
    decided = _Decide(seen)
    store, provider, now, apply, grace = sweep.store, sweep.provider, sweep.now, sweep.apply, sweep.grace
    try:
        key = idempotency_key(seen.order_id, seen.attempt)
        order = searchable_order(seen)
        try:
            found = provider.search_attempt(order, attempt=seen.attempt, idempotency_key=key)
        except PaymentOutcomeUnknown as exc:
            return decided(ReconcileOutcome.PENDING, f"the provider cannot tell yet: {exc}")
        # Every charge request of the attempt was made while a lease on it was live: the attempt has
        # been quiet since the later of its start and the end of the lease seen.
        quiet_since = _last_request_by(seen)
        if found.charge is None:
            if now - quiet_since < grace:
                return decided(
                    ReconcileOutcome.PENDING,
                    f"no charge found for {key} yet, but the provider's search may lag: the list is"
                    f" asked {grace} s after the attempt's last request, {int(quiet_since + grace - now)} s"
                    " from now",
                )
            created_from, created_to = attempt_window(seen)
            customer = listable_customer(seen)
            try:
                found = provider.list_attempt(
                    order,
                    attempt=seen.attempt,
                    idempotency_key=key,
                    created_from=created_from,
                    created_to=created_to,
                    customer=customer,
                    max_pages=sweep.page_cap,
                    keep_going=sweep.keep_going,
                )
            except ListTooLong as exc:
                return decided(
                    ReconcileOutcome.PENDING,
                    f"the search found nothing, and the list cannot prove it: {exc}; a person decides",
                    list_cap_reached=True,
                )
            except PaymentOutcomeUnknown as exc:
                return decided(
                    ReconcileOutcome.PENDING, f"the search found nothing; the list cannot tell yet: {exc}"
                )
        if found.charge is not None:
            return _complete(store, seen, found, apply=apply, decided=decided)
        reason = ReleaseReason.DECLINED if found.declined else ReleaseReason.NOT_CHARGED
        if apply:
            store.release_stale(seen, reason=reason)
        shown = (
            f"only failed PaymentIntents ({', '.join(found.failed_ids)})"
            if found.declined
            else "no PaymentIntent"
        )
        return decided(
            ReconcileOutcome.RELEASED,
            f"the provider's list shows {shown} for {key}, {int(now - quiet_since)} s"
            " after its last possible request",
            applied=apply,
            release_reason=reason,
        )
    except ClaimLost as exc:
        return decided(ReconcileOutcome.CHANGED, str(exc))
    except ProviderUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - one claim's failure must not stop the sweep of the others
        return decided(ReconcileOutcome.FAILED, f"{type(exc).__name__}: {exc}")


def _complete(
    store: ClaimsStore, seen: Claim, found: AttemptRecord, *, apply: bool, decided: _Decide
) -> ReconcileDecision:
    """The attempt charged: complete the claim with the charge, or alarm if it was released since."""
    charge = found.charge
    assert charge is not None
    key = idempotency_key(seen.order_id, seen.attempt)
    facts = {"charge_id": charge.charge_id, "extra_charge_ids": found.extra_charge_ids}
    shown = f"the provider's {found.source} shows {charge.charge_id} ({charge.status}) for {key}"
    if not apply:
        return decided(ReconcileOutcome.COMPLETED, shown, **facts)
    try:
        store.complete_stale(seen, charge_id=charge.charge_id)
    except ClaimLost as lost:
        current = store.get(seen.order_id)
        if current is not None and current.status is ClaimStatus.COMPLETED:
            if current.charge_id == charge.charge_id:
                return decided(ReconcileOutcome.CHANGED, f"{lost}; completed with the same charge", **facts)
            return decided(
                ReconcileOutcome.CHARGE_ON_RELEASED,
                f"{shown}, but the order was completed since with {current.charge_id} (attempt"
                f" {current.attempt}): two charges for one order, refund one",
                **facts,
            )
        if current is not None and current.status is ClaimStatus.CLAIMED and current.attempt == seen.attempt:
            # Taken over (or renewed) under the same attempt: the holder's retry replays this charge.
            raise
        # Released since (the release's proof was wrong), or re-claimed under a later attempt that
        # may charge again: mark it completed with this charge so nothing charges it again, and alarm.
        moved = "gone" if current is None else f"{current.status.value} at attempt {current.attempt}"
        try:
            store.complete_released(seen.order_id, attempt=seen.attempt, charge_id=charge.charge_id)
        except ClaimLost as refused:
            return decided(
                ReconcileOutcome.CHARGE_ON_RELEASED,
                f"{shown}, but the claim is {moved} and could not be completed with it ({refused})",
                **facts,
            )
        return decided(
            ReconcileOutcome.CHARGE_ON_RELEASED,
            f"{shown}, but the claim was {moved}: completed with the charge; a later attempt may have"
            " charged too",
            applied=True,
            **facts,
        )
    return decided(ReconcileOutcome.COMPLETED, shown, applied=True, **facts)


def attempt_window(claim: Claim) -> tuple[int, int]:
    """The ``created`` window (Unix seconds) that holds every PaymentIntent of the claim's attempt.

    Every charge request of the attempt was sent while a lease on it was live (Charge Payment's
    ``check_held`` sends only with more lease left than its own timeout; a takeover keeps the
    attempt and renews the lease), that is within ``[attemptStartedAt, leaseExpiresAt]`` of the
    latest lease, which is the one the sweeper's write is fenced on. Stripe stamps ``created`` when
    it executes the create, inside the request. :data:`CLOCK_MARGIN_SECONDS` on each side covers the
    clocks and a request still on the wire. Fixed by the claim: it does not grow while the claim
    stays stale.
    """
    sent_until = _last_request_by(claim)
    return claim.attempt_started_at - CLOCK_MARGIN_SECONDS, sent_until + CLOCK_MARGIN_SECONDS


def _last_request_by(claim: Claim) -> int:
    """When the attempt's last charge request was sent, at the latest.

    The end of the lease seen; but a claim awaiting settlement had its lease moved to the settle-by
    deadline by a write made after its charge was answered ``processing``, so its requests were all
    sent by then (``awaitingSettlementSince``): the window stays the attempt's own, not weeks wide.
    """
    if claim.awaiting_settlement and claim.awaiting_settlement_since is not None:
        return max(claim.attempt_started_at, claim.awaiting_settlement_since)
    return max(claim.attempt_started_at, claim.lease_expires_at)


def listable_customer(claim: Claim) -> str | None:
    """The Stripe Customer whose PaymentIntents hold every one of the attempt's, or None.

    Only when the attempt was never taken over: then one execution sent all its requests, all with
    the ``customer`` its order names (``Claim.provider_customer_id``, from the row's ``order``, which
    that execution's claim wrote). A takeover continues the attempt with another execution's order,
    which matches the fingerprint but may pay another way (no customer, or another one): its
    requests may carry another ``customer``, so the whole account must be listed.
    """
    if claim.attempt_started_by == NO_OWNER:
        return None
    return claim.provider_customer_id


def searchable_order(claim: Claim) -> Order:
    """The order a claim was taken for, as far as the provider's search needs it.

    The claim keeps the order's amount, currency and customer (its fingerprint, ``Order.fingerprint``)
    but not the payment method, which the sweeper never needs: the provider reads the order id,
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
