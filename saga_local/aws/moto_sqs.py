"""moto's SQS made safe and linear for many pollers: what :mod:`saga_local.aws.moto_adapter` patches in.

* the retention check (:func:`retention_check`) reads the queue's retention period directly: moto
  computed every queue attribute (walking every message) for every message it considered receiving,
  which made a receive quadratic in the queue's depth. Same answer, linear time.
* the queue attributes (:class:`QueueAttributes`) are computed one by one as they are read.
* receive, delete and visibility change (:func:`receive_locked`, :func:`delete_locked`,
  :func:`visibility_locked`) each run behind their queue's own lock (the one moto's send already
  takes). moto checks a message's visibility and marks it received with no lock, so two concurrent
  pollers could both receive one message (a redelivery SQS would not make), and it rebuilds a
  queue's message list on delete, so a message sent meanwhile could vanish (a loss SQS would never
  make). A long poll waits outside the lock, so one poller never holds up another.
"""

from __future__ import annotations

import functools
import json
import time as _time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from moto.core.utils import camelcase_to_underscores

if TYPE_CHECKING:
    from collections.abc import Iterator


def retention_check(self: Any, queue_name: str, message: Any) -> bool:
    """moto's ``is_message_valid_based_on_retention_period``, without computing every attribute."""
    retention_period = int(self.get_queue(queue_name).message_retention_period)
    return bool(retention_period + message.sent_timestamp / 1000 > _time.time())


def receive_locked(receive: Any) -> Any:
    """``SQSBackend.receive_message`` with each look at the queue under the queue's lock."""

    @functools.wraps(receive)
    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        queue = self.get_queue(queue_name)
        deadline = _time.monotonic() + wait_seconds_timeout
        while True:
            with queue._messages_lock:
                received: list[Any] = receive(
                    self, queue_name, count, 0, visibility_timeout, message_attribute_names
                )
            remaining = deadline - _time.monotonic()
            if received or remaining <= 0:
                return received
            queue.wait_for_messages(min(remaining, 1.0))

    return receive_message


def delete_locked(delete: Any) -> Any:
    """``Queue.delete_message`` under the queue's lock: moto rebuilds the message list there."""

    @functools.wraps(delete)
    def delete_message(self: Any, receipt_handle: str) -> None:
        with self._messages_lock:
            delete(self, receipt_handle)

    return delete_message


def visibility_locked(change: Any) -> Any:
    """``SQSBackend.change_message_visibility`` under the queue's lock."""

    @functools.wraps(change)
    def change_message_visibility(
        self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int
    ) -> None:
        with self.get_queue(queue_name)._messages_lock:
            change(self, queue_name, receipt_handle, visibility_timeout)

    return change_message_visibility


class QueueAttributes(Mapping[str, Any]):
    """moto's ``Queue.attributes``, each value computed when it is read, not all on every read.

    moto builds the whole dict, message counts included (each a walk over every message), for
    every send (to read ``ContentBasedDeduplication``) and several times per GetQueueAttributes:
    a send to the outcome archive, which only grows, cost more the longer a run went. Same keys,
    same values (booleans as ``"true"``/``"false"``), same order.
    """

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        names = list(queue.BASE_ATTRIBUTES)
        if queue.fifo_queue:
            names += queue.FIFO_ATTRIBUTES
        if queue.kms_master_key_id:
            names += queue.KMS_ATTRIBUTES
        if queue.policy:
            names.append("Policy")
        if queue.redrive_policy:
            names.append("RedrivePolicy")
        self._names = dict.fromkeys(names)

    def __getitem__(self, name: str) -> Any:
        if name not in self._names:
            raise KeyError(name)
        if name == "Policy":
            value = self._queue.policy
        elif name == "RedrivePolicy" and self._queue.redrive_policy:
            value = json.dumps(self._queue.redrive_policy)
        else:
            value = getattr(self._queue, camelcase_to_underscores(name))
        return str(value).lower() if isinstance(value, bool) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
