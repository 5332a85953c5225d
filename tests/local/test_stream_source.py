"""The local stream event source keeps Lambda's promises: partial failures, bisection, retries, on-failure.

``saga_local.aws.stream_source`` stands in for the event source mapping of OutcomeRelayFunction; what the
relay's at-least-once delivery rests on is checked here with a scripted function, record by record.
"""

from __future__ import annotations

import io
import json
from typing import Any

from saga_local.aws.stream_source import StreamEventSource, StreamMapping


def records(n: int) -> list[dict[str, Any]]:
    return [
        {
            "eventName": "MODIFY",
            "dynamodb": {"SequenceNumber": str(100 + i), "NewImage": {"n": {"N": str(i)}}},
        }
        for i in range(n)
    ]


class ScriptedLambda:
    """Fails the records whose number is in ``poison`` (as a partial failure, or as a crash)."""

    class exceptions:
        class TooManyRequestsException(Exception):
            pass

    def __init__(self, poison: set[int], *, crash: bool = False, fail_times: int = 10**6) -> None:
        self.poison = poison
        self.crash = crash
        self.fail_times = fail_times
        self.batches: list[list[int]] = []
        self.done: list[int] = []

    def invoke(self, FunctionName: str, Payload: bytes) -> dict[str, Any]:
        batch = json.loads(Payload)["Records"]
        numbers = [int(r["dynamodb"]["NewImage"]["n"]["N"]) for r in batch]
        self.batches.append(numbers)
        failing = [r for r, n in zip(batch, numbers, strict=True) if n in self.poison and self.fail_times > 0]
        if failing:
            self.fail_times -= 1
        if failing and self.crash:
            return {"FunctionError": "Unhandled", "Payload": io.BytesIO(b'{"errorType": "Boom"}')}
        first = numbers.index(int(failing[0]["dynamodb"]["NewImage"]["n"]["N"])) if failing else len(numbers)
        self.done.extend(numbers[:first])
        failures = [{"itemIdentifier": failing[0]["dynamodb"]["SequenceNumber"]}] if failing else []
        return {"Payload": io.BytesIO(json.dumps({"batchItemFailures": failures}).encode())}


class Queue:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send_message(self, QueueUrl: str, MessageBody: str) -> None:
        self.messages.append(json.loads(MessageBody))


def source(function: ScriptedLambda, queue: Queue, **mapping: Any) -> StreamEventSource:
    return StreamEventSource(
        streams=None,
        lambda_client=function,
        sqs=queue,
        stream_arn="arn:aws:dynamodb:us-east-1:123456789012:table/claims/stream/1",
        function_name="relay",
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:relay",
        mapping=StreamMapping(on_failure_arn="arn:aws:sqs:us-east-1:123456789012:failed", **mapping),
        queue_url_of=lambda arn: arn,
    )


def test_a_reported_failure_retries_from_that_record_and_keeps_the_ones_before() -> None:
    function, queue = ScriptedLambda({3}, fail_times=2), Queue()
    source(function, queue, report_batch_item_failures=True, max_retry_attempts=5)._deliver(records(6))

    assert function.batches == [[0, 1, 2, 3, 4, 5], [3, 4, 5], [3, 4, 5]]
    assert function.done == [0, 1, 2, 3, 4, 5]
    assert queue.messages == []


def test_a_record_that_always_fails_goes_to_the_on_failure_queue_and_the_shard_moves_on() -> None:
    function, queue = ScriptedLambda({2}), Queue()
    source(function, queue, report_batch_item_failures=True, max_retry_attempts=2)._deliver(records(4))

    assert function.batches == [[0, 1, 2, 3], [2, 3], [2, 3]]
    (message,) = queue.messages
    info = message["DDBStreamBatchInfo"]
    assert (info["startSequenceNumber"], info["endSequenceNumber"], info["batchSize"]) == ("102", "103", 2)
    assert message["requestContext"]["condition"] == "RetryAttemptsExhausted"


def test_a_crash_bisects_the_batch_down_to_the_poison_record() -> None:
    function, queue = ScriptedLambda({5}, crash=True), Queue()
    source(function, queue, bisect_on_error=True, max_retry_attempts=1)._deliver(records(8))

    assert function.done == [0, 1, 2, 3, 4, 6, 7]
    (message,) = queue.messages
    assert message["DDBStreamBatchInfo"]["startSequenceNumber"] == "105"
    assert message["DDBStreamBatchInfo"]["batchSize"] == 1
    assert message["responseContext"]["functionError"] == "Unhandled"


def test_without_bisection_a_crash_gives_up_the_whole_batch() -> None:
    function, queue = ScriptedLambda({1}, crash=True), Queue()
    source(function, queue, max_retry_attempts=1)._deliver(records(3))

    assert function.done == []
    assert queue.messages[0]["DDBStreamBatchInfo"]["batchSize"] == 3


class Stream:
    """What ``_read`` would return: the records of one read, then nothing."""

    def __init__(self, source: StreamEventSource, batch: list[dict[str, Any]]) -> None:
        self.pending = [batch]
        source._read = self.read  # type: ignore[method-assign]

    def read(self) -> list[dict[str, Any]]:
        return self.pending.pop(0) if self.pending else []


def test_with_no_bound_a_record_that_keeps_failing_stalls_the_shard_and_nothing_is_shed(
    monkeypatch: Any,
) -> None:
    """An outage of what the relay calls (EventBridge down for an hour): the record that fails is
    never skipped and nothing behind it is delivered; once the outage ends, all go through in order."""
    monkeypatch.setattr("saga_local.aws.stream_source._trim_consumed", lambda *args: None)
    function, queue = ScriptedLambda({2}, fail_times=9), Queue()
    relay = source(function, queue, report_batch_item_failures=True, max_retry_attempts=-1, batch_size=2)
    Stream(relay, records(5))

    assert relay.drain() == 2  # 0 and 1; the shard stops at 2 (tried again by the drain's next poll)
    assert relay.stalled
    assert relay.drain() == 0  # still failing: no progress, nothing given up
    assert function.done == [0, 1]
    assert queue.messages == []  # nothing described on a failure queue: nothing shed
    assert relay.stats.stalls == 3

    for _ in range(3):
        relay.drain()
    assert function.done == [0, 1, 2, 3, 4]
    assert not relay.stalled
    assert queue.messages == []
