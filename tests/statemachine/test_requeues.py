"""No order is lost when its Claim step fails, and the state machine's own re-queues are bounded.

A failed Claim step leaves one of three things: a tombstone (no row was there: a closing transition,
which the outcome relay re-queues), a fence added to a row whose status did not change (nothing
reaches the relay: the state machine sends the order back itself), or nothing at all when Release
Claim failed too (the state machine sends it back). Every re-queue by the state machine (those, and
Claim Busy) carries its count in the message, and at ``MaxStateMachineRequeues`` the order is
published as ``OrderNeedsAttention`` instead.

The real ASL runs in moto, the real handlers in-process, the outcome relay over the claims table's
stream; charges are counted at the Stripe emulator. "Later" is made now by delivering the delayed
messages at once (``deliver_delayed_messages``): the delays themselves are SQS's business.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3

from payment_saga.claims import ClaimsStore
from payment_saga.orders import order_from_message
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws import moto_adapter
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.runtime.faults import Fault
from tests.helpers import Saga, order
from tests.network import Network

if TYPE_CHECKING:
    from saga_local.stack.driver import ExecutionResult
    from saga_local.stack.outcome_log import OutcomeLog

#: Every try of a Lambda step that is throttled: the first and the Lambda retrier's 6 retries.
THROTTLED_STEP = 7
#: Every try of a Lambda step that dies: the first and the catch-all retrier's 3 retries.
DYING_STEP = 4
LEASE = 900


@dataclass(frozen=True)
class Delivery:
    """One execution of the order, in the order they started, with the count its input carried."""

    result: ExecutionResult
    requeue: dict[str, Any] | None


def deliveries(saga: Saga, order_id: str) -> list[Delivery]:
    found = []
    for arn in saga.driver.execution_arns():
        described = saga.driver.sfn.describe_execution(executionArn=arn)
        execution_input = json.loads(described["input"])
        if execution_input["order"]["orderId"] == order_id:
            found.append(
                (described["startDate"], Delivery(saga.driver.result(arn), execution_input.get("requeue")))
            )
    return [delivery for _, delivery in sorted(found, key=lambda pair: pair[0])]


def run_until_idle(saga: Saga) -> None:
    """Pump the queue, the executions and the relay until nothing is left, delayed messages included."""
    saga.driver.pump(timeout=180, busy=lambda: moto_adapter.deliver_delayed_messages() > 0)


def send(saga: Saga, message: dict[str, Any], *, requeues: int) -> None:
    """A message as the state machine's own re-queue sends it: with its ``sagaRequeues`` count."""
    saga.driver.sqs.send_message(
        QueueUrl=saga.stack.queue_url,
        MessageBody=json.dumps(message),
        MessageAttributes={"sagaRequeues": {"DataType": "Number", "StringValue": str(requeues)}},
    )


def log(saga: Saga) -> OutcomeLog:
    assert saga.driver.outcome_log is not None, "the local stack archives the outcome bus"
    return saga.driver.outcome_log


def kinds(saga: Saga, order_id: str) -> list[str]:
    return [event.detail_type for event in log(saga).events(order_id)]


def max_requeues(saga: Saga) -> int:
    """``MAX_STATE_MACHINE_REQUEUES`` as the start function runs with it (template.yaml's default)."""
    for _, environment in saga.stack.functions.values():
        if "MAX_STATE_MACHINE_REQUEUES" in environment:
            return int(environment["MAX_STATE_MACHINE_REQUEUES"])
    raise LookupError("no function has MAX_STATE_MACHINE_REQUEUES")


def claim_and_release_throttled(saga: Saga, order_id: str) -> None:
    """Lambda concurrency is exhausted for a while: every try of Claim Order and of Release Claim."""
    for function in ("ClaimOrderFunction", "ReleaseClaimFunction"):
        saga.faults.add(Fault(function, "start", "throttle", times=THROTTLED_STEP, order_id=order_id))


# -- a failed Claim step that nothing else would re-queue -------------------------------------------


def test_an_order_whose_claim_and_release_are_throttled_is_sent_back_once_and_charged_once(
    saga: Saga,
) -> None:
    claim_and_release_throttled(saga, "ORDER-RQ-1")
    saga.driver.send(order("ORDER-RQ-1"))

    run_until_idle(saga)

    first, second = deliveries(saga, "ORDER-RQ-1")
    assert first.result.error == "ClaimRetriedLater", first.result
    assert first.result.path[-4:] == [
        "Why Released?",
        "Requeue Allowed?",
        "Requeue Order",
        "Sent Back to Queue",
    ]
    assert sent_back_after(saga, first.result.arn) == 300, "back in 5 minutes"
    assert first.requeue == {"count": 0, "next": "1", "allowed": True}
    assert second.requeue == {"count": 1, "next": "2", "allowed": True}, "sent back once, counted"
    assert second.result.outcome == "CHARGED", second.result
    assert saga.charges("ORDER-RQ-1") == 1
    assert sum(saga.faults.fired().values()) == 2 * THROTTLED_STEP
    assert kinds(saga, "ORDER-RQ-1") == ["OrderCharged"]


def test_a_requeued_order_whose_claim_fails_is_sent_again_and_charged_once(saga: Saga) -> None:
    # The first delivery's Claim step dies on every try: its fence leaves a tombstone, RELEASED /
    # NOT_CHARGED, and the relay re-queues it. That delivery's Claim step dies on every try too: its
    # fence only joins the released row (no closing transition), so the state machine sends it again.
    saga.faults.add(Fault("ClaimOrderFunction", "start", "die", times=2 * DYING_STEP, order_id="ORDER-RQ-2"))
    saga.driver.send(order("ORDER-RQ-2"))

    run_until_idle(saga)

    first, requeued, resent = deliveries(saga, "ORDER-RQ-2")
    assert first.result.error == "ClaimFailed", first.result
    assert "Requeue Order" not in first.result.path, "the tombstone is the relay's to re-queue"
    assert requeued.result.error == "ClaimRetriedLater", requeued.result
    assert requeued.result.path[-3:] == ["Requeue Allowed?", "Requeue Order", "Sent Back to Queue"]
    assert resent.requeue == {"count": 1, "next": "2", "allowed": True}
    assert resent.result.outcome == "CHARGED", resent.result
    assert saga.charges("ORDER-RQ-2") == 1
    assert kinds(saga, "ORDER-RQ-2") == ["OrderReleased", "OrderRequeued", "OrderCharged"]


def test_a_fence_that_writes_a_tombstone_leaves_the_one_requeue_to_the_relay(saga: Saga) -> None:
    saga.faults.add(Fault("ClaimOrderFunction", "start", "die", times=DYING_STEP, order_id="ORDER-RQ-3"))
    saga.driver.send(order("ORDER-RQ-3"))

    run_until_idle(saga)

    first, requeued = deliveries(saga, "ORDER-RQ-3")  # exactly one re-queue overall
    assert first.result.error == "ClaimFailed", first.result
    assert first.result.path[-2:] == ["Why Released?", "Claim Failed"]
    assert requeued.requeue == {"count": 0, "next": "1", "allowed": True}, "the relay's, not counted"
    assert requeued.result.outcome == "CHARGED", requeued.result
    assert saga.charges("ORDER-RQ-3") == 1
    assert kinds(saga, "ORDER-RQ-3") == ["OrderReleased", "OrderRequeued", "OrderCharged"]


def test_a_claim_failing_while_the_order_is_completed_is_not_sent_again(saga: Saga) -> None:
    saga.driver.send(order("ORDER-RQ-4"))
    run_until_idle(saga)
    saga.faults.add(Fault("ClaimOrderFunction", "start", "die", times=DYING_STEP, order_id="ORDER-RQ-4"))
    saga.driver.send(order("ORDER-RQ-4"))  # a producer's duplicate, whose Claim step fails

    run_until_idle(saga)

    charged, duplicate = deliveries(saga, "ORDER-RQ-4")
    assert charged.result.outcome == "CHARGED"
    assert duplicate.result.error == "ClaimFailed", duplicate.result
    assert "Requeue Order" not in duplicate.result.path
    assert saga.charges("ORDER-RQ-4") == 1
    assert kinds(saga, "ORDER-RQ-4") == ["OrderCharged"]


# -- the bound --------------------------------------------------------------------------------------


def test_a_failed_claim_below_the_bound_is_sent_again_with_its_count(saga: Saga) -> None:
    bound = max_requeues(saga)
    claim_and_release_throttled(saga, "ORDER-RQ-5")
    send(saga, order("ORDER-RQ-5"), requeues=bound - 1)

    run_until_idle(saga)

    first, last = deliveries(saga, "ORDER-RQ-5")
    assert first.result.error == "ClaimRetriedLater", first.result
    assert last.requeue == {"count": bound, "next": str(bound + 1), "allowed": False}
    assert last.result.outcome == "CHARGED", "the last re-queue allowed is still charged"
    assert saga.charges("ORDER-RQ-5") == 1


def test_a_failed_claim_at_the_bound_is_not_sent_again_and_needs_attention(saga: Saga) -> None:
    bound = max_requeues(saga)
    claim_and_release_throttled(saga, "ORDER-RQ-6")
    send(saga, order("ORDER-RQ-6"), requeues=bound)

    run_until_idle(saga)

    (only,) = deliveries(saga, "ORDER-RQ-6")
    assert only.result.error == "ResendsExhausted", only.result
    assert only.result.path[-3:] == ["Requeue Allowed?", "Publish Needs Attention", "Resends Exhausted"]
    (attention,) = log(saga).events("ORDER-RQ-6")
    assert attention.detail_type == "OrderNeedsAttention"
    assert attention.event_id == f"ORDER-RQ-6/needs-attention/{only.result.name}"
    assert attention.detail["requeues"] == bound
    assert (attention.detail["amount"], attention.detail["currency"]) == (15000, "BRL")
    assert saga.charges("ORDER-RQ-6") == 0


def hold_the_first_attempt_open(saga: Saga, order_id: str) -> None:
    """The first payment attempt's charge settles later: its claim stays open, awaiting settlement."""
    saga.provider.force_outcome("processing", order_id=order_id, times=100)
    first = saga.driver.wait(saga.driver.start(order(order_id), name=f"{order_id}-initial"))
    assert first.outcome == "AWAITING_SETTLEMENT"


def test_claim_busy_puts_the_order_back_with_its_count(saga: Saga) -> None:
    hold_the_first_attempt_open(saga, "ORDER-RQ-7")

    retry = saga.driver.wait(saga.driver.start(order("ORDER-RQ-7", paymentAttempt="retry-1"), name="retry"))

    # Started by hand (no re-queue count in its input): counted as never re-queued.
    assert (retry.status, retry.error) == ("FAILED", "ClaimBusy"), retry
    assert retry.path == ["Claim Order", "Requeue Allowed?", "Requeue Order", "Sent Back to Queue"]
    assert sent_back_after(saga, retry.arn) == 900, "back in 15 minutes"
    message = delayed_message(saga)
    assert message["MessageAttributes"]["sagaRequeues"] == {"DataType": "Number", "StringValue": "1"}
    assert json.loads(message["Body"])["paymentAttempt"] == "retry-1"


def sent_back_after(saga: Saga, execution_arn: str) -> int:
    """The ``DelaySeconds`` of the execution's one re-queue, as it asked SQS for it."""
    (scheduled,) = [
        json.loads(event["taskScheduledEventDetails"]["parameters"])
        for event in saga.driver.sfn.get_execution_history(executionArn=execution_arn)["events"]
        if event["type"] == "TaskScheduled" and event["taskScheduledEventDetails"]["resourceType"] == "sqs"
    ]
    return int(scheduled["DelaySeconds"])


def delayed_message(saga: Saga) -> dict[str, Any]:
    """The one message waiting out its delay on the orders queue, received now."""
    assert moto_adapter.deliver_delayed_messages() == 1
    (message,) = saga.driver.sqs.receive_message(
        QueueUrl=saga.stack.queue_url, MessageAttributeNames=["All"], WaitTimeSeconds=0
    )["Messages"]
    return dict(message)


def test_claim_busy_at_the_bound_is_not_sent_again_and_needs_attention(saga: Saga) -> None:
    hold_the_first_attempt_open(saga, "ORDER-RQ-8")
    send(saga, order("ORDER-RQ-8", paymentAttempt="retry-1"), requeues=max_requeues(saga))

    saga.driver.pump(timeout=120)  # nothing is delayed: the order is not put back

    busy = [d for d in deliveries(saga, "ORDER-RQ-8") if d.requeue is not None]
    (retry,) = busy
    assert retry.result.error == "ResendsExhausted", retry.result
    assert retry.result.path == [
        "Claim Order",
        "Requeue Allowed?",
        "Publish Needs Attention",
        "Resends Exhausted",
    ]
    assert "OrderNeedsAttention" in kinds(saga, "ORDER-RQ-8")
    assert saga.driver.queue_depth() == 0


# -- a zombie Mark Complete ---------------------------------------------------------------------------


def test_a_zombie_mark_complete_after_a_takeover_completed_the_order_publishes_no_reconciliation(
    saga: Saga, network: Network
) -> None:
    # The execution claims and charges, then stalls before Mark Complete; its lease runs out, another
    # execution takes the attempt over (same attempt, same idempotency key: the provider replays the
    # first charge to it) and completes the claim. Then the zombie's Mark Complete runs.
    the_order = order_from_message(order("ORDER-RQ-9"))

    def another_execution_takes_over_and_completes() -> None:
        later = time.time() + LEASE + 1
        store = ClaimsStore(
            saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: later
        )
        taken = store.claim(the_order, token="the-taker")
        assert taken.result.value == "TAKEOVER"
        provider = StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url)
        charge = provider.charge(
            the_order,
            attempt=taken.claim.attempt,
            idempotency_key=idempotency_key("ORDER-RQ-9", taken.claim.attempt),
        )
        store.complete("ORDER-RQ-9", token="the-taker", charge_id=charge.charge_id)

    network.then_normal().then_before(another_execution_takes_over_and_completes)
    saga.driver.send(order("ORDER-RQ-9"))

    run_until_idle(saga)

    (zombie,) = deliveries(saga, "ORDER-RQ-9")
    assert zombie.result.outcome == "CHARGED", zombie.result
    assert "Publish Reconciliation" not in zombie.result.path
    (charge,) = saga.provider.charges_for("ORDER-RQ-9")
    assert zombie.result.output is not None
    assert zombie.result.output["chargeId"] == charge.charge_id, "one PaymentIntent: the replay"
    assert kinds(saga, "ORDER-RQ-9") == ["OrderCharged"]
    claim = saga.driver.claim("ORDER-RQ-9")
    assert claim is not None
    assert (claim["status"], claim["claimToken"]) == ("COMPLETED", "the-taker")


def test_a_zombie_mark_complete_meeting_another_charge_still_needs_reconciliation(
    saga: Saga, network: Network
) -> None:
    # Two charges for one order (the taker's is another PaymentIntent): a person must refund one.
    the_order = order_from_message(order("ORDER-RQ-10"))

    def another_execution_completes_with_another_charge() -> None:
        later = time.time() + LEASE + 1
        store = ClaimsStore(
            saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: later
        )
        store.claim(the_order, token="the-taker")
        store.complete("ORDER-RQ-10", token="the-taker", charge_id="pi_another_charge")

    network.then_normal().then_before(another_execution_completes_with_another_charge)
    saga.driver.send(order("ORDER-RQ-10"))

    run_until_idle(saga)

    (zombie,) = deliveries(saga, "ORDER-RQ-10")
    assert zombie.result.error == "NeedsReconciliation", zombie.result
    assert "OrderNeedsReconciliation" in kinds(saga, "ORDER-RQ-10")
