"""The claim protocol model's vocabulary: its constants, the world's state, a step's result."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from tests.model import asl
from tests.model.webhooks import DEBIT, NEEDS_ACTION

ORDER_ID = "ORDER-1"
TABLE = "claims"
START = 1_790_000_000
ACCOUNT_ARN = "arn:aws:states:us-east-1:123456789012:execution:PaymentSaga"
VISA = "pm_card_visa"
DECLINED_CARD = "pm_card_chargeDeclined"
#: How the trace names each payment method (a card that succeeds otherwise).
_METHODS = {DECLINED_CARD: "declining card", DEBIT: "bank debit", NEEDS_ACTION: "card needing authentication"}
#: The end of an execution that could not tell what became of its charge (a person, the sweeper or a
#: webhook resolves the order).
NEEDS_RECONCILIATION = "Needs Reconciliation"

WRITE_FAULTS = ("lost_resend", "lost_raise", "late", "die_after")
CREATE_FAULTS = ("lost", "late", "refused")
#: A create's plan that is no fault: the webhook events the create made are delivered to the consumer
#: inside the invocation, after the provider applied the create and before the step reads its answer.
INSIDE = "webhook inside"
#: The same with the create's answer then lost (one fault: ``lost``).
LOST_INSIDE = "lost, webhook inside"
#: A provider outage for every try of the Charge step but its last, whose create is applied and its
#: answer lost (one fault; with the webhook inside or not): the step's last try, whatever came before.
LAST_TRY = "its answer lost"
LAST_TRY_INSIDE = "its webhook delivered, then its answer lost"
SWEEP_FAULTS = ("lost_resend", "late")
#: The claim protocol's faults (the relay's, ``relay.RELAY_FAULTS``, are named by the scopes that want them).
ALL_FAULTS = frozenset({*WRITE_FAULTS, *CREATE_FAULTS, "outage", "last_try"})
#: The queues and the bus the relay, the start function and the state machine's SQS tasks name.
ORDERS_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
PARKED_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/outcome-relay-parked"
BUS_NAME = "outcomes"
STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:PaymentSaga"
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/claims/stream/model"


class Killed(BaseException):
    """The Lambda running a handler died (a ``BaseException``: no handler can catch it)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


@dataclass(frozen=True)
class Delivery:
    """One SQS message of the order: a producer's send or a duplicate of it."""

    name: str
    payment_attempt: str = "initial"
    payment_method: str = VISA
    amount: int = 15000

    def message(self) -> dict[str, Any]:
        return {
            "orderId": ORDER_ID,
            "amount": self.amount,
            "currency": "BRL",
            "customerId": "cus_123",
            "paymentMethod": self.payment_method,
            "paymentAttempt": self.payment_attempt,
        }


@dataclass(frozen=True)
class Scope:
    """What one exploration covers."""

    name: str
    deliveries: tuple[Delivery, ...]
    max_faults: int = 1
    fault_kinds: frozenset[str] = ALL_FAULTS
    redrives: int = 0
    requeues: int = 1
    sweeper: bool = True
    #: Whether the clock may jump during the schedule (it always does in the final phase).
    clock: bool = True
    #: How far behind the provider's search is (below the sweeper's grace, as the design assumes).
    search_lag_seconds: int = 1800
    #: Whether the relay may lag: its step is then an action like any other, never taken first, so
    #: records of several writes meet in one batch without a fault (more states).
    relay_lags: bool = False
    #: Whether a Stripe webhook endpoint is registered: each PaymentIntent change is then an event
    #: the consumer is delivered (see :mod:`tests.model.webhooks`).
    webhooks: bool = False
    #: How many deliveries of an event beyond its first the schedule may make (all events together).
    webhook_repeats: int = 1
    #: How many events the schedule may lose (never delivered: Stripe gave up, or the queue lost it).
    webhook_losses: int = 1
    #: Whether the events a create makes may also be delivered inside the Charge invocation that sent
    #: it: after the provider applied the create, before the step reads its answer (or learns it lost).
    webhooks_inside: bool = True
    #: How many forged ``succeeded`` events the schedule may plant on the webhook queue (an attacker
    #: with ``sqs:SendMessage``): whole events naming the order's attempt and amount, and a PaymentIntent
    #: the provider never made.
    forged_events: int = 0
    #: Whether the clock may jump past the provider's 24-hour idempotency window once while a claim is
    #: open (the settle-by of a debit in flight is weeks away): a redrive after it sends a create the
    #: provider no longer deduplicates.
    key_expiry: bool = False


@dataclass
class Pending:
    """A write sent by a Lambda that was killed: it lands when the model says so."""

    kind: str  # "dynamodb" or "provider"
    owner: str
    request: dict[str, Any]
    payment_attempt: str = ""

    def key(self) -> str:
        visible = {k: v for k, v in self.request.items() if k != "headers"}
        if "headers" in self.request:
            visible["idempotency"] = self.request["headers"].get("Idempotency-Key")
        return json.dumps([self.kind, self.owner, visible], sort_keys=True, default=str)


@dataclass
class State:
    """The model's own variables (the table and the provider are saved beside them)."""

    now: int = START
    executions: list[asl.Execution] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    actors: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    faults: int = 0
    redrives: int = 0
    requeues: int = 0
    pending: list[Pending] = field(default_factory=list)
    #: PaymentIntent id -> the producer's paymentAttempt it was created for.
    intent_attempts: dict[str, str] = field(default_factory=dict)
    #: Stream records the relay has not done yet, in stream order (those the filter lets through).
    stream: list[dict[str, Any]] = field(default_factory=list)
    stream_next: int = 2
    #: The relay failed on the first record of ``stream``: its retry is an action like any other.
    stalled: bool = False
    relay_retries: int = 0
    #: After a function error with bisection on: how many records the next batch holds.
    batch_limit: int | None = None
    #: Every closing transition of the order's row, in write order (read by the model, see relay.closing).
    closings: list[dict[str, Any]] = field(default_factory=list)
    #: Every event put on the outcome bus, copies included: ``publisher``, ``detailType``, ``detail``.
    bus: list[dict[str, Any]] = field(default_factory=list)
    #: Messages on the orders queue, not yet delivered.
    queue: list[dict[str, Any]] = field(default_factory=list)
    #: Messages sent to the relay's parking queue; records the mapping gave up on.
    parked: list[dict[str, Any]] = field(default_factory=list)
    shed: list[dict[str, Any]] = field(default_factory=list)
    #: The closing (index in ``closings``) each of the relay's re-queue messages was sent for.
    requeued_for: list[int] = field(default_factory=list)
    #: Closing index -> executions the start function started from the relay's re-queues of it.
    requeue_starts: dict[int, int] = field(default_factory=dict)
    #: Names of the executions the start function started (a second start answers ExecutionAlreadyExists).
    names: list[str] = field(default_factory=list)
    messages_sent: int = 0
    poisons: int = 0
    #: Stripe events sent and not yet delivered for the last time, in the order they were sent.
    outbox: list[dict[str, Any]] = field(default_factory=list)
    #: The webhook sender's bookkeeping: PaymentIntent id -> the status its last event was sent for.
    webhook_status: dict[str, str] = field(default_factory=dict)
    webhook_deliveries: int = 0
    webhook_repeats: int = 0
    webhook_losses: int = 0
    forged: int = 0
    #: Invariants broken when an execution ended (read then, reported at every step after).
    findings: list[str] = field(default_factory=list)


@dataclass
class _Run:
    """One invocation in progress: its fault plan and what it did."""

    owner: str
    payment_attempt: str
    plan: tuple[Any, ...] | None = None
    outage: str | None = None
    writes: int = 0
    creates: int = 0
    dynamodb_calls: int = 0
    fired: bool = False
    #: The relay's AWS calls, in order (``PutEvents``, ``SendMessage``).
    calls: list[str] = field(default_factory=list)
    #: Whether this invocation is its Task's last try (no retry follows a PaymentOutcomeUnknown).
    last_try: bool = False
    #: What the webhook deliveries made inside this invocation did (for the trace).
    inside: list[str] = field(default_factory=list)
    #: The order's claim as this invocation last read it (plain values; None: never read, or absent):
    #: what the step could know when it ended.
    claim_read: dict[str, Any] | None = None


@dataclass(frozen=True)
class StepResult:
    label: str
    writes: int = 0
    creates: int = 0
    dynamodb_calls: int = 0
    fired: bool = True
    calls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    items: Any
    emulator: bytes
    state: bytes


class _LambdaContext:
    function_name = "model"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:model"
    aws_request_id = "model"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 10_000


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


_DISCARD: Any = _Discard()


class _Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return float(self.now)


def _short(arn: str) -> str:
    return arn.rsplit(":", 1)[-1]


def is_fault(plan: tuple[Any, ...] | None) -> bool:
    """Whether an action's plan spends the fault budget (a webhook delivered inside a create does not)."""
    return plan is not None and not (plan[0] == "create" and plan[2] == INSIDE)


def _fault_text(fault: tuple[Any, ...] | None) -> str:
    if fault is None:
        return ""
    if fault[0] == "outage" and len(fault) > 2:
        return f" [provider outage for every try but the last, whose create is applied, {fault[2]}]"
    if fault[0] == "outage":
        return f" [{fault[1]} outage for the whole step]"
    what = "DynamoDB write" if fault[0] == "write" else "provider charge request"
    if fault[2] == INSIDE:
        return f" [the webhook of {what} #{fault[1]} delivered before its answer]"
    if fault[2] == LOST_INSIDE:
        return f" [the webhook of {what} #{fault[1]} delivered, then its answer lost]"
    return f" [{fault[2]} on {what} #{fault[1]}]"


def _relay_fault_text(fault: tuple[Any, ...] | None) -> str:
    if fault is None:
        return ""
    return f" [{fault[1]} on its AWS call #{fault[0]}]"


def _describe(outcome: dict[str, Any] | asl.TaskFailure) -> str:
    if isinstance(outcome, asl.TaskFailure):
        return outcome.error
    keep = ("outcome", "how", "attempt", "attemptOwner", "status", "replayed", "released", "reason")
    return json.dumps({k: outcome[k] for k in keep if k in outcome}, separators=(",", ":"))


_ACTOR = re.compile(r"(?<=[:\-])[dr][0-9]+\b")


def _symmetries(deliveries: tuple[Delivery, ...]) -> list[dict[str, str]]:
    """Renamings of deliveries that carry the very same message (the identity first)."""
    groups: dict[str, list[str]] = {}
    for delivery in deliveries:
        groups.setdefault(json.dumps(delivery.message(), sort_keys=True), []).append(delivery.name)
    mappings: list[dict[str, str]] = [{}]
    for names in groups.values():
        mappings = [
            {**mapping, **dict(zip(names, permuted, strict=True))}
            for mapping in mappings
            for permuted in itertools.permutations(names)
        ]
    return mappings


def _rename_ids(text: str) -> str:
    """Rename the provider's random ids (``pi_...``, ``req_...``) by order of first appearance."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"{match.group(1)}#{len(names)}")

    return re.sub(r"\b([a-z]{2,4})_[A-Za-z0-9]{12,}", rename, text)
