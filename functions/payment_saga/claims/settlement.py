"""The settlement write: a claim kept open, by its holder, for a payment the provider settles later.

A SEPA or ACH debit confirms into ``processing`` and succeeds or fails days later. The claim stays
``CLAIMED`` under its holder's token (no other execution may charge the order meanwhile, and the
closing writes stay the ones fenced on that token), and one conditional write records what it
waits for: the PaymentIntent (``settlementIntentId``), since when (``awaitingSettlementSince``) and
until when (``settleBy``). The lease is moved to ``settleBy`` in the same write, so that nothing
takes the claim over and the sweeper's index does not find it before the provider's own window
has passed; Stripe's webhook closes it long before, with :meth:`complete` or a ``DECLINED``
:meth:`release`.
"""

from __future__ import annotations

from payment_saga.claims.rows import Claim, ClaimStatus
from payment_saga.claims.table import ClaimsTable
from payment_saga.clock import iso_utc
from payment_saga.errors import ClaimLost


class SettlementWrites(ClaimsTable):
    """The fenced write that keeps a claim open while its payment settles."""

    def await_settlement(self, order_id: str, *, token: str, attempt: int, payment_intent_id: str) -> Claim:
        """Record that ``token``'s claim at ``attempt`` awaits the settlement of ``payment_intent_id``.

        One conditional ``UpdateItem``: still ``CLAIMED`` by ``token`` at ``attempt``, no charge
        recorded, and awaiting no other PaymentIntent. Re-entrant: the same write again (a retried
        step, or the webhook's ``processing`` and the execution's own write) finds its own mark and
        lands again; ``settleBy`` is then counted from the later write, never earlier than before.

        Raises:
            ClaimLost: the claim is not this execution's at this attempt any more, was completed or
                released (a webhook settled it first), or awaits another PaymentIntent.
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
        raise ClaimLost(
            f"cannot await settlement of order {order_id}: it is {current.status.value} at attempt"
            f" {current.attempt} under {'this' if current.claim_token == token else 'another'} token"
            + (f", awaiting {current.settlement_intent_id}" if current.settlement_intent_id else "")
        )
