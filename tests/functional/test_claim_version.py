"""Every write of a claim row counts itself in ``version``: the outcome events' ``sequence`` rests on it.

One test per write form of ``payment_saga.claims``, against moto's DynamoDB (the table as
template.yaml declares it): the version after the write is one more than before it, and a write
that loses its condition leaves it alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from payment_saga.claims import ClaimsStore, FenceResult, ReleaseReason
from payment_saga.errors import ClaimLost
from payment_saga.orders import Order
from tests.functional.sweeper_support import LEASE

if TYPE_CHECKING:
    from collections.abc import Callable

ORDER = Order("ORDER-V", 15000, "BRL", "cus_123", "pm_card_visa")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"


def version(store: ClaimsStore) -> int:
    claim = store.get(ORDER.order_id)
    assert claim is not None
    return claim.version


def test_the_first_claim_of_an_order_is_version_1(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)

    assert version(store) == 1


def test_a_reentrant_claim_write_counts_itself(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.claim(ORDER, token=A)

    assert version(store) == 2


def test_a_takeover_counts_itself(store: ClaimsStore, clock: Any) -> None:
    store.claim(ORDER, token=A)
    clock.advance(LEASE + 1)

    store.claim(ORDER, token=B)

    assert version(store) == 2, "the first-claim write the takeover lost first changed nothing"


def test_a_claim_after_a_release_counts_itself(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    store.claim(ORDER, token=B)

    assert version(store) == 3


def test_complete_counts_itself(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)

    store.complete(ORDER.order_id, token=A, charge_id="pi_1")

    assert version(store) == 2


@pytest.mark.parametrize("reason", list(ReleaseReason))
def test_release_counts_itself(store: ClaimsStore, reason: ReleaseReason) -> None:
    store.claim(ORDER, token=A)

    store.release(ORDER.order_id, token=A, reason=reason, payment_attempt="initial")

    assert version(store) == 2


def test_a_fence_added_to_a_row_counts_itself(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    assert store.fence_failed_claim(ORDER, token=B).result is FenceResult.FENCED

    assert version(store) == 3


def test_the_tombstone_of_a_claim_that_never_landed_is_version_1(store: ClaimsStore) -> None:
    assert store.fence_failed_claim(ORDER, token=A).result is FenceResult.TOMBSTONE

    assert version(store) == 1


@pytest.mark.parametrize(
    "resolve",
    [
        lambda store, seen: store.complete_stale(seen, charge_id="pi_1"),
        lambda store, seen: store.release_stale(seen),
        lambda store, seen: store.release_stale(seen, reason=ReleaseReason.DECLINED),
    ],
    ids=["complete_stale", "release_stale", "release_stale_declined"],
)
def test_the_sweepers_writes_count_themselves(
    store: ClaimsStore, clock: Any, resolve: Callable[[ClaimsStore, Any], Any]
) -> None:
    seen = store.claim(ORDER, token=A).claim
    clock.advance(LEASE + 1)

    resolve(store, seen)

    assert version(store) == 2


def test_the_sweepers_late_charge_on_a_released_claim_counts_itself(store: ClaimsStore) -> None:
    store.claim(ORDER, token=A)
    store.release(ORDER.order_id, token=A, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")

    store.complete_released(ORDER.order_id, attempt=1, charge_id="pi_late")

    assert version(store) == 3


def test_a_write_that_loses_its_condition_leaves_the_version_alone(store: ClaimsStore) -> None:
    seen = store.claim(ORDER, token=A).claim
    store.complete(ORDER.order_id, token=A, charge_id="pi_1")

    with pytest.raises(ClaimLost):
        store.release(ORDER.order_id, token=B, reason=ReleaseReason.NOT_CHARGED, payment_attempt="initial")
    with pytest.raises(ClaimLost):
        store.complete_stale(replace(seen, lease_expires_at=0), charge_id="pi_2")

    assert version(store) == 2
