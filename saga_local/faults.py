"""Fault injection: make a Lambda die, time out, be throttled, see AWS fail, stall, or lose its execution.

A fault names a function (its logical id in template.yaml), a point in its invocation and a kind:

* points: ``start`` (before the handler runs), ``before:<call>`` / ``after:<call>`` around an AWS
  or provider call the handler makes, named as botocore names its events (``dynamodb.UpdateItem``,
  ``dynamodb.GetItem``, ``sfn.StartExecution``, ``sqs.SendMessage``) or ``provider.charge``, and
  ``end`` (the handler returned but its response is lost);
* kinds:

  - ``die`` (the process exits: Lambda reports ``Runtime.ExitError``), ``timeout``
    (``Sandbox.Timedout``), ``oom`` (``Runtime.OutOfMemory``): the invocation ends there;
  - ``throttle`` (only at ``start``): the Lambda service answers 429 ``TooManyRequestsException``
    without running anything;
  - ``throttle_call`` / ``error_call`` (only at ``before:<AWS call>``): the call raises the
    botocore ``ClientError`` that boto3 raises when the service keeps answering 400
    ``ProvisionedThroughputExceededException`` (``ThrottlingException`` outside DynamoDB) or 500
    ``InternalServerError`` (``InternalFailure``) until the SDK's retries are spent. The class is
    the client's modelled exception class, so the state machine sees the ``Error`` name boto3's
    exception would give it;
  - ``delay`` (``seconds``): the invocation stalls there, then goes on; past the function's
    timeout it is a ``timeout`` (Lambda freezes the sandbox at its deadline);
  - ``stop``: ``StopExecution`` on the execution that invoked the function (its claim token), and
    the invocation goes on, as a Lambda already running goes on when its execution is stopped:
    the execution ends ``ABORTED`` half-way, which is how a ``CLAIMED`` row is left for the
    sweeper (seed 000's stuck claim).

``after:`` faults are the interesting ones: the write or the charge *landed*, then the invocation
died, so the state machine retries a step whose side effect already happened.

Targeting: ``order_id`` limits a fault to invocations whose event carries that order; ``attempt``
limits it to the Nth invocation of the function for that order (1-based, counted per function and
order across every execution, retries included: with one execution, ``attempt=2`` is the first
retry). ``times`` caps how often it fires.

Why ``throttle_call`` / ``error_call`` fire once per API call (``before-call``) and not once per
HTTP attempt (``before-send``): the handlers' clients use botocore's standard retry mode with
``max_attempts`` 3, so a failure that lasts one HTTP attempt is absorbed inside boto3 and the
handler never sees it; what the saga must survive is the error boto3 finally *raises*, after its
retries. Firing per API call injects exactly that, deterministically (one fault, one raised
error), without botocore's jittered backoff sleeps, which would make fault runs slow and their
timing random. The raised error carries ``RetryAttempts: 2`` and ``MaxAttemptsReached``, as boto3's
does.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from saga_local.driver import Driver

FaultKind = Literal["die", "timeout", "oom", "throttle", "throttle_call", "error_call", "delay", "stop"]
KINDS: frozenset[str] = frozenset(get_args(FaultKind))
#: Kinds that end the invocation where they fire.
FATAL_KINDS = frozenset({"die", "timeout", "oom"})
#: Kinds that raise an AWS SDK error from a ``before:<AWS call>`` point.
CALL_KINDS = frozenset({"throttle_call", "error_call"})

#: How each fatal kind reaches the state machine (``errorType`` of the failed invocation).
ERROR_TYPES: dict[str, str] = {
    "die": "Runtime.ExitError",
    "timeout": "Sandbox.Timedout",
    "oom": "Runtime.OutOfMemory",
}

#: (code, HTTP status, message) of the error each call kind raises, per service (botocore's id).
_CALL_ERRORS: dict[tuple[str, str], tuple[str, int, str]] = {
    ("throttle_call", "dynamodb"): (
        "ProvisionedThroughputExceededException",
        400,
        "The level of configured provisioned throughput for the table was exceeded."
        " Consider increasing your provisioning level with the UpdateTable API.",
    ),
    ("error_call", "dynamodb"): ("InternalServerError", 500, "Internal server error"),
    ("throttle_call", "*"): ("ThrottlingException", 400, "Rate exceeded"),
    ("error_call", "*"): ("InternalFailure", 500, "An internal error occurred."),
}
#: The SDK's retries before it raises (standard mode, ``max_attempts`` 3: handlers/runtime.py).
SDK_RETRY_ATTEMPTS = 2
#: A function whose invocations belong to no execution yet (``stop`` has nothing to stop there).
START_FUNCTION = "StartExecutionFunction"


#: Where each function of template.yaml can be hit: its start and end, and around every call it makes.
POINTS: dict[str, tuple[str, ...]] = {
    START_FUNCTION: ("start", "before:sfn.StartExecution", "after:sfn.StartExecution", "end"),
    "ClaimOrderFunction": ("start", "before:dynamodb.UpdateItem", "after:dynamodb.UpdateItem", "end"),
    "ChargePaymentFunction": ("start", "before:provider.charge", "after:provider.charge", "end"),
    "MarkCompleteFunction": ("start", "before:dynamodb.UpdateItem", "after:dynamodb.UpdateItem", "end"),
    "ReleaseClaimFunction": (
        "start",
        "before:dynamodb.GetItem",
        "before:dynamodb.UpdateItem",
        "after:dynamodb.UpdateItem",
        "end",
    ),
}
#: The functions the state machine invokes (every one but the start function).
STEP_FUNCTIONS: tuple[str, ...] = tuple(f for f in POINTS if f != START_FUNCTION)


def kinds_at(function: str, point: str) -> list[str]:
    """The fault kinds that can happen at ``point`` of ``function`` (what :class:`Fault` accepts)."""
    kinds = ["die", "timeout", "oom", "delay"]
    if point == "start":
        kinds.append("throttle")
    if point.startswith("before:") and not point.startswith("before:provider."):
        kinds += ["throttle_call", "error_call"]
    if function != START_FUNCTION:
        kinds.append("stop")
    return kinds


def _valid_point(point: str) -> bool:
    if point in ("start", "end"):
        return True
    prefix, _, call = point.partition(":")
    return prefix in ("before", "after") and "." in call


@dataclass
class Fault:
    """Fire ``kind`` at ``point`` in ``function``, at most ``times`` times.

    ``order_id`` limits the fault to invocations whose event carries that order; ``attempt`` to the
    Nth invocation of ``function`` for the order; ``seconds`` is how long a ``delay`` stalls.
    """

    function: str
    point: str
    kind: FaultKind = "die"
    times: int = 1
    order_id: str | None = None
    attempt: int | None = None
    seconds: float = 0.0
    fired: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {sorted(KINDS)}")
        if not _valid_point(self.point):
            raise ValueError(f"bad point {self.point!r}: start, end, before:<call> or after:<call>")
        if self.kind == "throttle" and self.point != "start":
            raise ValueError("throttle is the Lambda service refusing an invocation: only at 'start'")
        if self.kind in CALL_KINDS and (
            not self.point.startswith("before:") or self.point.startswith("before:provider.")
        ):
            raise ValueError(f"{self.kind} is an AWS call failing: only at 'before:<service>.<Operation>'")
        if self.kind == "delay" and self.seconds <= 0:
            raise ValueError("a delay needs seconds > 0")
        if self.kind == "stop" and self.function == START_FUNCTION:
            raise ValueError("the start function runs before any execution exists: nothing to stop")
        if self.times < 1 or (self.attempt is not None and self.attempt < 1):
            raise ValueError("times and attempt count from 1")

    def matches(self, function: str, point: str, order_id: str | None, invocation: int | None) -> bool:
        """Whether this fault is armed for ``point`` of this invocation (not counting ``times``)."""
        return (
            self.function == function
            and self.point == point
            and (self.order_id is None or self.order_id == order_id)
            and (self.attempt is None or self.attempt == invocation)
        )

    def __str__(self) -> str:
        what = f"{self.kind} {self.seconds:g}s" if self.kind == "delay" else self.kind
        where = [f"order {self.order_id}"] if self.order_id else []
        if self.attempt is not None:
            where.append(f"invocation #{self.attempt}")
        if self.times != 1:
            where.append(f"x{self.times}")
        suffix = f" ({', '.join(where)})" if where else ""
        return f"{self.function}: {what} at {self.point}{suffix}"


class InvocationKilled(BaseException):
    """The invocation ends here as ``kind`` would end it. A BaseException so no handler catches it."""

    def __init__(self, kind: str, point: str) -> None:
        super().__init__(f"{kind} at {point}")
        self.kind = kind
        self.point = point


def call_error(kind: str, call: str, model: Any = None) -> Exception:
    """The exception boto3 raises for ``call`` (``dynamodb.UpdateItem``) once its retries are spent.

    ``model`` is the operation model botocore hands the ``before-call`` hook: with it the class is
    the client's modelled one (``ProvisionedThroughputExceededException``, from the same factory
    the clients use, so ``except client.exceptions.X`` catches it), else a plain ``ClientError``.
    """
    import boto3
    from botocore.exceptions import ClientError

    service, _, operation = call.partition(".")
    code, status, message = _CALL_ERRORS.get((kind, service)) or _CALL_ERRORS[(kind, "*")]
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {
            "RequestId": str(uuid.uuid4()),
            "HTTPStatusCode": status,
            "HTTPHeaders": {},
            "RetryAttempts": SDK_RETRY_ATTEMPTS,
            "MaxAttemptsReached": True,
        },
    }
    cls: type[Exception] = ClientError
    if model is not None:
        # The factory botocore's clients use (it caches per service), so the class is theirs.
        session = boto3._get_default_session()._session
        factory = session._get_internal_component("exceptions_factory")  # type: ignore[attr-defined]
        cls = factory.create_client_exceptions(model.service_model).from_code(code)
    return cls(response, operation)


@dataclass
class FaultPlan:
    """The faults of a run, thread-safe; ``fired`` counts what actually happened, by kind and point.

    The runtimes call :meth:`begin` once per invocation to number it (per function and order), and
    :meth:`take` at each point.
    """

    faults: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _invocations: Counter[tuple[str, str | None]] = field(default_factory=Counter)

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def extend(self, faults: list[Fault]) -> None:
        with self._lock:
            self.faults.extend(faults)

    def clear(self) -> None:
        """Forget every fault and every invocation count (between two runs on one stack)."""
        with self._lock:
            self.faults.clear()
            self._invocations.clear()

    def begin(self, function: str, order_id: str | None) -> int:
        """Number a new invocation of ``function`` for ``order_id``: 1 for the first."""
        with self._lock:
            self._invocations[(function, order_id)] += 1
            return self._invocations[(function, order_id)]

    def take(
        self, function: str, point: str, order_id: str | None, invocation: int | None = None
    ) -> Fault | None:
        """The fault to fire here, if any (and count it as fired)."""
        with self._lock:
            for fault in self.faults:
                if fault.fired < fault.times and fault.matches(function, point, order_id, invocation):
                    fault.fired += 1
                    return fault
        return None

    def take_for_invocation(
        self, function: str, order_id: str | None, invocation: int | None = None
    ) -> Fault | None:
        """One fault to arm in a worker process for this invocation (any point but ``start``).

        It counts as fired when taken; :meth:`refund` it if the invocation never reached its point.
        """
        with self._lock:
            for fault in self.faults:
                if (
                    fault.point != "start"
                    and fault.fired < fault.times
                    and fault.matches(function, fault.point, order_id, invocation)
                ):
                    fault.fired += 1
                    return fault
        return None

    def refund(self, fault: Fault) -> None:
        with self._lock:
            fault.fired -= 1

    def fired(self) -> dict[str, int]:
        """Fired counts by ``"<function> <kind> at <point>"``."""
        with self._lock:
            counts: dict[str, int] = {}
            for fault in self.faults:
                if fault.fired:
                    key = f"{fault.function} {fault.kind} at {fault.point}"
                    counts[key] = counts.get(key, 0) + fault.fired
            return counts

    def fired_by_kind(self) -> dict[str, int]:
        """Fired counts by kind (``die``, ``throttle_call``...)."""
        with self._lock:
            counts: Counter[str] = Counter()
            for fault in self.faults:
                counts[fault.kind] += fault.fired
            return {kind: n for kind, n in sorted(counts.items()) if n}


# -- SQS redelivery ---------------------------------------------------------------------------


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
