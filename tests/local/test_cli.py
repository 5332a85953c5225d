"""The saga command against a deployed stack (`--stack NAME` reads its CloudFormation outputs), on moto."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from saga_local import cli
from saga_local.stack import REGION
from tests.statemachine.conftest import Saga


@pytest.fixture
def deployed(saga: Saga) -> str:
    """A CloudFormation stack whose outputs name the provisioned resources, as `sam deploy` leaves it."""
    outputs = saga.stack.outputs
    template = {
        "Resources": {"Anchor": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="payment-saga", TemplateBody=json.dumps(template)
    )
    return "payment-saga"


def test_send_and_trace_against_a_deployed_stack(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["send", "--stack", deployed, "--region", REGION, "--copies", "2"]) == 0
    sent = capsys.readouterr().out
    names = [line.split("saga trace ")[1].strip() for line in sent.splitlines() if "saga trace " in line]
    assert len(names) == 2

    saga.driver.pump()
    assert saga.charges("ORDER-003") == 1
    assert cli.main(["trace", names[0], "--stack", deployed, "--region", REGION]) == 0
    trace = capsys.readouterr().out
    assert "Claim Order" in trace
    assert ("Order Charged" in trace) or ("Duplicate Suppressed" in trace)


def test_send_rejects_a_missing_local_stack_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(cli, "STATE_FILE", tmp_path / "absent.json")

    with pytest.raises(SystemExit, match="saga up"):
        cli.main(["send"])


def test_send_builds_the_order_from_flags(saga: Saga, deployed: str) -> None:
    cli.main(
        [
            "send",
            "--stack",
            deployed,
            "--region",
            REGION,
            "--order-id",
            "ORDER-FLAGS",
            "--amount",
            "999",
            "--payment-method",
            "pm_card_chargeDeclined",
        ]
    )

    saga.driver.pump()

    claim = saga.driver.claim("ORDER-FLAGS")
    assert claim is not None
    assert (claim["releaseReason"], claim["amount"], claim["currency"]) == ("DECLINED", "999", "BRL")


def test_redrive_against_a_deployed_stack_charges_each_order_once(saga: Saga, deployed: str) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    for _ in range(3):  # a dead-letter queue full of duplicates of one order
        sqs.send_message(
            QueueUrl=saga.stack.dead_letter_queue_url,
            MessageBody=json.dumps(
                {
                    "orderId": "ORDER-DLQ",
                    "amount": 500,
                    "currency": "USD",
                    "customerId": "c",
                    "paymentMethod": "pm_card_visa",
                }
            ),
        )

    assert cli.main(["redrive", "--stack", deployed, "--region", REGION]) == 0
    saga.driver.pump()

    assert saga.charges("ORDER-DLQ") == 1
    assert saga.driver.dead_letters() == []
