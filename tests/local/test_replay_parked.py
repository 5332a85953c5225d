"""``saga replay-parked`` against a stack (``--stack``, its outputs read from CloudFormation, on moto).

A record the relay parked runs through the relay's own code again: a dry run changes nothing, and
``--apply`` publishes what is readable now and leaves what is still unreadable, with its reason.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from saga_local import cli
from saga_local.aws.stack import REGION
from tests.helpers import order
from tests.local.outcome_support import log, parked, put_unreadable_row, relay_later, relay_now

if TYPE_CHECKING:
    from tests.helpers import Saga


def park_a_readable_record(saga: Saga, order_id: str) -> None:
    """A completed claim's record, parked as an older relay that could not read it would have."""
    row: dict[str, Any] = saga.driver.dynamodb.get_item(
        TableName=saga.stack.table_name, Key={"orderId": {"S": order_id}}, ConsistentRead=True
    )["Item"]
    record = {
        "eventName": "MODIFY",
        "eventSource": "aws:dynamodb",
        "dynamodb": {
            "Keys": {"orderId": {"S": order_id}},
            "OldImage": {**row, "status": {"S": "CLAIMED"}},
            "NewImage": row,
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
