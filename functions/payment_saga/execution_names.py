"""The name of the execution a message starts: the start function's rule, read by every tool that finds it.

Step Functions allows letters, digits, ``-`` and ``_`` in at most 80 characters. An order's message
starts ``<orderId>-<MessageId>`` (the order id made safe and cut to leave room for the MessageId),
unique per SQS message so a redelivery re-attaches to the execution it started; a message the
outcome relay re-queued is named after its ``requeueEventId`` instead, the same for every copy of
one re-queue. The local tools (``saga send``, the driver's reports) derive names with these
functions rather than a copy of the rule.
"""

from __future__ import annotations

import hashlib
import re

#: Step Functions execution names: at most 80 characters of letters, digits, ``-`` and ``_``.
MAX_EXECUTION_NAME = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def name_safe(text: str) -> str:
    """``text`` with every character an execution name may not hold made ``_``."""
    return _UNSAFE.sub("_", text)


def execution_name(order_id: str, message_id: str, requeue_event_id: str | None = None) -> str:
    """``ORDER-003-<MessageId>``: unique per SQS message, readable in the console.

    A message the outcome relay re-queued carries ``requeueEventId`` (``<orderId>/attempt-<n>/requeued``):
    the relay may send one re-queue twice (it is retried after its send), and both copies must start
    one execution, so its name comes from that id instead (:func:`requeue_execution_name`).
    """
    if requeue_event_id:
        return requeue_execution_name(requeue_event_id)
    room = MAX_EXECUTION_NAME - len(message_id) - 1
    prefix = name_safe(order_id)[: max(room, 0)]
    return f"{prefix}-{message_id}" if prefix else message_id[:MAX_EXECUTION_NAME]


def requeue_execution_name(requeue_event_id: str) -> str:
    """``ORDER-003_attempt-1_requeued-<12 hex>``: the same for every copy of one re-queue.

    The id is made safe and cut to fit, and a digest of the whole id keeps two ids that sanitise
    alike (``A.B`` and ``A_B``) or share a long prefix apart.
    """
    digest = hashlib.sha256(requeue_event_id.encode()).hexdigest()[:12]
    readable = name_safe(requeue_event_id)[: MAX_EXECUTION_NAME - len(digest) - 1]
    return f"{readable}-{digest}"
