"""The claim write: its three forms, and the table that reads a lost write's returned row.

``ClaimsStore.claim`` is the single conditional write that admits a charge. Each form is
conditional on exactly the state it may replace; a write that loses gets the row that beat it
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``), and :meth:`ClaimWrites._after_lost_write` reads
from it a final outcome or the next form to try.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from payment_saga.claims.rows import (
    MAX_CLAIM_WRITES,
    NO_OWNER,
    Claim,
    ClaimOutcome,
    ClaimResult,
    ClaimStatus,
    ReleaseReason,
    open_shard,
    order_attribute,
)
from payment_saga.claims.table import ClaimsTable
from payment_saga.clock import iso_utc
from payment_saga.errors import ClaimLost, OrderConflict

if TYPE_CHECKING:
    from payment_saga.orders import Order


@dataclass(frozen=True)
class _ClaimWrite:
    """One form of the claim write, and what winning it means."""

    result: ClaimResult  # NEW stands for "NEW or REENTRANT": told apart by the row it replaced
    request: dict[str, Any]


#: Every claim write carries this: a token fenced off by ``fence_failed_claim`` never claims again.
_NOT_FENCED = "NOT contains(fencedTokens, :token)"


#: The claim values a takeover writes (it keeps the attempt and its start).
_TAKEOVER_VALUES = frozenset(
    (":claimed", ":token", ":lease", ":fp", ":pa", ":now", ":now_iso", ":open", ":order")
)


class ClaimWrites(ClaimsTable):
    """The claim write (:meth:`claim`) and its forms: first claim, takeover, claim after a release."""

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
                    # A new attempt awaits nothing: the last one's settlement ended in its release.
                    " REMOVE releaseReason, releasedAt, expiresAt,"
                    " settlementIntentId, awaitingSettlementSince, awaitingSettlementAt, settleBy"
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
