"""One sweep at a time, without reserved concurrency: a lease row in the claims table.

Reserved concurrency 1 would keep the sweeper single-flight, but an account with a low concurrency
quota refuses it at deploy time (Lambda keeps a minimum of unreserved concurrency). Instead, a sweep
first takes a lease on one row of the claims table with a single conditional write, and skips its
tick when another sweep holds it::

    sweep A: acquire ──(wins: row free)──── sweeping ───────────── release
    sweep B:              acquire ──(loses: A holds it until T)── skip this tick
    sweep C:                                                          acquire ──(wins)── ...

* **One conditional write.** ``acquire`` is one ``UpdateItem`` that succeeds when the row does not
  exist, when its lease ran out, or when the caller already holds it (an asynchronous retry of the
  same invocation keeps its request id, so it is re-entrant). The loser learns who holds the lease
  from the failed write itself (``ReturnValuesOnConditionCheckFailure``), never from a read.
* **A lease, not a lock.** A sweep that dies holding it (timeout, crash) frees it when the lease runs
  out; the lease is the invocation's remaining time plus a margin, so it never runs out while that
  invocation could still be sweeping.
* **Not a claim.** The row's key, ``#sweeper-lock``, is no valid ``orderId`` (an order id starts
  with a letter or a digit), and it carries none of a claim's attributes (``status``, ``openClaim``,
  ``leaseExpiresAt``): no order can collide with it, and the sweeper's index never lists it.

Single flight is an economy here, not a safety property: every change a sweep makes is fenced on
what it saw, so two sweeps at once would still be safe (they would just ask the provider twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from payment_saga.clock import Clock, iso_utc, system_clock

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

#: The lease row's ``orderId``: ``orders.ORDER_ID_PATTERN`` never matches it.
SWEEP_LOCK_KEY = "#sweeper-lock"
#: Added to the invocation's remaining time: clocks of two Lambda hosts may disagree a little.
LEASE_MARGIN_SECONDS = 5


@dataclass(frozen=True)
class SweepLease:
    """The outcome of ``acquire``: who holds the lease now, and until when (epoch seconds)."""

    acquired: bool
    holder: str
    expires_at: int


class SweepLock:
    """The sweeper's lease row in ``table_name`` (the claims table; key attribute ``orderId``)."""

    def __init__(
        self,
        table_name: str,
        *,
        client: DynamoDBClient,
        clock: Clock = system_clock,
        key: str = SWEEP_LOCK_KEY,
    ) -> None:
        self.table_name = table_name
        self._client = client
        self._clock = clock
        self._key = {"orderId": {"S": key}}

    def acquire(self, holder: str, *, lease_seconds: float) -> SweepLease:
        """Take the lease for ``holder`` for ``lease_seconds``, unless another holder's lease runs.

        Re-entrant: a holder that already holds the lease renews it.
        """
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        now = self._clock()
        until = math.ceil(now + lease_seconds)
        row_is_free = "attribute_not_exists(sweepLeaseExpiresAt)"
        lease_ran_out = "sweepLeaseExpiresAt <= :now"
        already_mine = "sweepHolder = :holder"
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=self._key,
                UpdateExpression=(
                    "SET sweepHolder = :holder, sweepLeaseExpiresAt = :until, sweepAcquiredAt = :at"
                ),
                ConditionExpression=f"{row_is_free} OR {lease_ran_out} OR {already_mine}",
                ExpressionAttributeValues={
                    ":holder": {"S": holder},
                    ":until": {"N": str(until)},
                    ":now": {"N": str(math.floor(now))},
                    ":at": {"S": iso_utc(now)},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            # botocore types the error response without DynamoDB's Item.
            item: dict[str, Any] = error.response.get("Item") or {}  # type: ignore[assignment]
            return SweepLease(
                acquired=False,
                holder=item.get("sweepHolder", {}).get("S", "?"),
                expires_at=int(item.get("sweepLeaseExpiresAt", {}).get("N", "0")),
            )
        return SweepLease(acquired=True, holder=holder, expires_at=until)

    def release(self, holder: str) -> bool:
        """End ``holder``'s lease now, so the next tick need not wait for it to run out.

        False when ``holder`` no longer held it (its lease ran out and another sweep took it):
        nothing is changed then.
        """
        now = self._clock()
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=self._key,
                UpdateExpression="SET sweepLeaseExpiresAt = :now, sweepReleasedAt = :at",
                ConditionExpression="sweepHolder = :holder",
                ExpressionAttributeValues={
                    ":holder": {"S": holder},
                    ":now": {"N": str(math.floor(now))},
                    ":at": {"S": iso_utc(now)},
                },
            )
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True


def lease_for(remaining_millis: int) -> float:
    """The lease a sweep with ``remaining_millis`` left to run takes: it cannot outlive that."""
    return remaining_millis / 1000 + LEASE_MARGIN_SECONDS
