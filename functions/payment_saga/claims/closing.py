"""The closing writes: complete, release, the fence of a failed claim, and the sweeper's.

Each is one conditional write fenced on the claim it closes (invariant 7), re-entrant for its own
earlier landing, and each sets ``expiresAt``: a closed row may expire, an open one never does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from payment_saga.claims.rows import (
    MAX_CLAIM_WRITES,
    NO_OWNER,
    Claim,
    ClaimStatus,
    Fence,
    FenceResult,
    ReleaseReason,
    _string_set,
    order_attribute,
    release_log_entry,
)
from payment_saga.claims.table import ClaimsTable
from payment_saga.clock import iso_utc
from payment_saga.errors import ClaimLost

if TYPE_CHECKING:
    from payment_saga.orders import Order


class ClosingWrites(ClaimsTable):
    """The fenced writes that close a claim (or fence a token off it)."""

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
        payment_intent_id: str | None = None,
    ) -> Claim:
        """Release the claim, if ``token`` still holds it. Only call this with proof nothing was charged.

        ``webhook_event``: as for :meth:`complete`, the Stripe event that is the proof.
        ``payment_intent_id``: the PaymentIntent whose failure that event reports, kept as
        ``declinedIntentId`` on a ``DECLINED`` release, so that the execution's own Await Settlement,
        landing after it, can tell that its attempt was settled by that very PaymentIntent.

        ``payment_attempt`` is the producer's payment attempt the claim was taken for; a ``DECLINED``
        release remembers it in ``declinedAttempts`` so that no redelivery of it reaches the provider.

        Re-entrant for the same token and reason, even when the row has moved on since: a release
        whose answer was lost, then re-claimed by another execution before botocore resent it, finds
        its mark in ``releaseLog`` and returns the row as it is now.

        Raises:
            ClaimLost: another execution holds the claim, or it is completed.
        """
        now = self.now()
        declined_intent = payment_intent_id if reason is ReleaseReason.DECLINED else None
        entry = release_log_entry(token, reason)
        declined = reason is ReleaseReason.DECLINED
        won, item = self._update(
            order_id,
            {
                "UpdateExpression": (
                    "SET #status = :released, releaseReason = :reason, releasedAt = :now_iso,"
                    " expiresAt = :ttl"
                    + _webhook_mark(webhook_event)
                    + (", declinedIntentId = :declined_intent" if declined_intent else "")
                    + " REMOVE openClaim"
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
                    **({":declined_intent": {"S": declined_intent}} if declined_intent else {}),
                    **_webhook_value(webhook_event),
                },
            },
            return_new=True,
        )
        if not won and item and entry in _string_set(item, "releaseLog"):
            return Claim.from_item(item)  # our release landed; the order has moved on since
        return self._fenced_result(order_id, "release", won, item)

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


def _webhook_mark(event_id: str | None) -> str:
    """The SET clause that records the Stripe event a webhook's write acts on (nothing otherwise)."""
    return ", webhookEventId = :webhook_event" if event_id else ""


def _webhook_value(event_id: str | None) -> dict[str, Any]:
    return {":webhook_event": {"S": event_id}} if event_id else {}
