"""``saga replay-parked`` against a stack (``--stack``, its outputs read from CloudFormation, on moto).

A record the relay parked runs through the relay's own code again: a dry run changes nothing, and
``--apply`` publishes what is readable now and leaves what is still unreadable, with its reason.
A parked body is only a claim: each record is checked against its claim row as the table holds it
now, and what is relayed is that row. A planted body the table does not bear out does nothing.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from payment_saga.claims import ClaimsStore, ReleaseReason
from payment_saga.orders import order_from_message
from saga_local import cli
from saga_local.aws.stack import REGION
from tests.helpers import order
from tests.local.outcome_support import log, parked, put_unreadable_row, relay_later, relay_now

if TYPE_CHECKING:
    from tests.helpers import Saga


def row_now(saga: Saga, order_id: str) -> dict[str, Any]:
    row: dict[str, Any] = saga.driver.dynamodb.get_item(
        TableName=saga.stack.table_name, Key={"orderId": {"S": order_id}}, ConsistentRead=True
    )["Item"]
    return row


def park_a_readable_record(saga: Saga, order_id: str, new: dict[str, Any] | None = None) -> None:
    """A closing change of the order's claim, parked as an older relay that could not read it would
    have: by default the row as it is (completed), else the ``new`` image given (a planted body)."""
    row = row_now(saga, order_id)
    new = row if new is None else new
    record = {
        "eventName": "MODIFY",
        "eventSource": "aws:dynamodb",
        "dynamodb": {
            "Keys": {"orderId": {"S": order_id}},
            "OldImage": {**row, "status": {"S": "CLAIMED"}},
            "NewImage": new,
            "SequenceNumber": "900",
        },
    }
    saga.driver.sqs.send_message(
        QueueUrl=saga.stack.outputs["OutcomeRelayFailureQueueUrl"],
        MessageBody=json.dumps(record),
        MessageAttributes={
            "parkReason": {"DataType": "String", "StringValue": "an older relay could not read it"},
            "orderId": {"DataType": "String", "StringValue": order_id},
        },
    )


def replay_parked(deployed: str, *options: str) -> int:
    return cli.main(["replay-parked", "--stack", deployed, "--region", REGION, *options])


def test_a_dry_run_lists_the_parked_records_and_changes_nothing(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    relay_later(saga)
    saga.driver.send(order("ORDER-RP-1"))
    saga.driver.pump(timeout=60)
    park_a_readable_record(saga, "ORDER-RP-1")

    assert replay_parked(deployed) == 0

    printed = capsys.readouterr().out
    assert "ORDER-RP-1: readable now: would be relayed" in printed
    assert "Dry run: nothing changed" in printed
    assert len(parked(saga)) == 1
    assert log(saga).events("ORDER-RP-1") == []


def test_apply_publishes_what_is_readable_now_and_leaves_the_unreadable_with_its_reason(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    put_unreadable_row(saga, "ORDER-RP-POISON")
    relay_now(saga)  # the relay parks the unreadable row itself
    relay_later(saga)
    saga.driver.send(order("ORDER-RP-2"))
    saga.driver.pump(timeout=60)
    park_a_readable_record(saga, "ORDER-RP-2")

    assert replay_parked(deployed, "--apply") == 1, "one record is still unreadable"

    printed = capsys.readouterr().out
    assert "ORDER-RP-2: replayed: OrderCharged" in printed
    assert "ORDER-RP-POISON: still unreadable" in printed
    assert [e.event_id for e in log(saga).events("ORDER-RP-2")] == ["ORDER-RP-2/attempt-1/charged"]
    assert [p["orderId"] for p in parked(saga)] == ["ORDER-RP-POISON"], "the unreadable one stays"


def test_an_empty_parking_queue_is_said_in_one_line(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert replay_parked(deployed, "--apply") == 0

    assert capsys.readouterr().out.strip().endswith("is empty: nothing to replay.")


def test_a_stack_that_does_not_exist_is_one_line_not_a_traceback(saga: Saga) -> None:
    with pytest.raises(SystemExit, match="saga replay-parked: AWS refused DescribeStacks"):
        cli.main(["replay-parked", "--stack", "no-such-stack", "--region", REGION])


# -- a parked body is a claim to check: the claims table decides ---------------------------------


def store(saga: Saga) -> ClaimsStore:
    return ClaimsStore(saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION))


def released_as_never_charged(row: dict[str, Any]) -> dict[str, Any]:
    """A planted image: the row, said to have been released as never charged (a re-queue)."""
    planted = {k: v for k, v in copy.deepcopy(row).items() if k not in {"chargeId", "completedAt"}}
    planted.update(
        status={"S": "RELEASED"},
        releaseReason={"S": "NOT_CHARGED"},
        releasedAt={"S": "2026-01-01T00:00:00Z"},
    )
    return planted


def completed_with(row: dict[str, Any], charge_id: str) -> dict[str, Any]:
    """A planted image: the row, said to have been completed with ``charge_id`` (an OrderCharged)."""
    planted = copy.deepcopy(row)
    planted.pop("openClaim", None)
    planted.update(
        status={"S": "COMPLETED"}, chargeId={"S": charge_id}, completedAt={"S": "2026-01-01T00:00:00Z"}
    )
    return planted


def orders_waiting(saga: Saga) -> int:
    """Messages on the orders queue, delayed ones included (a re-queue is sent with a delay)."""
    attributes = saga.driver.sqs.get_queue_attributes(
        QueueUrl=saga.stack.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesDelayed"]
    )


def test_a_planted_release_of_a_charged_order_requeues_nothing(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    relay_later(saga)
    saga.driver.send(order("ORDER-RP-3"))
    saga.driver.pump(timeout=60)
    charged = row_now(saga, "ORDER-RP-3")
    park_a_readable_record(saga, "ORDER-RP-3", released_as_never_charged(charged))
    reads: list[dict[str, Any]] = []

    def read(**kwargs: Any) -> None:
        reads.append(dict(kwargs["params"]))

    # The command's clients are made after this, from the test's session: they carry the hook.
    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION._session.register("provide-client-params.dynamodb.GetItem", read)

    assert replay_parked(deployed, "--apply") == 1, "a record the table contradicts is for a person"

    printed = capsys.readouterr().out
    assert "ORDER-RP-3: not replayed, the claims table says otherwise: the claim is COMPLETED" in printed
    assert orders_waiting(saga) == 0, "no order was sent again"
    assert log(saga).events("ORDER-RP-3") == []
    assert row_now(saga, "ORDER-RP-3") == charged
    assert [p["orderId"] for p in parked(saga)] == ["ORDER-RP-3"], "left on the queue, for a person"
    # The claim was read as the saga's own decisions read it: the base table's item, strongly consistent.
    assert reads == [
        {"TableName": saga.stack.table_name, "Key": {"orderId": {"S": "ORDER-RP-3"}}, "ConsistentRead": True}
    ]


def test_a_planted_completion_announces_nothing_unless_the_row_holds_that_charge(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    relay_later(saga)
    saga.driver.send(order("ORDER-RP-4"))
    saga.driver.pump(timeout=60)
    park_a_readable_record(saga, "ORDER-RP-4", completed_with(row_now(saga, "ORDER-RP-4"), "pi_forged"))
    store(saga).claim(order_from_message(order("ORDER-RP-5")), token="open-execution")
    park_a_readable_record(saga, "ORDER-RP-5", completed_with(row_now(saga, "ORDER-RP-5"), "pi_forged"))

    assert replay_parked(deployed, "--apply") == 1

    printed = capsys.readouterr().out
    assert "ORDER-RP-4: not replayed" in printed
    assert "completed with charge pi_" in printed
    assert "ORDER-RP-5: not replayed, the claims table says otherwise: the claim is CLAIMED" in printed
    assert log(saga).events("ORDER-RP-4") == []
    assert log(saga).events("ORDER-RP-5") == []
    assert sorted(str(p["orderId"]) for p in parked(saga)) == ["ORDER-RP-4", "ORDER-RP-5"]


def test_a_parked_release_is_requeued_with_the_order_the_table_holds_not_the_bodys(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    relay_later(saga)
    claims = store(saga)
    message = order_from_message(order("ORDER-RP-6"))
    claims.claim(message, token="failed-execution")
    claims.release(
        "ORDER-RP-6",
        token="failed-execution",
        reason=ReleaseReason.NOT_CHARGED,
        payment_attempt=message.payment_attempt,
    )
    released = row_now(saga, "ORDER-RP-6")
    tampered = copy.deepcopy(released)
    tampered["order"]["M"]["paymentMethod"] = {"S": "pm_of_the_planter"}
    tampered["order"]["M"]["amount"] = {"N": "1"}
    park_a_readable_record(saga, "ORDER-RP-6", tampered)

    assert replay_parked(deployed, "--apply") == 0

    assert "ORDER-RP-6: replayed: OrderReleased, OrderRequeued" in capsys.readouterr().out
    assert orders_waiting(saga) == 1
    # The events and the re-queued message are built from the same order: the row's, not the body's.
    amounts = {e.detail_type: e.detail["amount"] for e in log(saga).events("ORDER-RP-6")}
    assert amounts == {"OrderReleased": 15000, "OrderRequeued": 15000}
    assert released["order"]["M"]["amount"] == {"N": "15000"}


def test_a_planted_never_charged_release_of_a_declined_order_requeues_nothing(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decline is final for its payment attempt: a body saying it was released as never charged would
    send the declined card to Stripe again. The row's release reason decides, not the body's."""
    relay_later(saga)
    saga.driver.send(order("ORDER-RP-7", paymentMethod="pm_card_chargeDeclined"))
    saga.driver.pump(timeout=60)
    declined = row_now(saga, "ORDER-RP-7")
    assert declined["releaseReason"] == {"S": "DECLINED"}
    park_a_readable_record(saga, "ORDER-RP-7", released_as_never_charged(declined))

    assert replay_parked(deployed, "--apply") == 1

    printed = capsys.readouterr().out
    assert (
        "ORDER-RP-7: not replayed, the claims table says otherwise: the claim is RELEASED DECLINED" in printed
    )
    assert orders_waiting(saga) == 0
    assert log(saga).events("ORDER-RP-7") == []
