"""The webhook's writes against DynamoDB's conditional semantics (moto, table from template.yaml): each
decision is one of the claims store's closing writes, fenced on the claim it read, and the execution
that holds the claim meets them as its own."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from payment_saga.claims import ClaimResult, ClaimsStore, ClaimStatus, ReleaseReason
from payment_saga.errors import ClaimLost
from payment_saga.orders import Order
from payment_saga.webhooks import PaymentIntentEvent, WebhookOutcome, apply, decide, handle_event
from tests.functional.sweeper_support import LEASE

if TYPE_CHECKING:
    from tests.helpers import FakeClock

ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"
C = "arn:aws:states:us-east-1:123456789012:execution:saga:C"


def event(kind: str = "succeeded", pi: str = "pi_1", attempt: int = 1) -> PaymentIntentEvent:
    status = {"succeeded": "succeeded", "payment_failed": "requires_payment_method"}.get(kind, kind)
    return PaymentIntentEvent(
        event_id=f"evt_{kind}_{pi}",
        type=f"payment_intent.{kind}",
        payment_intent_id=pi,
        status=status,
        amount=ORDER.amount,
        currency=ORDER.currency,
        created=1_790_000_010,
        order_id=ORDER.order_id,
        attempt=attempt,
    )


def test_a_succeeded_webhook_completes_the_claim_and_the_executions_mark_complete_finds_it_done(
    store: ClaimsStore,
) -> None:
    store.claim(ORDER, token=A)
    decision = handle_event(store, event())
    assert (decision.outcome, decision.applied) == (WebhookOutcome.COMPLETED, True)
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id, claim.claim_token) == (ClaimStatus.COMPLETED, "pi_1", A)
    # The execution's own Mark Complete, with the PaymentIntent its charge returned: re-entrant.
    assert store.complete(ORDER.order_id, token=A, charge_id="pi_1").status is ClaimStatus.COMPLETED
    assert store.claim(ORDER, token=B).result is ClaimResult.DUPLICATE


def test_a_succeeded_webhook_completes_a_claim_whose_lease_ran_out_after_needs_reconciliation(
    store: ClaimsStore, clock: FakeClock
) -> None:
    store.claim(ORDER, token=A)
    clock.advance(LEASE + 3 * 24 * 3600)  # Stripe retries a delivery for up to three days
    assert handle_event(store, event()).applied
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert claim.status is ClaimStatus.COMPLETED


def test_every_event_delivered_again_changes_nothing_the_first_delivery_wrote(
    store: ClaimsStore, dynamodb: Any, claims_table: str
) -> None:
    store.claim(ORDER, token=A)
    handle_event(store, event())
    before = dynamodb.get_item(TableName=claims_table, Key={"orderId": {"S": ORDER.order_id}})["Item"]
    for late in (event(), event("processing"), event("requires_action"), event("payment_failed")):
        assert handle_event(store, late).outcome is WebhookOutcome.LEFT
    after = dynamodb.get_item(TableName=claims_table, Key={"orderId": {"S": ORDER.order_id}})["Item"]
    assert after == before  # not even the version moved


def test_a_failed_webhook_releases_as_declined_and_the_declined_payment_attempt_is_never_charged_again(
    store: ClaimsStore,
) -> None:
    store.claim(ORDER, token=A)
    assert handle_event(store, event("payment_failed")).outcome is WebhookOutcome.RELEASED
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.release_reason) == (ClaimStatus.RELEASED, ReleaseReason.DECLINED)
    # The execution's own Release Claim after its PaymentDeclined: re-entrant on the same write.
    store.release(
        ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt=ORDER.payment_attempt
    )
    assert store.claim(ORDER, token=B).result is ClaimResult.DUPLICATE


def test_a_takeover_between_the_read_and_the_write_is_decided_again_on_the_new_holder(
    store: ClaimsStore, clock: FakeClock
) -> None:
    store.claim(ORDER, token=A)
    seen = store.get(ORDER.order_id)
    clock.advance(LEASE + 1)
    assert store.claim(ORDER, token=B).result is ClaimResult.TAKEOVER
    with pytest.raises(ClaimLost):
        apply(store, decide(event(), seen))  # fenced on A's token: it loses
    assert handle_event(store, event()).applied
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.claim_token, claim.charge_id) == (ClaimStatus.COMPLETED, B, "pi_1")


def test_a_failure_cannot_release_a_claim_that_completed_since_the_read(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    seen = store.get(ORDER.order_id)
    store.complete(ORDER.order_id, token=A, charge_id="pi_1")
    with pytest.raises(ClaimLost):
        apply(store, decide(event("payment_failed", pi="pi_0"), seen))
    assert handle_event(store, event("payment_failed", pi="pi_0")).outcome is WebhookOutcome.LEFT
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, "pi_1")


def test_a_second_succeeded_payment_intent_for_the_attempt_is_alarmed_and_leaves_the_first_charge(
    store: ClaimsStore,
) -> None:
    store.claim(ORDER, token=A)
    store.complete(ORDER.order_id, token=A, charge_id="pi_1")
    decision = handle_event(store, event(pi="pi_2"))
    assert (decision.outcome, decision.claim_charge_id, decision.applied) == (
        WebhookOutcome.DUPLICATE_CHARGE,
        "pi_1",
        False,
    )
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert claim.charge_id == "pi_1"


def test_a_charge_on_a_released_attempt_completes_the_order_so_no_later_attempt_charges(
    store: ClaimsStore,
) -> None:
    store.claim(ORDER, token=A)
    store.release(
        ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt=ORDER.payment_attempt
    )
    decision = handle_event(store, event())
    assert (decision.outcome, decision.applied) == (WebhookOutcome.CHARGE_ON_RELEASED, True)
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, "pi_1")
    assert store.claim(ORDER, token=B).result is ClaimResult.DUPLICATE
    assert handle_event(store, event()).outcome is WebhookOutcome.LEFT


def test_a_charge_on_an_attempt_whose_successor_charged_is_alarmed_without_a_write(
    store: ClaimsStore,
) -> None:
    store.claim(ORDER, token=A)
    store.release(
        ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt=ORDER.payment_attempt
    )
    assert store.claim(ORDER, token=C).result is ClaimResult.NEW_ATTEMPT
    store.complete(ORDER.order_id, token=C, charge_id="pi_2")
    decision = handle_event(store, event(pi="pi_1", attempt=1))
    assert (decision.outcome, decision.applied, decision.claim_charge_id) == (
        WebhookOutcome.CHARGE_ON_RELEASED,
        False,
        "pi_2",
    )
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.attempt, claim.charge_id) == (2, "pi_2")


def test_an_event_for_an_order_with_no_claim_writes_no_row(store: ClaimsStore) -> None:
    assert handle_event(store, event()).outcome is WebhookOutcome.IGNORED
    assert store.get(ORDER.order_id) is None
    assert handle_event(store, dataclasses.replace(event(), order_id=None)).outcome is WebhookOutcome.IGNORED


@pytest.mark.parametrize(("event_live", "stack_live"), [(True, False), (False, True)])
def test_an_event_of_the_other_mode_than_the_stacks_key_is_refused_and_moves_nothing(
    store: ClaimsStore, event_live: bool, stack_live: bool
) -> None:
    store.claim(ORDER, token=A)
    other_mode = dataclasses.replace(event(), livemode=event_live)

    decision = handle_event(store, other_mode, livemode=stack_live)

    assert (decision.outcome, decision.applied) == (WebhookOutcome.WRONG_MODE, False)
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.CLAIMED, None)
    # The same event in the stack's own mode is the proof it always was.
    same_mode = dataclasses.replace(other_mode, livemode=stack_live)
    assert handle_event(store, same_mode, livemode=stack_live).outcome is WebhookOutcome.COMPLETED


# -- a payment that settles later ------------------------------------------------------------------

WINDOW = 21 * 24 * 3600


def awaiting_store(dynamodb: Any, claims_table: str, clock: FakeClock) -> ClaimsStore:
    return ClaimsStore(
        claims_table, client=dynamodb, clock=clock, lease_seconds=LEASE, settlement_window_seconds=WINDOW
    )


def test_a_processing_webhook_keeps_the_claim_awaiting_settlement_until_the_window_ends(
    dynamodb: Any, claims_table: str, clock: FakeClock
) -> None:
    store = awaiting_store(dynamodb, claims_table, clock)
    store.claim(ORDER, token=A)
    decision = handle_event(store, event("processing"))
    assert (decision.outcome, decision.applied) == (WebhookOutcome.AWAITING_SETTLEMENT, True)
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert claim.awaiting_settlement
    assert claim.settlement_intent_id == "pi_1"
    assert claim.lease_expires_at == claim.settle_by == int(clock()) + WINDOW
    # The execution's own Await Settlement for the same PaymentIntent is re-entrant on it.
    store.await_settlement(ORDER.order_id, token=A, attempt=1, payment_intent_id="pi_1")
    # Nothing takes the order over while it settles: another execution's claim is a duplicate.
    clock.advance(LEASE + 1)
    assert store.claim(ORDER, token=B).result is ClaimResult.DUPLICATE
    # A processing delivered again writes nothing.
    before = dynamodb.get_item(TableName=claims_table, Key={"orderId": {"S": ORDER.order_id}})["Item"]
    assert handle_event(store, event("processing")).outcome is WebhookOutcome.LEFT
    assert dynamodb.get_item(TableName=claims_table, Key={"orderId": {"S": ORDER.order_id}})["Item"] == before


@pytest.mark.parametrize(
    ("kind", "status", "reason"),
    [
        ("succeeded", ClaimStatus.COMPLETED, None),
        ("payment_failed", ClaimStatus.RELEASED, ReleaseReason.DECLINED),
    ],
    ids=["succeeded", "payment-failed"],
)
def test_the_settling_webhook_closes_an_awaiting_claim(
    dynamodb: Any,
    claims_table: str,
    clock: FakeClock,
    kind: str,
    status: ClaimStatus,
    reason: ReleaseReason | None,
) -> None:
    store = awaiting_store(dynamodb, claims_table, clock)
    store.claim(ORDER, token=A)
    store.await_settlement(ORDER.order_id, token=A, attempt=1, payment_intent_id="pi_1")
    clock.advance(5 * 24 * 3600)  # the bank answers days later
    assert handle_event(store, event(kind)).applied
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.release_reason) == (status, reason)


def test_awaiting_settlement_is_refused_once_the_claim_is_no_longer_the_executions_open_one(
    dynamodb: Any, claims_table: str, clock: FakeClock
) -> None:
    store = awaiting_store(dynamodb, claims_table, clock)
    store.claim(ORDER, token=A)
    with pytest.raises(ClaimLost):
        store.await_settlement(ORDER.order_id, token=B, attempt=1, payment_intent_id="pi_1")  # not its claim
    with pytest.raises(ClaimLost):
        store.await_settlement(
            ORDER.order_id, token=A, attempt=2, payment_intent_id="pi_1"
        )  # not its attempt
    store.await_settlement(ORDER.order_id, token=A, attempt=1, payment_intent_id="pi_1")
    with pytest.raises(ClaimLost):
        store.await_settlement(ORDER.order_id, token=A, attempt=1, payment_intent_id="pi_2")  # another PI
    store.complete(ORDER.order_id, token=A, charge_id="pi_1")  # the webhook settled it first
    with pytest.raises(ClaimLost):
        store.await_settlement(ORDER.order_id, token=A, attempt=1, payment_intent_id="pi_1")
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, "pi_1")


def test_a_claim_after_a_declined_settlement_awaits_nothing(
    dynamodb: Any, claims_table: str, clock: FakeClock
) -> None:
    store = awaiting_store(dynamodb, claims_table, clock)
    store.claim(ORDER, token=A)
    store.await_settlement(ORDER.order_id, token=A, attempt=1, payment_intent_id="pi_1")
    store.release(
        ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt=ORDER.payment_attempt
    )
    outcome = store.claim(ORDER, token=B)
    assert outcome.result is ClaimResult.NEW_ATTEMPT
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.attempt, claim.settlement_intent_id, claim.settle_by) == (2, None, None)
    assert claim.lease_expires_at == int(clock()) + LEASE


def test_a_decline_that_came_first_is_not_reopened_by_awaiting_settlement(
    dynamodb: Any, claims_table: str, clock: FakeClock
) -> None:
    store = awaiting_store(dynamodb, claims_table, clock)
    store.claim(ORDER, token=A)
    handle_event(store, event("payment_failed"))  # the webhook beat the execution's Await Settlement
    with pytest.raises(ClaimLost):
        store.await_settlement(ORDER.order_id, token=A, attempt=1, payment_intent_id="pi_1")
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.release_reason, claim.settle_by) == (
        ClaimStatus.RELEASED,
        ReleaseReason.DECLINED,
        None,
    )
