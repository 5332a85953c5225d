"""The claim: one conditional write on ``orderId`` is the gate before the charge.

Every method that changes a claim is a single conditional write on the base table (invariant 3).
When a write loses, the item that beat it comes back in the same response
(``ReturnValuesOnConditionCheckFailure=ALL_OLD``), so no decision is ever taken on a read that
could be stale, and no index is consulted on the way to a charge.

Lifecycle (the words people and tools read in the table)::

    (none) --claim--> CLAIMED --complete--> COMPLETED      (never claimed again)
                         |  |
                         |  +--await settlement--> CLAIMED, settlementIntentId, lease = settleBy
                         |                            (complete on succeeded, release on failed)
                         +----release----> RELEASED --claim--> CLAIMED (attempt + 1)

Awaiting settlement is not a status of its own: the claim stays ``CLAIMED`` under its holder's token,
so the gate and every fenced write read it as they read any open claim, and it is closed by the same
two writes. What it adds is the PaymentIntent the provider settles later and a lease that runs to the
settle-by deadline (``payment_saga.claims.settlement``).

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
* ``settlementIntentId``, ``awaitingSettlementSince``, ``settleBy``: set while the claim awaits a
  payment the provider settles later (``processing``); a claim after a release removes them.
* ``expiresAt`` (TTL): set only once the claim is ``COMPLETED`` or ``RELEASED``. An open claim never
  expires: deleting it would let a duplicate claim the order afresh under a forgotten key.
"""

from __future__ import annotations

from payment_saga.claims.rows import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_REPLAY_HORIZON_SECONDS,
    DEFAULT_RETENTION_SECONDS,
    DEFAULT_SETTLEMENT_WINDOW_DAYS,
    MAX_CLAIM_WRITES,
    NO_OWNER,
    OPEN,
    OPEN_CLAIMS_INDEX,
    OPEN_SHARD_VALUES,
    OPEN_SHARDS,
    SECONDS_PER_DAY,
    Claim,
    ClaimOutcome,
    ClaimResult,
    ClaimStatus,
    Fence,
    FenceResult,
    ReleaseReason,
    open_shard,
    order_attribute,
    release_log_entry,
)
from payment_saga.claims.settlement import (
    Settled,
    awaiting_before_charge_answer,
    settled_before_await,
    settled_before_charge_answer,
)
from payment_saga.claims.store import ClaimsStore

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_REPLAY_HORIZON_SECONDS",
    "DEFAULT_RETENTION_SECONDS",
    "DEFAULT_SETTLEMENT_WINDOW_DAYS",
    "MAX_CLAIM_WRITES",
    "NO_OWNER",
    "OPEN",
    "OPEN_CLAIMS_INDEX",
    "OPEN_SHARDS",
    "OPEN_SHARD_VALUES",
    "SECONDS_PER_DAY",
    "Claim",
    "ClaimOutcome",
    "ClaimResult",
    "ClaimStatus",
    "ClaimsStore",
    "Fence",
    "FenceResult",
    "ReleaseReason",
    "Settled",
    "awaiting_before_charge_answer",
    "open_shard",
    "order_attribute",
    "release_log_entry",
    "settled_before_await",
    "settled_before_charge_answer",
]
