"""The claim protocol when the network loses answers, delivers writes late, and executions race.

A write can fail before it is sent, be applied and lose its answer (botocore then sends the very
same request again), or land long after the Lambda that sent it was killed. ``tests.network.Network``
sits between the store and moto and does each of these to the next writes, so every case below runs
the real conditional expressions against moto's DynamoDB.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from botocore.exceptions import ReadTimeoutError

from payment_saga.claims import (
    NO_OWNER,
    ClaimResult,
    ClaimsStore,
    ClaimStatus,
    FenceResult,
    ReleaseReason,
)
from payment_saga.errors import ClaimLost, OrderConflict
from payment_saga.orders import Order
from payment_saga.proof import may_release_failed_claim
from tests.network import Network

if TYPE_CHECKING:
    from collections.abc import Callable

ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
RETRY_1 = replace(ORDER, payment_attempt="retry-1", payment_method="pm_card_mastercard")
RETRY_2 = replace(ORDER, payment_attempt="retry-2", payment_method="pm_card_amex")
A, B, C, D, E = (f"arn:aws:states:us-east-1:123456789012:execution:saga:{n}" for n in "ABCDE")
LEASE = 900


@pytest.fixture
def network(dynamodb: Any) -> Network:
    return Network(dynamodb)


@pytest.fixture
def store(network: Network, claims_table: str, clock: Any) -> ClaimsStore:
    client: Any = network  # stands in for the DynamoDB client: the same calls, some answers lost
    return ClaimsStore(claims_table, client=client, clock=clock, lease_seconds=LEASE)


@pytest.fixture
def direct(dynamodb: Any, claims_table: str, clock: Any) -> ClaimsStore:
    """The same table through a well-behaved client: the other executions."""
    return ClaimsStore(claims_table, client=dynamodb, clock=clock, lease_seconds=LEASE)


def raw(dynamodb: Any, order_id: str = ORDER.order_id) -> dict[str, Any]:
    return dynamodb.get_item(TableName="claims", Key={"orderId": {"S": order_id}}, ConsistentRead=True)[
        "Item"
    ]


# -- hole 1: every write that takes a claim treats its own token as a win ----------------------


def test_reclaim_after_a_decline_whose_answer_was_lost_still_wins_the_new_attempt(
    store: ClaimsStore, direct: ClaimsStore, network: Network
) -> None:
    direct.claim(ORDER, token=A)
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="initial")

    # B's first-claim write loses to the RELEASED row; its re-claim lands but the answer is lost.
    network.then_normal().then_answer_lost()
    outcome = store.claim(RETRY_1, token=B)

    assert outcome.result is ClaimResult.NEW_ATTEMPT
    assert outcome.claim.attempt == 2
    assert outcome.claim.attempt_started_by == B  # B may prove nothing was charged under attempt 2
    row = direct.get(ORDER.order_id)
    assert row is not None
    assert (row.status, row.claim_token, row.attempt) == (ClaimStatus.CLAIMED, B, 2)


def test_first_claim_whose_answer_was_lost_is_still_the_first_claim_of_its_execution(
    store: ClaimsStore, network: Network
) -> None:
    network.then_answer_lost()

    outcome = store.claim(ORDER, token=A)

    assert outcome.result.won
    assert outcome.claim.attempt == 1
    assert outcome.claim.attempt_started_by == A


def test_takeover_whose_answer_was_lost_is_still_a_takeover_and_owns_nothing(
    store: ClaimsStore, direct: ClaimsStore, network: Network, clock: Any
) -> None:
    direct.claim(ORDER, token=A)
    clock.advance(LEASE + 1)

    network.then_normal().then_answer_lost()
    outcome = store.claim(ORDER, token=B)

    assert outcome.result is ClaimResult.TAKEOVER
    assert outcome.claim.attempt == 1
    assert outcome.claim.attempt_started_by == NO_OWNER


# -- hole 2: no redelivery of a declined payment attempt reaches the provider ------------------


def test_a_late_redelivery_of_an_earlier_declined_attempt_is_a_duplicate(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=A)
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="initial")
    direct.claim(RETRY_1, token=B)
    direct.release(ORDER.order_id, token=B, reason=ReleaseReason.DECLINED, payment_attempt="retry-1")

    late_initial = direct.claim(ORDER, token=C)
    late_retry = direct.claim(RETRY_1, token=D)
    fresh = direct.claim(RETRY_2, token=E)

    assert late_initial.result is ClaimResult.DUPLICATE
    assert late_retry.result is ClaimResult.DUPLICATE
    assert fresh.result is ClaimResult.NEW_ATTEMPT
    assert fresh.claim.attempt == 3
    row = direct.get(ORDER.order_id)
    assert row is not None
    assert row.declined_attempts == {"initial", "retry-1"}


def test_a_late_redelivery_of_a_declined_attempt_cannot_take_over_an_expired_claim(
    direct: ClaimsStore, clock: Any
) -> None:
    direct.claim(ORDER, token=A)
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="initial")
    direct.claim(RETRY_1, token=B)  # the customer's retry holds attempt 2; its execution dies
    clock.advance(LEASE + 1)

    late = direct.claim(ORDER, token=C)  # a late redelivery of the declined "initial"

    assert late.result is ClaimResult.DUPLICATE
    row = direct.get(ORDER.order_id)
    assert row is not None
    assert (row.claim_token, row.payment_attempt) == (B, "retry-1")  # the retry's order is kept
    assert direct.claim(RETRY_1, token=D).result is ClaimResult.TAKEOVER  # the retry itself may continue


def test_an_attempt_released_not_charged_may_be_claimed_again(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=A)
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    again = direct.claim(ORDER, token=B)

    assert again.result is ClaimResult.NEW_ATTEMPT


# -- hole 3: the TTL never deletes an open claim -----------------------------------------------


def test_open_claims_carry_no_expiry_and_closed_ones_do(
    direct: ClaimsStore, dynamodb: Any, clock: Any
) -> None:
    direct.claim(ORDER, token=A)
    assert "expiresAt" not in raw(dynamodb)

    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")
    assert int(raw(dynamodb)["expiresAt"]["N"]) == int(clock.now) + direct.retention_seconds

    direct.claim(ORDER, token=B)  # a new attempt reopens the claim: the expiry goes
    assert "expiresAt" not in raw(dynamodb)

    clock.advance(LEASE + 1)
    direct.claim(ORDER, token=C)  # a takeover keeps it open
    assert "expiresAt" not in raw(dynamodb)

    direct.complete(ORDER.order_id, token=C, charge_id="pi_1")
    assert int(raw(dynamodb)["expiresAt"]["N"]) == int(clock.now) + direct.retention_seconds


# -- hole 4: ownership ends at a takeover; proof by a fencing write, never a read ---------------


def test_an_execution_that_wins_its_claim_back_after_a_takeover_owns_nothing(
    direct: ClaimsStore, clock: Any
) -> None:
    direct.claim(ORDER, token=A)  # A starts attempt 1
    clock.advance(LEASE + 1)
    direct.claim(ORDER, token=B)  # B takes it over (and may charge under attempt 1)
    clock.advance(LEASE + 1)

    back = direct.claim(ORDER, token=A)  # A, redriven, takes it back

    assert back.result is ClaimResult.TAKEOVER
    assert back.claim.attempt_started_by == NO_OWNER
    assert not may_release_failed_claim(
        attempt_started_by=back.claim.attempt_started_by, token=A, redrive_count=0
    )


def test_a_claim_write_still_in_flight_cannot_land_after_the_fence(
    store: ClaimsStore, direct: ClaimsStore, network: Network
) -> None:
    network.then_held_in_flight()
    with pytest.raises(ReadTimeoutError):
        store.claim(ORDER, token=A)  # the Claim Lambda is killed with its write on the wire

    fence = direct.fence_failed_claim(ORDER, token=A)  # Release Claim fences the order
    assert fence.result is FenceResult.TOMBSTONE
    landed = network.land_held()  # the write arrives at last

    assert not landed
    row = direct.get(ORDER.order_id)
    assert row is not None
    assert (row.status, row.release_reason, row.attempt) == (
        ClaimStatus.RELEASED,
        ReleaseReason.NOT_CHARGED,
        0,
    )
    # The order is not lost: the operator's (or the re-queue's) next delivery claims it.
    resent = direct.claim(ORDER, token=B)
    assert resent.result is ClaimResult.NEW_ATTEMPT
    assert resent.claim.attempt == 1
    assert resent.claim.attempt_started_by == B


def test_a_fenced_execution_never_claims_the_order_again(direct: ClaimsStore) -> None:
    direct.fence_failed_claim(ORDER, token=A)

    with pytest.raises(ClaimLost):
        direct.claim(ORDER, token=A)


def test_the_fence_reports_a_claim_that_did_land(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=A)

    fence = direct.fence_failed_claim(ORDER, token=A)

    assert fence.result is FenceResult.HELD
    held = fence.claim
    assert held is not None
    assert held.held_by(A)
    assert held.attempt_started_by == A


def test_fencing_someone_elses_live_claim_leaves_it_alone(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=B)

    fence = direct.fence_failed_claim(ORDER, token=A)

    assert fence.result is FenceResult.FENCED
    assert not fence.must_send_again(ORDER, token=A)  # B carries this payment attempt to its end
    row = direct.get(ORDER.order_id)
    assert row is not None
    assert row.held_by(B)
    assert row.fenced_tokens == {A}
    direct.complete(ORDER.order_id, token=B, charge_id="pi_1")  # B carries on undisturbed


def test_a_late_takeover_write_of_a_fenced_execution_cannot_land(
    store: ClaimsStore, direct: ClaimsStore, network: Network, clock: Any
) -> None:
    direct.claim(ORDER, token=B)
    clock.advance(LEASE + 1)
    network.then_normal().then_held_in_flight()  # A's takeover write is on the wire when A dies
    with pytest.raises(ReadTimeoutError):
        store.claim(ORDER, token=A)

    direct.fence_failed_claim(ORDER, token=A)

    assert not network.land_held()
    assert direct.get(ORDER.order_id).claim_token == B  # type: ignore[union-attr]


def test_a_release_whose_answer_was_lost_while_another_execution_reclaimed_is_still_a_release(
    store: ClaimsStore, direct: ClaimsStore, network: Network
) -> None:
    store.claim(ORDER, token=A)
    network.then_answer_lost(meanwhile=lambda: direct.claim(RETRY_1, token=B))

    released = store.release(
        ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="initial"
    )

    assert released.claim_token == B  # the row as it is now: B's new attempt
    assert released.attempt == 2


def test_a_release_is_still_fenced_on_its_token_and_payment_attempt(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=A)

    with pytest.raises(ClaimLost):
        direct.release(ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="retry-9")
    assert direct.get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


# -- who sends the order again after a failed Claim step ----------------------------------------
# A closing transition (a tombstone, a release) reaches the outcome relay, which re-queues what was
# never charged; a fence added to a row that stays as it was reaches nobody, so the state machine
# must send the order itself, or the order is lost.


def test_a_fence_that_writes_a_tombstone_leaves_the_resend_to_the_relay(direct: ClaimsStore) -> None:
    fence = direct.fence_failed_claim(ORDER, token=A)

    assert fence.result is FenceResult.TOMBSTONE
    assert not fence.must_send_again(ORDER, token=A)


def test_a_requeued_order_whose_claim_fails_must_be_sent_again(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=B)
    direct.release(ORDER.order_id, token=B, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    fence = direct.fence_failed_claim(ORDER, token=A)  # the re-queued delivery's Claim step failed

    assert fence.result is FenceResult.FENCED
    assert fence.must_send_again(ORDER, token=A)
    row = direct.get(ORDER.order_id)
    assert row is not None
    assert (row.status, row.fenced_tokens) == (ClaimStatus.RELEASED, frozenset({A}))  # no closing transition


def test_a_customer_retry_after_a_decline_whose_claim_fails_must_be_sent_again(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=B)
    direct.release(ORDER.order_id, token=B, reason=ReleaseReason.DECLINED, payment_attempt="initial")

    assert direct.fence_failed_claim(RETRY_1, token=A).must_send_again(RETRY_1, token=A)


def test_a_declined_payment_attempt_whose_claim_fails_is_not_sent_again(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=B)
    direct.release(ORDER.order_id, token=B, reason=ReleaseReason.DECLINED, payment_attempt="initial")

    assert not direct.fence_failed_claim(ORDER, token=A).must_send_again(ORDER, token=A)


def test_a_completed_order_whose_late_claim_fails_is_not_sent_again(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=B)
    direct.complete(ORDER.order_id, token=B, charge_id="pi_1")

    assert not direct.fence_failed_claim(ORDER, token=A).must_send_again(ORDER, token=A)


def test_a_claim_failing_behind_another_open_payment_attempt_must_be_sent_again(
    direct: ClaimsStore,
) -> None:
    direct.claim(ORDER, token=B)  # the first payment attempt is still open

    assert direct.fence_failed_claim(RETRY_1, token=A).must_send_again(RETRY_1, token=A)


def test_a_retried_fence_meeting_its_own_release_leaves_the_resend_to_the_relay(
    direct: ClaimsStore,
) -> None:
    direct.claim(ORDER, token=A)  # the failed step's claim landed
    assert direct.fence_failed_claim(ORDER, token=A).result is FenceResult.HELD
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    again = direct.fence_failed_claim(ORDER, token=A)  # Release Claim died after its release; retried

    assert again.result is FenceResult.FENCED
    assert not again.must_send_again(ORDER, token=A)


def test_a_retried_fence_meeting_its_own_tombstone_leaves_the_resend_to_the_relay(
    direct: ClaimsStore,
) -> None:
    direct.fence_failed_claim(ORDER, token=A)

    again = direct.fence_failed_claim(ORDER, token=A)

    assert again.result is FenceResult.FENCED
    assert not again.must_send_again(ORDER, token=A)


# -- the claim loop reads the answer of every write it sends -------------------------------------


def _release_and_reclaim(direct: ClaimsStore, token: str) -> Callable[[], None]:
    def meanwhile() -> None:
        row = direct.get(ORDER.order_id)
        assert row is not None
        if row.status is ClaimStatus.RELEASED:
            direct.claim(ORDER, token=token)
        direct.release(
            ORDER.order_id, token=token, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial"
        )

    return meanwhile


def test_two_lost_reclaim_races_in_a_row_still_end_in_a_won_claim(
    store: ClaimsStore, direct: ClaimsStore, network: Network
) -> None:
    direct.claim(ORDER, token=A)
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")
    (
        network.then_normal()
        .then_before(_release_and_reclaim(direct, C))
        .then_before(_release_and_reclaim(direct, D))
    )

    outcome = store.claim(ORDER, token=B)  # its fourth write wins: its answer must be read

    assert outcome.result is ClaimResult.NEW_ATTEMPT
    assert outcome.claim.attempt == 4
    assert direct.get(ORDER.order_id).held_by(B)  # type: ignore[union-attr]


def test_a_claim_that_gives_up_does_not_hold_the_order(
    store: ClaimsStore, direct: ClaimsStore, network: Network, dynamodb: Any, claims_table: str, clock: Any
) -> None:
    direct.claim(ORDER, token=A)
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")
    others = iter(f"{A}-other-{i}" for i in range(10))
    network.then_normal()
    for _ in range(3):
        network.then_before(_release_and_reclaim(direct, next(others)))

    with pytest.raises(ClaimLost):
        store.claim(ORDER, token=B)

    assert not direct.get(ORDER.order_id).held_by(B)  # type: ignore[union-attr]


# -- the lease and the fingerprint at their edges ------------------------------------------------


def test_a_lease_is_live_through_its_last_second(direct: ClaimsStore, clock: Any) -> None:
    direct.claim(ORDER, token=A)

    clock.advance(LEASE)  # now == leaseExpiresAt
    assert direct.claim(ORDER, token=B).result is ClaimResult.DUPLICATE
    clock.advance(1)
    assert direct.claim(ORDER, token=B).result is ClaimResult.TAKEOVER


def test_an_expired_lease_is_not_taken_over_for_another_amount(direct: ClaimsStore, clock: Any) -> None:
    direct.claim(ORDER, token=A)
    clock.advance(LEASE + 1)

    with pytest.raises(OrderConflict):
        direct.claim(replace(ORDER, amount=1), token=B)
    row = direct.get(ORDER.order_id)
    assert row is not None
    assert (row.claim_token, row.fingerprint) == (A, ORDER.fingerprint)


# -- the sweeper's writes -------------------------------------------------------------------------


def test_a_decline_found_by_the_sweeper_is_remembered_as_declined(direct: ClaimsStore, clock: Any) -> None:
    direct.claim(ORDER, token=A)
    clock.advance(LEASE + 1)
    seen = direct.get(ORDER.order_id)
    assert seen is not None

    direct.release_stale(seen, reason=ReleaseReason.DECLINED)

    assert direct.claim(ORDER, token=B).result is ClaimResult.DUPLICATE
    assert direct.claim(RETRY_1, token=C).result is ClaimResult.NEW_ATTEMPT


def test_a_charge_found_for_a_released_attempt_closes_the_order(direct: ClaimsStore) -> None:
    direct.claim(ORDER, token=A)
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")
    direct.claim(ORDER, token=B)  # attempt 2 is under way

    closed = direct.complete_released(ORDER.order_id, attempt=1, charge_id="pi_late")

    assert (closed.status, closed.charge_id) == (ClaimStatus.COMPLETED, "pi_late")
    with pytest.raises(ClaimLost):  # attempt 2 must not charge now
        direct.check_held(ORDER.order_id, token=B, attempt=2, margin_seconds=60)
    assert direct.claim(ORDER, token=C).result is ClaimResult.DUPLICATE


def test_the_charges_recheck_uses_the_stores_clock(direct: ClaimsStore, clock: Any) -> None:
    direct.claim(ORDER, token=A)

    direct.check_held(ORDER.order_id, token=A, attempt=1, margin_seconds=60)
    clock.advance(LEASE - 59)
    with pytest.raises(ClaimLost):
        direct.check_held(ORDER.order_id, token=A, attempt=1, margin_seconds=60)


# -- one payment attempt at a time ---------------------------------------------------------------


def test_another_payment_attempt_waits_while_one_is_open_live_or_expired(
    direct: ClaimsStore, clock: Any
) -> None:
    direct.claim(ORDER, token=A)

    live = direct.claim(RETRY_1, token=B)
    clock.advance(LEASE + 1)
    expired = direct.claim(RETRY_1, token=C)

    assert live.result is ClaimResult.BUSY
    assert expired.result is ClaimResult.BUSY  # never a takeover under another attempt's key
    assert not live.result.won
    row = direct.get(ORDER.order_id)
    assert row is not None
    assert (row.claim_token, row.payment_attempt) == (A, "initial")


def test_a_waiting_payment_attempt_gets_its_own_attempt_once_the_open_one_is_declined(
    direct: ClaimsStore,
) -> None:
    direct.claim(ORDER, token=A)
    assert direct.claim(RETRY_1, token=B).result is ClaimResult.BUSY
    direct.release(ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="initial")

    back = direct.claim(RETRY_1, token=C)  # the same message, back from the queue

    assert back.result is ClaimResult.NEW_ATTEMPT
    assert back.claim.attempt == 2
