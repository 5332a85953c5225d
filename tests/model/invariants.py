"""The invariants the model checks after every step, and the findings it is known to make."""

from __future__ import annotations

from typing import Any

from tests.model import asl
from tests.model.relay import event_violations, final_outcome_violations
from tests.model.state import NEEDS_RECONCILIATION, ORDER_ID
from tests.model.world import WorldBase

#: Ends of an execution that say it holds no open claim: the order is charged, declined, not
#: charged, a duplicate of someone else's, or refused. An execution that ended so must not hold the
#: row ``CLAIMED``: nobody would ever act on it, and it suppresses every later delivery until the
#: sweeper frees it.
HOLDS_NOTHING = frozenset(
    {"Duplicate Suppressed", "Claim Failed", "Payment Declined", "Charge Not Attempted", "Order Conflict"}
)


#: How the invariant below begins (what it says of the step follows).
_SETTLED_FIRST = "ended in 'Needs Reconciliation' because a webhook settled its claim before its"
#: Invariants the checker is known to find broken, by the invariant's text (as ``explore`` groups
#: violations) -> the finding's name and where its fix stands. Reported apart, and not a failure
#: (every other violation is); once a fix lands the checker stops finding it, and its entry goes.
KNOWN_FINDINGS: dict[str, str] = {}


def _settled_by_webhook(claim: dict[str, Any], token: str, attempt: Any) -> list[str]:
    """What a webhook did to ``attempt``'s claim, as the claim was read: closed it, or recorded on
    ``token``'s open claim that its PaymentIntent settles later (nothing, if neither)."""
    if str(claim.get("attempt")) != str(attempt):
        return []
    status = claim.get("status")
    if status in ("COMPLETED", "RELEASED") and claim.get("webhookEventId"):
        return [f"{status} {claim.get('releaseReason') or ''}".strip()]
    if status == "CLAIMED" and claim.get("claimToken") == token and claim.get("settlementIntentId"):
        return ["awaiting settlement"]
    return []


class Invariants(WorldBase):
    """The promise, checked on the world after every step and at the end of a schedule."""

    # -- invariants -------------------------------------------------------------------------------

    def violations(self) -> list[str]:
        """The promise, checked after every step."""
        found: list[str] = []
        intents = self.intents()
        succeeded = [intent["id"] for intent in intents if intent["status"] == "succeeded"]
        # A debit still processing is money on its way: two at once (or one beside a charge) are two
        # payments, whatever the provider settles later.
        taking = [intent["status"] for intent in intents if intent["status"] in ("succeeded", "processing")]
        if len(succeeded) > 1:
            found.append(f"more than one charge: {len(succeeded)} succeeded PaymentIntents for the order")
        elif len(taking) > 1:
            found.append(
                f"more than one charge: {len(taking)} PaymentIntents for the order take money"
                f" ({', '.join(sorted(taking))})"
            )
        found.extend(self._declined_sent_again(intents))
        row = self.row()
        if row is not None:
            found.extend(self._row_violations(row, intents))
        for index, execution in enumerate(self.state.executions):
            found.extend(self._execution_violations(index, execution, row, succeeded))
        found.extend(self._relay_violations(succeeded))
        found.extend(self.state.findings)
        return found

    def _relay_violations(self, succeeded: list[str]) -> list[str]:
        """The relay's part of the promise, at every step: events announce what happened, in order;
        a re-queue is of a release proven never charged, and starts one execution; nothing is skipped."""
        state = self.state
        found = event_violations(state.bus, state.closings, succeeded)
        for index in sorted(set(state.requeued_for)):
            closed = state.closings[index] if index >= 0 else None
            if closed is None or (closed["status"], closed["reason"]) != ("RELEASED", "NOT_CHARGED"):
                what = (
                    "a write that closed nothing"
                    if closed is None
                    else f"{closed['status']} {closed['reason'] or ''}"
                )
                found.append(
                    f"the relay re-queued the order for {what.strip()}: it was not proven never charged"
                )
        for index, started in sorted(state.requeue_starts.items()):
            if started > 1:
                found.append(
                    f"an order proven never charged was re-queued {started} times for one release"
                    f" (attempt {state.closings[index]['attempt']}): {started} executions started"
                )
        if state.shed:
            found.append(
                f"the relay's event source skipped {len(state.shed)} record(s): their outcomes are lost"
            )
        if any(message.get("orderId") == ORDER_ID for message in state.parked):
            found.append("the relay parked a record of the order: its outcome is never published")
        return found

    def _declined_sent_again(self, intents: list[dict[str, Any]]) -> list[str]:
        declined: set[str] = set()
        found = []
        for intent in intents:
            attempt = self.state.intent_attempts.get(intent["id"])
            if attempt in declined:
                found.append(
                    f"paymentAttempt {attempt!r} was declined, and the provider was asked to charge it again"
                )
            if intent["status"] in ("requires_payment_method", "canceled") and attempt is not None:
                declined.add(attempt)
        return found

    def _row_violations(self, row: dict[str, Any], intents: list[dict[str, Any]]) -> list[str]:
        found = []
        status = row["status"]
        if status == "CLAIMED" and "expiresAt" in row:
            found.append("an open (CLAIMED) claim carries a TTL: DynamoDB may delete it while it is open")
        if status == "COMPLETED":
            charge = next((i for i in intents if i["id"] == row.get("chargeId")), None)
            if charge is None or charge["status"] != "succeeded":
                found.append("the claim is COMPLETED with a charge the provider does not show as succeeded")
        if status == "RELEASED":
            attempt = str(row["attempt"])
            charged = [
                i["id"]
                for i in intents
                if i["status"] == "succeeded" and i["metadata"].get("attempt") == attempt
            ]
            if charged:
                reason = row.get("releaseReason")
                found.append(f"the claim is RELEASED ({reason}) but its attempt {attempt} was charged")
        return found

    def _execution_violations(
        self, index: int, execution: asl.Execution, row: dict[str, Any] | None, succeeded: list[str]
    ) -> list[str]:
        actor = self.state.actors[index]
        found: list[str] = []
        if execution.status == asl.RUNNING or execution.end is None:
            return found
        holds = row is not None and row["status"] == "CLAIMED" and row["claimToken"] == execution.arn
        if execution.end in HOLDS_NOTHING and holds:
            found.append(
                f"{actor} ended in {execution.end!r} but holds the claim (CLAIMED under its token):"
                " nothing will act on it, and every later delivery is suppressed until the sweeper frees it"
            )
        if execution.end == "Order Charged" and execution.data.get("chargeId") not in succeeded:
            found.append(f"{actor} ended in 'Order Charged' with a charge the provider does not show")
        return found

    def _ended_violations(
        self, index: int, execution: asl.Execution, step: str, claim_read: dict[str, Any] | None
    ) -> list[str]:
        """What must hold when an execution ends (in its last ``step``), of what it could know
        then: an execution whose attempt a webhook had already settled (completed or released), or
        recorded as awaiting settlement on its own claim, does not end in Needs Reconciliation: the
        order was resolved (or is being settled), and a person would be asked about it for nothing,
        with an OrderNeedsReconciliation the order's subscribers act on.

        Only when the step could know: it saw the claim closed (its ``ClaimLost``), or it read the
        claim after the webhook's write (``claim_read``: the claim as the step last read it; a try
        whose answer was lost reads it again before it gives up). A step that could not read the
        claim at all (DynamoDB down for its whole retry budget) could not know the webhook had been
        first, and pages rightly; the sweeper then finds the claim closed and resolves nothing."""
        if execution.end != NEEDS_RECONCILIATION:
            return []
        attempt = (execution.data.get("claim") or {}).get("attempt")
        if (execution.data.get("error") or {}).get("Error") == "ClaimLost":
            closed = ("COMPLETED", "RELEASED")
            settled = [
                f"{c['status']} {c['reason'] or ''}".strip()
                for c in self.state.closings
                if c["webhookEventId"] and c["status"] in closed and c["attempt"] == attempt
            ]
            seen = "found it closed"
        else:
            settled = [] if claim_read is None else _settled_by_webhook(claim_read, execution.arn, attempt)
            seen = "read the claim after that"
        if not settled:
            return []
        return [
            f"{self.state.actors[index]} {_SETTLED_FIRST} {step} step ({settled[0]} by the webhook):"
            f" the step {seen}"
        ]

    def end_violations(self) -> list[str]:
        """Once nothing is left to do: the order is charged once or declined, each release proven
        never charged was re-queued exactly once (or, at the bound, needs attention), and the events
        follow their rule (docs/outcome-events.md)."""
        row = self.row()
        charges = self.succeeded()
        found = []
        charged = row and row["status"] == "COMPLETED" and len(charges) == 1
        declined = (
            row and row["status"] == "RELEASED" and row.get("releaseReason") == "DECLINED" and not charges
        )
        if not (charged or declined):
            status = (
                "no claim" if row is None else f"{row['status']} {row.get('releaseReason') or ''}".strip()
            )
            found.append(
                f"the order ended {status} with {len(charges)} charge(s): neither charged once nor declined"
            )
        state = self.state
        if state.stream:
            found.append(f"the relay never got through {len(state.stream)} record(s)")
        if state.poisons and not state.parked:
            found.append("a record the relay cannot read was never parked")
        for index, closed in enumerate(state.closings):
            if (closed["status"], closed["reason"]) != ("RELEASED", "NOT_CHARGED"):
                continue
            attention = any(
                e["publisher"] == "relay"
                and e["detailType"] == "OrderNeedsAttention"
                and e["detail"].get("sequence") == closed["sequence"]
                for e in state.bus
            )
            started = state.requeue_starts.get(index, 0)
            if not started and not attention:
                found.append(
                    f"an order proven never charged (released at attempt {closed['attempt']}) was never"
                    " re-queued, and nothing says it needs attention"
                )
        found.extend(final_outcome_violations(state.bus, [intent["id"] for intent in charges]))
        return found
