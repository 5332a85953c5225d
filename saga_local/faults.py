"""Fault injection: make a Lambda die, time out, run out of memory or be throttled at a chosen point.

A fault names a function (its logical id in template.yaml), a point in its invocation and a kind:

* points: ``start`` (before the handler runs), ``before:<call>`` / ``after:<call>`` around an AWS
  or provider call the handler makes, named as botocore names its events (``dynamodb.UpdateItem``,
  ``dynamodb.GetItem``, ``sfn.StartExecution``, ``sqs.SendMessage``) or ``provider.charge``, and ``end`` (the handler returned but its response is lost);
* kinds: ``die`` (the process exits: Lambda reports ``Runtime.ExitError``), ``timeout``
  (``Sandbox.Timedout``), ``oom`` (``Runtime.OutOfMemory``), ``throttle`` (only at ``start``: the
  service answers 429 ``TooManyRequestsException`` without running anything).

``after:`` faults are the interesting ones: the write or the charge *landed*, then the invocation
died, so the state machine retries a step whose side effect already happened.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

FaultKind = Literal["die", "timeout", "oom", "throttle"]

#: How each kind reaches the state machine (``errorType`` of the failed invocation).
ERROR_TYPES: dict[str, str] = {
    "die": "Runtime.ExitError",
    "timeout": "Sandbox.Timedout",
    "oom": "Runtime.OutOfMemory",
}


@dataclass
class Fault:
    """Fire ``kind`` at ``point`` in ``function``, the first ``times`` times it is reached.

    ``order_id`` limits the fault to invocations whose event carries that order.
    """

    function: str
    point: str
    kind: FaultKind = "die"
    times: int = 1
    order_id: str | None = None
    fired: int = 0


class InvocationKilled(BaseException):
    """The invocation ends here as ``kind`` would end it. A BaseException so no handler catches it."""

    def __init__(self, kind: FaultKind, point: str) -> None:
        super().__init__(f"{kind} at {point}")
        self.kind = kind
        self.point = point


@dataclass
class FaultPlan:
    """The faults of a run, thread-safe; ``fired`` counts what actually happened, by kind and point."""

    faults: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def take(self, function: str, point: str, order_id: str | None) -> Fault | None:
        """The fault to fire here, if any (and count it as fired)."""
        with self._lock:
            for fault in self.faults:
                if fault.function != function or fault.point != point or fault.fired >= fault.times:
                    continue
                if fault.order_id is not None and fault.order_id != order_id:
                    continue
                fault.fired += 1
                return fault
        return None

    def take_for_invocation(self, function: str, order_id: str | None) -> Fault | None:
        """One fault to arm in a worker process for this invocation (any point but ``start``).

        It counts as fired when taken; :meth:`refund` it if the invocation never reached its point.
        """
        with self._lock:
            for fault in self.faults:
                if fault.function != function or fault.point == "start" or fault.fired >= fault.times:
                    continue
                if fault.order_id is not None and fault.order_id != order_id:
                    continue
                fault.fired += 1
                return fault
        return None

    def refund(self, fault: Fault) -> None:
        with self._lock:
            fault.fired -= 1

    def fired(self) -> dict[str, int]:
        with self._lock:
            counts: dict[str, int] = {}
            for fault in self.faults:
                if fault.fired:
                    key = f"{fault.function} {fault.kind} at {fault.point}"
                    counts[key] = counts.get(key, 0) + fault.fired
            return counts
