"""The claim: one conditional write on ``orderId`` is the gate before the charge.

Every method that changes a claim is a single conditional write on the base table (invariant 3).
When a write loses, the item that beat it comes back in the same response
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``), so no decision is ever taken on a read that
could be stale, and no index is consulted on the way to a charge.

Lifecycle (the words people and tools read in the table)::

    (none) --claim--> CLAIMED --complete--> COMPLETED      (never claimed again)
                         |
                         +----release----> RELEASED --claim--> CLAIMED (attempt + 1)

A claim is held by a *token*: the Step Functions execution id. Complete and release are fenced
on it (invariant 7); a retried Claim step of the same execution finds its own token and is
re-entrant. A ``CLAIMED`` row whose lease ran out may be taken over by another execution, keeping
the attempt number, so the provider deduplicates the charge the dead holder may have made
(invariant 5) -- but only while the provider still remembers that idempotency key. After that the
row is left for the sweeper, which asks the provider what happened instead of charging blind.

Every write here can be *sent twice*: botocore resends a request whose answer it lost (a read
timeout, a 500 after the commit), and the resend meets the row the first send wrote. So every
write recognises its own earlier landing as a win: a claim by the token that already holds the row
(:meth:`ClaimsStore.claim`), a completion with the same charge id, a release found in the row's
``releaseLog``, a fence already in ``fencedTokens``.

Attributes beyond the obvious ones:

* ``attemptStartedBy``: the token that started the current attempt; the only execution that can
  prove that nothing was charged under it. A takeover blanks it (the dead holder may have charged),
  and it is never restored for that attempt.
* ``declinedAttempts``: every producer ``paymentAttempt`` the provider declined; a redelivery of any
  of them is a duplicate, never a charge.
* ``fencedTokens``: executions whose failed Claim step was fenced off by Release Claim; their claim
  writes, even ones still in flight, can never land.
* ``order``: the order's canonical message, written by every claim write and the tombstone, so a
  closed row holds what it takes to send the order again (see ``payment_saga.outcomes``).
* ``version``: how many writes the row has taken. Every write here adds one to it in the same
  conditional write (``ADD #version :one``; the tombstone is put at 1), so it grows strictly with
  every change of the row: the outcome events carry it as ``sequence``, which lets a consumer find
  an order's latest outcome whatever order the events arrive in.
* ``expiresAt`` (TTL): set only once the claim is ``COMPLETED`` or ``RELEASED``. An open claim never
  expires: deleting it would let a duplicate claim the order afresh under a forgotten key.
"""

from __future__ import annotations

import enum
import heapq
import re
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from payment_saga.clock import Clock, iso_utc, system_clock
from payment_saga.errors import ClaimLost, OrderConflict

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient

    from payment_saga.orders import Order

#: The claim must outlast the longest path from claim to complete, retries included. The state
#: machine's TimeoutSeconds (600 s) plus the longest Lambda Task timeout is below this, so no
#: execution can still act on a claim after its lease ran out (see template.yaml).
DEFAULT_LEASE_SECONDS = 900
SECONDS_PER_DAY = 24 * 3600
#: How long a closed claim is kept (TTL): the template's ClaimRetentionDays default, which must outlast
#: the dead-letter queue plus a redrive's new window in the orders queue (tests/static checks both are
#: the same figure). Deployed functions and ``saga reconcile --stack`` take the stack's own value.
DEFAULT_RETENTION_SECONDS = 30 * SECONDS_PER_DAY
#: Stripe replays an idempotency key for 24 hours; a takeover after that could charge twice, so
#: it is refused (with an hour of margin) and the sweeper resolves the claim instead.
DEFAULT_REPLAY_HORIZON_SECONDS = 23 * 3600
#: Prefix of the sparse ``openClaim`` attribute: set while CLAIMED, removed on complete/release, so
#: the sweeper's index holds only open claims. Discovery only: see ``open_claims``.
OPEN = "OPEN"
OPEN_CLAIMS_INDEX = "OpenClaimsByLease"
#: The index's partition key is spread over this many values (``OPEN#0`` .. ``OPEN#15``, by a hash of
#: the orderId): one partition takes about 1,000 writes/s and every order writes the index twice
#: (claim, close), so a single ``OPEN`` value would throttle the base table near 500 orders/s.
OPEN_SHARDS = 16
#: A claim is at most this many conditional writes: the first claim, then one per lost race
#: (a takeover or a re-claim after a release). Four writes lost in a row mean something is
#: hammering the key; the step fails and is retried by the state machine.
MAX_CLAIM_WRITES = 4
#: ``attemptStartedBy`` after a takeover: nobody can prove that nothing was charged under the attempt.
NO_OWNER = ""


def open_shard(order_id: str) -> str:
    """The ``openClaim`` value of an order's open claim: ``OPEN#<crc32(orderId) mod OPEN_SHARDS>``.

    CRC-32, not ``hash()``: the shard must be the same in every process (Python salts ``hash``).
    """
    return f"{OPEN}#{zlib.crc32(order_id.encode()) % OPEN_SHARDS}"


#: Every value the sweeper reads: the shards, and the unsharded ``OPEN`` of rows written before them.
OPEN_SHARD_VALUES = (*(f"{OPEN}#{shard}" for shard in range(OPEN_SHARDS)), OPEN)


class ClaimStatus(enum.StrEnum):
    CLAIMED = "CLAIMED"
    COMPLETED = "COMPLETED"
    RELEASED = "RELEASED"


class ReleaseReason(enum.StrEnum):
    """Why a claim was released: both prove that nothing was charged (invariant 6)."""

    DECLINED = "DECLINED"  # the provider refused the payment for good
    NOT_CHARGED = "NOT_CHARGED"  # the saga failed before the provider was called


class ClaimResult(enum.StrEnum):
    """How a claim call ended; the state machine branches on ``WON`` versus ``DUPLICATE``."""

    NEW = "NEW"  # first claim of this order
    REENTRANT = "REENTRANT"  # this execution already held it (a retried step, or a resent write)
    TAKEOVER = "TAKEOVER"  # the holder's lease had run out; same attempt number
    NEW_ATTEMPT = "NEW_ATTEMPT"  # after a release: a fresh attempt number
    DUPLICATE = "DUPLICATE"  # someone else holds it, it is done, or this payment attempt was declined
    #: Another *payment attempt* of the order holds an open claim: this one must wait for it to end
    #: (its charge request would not be the one the attempt's idempotency key stands for).
    BUSY = "BUSY"

    @property
    def won(self) -> bool:
        return self not in (ClaimResult.DUPLICATE, ClaimResult.BUSY)


def _string_set(item: dict[str, Any], name: str) -> frozenset[str]:
    return frozenset(item.get(name, {}).get("SS", ()))


@dataclass(frozen=True)
class Claim:
    """A claim row as DynamoDB holds it."""

    order_id: str
    status: ClaimStatus
    claim_token: str
    attempt: int
    fingerprint: str
    payment_attempt: str
    lease_expires_at: int
    attempt_started_at: int
    #: The token that started this attempt, or ``NO_OWNER`` once it was taken over: a takeover
    #: continues someone else's attempt, and nobody can then prove that nothing was charged under it.
    attempt_started_by: str = NO_OWNER
    charge_id: str | None = None
    release_reason: ReleaseReason | None = None
    declined_attempts: frozenset[str] = frozenset()
    fenced_tokens: frozenset[str] = frozenset()
    release_log: frozenset[str] = frozenset()
    #: Writes the row has taken (0 for a row written before rows counted them).
    version: int = 0
    #: The Stripe Customer the claiming execution's order names (``providerCustomerId`` in the row's
    #: ``order``), None when it names none or the row holds no order message. Every charge request
    #: that execution sends carries it as ``customer``; a takeover's order may name another.
    provider_customer_id: str | None = None

    def lease_expired(self, now: float) -> bool:
        """Whether the lease ran out: strictly after its last second (``leaseExpiresAt < now``)."""
        return self.lease_expires_at < now

    def declined(self, payment_attempt: str) -> bool:
        """Whether the provider already declined this producer payment attempt of the order."""
        return payment_attempt in self.declined_attempts or (
            self.release_reason is ReleaseReason.DECLINED and self.payment_attempt == payment_attempt
        )

    def held_by(self, token: str) -> bool:
        return self.status is ClaimStatus.CLAIMED and self.claim_token == token

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Claim:
        reason = item.get("releaseReason", {}).get("S")
        return cls(
            order_id=item["orderId"]["S"],
            status=ClaimStatus(item["status"]["S"]),
            claim_token=item["claimToken"]["S"],
            attempt=int(item["attempt"]["N"]),
            fingerprint=item["fingerprint"]["S"],
            payment_attempt=item["paymentAttempt"]["S"],
            lease_expires_at=int(item["leaseExpiresAt"]["N"]),
            attempt_started_at=int(item["attemptStartedAt"]["N"]),
            attempt_started_by=item.get("attemptStartedBy", {}).get("S", NO_OWNER),
            charge_id=item.get("chargeId", {}).get("S"),
            release_reason=ReleaseReason(reason) if reason else None,
            declined_attempts=_string_set(item, "declinedAttempts"),
            fenced_tokens=_string_set(item, "fencedTokens"),
            release_log=_string_set(item, "releaseLog"),
            version=int(item.get("version", {}).get("N", 0)),
            provider_customer_id=item.get("order", {}).get("M", {}).get("providerCustomerId", {}).get("S"),
        )


@dataclass(frozen=True)
class ClaimOutcome:
    """What ``claim`` did. For a ``DUPLICATE``, ``claim`` is the holder's row, read from the lost write."""

    result: ClaimResult
    claim: Claim


@dataclass(frozen=True)
class _ClaimWrite:
    """One form of the claim write, and what winning it means."""

    result: ClaimResult  # NEW stands for "NEW or REENTRANT": told apart by the row it replaced
    request: dict[str, Any]


class FenceResult(enum.StrEnum):
    """What :meth:`ClaimsStore.fence_failed_claim` found and wrote."""

    TOMBSTONE = "TOMBSTONE"  # there was no row: a RELEASED / NOT_CHARGED tombstone now stands there
    FENCED = "FENCED"  # the token joined an existing row's fencedTokens; its status did not change
    HELD = "HELD"  # refused: this token holds the row CLAIMED (the failed step's write landed)


@dataclass(frozen=True)
class Fence:
    """The fence of a failed Claim step: what it did, and the row it met (None for a tombstone).

    For ``FENCED`` the row is as the fence found it (before the token was added); for ``HELD`` it is
    the row this execution holds.
    """

    result: FenceResult
    claim: Claim | None

    def must_send_again(self, order: Order, *, token: str) -> bool:
        """Whether the state machine must send ``order`` back to the orders queue itself.

        Only a ``FENCED`` row can need it: its status did not change, so no closing transition reaches
        the outcome relay, which re-queues only what a closing transition released. A tombstone *is*
        a closing transition (the relay re-queues it; sending it here too would send it twice), and a
        held claim is released or kept by the caller. Of the rows met:

        * ``RELEASED`` and this payment attempt was never declined: proven uncharged and nobody is
          going to try it. This is how a re-queued order whose Claim step failed is not lost.
        * ``CLAIMED`` by another execution for *another* payment attempt: as for ``ClaimResult.BUSY``,
          this payment attempt must wait for that one to end (if it is declined, nobody else carries
          this one).
        * Not when the row's last write was this token's own (its release or tombstone, met again by a
          retried Release Claim): that closing transition is the relay's to re-queue.
        * Not ``COMPLETED`` (the order is charged), not ``CLAIMED`` by another execution for this same
          payment attempt (that execution carries it to an end, or the sweeper does), not when this
          payment attempt was declined (a decline is an end).
        """
        row = self.claim
        if self.result is not FenceResult.FENCED or row is None or row.claim_token == token:
            return False
        if row.status is ClaimStatus.RELEASED:
            return not row.declined(order.payment_attempt)
        if row.status is ClaimStatus.CLAIMED:
            return row.payment_attempt != order.payment_attempt and not row.declined(order.payment_attempt)
        return False


def release_log_entry(token: str, reason: ReleaseReason) -> str:
    """The mark a release leaves in ``releaseLog``: how a resent release recognises its own landing."""
    return f"{token}|{reason.value}"


class ClaimsStore:
    """Conditional claim / complete / release on the claims table.

    Args:
        table_name: the claims table (base-table key ``orderId``).
        client: a boto3 DynamoDB *client* (injected: tests hand in one made under moto).
        clock: seconds since the epoch; leases and TTLs are computed from it.
        lease_seconds: how long a claim protects its holder (see ``DEFAULT_LEASE_SECONDS``).
        retention_seconds: TTL after which DynamoDB may delete a closed (completed or released) row.
        replay_horizon_seconds: the oldest attempt a takeover may continue.
    """

    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient,
        clock: Clock = system_clock,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        retention_seconds: int = DEFAULT_RETENTION_SECONDS,
        replay_horizon_seconds: int = DEFAULT_REPLAY_HORIZON_SECONDS,
    ) -> None:
        self.table_name = table_name
        self._client = client
        self._clock = clock
        self.lease_seconds = lease_seconds
        self.retention_seconds = retention_seconds
        self.replay_horizon_seconds = replay_horizon_seconds

    def now(self) -> int:
        """The store's clock, in whole seconds (leases are whole seconds)."""
        return int(self._clock())

    # -- the gate ---------------------------------------------------------------------------

    def claim(self, order: Order, *, token: str) -> ClaimOutcome:
        """Claim ``order`` for the execution ``token``: the single conditional write that admits a charge.

        Returns a won outcome (``NEW``, ``REENTRANT``, ``TAKEOVER``, ``NEW_ATTEMPT``) with the row as
        written, or ``DUPLICATE`` with the holder's row as the lost write returned it.

        Each pass is one conditional write whose answer is read; a lost write tells from the row it
        lost to what to try next (a takeover of an expired lease, a new attempt after a release) or
        that the order is someone else's. A lost write that finds the row ``CLAIMED`` under this
        very token is a win: the same write, sent again after its answer was lost, landed first.

        Raises:
            OrderConflict: the ``orderId`` is claimed for another amount, currency or customer.
            ClaimLost: this execution was fenced off the order (its Claim step failed earlier and
                Release Claim made sure no claim of it can land), or ``MAX_CLAIM_WRITES`` writes lost
                in a row.
        """
        now = self.now()
        write: _ClaimWrite | ClaimOutcome = self._first_claim(order, token, now)
        for _ in range(MAX_CLAIM_WRITES):
            assert isinstance(write, _ClaimWrite)
            won, old = self._update(order.order_id, write.request)
            if won:
                return self._won(write.result, order, token, now, old)
            write = self._after_lost_write(order, token, now, write.result, old)
            if isinstance(write, ClaimOutcome):
                return write
        raise ClaimLost(f"order {order.order_id}: the claim lost {MAX_CLAIM_WRITES} writes in a row")

    def _after_lost_write(
        self, order: Order, token: str, now: int, tried: ClaimResult, old: dict[str, Any] | None
    ) -> _ClaimWrite | ClaimOutcome:
        """What a lost claim write's returned row says: a final outcome, or the next write to try."""
        if old is None:  # the row vanished between two writes: claim it afresh
            return self._first_claim(order, token, now)
        holder = Claim.from_item(old)
        if holder.fingerprint != order.fingerprint:
            raise OrderConflict(
                f"order {order.order_id} is already claimed with another amount, currency or customer"
            )
        if token in holder.fenced_tokens:
            raise ClaimLost(f"order {order.order_id}: this execution's claim was fenced off after it failed")
        if holder.held_by(token):
            # Our own write, sent again after its answer was lost, found what its first send wrote.
            result = tried if tried is not ClaimResult.NEW else ClaimResult.REENTRANT
            return ClaimOutcome(result, holder)
        if holder.declined(order.payment_attempt):
            # This payment attempt was declined: a redelivery of it never reaches the provider again,
            # whatever state the order is in now (released, or another attempt's expired lease).
            return ClaimOutcome(ClaimResult.DUPLICATE, holder)
        if holder.status is ClaimStatus.CLAIMED and holder.payment_attempt != order.payment_attempt:
            # Another payment attempt is open. Continuing it would send this attempt's request under
            # the other's idempotency key (a decline would be pinned on the wrong payment attempt);
            # starting a new attempt needs proof the open one charged nothing. So this one waits.
            return ClaimOutcome(ClaimResult.BUSY, holder)
        if holder.status is ClaimStatus.CLAIMED and self._may_take_over(holder, now):
            return self._takeover(order, token, now, holder)
        if holder.status is ClaimStatus.RELEASED:
            return self._claim_after_release(order, token, now, holder.attempt)
        # Held by a live execution, done, or this very payment attempt was declined: a redelivery
        # must not charge a card the customer was told was refused.
        return ClaimOutcome(ClaimResult.DUPLICATE, holder)

    def _may_take_over(self, holder: Claim, now: int) -> bool:
        return holder.lease_expired(now) and holder.attempt_started_at > now - self.replay_horizon_seconds

    # The three forms of the claim write. Each is conditional on exactly the state it may replace,
    # and none can land for a fenced token.
    #
    #   first claim:    no row                          -> CLAIMED, attempt 1, started by us
    #                   CLAIMED by us (a retried step)  -> lease renewed, nothing else changes
    #   takeover:       CLAIMED by the seen holder, its lease run out, same order
    #                                                   -> CLAIMED by us, same attempt, no owner
    #   after release:  RELEASED at the seen attempt, same order, this payment attempt not declined
    #                                                   -> CLAIMED by us, attempt + 1, started by us

    def _first_claim(self, order: Order, token: str, now: int) -> _ClaimWrite:
        no_claim_yet = "attribute_not_exists(orderId)"
        ours_already = "(#status = :claimed AND claimToken = :token AND fingerprint = :fp)"
        return _ClaimWrite(
            ClaimResult.NEW,
            {
                "UpdateExpression": (
                    "SET #status = :claimed, claimToken = :token, leaseExpiresAt = :lease,"
                    " fingerprint = :fp, amount = :amount, currency = :currency, customerId = :customer,"
                    " paymentAttempt = :pa, attempt = if_not_exists(attempt, :one),"
                    " attemptStartedAt = if_not_exists(attemptStartedAt, :now),"
                    " attemptStartedBy = if_not_exists(attemptStartedBy, :token),"
                    " claimedAt = :now_iso, openClaim = :open, #order = :order"
                    " REMOVE expiresAt"
                ),
                "ConditionExpression": f"({no_claim_yet} OR {ours_already}) AND {_NOT_FENCED}",
                "ExpressionAttributeValues": {**self._claim_values(order, token, now), ":one": {"N": "1"}},
            },
        )

    def _takeover(self, order: Order, token: str, now: int, holder: Claim) -> _ClaimWrite:
        """The holder's lease ran out: continue its attempt (the provider dedupes its charge)."""
        still_the_seen_holder = (
            "#status = :claimed AND claimToken = :holder AND attempt = :attempt"
            " AND leaseExpiresAt = :seen_lease"
        )
        lease_run_out = "leaseExpiresAt < :now"
        key_still_replayed = "attemptStartedAt > :horizon"
        same_order = "fingerprint = :fp"
        same_payment_attempt = "paymentAttempt = :pa"  # the request the attempt's key stands for
        not_declined = "NOT contains(declinedAttempts, :pa)"
        return _ClaimWrite(
            ClaimResult.TAKEOVER,
            {
                "UpdateExpression": (
                    "SET claimToken = :token, leaseExpiresAt = :lease, paymentAttempt = :pa,"
                    " attemptStartedBy = :no_owner, claimedAt = :now_iso, openClaim = :open, #order = :order"
                    " REMOVE expiresAt"
                ),
                "ConditionExpression": (
                    f"{still_the_seen_holder} AND {lease_run_out} AND {key_still_replayed}"
                    f" AND {same_order} AND {same_payment_attempt} AND {not_declined} AND {_NOT_FENCED}"
                ),
                "ExpressionAttributeValues": {
                    **{
                        name: value
                        for name, value in self._claim_values(order, token, now).items()
                        if name in _TAKEOVER_VALUES
                    },
                    ":holder": {"S": holder.claim_token},
                    ":attempt": {"N": str(holder.attempt)},
                    ":seen_lease": {"N": str(holder.lease_expires_at)},
                    ":horizon": {"N": str(now - self.replay_horizon_seconds)},
                    ":no_owner": {"S": NO_OWNER},
                },
            },
        )

    def _claim_after_release(self, order: Order, token: str, now: int, seen_attempt: int) -> _ClaimWrite:
        """A release proved nothing was charged, so the next claim starts a new attempt."""
        released_at_seen_attempt = "#status = :released AND attempt = :seen"  # racing re-claims: one wins
        same_order = "fingerprint = :fp"
        not_declined = (
            "NOT contains(declinedAttempts, :pa) AND (releaseReason <> :declined OR paymentAttempt <> :pa)"
        )
        return _ClaimWrite(
            ClaimResult.NEW_ATTEMPT,
            {
                "UpdateExpression": (
                    "SET #status = :claimed, claimToken = :token, leaseExpiresAt = :lease,"
                    " fingerprint = :fp, amount = :amount, currency = :currency, customerId = :customer,"
                    " paymentAttempt = :pa, attempt = :next, attemptStartedAt = :now,"
                    " attemptStartedBy = :token,"
                    " claimedAt = :now_iso, openClaim = :open, #order = :order"
                    " REMOVE releaseReason, releasedAt, expiresAt"
                ),
                "ConditionExpression": (
                    f"{released_at_seen_attempt} AND {same_order} AND {not_declined} AND {_NOT_FENCED}"
                ),
                "ExpressionAttributeValues": {
                    **self._claim_values(order, token, now),
                    ":released": {"S": ClaimStatus.RELEASED.value},
                    ":declined": {"S": ReleaseReason.DECLINED.value},
                    ":seen": {"N": str(seen_attempt)},
                    ":next": {"N": str(seen_attempt + 1)},
                },
            },
        )

    def _claim_values(self, order: Order, token: str, now: int) -> dict[str, Any]:
        return {
            ":claimed": {"S": ClaimStatus.CLAIMED.value},
            ":token": {"S": token},
            ":lease": {"N": str(now + self.lease_seconds)},
            ":fp": {"S": order.fingerprint},
            ":amount": {"N": str(order.amount)},
            ":currency": {"S": order.currency},
            ":customer": {"S": order.customer_id},
            ":pa": {"S": order.payment_attempt},
            ":now": {"N": str(now)},
            ":now_iso": {"S": iso_utc(now)},
            ":open": {"S": open_shard(order.order_id)},
            ":order": order_attribute(order),
        }

    def _won(
        self, result: ClaimResult, order: Order, token: str, now: int, old: dict[str, Any] | None
    ) -> ClaimOutcome:
        """The claim as the won write left it, told from the row it replaced (``ReturnValues=ALL_OLD``)."""
        previous = Claim.from_item(old) if old else None
        if result is ClaimResult.NEW_ATTEMPT:
            assert previous is not None
            attempt, started, starter = previous.attempt + 1, now, token
        elif result is ClaimResult.TAKEOVER:
            assert previous is not None
            attempt, started, starter = previous.attempt, previous.attempt_started_at, NO_OWNER
        elif previous is None:
            attempt, started, starter = 1, now, token
        else:
            result = ClaimResult.REENTRANT
            attempt, started = previous.attempt, previous.attempt_started_at
            starter = previous.attempt_started_by
        claim = Claim(
            order_id=order.order_id,
            status=ClaimStatus.CLAIMED,
            claim_token=token,
            attempt=attempt,
            fingerprint=order.fingerprint,
            payment_attempt=order.payment_attempt,
            lease_expires_at=now + self.lease_seconds,
            attempt_started_at=started,
            attempt_started_by=starter,
            declined_attempts=previous.declined_attempts if previous else frozenset(),
            fenced_tokens=previous.fenced_tokens if previous else frozenset(),
            release_log=previous.release_log if previous else frozenset(),
            provider_customer_id=order.provider_customer_id,
        )
        return ClaimOutcome(result, claim)

    # -- the charge's re-check ----------------------------------------------------------------

    def check_held(self, order_id: str, *, token: str, attempt: int, margin_seconds: int) -> Claim:
        """Refuse to act for an attempt ``token`` no longer holds, or whose lease is about to run out.

        A ``ConsistentRead`` of the base table, on the store's clock. The claim is the gate and it was
        won earlier in the execution; this re-check stops an execution that outlived its lease (a
        redrive days later, a zombie) from charging an attempt that was since taken over, completed,
        or released by the sweeper and retried under a new attempt. ``margin_seconds`` must exceed
        the caller's own timeout, so the sweeper cannot decide about the attempt while it acts.

        Raises:
            ClaimLost: not held by ``token`` at ``attempt`` with at least ``margin_seconds`` to run.
        """
        claim = self.get(order_id)
        if (
            claim is None
            or not claim.held_by(token)
            or claim.attempt != attempt
            or claim.lease_expires_at < self.now() + margin_seconds
        ):
            state = "absent" if claim is None else f"{claim.status.value}, attempt {claim.attempt}"
            raise ClaimLost(
                f"order {order_id}: attempt {attempt} is no longer held by this execution ({state})"
            )
        return claim

    # -- fenced transitions -----------------------------------------------------------------

    def complete(
        self, order_id: str, *, token: str, charge_id: str, webhook_event: str | None = None
    ) -> Claim:
        """Mark the claim ``COMPLETED`` with the provider's charge id, if ``token`` still holds it.

        ``webhook_event``: the Stripe event whose proof this write is (the webhook consumer's), kept
        as ``webhookEventId`` so that the outcome event says a webhook resolved the order.

        Re-entrant: completing again with the same token and charge id succeeds (a Mark Complete
        that died after its write and was retried). Never checks the lease: the money moved.

        A claim already ``COMPLETED`` with this very charge id by another execution is this one's end
        too, and is returned as it is (nothing written): the execution outlived its lease and the
        attempt was taken over, but a takeover keeps the attempt and so the idempotency key, so the
        provider replayed this execution's PaymentIntent to the taker, who completed the claim with it
        (or the sweeper found that same charge). One charge, one completion, and nothing to reconcile.

        Raises:
            ClaimLost: another execution holds the claim, or it is no longer this one's to complete
                (released, or completed with another charge: then the order has two charges).
        """
        now = self.now()
        won, item = self._update(
            order_id,
            {
                "UpdateExpression": (
                    "SET #status = :completed, chargeId = :charge, completedAt = :now_iso, expiresAt = :ttl"
                    + _webhook_mark(webhook_event)
                    + " REMOVE openClaim"
                ),
                "ConditionExpression": "claimToken = :token AND (#status = :claimed"
                " OR (#status = :completed AND chargeId = :charge))",
                "ExpressionAttributeValues": {
                    ":completed": {"S": ClaimStatus.COMPLETED.value},
                    ":claimed": {"S": ClaimStatus.CLAIMED.value},
                    ":charge": {"S": charge_id},
                    ":token": {"S": token},
                    ":now_iso": {"S": iso_utc(now)},
                    ":ttl": {"N": str(now + self.retention_seconds)},
                    **_webhook_value(webhook_event),
                },
            },
            return_new=True,
        )
        if not won and item and _completed_with(item, charge_id):
            return Claim.from_item(item)  # completed by the execution that took the attempt over
        return self._fenced_result(order_id, "complete", won, item)

    def release(
        self,
        order_id: str,
        *,
        token: str,
        reason: ReleaseReason,
        payment_attempt: str,
        webhook_event: str | None = None,
    ) -> Claim:
        """Release the claim, if ``token`` still holds it. Only call this with proof nothing was charged.

        ``webhook_event``: as for :meth:`complete`, the Stripe event that is the proof.

        ``payment_attempt`` is the producer's payment attempt the claim was taken for; a ``DECLINED``
        release remembers it in ``declinedAttempts`` so that no redelivery of it reaches the provider.

        Re-entrant for the same token and reason, even when the row has moved on since: a release
        whose answer was lost, then re-claimed by another execution before botocore resent it, finds
        its mark in ``releaseLog`` and returns the row as it is now.

        Raises:
            ClaimLost: another execution holds the claim, or it is completed.
        """
        now = self.now()
        entry = release_log_entry(token, reason)
        declined = reason is ReleaseReason.DECLINED
        won, item = self._update(
            order_id,
            {
                "UpdateExpression": (
                    "SET #status = :released, releaseReason = :reason, releasedAt = :now_iso,"
                    " expiresAt = :ttl" + _webhook_mark(webhook_event) + " REMOVE openClaim"
                    " ADD releaseLog :entry" + (", declinedAttempts :pa_set" if declined else "")
                ),
                "ConditionExpression": "claimToken = :token AND paymentAttempt = :pa AND (#status = :claimed"
                " OR (#status = :released AND releaseReason = :reason))",
                "ExpressionAttributeValues": {
                    ":released": {"S": ClaimStatus.RELEASED.value},
                    ":claimed": {"S": ClaimStatus.CLAIMED.value},
                    ":reason": {"S": reason.value},
                    ":token": {"S": token},
                    ":pa": {"S": payment_attempt},
                    ":now_iso": {"S": iso_utc(now)},
                    ":ttl": {"N": str(now + self.retention_seconds)},
                    ":entry": {"SS": [entry]},
                    **({":pa_set": {"SS": [payment_attempt]}} if declined else {}),
                    **_webhook_value(webhook_event),
                },
            },
            return_new=True,
        )
        if not won and item and entry in _string_set(item, "releaseLog"):
            return Claim.from_item(item)  # our release landed; the order has moved on since
        return self._fenced_result(order_id, "release", won, item)

    @staticmethod
    def _fenced_result(order_id: str, action: str, won: bool, item: dict[str, Any] | None) -> Claim:
        if not item:
            raise ClaimLost(f"cannot {action} order {order_id}: there is no claim")
        claim = Claim.from_item(item)
        if not won:
            raise ClaimLost(
                f"cannot {action} order {order_id}: it is {claim.status.value} under another token"
                if claim.status is ClaimStatus.CLAIMED
                else f"cannot {action} order {order_id}: it is already {claim.status.value}"
            )
        return claim

    def fence_failed_claim(self, order: Order, *, token: str) -> Fence:
        """After a failed Claim step: make sure no claim write of ``token`` can ever land.

        A Claim step that failed may have sent a write that is still in flight (its Lambda was killed
        at its timeout; the network holds the request): a read that finds no claim proves nothing,
        because the write can land after it. This is a *write* instead: ``token`` joins the row's
        ``fencedTokens`` (every claim write is conditional on its token not being there), or, when
        there is no row, a ``RELEASED`` / ``NOT_CHARGED`` tombstone at attempt 0 is put in its place,
        fenced the same way. Either way a late claim write of this execution now fails its condition.

        Returns:
            A :class:`Fence`: ``TOMBSTONE`` (there was no row; the tombstone is a closing transition,
            which the outcome relay re-queues), ``FENCED`` (the token joined an existing row, returned
            as the fence found it: no status changed, so nothing was published or re-queued), or
            ``HELD`` (the fence was refused because ``token`` holds the row ``CLAIMED``: the failed
            step's write did land; the caller decides whether it can prove nothing was charged).
        """
        for _ in range(MAX_CLAIM_WRITES):
            now = self.now()
            won, old = self._update(
                order.order_id,
                {
                    "UpdateExpression": "ADD fencedTokens :tokens",
                    "ConditionExpression": "attribute_exists(orderId) AND NOT"
                    " (#status = :claimed AND claimToken = :token)",
                    "ExpressionAttributeValues": {
                        ":tokens": {"SS": [token]},
                        ":claimed": {"S": ClaimStatus.CLAIMED.value},
                        ":token": {"S": token},
                    },
                },
            )
            if won:
                assert old is not None  # ALL_OLD of a write conditional on the row existing
                return Fence(FenceResult.FENCED, Claim.from_item(old))
            if old is None:
                won, old = self._put_tombstone(order, token, now)
                if won:
                    return Fence(FenceResult.TOMBSTONE, None)
            if old is not None and Claim.from_item(old).held_by(token):
                return Fence(FenceResult.HELD, Claim.from_item(old))
        raise ClaimLost(f"order {order.order_id}: could not fence the failed claim (the row kept changing)")

    def _put_tombstone(self, order: Order, token: str, now: int) -> tuple[bool, dict[str, Any] | None]:
        item: dict[str, Any] = {
            "orderId": {"S": order.order_id},
            "status": {"S": ClaimStatus.RELEASED.value},
            "releaseReason": {"S": ReleaseReason.NOT_CHARGED.value},
            "claimToken": {"S": token},
            "attempt": {"N": "0"},
            "fingerprint": {"S": order.fingerprint},
            "amount": {"N": str(order.amount)},
            "currency": {"S": order.currency},
            "customerId": {"S": order.customer_id},
            "paymentAttempt": {"S": order.payment_attempt},
            "leaseExpiresAt": {"N": str(now)},
            "attemptStartedAt": {"N": str(now)},
            "attemptStartedBy": {"S": NO_OWNER},
            "releasedAt": {"S": iso_utc(now)},
            "fencedTokens": {"SS": [token]},
            "expiresAt": {"N": str(now + self.retention_seconds)},
            "order": order_attribute(order),
            # The row's first write: every later one adds one (see _update).
            "version": {"N": "1"},
        }
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(orderId)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            old: dict[str, Any] | None = exc.response.get("Item")  # type: ignore[assignment]
            if old is not None and token in _string_set(old, "fencedTokens"):
                return True, None  # our own tombstone, put again after its answer was lost
            return False, old
        return True, None

    # -- reads --------------------------------------------------------------------------------

    def get(self, order_id: str) -> Claim | None:
        """The claim as it is now: a strongly consistent read of the base table."""
        response = self._client.get_item(
            TableName=self.table_name, Key={"orderId": {"S": order_id}}, ConsistentRead=True
        )
        item = response.get("Item")
        return Claim.from_item(item) if item else None

    def open_claims(self, *, lease_expired_before: int) -> Iterator[Claim]:
        """Open claims whose lease ran out, for the sweeper.

        This reads a GSI, so it is *discovery only* and may lag: whatever the sweeper then does to
        a claim is a conditional write on the base table that re-checks the state it saw.
        Never call this on a path that decides whether to charge (invariant 3).
        """
        shards = [self._open_in_shard(shard, lease_expired_before) for shard in OPEN_SHARD_VALUES]
        # Each shard comes back in lease order; merged, the sweep still takes the oldest leases first.
        yield from heapq.merge(*shards, key=lambda claim: claim.lease_expires_at)

    def _open_in_shard(self, shard: str, lease_expired_before: int) -> Iterator[Claim]:
        paginator = self._client.get_paginator("query")
        for page in paginator.paginate(
            TableName=self.table_name,
            IndexName=OPEN_CLAIMS_INDEX,
            KeyConditionExpression="openClaim = :open AND leaseExpiresAt < :before",
            ExpressionAttributeValues={":open": {"S": shard}, ":before": {"N": str(lease_expired_before)}},
        ):
            for item in page.get("Items", []):
                yield Claim.from_item(item)

    # -- plumbing -----------------------------------------------------------------------------

    def _update(
        self, order_id: str, request: dict[str, Any], *, return_new: bool = False
    ) -> tuple[bool, dict[str, Any] | None]:
        """One conditional ``UpdateItem``. Returns (won, item): the old row (or the new one with
        ``return_new``) if it won, the row that beat it if it lost.

        Every write counts itself in the row's ``version`` here, in the same write, so that no write
        form can forget to (the outcome events' ``sequence`` rests on it).
        """
        request = _counted(request)
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key={"orderId": {"S": order_id}},
                ExpressionAttributeNames=_attribute_names(request),
                ReturnValues="ALL_NEW" if return_new else "ALL_OLD",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **request,
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            item: dict[str, Any] | None = exc.response.get("Item")  # type: ignore[assignment]
            return False, item
        return True, response.get("Attributes")

    # -- the sweeper ----------------------------------------------------------------------------

    def complete_stale(self, seen: Claim, *, charge_id: str) -> Claim:
        """Complete a claim whose lease ran out with the charge the provider shows for its attempt.

        For the sweeper only: ``seen`` is the claim as discovery saw it (through the lagging index),
        and the write is fenced on all of it -- still ``CLAIMED``, the same token, attempt and lease,
        and that lease run out -- so a claim taken over, completed or renewed since is left alone.
        One conditional ``UpdateItem``; re-entrant (a retried write that already landed returns the
        completed claim).

        Raises:
            ClaimLost: the claim is no longer the one the sweeper saw.
        """
        return self._resolve_stale(
            seen,
            "SET #status = :completed, chargeId = :charge, completedAt = :now_iso, reconciledAt = :now_iso,"
            " expiresAt = :ttl REMOVE openClaim",
            {":completed": {"S": ClaimStatus.COMPLETED.value}, ":charge": {"S": charge_id}},
            landed=(ClaimStatus.COMPLETED, "chargeId", charge_id),
        )

    def release_stale(self, seen: Claim, *, reason: ReleaseReason = ReleaseReason.NOT_CHARGED) -> Claim:
        """Release a claim whose lease ran out, once the provider shows that its attempt charged nothing.

        For the sweeper only, fenced like :meth:`complete_stale`. ``NOT_CHARGED`` when the provider
        shows no charge at all; ``DECLINED`` when it shows the attempt's payment failed, and then the
        claim's payment attempt joins ``declinedAttempts`` (no redelivery of it is charged). Either
        release proves that nothing was charged (invariant 6), so the next claim of the order starts
        a new attempt. Re-entrant like :meth:`complete_stale`.

        Raises:
            ClaimLost: the claim is no longer the one the sweeper saw.
        """
        declined = reason is ReleaseReason.DECLINED
        return self._resolve_stale(
            seen,
            "SET #status = :released, releaseReason = :reason, releasedAt = :now_iso,"
            " reconciledAt = :now_iso,"
            " expiresAt = :ttl REMOVE openClaim" + (" ADD declinedAttempts :pa_set" if declined else ""),
            {
                ":released": {"S": ClaimStatus.RELEASED.value},
                ":reason": {"S": reason.value},
                **({":pa_set": {"SS": [seen.payment_attempt]}} if declined else {}),
            },
            landed=(ClaimStatus.RELEASED, "releaseReason", reason.value),
        )

    def complete_released(
        self, order_id: str, *, attempt: int, charge_id: str, webhook_event: str | None = None
    ) -> Claim:
        """The provider shows a succeeded charge for ``attempt``, whose claim was released meanwhile.

        For the sweeper only, and an alarm for whoever calls it: a release claimed that nothing was
        charged, and the provider says otherwise. The claim is marked ``COMPLETED`` with that charge
        (``lateChargeAttempt`` records which attempt it came from) unless it is completed already, so
        no further attempt charges the order; a later attempt that already charged is a double
        charge that a person must refund. Re-entrant.

        Raises:
            ClaimLost: the claim is absent, or completed with another charge (then the order has two
                charges: the caller alarms all the same).
        """
        now = self.now()
        won, item = self._update(
            order_id,
            {
                "UpdateExpression": (
                    "SET #status = :completed, chargeId = :charge, completedAt = :now_iso,"
                    " reconciledAt = :now_iso, lateChargeAttempt = :attempt, expiresAt = :ttl"
                    + _webhook_mark(webhook_event)
                    + " REMOVE openClaim"
                ),
                "ConditionExpression": "attribute_exists(orderId) AND attempt >= :attempt"
                " AND (#status <> :completed OR chargeId = :charge)",
                "ExpressionAttributeValues": {
                    ":completed": {"S": ClaimStatus.COMPLETED.value},
                    ":charge": {"S": charge_id},
                    ":attempt": {"N": str(attempt)},
                    ":now_iso": {"S": iso_utc(now)},
                    ":ttl": {"N": str(now + self.retention_seconds)},
                    **_webhook_value(webhook_event),
                },
            },
            return_new=True,
        )
        return self._fenced_result(order_id, "complete after a release", won, item)

    def _resolve_stale(
        self,
        seen: Claim,
        update: str,
        values: dict[str, Any],
        *,
        landed: tuple[ClaimStatus, str, str],
    ) -> Claim:
        """One fenced write for the sweeper; ``landed`` (status, attribute, value) tells our own
        earlier write apart from someone else's."""
        now = self.now()
        won, item = self._update(
            seen.order_id,
            {
                "UpdateExpression": update,
                # Everything the sweeper's decision rests on, re-checked in the write itself.
                "ConditionExpression": "#status = :claimed AND claimToken = :token AND attempt = :attempt"
                " AND leaseExpiresAt = :lease AND leaseExpiresAt < :now",
                "ExpressionAttributeValues": {
                    **values,
                    ":claimed": {"S": ClaimStatus.CLAIMED.value},
                    ":token": {"S": seen.claim_token},
                    ":attempt": {"N": str(seen.attempt)},
                    ":lease": {"N": str(seen.lease_expires_at)},
                    ":now": {"N": str(now)},
                    ":now_iso": {"S": iso_utc(now)},
                    ":ttl": {"N": str(now + self.retention_seconds)},
                },
            },
            return_new=True,
        )
        if won and item:
            return Claim.from_item(item)
        if not item:
            raise ClaimLost(f"cannot resolve order {seen.order_id}: there is no claim")
        current = Claim.from_item(item)
        status, attribute, value = landed
        # Our own earlier write (its response lost, the SDK retried): same holder, same attempt, the
        # same outcome, and the sweeper's mark on it.
        if (
            "reconciledAt" in item
            and current.claim_token == seen.claim_token
            and current.attempt == seen.attempt
            and current.status is status
            and item.get(attribute, {}).get("S") == value
        ):
            return current
        raise ClaimLost(
            f"cannot resolve order {seen.order_id}: it is now {current.status.value} under"
            f" {'the same' if current.claim_token == seen.claim_token else 'another'} token,"
            f" attempt {current.attempt}, lease until {current.lease_expires_at}"
        )


def _completed_with(item: dict[str, Any], charge_id: str) -> bool:
    """Whether the row is ``COMPLETED`` with ``charge_id``: the same provider charge, whoever wrote it."""
    status = item.get("status", {}).get("S")
    completed_with = item.get("chargeId", {}).get("S")
    return bool(status == ClaimStatus.COMPLETED.value and completed_with == charge_id)


#: Every claim write carries this: a token fenced off by ``fence_failed_claim`` never claims again.
_NOT_FENCED = "NOT contains(fencedTokens, :token)"


#: The claim values a takeover writes (it keeps the attempt and its start).
_TAKEOVER_VALUES = frozenset(
    (":claimed", ":token", ":lease", ":fp", ":pa", ":now", ":now_iso", ":open", ":order")
)


def order_attribute(order: Order) -> dict[str, Any]:
    """The order's canonical message (``Order.to_message()``) as the row's ``order`` map attribute.

    Written by every claim write and the tombstone, so that a closed row holds what is needed to
    send the order again (the outcome relay re-queues an order proven never charged). No secret:
    the payment method is a provider token.
    """
    return {
        "M": {
            key: {"N": str(value)} if isinstance(value, int) else {"S": str(value)}
            for key, value in order.to_message().items()
        }
    }


def _counted(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` with ``#version`` incremented by one: joined to its ``ADD`` clause, or as one.

    An update expression may name each clause once, so a write that already adds (a release's
    ``releaseLog``, a fence's ``fencedTokens``) gets the counter inside its own ``ADD``.
    """
    update = str(request["UpdateExpression"])
    found = re.search(r"(^|\s)ADD\s", update)
    if found:
        update = f"{update[: found.end()]}#version :one, {update[found.end() :]}"
    else:
        update = f"{update} ADD #version :one"
    values = {**request.get("ExpressionAttributeValues", {}), ":one": {"N": "1"}}
    return {**request, "UpdateExpression": update, "ExpressionAttributeValues": values}


def _attribute_names(request: dict[str, Any]) -> dict[str, str]:
    """``#status`` and ``#version`` always; ``#order`` (``order`` is a DynamoDB reserved word) when the
    update sets it."""
    names = {"#status": "status", "#version": "version"}
    if "#order" in request.get("UpdateExpression", ""):
        names["#order"] = "order"
    return names


def _webhook_mark(event_id: str | None) -> str:
    """The SET clause that records the Stripe event a webhook's write acts on (nothing otherwise)."""
    return ", webhookEventId = :webhook_event" if event_id else ""


def _webhook_value(event_id: str | None) -> dict[str, Any]:
    return {":webhook_event": {"S": event_id}} if event_id else {}
