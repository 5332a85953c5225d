"""Redelivery: SQS hands the start function a message it already delivered.

A poller's delete that was lost, or a visibility timeout that ran out while the first delivery was
being handled, brings the same message back. The harness plays that on purpose (chaos, the fault
tests) to show the start function re-attaches to the execution the first delivery started, or
answers ``ExecutionAlreadyExists`` once it closed, and never starts a second one.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from saga_local.stack.driver import Driver


@dataclass(frozen=True)
class Redelivery:
    """What the start function answered to a redelivered message."""

    message_id: str
    failed: bool  # the record was reported failed (or the whole invocation failed): SQS would retry
    function_error: str | None


def redeliver(driver: Driver, message_id: str, body: str, *, receive_count: int = 2) -> Redelivery:
    """SQS delivers ``message_id`` again: invoke the start function with the same record.

    This is what happens when a poller's delete was lost or the visibility timeout ran out while
    the first delivery was being handled: the same MessageId and body, a new receipt handle and a
    higher receive count. The start function must re-attach to the execution the first delivery
    started (while it runs) or answer ``ExecutionAlreadyExists`` (once it closed), and never
    start a second execution.
    """
    source = driver.event_source
    record = source._record(
        {
            "MessageId": message_id,
            "ReceiptHandle": f"redelivery-{uuid.uuid4()}",
            "Body": body,
            "Attributes": {"ApproximateReceiveCount": str(receive_count)},
        }
    )
    response = driver.lambda_client.invoke(
        FunctionName=source.function_name, Payload=json.dumps({"Records": [record]}).encode()
    )
    payload = response["Payload"].read()
    error = response.get("FunctionError")
    failed = bool(error)
    if not failed:
        failures = json.loads(payload or b"{}").get("batchItemFailures", [])
        failed = any(f.get("itemIdentifier") == message_id for f in failures)
    return Redelivery(message_id, failed, error)
