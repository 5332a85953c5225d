"""The settlement write: a claim kept open, by its holder, for a payment the provider settles later.

A SEPA or ACH debit confirms into ``processing`` and succeeds or fails days later. The claim stays
``CLAIMED`` under its holder's token (no other execution may charge the order meanwhile, and the
closing writes stay the ones fenced on that token), and one conditional write records what it
waits for: the PaymentIntent (``settlementIntentId``), since when (``awaitingSettlementSince``) and
until when (``settleBy``). The lease is moved to ``settleBy`` in the same write, so that nothing
takes the claim over and the sweeper's index does not find it before the provider's own window
has passed; Stripe's webhook closes it long before, with :meth:`complete` or a ``DECLINED``
:meth:`release`.

The webhook can also close it *before* that write lands (its event is faster than the execution's
next Task, or the execution's write is retried after it): the write then fails its condition, and
the row it failed on says whether the attempt is already settled (:func:`settled_before_await`).

=====================================================  ===================================
The row the write failed on                            Decision
=====================================================  ===================================
``COMPLETED`` by this token, at this attempt, with     ``CHARGED``: settled first, no page
this PaymentIntent as its charge
``RELEASED`` ``DECLINED`` by this token, at this       ``DECLINED``: settled first, no page
attempt, for this PaymentIntent (``declinedIntentId``,
or the ``settlementIntentId`` it awaited)
anything else: still ``CLAIMED``, another token or     None: the write is refused
attempt, another charge or PaymentIntent, released     (``ClaimLost``), the order needs
``NOT_CHARGED``, a ``DECLINED`` release naming no      reconciliation
PaymentIntent, no row
=====================================================  ===================================

The retried Charge Payment meets the same race earlier: its first request's answer was lost
(``PaymentOutcomeUnknown``, the provider applied it), and before the retry runs the payment settles
and the webhook closes the claim. The retry's re-check finds the claim no longer open and knows no
PaymentIntent (the answer that named it was lost), so the row alone decides
(:func:`settled_before_charge_answer`): the webhook only closes a claim for a PaymentIntent of the
claim's own attempt (its ``metadata[attempt]``), and its writes are fenced on the holder's token, so
a row closed under this token at this attempt by a settlement was closed by this attempt's charge.

=====================================================  ===================================
The row the retried Charge Payment found               Decision
=====================================================  ===================================
``COMPLETED`` by this token, at this attempt, with a   ``CHARGED``: the charge is handed on
charge                                                 to Mark Complete, which finds it done
``RELEASED`` ``DECLINED`` by this token, at this       ``DECLINED``: settled first, no page
attempt, naming the PaymentIntent that failed
(``declinedIntentId``, or the ``settlementIntentId``
it awaited)
anything else: still ``CLAIMED`` (a lease about to     None: the charge is refused
run out), another token or attempt, released           (``ClaimLost``), the order needs
``NOT_CHARGED``, a ``DECLINED`` release naming no      reconciliation
PaymentIntent, no row
=====================================================  ===================================

A Charge Payment that cannot learn its own answer at all (the provider applied the create, the
answer was lost, and every retry meets the provider down) would end in Needs Reconciliation. But
Stripe's ``processing`` webhook may have told the claim meanwhile: it records the same wait Await
Settlement records, on the open claim of that very attempt. Then the step's unknown outcome is not
unknown: the provider said the payment settles later (:func:`awaiting_before_charge_answer`), and
the execution ends in Awaiting Settlement, as if the answer had arrived.

=====================================================  ===================================
The row, after the Charge's outcome is unknown         Decision
=====================================================  ===================================
``CLAIMED`` by this token, at this attempt, awaiting   that PaymentIntent: the step answers
the settlement of a PaymentIntent                      ``PaymentProcessing``, no page
anything else (awaiting nothing, another token or      None: the outcome stays unknown, the
attempt, closed, no row)                               order needs reconciliation
=====================================================  ===================================
"""

from __future__ import annotations

import enum
import json

from payment_saga.claims.rows import Claim, ClaimStatus, ReleaseReason
from payment_saga.claims.table import ClaimsTable
from payment_saga.clock import iso_utc
from payment_saga.errors import ClaimLost, SettledBeforeAwait


class Settled(enum.StrEnum):
    """How an attempt's settlement closed its claim before the execution's own settlement write."""

    CHARGED = "CHARGED"  # completed with the awaited PaymentIntent
    DECLINED = "DECLINED"  # released DECLINED on that PaymentIntent's failure


def settled_before_await(claim: Claim, *, token: str, attempt: int, payment_intent_id: str) -> Settled | None:
    """Whether ``claim`` is already closed, for ``token``'s ``attempt``, by the settlement of
    ``payment_intent_id`` (pure; the module's table).

    Only a closing write of this very attempt and PaymentIntent counts: the webhook's writes are fenced
    on the holder's token, so a row closed for this execution keeps its token, and its end was published
    by the outcome relay from that write. Anything else proves nothing about this attempt.
    """
    if claim.claim_token != token or claim.attempt != attempt:
        return None
    if claim.status is ClaimStatus.COMPLETED and claim.charge_id == payment_intent_id:
        return Settled.CHARGED
    if claim.status is ClaimStatus.RELEASED and claim.release_reason is ReleaseReason.DECLINED:
        released_for = claim.declined_intent_id or claim.settlement_intent_id
        if released_for == payment_intent_id:
            return Settled.DECLINED
    return None


def settled_before_charge_answer(claim: Claim, *, token: str, attempt: int) -> Settled | None:
    """Whether ``claim`` is already closed, for ``token``'s ``attempt``, by that attempt's own
    settlement, when a retried Charge Payment finds it no longer open (pure; the module's second table).

    The retry knows no PaymentIntent, so the row must name the one that settled it: a completion's
    charge, or the failed PaymentIntent a webhook's ``DECLINED`` release records. A release that names
    none (Release Claim's own, the sweeper's) proves nothing about this attempt's charge.
    """
    if (claim.claim_token, claim.attempt) != (token, attempt):
        return None
    if claim.status is ClaimStatus.COMPLETED and claim.charge_id is not None:
        return Settled.CHARGED
    named = claim.declined_intent_id or claim.settlement_intent_id
    if claim.status is ClaimStatus.RELEASED and claim.release_reason is ReleaseReason.DECLINED and named:
        return Settled.DECLINED
    return None


def awaiting_before_charge_answer(claim: Claim, *, token: str, attempt: int) -> str | None:
    """The PaymentIntent whose settlement ``claim`` awaits for ``token``'s ``attempt``, when Charge
    Payment's own outcome is unknown (pure; the module's third table): None unless the claim is still
    ``CLAIMED`` under this token at this attempt and a settlement wait is recorded on it.

    The webhook records a wait only for a PaymentIntent of the claim's own attempt in ``processing``,
    so the row says what the lost answer would have said. Nothing is released or charged on it.
    """
    if (claim.claim_token, claim.attempt) != (token, attempt) or claim.status is not ClaimStatus.CLAIMED:
        return None
    return claim.settlement_intent_id


class SettlementWrites(ClaimsTable):
    """The fenced write that keeps a claim open while its payment settles."""

    def await_settlement(self, order_id: str, *, token: str, attempt: int, payment_intent_id: str) -> Claim:
        """Record that ``token``'s claim at ``attempt`` awaits the settlement of ``payment_intent_id``.

        One conditional ``UpdateItem``: still ``CLAIMED`` by ``token`` at ``attempt``, no charge
        recorded, and awaiting no other PaymentIntent. Re-entrant: the same write again (a retried
        step, or the webhook's ``processing`` and the execution's own write) finds its own mark and
        lands again; ``settleBy`` is then counted from the later write, never earlier than before.

        Raises:
            SettledBeforeAwait: the webhook settled this attempt with this PaymentIntent first
                (:func:`settled_before_await`): the order has its end.
            ClaimLost: the claim is not this execution's at this attempt any more, was completed or
                released otherwise, or awaits another PaymentIntent.
        """
        now = self.now()
        settle_by = now + self.settlement_window_seconds
        won, item = self._update(
            order_id,
            {
                "UpdateExpression": (
                    "SET leaseExpiresAt = :settle_by, settleBy = :settle_by, settlementIntentId = :pi,"
                    " awaitingSettlementSince = :now, awaitingSettlementAt = :now_iso"
                ),
                "ConditionExpression": "#status = :claimed AND claimToken = :token AND attempt = :attempt"
                " AND attribute_not_exists(chargeId)"
                " AND (attribute_not_exists(settlementIntentId) OR settlementIntentId = :pi)",
                "ExpressionAttributeValues": {
                    ":claimed": {"S": ClaimStatus.CLAIMED.value},
                    ":token": {"S": token},
                    ":attempt": {"N": str(attempt)},
                    ":pi": {"S": payment_intent_id},
                    ":settle_by": {"N": str(settle_by)},
                    ":now": {"N": str(now)},
                    ":now_iso": {"S": iso_utc(now)},
                },
            },
            return_new=True,
        )
        if won and item:
            return Claim.from_item(item)
        if not item:
            raise ClaimLost(f"cannot await settlement of order {order_id}: there is no claim")
        current = Claim.from_item(item)
        settled = settled_before_await(
            current, token=token, attempt=attempt, payment_intent_id=payment_intent_id
        )
        if settled is not None:
            raise SettledBeforeAwait(
                json.dumps(
                    {
                        "orderId": order_id,
                        "attempt": attempt,
                        "paymentIntentId": payment_intent_id,
                        "settled": settled.value,
                        "status": current.status.value,
                    },
                    sort_keys=True,
                )
            )
        raise ClaimLost(
            f"cannot await settlement of order {order_id}: it is {current.status.value} at attempt"
            f" {current.attempt} under {'this' if current.claim_token == token else 'another'} token"
            + (f", awaiting {current.settlement_intent_id}" if current.settlement_intent_id else "")
        )
