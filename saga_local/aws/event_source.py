"""The SQS event source mapping, as Lambda runs it: poll, batch, invoke, delete what succeeded.

* a batch of up to ``batch_size`` messages becomes one invocation with an ``aws:sqs`` event;
* with ``ReportBatchItemFailures``, the messages named in ``batchItemFailures`` stay on the queue
  and the rest are deleted; a malformed response or a failed invocation fails the whole batch;
* a message that is not deleted becomes visible again after the visibility timeout, and the
  queue's redrive policy moves it to the dead-letter queue after ``maxReceiveCount`` receives
  (moto's SQS applies that, as SQS does).
* a batch stays invisible while its invocation runs. AWS asks for a visibility timeout of at least
  the function's timeout (six times, says Lambda's guide), so an invocation never outlives it; the
  local stack compresses the timeout to seconds, so that a failed message comes back quickly, and
  keeps that promise by extending the batch's visibility while the invocation runs. Without it a
  slow batch on a busy machine came back while it ran, was received again and again, and was
  dead-lettered after ``maxReceiveCount`` receives: a delivery lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@dataclass
class EventSourceStats:
    batches: int = 0
    messages: int = 0
    deleted: int = 0
    failed: int = 0
    invocation_errors: int = 0
    throttled: int = 0
    #: Polls that raised (a failed receive): retried, as Lambda's pollers retry.
    poll_errors: int = 0
    #: Visibility extensions of batches still being handled (see the module's docstring).
    extended: int = 0
    #: Deletes SQS refused (the message comes back and is handled again: a redelivery, not a loss).
    delete_failed: int = 0


@dataclass
class SqsEventSource:
    """Polls ``queue_url`` and invokes ``function_name`` through the Lambda API (so moto routes it)."""

    sqs: Any
    lambda_client: Any
    queue_url: str
    queue_arn: str
    function_name: str
    batch_size: int = 10
    report_batch_item_failures: bool = True
    region: str = "us-east-1"
    stats: EventSourceStats = field(default_factory=EventSourceStats)
    #: The queue's visibility timeout in seconds (read from the queue when None).
    visibility_timeout: int | None = None

    def poll_once(self, wait_seconds: int = 0) -> int:
        """Receive one batch and hand it to the function. Returns how many messages were received."""
        response = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=wait_seconds,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = response.get("Messages", [])
        if not messages:
            return 0
        self.stats.batches += 1
        self.stats.messages += len(messages)
        with self._kept_invisible(messages):
            failed_ids = self._invoke(messages)
        to_delete = [m for m in messages if m["MessageId"] not in failed_ids]
        refused = 0
        for start in range(0, len(to_delete), 10):
            chunk = to_delete[start : start + 10]
            response = self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
            refused += len(response.get("Failed", []))
        self.stats.delete_failed += refused
        self.stats.deleted += len(to_delete) - refused
        self.stats.failed += len(messages) - len(to_delete)
        return len(messages)

    @contextlib.contextmanager
    def _kept_invisible(self, messages: list[dict[str, Any]]) -> Iterator[None]:
        """Extend the batch's visibility every half timeout until the block ends."""
        timeout = self._visibility_timeout()
        done = threading.Event()

        def extend() -> None:
            while not done.wait(timeout / 2):
                entries = [
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": timeout}
                    for i, m in enumerate(messages)
                ]
                with contextlib.suppress(Exception):  # a missed extension is retried half a timeout on
                    self.sqs.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)
                    self.stats.extended += 1

        heartbeat = threading.Thread(target=extend, daemon=True)
        heartbeat.start()
        try:
            yield
        finally:
            done.set()
            heartbeat.join()

    def _visibility_timeout(self) -> int:
        if self.visibility_timeout is None:
            attributes = self.sqs.get_queue_attributes(
                QueueUrl=self.queue_url, AttributeNames=["VisibilityTimeout"]
            )["Attributes"]
            self.visibility_timeout = max(int(attributes["VisibilityTimeout"]), 1)
        return self.visibility_timeout

    def _invoke(self, messages: list[dict[str, Any]]) -> set[str]:
        """Invoke the function; return the MessageIds that must stay on the queue."""
        all_ids = {m["MessageId"] for m in messages}
        event = {"Records": [self._record(m) for m in messages]}
        try:
            response = self.lambda_client.invoke(
                FunctionName=self.function_name, Payload=json.dumps(event).encode()
            )
        except self.lambda_client.exceptions.TooManyRequestsException:
            self.stats.throttled += 1
            return all_ids
        payload = response["Payload"].read()
        if response.get("FunctionError"):
            self.stats.invocation_errors += 1
            return all_ids
        if not self.report_batch_item_failures:
            return set()
        try:
            failures = json.loads(payload or b"{}").get("batchItemFailures", [])
            failed = {f["itemIdentifier"] for f in failures}
        except (ValueError, TypeError, KeyError, AttributeError):
            return all_ids  # Lambda treats a malformed response as a failure of the whole batch
        if not failed <= all_ids:
            return all_ids  # an unknown itemIdentifier also fails the whole batch
        return failed

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        body = message["Body"]
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": body,
            "attributes": message.get("Attributes", {}),
            "messageAttributes": {
                name: {
                    "stringValue": value.get("StringValue"),
                    "dataType": value.get("DataType"),
                    "stringListValues": [],
                    "binaryListValues": [],
                }
                for name, value in message.get("MessageAttributes", {}).items()
            },
            "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
            "eventSource": "aws:sqs",
            "eventSourceARN": self.queue_arn,
            "awsRegion": self.region,
        }

    def run(
        self, stop: threading.Event, *, idle_sleep: float = 0.05, saturated: Callable[[], bool] | None = None
    ) -> None:
        """Poll until ``stop`` is set (one poller; Lambda scales pollers, we do not need to).

        ``saturated``, if given, pauses polling while it returns true: a local run caps how many
        executions are in flight, as a real account's concurrency would, so that a large run is
        not thousands of threads fighting over two cores.
        """
        while not stop.is_set():
            try:
                polled = 0 if saturated is not None and saturated() else self.poll_once()
            except Exception:  # noqa: BLE001 - a poller must outlive a failed poll, as Lambda's does
                # A poll can fail, as a real receive can (it times out, it is throttled). Lambda's
                # pollers retry a failed poll; so does this one. Nothing is lost: an unreceived
                # message stays queued, a received one reappears after its visibility timeout.
                self.stats.poll_errors += 1
                polled = 0
            if not polled:
                time.sleep(idle_sleep)
