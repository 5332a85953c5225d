"""The claim gate against DynamoDB's conditional semantics (moto), table built from template.yaml."""

from __future__ import annotations

import threading
import zlib
from dataclasses import replace
from typing import Any

import pytest

from payment_saga.claims import (
    NO_OWNER,
    OPEN,
    OPEN_SHARDS,
    ClaimResult,
    ClaimsStore,
    ClaimStatus,
    ReleaseReason,
    open_shard,
)
from payment_saga.errors import ClaimLost, OrderConflict
from payment_saga.orders import Order
from saga_local.aws.moto_adapter import patched_moto
from saga_local.runtime.faults import FaultPlan
from saga_local.runtime.runtimes import InProcessRuntime

ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"


def test_first_claim_wins_and_records_who_until_when_and_what(store: ClaimsStore, clock: Any) -> None:
    outcome = store.claim(ORDER, token=A)

    assert outcome.result is ClaimResult.NEW
    row = store.get(ORDER.order_id)
    assert row is not None
    assert row.status is ClaimStatus.CLAIMED
    assert row.claim_token == A
    assert row.attempt == 1
    assert row.lease_expires_at == int(clock.now) + 900
    assert row.fingerprint == "15000|BRL|cus_123"


def test_second_execution_is_a_duplicate_and_learns_the_holder_from_the_failed_write(
    store: ClaimsStore,
) -> None:
    store.claim(ORDER, token=A)

    outcome = store.claim(ORDER, token=B)

    assert outcome.result is ClaimResult.DUPLICATE
    assert outcome.claim.claim_token == A
    assert outcome.claim.status is ClaimStatus.CLAIMED


def test_claim_is_reentrant_for_the_same_execution(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)

    again = store.claim(ORDER, token=A)

    assert again.result is ClaimResult.REENTRANT
    assert again.claim.attempt == 1


def test_completed_claim_is_never_taken_again_even_after_its_lease(store: ClaimsStore, clock: Any) -> None:
    store.claim(ORDER, token=A)
    store.complete(ORDER.order_id, token=A, charge_id="pi_1")
    clock.advance(10_000)

    for token in (A, B):
        outcome = store.claim(ORDER, token=token)
        assert outcome.result is ClaimResult.DUPLICATE
        assert outcome.claim.status is ClaimStatus.COMPLETED


def test_expired_lease_is_taken_over_keeping_the_attempt(store: ClaimsStore, clock: Any) -> None:
    # Seed 000: a worker died between claim and charge. Its CLAIMED row must not block forever.
    store.claim(ORDER, token=A)
    clock.advance(901)

    outcome = store.claim(ORDER, token=B)

    assert outcome.result is ClaimResult.TAKEOVER
    assert outcome.claim.attempt == 1  # the dead holder may have charged: the provider dedupes it
    assert store.get(ORDER.order_id).claim_token == B  # type: ignore[union-attr]


def test_live_lease_is_not_taken_over(store: ClaimsStore, clock: Any) -> None:
    store.claim(ORDER, token=A)
    clock.advance(899)

    assert store.claim(ORDER, token=B).result is ClaimResult.DUPLICATE


def test_takeover_is_refused_beyond_the_providers_idempotency_window(store: ClaimsStore, clock: Any) -> None:
    store.claim(ORDER, token=A)
    clock.advance(24 * 3600)

    outcome = store.claim(ORDER, token=B)

    # A charge retried after the provider forgot the key could land twice: the sweeper decides.
    assert outcome.result is ClaimResult.DUPLICATE
    assert outcome.claim.claim_token == A


def test_same_order_id_with_another_amount_is_a_conflict_and_changes_nothing(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)

    for other in (
        replace(ORDER, amount=15001),
        replace(ORDER, currency="USD"),
        replace(ORDER, customer_id="x"),
    ):
        with pytest.raises(OrderConflict):
            store.claim(other, token=B)
    assert store.get(ORDER.order_id).fingerprint == ORDER.fingerprint  # type: ignore[union-attr]


def test_conflict_is_detected_on_a_released_claim_too(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    with pytest.raises(OrderConflict):
        store.claim(replace(ORDER, amount=1), token=B)


def test_complete_and_release_are_fenced_on_the_claim_token(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)

    with pytest.raises(ClaimLost):
        store.complete(ORDER.order_id, token=B, charge_id="pi_1")
    with pytest.raises(ClaimLost):
        store.release(ORDER.order_id, token=B, reason=ReleaseReason.DECLINED, payment_attempt="initial")
    assert store.get(ORDER.order_id).status is ClaimStatus.CLAIMED  # type: ignore[union-attr]


def test_zombie_holder_cannot_complete_after_a_takeover(store: ClaimsStore, clock: Any) -> None:
    store.claim(ORDER, token=A)
    clock.advance(901)
    store.claim(ORDER, token=B)

    with pytest.raises(ClaimLost):
        store.complete(ORDER.order_id, token=A, charge_id="pi_1")
    assert store.get(ORDER.order_id).claim_token == B  # type: ignore[union-attr]


def test_a_zombie_finding_its_own_charge_completed_by_the_taker_has_ended_charged(
    store: ClaimsStore, clock: Any
) -> None:
    # The taker kept the attempt, so the idempotency key: the provider replayed A's PaymentIntent.
    store.claim(ORDER, token=A)
    clock.advance(901)
    store.claim(ORDER, token=B)
    store.complete(ORDER.order_id, token=B, charge_id="pi_1")

    ended = store.complete(ORDER.order_id, token=A, charge_id="pi_1")

    assert (ended.status, ended.charge_id, ended.claim_token) == (ClaimStatus.COMPLETED, "pi_1", B)


def test_a_zombie_finding_the_order_completed_with_another_charge_is_refused(
    store: ClaimsStore, clock: Any
) -> None:
    store.claim(ORDER, token=A)
    clock.advance(901)
    store.claim(ORDER, token=B)
    store.complete(ORDER.order_id, token=B, charge_id="pi_2")

    with pytest.raises(ClaimLost):  # two charges for one order: reconciliation, not an end
        store.complete(ORDER.order_id, token=A, charge_id="pi_1")


def test_complete_and_release_are_reentrant(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.complete(ORDER.order_id, token=A, charge_id="pi_1")

    again = store.complete(ORDER.order_id, token=A, charge_id="pi_1")

    assert again.status is ClaimStatus.COMPLETED
    with pytest.raises(ClaimLost):  # a different charge id is not the same completion
        store.complete(ORDER.order_id, token=A, charge_id="pi_2")


def test_cannot_release_a_completed_claim(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.complete(ORDER.order_id, token=A, charge_id="pi_1")

    with pytest.raises(ClaimLost):
        store.release(ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="initial")
    assert store.get(ORDER.order_id).status is ClaimStatus.COMPLETED  # type: ignore[union-attr]


def test_claim_after_a_release_starts_a_new_attempt(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    outcome = store.claim(ORDER, token=B)

    assert outcome.result is ClaimResult.NEW_ATTEMPT
    assert outcome.claim.attempt == 2
    assert store.get(ORDER.order_id).attempt == 2  # type: ignore[union-attr]


def test_redelivered_declined_order_is_not_charged_again(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="initial")

    outcome = store.claim(ORDER, token=B)

    assert outcome.result is ClaimResult.DUPLICATE
    assert outcome.claim.status is ClaimStatus.RELEASED


def test_customer_retry_of_a_declined_order_gets_a_new_attempt(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.DECLINED, payment_attempt="initial")

    outcome = store.claim(
        replace(ORDER, payment_attempt="retry-1", payment_method="pm_card_mastercard"), token=B
    )

    assert outcome.result is ClaimResult.NEW_ATTEMPT
    assert outcome.claim.attempt == 2


def test_racing_claims_have_exactly_one_winner(dynamodb: Any, claims_table: str, clock: Any) -> None:
    """Seed 003: 16 concurrent claims for one key; the conditional write admits exactly one."""
    store = ClaimsStore(claims_table, client=dynamodb, clock=clock)
    results: list[ClaimResult] = []
    barrier = threading.Barrier(16)

    def contend(i: int) -> None:
        barrier.wait()
        results.append(store.claim(ORDER, token=f"{A}-{i}").result)

    with patched_moto(InProcessRuntime({}, faults=FaultPlan())):
        threads = [threading.Thread(target=contend, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert results.count(ClaimResult.NEW) == 1
    assert results.count(ClaimResult.DUPLICATE) == 15


def test_racing_reclaims_after_a_release_agree_on_one_new_attempt(
    dynamodb: Any, claims_table: str, clock: Any
) -> None:
    store = ClaimsStore(claims_table, client=dynamodb, clock=clock)
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")
    results: list[ClaimResult] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        results.append(store.claim(ORDER, token=f"{B}-{i}").result)

    with patched_moto(InProcessRuntime({}, faults=FaultPlan())):
        threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert results.count(ClaimResult.NEW_ATTEMPT) == 1
    assert store.get(ORDER.order_id).attempt == 2  # type: ignore[union-attr]


def test_takeover_continues_the_attempt_of_its_first_holder(store: ClaimsStore, clock: Any) -> None:
    store.claim(ORDER, token=A)
    clock.advance(901)

    taken = store.claim(ORDER, token=B)
    again = store.claim(ORDER, token=B)  # B's Claim step retried after a crash

    assert taken.claim.attempt == 1
    assert taken.claim.attempt_started_by == NO_OWNER  # nobody can vouch for it any more
    assert again.result is ClaimResult.REENTRANT
    assert again.claim.attempt_started_by == NO_OWNER  # still not B's to vouch for
    assert store.get(ORDER.order_id).attempt_started_by == NO_OWNER  # type: ignore[union-attr]


def test_new_attempt_is_started_by_its_claimant(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    assert store.claim(ORDER, token=B).claim.attempt_started_by == B


def test_open_claims_spread_over_the_index_shards_and_the_sweeper_finds_every_one(
    dynamodb: Any, claims_table: str, clock: Any
) -> None:
    store = ClaimsStore(claims_table, client=dynamodb, clock=clock, lease_seconds=900)
    orders = [replace(ORDER, order_id=f"ORDER-{i:03d}") for i in range(64)]
    for i, each in enumerate(orders):
        store.claim(each, token=f"{A}-{i}")
        clock.advance(1)  # leases end one second apart
    legacy = replace(ORDER, order_id="ORDER-LEGACY")  # written before the shards: openClaim = OPEN
    store.claim(legacy, token=B)
    dynamodb.update_item(
        TableName=claims_table,
        Key={"orderId": {"S": legacy.order_id}},
        UpdateExpression="SET openClaim = :open",
        ExpressionAttributeValues={":open": {"S": OPEN}},
    )
    shards = {
        dynamodb.get_item(TableName=claims_table, Key={"orderId": {"S": each.order_id}})["Item"]["openClaim"][
            "S"
        ]
        for each in orders
    }

    found = list(store.open_claims(lease_expired_before=int(clock.now) + 10_000))

    assert len(shards) == OPEN_SHARDS  # 64 orders land in every one of the 16 shards
    assert {claim.order_id for claim in found} == {each.order_id for each in orders} | {legacy.order_id}
    leases = [claim.lease_expires_at for claim in found]
    assert leases == sorted(leases)  # the oldest leases first, across shards
    assert open_shard("ORDER-003") == open_shard("ORDER-003") == f"OPEN#{zlib.crc32(b'ORDER-003') % 16}"
