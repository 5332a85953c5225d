"""The claims table itself: the store's settings, its reads, and the one conditional ``UpdateItem``.

Every write of ``payment_saga.claims.claiming`` and ``payment_saga.claims.closing`` goes through
:meth:`ClaimsTable._update`, which counts it in the row's ``version``.
"""

from __future__ import annotations

import heapq
import re
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from payment_saga.claims.rows import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_REPLAY_HORIZON_SECONDS,
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_SETTLEMENT_WINDOW_DAYS,
    OPEN_CLAIMS_INDEX,
    OPEN_SHARD_VALUES,
    SECONDS_PER_DAY,
    Claim,
    ClaimStatus,
)
from payment_saga.clock import Clock, system_clock
from payment_saga.errors import ClaimLost

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mypy_boto3_dynamodb import DynamoDBClient


class ClaimsTable:
    """The claims table: settings, reads and plumbing shared by the claim and the closing writes.

    Its arguments are :class:`payment_saga.claims.ClaimsStore`'s.
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
        settlement_window_seconds: int = DEFAULT_SETTLEMENT_WINDOW_DAYS * SECONDS_PER_DAY,
    ) -> None:
        self.table_name = table_name
        self._client = client
        self._clock = clock
        self.lease_seconds = lease_seconds
        self.retention_seconds = retention_seconds
        self.replay_horizon_seconds = replay_horizon_seconds
        self.settlement_window_seconds = settlement_window_seconds

    def now(self) -> int:
        """The store's clock, in whole seconds (leases are whole seconds)."""
        return int(self._clock())

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
        if claim is None or not self.still_held(
            claim, token=token, attempt=attempt, margin_seconds=margin_seconds
        ):
            state = "absent" if claim is None else f"{claim.status.value}, attempt {claim.attempt}"
            raise ClaimLost(
                f"order {order_id}: attempt {attempt} is no longer held by this execution ({state})"
            )
        return claim

    def still_held(self, claim: Claim, *, token: str, attempt: int, margin_seconds: int) -> bool:
        """Whether ``claim`` (as just read) is held by ``token`` at ``attempt`` with at least
        ``margin_seconds`` of lease to run, on the store's clock (:meth:`check_held`'s rule)."""
        return (
            claim.held_by(token)
            and claim.attempt == attempt
            and claim.lease_expires_at >= self.now() + margin_seconds
        )

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

    def claims_awaiting_settlement(self) -> Iterator[Claim]:
        """Open claims awaiting the settlement of a PaymentIntent (``settlementIntentId``), whatever
        their lease: for the sweeper's settlement backstop.

        Discovery only, as :meth:`open_claims`: it reads the sparse index of open claims, which may
        lag, and whatever is then done to a claim is a conditional write on the base table. What it
        reads grows with the open claims, not with the table or the provider's account.
        """
        paginator = self._client.get_paginator("query")
        for shard in OPEN_SHARD_VALUES:
            for page in paginator.paginate(
                TableName=self.table_name,
                IndexName=OPEN_CLAIMS_INDEX,
                KeyConditionExpression="openClaim = :open",
                FilterExpression="attribute_exists(settlementIntentId)",
                ExpressionAttributeValues={":open": {"S": shard}},
            ):
                for item in page.get("Items", []):
                    yield Claim.from_item(item)

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
