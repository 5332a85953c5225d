"""The settlement backstop: every claim awaiting a debit, asked of Stripe by its PaymentIntent id.

A SEPA or ACH debit settles days after its confirm, and Stripe's webhook normally closes its claim
within seconds of that. A webhook can fail to come (an endpoint disabled, a delivery dead-lettered,
a secret rolled and not updated). The claim's lease runs to its settle-by date (three weeks by
default), so the sweeper's discovery by lease would announce a debit settled on day 2 only on day
21. So the sweeper also runs this, hourly: each open claim that records the PaymentIntent it awaits
is read from Stripe by that id (one request, whatever the account's volume) and Stripe's answer is
applied exactly as the webhook consumer applies it (``payment_saga.webhooks``: the same rules and
the same fenced writes). It never charges. A debit still processing is left as it is; past its
settle-by date the sweeper's own pass pages for it (``SettlementOverdue``), as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from payment_saga.errors import ClaimLost, PaymentOutcomeUnknown
from payment_saga.outcomes import SETTLEMENT_CHECK_MARK
from payment_saga.webhooks import WebhookDecision, WebhookOutcome, handle_event, reading_event

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from payment_saga.claims import ClaimsStore
    from payment_saga.intents import IntentReader


def check_awaiting_settlements(
    store: ClaimsStore,
    reader: IntentReader,
    *,
    livemode: bool,
    check_id: str,
    keep_going: Callable[[], bool] = lambda: True,
) -> Iterator[WebhookDecision | Exception]:
    """For each claim awaiting a settlement: Stripe's answer about its PaymentIntent, applied.

    Yields each decision, or the exception that left a claim as it was (a read of Stripe that failed,
    a row that kept changing): the next check asks again. ``check_id`` names this check where a webhook
    names its event (``webhookEventId`` on a write it makes, after :data:`SETTLEMENT_CHECK_MARK`, so
    that its outcome events say the sweeper closed the claim). Stops when ``keep_going`` says so.
    """
    event_id = SETTLEMENT_CHECK_MARK + check_id
    for claim in store.claims_awaiting_settlement():
        if not keep_going():
            return
        intent_id = claim.settlement_intent_id
        assert intent_id is not None
        try:
            reading = reader.retrieve_intent(intent_id)
            if reading is None:
                yield WebhookDecision(
                    outcome=WebhookOutcome.NOT_FOUND,
                    reason=f"Stripe has no PaymentIntent {intent_id}, which claim {claim.order_id} awaits",
                    event_id=event_id,
                    payment_intent_id=intent_id,
                    order_id=claim.order_id,
                    attempt=claim.attempt,
                )
                continue
            yield handle_event(store, reading_event(reading, event_id=event_id), livemode=livemode)
        except (PaymentOutcomeUnknown, ClaimLost) as exc:
            yield exc
