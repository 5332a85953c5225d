"""moto's SQS under the local stack's concurrent pollers behaves as SQS does.

* pollers racing on one queue never receive a message that another holds in flight;
* a message sent while another is deleted is still on the queue.

moto checks visibility and marks a message received with no lock, and rebuilds a queue's message
list on delete: without the adapter's locks, both happen (the switch interval is shortened so that
a thread is interrupted between the check and the change, as it is on a loaded machine).
"""

from __future__ import annotations

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
    from collections.abc import Callable, Iterator

REGION = "us-east-1"


@pytest.fixture
def sqs() -> Iterator[Any]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with mock_aws(), patched_moto(InProcessRuntime({}, faults=FaultPlan())):
            yield boto3.client("sqs", region_name=REGION)
    finally:
        sys.setswitchinterval(interval)


def in_threads(count: int, work: Callable[[int], None]) -> None:
    barrier = threading.Barrier(count)

    def run(i: int) -> None:
        barrier.wait()
        work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_racing_pollers_never_receive_a_message_another_holds(sqs: Any) -> None:
    for round_ in range(5):
        queue = sqs.create_queue(QueueName=f"orders-{round_}", Attributes={"VisibilityTimeout": "300"})
        url = queue["QueueUrl"]
        for start in range(0, 200, 10):
            sqs.send_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(start + i)} for i in range(10)]
            )
        received: list[str] = []

        def poll(_: int, url: str = url, received: list[str] = received) -> None:
            while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
                received.extend(m["MessageId"] for m in messages)

        in_threads(4, poll)
        assert len(received) == len(set(received)) == 200


def test_a_message_sent_while_another_is_deleted_stays_queued(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
    for start in range(0, 400, 10):
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"old-{start + i}"} for i in range(10)]
        )
    held: list[dict[str, Any]] = []
    while len(held) < 400:
        held += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]

    def work(i: int) -> None:
        if i % 2:
            for message in held[i // 2 :: 2]:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        else:
            for n in range(100):
                sqs.send_message(QueueUrl=url, MessageBody=f"new-{i}-{n}")

    in_threads(4, work)
    bodies: list[str] = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages"):
        bodies += [m["Body"] for m in messages]
    assert sorted(bodies) == sorted(f"new-{i}-{n}" for i in (0, 2) for n in range(100))
