"""Reading every message of a small SQS queue once, without deleting any: what a person's command does.

``saga redrive``'s dry run (the dead-letter queue) and ``saga replay-parked`` (the relay's parking
queue) both need each message of a queue another process may also read, once, before deciding
anything. They differ in what comes after: the survey shows every message again at once; the
replay keeps them hidden while it works through them, deleting the ones it replayed.
"""

from __future__ import annotations

from typing import Any


def receive_each_once(
    sqs: Any, queue_url: str, *, hide_seconds: int, seen: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """Every message on the queue by MessageId, in the order first received, each as its latest
    receive returned it (SQS honours the latest receipt handle), with all its attributes.

    Each batch is hidden for ``hide_seconds`` so that the next receive returns the messages behind
    it, not the same ten again; a batch that brings nothing new ends the reading (long polling asks
    every server, so an empty answer means the queue is empty). ``seen`` is filled as the messages
    come, so a caller that must show them again can do so even when a receive fails half way.
    """
    found: dict[str, dict[str, Any]] = {} if seen is None else seen
    while True:
        batch = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=hide_seconds,
            WaitTimeSeconds=1,
        ).get("Messages", [])
        fresh = [m for m in batch if m["MessageId"] not in found]
        for message in batch:
            found[message["MessageId"]] = message
        if not fresh:
            return found
