"""The local SQS event source keeps polling through a failed receive, as Lambda's pollers do."""

from __future__ import annotations

import threading
from typing import Any

from saga_local.aws.event_source import SqsEventSource


class FlakySqs:
    """Raises on the first receive, then serves one message."""

    def __init__(self, stop: threading.Event) -> None:
        self.receives = 0
        self.deleted: list[str] = []
        self._stop = stop

    def receive_message(self, **_: Any) -> dict[str, Any]:
        self.receives += 1
        if self.receives == 1:
            raise RuntimeError("Set changed size during iteration")
        if self.receives == 2:
            message = {"MessageId": "m-1", "ReceiptHandle": "r-1", "Body": "{}", "Attributes": {}}
            return {"Messages": [message]}
        self._stop.set()
        return {}

    def delete_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, str]]) -> dict[str, Any]:
        self.deleted.extend(entry["ReceiptHandle"] for entry in Entries)
        return {"Successful": [{"Id": entry["Id"]} for entry in Entries], "Failed": []}

    def get_queue_attributes(self, **_: Any) -> dict[str, Any]:
        return {"Attributes": {"VisibilityTimeout": "30"}}

    def change_message_visibility_batch(self, **_: Any) -> dict[str, Any]:
        return {"Successful": [], "Failed": []}


class Lambda:
    def __init__(self) -> None:
        self.invocations = 0

    def invoke(self, **_: Any) -> dict[str, Any]:
        self.invocations += 1

        class Payload:
            @staticmethod
            def read() -> bytes:
                return b'{"batchItemFailures": []}'

        return {"StatusCode": 200, "Payload": Payload()}


def test_a_failed_receive_does_not_kill_the_poller_and_the_next_message_is_delivered() -> None:
    stop = threading.Event()
    sqs, function = FlakySqs(stop), Lambda()
    source = SqsEventSource(sqs, function, "queue-url", "queue-arn", "start-function")

    source.run(stop, idle_sleep=0.0)

    assert source.stats.poll_errors == 1
    assert function.invocations == 1  # the message after the failed receive reached the function
    assert sqs.deleted == ["r-1"]


def test_a_failed_in_flight_count_does_not_kill_the_poller_either() -> None:
    stop = threading.Event()
    sqs, function = FlakySqs(stop), Lambda()
    source = SqsEventSource(sqs, function, "queue-url", "queue-arn", "start-function")
    checks = iter([RuntimeError("execution status not set yet")])

    def saturated() -> bool:
        error = next(checks, None)
        if error is not None:
            raise error
        return False

    source.run(stop, idle_sleep=0.0, saturated=saturated)

    assert source.stats.poll_errors == 2  # the count, then the receive
    assert function.invocations == 1
