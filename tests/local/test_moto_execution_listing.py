"""Listing and describing executions while others start, as chaos's redeliveries and the in-flight
cap do: moto appends a new execution to its list before it sets its status, and reading that status
raised, killing the thread that listed. The adapter lists between starts."""

from __future__ import annotations

import json
import sys
import threading
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from saga_local.aws.moto_adapter import patched_moto
from saga_local.runtime.faults import FaultPlan
from saga_local.runtime.runtimes import InProcessRuntime

if TYPE_CHECKING:
    from collections.abc import Iterator

REGION = "us-east-1"
DEFINITION = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}


@pytest.fixture
def sfn() -> Iterator[Any]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with (
            mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
            patched_moto(InProcessRuntime({}, faults=FaultPlan())),
        ):
            yield boto3.client("stepfunctions", region_name=REGION)
    finally:
        sys.setswitchinterval(interval)


def test_listing_running_executions_while_others_start_never_fails(sfn: Any) -> None:
    arn = sfn.create_state_machine(
        name="orders", definition=json.dumps(DEFINITION), roleArn="arn:aws:iam::123456789012:role/sfn"
    )["stateMachineArn"]
    starting = threading.Event()
    errors: list[BaseException] = []
    seen = 0

    def start(worker: int) -> None:
        for n in range(150):
            sfn.start_execution(stateMachineArn=arn, name=f"order-{worker}-{n}", input="{}")

    def watch() -> None:
        nonlocal seen
        while starting.is_set():
            try:
                for summary in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
                    sfn.describe_execution(executionArn=summary["executionArn"])
                seen += 1
            except Exception as exc:  # noqa: BLE001 - what the test counts
                errors.append(exc)

    starting.set()
    watchers = [threading.Thread(target=watch) for _ in range(2)]
    starters = [threading.Thread(target=start, args=(i,)) for i in range(3)]
    for thread in watchers + starters:
        thread.start()
    for thread in starters:
        thread.join()
    starting.clear()
    for thread in watchers:
        thread.join()

    assert errors == []
    assert seen > 0
    assert len(sfn.list_executions(stateMachineArn=arn, maxResults=1000)["executions"]) == 450
