"""The webhook's decision table, directly: a verified PaymentIntent event and the claim as it is now
decide what the claim becomes. Reordered, duplicated and late events change nothing they should not."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from payment_saga.claims import Claim, ClaimStatus, ReleaseReason
from payment_saga.webhooks import MalformedEvent, PaymentIntentEvent, WebhookOutcome, decide, parse_event
from tests.unit.claim_support import OPEN

COMPLETED = dataclasses.replace(OPEN, status=ClaimStatus.COMPLETED, charge_id="pi_1")
DECLINED = dataclasses.replace(OPEN, status=ClaimStatus.RELEASED, release_reason=ReleaseReason.DECLINED)
NOT_CHARGED = dataclasses.replace(OPEN, status=ClaimStatus.RELEASED, release_reason=ReleaseReason.NOT_CHARGED)
#: The open claim once its payment settles later (a debit in ``processing``): lease to the settle-by.
AWAITING = dataclasses.replace(
    OPEN,
    settlement_intent_id="pi_1",
    awaiting_settlement_since=1_790_000_020,
    settle_by=1_791_814_420,
    lease_expires_at=1_791_814_420,
)


def event(kind: str = "succeeded", **overrides: Any) -> PaymentIntentEvent:
    """A ``payment_intent.<kind>`` event for the first attempt of ORDER-003 (150.00 BRL)."""
    status = {"succeeded": "succeeded", "payment_failed": "requires_payment_method"}.get(kind, kind)
    fields: dict[str, Any] = {
        "event_id": "evt_1",
        "type": f"payment_intent.{kind}",
        "payment_intent_id": "pi_1",
        "status": status,
        "amount": 15000,
        "currency": "BRL",
        "created": 1_790_000_010,
        "order_id": "ORDER-003",
        "attempt": 1,
        **overrides,
    }
    return PaymentIntentEvent(**fields)


def test_a_succeeded_payment_intent_of_the_open_attempt_completes_the_claim() -> None:
    assert decide(event(), OPEN).outcome is WebhookOutcome.COMPLETED


def test_a_succeeded_event_delivered_again_after_the_completion_changes_nothing() -> None:
    assert decide(event(), COMPLETED).outcome is WebhookOutcome.LEFT


def test_a_second_succeeded_payment_intent_for_one_attempt_is_a_duplicate_charge() -> None:
    decision = decide(event(payment_intent_id="pi_2"), COMPLETED)
    assert decision.outcome is WebhookOutcome.DUPLICATE_CHARGE
    assert decision.claim_charge_id == "pi_1"


@pytest.mark.parametrize("claim", [DECLINED, NOT_CHARGED], ids=["declined", "not-charged"])
def test_a_succeeded_payment_intent_of_a_released_attempt_is_a_charge_on_a_released_claim(
    claim: Claim,
) -> None:
    assert decide(event(), claim).outcome is WebhookOutcome.CHARGE_ON_RELEASED


def test_a_succeeded_payment_intent_of_an_attempt_the_order_moved_past_is_a_charge_on_a_released_claim() -> (
    None
):
    later = dataclasses.replace(OPEN, attempt=2, claim_token="B")
    assert decide(event(attempt=1), later).outcome is WebhookOutcome.CHARGE_ON_RELEASED


def test_the_late_charge_already_recorded_on_a_later_attempt_changes_nothing() -> None:
    late = dataclasses.replace(COMPLETED, attempt=2)
    assert decide(event(attempt=1), late).outcome is WebhookOutcome.LEFT


@pytest.mark.parametrize("kind", ["payment_failed", "canceled"])
def test_a_failed_payment_intent_of_the_open_attempt_releases_the_claim_as_declined(kind: str) -> None:
    assert decide(event(kind), OPEN).outcome is WebhookOutcome.RELEASED


@pytest.mark.parametrize(
    "claim", [COMPLETED, DECLINED, NOT_CHARGED], ids=["completed", "declined", "not-charged"]
)
def test_a_failure_after_the_attempt_was_decided_changes_nothing(claim: Claim) -> None:
    assert decide(event("payment_failed"), claim).outcome is WebhookOutcome.LEFT


def test_a_failure_of_an_earlier_attempt_does_not_release_the_open_one() -> None:
    later = dataclasses.replace(OPEN, attempt=2)
    assert decide(event("payment_failed", attempt=1), later).outcome is WebhookOutcome.LEFT


def test_a_payment_failed_event_whose_payment_intent_is_not_failed_releases_nothing() -> None:
    # The PaymentIntent's status (Stripe's answer now) decides, not the event's type: it settles later.
    outcome = decide(event("payment_failed", status="processing"), OPEN).outcome
    assert outcome is WebhookOutcome.AWAITING_SETTLEMENT
    assert decide(event("payment_failed", status="requires_action"), OPEN).outcome is WebhookOutcome.LEFT


def test_a_payment_intent_read_failed_for_good_releases_whatever_event_rang() -> None:
    read = dataclasses.replace(event("processing", status="requires_payment_method"), confirmed_failure=True)
    assert decide(read, OPEN).outcome is WebhookOutcome.RELEASED
    unconfirmed = event("processing", status="requires_payment_method")
    assert decide(unconfirmed, OPEN).outcome is WebhookOutcome.LEFT


def test_a_payment_waiting_for_authentication_keeps_the_claim_as_it_is() -> None:
    assert decide(event("requires_action"), OPEN).outcome is WebhookOutcome.LEFT


def test_a_processing_payment_intent_of_the_open_attempt_keeps_the_claim_awaiting_settlement() -> None:
    assert decide(event("processing"), OPEN).outcome is WebhookOutcome.AWAITING_SETTLEMENT


@pytest.mark.parametrize(
    "claim",
    [COMPLETED, DECLINED, NOT_CHARGED, AWAITING, dataclasses.replace(OPEN, attempt=2)],
    ids=["completed", "declined", "not-charged", "awaiting-already", "later-attempt"],
)
def test_a_processing_event_arriving_late_or_again_changes_nothing(claim: Claim) -> None:
    assert decide(event("processing"), claim).outcome is WebhookOutcome.LEFT


def test_a_succeeded_payment_intent_of_an_awaiting_claim_completes_it() -> None:
    assert decide(event(), AWAITING).outcome is WebhookOutcome.COMPLETED


def test_the_failure_of_the_awaited_payment_intent_releases_the_claim_as_declined() -> None:
    assert decide(event("payment_failed"), AWAITING).outcome is WebhookOutcome.RELEASED


def test_the_failure_of_another_payment_intent_than_the_awaited_one_releases_nothing() -> None:
    failed = event("payment_failed", payment_intent_id="pi_other")
    assert decide(failed, AWAITING).outcome is WebhookOutcome.LEFT


@pytest.mark.parametrize(
    ("overrides", "claim"),
    [
        ({"order_id": None}, OPEN),
        ({"attempt": None}, OPEN),
        ({}, None),
        ({"attempt": 2}, OPEN),
        ({"type": "payment_intent.created"}, OPEN),
    ],
    ids=["no-order-metadata", "no-attempt-metadata", "no-claim", "attempt-never-reached", "other-type"],
)
def test_an_event_for_a_payment_intent_this_saga_did_not_create_is_ignored(
    overrides: dict[str, Any], claim: Claim | None
) -> None:
    assert decide(event(**overrides), claim).outcome is WebhookOutcome.IGNORED


@pytest.mark.parametrize("overrides", [{"amount": 14999}, {"currency": "USD"}], ids=["amount", "currency"])
def test_a_payment_intent_for_another_amount_or_currency_moves_nothing(overrides: dict[str, Any]) -> None:
    for kind in ("succeeded", "payment_failed"):
        assert decide(event(kind, **overrides), OPEN).outcome is WebhookOutcome.MISMATCH


def stripe_event(**intent: Any) -> dict[str, Any]:
    return {
        "id": "evt_1",
        "object": "event",
        "type": "payment_intent.succeeded",
        "created": 1_790_000_010,
        "livemode": False,
        "data": {
            "object": {
                "id": "pi_1",
                "object": "payment_intent",
                "status": "succeeded",
                "amount": 15000,
                "currency": "brl",
                "metadata": {"orderId": "ORDER-003", "attempt": "1", "customerId": "cus_123"},
                **intent,
            }
        },
    }


def test_a_stripe_event_is_read_with_the_metadata_the_charge_step_writes() -> None:
    parsed = parse_event(stripe_event())
    assert (parsed.order_id, parsed.attempt, parsed.currency, parsed.status) == (
        "ORDER-003",
        1,
        "BRL",
        "succeeded",
    )


@pytest.mark.parametrize("attempt", ["0", "01", "one", "", None, 1])
def test_metadata_the_charge_step_never_writes_reads_as_not_ours(attempt: Any) -> None:
    parsed = parse_event(stripe_event(metadata={"orderId": "ORDER-003", "attempt": attempt}))
    assert decide(parsed, OPEN).outcome is WebhookOutcome.IGNORED


@pytest.mark.parametrize(
    "broken",
    [{"amount": "15000"}, {"status": None}, {"object": "charge"}, {"id": 7}],
    ids=["amount-text", "no-status", "not-a-payment-intent", "id-number"],
)
def test_an_event_without_the_shape_of_a_payment_intent_event_is_malformed(broken: dict[str, Any]) -> None:
    with pytest.raises(MalformedEvent):
        parse_event(stripe_event(**broken))


def test_an_event_without_data_is_malformed() -> None:
    with pytest.raises(MalformedEvent):
        parse_event({"id": "evt_1", "type": "payment_intent.succeeded", "created": 1})
