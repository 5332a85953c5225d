"""Release Claim's decisions (``payment_saga.releasing``) against DynamoDB's conditional semantics (moto,
the table from template.yaml): a claim is released only on proof that nothing was charged; after a
failed Claim step only a claim this execution started and never ran before is, and anything else is
kept for the sweeper."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from payment_saga import releasing
from payment_saga.claims import ClaimResult, ClaimStatus, FenceResult, ReleaseReason
from payment_saga.errors import ClaimLost, ReleaseRefused
from payment_saga.orders import Order

if TYPE_CHECKING:
    from payment_saga.claims import ClaimsStore
    from tests.helpers import FakeClock

#: A redelivered order on its second payment attempt: a decline must be recorded against "2".
ORDER = Order("ORDER-REL", 15000, "EUR", "cus_123", "pm_card_visa", payment_attempt="2")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"


def status(store: ClaimsStore) -> ClaimStatus:
    claim = store.get(ORDER.order_id)
    assert claim is not None
    return claim.status


@pytest.mark.parametrize(
    ("error", "reason"),
    [("PaymentDeclined", ReleaseReason.DECLINED), ("ChargeNotAttempted", ReleaseReason.NOT_CHARGED)],
)
def test_a_charge_failure_that_proves_nothing_was_charged_releases_with_its_reason(
    store: ClaimsStore, error: str, reason: ReleaseReason
) -> None:
    store.claim(ORDER, token=A)

    release = releasing.after_failed_charge(store, ORDER, token=A, error=error)

    assert release.output() == {"released": True, "reason": reason.value, "attempt": 1, "sendAgain": False}
    assert release.released_attempt == 1
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.release_reason) == (ClaimStatus.RELEASED, reason)


def test_a_decline_is_recorded_against_the_orders_own_payment_attempt(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)

    releasing.after_failed_charge(store, ORDER, token=A, error="PaymentDeclined")

    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert claim.declined_attempts == frozenset({"2"})  # a redelivery of attempt "2" is never charged


@pytest.mark.parametrize("error", [None, "PaymentOutcomeUnknown", "States.Timeout", "ClaimLost", "Exception"])
def test_any_other_failure_is_refused_and_the_claim_kept(store: ClaimsStore, error: str | None) -> None:
    store.claim(ORDER, token=A)

    with pytest.raises(ReleaseRefused):
        releasing.after_failed_charge(store, ORDER, token=A, error=error)

    assert status(store) is ClaimStatus.CLAIMED


def test_a_failed_claim_that_never_landed_is_fenced_and_nothing_is_released(store: ClaimsStore) -> None:
    release = releasing.after_failed_claim(store, ORDER, token=A, redrive_count=0)

    assert release.how is releasing.How.FENCED
    assert (release.fence_result, release.holder_status) == (FenceResult.TOMBSTONE.value, None)
    # The tombstone is a closing transition: the outcome relay re-queues it, not the state machine.
    assert release.output() == {
        "released": False,
        "reason": "NOT_CHARGED",
        "attempt": None,
        "sendAgain": False,
    }
    # And the failed step's write can no longer land.
    with pytest.raises(ClaimLost):
        store.claim(ORDER, token=A)


def test_a_failed_claim_meeting_another_executions_claim_leaves_it_alone(store: ClaimsStore) -> None:
    store.claim(ORDER, token=B)

    release = releasing.after_failed_claim(store, ORDER, token=A, redrive_count=0)

    assert release.how is releasing.How.FENCED
    assert (release.fence_result, release.holder_status) == (FenceResult.FENCED.value, "CLAIMED")
    # B carries this same payment attempt to an end: nothing to send again.
    assert release.output() == {
        "released": False,
        "reason": "NOT_CHARGED",
        "attempt": None,
        "sendAgain": False,
    }
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.claim_token) == (ClaimStatus.CLAIMED, B)


def test_a_failed_claim_meeting_a_release_sends_the_order_again(store: ClaimsStore) -> None:
    store.claim(ORDER, token=B)
    store.release(ORDER.order_id, token=B, reason=ReleaseReason.NOT_CHARGED, payment_attempt="2")

    release = releasing.after_failed_claim(store, ORDER, token=A, redrive_count=0)

    # The fence changed no status: no closing transition reaches the relay, so nobody else re-queues it.
    assert release.how is releasing.How.FENCED
    assert release.output()["sendAgain"] is True


def test_a_failed_claim_that_landed_on_an_attempt_it_started_is_released_not_charged(
    store: ClaimsStore,
) -> None:
    store.claim(ORDER, token=A)

    release = releasing.after_failed_claim(store, ORDER, token=A, redrive_count=0)

    assert release.output() == {"released": True, "reason": "NOT_CHARGED", "attempt": 1, "sendAgain": False}
    assert release.released_attempt == 1
    assert status(store) is ClaimStatus.RELEASED


def test_a_failed_claim_in_a_redriven_execution_is_kept(store: ClaimsStore) -> None:
    """An earlier run of this execution may have charged under the claim."""
    store.claim(ORDER, token=A)

    release = releasing.after_failed_claim(store, ORDER, token=A, redrive_count=1)

    assert release.output() == {"released": False, "reason": releasing.KEPT, "attempt": 1, "sendAgain": False}
    assert status(store) is ClaimStatus.CLAIMED


def test_a_failed_claim_that_took_an_attempt_over_is_kept(store: ClaimsStore, clock: FakeClock) -> None:
    """The attempt's first holder may have charged before its lease ran out."""
    store.claim(ORDER, token=B)
    clock.advance(901)
    assert store.claim(ORDER, token=A).result is ClaimResult.TAKEOVER

    release = releasing.after_failed_claim(store, ORDER, token=A, redrive_count=0)

    assert release.output() == {"released": False, "reason": releasing.KEPT, "attempt": 1, "sendAgain": False}
    claim = store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.claim_token) == (ClaimStatus.CLAIMED, A)
