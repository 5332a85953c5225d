"""Fault injection: make a Lambda die, time out, be throttled, see AWS fail, stall, or lose its execution.

A fault names a function (its logical id in template.yaml), a point in its invocation and a kind:

* points: ``start`` (before the handler runs), ``before:<call>`` / ``after:<call>`` around an AWS
  or provider call the handler makes, named as botocore names its events (``dynamodb.UpdateItem``,
  ``dynamodb.GetItem``, ``sfn.StartExecution``, ``sqs.SendMessage``, ``eventbridge.PutEvents``) or
  ``provider.charge``, and ``end`` (the handler returned but its response is lost). :data:`CALLS`
  lists the calls each function makes; a fault at any other point would never fire and is refused
  when it is created, with the function's points in the message;
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
    sweeper (seed 000's stuck claim);
  - ``lost_answer`` (only at ``after:<call>``): *applied, answer lost, sent again*. The request
    reaches the service and is applied, its answer is lost (botocore's ``ReadTimeoutError``), and
    botocore's own standard retry sends the identical request again; the handler sees only the
    answer to that second send. For ``provider.charge`` the HTTP client sends the create again
    with the same ``Idempotency-Key`` after losing the first answer (a connection reset), as the
    Stripe SDK does when it retries a network error. See :func:`lost_answer_error`;
  - ``late_write`` (only at ``after:<write>``): *killed in flight*. The request is sent, the Lambda
    dies before any answer (``dies_as``: ``die`` is ``Runtime.ExitError``, ``timeout`` is
    ``Sandbox.Timedout``), and the request lands later: after the invocation of ``lands_after``
    for the same order ends (say ``ReleaseClaimFunction``: the state machine has moved on), or
    ``seconds`` after it was sent, whichever comes first. See :class:`LateWrites`.

``after:`` faults are the interesting ones: the write or the charge *landed*, then the invocation
died, so the state machine retries a step whose side effect already happened. ``lost_answer`` and
``late_write`` go one level down, to the HTTP request: they fire once per API call, on its first
send (botocore's ``before-send``), never on botocore's own resend.

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

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

FaultKind = Literal[
    "die",
    "timeout",
    "oom",
    "throttle",
    "throttle_call",
    "error_call",
    "delay",
    "stop",
    "lost_answer",
    "late_write",
]
KINDS: frozenset[str] = frozenset(get_args(FaultKind))
#: Kinds that end the invocation where they fire.
FATAL_KINDS = frozenset({"die", "timeout", "oom"})
#: Kinds that raise an AWS SDK error from a ``before:<AWS call>`` point.
CALL_KINDS = frozenset({"throttle_call", "error_call"})
#: Kinds that fire at the HTTP request of an ``after:<call>`` point, on the call's first send.
SEND_KINDS = frozenset({"lost_answer", "late_write"})
#: How a ``late_write`` invocation dies.
DEATHS = frozenset({"die", "timeout"})
#: Calls that change something: a ``late_write`` needs one (a read landing late changes nothing).
WRITE_CALLS = frozenset(
    {
        "dynamodb.UpdateItem",
        "dynamodb.PutItem",
        "dynamodb.DeleteItem",
        "sfn.StartExecution",
        "sfn.StopExecution",
        "sqs.SendMessage",
        "provider.charge",
    }
)
#: How long a ``late_write`` is held at most when its ``lands_after`` never comes (seconds).
LATE_WRITE_SECONDS = 2.0

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


#: Every call each function of template.yaml makes where faults fire, named as botocore names its
#: events (``<service id, hyphenated>.<Operation>``: ``eventbridge.PutEvents``, not the IAM prefix
#: ``events``; ``sfn.StartExecution``, not ``states``), and ``provider.charge``, the one provider call
#: the runtime hooks. A point on any other call would never fire, so :class:`Fault` refuses it.
#: The Stripe key's secret is left out: it is read only when ``PAYMENT_API_KEY`` is unset, never where
#: faults fire. tests/local/test_faults.py checks the table against the calls the handlers make when
#: the saga runs and against the permissions template.yaml grants each function.
CALLS: dict[str, tuple[str, ...]] = {
    START_FUNCTION: ("sfn.StartExecution", "sqs.SendMessage", "eventbridge.PutEvents"),
    "ClaimOrderFunction": ("dynamodb.UpdateItem",),
    "ChargePaymentFunction": ("dynamodb.GetItem", "provider.charge"),
    "MarkCompleteFunction": ("dynamodb.UpdateItem",),
    # UpdateItem: the release and the fence of a failed claim; PutItem: the fence's tombstone.
    "ReleaseClaimFunction": ("dynamodb.UpdateItem", "dynamodb.PutItem"),
    # Query: discovery (the open-claims index); UpdateItem: the sweep lock and the fenced writes;
    # GetItem: the read after a fenced write lost.
    "SweeperFunction": ("dynamodb.Query", "dynamodb.UpdateItem", "dynamodb.GetItem"),
    "OutcomeRelayFunction": ("eventbridge.PutEvents", "sqs.SendMessage"),
    # The signing secret (read once per container, and again after a rotation), then the queue.
    "WebhookReceiverFunction": ("secrets-manager.GetSecretValue", "sqs.SendMessage"),
    # The claim as it is now, then the one conditional write.
    "WebhookConsumerFunction": ("dynamodb.GetItem", "dynamodb.UpdateItem"),
}


def valid_points(function: str) -> tuple[str, ...]:
    """Every point of ``function`` a fault can fire at: ``start``, ``before:``/``after:`` each of its
    :data:`CALLS`, and ``end``. Raises ``ValueError`` for a function template.yaml does not have."""
    if function not in CALLS:
        raise ValueError(
            f"unknown function {function!r}: one of {sorted(CALLS)} (a test's stand-in that makes its"
            " own calls through the runtime's acting_as takes probe=True)"
        )
    around = tuple(f"{side}:{call}" for call in CALLS[function] for side in ("before", "after"))
    return ("start", *around, "end")


#: Where chaos hits each function it schedules faults for: its start and end, and around the calls
#: it makes on the saga's path (every point is one of :func:`valid_points`; a test checks it).
POINTS: dict[str, tuple[str, ...]] = {
    START_FUNCTION: ("start", "before:sfn.StartExecution", "after:sfn.StartExecution", "end"),
    "ClaimOrderFunction": ("start", "before:dynamodb.UpdateItem", "after:dynamodb.UpdateItem", "end"),
    "ChargePaymentFunction": (
        "start",
        "before:dynamodb.GetItem",
        "after:dynamodb.GetItem",
        "before:provider.charge",
        "after:provider.charge",
        "end",
    ),
    "MarkCompleteFunction": ("start", "before:dynamodb.UpdateItem", "after:dynamodb.UpdateItem", "end"),
    "ReleaseClaimFunction": (
        "start",
        "before:dynamodb.UpdateItem",
        "after:dynamodb.UpdateItem",
        "end",
    ),
}
#: The function whose end lets a late write of each function land (the step after it has run).
LANDS_AFTER: dict[str, str] = {
    START_FUNCTION: "ClaimOrderFunction",
    "ClaimOrderFunction": "ReleaseClaimFunction",
    "ChargePaymentFunction": "ReleaseClaimFunction",
    "MarkCompleteFunction": "ReleaseClaimFunction",
    "ReleaseClaimFunction": "ClaimOrderFunction",
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
    if point.startswith("after:"):
        kinds.append("lost_answer")
        if point.partition(":")[2] in WRITE_CALLS:
            kinds.append("late_write")
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
    Nth invocation of ``function`` for the order; ``seconds`` is how long a ``delay`` stalls, or how
    long a ``late_write`` is held at most. A ``late_write`` lands when the invocation of
    ``lands_after`` (a function's logical id) for the same order ends, and dies as ``dies_as``.
    """

    function: str
    point: str
    kind: FaultKind = "die"
    times: int = 1
    order_id: str | None = None
    attempt: int | None = None
    seconds: float = 0.0
    lands_after: str | None = None
    dies_as: str = "die"
    #: A test's stand-in function (``runtime.acting_as``): its calls are whatever the test makes, so
    #: only the point's shape is checked.
    probe: bool = False
    #: ``time.monotonic()`` after which the fault no longer fires (a window of wall time: Lambda's
    #: concurrency exhausted for a minute), or None.
    until: float | None = None
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
        if self.kind in SEND_KINDS and not self.point.startswith("after:"):
            raise ValueError(f"{self.kind} is a request that was sent: only at 'after:<call>'")
        if self.kind == "late_write" and self.point.partition(":")[2] not in WRITE_CALLS:
            raise ValueError(f"late_write needs a write; one of {sorted(WRITE_CALLS)}")
        if self.dies_as not in DEATHS:
            raise ValueError(f"dies_as must be one of {sorted(DEATHS)}")
        if self.kind == "stop" and self.function == START_FUNCTION:
            raise ValueError("the start function runs before any execution exists: nothing to stop")
        if self.times < 1 or (self.attempt is not None and self.attempt < 1):
            raise ValueError("times and attempt count from 1")
        if not self.probe and self.point not in (points := valid_points(self.function)):
            raise ValueError(
                f"{self.function} never reaches point {self.point!r}, so the fault would never fire;"
                f" its points: {', '.join(points)}"
            )

    def matches(self, function: str, point: str, order_id: str | None, invocation: int | None) -> bool:
        """Whether this fault is armed for ``point`` of this invocation (not counting ``times``)."""
        return (
            self.function == function
            and self.point == point
            and (self.order_id is None or self.order_id == order_id)
            and (self.attempt is None or self.attempt == invocation)
            and (self.until is None or time.monotonic() < self.until)
        )

    def __str__(self) -> str:
        what = f"{self.kind} {self.seconds:g}s" if self.kind == "delay" else self.kind
        if self.kind == "late_write":
            lands = f"after {self.lands_after} ends" if self.lands_after else f"{self._held():g}s later"
            what = f"late_write (dies as {ERROR_TYPES[self.dies_as]}, lands {lands})"
        where = [f"order {self.order_id}"] if self.order_id else []
        if self.attempt is not None:
            where.append(f"invocation #{self.attempt}")
        if self.times != 1:
            where.append(f"x{self.times}")
        suffix = f" ({', '.join(where)})" if where else ""
        return f"{self.function}: {what} at {self.point}{suffix}"

    def _held(self) -> float:
        return self.seconds or LATE_WRITE_SECONDS


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
    #: Requests of ``late_write`` faults, held until they land.
    late: LateWrites = field(default_factory=lambda: LateWrites())
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
        """Forget every fault and every invocation count (between two runs on one stack), once every
        late write still held has landed."""
        self.late.land_all()
        with self._lock:
            self.faults.clear()
            self._invocations.clear()

    def begin(self, function: str, order_id: str | None) -> int:
        """Number a new invocation of ``function`` for ``order_id``: 1 for the first."""
        with self._lock:
            self._invocations[(function, order_id)] += 1
            return self._invocations[(function, order_id)]

    def take(
        self,
        function: str,
        point: str,
        order_id: str | None,
        invocation: int | None = None,
        *,
        send: bool = False,
    ) -> Fault | None:
        """The fault to fire here, if any (and count it as fired).

        ``send`` picks the kinds that fire at a call's HTTP request (:data:`SEND_KINDS`), otherwise
        the others: one ``after:`` point is taken twice, at the send and after the call.
        """
        with self._lock:
            for fault in self.faults:
                if (
                    fault.fired < fault.times
                    and (fault.kind in SEND_KINDS) == send
                    and fault.matches(function, point, order_id, invocation)
                ):
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


# -- the request itself: lost answers and late writes -----------------------------------------

_thread = threading.local()


def lost_answer_error(url: str) -> Exception:
    """What botocore raises when a request was sent and its answer never came: a read timeout.

    Botocore's standard retry mode treats it as transient and sends the identical request again
    (same body, re-signed): that resend is the point of the fault. Its backoff sleep (up to a
    second of jitter) is skipped for this one retry, see :func:`install_retry_sleep_skip`.
    """
    from botocore.exceptions import ReadTimeoutError

    _thread.skip_retry_sleep = True
    return ReadTimeoutError(endpoint_url=url)


class _RetrySleep:
    """Stands in for ``time`` in ``botocore.endpoint``, whose only use of it is the retry sleep."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def sleep(self, seconds: float) -> None:
        if getattr(_thread, "skip_retry_sleep", False):
            _thread.skip_retry_sleep = False
            return
        self._real.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def install_retry_sleep_skip() -> None:
    """Let a ``lost_answer``'s retry go without botocore's jittered backoff (once per process)."""
    from botocore import endpoint

    module: Any = endpoint
    if not isinstance(module.time, _RetrySleep):
        module.time = _RetrySleep(module.time)


def apply_request(request: Any) -> None:
    """Let a botocore request reach the service: moto's in-process stubber when it is on (the
    in-process runtime), else the request's endpoint over HTTP (a worker and its moto server)."""
    from moto.core.models import botocore_stubber

    if botocore_stubber.enabled and botocore_stubber(event_name="before-send", request=request) is not None:
        return
    from botocore.httpsession import URLLib3Session

    session = URLLib3Session()
    try:
        _ = session.send(request).content
    finally:
        session.close()


@dataclass
class _Held:
    apply: Callable[[], Any]
    what: str
    order_id: str | None
    lands_after: str | None
    landed: bool = False


class LateWrites:
    """Requests sent by an invocation that died before the answer, landing later (``late_write``).

    A held request lands once: when an invocation of its ``lands_after`` function for the same
    order ends (:meth:`invocation_ended`), when its timer runs out, or on :meth:`land_all`
    (before a run is judged, so that no write is still in the air).
    """

    def __init__(self) -> None:
        self._held: list[_Held] = []
        self._lock = threading.Condition()
        self._landing = 0
        self.landed: list[str] = []
        self.failed: list[str] = []
        #: (what, time.monotonic()) of every landing, in order.
        self.landings: list[tuple[str, float]] = []

    def hold(
        self,
        apply: Callable[[], Any],
        *,
        what: str,
        order_id: str | None,
        lands_after: str | None,
        seconds: float,
    ) -> None:
        held = _Held(apply, what, order_id, lands_after)
        with self._lock:
            self._held.append(held)
        timer = threading.Timer(seconds, self._land, args=(held,))
        timer.daemon = True
        timer.start()

    def invocation_ended(self, function: str, order_id: str | None) -> None:
        """Land the writes waiting for this invocation (the state machine has moved on)."""
        with self._lock:
            due = [h for h in self._held if h.lands_after == function and h.order_id == order_id]
        for held in due:
            self._land(held)

    def land_all(self) -> None:
        """Land every write still held, and wait for those landing right now."""
        with self._lock:
            held = list(self._held)
        for each in held:
            self._land(each)
        with self._lock:
            self._lock.wait_for(lambda: self._landing == 0, timeout=30)

    def pending(self) -> int:
        with self._lock:
            return len(self._held)

    def _land(self, held: _Held) -> None:
        with self._lock:
            if held.landed:
                return
            held.landed = True
            self._held.remove(held)
            self._landing += 1
        landed_at = time.monotonic()
        try:
            held.apply()
            outcome = self.landed
        except Exception:  # noqa: BLE001 - a late write may fail (the service refuses it): counted
            outcome = self.failed
        with self._lock:
            outcome.append(held.what)
            self.landings.append((held.what, landed_at))
            self._landing -= 1
            self._lock.notify_all()


# -- what reached the provider -----------------------------------------------------------------


@dataclass
class ChargeRequest:
    """One charge the saga sent to the provider, and what came back (``declined``, ``charged``...)."""

    sent: int  # sequence number when sent
    order_id: str
    payment_attempt: str
    idempotency_key: str
    token: str | None  # the execution that sent it
    answered: int | None = None  # sequence number when the answer came back
    outcome: str = "no answer"


class ChargeRequests:
    """Every charge request the handlers sent, in order (recorded by the runtime around the SDK)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clock = 0
        self.requests: list[ChargeRequest] = []

    def sent(self, order_id: str, payment_attempt: str, key: str, token: str | None) -> ChargeRequest:
        with self._lock:
            self._clock += 1
            request = ChargeRequest(self._clock, order_id, payment_attempt, key, token)
            self.requests.append(request)
            return request

    def answered(self, request: ChargeRequest, outcome: str) -> None:
        with self._lock:
            self._clock += 1
            request.answered, request.outcome = self._clock, outcome

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()


def declined_attempts_sent_again(requests: Iterable[ChargeRequest]) -> list[str]:
    """Charges sent for a payment attempt the provider had already declined (``(orderId,
    paymentAttempt)``), by another execution or under another idempotency key.

    The same execution resending the same key (its Charge step retried after the decline's answer
    was lost) replays the decline and is not counted: the customer was told nothing yet.
    """
    problems: list[str] = []
    declined: dict[tuple[str, str], ChargeRequest] = {}
    events = sorted(
        [(r.sent, "sent", r) for r in requests]
        + [(r.answered, "answered", r) for r in requests if r.answered is not None]
    )
    for _, what, request in events:
        pair = (request.order_id, request.payment_attempt)
        if what == "answered":
            if request.outcome == "declined":
                declined.setdefault(pair, request)
            continue
        first = declined.get(pair)
        if first is not None and (
            first.token != request.token or first.idempotency_key != request.idempotency_key
        ):
            problems.append(
                f"declined attempt sent again: {request.order_id} paymentAttempt"
                f" {request.payment_attempt!r} was declined under {first.idempotency_key} and sent"
                f" again under {request.idempotency_key}"
            )
    return problems
