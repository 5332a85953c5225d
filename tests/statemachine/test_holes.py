"""The claim protocol's holes, each closed and shown through the real state machine.

Each test runs the real ASL in moto with the real handlers, and puts ``tests.network.Network`` between
the handlers' claims store and DynamoDB, so a write can lose its answer (botocore sends it again) or
land after the Lambda that sent it died. Charges are counted at the Stripe emulator.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import boto3
import pytest

from payment_saga.claims import NO_OWNER, ClaimsStore, ReleaseReason
from payment_saga.orders import order_from_message
from saga_local.aws.stack import REGION
from saga_local.runtime.faults import Fault
from tests.helpers import Saga, order
from tests.network import Network

if TYPE_CHECKING:
    from collections.abc import Callable

DECLINED = {"paymentMethod": "pm_card_chargeDeclined"}


@pytest.fixture
def direct(saga: Saga) -> ClaimsStore:
    """Another writer on the same table (another execution, as far as the claim can tell)."""
    return ClaimsStore(saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION))


def intents(saga: Saga, order_id: str, payment_method: str | None = None) -> int:
    """PaymentIntents the provider created for the order (declined ones included)."""
    return sum(
        1
        for intent in saga.provider.payment_intents(order_id)
        if payment_method is None or intent.get("payment_method") == payment_method
    )


def test_hole_1_a_reclaim_whose_answer_was_lost_still_charges_the_customers_retry(
    saga: Saga, network: Network
) -> None:
    declined = saga.driver.wait(saga.driver.start(order(**DECLINED), name="declined"))
    assert declined.error == "PaymentDeclined"

    # The retry's first-claim write loses to the RELEASED row; its re-claim lands, its answer is lost.
    network.then_normal().then_answer_lost()
    retry = saga.driver.wait(saga.driver.start(order(paymentAttempt="retry-1"), name="retry"))

    assert retry.outcome == "CHARGED", retry
    assert saga.charges("ORDER-003") == 1
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], int(claim["attempt"])) == ("COMPLETED", 2)


def test_hole_2_a_late_redelivery_of_a_declined_attempt_never_reaches_the_provider(saga: Saga) -> None:
    first = saga.driver.wait(saga.driver.start(order(**DECLINED), name="initial"))
    second = saga.driver.wait(saga.driver.start(order(paymentAttempt="retry-1", **DECLINED), name="retry-1"))
    assert (first.error, second.error) == ("PaymentDeclined", "PaymentDeclined")
    sent = intents(saga, "ORDER-003")

    late = saga.driver.wait(saga.driver.start(order(**DECLINED), name="initial-redelivered"))

    assert late.outcome == "DUPLICATE", late
    assert intents(saga, "ORDER-003") == sent == 2
    assert saga.charges("ORDER-003") == 0


def test_hole_3_an_open_claim_has_no_expiry_and_a_closed_one_does(saga: Saga) -> None:
    saga.provider.force_outcome("processing", order_id="ORDER-OPEN", times=100)
    stuck = saga.driver.wait(saga.driver.start(order("ORDER-OPEN"), name="open"))
    charged = saga.driver.wait(saga.driver.start(order("ORDER-DONE"), name="done"))

    assert stuck.outcome == "AWAITING_SETTLEMENT"  # a debit that settles later keeps its claim open
    assert charged.outcome == "CHARGED"
    open_claim = saga.driver.claim("ORDER-OPEN")
    closed_claim = saga.driver.claim("ORDER-DONE")
    assert open_claim is not None
    assert closed_claim is not None
    assert open_claim["status"] == "CLAIMED"
    assert "expiresAt" not in open_claim
    assert int(closed_claim["expiresAt"]) > 0


def execution_arn(saga: Saga, name: str) -> str:
    """The id (and so the claim token) an execution of this name will have."""
    return saga.stack.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"


def at(saga: Saga, now: float) -> ClaimsStore:
    """Another writer on the claims table, whose clock reads ``now``."""
    client = boto3.client("dynamodb", region_name=REGION)
    return ClaimsStore(saga.stack.table_name, client=client, clock=lambda: now)


def _claim_dies_after_each_write(saga: Saga, order_id: str) -> None:
    saga.faults.add(
        Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", "die", order_id=order_id, times=10)
    )


def test_hole_4a_an_execution_winning_its_claim_back_after_a_takeover_cannot_release_it(
    saga: Saga, network: Network
) -> None:
    # Execution A started attempt 1; its lease ran out and B took the attempt over (B may have
    # charged under it); B's lease ran out too. Now A runs again (redriven) and wins the row back.
    a_token = execution_arn(saga, "A")
    the_order = order_from_message(order())
    t0 = time.time() - 3 * 900 - 10
    at(saga, t0).claim(the_order, token=a_token)
    at(saga, t0 + 901).claim(the_order, token="execution-B")
    # A's takeover write lands but A never hears back; so do its three retries' (re-entrant) writes.
    network.then_normal().then_applied_then_failed()
    for _ in range(3):
        network.then_applied_then_failed()

    result = saga.driver.wait(saga.driver.start(order(), name="A"))

    # Not "Claim Failed" ("send it again"): the claim is held and needs the sweeper.
    assert result.error == "NeedsReconciliation", result
    assert "Claim Kept" in result.path
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    # Not released as NOT_CHARGED: B's charge may have landed. The sweeper asks the provider.
    assert (claim["status"], claim["claimToken"], int(claim["attempt"])) == ("CLAIMED", a_token, 1)
    assert claim["attemptStartedBy"] == NO_OWNER


def test_hole_4b_a_claim_write_in_flight_when_its_lambda_died_cannot_land_after_the_release(
    saga: Saga, network: Network
) -> None:
    for _ in range(4):  # the Claim step and its three retries: each killed with its write on the wire
        network.then_held_in_flight()

    failed = saga.driver.wait(saga.driver.start(order(), name="killed"))

    assert failed.error == "ClaimFailed", failed
    landed = [network.land_held() for _ in range(len(network.held))]
    assert landed == [False] * 4  # every late write met the fence
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "NOT_CHARGED")
    # The order is not stuck: the next delivery of it is charged, once.
    resent = saga.driver.wait(saga.driver.start(order(), name="resent"))
    assert resent.outcome == "CHARGED", resent
    assert saga.charges("ORDER-003") == 1


def test_hole_4b_a_claim_that_landed_before_its_lambda_died_is_released_by_its_owner(saga: Saga) -> None:
    _claim_dies_after_each_write(saga, "ORDER-003")

    failed = saga.driver.wait(saga.driver.start(order(), name="dies"))

    assert failed.error == "ClaimFailed", failed
    claim = saga.driver.claim("ORDER-003")
    assert claim is not None
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "NOT_CHARGED")
    assert saga.charges("ORDER-003") == 0


def test_hole_4e_two_lost_reclaim_races_still_charge_the_order_once(
    saga: Saga, network: Network, direct: ClaimsStore
) -> None:
    saga.driver.wait(saga.driver.start(order(**DECLINED), name="declined"))
    retry = order_from_message(order(paymentAttempt="retry-1"))

    def someone_reclaims_and_releases(token: str) -> Callable[[], None]:
        def meanwhile() -> None:
            direct.claim(retry, token=token)
            direct.release(
                "ORDER-003", token=token, reason=ReleaseReason.NOT_CHARGED, payment_attempt="retry-1"
            )

        return meanwhile

    network.then_normal().then_before(someone_reclaims_and_releases("X")).then_before(
        someone_reclaims_and_releases("Y")
    )
    result = saga.driver.wait(saga.driver.start(order(paymentAttempt="retry-1"), name="retry"))

    assert result.outcome == "CHARGED", result
    assert saga.charges("ORDER-003") == 1
    assert int(saga.driver.claim("ORDER-003")["attempt"]) == 4  # type: ignore[index]


def test_hole_4f_a_release_whose_answer_was_lost_ends_declined_even_if_the_order_was_reclaimed(
    saga: Saga, network: Network, direct: ClaimsStore
) -> None:
    retry = order_from_message(order(paymentAttempt="retry-1"))
    # The claim lands normally; the release lands, its answer is lost, the customer's retry claims
    # the order, then botocore resends the release.
    network.then_normal().then_answer_lost(meanwhile=lambda: direct.claim(retry, token="customer-retry"))

    result = saga.driver.wait(saga.driver.start(order(**DECLINED), name="declined"))

    assert result.status == "FAILED"
    assert result.error == "PaymentDeclined", result
    assert result.path[-1] == "Payment Declined"


def test_a_customer_retry_while_the_first_attempt_is_open_waits_on_the_queue_instead_of_being_lost(
    saga: Saga,
) -> None:
    saga.provider.force_outcome("processing", order_id="ORDER-003", times=100)
    first = saga.driver.wait(saga.driver.start(order(), name="initial"))
    assert first.outcome == "AWAITING_SETTLEMENT"  # its claim stays open until the debit settles

    retry = saga.driver.wait(saga.driver.start(order(paymentAttempt="retry-1"), name="retry"))

    assert retry.status == "FAILED"
    assert retry.outcome == "ClaimBusy", retry
    assert retry.path == ["Claim Order", "Requeue Allowed?", "Requeue Order", "Sent Back to Queue"]
    attributes = saga.driver.sqs.get_queue_attributes(
        QueueUrl=saga.stack.queue_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"  # back in 15 minutes
    assert intents(saga, "ORDER-003") == 1  # the retry's card never reached the provider
