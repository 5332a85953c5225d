"""A claim row as DynamoDB holds it: its figures, its statuses, and what a claim or a fence returns.

The lifecycle these words describe is in ``payment_saga.claims`` (the package's docstring).
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
#: How long a payment that settles later (a SEPA or ACH debit) may stay ``processing`` before the sweeper
#: asks the provider and alarms if it still has not settled: the template's SettlementWindowDays
#: default. Stripe documents up to 14 business days for a SEPA Direct Debit to succeed or fail (ACH:
#: 4); 14 business days are at most 20 calendar days, and one more leaves a day for a bank holiday.
DEFAULT_SETTLEMENT_WINDOW_DAYS = 21


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


def _optional_number(item: dict[str, Any], name: str) -> int | None:
    value = item.get(name, {}).get("N")
    return int(value) if value is not None else None


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
    #: The PaymentIntent the provider settles later (``settlementIntentId``), once the claim awaits
    #: settlement; None otherwise. Its lease then runs to ``settle_by``.
    settlement_intent_id: str | None = None
    #: When the claim started to await settlement (``awaitingSettlementSince``): every charge request
    #: of the attempt was sent before it.
    awaiting_settlement_since: int | None = None
    #: Until when the provider may take to settle (``settleBy``), after which the sweeper asks.
    settle_by: int | None = None
    #: The PaymentIntent whose failure a webhook's ``DECLINED`` release is the proof of
    #: (``declinedIntentId``); None for any other release, or a row written before releases named it.
    declined_intent_id: str | None = None

    @property
    def awaiting_settlement(self) -> bool:
        """Whether the claim is held open for a payment the provider settles later."""
        return self.status is ClaimStatus.CLAIMED and self.settlement_intent_id is not None

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
            settlement_intent_id=item.get("settlementIntentId", {}).get("S"),
            awaiting_settlement_since=_optional_number(item, "awaitingSettlementSince"),
            settle_by=_optional_number(item, "settleBy"),
            declined_intent_id=item.get("declinedIntentId", {}).get("S"),
        )


@dataclass(frozen=True)
class ClaimOutcome:
    """What ``claim`` did. For a ``DUPLICATE``, ``claim`` is the holder's row, read from the lost write."""

    result: ClaimResult
    claim: Claim


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
