"""The claim: one conditional write on ``orderId`` is the gate before the charge.

Every method that changes a claim is a single conditional ``UpdateItem`` on the base table
(invariant 3). When a write loses, the item that beat it comes back in the same response
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
"""

from __future__ import annotations

import enum
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
#: machine's TimeoutSeconds (600 s) plus the longest Lambda timeout (30 s) is below this, so no
#: execution can still act on a claim after its lease ran out (see template.yaml).
DEFAULT_LEASE_SECONDS = 900
#: Longer than any redelivery window: SQS keeps a message 14 days at most.
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600
#: Stripe replays an idempotency key for 24 hours; a takeover after that could charge twice, so
#: it is refused (with an hour of margin) and the sweeper resolves the claim instead.
DEFAULT_REPLAY_HORIZON_SECONDS = 23 * 3600
#: Value of the sparse ``openClaim`` attribute: set while CLAIMED, removed on complete/release, so
#: the sweeper's index holds only open claims. Discovery only: see ``open_claims``.
OPEN = "OPEN"
OPEN_CLAIMS_INDEX = "OpenClaimsByLease"
#: A loop of lost races on one order is bounded: each pass is a conditional write that lost to
#: another writer, and three in a row mean something is hammering the key.
MAX_CLAIM_PASSES = 3


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
    REENTRANT = "REENTRANT"  # this execution already held it (a retried step)
    TAKEOVER = "TAKEOVER"  # the holder's lease had run out; same attempt number
    NEW_ATTEMPT = "NEW_ATTEMPT"  # after a release: a fresh attempt number
    DUPLICATE = "DUPLICATE"  # someone else holds it, or it is done

    @property
    def won(self) -> bool:
        return self is not ClaimResult.DUPLICATE


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
    #: The token that started this attempt. A takeover continues someone else's attempt: then
    #: this is not the holder, and the holder cannot prove that nothing was charged under it.
    attempt_started_by: str = ""
    charge_id: str | None = None
    release_reason: ReleaseReason | None = None

    def lease_expired(self, now: float) -> bool:
        return self.lease_expires_at < now

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
            attempt_started_by=item.get("attemptStartedBy", item["claimToken"])["S"],
            charge_id=item.get("chargeId", {}).get("S"),
            release_reason=ReleaseReason(reason) if reason else None,
        )


@dataclass(frozen=True)
class ClaimOutcome:
    """What ``claim`` did. For a ``DUPLICATE``, ``claim`` is the holder's row, read from the lost write."""

    result: ClaimResult
    claim: Claim


class ClaimsStore:
    """Conditional claim / complete / release on the claims table.

    Args:
        table_name: the claims table (base-table key ``orderId``).
        client: a boto3 DynamoDB *client* (injected: tests hand in one made under moto).
        clock: seconds since the epoch; leases and TTLs are computed from it.
        lease_seconds: how long a claim protects its holder (see ``DEFAULT_LEASE_SECONDS``).
        retention_seconds: TTL after which DynamoDB may delete the row.
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

    # -- the gate ---------------------------------------------------------------------------

    def claim(self, order: Order, *, token: str) -> ClaimOutcome:
        """Claim ``order`` for the execution ``token``: the single conditional write that admits a charge.

        Returns a won outcome (``NEW``, ``REENTRANT``, ``TAKEOVER``, ``NEW_ATTEMPT``) with the row as
        written, or ``DUPLICATE`` with the holder's row as the lost write returned it.

        Raises:
            OrderConflict: the ``orderId`` is claimed for another amount, currency or customer.
            ClaimLost: the write lost to other writers ``MAX_CLAIM_PASSES`` times in a row.
        """
        now = int(self._clock())
        won, old = self._update(order.order_id, self._first_claim(order, token, now))
        for _ in range(MAX_CLAIM_PASSES):
            if won:
                return self._won(order, token, now, old)
            assert old is not None  # a lost conditional write always returns the holder's item
            holder = Claim.from_item(old)
            if holder.fingerprint != order.fingerprint:
                raise OrderConflict(
                    f"order {order.order_id} is already claimed with another amount, currency or customer"
                )
            if holder.status is not ClaimStatus.RELEASED or (
                holder.release_reason is ReleaseReason.DECLINED
                and holder.payment_attempt == order.payment_attempt
            ):
                # Held by a live execution, done, or this very payment attempt was already declined:
                # a redelivery must not charge a card the customer was told was refused.
                return ClaimOutcome(ClaimResult.DUPLICATE, holder)
            won, old = self._update(
                order.order_id, self._claim_after_release(order, token, now, holder.attempt)
            )
        raise ClaimLost(f"order {order.order_id}: the claim lost {MAX_CLAIM_PASSES} races in a row")

    def _first_claim(self, order: Order, token: str, now: int) -> dict[str, Any]:
        """New claim, re-entrant claim, or takeover of an expired lease (attempt kept)."""
        return {
            "UpdateExpression": (
                "SET #status = :claimed, claimToken = :token, leaseExpiresAt = :lease,"
                " fingerprint = :fp, amount = :amount, currency = :currency, customerId = :customer,"
                " paymentAttempt = :pa, attempt = if_not_exists(attempt, :one),"
                " attemptStartedAt = if_not_exists(attemptStartedAt, :now),"
                " attemptStartedBy = if_not_exists(attemptStartedBy, :token),"
                " claimedAt = :now_iso, openClaim = :open, expiresAt = :ttl"
            ),
            "ConditionExpression": (
                "attribute_not_exists(orderId) OR (#status = :claimed AND fingerprint = :fp"
                " AND (claimToken = :token OR (leaseExpiresAt < :now AND attemptStartedAt > :horizon)))"
            ),
            "ExpressionAttributeValues": {
                **self._claim_values(order, token, now),
                ":one": {"N": "1"},
                ":horizon": {"N": str(now - self.replay_horizon_seconds)},
            },
        }

    def _claim_after_release(self, order: Order, token: str, now: int, seen_attempt: int) -> dict[str, Any]:
        """A release proved nothing was charged, so the next claim starts a new attempt."""
        return {
            "UpdateExpression": (
                "SET #status = :claimed, claimToken = :token, leaseExpiresAt = :lease,"
                " fingerprint = :fp, amount = :amount, currency = :currency, customerId = :customer,"
                " paymentAttempt = :pa, attempt = :next, attemptStartedAt = :now, attemptStartedBy = :token,"
                " claimedAt = :now_iso, openClaim = :open, expiresAt = :ttl"
                " REMOVE releaseReason, releasedAt"
            ),
            # ``attempt = :seen`` makes two racing re-claims after one release agree on one winner.
            "ConditionExpression": (
                "#status = :released AND fingerprint = :fp AND attempt = :seen"
                " AND (releaseReason <> :declined OR paymentAttempt <> :pa)"
            ),
            "ExpressionAttributeValues": {
                **self._claim_values(order, token, now),
                ":released": {"S": ClaimStatus.RELEASED.value},
                ":declined": {"S": ReleaseReason.DECLINED.value},
                ":seen": {"N": str(seen_attempt)},
                ":next": {"N": str(seen_attempt + 1)},
            },
        }

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
            ":open": {"S": OPEN},
            ":ttl": {"N": str(now + self.retention_seconds)},
        }

    def _won(self, order: Order, token: str, now: int, old: dict[str, Any] | None) -> ClaimOutcome:
        """Tell how a won claim won from the row it replaced (``ReturnValues=ALL_OLD``)."""
        previous = Claim.from_item(old) if old else None
        if previous is None:
            result, attempt, started, starter = ClaimResult.NEW, 1, now, token
        elif previous.status is ClaimStatus.RELEASED:
            result, attempt, started, starter = ClaimResult.NEW_ATTEMPT, previous.attempt + 1, now, token
        else:
            result = ClaimResult.REENTRANT if previous.claim_token == token else ClaimResult.TAKEOVER
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
        )
        return ClaimOutcome(result, claim)

    # -- fenced transitions -----------------------------------------------------------------

    def complete(self, order_id: str, *, token: str, charge_id: str) -> Claim:
        """Mark the claim ``COMPLETED`` with the provider's charge id, if ``token`` still holds it.

        Re-entrant: completing again with the same token and charge id succeeds (a Mark Complete
        that died after its write and was retried). Never checks the lease: the money moved.

        Raises:
            ClaimLost: another execution holds the claim, or it is no longer this one's to complete.
        """
        return self._fenced(
            order_id, "complete", token, ClaimStatus.COMPLETED, "chargeId", {"S": charge_id}, "completedAt"
        )

    def release(self, order_id: str, *, token: str, reason: ReleaseReason) -> Claim:
        """Release the claim, if ``token`` still holds it. Only call this with proof nothing was charged.

        Re-entrant for the same token and reason.

        Raises:
            ClaimLost: another execution holds the claim, or it is completed.
        """
        return self._fenced(
            order_id,
            "release",
            token,
            ClaimStatus.RELEASED,
            "releaseReason",
            {"S": reason.value},
            "releasedAt",
        )

    def _fenced(
        self,
        order_id: str,
        action: str,
        token: str,
        status: ClaimStatus,
        detail: str,
        value: dict[str, str],
        stamp: str,
    ) -> Claim:
        """CLAIMED -> ``status`` with ``detail`` = ``value``, conditional on ``token`` holding the claim.

        Re-entrant: the same transition with the same detail, by the same token, succeeds again.
        """
        now = int(self._clock())
        won, item = self._update(
            order_id,
            {
                "UpdateExpression": (
                    f"SET #status = :to, {detail} = :detail, {stamp} = :now_iso REMOVE openClaim"
                ),
                "ConditionExpression": "claimToken = :token AND (#status = :claimed"
                f" OR (#status = :to AND {detail} = :detail))",
                "ExpressionAttributeValues": {
                    ":to": {"S": status.value},
                    ":claimed": {"S": ClaimStatus.CLAIMED.value},
                    ":detail": value,
                    ":token": {"S": token},
                    ":now_iso": {"S": iso_utc(now)},
                },
            },
            return_new=True,
        )
        return self._fenced_result(order_id, action, won, item)

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
        paginator = self._client.get_paginator("query")
        for page in paginator.paginate(
            TableName=self.table_name,
            IndexName=OPEN_CLAIMS_INDEX,
            KeyConditionExpression="openClaim = :open AND leaseExpiresAt < :before",
            ExpressionAttributeValues={":open": {"S": OPEN}, ":before": {"N": str(lease_expired_before)}},
        ):
            for item in page.get("Items", []):
                yield Claim.from_item(item)

    # -- plumbing -----------------------------------------------------------------------------

    def _update(
        self, order_id: str, request: dict[str, Any], *, return_new: bool = False
    ) -> tuple[bool, dict[str, Any] | None]:
        """One conditional ``UpdateItem``. Returns (won, item): the old row (or the new one with
        ``return_new``) if it won, the row that beat it if it lost."""
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key={"orderId": {"S": order_id}},
                ExpressionAttributeNames={"#status": "status"},
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

    # -- the sweeper (issue 4) ----------------------------------------------------------------

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
            "SET #status = :completed, chargeId = :charge, completedAt = :now_iso, reconciledAt = :now_iso"
            " REMOVE openClaim",
            {":completed": {"S": ClaimStatus.COMPLETED.value}, ":charge": {"S": charge_id}},
            landed=(ClaimStatus.COMPLETED, "chargeId", charge_id),
        )

    def release_stale(self, seen: Claim) -> Claim:
        """Release a claim whose lease ran out, once the provider shows that its attempt charged nothing.

        For the sweeper only, fenced like :meth:`complete_stale`. The reason is ``NOT_CHARGED``: the
        release is the proof that nothing was charged (invariant 6), so the next claim of the order
        starts a new attempt. Re-entrant like :meth:`complete_stale`.

        Raises:
            ClaimLost: the claim is no longer the one the sweeper saw.
        """
        return self._resolve_stale(
            seen,
            "SET #status = :released, releaseReason = :reason, releasedAt = :now_iso, reconciledAt = :now_iso"
            " REMOVE openClaim",
            {
                ":released": {"S": ClaimStatus.RELEASED.value},
                ":reason": {"S": ReleaseReason.NOT_CHARGED.value},
            },
            landed=(ClaimStatus.RELEASED, "releaseReason", ReleaseReason.NOT_CHARGED.value),
        )

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
        now = int(self._clock())
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
