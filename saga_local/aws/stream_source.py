"""The DynamoDB stream event source mapping, as Lambda runs it: read, filter, batch, invoke, retry.

What ``template.yaml`` declares on ``OutcomeRelayFunction``'s ``DynamoDB`` event, and only that:

* records are read from the table's stream in order (one shard: moto keeps one), from
  ``TRIM_HORIZON``; one batch at a time (``ParallelizationFactor: 1``);
* ``FilterCriteria``: a record that matches none of the patterns is dropped before any invocation
  (EventBridge pattern syntax, evaluated by moto's own matcher);
* up to ``BatchSize`` matching records make one invocation with an ``aws:dynamodb`` event;
* ``ReportBatchItemFailures``: the lowest sequence number in ``batchItemFailures`` and every record
  after it are retried; an empty list means all done; an identifier that is not in the batch, or a
  malformed response, fails the whole batch (as Lambda treats them);
* a function error with ``BisectBatchOnFunctionError`` splits the failing records in two and retries
  each half (a split does not count as a retry, as in Lambda); otherwise the batch is retried whole;
* after ``MaximumRetryAttempts`` retries, what still fails is described on the ``OnFailure``
  destination (an SQS queue) in Lambda's shape (``DDBStreamBatchInfo``: shard and sequence numbers,
  not the records) and skipped, so the shard moves on;
* with ``MaximumRetryAttempts: -1`` (no bound, and no record age) a record that keeps failing is
  never skipped: the shard *stalls* on it. A poll retries it a few times at once
  (:data:`RETRIES_PER_POLL`), then stops there, and the next poll starts again from that record;
  nothing behind it is delivered meanwhile, as Lambda holds the shard until the record succeeds.

Retries within a poll are not delayed (the local stack compresses time). Records consumed are
trimmed from moto's stream (the way a stream's 24-hour retention drops them) so that a long run does
not keep them all.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from moto.events.models import EventPattern

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.template import FunctionSpec


@dataclass
class StreamSourceStats:
    read: int = 0
    matched: int = 0
    batches: int = 0
    invocations: int = 0
    function_errors: int = 0
    partial_failures: int = 0
    retries: int = 0
    bisections: int = 0
    sent_to_on_failure: int = 0
    #: Polls that raised: retried on the next poll, from the same shard iterator.
    poll_errors: int = 0
    #: Polls that stopped at a record that kept failing (an unbounded mapping: the shard waits on it).
    stalls: int = 0


@dataclass(frozen=True)
class StreamMapping:
    """The event source mapping's settings, as the template declares them."""

    batch_size: int = 100
    filters: tuple[str, ...] = ()
    report_batch_item_failures: bool = False
    bisect_on_error: bool = False
    max_retry_attempts: int = -1  # -1: until it succeeds (the shard stalls on it; see poll_once)
    on_failure_arn: str | None = None

    @classmethod
    def from_event(cls, properties: dict[str, Any], on_failure_arn: str | None) -> StreamMapping:
        """From a SAM ``DynamoDB`` event's ``Properties`` (intrinsics already resolved where needed)."""
        filters = tuple(
            item["Pattern"] for item in (properties.get("FilterCriteria") or {}).get("Filters") or []
        )
        return cls(
            batch_size=int(properties.get("BatchSize", 100)),
            filters=filters,
            report_batch_item_failures="ReportBatchItemFailures"
            in (properties.get("FunctionResponseTypes") or []),
            bisect_on_error=bool(properties.get("BisectBatchOnFunctionError", False)),
            max_retry_attempts=int(properties.get("MaximumRetryAttempts", -1)),
            on_failure_arn=on_failure_arn,
        )


#: With no bound on retries, a poll retries a failing record this many times at once, then stalls on
#: it (Lambda retries with a back-off until it succeeds: the next poll is the next try).
RETRIES_PER_POLL = 2


@dataclass
class StreamEventSource:
    """Reads ``stream_arn`` and invokes ``function_name`` through the Lambda API (so moto routes it).

    ``queue_url_of`` turns the on-failure destination's ARN into a queue URL.
    """

    streams: Any
    lambda_client: Any
    sqs: Any
    stream_arn: str
    function_name: str
    function_arn: str
    mapping: StreamMapping
    queue_url_of: Callable[[str], str]
    region: str = "us-east-1"
    stats: StreamSourceStats = field(default_factory=StreamSourceStats)

    def __post_init__(self) -> None:
        self._patterns = [EventPattern.load(pattern) for pattern in self.mapping.filters]
        self._iterator: str | None = None
        self._shard_id: str | None = None
        self._lock = threading.Lock()  # one batch at a time: ParallelizationFactor 1
        self._undelivered: list[dict[str, Any]] = []
        #: The next record to read, when the stream is read in this process (see _read_in_process).
        self._next_sequence: int | None = None

    # -- reading -----------------------------------------------------------------------------

    def _read(self) -> list[dict[str, Any]]:
        local = _read_in_process(self.stream_arn, self._next_sequence)
        if local is not None:
            if local:
                self._next_sequence = int(local[-1]["dynamodb"]["SequenceNumber"]) + 1
            return [self._record(r) for r in local]
        if self._iterator is None:
            shard = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]["Shards"][0]
            self._shard_id = shard["ShardId"]
            self._iterator = self.streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=self._shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        used = self._iterator
        response = self.streams.get_records(ShardIterator=used, Limit=1000)
        self._iterator = response["NextShardIterator"]
        _forget_iterator(used)
        return [self._record(r) for r in response.get("Records", [])]

    def _record(self, record: dict[str, Any]) -> dict[str, Any]:
        """A stream record as Lambda hands it to the function (creation time in epoch seconds)."""
        change = dict(record["dynamodb"])
        created = change.get("ApproximateCreationDateTime")
        if isinstance(created, datetime):
            change["ApproximateCreationDateTime"] = int(
                created.replace(tzinfo=created.tzinfo or UTC).timestamp()
            )
        return {
            "eventID": record["eventID"],
            "eventName": record["eventName"],
            "eventVersion": record.get("eventVersion", "1.1"),
            "eventSource": "aws:dynamodb",
            "awsRegion": record.get("awsRegion", self.region),
            "dynamodb": change,
            "eventSourceARN": self.stream_arn,
        }

    def matches(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` passes the mapping's FilterCriteria (no filter: everything passes)."""
        return not self._patterns or any(pattern.matches_event(record) for pattern in self._patterns)  # type: ignore[arg-type]

    # -- running -----------------------------------------------------------------------------

    def poll_once(self) -> int:
        """Read what the stream holds, hand the matching records over in batches. Returns records done.

        A poll that stalls (an unbounded mapping, a record that kept failing) keeps that record and
        every one after it for the next poll, and counts only the records before it as done.
        """
        with self._lock:
            # Records read but not yet delivered (a poll that raised half-way, or one that stalled)
            # go first: the shard iterator has moved past them, and Lambda would not skip them either.
            records = self._undelivered or self._read()
            if not records:
                return 0
            fresh = not self._undelivered
            self._undelivered = records
            if fresh:
                self.stats.read += len(records)
            matching = [r for r in records if self.matches(r)]
            if fresh:
                self.stats.matched += len(matching)
            for start in range(0, len(matching), self.mapping.batch_size):
                batch = matching[start : start + self.mapping.batch_size]
                left = self._deliver(batch)
                if left is not None:
                    self.stats.stalls += 1
                    held = records.index(batch[left])
                    self._undelivered = records[held:]
                    if held:
                        _trim_consumed(self.stream_arn, records[held - 1]["dynamodb"]["SequenceNumber"])
                    return held
            self._undelivered = []
            _trim_consumed(self.stream_arn, records[-1]["dynamodb"]["SequenceNumber"])
            return len(records)

    @property
    def stalled(self) -> bool:
        """Whether the shard waits on a record that kept failing (the next poll tries it again)."""
        return bool(self._undelivered)

    def drain(self, *, max_polls: int = 1000) -> int:
        """Poll until the stream has nothing new. Returns the records read."""
        total = 0
        for _ in range(max_polls):
            read = self.poll_once()
            if not read:
                return total
            total += read
        return total

    def run(self, stop: threading.Event, *, idle_sleep: float = 0.05) -> None:
        """Poll until ``stop`` is set."""
        while not stop.is_set():
            try:
                polled = self.poll_once()
            except Exception:  # noqa: BLE001 - a poller must outlive a failed poll, as Lambda's does
                self.stats.poll_errors += 1
                polled = False
            if not polled:
                # A stalled shard is tried again after a pause, as Lambda backs off its retries.
                time.sleep(idle_sleep * 10 if self.stalled else idle_sleep)

    def _deliver(self, batch: list[dict[str, Any]]) -> int | None:
        """Invoke until every record is done, sent to the on-failure destination, or (with no bound on
        retries) the poll stalls on one: then the index of the first record not done."""
        self.stats.batches += 1
        unbounded = self.mapping.max_retry_attempts < 0
        limit = RETRIES_PER_POLL if unbounded else self.mapping.max_retry_attempts
        work: deque[tuple[list[dict[str, Any]], int]] = deque([(batch, 0)])
        while work:
            records, retries = work.popleft()
            failed_from, function_error = self._invoke(records)
            if failed_from is None:
                continue
            remaining = records[failed_from:]
            if function_error and self.mapping.bisect_on_error and len(remaining) > 1:
                self.stats.bisections += 1
                middle = len(remaining) // 2
                work.appendleft((remaining[middle:], retries))
                work.appendleft((remaining[:middle], retries))
                continue
            if retries >= limit:
                if unbounded:
                    return batch.index(remaining[0])
                self._on_failure(remaining, retries + 1, function_error)
                continue
            self.stats.retries += 1
            work.appendleft((remaining, retries + 1))
        return None

    def _invoke(self, records: list[dict[str, Any]]) -> tuple[int | None, bool]:
        """(index of the first record to retry or None, whether the function failed as a whole)."""
        self.stats.invocations += 1
        try:
            response = self.lambda_client.invoke(
                FunctionName=self.function_name, Payload=json.dumps({"Records": records}).encode()
            )
        except self.lambda_client.exceptions.TooManyRequestsException:
            return 0, False
        payload = response["Payload"].read()
        if response.get("FunctionError"):
            self.stats.function_errors += 1
            return 0, True
        if not self.mapping.report_batch_item_failures:
            return None, False
        try:
            failures = json.loads(payload or b"{}").get("batchItemFailures") or []
            failed = {str(f["itemIdentifier"]) for f in failures}
        except (ValueError, TypeError, KeyError, AttributeError):
            return 0, True  # Lambda treats a malformed response as a failure of the whole batch
        if not failed:
            return None, False
        sequence = [r["dynamodb"]["SequenceNumber"] for r in records]
        if not failed <= set(sequence):
            return 0, True
        self.stats.partial_failures += 1
        return min(sequence.index(s) for s in failed), False

    def _on_failure(self, records: list[dict[str, Any]], invocations: int, function_error: bool) -> None:
        """Describe the records given up on, on the OnFailure destination (Lambda's message shape)."""
        self.stats.sent_to_on_failure += len(records)
        if self.mapping.on_failure_arn is None:
            return
        first, last = records[0]["dynamodb"], records[-1]["dynamodb"]
        message = {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": self.function_arn,
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": invocations,
            },
            "responseContext": {
                "statusCode": 200,
                "executedVersion": "$LATEST",
                "functionError": "Unhandled" if function_error else "",
            },
            "version": "1.0",
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "DDBStreamBatchInfo": {
                "shardId": self._shard_id,
                "startSequenceNumber": first["SequenceNumber"],
                "endSequenceNumber": last["SequenceNumber"],
                "approximateArrivalOfFirstRecord": first.get("ApproximateCreationDateTime"),
                "approximateArrivalOfLastRecord": last.get("ApproximateCreationDateTime"),
                "batchSize": len(records),
                "streamArn": self.stream_arn,
            },
        }
        self.sqs.send_message(
            QueueUrl=self.queue_url_of(self.mapping.on_failure_arn), MessageBody=json.dumps(message)
        )


# -- moto's stream, when it lives in this process ----------------------------------------------------


def _streams_backend() -> Any:
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    from saga_local.aws.stack import ACCOUNT_ID, REGION

    return dynamodbstreams_backends[ACCOUNT_ID][REGION]


def _forget_iterator(iterator: str) -> None:
    """moto keeps every shard iterator it ever handed out (one per read): drop the one just used."""
    _streams_backend().shard_iterators.pop(iterator, None)


def _trim_consumed(stream_arn: str, last_sequence_number: str) -> None:
    """Drop the records up to ``last_sequence_number`` from moto's shard, keeping later numbers intact.

    moto numbers a record ``starting_sequence_number + its index``: moving the start by the number of
    records dropped keeps every number (and the next one) as it was. Under the DynamoDB lock, so no
    write adds a record meanwhile.
    """
    from saga_local.aws.moto_adapter import DYNAMODB_LOCK

    backend = _streams_backend()
    with DYNAMODB_LOCK:
        try:
            shard = backend._get_table_from_arn(stream_arn).stream_shard
        except Exception:  # noqa: BLE001 - the table is gone (a stack torn down): nothing to trim
            return
        if shard is None:
            return
        consumed = int(last_sequence_number) - shard.starting_sequence_number + 1
        if consumed > 0:
            del shard.items[:consumed]
            shard.starting_sequence_number += consumed


def _read_in_process(stream_arn: str, next_sequence: int | None) -> list[dict[str, Any]] | None:
    """Up to 1,000 records from ``next_sequence`` (None: the oldest), read from moto's shard when the
    stream lives in this process; None when it does not (then the stream is read through its API).

    The same records GetRecords answers, without moto serialising them and botocore parsing them
    back: that round trip was a visible share of a busy local run's CPU, work Lambda's poller does outside
    the account. The caller copies what it hands on (moto's record dicts are its own).
    """
    from saga_local.aws.moto_adapter import DYNAMODB_LOCK

    with DYNAMODB_LOCK:
        try:
            shard = _streams_backend()._get_table_from_arn(stream_arn).stream_shard
        except Exception:  # noqa: BLE001 - not a table of this process's moto: read through the API
            return None
        if shard is None:
            return None
        start = max(next_sequence or 0, shard.starting_sequence_number)
        return list(shard.get(start, 1000))


def _streams_client(clients: Callable[[str], Any]) -> Any:
    """A DynamoDB Streams client that names the regional endpoint, which moto 5.2.5 routes.

    botocore sends a call that carries a stream ARN to the account's own endpoint
    (``<account>.streams-ddb.<region>.amazonaws.com``), which moto's in-process mock does not
    recognise; ``AWS_ACCOUNT_ID_ENDPOINT_MODE=disabled`` while the client is made keeps it regional
    (a client made with an ``endpoint_url``, for moto's server, is not affected either way).
    """
    saved = os.environ.get(_ACCOUNT_ENDPOINT_MODE)
    os.environ[_ACCOUNT_ENDPOINT_MODE] = "disabled"
    try:
        return clients("dynamodbstreams")
    finally:
        if saved is None:
            os.environ.pop(_ACCOUNT_ENDPOINT_MODE, None)
        else:
            os.environ[_ACCOUNT_ENDPOINT_MODE] = saved


_ACCOUNT_ENDPOINT_MODE = "AWS_ACCOUNT_ID_ENDPOINT_MODE"


def stream_event_source(
    spec: FunctionSpec,
    *,
    clients: Callable[[str], Any],
    resolve: Callable[[Any], Any],
    function_name: str,
    function_arn: str,
    queue_url_of: Callable[[str], str],
) -> StreamEventSource | None:
    """The stream event source of ``spec``'s ``DynamoDB`` event, or None when it has none."""
    for event in spec.events.values():
        if event.get("Type") != "DynamoDB":
            continue
        properties = event["Properties"]
        destination = ((properties.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
        return StreamEventSource(
            streams=_streams_client(clients),
            lambda_client=clients("lambda"),
            sqs=clients("sqs"),
            stream_arn=str(resolve(properties["Stream"])),
            function_name=function_name,
            function_arn=function_arn,
            mapping=StreamMapping.from_event(
                properties, str(resolve(destination)) if destination is not None else None
            ),
            queue_url_of=queue_url_of,
        )
    return None
