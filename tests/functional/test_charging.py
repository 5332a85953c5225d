"""Charge Payment's decisions (``payment_saga.charging``) against DynamoDB's conditional semantics (moto,
the table from template.yaml) and the real ``StripeProvider`` talking to the Stripe emulator: the step
never creates a second PaymentIntent for an attempt its claim records one for, never hands on a charge
Stripe does not confirm, and a webhook that settles the order during its last try ends it settled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from payment_saga import charging
from payment_saga.charging import ChargeTry
from payment_saga.claims import ReleaseReason
from payment_saga.errors import (
    ClaimLost,
    PaymentDeclined,
    PaymentOutcomeUnknown,
    PaymentProcessing,
    SettledBeforeChargeAnswer,
)
from payment_saga.orders import Order
from payment_saga.payments import IDEMPOTENCY_WINDOW_SECONDS, Charge, StripeProvider, idempotency_key

if TYPE_CHECKING:
    from payment_saga.claims import ClaimsStore
    from saga_local.stripe_emulator import ProviderEmulator
    from tests.helpers import FakeClock

DEBIT = Order("ORDER-SEPA", 15000, "EUR", "cus_123", "pm_card_visa")
CARD = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"


class Journal:
    """What the step logged and counted, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __call__(self, event: str, metric: str, *, level: str = "info", **fields: Any) -> None:
        self.events.append(event)


def step(order: Order, **overrides: Any) -> ChargeTry:
    return ChargeTry(order=order, attempt=1, token=A, attempt_owner=True, **overrides)


def test_a_redrive_long_after_a_recorded_debit_follows_it_and_never_creates_a_second_one(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    """The debit's create was applied and its answer lost; Stripe's processing webhook recorded the
    PaymentIntent on the claim (its lease is now the settle-by date). Days later, after Stripe forgot
    the idempotency key, the timed-out execution is redriven: a create would be a second debit."""
    store.claim(DEBIT, token=A)
    emulator.force_outcome("processing", order_id=DEBIT.order_id)
    with pytest.raises(PaymentProcessing) as processing:
        provider.charge(DEBIT, attempt=1, idempotency_key=idempotency_key(DEBIT.order_id, 1))
    intent = processing.value.payment_intent_id
    store.await_settlement(DEBIT.order_id, token=A, attempt=1, payment_intent_id=intent)
    clock.advance(IDEMPOTENCY_WINDOW_SECONDS + 3 * 24 * 3600)  # the key is forgotten

    redriven = step(DEBIT, redrive_count=1)
    journal = Journal()
    with pytest.raises(PaymentProcessing):
        charging.charge(redriven, store=store, provider=lambda: provider, journal=journal)
    assert len(emulator.payment_intents(DEBIT.order_id)) == 1
    assert journal.events == ["charge_processing"]

    emulator.set_status(intent, "succeeded")  # the bank confirmed it
    charged = charging.charge(redriven, store=store, provider=lambda: provider, journal=Journal())
    assert charged.charge_id == intent
    assert len(emulator.payment_intents(DEBIT.order_id)) == 1
    assert len(emulator.charges_for(DEBIT.order_id)) == 1


def test_a_recorded_debit_is_followed_even_when_the_provider_cannot_be_built_it_is_never_released(
    store: ClaimsStore,
) -> None:
    """Following sends nothing new, but the attempt's create was sent long ago: a provider that cannot
    be built now proves nothing (unknown), where on a create it would prove "not attempted"."""
    store.claim(DEBIT, token=A)
    store.await_settlement(DEBIT.order_id, token=A, attempt=1, payment_intent_id="pi_Recorded")

    def unavailable() -> StripeProvider:
        raise RuntimeError("no key")

    with pytest.raises(PaymentOutcomeUnknown):
        charging.charge(step(DEBIT), store=store, provider=unavailable, journal=Journal())


def test_a_completed_row_whose_payment_intent_stripe_does_not_show_succeeded_is_never_handed_on(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    """A row the step did not write is a claim to check: completed with a PaymentIntent that failed
    (or one of another order), it is refused for reconciliation, never passed to Mark Complete."""
    declined = Order("ORDER-004", 15000, "BRL", "cus_123", "pm_card_chargeDeclined")
    store.claim(declined, token=A)
    with pytest.raises(Exception, match="declined"):
        provider.charge(declined, attempt=1, idempotency_key=idempotency_key(declined.order_id, 1))
    (failed,) = emulator.payment_intents(declined.order_id)
    store.complete(declined.order_id, token=A, charge_id=failed["id"])
    journal = Journal()
    with pytest.raises(ClaimLost, match="does not show succeeded"):
        charging.charge(step(declined), store=store, provider=lambda: provider, journal=journal)
    assert journal.events == ["charge_refused"]


def test_a_completed_row_naming_a_payment_intent_stripe_never_issued_is_never_handed_on(
    store: ClaimsStore, provider: StripeProvider
) -> None:
    store.claim(CARD, token=A)
    store.complete(CARD.order_id, token=A, charge_id="pi_NeverIssued")
    with pytest.raises((ClaimLost, PaymentOutcomeUnknown)):
        charging.charge(step(CARD), store=store, provider=lambda: provider, journal=Journal())


def test_a_webhook_that_completes_the_claim_during_the_last_try_ends_it_charged_not_in_reconciliation(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    """The last try's create is applied and its answer lost; while it was in flight Stripe's webhook
    completed the claim with that PaymentIntent. The step reads the claim after the unknown outcome and
    hands the confirmed charge on: charged once, nothing to page."""
    store.claim(CARD, token=A)

    class AnswerLostAfterTheWebhook:
        def charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge:
            landed = provider.charge(order, attempt=attempt, idempotency_key=idempotency_key)
            store.complete(order.order_id, token=A, charge_id=landed.charge_id)  # the webhook's write
            raise PaymentOutcomeUnknown("the answer was lost")

        def follow(
            self, order: Order, *, attempt: int, idempotency_key: str, payment_intent_id: str
        ) -> Charge:
            return provider.follow(
                order, attempt=attempt, idempotency_key=idempotency_key, payment_intent_id=payment_intent_id
            )

    last_try = step(CARD, retry_count=5)
    journal = Journal()
    charged = charging.charge(last_try, store=store, provider=AnswerLostAfterTheWebhook, journal=journal)
    (landed,) = emulator.charges_for(CARD.order_id)
    assert charged.charge_id == landed.charge_id
    assert journal.events == ["charge_completed_meanwhile"]


class AnswerLost:
    """A provider whose create lands (or not) and whose answer is lost after ``meanwhile`` ran: what a
    webhook (or any writer) did while the request was in flight."""

    def __init__(self, real: StripeProvider, meanwhile: Any) -> None:
        self.real = real
        self.meanwhile = meanwhile

    def charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge:
        self.meanwhile(order)
        raise PaymentOutcomeUnknown("the answer was lost")

    def follow(self, order: Order, *, attempt: int, idempotency_key: str, payment_intent_id: str) -> Charge:
        return self.real.follow(
            order, attempt=attempt, idempotency_key=idempotency_key, payment_intent_id=payment_intent_id
        )


def test_a_processing_webhook_during_the_try_answers_processing_not_unknown(
    store: ClaimsStore, provider: StripeProvider
) -> None:
    store.claim(DEBIT, token=A)
    recorded = AnswerLost(
        provider,
        lambda order: store.await_settlement(
            order.order_id, token=A, attempt=1, payment_intent_id="pi_Debit"
        ),
    )
    journal = Journal()
    with pytest.raises(PaymentProcessing) as processing:
        charging.charge(step(DEBIT, retry_count=5), store=store, provider=lambda: recorded, journal=journal)
    assert processing.value.payment_intent_id == "pi_Debit"
    assert journal.events == ["charge_processing"]


def test_a_decline_settled_by_the_webhook_during_the_try_ends_settled_without_a_page(
    store: ClaimsStore, provider: StripeProvider
) -> None:
    store.claim(DEBIT, token=A)

    def webhook_declines(order: Order) -> None:
        store.release(
            order.order_id,
            token=A,
            reason=ReleaseReason.DECLINED,
            payment_attempt=order.payment_attempt,
            webhook_event="evt_failed",
            payment_intent_id="pi_Failed",
        )

    with pytest.raises(SettledBeforeChargeAnswer):
        charging.charge(
            step(DEBIT, retry_count=5),
            store=store,
            provider=lambda: AnswerLost(provider, webhook_declines),
            journal=Journal(),
        )


def test_a_recorded_debit_that_failed_is_declined_and_one_stripe_cannot_be_asked_about_stays_unknown(
    store: ClaimsStore, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    store.claim(DEBIT, token=A)
    emulator.force_outcome("processing", order_id=DEBIT.order_id)
    with pytest.raises(PaymentProcessing) as processing:
        provider.charge(DEBIT, attempt=1, idempotency_key=idempotency_key(DEBIT.order_id, 1))
    intent = processing.value.payment_intent_id
    store.await_settlement(DEBIT.order_id, token=A, attempt=1, payment_intent_id=intent)

    emulator.inject("fail_before_apply", endpoint="retrieve")
    with pytest.raises(PaymentOutcomeUnknown):
        charging.charge(step(DEBIT, retry_count=1), store=store, provider=lambda: provider, journal=Journal())

    emulator.set_status(intent, "requires_payment_method")  # the bank refused the debit
    journal = Journal()
    with pytest.raises(PaymentDeclined):
        charging.charge(step(DEBIT, retry_count=2), store=store, provider=lambda: provider, journal=journal)
    assert journal.events == ["charge_declined"]
    assert len(emulator.payment_intents(DEBIT.order_id)) == 1  # followed, never created again
