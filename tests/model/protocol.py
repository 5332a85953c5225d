"""A model of the claim protocol whose steps run the real code, and its invariants.

One order; a few deliveries of it (each an execution of the real state machine definition, its Task
steps invoking the real handlers, which use the real ``ClaimsStore`` on moto and the real
``StripeProvider`` on the Stripe emulator); the sweeper (``payment_saga.reconcile.reconcile``); a
clock that jumps past the lease or past the sweeper's search grace (timing out every execution older
than the state machine's ``TimeoutSeconds``); a redrive of a timed-out execution; the outcome relay
(``handlers.outcome_relay``, its event source mapping as the template declares it) on the stream
records the writes make; the delivery of a message on the orders queue (a re-queue of the relay, or
the state machine's own ``sqs:sendMessage``) through the real start function
(``handlers.start_execution``). Faults are actions too, up to a budget:

=================  ====================================================================================
``lost_resend``    a DynamoDB write is applied, its answer lost, and botocore sends it again
``lost_raise``     a DynamoDB write is applied, its answer lost, and the handler fails (retries gone)
``late``           a write (DynamoDB, or the provider's create) is sent, the Lambda is killed at its
                   timeout, and the write lands at a later step of the model, before the clock moves
``die_after``      a DynamoDB write lands, then the Lambda dies
``lost``           the provider applies the charge and its answer is lost (a 500 after the commit)
``refused``        the provider refuses the request before executing it (401: "not attempted")
``outage``         every DynamoDB call (or provider call) of one Task fails until its retries run out
``put_failed``     the relay's k-th call, a ``PutEvents``, fails (500 after the SDK's retries)
``entry_refused``  that ``PutEvents`` answers ``FailedEntryCount``: its last entry refused
``send_failed``    the relay's k-th call, a ``SendMessage``, fails
``answer_lost``    the relay's k-th call is applied and its answer lost: the relay fails
``relay_died``     the relay's k-th call is applied, then the relay Lambda dies: the whole batch is retried
``poison``         a record the relay can never read lands on the stream ahead of the order's record
=================  ====================================================================================

The relay reads the stream as Lambda's mapping hands it over: every record not yet done, in stream
order, the filter applied; a record that failed, and every one after it, is handed over again by the
next relay step (Lambda's retry from the failed sequence number). A fault-free relay step commutes
with every other step but a write that adds a record (it reads only the stream, and only queue
deliveries read what it sends), so it is taken first: while a record waits that the relay was
never handed, the relay's step (with or without a fault) is the only action, and with no fault
left to choose it is taken within the step that wrote the record. After a failure the retry is an
action like any other, so later records join the batch it retries; a scope with ``relay_lags``
lets the relay lag without a fault too (records of several writes in one batch). A queued message is
delivered whenever the scope's re-send budget allows (its ``DelaySeconds`` is not waited for: any
order of deliveries is explored), and every message left is delivered at the end of a schedule.

With ``webhooks`` on, a Stripe webhook endpoint is registered: every PaymentIntent change the
provider makes is an event (``succeeded``, ``payment_failed``, ``processing``, ``requires_action``,
``canceled``) that the real webhook consumer (``handlers.webhook_consumer``, so the domain's
``payment_saga.webhooks.handle_event``) is delivered once, several times (``webhook_repeats``), or
never (``webhook_losses``), in any order, between any two other steps; and a bank debit's charge
answers ``processing`` and settles later, as succeeded or failed, at a step of its own (see
:mod:`tests.model.webhooks`). The clock never passes a claim's settle-by deadline while its payment
is still processing: the settlement window is chosen to be longer than the provider's.

A declined card is not a fault but a delivery's payment method (so are a bank debit and a card that
needs authentication). Interleaving is at the grain of one
Lambda invocation (or one sweep, one clock jump...): a Lambda's calls run back to back, and what can
happen *inside* an invocation is what the faults say (an answer lost, a write delayed past others).

The invariants (docs/design.md, docs/outcome-events.md) are checked after every step; see
:meth:`World.violations` and :meth:`World.end_violations`.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import itertools
import json
import os
import pickle
import re
import sys
import time
import types
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import boto3
import stripe
from botocore.exceptions import ClientError
from moto import mock_aws

from saga_local.aws.stack import LOCAL_API_KEY, REGION, table_request
from saga_local.stripe_emulator import ProviderEmulator
from saga_local.template import load_template
from tests.model import asl
from tests.model.dynamo import WRITES, ModelTable, canonical
from tests.model.relay import (
    RELAY_CALL_FAULTS,
    RELAY_FAULTS,
    Mapping,
    ServiceError,
    bus_text,
    closing,
    event_violations,
    final_outcome_violations,
    lambda_record,
    poison_record,
    served_client,
)
from tests.model.stripe_link import InProcessLink, emulator_restore, emulator_snapshot, emulator_summary
from tests.model.webhooks import (
    DEBIT,
    NEEDS_ACTION,
    SETTLEMENTS,
    ModelWebhooks,
    describe,
    event_key,
    forced_outcome,
    sqs_record,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

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
SWEEP_FAULTS = ("lost_resend", "late")
#: The claim protocol's faults (the relay's, ``relay.RELAY_FAULTS``, are named by the scopes that want them).
ALL_FAULTS = frozenset({*WRITE_FAULTS, *CREATE_FAULTS, "outage"})
#: The queues and the bus the relay, the start function and the state machine's SQS tasks name.
ORDERS_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/orders"
PARKED_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/outcome-relay-parked"
BUS_NAME = "outcomes"
STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:PaymentSaga"
STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/claims/stream/model"

#: Ends of an execution that say it holds no open claim: the order is charged, declined, not
#: charged, a duplicate of someone else's, or refused. An execution that ended so must not hold the
#: row ``CLAIMED``: nobody would ever act on it, and it suppresses every later delivery until the
#: sweeper frees it.
HOLDS_NOTHING = frozenset(
    {"Duplicate Suppressed", "Claim Failed", "Payment Declined", "Charge Not Attempted", "Order Conflict"}
)


#: How the invariant below begins (what it says of the step follows).
_SETTLED_FIRST = "ended in 'Needs Reconciliation' because a webhook settled its claim before its"
_AWAIT_FIRST = "webhook-settles-before-await-settlement"
#: Invariants the checker is known to find broken, by the invariant's text (as ``explore`` groups
#: violations) -> the finding's name and where its fix stands. Reported apart, and not a failure
#: (every other violation is); once a fix lands the checker stops finding it, and its entry goes.
KNOWN_FINDINGS: dict[str, str] = {}


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


class World:
    """The live system the model drives: moto, the emulator, the handlers wired to both."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.clock = _Clock()
        self.state = State()
        self._run: _Run | None = None
        self._stack = contextlib.ExitStack()
        self._symmetries = _symmetries(scope.deliveries)

    # -- setup ----------------------------------------------------------------------------------

    def __enter__(self) -> World:
        template = load_template()
        self._stack.enter_context(mock_aws())
        client = boto3.session.Session().client(
            "dynamodb", region_name=REGION, aws_access_key_id="model", aws_secret_access_key="model"
        )
        client.create_table(**table_request(template["Resources"]["ClaimsTable"]["Properties"], TABLE))
        self.table = ModelTable(client, TABLE)
        self.table.interceptor = self._on_dynamodb
        self.table.on_records = self._on_records
        self.mapping = Mapping.from_template(template)
        self._matches = self.mapping.matcher()
        self._filtered: dict[str, bool] = {}
        self._environment(template)
        self.lease_seconds = int(template["Parameters"]["ClaimLeaseSeconds"]["Default"])
        settlement_days = int(template["Parameters"]["SettlementWindowDays"]["Default"])
        from payment_saga.claims import SECONDS_PER_DAY, ClaimsStore
        from payment_saga.payments import StripeProvider
        from payment_saga.reconcile import DEFAULT_SEARCH_GRACE_SECONDS

        self.grace = DEFAULT_SEARCH_GRACE_SECONDS
        self.store = ClaimsStore(
            TABLE,
            client=cast("Any", self.table),
            clock=self.clock,
            lease_seconds=self.lease_seconds,
            settlement_window_seconds=settlement_days * SECONDS_PER_DAY,
        )
        self.emulator = ProviderEmulator(clock=self.clock, search_lag_seconds=self.scope.search_lag_seconds)
        self.hooks: ModelWebhooks | None = None
        if self.scope.webhooks:
            self.hooks = ModelWebhooks(
                self.emulator.now, lambda: self.state.outbox, lambda: self.state.webhook_status
            )
            self.emulator.webhooks = self.hooks
        self.link = InProcessLink(self.emulator)
        self.link.interceptor = self._on_provider
        sdk = stripe.StripeClient(
            LOCAL_API_KEY,
            base_addresses={"api": "http://provider.model"},
            max_network_retries=0,
            http_client=self.link,
        )
        self.provider = StripeProvider(LOCAL_API_KEY, client=sdk)
        definition = json.loads((_root() / "statemachine" / "payment_saga.asl.json").read_text())
        self.machine = asl.StateMachine(definition, integration=self._integration, clock=self.clock)
        self.handlers = self._handlers(template, definition)
        from handlers import outcome_relay, start_execution, webhook_consumer

        self.relay_handler = inspect.unwrap(outcome_relay.handler)
        self.start_handler = inspect.unwrap(start_execution.handler)
        self.webhook_handler = inspect.unwrap(webhook_consumer.handler)
        self._decisions: list[Any] = []
        self._relay_record: dict[str, Any] | None = None
        self._delivering: dict[str, Any] | None = None
        self._wire()
        self._wire_relay(outcome_relay, start_execution)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _environment(self, template: dict[str, Any]) -> None:
        """The relay's and the start function's settings: the template's defaults (undone on exit)."""
        parameters = template["Parameters"]
        values = {
            "OUTCOME_EVENT_BUS_NAME": BUS_NAME,
            "ORDERS_QUEUE_URL": ORDERS_QUEUE_URL,
            "PARKED_RECORDS_QUEUE_URL": PARKED_QUEUE_URL,
            "STATE_MACHINE_ARN": STATE_MACHINE_ARN,
            "MAX_REQUEUE_ATTEMPTS": str(parameters["MaxRequeueAttempts"]["Default"]),
            "REQUEUE_BASE_DELAY_SECONDS": str(parameters["RequeueBaseDelaySeconds"]["Default"]),
            "MAX_STATE_MACHINE_REQUEUES": str(parameters["MaxStateMachineRequeues"]["Default"]),
        }
        self.max_requeue_attempts = int(values["MAX_REQUEUE_ATTEMPTS"])
        for name, value in values.items():
            self._stack.enter_context(_environ(name, value))

    def _handlers(
        self, template: dict[str, Any], definition: dict[str, Any]
    ) -> dict[str, Callable[..., Any]]:
        """``${XFunctionArn}`` -> the unwrapped handler of function X, as the template names it."""
        resources = template["Resources"]
        substitutions = resources["PaymentSagaStateMachine"]["Properties"]["DefinitionSubstitutions"]
        handlers: dict[str, Callable[..., Any]] = {}
        for state in definition["States"].values():
            if state["Type"] != "Task" or not asl.is_lambda(state):
                continue
            name = state["Parameters"]["FunctionName"]
            logical = substitutions[name[2:-1]]["Fn::GetAtt"][0]
            module_name, attribute = resources[logical]["Properties"]["Handler"].rsplit(".", 1)
            handlers[name] = inspect.unwrap(getattr(importlib.import_module(module_name), attribute))
        return handlers

    def _wire(self) -> None:
        """Point every handler module at the model's store, provider and clock (undone on exit)."""
        from handlers import runtime

        originals = {"claims_store": runtime.claims_store, "provider": runtime.provider}
        replacements: dict[str, Any] = {"claims_store": lambda: self.store, "provider": lambda: self.provider}
        clock_module = types.SimpleNamespace(
            **{k: getattr(time, k) for k in dir(time) if not k.startswith("_")}
        )
        clock_module.time = self.clock
        for module_name, module in list(sys.modules.items()):
            if not module_name.startswith("handlers") or module is None:
                continue
            for attribute, original in originals.items():
                if getattr(module, attribute, None) is original:
                    self._stack.enter_context(_patched(module, attribute, replacements[attribute]))
            if getattr(module, "time", None) is time:
                self._stack.enter_context(_patched(module, "time", clock_module))
        level = runtime.logger.log_level
        runtime.logger.setLevel("CRITICAL")
        self._stack.callback(runtime.logger.setLevel, level)
        self._metrics = runtime.metrics

    def _wire_relay(self, outcome_relay: types.ModuleType, start_execution: types.ModuleType) -> None:
        """The relay's and the start function's clients answered by the model; the record in hand noted."""
        clients = {
            "events": served_client("events", self._answer_events),
            "sqs": served_client("sqs", self._answer_sqs),
            "stepfunctions": served_client("stepfunctions", self._answer_stepfunctions),
        }
        for module in (outcome_relay, start_execution):
            self._stack.enter_context(_patched(module, "client", clients.__getitem__))
        handle = outcome_relay.record_handler

        def record_handler(record: dict[str, Any]) -> None:
            # Which record a re-queue is sent for: the relay handles a batch's records one by one.
            self._relay_record = record
            handle(record)

        self._stack.enter_context(_patched(outcome_relay, "record_handler", record_handler))
        from handlers import webhook_consumer

        record_decision = webhook_consumer.record_decision

        def noted(decision: Any, event_type: str) -> None:
            # What the consumer decided, for the trace (its log line and metric are made as ever).
            self._decisions.append(decision)
            record_decision(decision, event_type)

        self._stack.enter_context(_patched(webhook_consumer, "record_decision", noted))

    # -- saving and restoring -------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.table.snapshot(),
            emulator_snapshot(self.emulator),
            pickle.dumps(self.state),
        )

    def restore(self, snapshot: Snapshot) -> None:
        self.table.restore(snapshot.items)
        emulator_restore(self.emulator, snapshot.emulator)
        self.state = pickle.loads(snapshot.state)  # noqa: S301 - our own bytes
        self.clock.now = self.state.now
        if self.hooks is not None:
            self.hooks.restored()

    def fingerprint(self) -> str:
        """The state as text, up to renaming: the provider's random ids (``pi_...``) by order of
        appearance, and deliveries of the very same message by whichever naming sorts first."""
        state = self.state
        common = json.dumps(
            {
                "table": self.table.state_text(),
                "provider": emulator_summary(self.emulator),
                "now": state.now,
                "budget": [
                    state.faults,
                    state.redrives,
                    state.requeues,
                    state.poisons,
                    state.webhook_repeats,
                    state.webhook_losses,
                ],
                "outbox": sorted(json.dumps(event_key(event)) for event in state.outbox),
                "findings": sorted(state.findings),
                "attempts": sorted(state.intent_attempts.items()),
                "relay": self._relay_text(),
            },
            sort_keys=True,
            default=str,
        )
        executions = [
            (actor, json.dumps(e.key(), default=str))
            for actor, e in zip(state.actors, state.executions, strict=True)
        ]
        pending = [p.key() for p in state.pending]
        texts = []
        for mapping in self._symmetries:

            def rename(text: str, mapping: dict[str, str] = mapping) -> str:
                return _ACTOR.sub(lambda match: mapping.get(match.group(0), match.group(0)), text)

            texts.append(
                json.dumps(
                    [
                        rename(common),
                        sorted((mapping.get(actor, actor), rename(text)) for actor, text in executions),
                        sorted(rename(text) for text in pending),
                        sorted(mapping.get(name, name) for name in state.started),
                    ]
                )
            )
        return _rename_ids(min(texts))

    def _relay_text(self) -> Any:
        """The relay's side of the state, without what does not decide what happens next: sequence
        numbers and MessageIds (positions instead), and a record's time unless a record age applies."""
        state = self.state
        aged = self.mapping.max_record_age_seconds >= 0
        stream = [
            {k: v for k, v in record.items() if k != "sequence" and (aged or k != "created")}
            for record in state.stream
        ]
        queue = sorted(
            json.dumps({k: v for k, v in message.items() if k != "id"}, sort_keys=True)
            for message in state.queue
        )
        # Past claim writes' versions matter only by their order (every later write has a higher one).
        sequences = {c["sequence"] for c in state.closings} | {e["detail"].get("sequence") for e in state.bus}
        rank = {value: number for number, value in enumerate(sorted(v for v in sequences if v is not None))}
        closings = [
            {**{k: v for k, v in c.items() if k != "record"}, "sequence": rank.get(c["sequence"])}
            for c in state.closings
        ]
        return {
            "stream": stream,
            "stalled": [state.stalled, state.relay_retries, state.batch_limit],
            "closings": closings,
            "bus": bus_text(state.bus, rank),
            "queue": queue,
            "parked": sorted(json.dumps(m, sort_keys=True) for m in state.parked),
            "shed": len(state.shed),
            "requeued": [sorted(set(state.requeued_for)), sorted(state.requeue_starts.items())],
            "names": sorted(state.names),
        }

    # -- reading the system ---------------------------------------------------------------------

    def row(self) -> dict[str, Any] | None:
        """The order's claim row as plain values (``None`` when there is none)."""
        for item in self.table.items.values():
            if item.get("orderId", {}).get("S") == ORDER_ID:
                return {name: next(iter(value.values())) for name, value in item.items()}
        return None

    def intents(self) -> list[dict[str, Any]]:
        """The order's PaymentIntents as the emulator holds them (read only: not copied)."""
        intents: dict[str, dict[str, Any]] = vars(self.emulator)["_intents"]
        return [intent for intent in intents.values() if intent["metadata"].get("orderId") == ORDER_ID]

    def succeeded(self) -> list[dict[str, Any]]:
        return [intent for intent in self.intents() if intent["status"] == "succeeded"]

    # -- the actions ----------------------------------------------------------------------------

    def actions(self) -> Iterator[tuple[Any, ...]]:
        """Every action enabled now, without faults (see :meth:`variants`)."""
        state = self.state
        if self._relay_due():
            # A record the relay was never handed: its step goes first (see the module's docstring).
            yield ("relay", None)
            if self._poison_allowed():
                yield ("poison",)
            return
        for delivery in self.scope.deliveries:
            if delivery.name not in state.started:
                yield ("start", delivery.name, None)
        for index, execution in enumerate(state.executions):
            if execution.status == asl.RUNNING:
                yield ("run", index, None)
        for index in range(len(state.pending)):
            yield ("land", index)
        row = self.row()
        yield from self._time_actions(row)
        if state.redrives < self.scope.redrives:
            for index, execution in enumerate(state.executions):
                if execution.status == asl.TIMED_OUT:
                    yield ("redrive", index)
        yield from self._relay_actions()
        yield from self._webhook_actions()

    def _webhook_actions(self) -> Iterator[tuple[Any, ...]]:
        """Each event's delivery (its last, or one more to come), its loss; a payment settling."""
        state = self.state
        for index in range(len(state.outbox)):
            yield ("hook", index, "last")
            if state.webhook_repeats < self.scope.webhook_repeats:
                yield ("hook", index, "again")
            if state.webhook_losses < self.scope.webhook_losses:
                yield ("hook", index, "lost")
        for index, _ in enumerate(self._processing()):
            for outcome in SETTLEMENTS:
                yield ("settle", index, outcome)

    def _processing(self) -> list[dict[str, Any]]:
        """The order's PaymentIntents still ``processing`` (a debit the provider has not settled)."""
        return sorted(
            (intent for intent in self.intents() if intent["status"] == "processing"),
            key=lambda intent: str(intent["id"]),
        )

    def _relay_actions(self) -> Iterator[tuple[Any, ...]]:
        """The relay's retry (or, when it may lag, its step), and the deliveries of queued messages."""
        state = self.state
        if state.stream:
            yield ("relay", None)
            if self.scope.relay_lags and self._poison_allowed():
                yield ("poison",)
        if state.requeues < self.scope.requeues:
            seen: set[str] = set()
            for index, message in enumerate(state.queue):
                text = json.dumps({k: v for k, v in message.items() if k != "id"}, sort_keys=True)
                if text not in seen:  # two copies of one message: delivering either is the same
                    seen.add(text)
                    yield ("deliver", index)

    def _relay_due(self) -> bool:
        return bool(self.state.stream) and not self.state.stalled and not self.scope.relay_lags

    def _time_actions(self, row: dict[str, Any] | None) -> Iterator[tuple[Any, ...]]:
        """Moving the clock past the lease or the search grace, and the sweeps that then matter."""
        state = self.state
        if not (self.scope.clock and row and row["status"] == "CLAIMED" and not state.pending):
            return
        if self._settlement_in_flight(row):
            # Its lease is its settle-by deadline: the provider settles the payment before that (the
            # window is chosen so: SettlementWindowDays), so no jump may pass it while it is processing.
            return
        lease = int(row["leaseExpiresAt"])
        if lease >= state.now:
            yield ("clock", "lease")
        elif self.scope.sweeper:
            yield ("sweep", None)
        if self.scope.sweeper and lease + self.grace >= state.now:
            yield ("clock", "grace")

    def _settlement_in_flight(self, row: dict[str, Any]) -> bool:
        """Whether the row awaits the settlement of a PaymentIntent the provider still processes."""
        awaited = row.get("settlementIntentId")
        return awaited is not None and any(intent["id"] == awaited for intent in self._processing())

    def variants(
        self, action: tuple[Any, ...], done: StepResult, faults_used: int
    ) -> Iterator[tuple[Any, ...]]:
        """The faulty versions of a fault-free action, given what it did and the faults used before it."""
        if (
            faults_used >= self.scope.max_faults
            or action[0] not in ("start", "run", "sweep", "relay")
            or action[-1]
        ):
            return
        kinds = self.scope.fault_kinds
        if action[0] == "relay":
            yield from (
                ("relay", (k, kind))
                for k, operation in enumerate(done.calls, 1)
                for kind in RELAY_CALL_FAULTS[operation]
                if kind in kinds
            )
            return
        if action[0] == "sweep":
            yield from (
                ("sweep", ("write", k, kind))
                for k in range(1, done.writes + 1)
                for kind in SWEEP_FAULTS
                if kind in kinds
            )
            return
        verb, who = action[0], action[1]
        for where, calls, fault_kinds in (
            ("write", done.writes, WRITE_FAULTS),
            ("create", done.creates, CREATE_FAULTS),
        ):
            for k in range(1, calls + 1):
                for kind in fault_kinds:
                    if kind in kinds:
                        yield (verb, who, (where, k, kind))
        if "outage" in kinds:
            if done.dynamodb_calls:
                yield (verb, who, ("outage", "dynamodb"))
            if done.creates:
                yield (verb, who, ("outage", "provider"))

    def apply(self, action: tuple[Any, ...]) -> StepResult:
        result = self._apply(action)
        if action[0] not in ("relay", "poison") and self._relay_due() and not self._relay_faults_left():
            # The relay's step would be the only action, with no fault to choose: take it now.
            relayed = self._relay(None)
            result = replace(result, label=f"{result.label}; {relayed.label}")
        return result

    def _poison_allowed(self) -> bool:
        state = self.state
        return (
            "poison" in self.scope.fault_kinds
            and not state.poisons
            and not state.stalled
            and state.faults < self.scope.max_faults
        )

    def _relay_faults_left(self) -> bool:
        return self.state.faults < self.scope.max_faults and bool(self.scope.fault_kinds & RELAY_FAULTS)

    def _apply(self, action: tuple[Any, ...]) -> StepResult:
        kind = action[0]
        if kind == "start":
            # A delivery starts its execution and runs its first step at once: nothing outside the
            # execution can tell an execution that has not run its first Task from one not started.
            delivery = next(d for d in self.scope.deliveries if d.name == action[1])
            self.state.started.append(delivery.name)
            started = self._start(delivery.name, delivery.message())
            step = self._step(len(self.state.executions) - 1, action[2])
            return replace(step, label=f"{started.label}; {step.label}")
        if kind == "run":
            return self._step(action[1], action[2])
        if kind == "land":
            return self._land(action[1])
        if kind == "clock":
            return self._jump(action[1])
        if kind == "sweep":
            return self._sweep(action[1])
        if kind == "redrive":
            execution = self.state.executions[action[1]]
            self.machine.redrive(execution, self.state.now)
            self.state.redrives += 1
            return StepResult(f"redrive {self.state.actors[action[1]]} at {execution.state}")
        if kind == "relay":
            return self._relay(action[1])
        if kind == "poison":
            return self._poison()
        if kind == "deliver":
            self.state.requeues += 1
            return self._deliver(action[1])
        if kind == "hook":
            return self._hook(action[1], action[2])
        if kind == "settle":
            return self._settle(action[1], action[2])
        raise ValueError(action)

    def _start(self, actor: str, message: dict[str, Any]) -> StepResult:
        from payment_saga.execution_names import execution_name

        message_id = f"msg-{actor}"
        execution_input = {"order": message, "messageId": message_id}
        # Named by the product's one rule (the start function's), after the SQS message.
        name = execution_name(message["orderId"], message_id)
        self._start_execution(actor, f"{ACCOUNT_ARN}:{name}", execution_input)
        card = _METHODS.get(message["paymentMethod"], "card")
        return StepResult(f"deliver {actor} (paymentAttempt {message['paymentAttempt']}, {card})")

    def _start_execution(self, actor: str, arn: str, execution_input: dict[str, Any]) -> None:
        state = self.state
        execution = self.machine.start(arn, execution_input, state.now)
        state.executions.append(execution)
        state.messages.append(execution_input["order"])
        state.actors.append(actor)

    def _step(self, index: int, fault: tuple[Any, ...] | None) -> StepResult:
        """One Task of one execution: its Lambda invoked once (an outage: until its retries end)."""
        state = self.state
        execution = state.executions[index]
        task = execution.state
        # A Task run again by its Retry (the earlier invocation failed): said so in the findings.
        step = f"retried {task}" if execution.retry_count else task
        run = _Run(owner=execution.arn, payment_attempt=state.messages[index]["paymentAttempt"])
        if fault and fault[0] == "outage":
            run.outage = fault[1]
        else:
            run.plan = fault
        results: list[str] = []
        for _ in range(20):
            payload = self.machine.task_payload(execution)
            outcome = self._invoke(self.handlers[self.machine.task_function(execution)], payload, run)
            results.append(_describe(outcome))
            retries = execution.retry_count
            self.machine.after_task(execution, outcome)
            again = (
                execution.status == asl.RUNNING
                and execution.state == task
                and execution.retry_count > retries
            )
            if run.outage is None or not again:
                break
        if fault is not None:
            state.faults += 1
        label = f"{state.actors[index]}: {task}{_fault_text(fault)} -> {' / '.join(results)}"
        if execution.status != asl.RUNNING:
            label += f" => {execution.status} {execution.end or ''}".rstrip()
            state.findings.extend(self._ended_violations(index, execution, step))
        fired = fault is None or run.fired or run.outage is not None
        return StepResult(label, run.writes, run.creates, run.dynamodb_calls, fired)

    def _invoke(
        self, handler: Callable[..., Any], payload: dict[str, Any], run: _Run
    ) -> dict[str, Any] | asl.TaskFailure:
        self._run = run
        try:
            with contextlib.redirect_stdout(_DISCARD):  # metric lines (EMF) printed by single_metric
                result = handler(copy.deepcopy(payload), _LambdaContext())
        except Killed as killed:
            return asl.TaskFailure(killed.error, "the Lambda was killed")
        except Exception as exc:  # noqa: BLE001 - a handler's exception is the Task's error, by class name
            # Cause as Lambda reports a function error: its error JSON (Await Settlement reads it).
            cause = {"errorMessage": str(exc), "errorType": type(exc).__name__, "stackTrace": []}
            return asl.TaskFailure(type(exc).__name__, json.dumps(cause))
        finally:
            self._run = None
            self._metrics.clear_metrics()
        returned: dict[str, Any] = json.loads(json.dumps(result))
        return returned

    def _land(self, index: int) -> StepResult:
        pending = self.state.pending.pop(index)
        if pending.kind == "dynamodb":
            try:
                self.table.apply(pending.request["operation"], pending.request["request"])
                verdict = "applied"
            except ClientError as exc:
                verdict = exc.response.get("Error", {}).get("Code", "error")
            return StepResult(
                f"{_short(pending.owner)}'s late {pending.request['operation']} lands: {verdict}"
            )
        before = self._intent_ids()
        with self._forcing(pending.request["body"]):
            _, status, _ = self.link.send(
                "POST", pending.request["target"], pending.request["headers"], pending.request["body"]
            )
        self._attribute(before, pending.payment_attempt)
        return StepResult(f"{_short(pending.owner)}'s late charge request lands: HTTP {status}")

    def _jump(self, how: str) -> StepResult:
        state = self.state
        row = self.row()
        assert row is not None
        lease = int(row["leaseExpiresAt"])
        target = lease + 1 if how == "lease" else max(lease, state.now) + self.grace + 1
        state.now = self.clock.now = target
        timed_out = []
        for index, execution in enumerate(state.executions):
            if (
                execution.status == asl.RUNNING
                and target - execution.started_at > self.machine.timeout_seconds
            ):
                self.machine.time_out(execution)
                timed_out.append(f"{state.actors[index]} at {execution.state}")
        what = "past the lease" if how == "lease" else "past the lease and the sweeper's search grace"
        label = f"clock +{target - START}s ({what})"
        if timed_out:
            label += f"; timed out: {', '.join(timed_out)}"
        return StepResult(label)

    def _sweep(self, fault: tuple[Any, ...] | None) -> StepResult:
        from payment_saga.reconcile import reconcile

        run = _Run(owner="sweeper", payment_attempt="", plan=fault)
        self._run = run
        try:
            report = reconcile(
                self.store, self.provider, now=self.clock(), apply=True, search_grace_seconds=self.grace
            )
            text = ", ".join(f"{d.outcome.value} ({d.reason})" for d in report.decisions) or "nothing stale"
        except Killed as killed:
            text = f"the sweeper died ({killed.error})"
        finally:
            self._run = None
        if fault is not None:
            self.state.faults += 1
        return StepResult(f"sweep{_fault_text(fault)}: {text}", run.writes, fired=fault is None or run.fired)

    # -- the stream, the relay and the orders queue -----------------------------------------------

    def _on_records(self, records: list[dict[str, Any]]) -> None:
        """A write was applied: its stream records join the stream (those the mapping's filter keeps)."""
        state = self.state
        for change in records:
            record = {"sequence": state.stream_next, "created": state.now, **change}
            state.stream_next += 2  # room for a poison record ahead of it (see _poison)
            closed = closing(record) if change["Keys"]["orderId"]["S"] == ORDER_ID else None
            if closed is not None:
                record["closing"] = len(state.closings)
                state.closings.append(closed)
            if self._passes_filter(change):
                state.stream.append(record)

    def _passes_filter(self, change: dict[str, Any]) -> bool:
        """The mapping's filter on a record (memoised on the change: moto's matcher is not cheap)."""
        key = canonical(change)
        passes = self._filtered.get(key)
        if passes is None:
            passes = self._filtered[key] = self._matches(
                lambda_record({"sequence": 0, "created": 0, **change}, STREAM_ARN)
            )
        return passes

    def _poison(self) -> StepResult:
        """A record the relay cannot read lands just ahead of the records it was not handed yet."""
        state = self.state
        state.poisons += 1
        state.faults += 1
        state.stream.insert(0, poison_record(state.stream[0]["sequence"] - 1, state.now))
        return StepResult("[poison] a record that is no claim row lands on the stream ahead of the order's")

    def _relay(self, fault: tuple[Any, ...] | None) -> StepResult:
        """One invocation of the relay on the records not done yet, and what the mapping does after it."""
        state = self.state
        mapping = self.mapping
        if mapping.max_record_age_seconds >= 0:
            while state.stream and state.now - state.stream[0]["created"] > mapping.max_record_age_seconds:
                state.shed.append(state.stream.pop(0))
        if not state.stream:
            return StepResult("relay: every record it had was older than the mapping's record age")
        size = min(mapping.batch_size, state.batch_limit or mapping.batch_size)
        batch = state.stream[:size]
        records = [lambda_record(record, STREAM_ARN) for record in batch]
        run = _Run(owner="relay", payment_attempt="", plan=fault)
        self._run = run
        function_error: str | None = None
        response: Any = None
        try:
            with contextlib.redirect_stdout(_DISCARD):
                response = self.relay_handler({"Records": records}, _LambdaContext())
        except Killed as killed:
            function_error = killed.error
        except Exception as exc:  # noqa: BLE001 - an unhandled error is a function error, retried whole
            function_error = type(exc).__name__
        finally:
            self._run = None
            self._relay_record = None
            self._metrics.clear_metrics()
        if fault is not None:
            state.faults += 1
        failed_from = 0 if function_error else self._failed_from(response, records)
        what = f"relay{_relay_fault_text(fault)}: {len(batch)} record(s)"
        if failed_from is None:
            del state.stream[: len(batch)]
            state.stalled, state.relay_retries, state.batch_limit = False, 0, None
            label = f"{what}, all done"
        else:
            del state.stream[:failed_from]
            left = len(batch) - failed_from
            label = (
                f"{what}, {failed_from} done, retried from the next ({function_error or 'batchItemFailures'})"
            )
            if function_error and mapping.bisect_on_error and left > 1:
                state.batch_limit = left // 2  # a split is not a retry (as in Lambda)
            else:
                state.relay_retries += 1
                state.batch_limit = None
            if 0 <= mapping.max_retry_attempts < state.relay_retries:
                state.shed.extend(state.stream[:left])
                del state.stream[:left]
                state.relay_retries = 0
                label += f"; retries exhausted, {left} record(s) skipped"
            state.stalled = bool(state.stream)
        return StepResult(label, fired=fault is None or run.fired, calls=tuple(run.calls))

    def _failed_from(self, response: Any, records: list[dict[str, Any]]) -> int | None:
        """The first record Lambda retries after this response (None: all done), as Lambda reads it."""
        if not self.mapping.report_batch_item_failures:
            return None
        try:
            failed = {str(item["itemIdentifier"]) for item in response.get("batchItemFailures") or []}
        except (AttributeError, TypeError, KeyError):
            return 0  # a malformed response fails the whole batch
        if not failed:
            return None
        sequence = [record["dynamodb"]["SequenceNumber"] for record in records]
        if not failed <= set(sequence):
            return 0
        return min(sequence.index(s) for s in failed)

    def _deliver(self, index: int) -> StepResult:
        """The start function receives one message of the orders queue (its real record handling)."""
        state = self.state
        message = state.queue.pop(index)
        attributes = {
            name: {"stringValue": value["StringValue"], "dataType": value["DataType"]}
            for name, value in (message.get("attributes") or {}).items()
        }
        record = {
            "messageId": message["id"],
            "receiptHandle": f"receipt-{message['id']}",
            "body": message["body"],
            "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": str(state.now * 1000)},
            "messageAttributes": attributes,
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
            "awsRegion": REGION,
        }
        started = len(state.executions)
        self._delivering = message
        try:
            with contextlib.redirect_stdout(_DISCARD):
                response = self.start_handler({"Records": [record]}, _LambdaContext())
        finally:
            self._delivering = None
            self._metrics.clear_metrics()
        if response.get("batchItemFailures"):
            raise AssertionError(f"the start function failed a message the model sent: {response}")
        names = ", ".join(
            f"{k}={v['StringValue']}" for k, v in sorted((message.get("attributes") or {}).items())
        )
        label = f"deliver the {message['sender']}'s message ({names})"
        if len(state.executions) == started:
            return StepResult(f"{label}: its execution already exists, nothing started")
        return StepResult(f"{label}: starts {state.actors[-1]}")

    def _hook(self, index: int, how: str) -> StepResult:
        """One delivery of a Stripe event to the real webhook consumer (``last``: its last one;
        ``again``: another follows), or its loss (``lost``: never delivered)."""
        state = self.state
        event = state.outbox[index]
        what = describe(event)
        if how == "lost":
            state.webhook_losses += 1
            del state.outbox[index]
            return StepResult(f"webhook {what}: lost, never delivered")
        if how == "again":
            state.webhook_repeats += 1
        else:
            del state.outbox[index]
        state.webhook_deliveries += 1
        record = sqs_record(event, state.webhook_deliveries, state.now)
        self._decisions = []
        try:
            with contextlib.redirect_stdout(_DISCARD):
                response = self.webhook_handler({"Records": [record]}, _LambdaContext())
        finally:
            self._metrics.clear_metrics()
        decided = ", ".join(f"{d.outcome.value}{' (written)' if d.applied else ''}" for d in self._decisions)
        again = "" if how == "last" else " (again later)"
        label = f"webhook {what} delivered{again}: {decided or 'no decision'}"
        if response.get("batchItemFailures"):
            if how == "last":
                state.outbox.insert(index, event)  # SQS delivers it again
            label += "; the consumer failed it, it is delivered again"
        return StepResult(label)

    def _settle(self, index: int, outcome: str) -> StepResult:
        """The provider settles a ``processing`` PaymentIntent (a debit), as the emulator's timer does."""
        intent = self._processing()[index]
        self.emulator.set_status(intent["id"], SETTLEMENTS[outcome])
        return StepResult(f"the provider settles {intent['id']} as {outcome}")

    def _send(self, sender: str, request: dict[str, Any]) -> str:
        """A message lands on the orders queue. Returns its MessageId."""
        state = self.state
        state.messages_sent += 1
        message_id = f"msg_{state.messages_sent:012d}"
        body = request["MessageBody"]
        message = {
            "id": message_id,
            "sender": sender,
            "body": body if isinstance(body, str) else json.dumps(body, sort_keys=True),
            "attributes": request.get("MessageAttributes") or {},
            "delaySeconds": request.get("DelaySeconds", 0),
        }
        if sender == "relay":
            handled = self._relay_record or {}
            sequence = (handled.get("dynamodb") or {}).get("SequenceNumber")
            pending = next((r for r in state.stream if str(r["sequence"]) == sequence), {})
            message["for"] = pending.get("closing")
            state.requeued_for.append(-1 if message["for"] is None else message["for"])
        state.queue.append(message)
        return message_id

    def _integration(
        self, execution: asl.Execution, name: str, resource: str, parameters: dict[str, Any]
    ) -> None:
        """A Task of the state machine that is not a Lambda: its message or its events reach the model."""
        if resource.endswith(":states:::sqs:sendMessage"):
            if parameters["QueueUrl"] != "${OrdersQueueUrl}":
                raise asl.Unsupported(f"state {name!r} sends to {parameters['QueueUrl']}")
            self._send("state machine", parameters)
        elif resource.endswith(":states:::events:putEvents"):
            for entry in parameters["Entries"]:
                detail = entry["Detail"] if isinstance(entry["Detail"], dict) else json.loads(entry["Detail"])
                self.state.bus.append(
                    {"publisher": "state machine", "detailType": entry["DetailType"], "detail": detail}
                )
        else:
            raise asl.Unsupported(f"state {name!r}: resource {resource}")

    def _relay_fault(self, operation: str) -> str | None:
        """The fault planned for this call of the relay (counted), or None."""
        run = self._run
        if run is None or run.owner != "relay":
            return None
        run.calls.append(operation)
        if run.plan and run.plan[0] == len(run.calls):
            run.fired = True
            return str(run.plan[1])
        return None

    def _answer_events(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        if operation != "PutEvents":
            raise ServiceError("UnknownOperation", f"the model's bus does not answer {operation}", 400)
        kind = self._relay_fault("PutEvents")
        if kind == "put_failed":
            raise ServiceError("InternalException", "PutEvents failed (model)")
        entries = params["Entries"]
        results: list[dict[str, Any]] = []
        for number, entry in enumerate(entries, 1):
            if entry.get("EventBusName") != BUS_NAME or (kind == "entry_refused" and number == len(entries)):
                results.append({"ErrorCode": "InternalFailure", "ErrorMessage": "entry refused (model)"})
                continue
            publisher = "relay" if self._run is not None and self._run.owner == "relay" else "start function"
            self.state.bus.append(
                {
                    "publisher": publisher,
                    "detailType": entry["DetailType"],
                    "detail": json.loads(entry["Detail"]),
                }
            )
            results.append({"EventId": f"event-{len(self.state.bus)}"})
        self._after_applied(kind, "PutEvents")
        return {"FailedEntryCount": sum("ErrorCode" in r for r in results), "Entries": results}

    def _answer_sqs(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        if operation != "SendMessage":
            raise ServiceError("UnknownOperation", f"the model's queues do not answer {operation}", 400)
        kind = self._relay_fault("SendMessage")
        if kind == "send_failed":
            raise ServiceError("InternalFailure", "SendMessage failed (model)")
        if params["QueueUrl"] == ORDERS_QUEUE_URL:
            sender = "relay" if self._run is not None and self._run.owner == "relay" else "start function"
            message_id = self._send(sender, params)
        elif params["QueueUrl"] == PARKED_QUEUE_URL:
            attributes = params.get("MessageAttributes") or {}
            self.state.parked.append(
                {k: v["StringValue"] for k, v in attributes.items() if k != "sequenceNumber"}
            )
            message_id = f"parked-{len(self.state.parked)}"
        else:
            raise ServiceError("AWS.SimpleQueueService.NonExistentQueue", params["QueueUrl"], 400)
        self._after_applied(kind, "SendMessage")
        return {"MessageId": message_id}

    def _after_applied(self, kind: str | None, operation: str) -> None:
        if kind == "answer_lost":
            raise ServiceError("InternalFailure", f"{operation} applied, its answer lost (model)")
        if kind == "relay_died":
            raise Killed("Sandbox.Timedout")

    def _answer_stepfunctions(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        if operation != "StartExecution" or params["stateMachineArn"] != STATE_MACHINE_ARN:
            raise ServiceError("UnknownOperation", f"the model does not answer {operation}", 400)
        state = self.state
        name = params["name"]
        if name in state.names:
            raise ServiceError("ExecutionAlreadyExists", f"Execution Already Exists: '{name}'", 400)
        state.names.append(name)
        message = self._delivering or {}
        if message.get("sender") == "relay" and message.get("for") is not None:
            state.requeue_starts[message["for"]] = state.requeue_starts.get(message["for"], 0) + 1
        arn = f"{ACCOUNT_ARN}:{name}"
        self._start_execution(f"r{len(state.names)}", arn, json.loads(params["input"]))
        return {"executionArn": arn, "startDate": float(state.now)}

    # -- faults -----------------------------------------------------------------------------------

    def _on_dynamodb(self, operation: str, request: dict[str, Any], apply: Callable[[], Any]) -> Any:
        run = self._run
        if run is None:
            return apply()
        run.dynamodb_calls += 1
        if run.outage == "dynamodb":
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "outage (model)"}},
                operation,
            )
        if operation not in WRITES:
            return apply()
        run.writes += 1
        if not run.plan or run.plan[0] != "write" or run.plan[1] != run.writes:
            return apply()
        run.fired = True
        kind = run.plan[2]
        if kind == "late":
            self.state.pending.append(
                Pending("dynamodb", run.owner, {"operation": operation, "request": copy.deepcopy(request)})
            )
            raise Killed("States.Timeout")
        with contextlib.suppress(ClientError):
            first = apply()
        if kind == "lost_resend":
            return apply()
        if kind == "die_after":
            raise Killed("Runtime.ExitError")
        del first
        raise ClientError(
            {"Error": {"Code": "InternalServerError", "Message": "answer lost (model)"}}, operation
        )

    def _on_provider(
        self, method: str, target: str, headers: dict[str, str], body: bytes, send: Callable[[], Any]
    ) -> Any:
        run = self._run
        if run is None:
            return send()
        creates = method == "POST" and target == "/v1/payment_intents"
        if run.outage == "provider" and creates:
            return _stripe_error(500, "api_error", "An unknown error occurred (outage, model)")
        if not creates:
            return send()
        run.creates += 1
        planned = run.plan and run.plan[0] == "create" and run.plan[1] == run.creates
        kind = run.plan[2] if planned and run.plan else None
        if kind is not None:
            run.fired = True
        if kind == "refused":
            return _stripe_error(401, "invalid_request_error", "Invalid API Key provided (model)")
        if kind == "late":
            self.state.pending.append(
                Pending(
                    "provider",
                    run.owner,
                    {"target": target, "headers": dict(headers), "body": body},
                    run.payment_attempt,
                )
            )
            raise Killed("States.Timeout")
        if kind == "lost":
            self.emulator.inject("fail_after_apply", endpoint="create", times=1)
        before = self._intent_ids()
        with self._forcing(body):
            reply = send()
        self._attribute(before, run.payment_attempt)
        return reply

    @contextlib.contextmanager
    def _forcing(self, body: bytes) -> Iterator[None]:
        """The confirm of a stand-in payment method ends as the method it stands for would
        (:data:`tests.model.webhooks.FORCED_OUTCOMES`); nothing is left forced after the request
        (a create replayed from its idempotency key confirms nothing)."""
        status = forced_outcome(body)
        if status is not None:
            self.emulator.force_outcome(status, order_id=ORDER_ID)
        try:
            yield
        finally:
            vars(self.emulator)["_forced"].clear()

    def _intent_ids(self) -> set[str]:
        return set(vars(self.emulator)["_intents"])

    def _attribute(self, before: set[str], payment_attempt: str) -> None:
        for intent_id in self._intent_ids() - before:
            self.state.intent_attempts.setdefault(intent_id, payment_attempt)

    # -- invariants -------------------------------------------------------------------------------

    def violations(self) -> list[str]:
        """The promise, checked after every step."""
        found: list[str] = []
        intents = self.intents()
        succeeded = [intent["id"] for intent in intents if intent["status"] == "succeeded"]
        if len(succeeded) > 1:
            found.append(f"more than one charge: {len(succeeded)} succeeded PaymentIntents for the order")
        found.extend(self._declined_sent_again(intents))
        row = self.row()
        if row is not None:
            found.extend(self._row_violations(row, intents))
        for index, execution in enumerate(self.state.executions):
            found.extend(self._execution_violations(index, execution, row, succeeded))
        found.extend(self._relay_violations(succeeded))
        found.extend(self.state.findings)
        return found

    def _relay_violations(self, succeeded: list[str]) -> list[str]:
        """The relay's part of the promise, at every step: events announce what happened, in order;
        a re-queue is of a release proven never charged, and starts one execution; nothing is skipped."""
        state = self.state
        found = event_violations(state.bus, state.closings, succeeded)
        for index in sorted(set(state.requeued_for)):
            closed = state.closings[index] if index >= 0 else None
            if closed is None or (closed["status"], closed["reason"]) != ("RELEASED", "NOT_CHARGED"):
                what = (
                    "a write that closed nothing"
                    if closed is None
                    else f"{closed['status']} {closed['reason'] or ''}"
                )
                found.append(
                    f"the relay re-queued the order for {what.strip()}: it was not proven never charged"
                )
        for index, started in sorted(state.requeue_starts.items()):
            if started > 1:
                found.append(
                    f"an order proven never charged was re-queued {started} times for one release"
                    f" (attempt {state.closings[index]['attempt']}): {started} executions started"
                )
        if state.shed:
            found.append(
                f"the relay's event source skipped {len(state.shed)} record(s): their outcomes are lost"
            )
        if any(message.get("orderId") == ORDER_ID for message in state.parked):
            found.append("the relay parked a record of the order: its outcome is never published")
        return found

    def _declined_sent_again(self, intents: list[dict[str, Any]]) -> list[str]:
        declined: set[str] = set()
        found = []
        for intent in intents:
            attempt = self.state.intent_attempts.get(intent["id"])
            if attempt in declined:
                found.append(
                    f"paymentAttempt {attempt!r} was declined, and the provider was asked to charge it again"
                )
            if intent["status"] in ("requires_payment_method", "canceled") and attempt is not None:
                declined.add(attempt)
        return found

    def _row_violations(self, row: dict[str, Any], intents: list[dict[str, Any]]) -> list[str]:
        found = []
        status = row["status"]
        if status == "CLAIMED" and "expiresAt" in row:
            found.append("an open (CLAIMED) claim carries a TTL: DynamoDB may delete it while it is open")
        if status == "COMPLETED":
            charge = next((i for i in intents if i["id"] == row.get("chargeId")), None)
            if charge is None or charge["status"] != "succeeded":
                found.append("the claim is COMPLETED with a charge the provider does not show as succeeded")
        if status == "RELEASED":
            attempt = str(row["attempt"])
            charged = [
                i["id"]
                for i in intents
                if i["status"] == "succeeded" and i["metadata"].get("attempt") == attempt
            ]
            if charged:
                reason = row.get("releaseReason")
                found.append(f"the claim is RELEASED ({reason}) but its attempt {attempt} was charged")
        return found

    def _execution_violations(
        self, index: int, execution: asl.Execution, row: dict[str, Any] | None, succeeded: list[str]
    ) -> list[str]:
        actor = self.state.actors[index]
        found: list[str] = []
        if execution.status == asl.RUNNING or execution.end is None:
            return found
        holds = row is not None and row["status"] == "CLAIMED" and row["claimToken"] == execution.arn
        if execution.end in HOLDS_NOTHING and holds:
            found.append(
                f"{actor} ended in {execution.end!r} but holds the claim (CLAIMED under its token):"
                " nothing will act on it, and every later delivery is suppressed until the sweeper frees it"
            )
        if execution.end == "Order Charged" and execution.data.get("chargeId") not in succeeded:
            found.append(f"{actor} ended in 'Order Charged' with a charge the provider does not show")
        return found

    def _ended_violations(self, index: int, execution: asl.Execution, step: str) -> list[str]:
        """What must hold when an execution ends (in its last ``step``), of what it could know
        then: an execution whose attempt a webhook had already settled (completed or released) does
        not end in Needs Reconciliation: the order was resolved, and a person would be asked about
        it for nothing, with an OrderNeedsReconciliation the order's subscribers act on."""
        if execution.end != NEEDS_RECONCILIATION:
            return []
        attempt = (execution.data.get("claim") or {}).get("attempt")
        settled = [
            c
            for c in self.state.closings
            if c["webhookEventId"] and c["status"] in ("COMPLETED", "RELEASED") and c["attempt"] == attempt
        ]
        if not settled:
            return []
        closed = f"{settled[0]['status']} {settled[0]['reason'] or ''}".strip()
        return [
            f"{self.state.actors[index]} {_SETTLED_FIRST} {step} step ({closed} by the webhook): the step"
            " found it closed"
        ]

    def quiescent(self) -> bool:
        """Every delivery sent, every execution ended, no write in flight: a complete schedule."""
        state = self.state
        return (
            len(state.started) == len(self.scope.deliveries)
            and not state.pending
            and not state.stream
            and not state.outbox
            and not self._processing()
            and all(e.status != asl.RUNNING for e in state.executions)
        )

    def settled(self) -> bool:
        """A complete schedule whose claim no clock jump or sweep can move on any more: check its end.

        (A quiescent state whose claim is still open is not checked itself: the exploration goes
        on from it through the clock and the sweeper to the states that are.)
        """
        if not self.quiescent():
            return False
        row = self.row()
        return (
            row is None
            or row["status"] != "CLAIMED"
            or not any(action[0] == "clock" for action in self.actions())
        )

    def finish(self) -> tuple[list[str], list[str]]:
        """End a complete schedule with no more faults: run every execution out, sweep a claim left
        open past the grace, let the relay drain the stream, deliver every queued message; repeat
        until nothing is left to do.

        Returns (what was done, violations): the order must end charged once, or declined, with the
        events and re-queues that says (:meth:`end_violations`).
        """
        done: list[str] = []
        return done, self._finish(done)

    def _finish(self, done: list[str]) -> list[str]:
        state = self.state
        for _ in range(_FINISH_STEPS):
            running = next((i for i, e in enumerate(state.executions) if e.status == asl.RUNNING), None)
            row = self.row()
            if state.stream:
                done.append(self._relay(None).label)
            elif running is not None:
                done.append(self._step(running, None).label)
            elif state.outbox:
                done.append(self._hook(0, "last").label)
            elif self._processing():
                done.append(self._settle(0, "succeeded").label)
            elif row and row["status"] == "CLAIMED" and not state.pending:
                before = self.table.state_text()
                done.append(self._jump("grace").label)
                done.append(self._sweep(None).label)
                if self.table.state_text() == before:  # the sweeper leaves it open: say so
                    return self.violations() or self.end_violations()
            elif state.queue:
                done.append(self._deliver(0).label)
            else:
                return self.violations() or self.end_violations()
            found = self.violations()
            if found:
                return found
        return [
            f"the schedule did not come to rest within {_FINISH_STEPS} steps of its end",
            *self.end_violations(),
        ]

    def end_violations(self) -> list[str]:
        """Once nothing is left to do: the order is charged once or declined, each release proven
        never charged was re-queued exactly once (or, at the bound, needs attention), and the events
        follow their rule (docs/outcome-events.md)."""
        row = self.row()
        charges = self.succeeded()
        found = []
        charged = row and row["status"] == "COMPLETED" and len(charges) == 1
        declined = (
            row and row["status"] == "RELEASED" and row.get("releaseReason") == "DECLINED" and not charges
        )
        if not (charged or declined):
            status = (
                "no claim" if row is None else f"{row['status']} {row.get('releaseReason') or ''}".strip()
            )
            found.append(
                f"the order ended {status} with {len(charges)} charge(s): neither charged once nor declined"
            )
        state = self.state
        if state.stream:
            found.append(f"the relay never got through {len(state.stream)} record(s)")
        if state.poisons and not state.parked:
            found.append("a record the relay cannot read was never parked")
        for index, closed in enumerate(state.closings):
            if (closed["status"], closed["reason"]) != ("RELEASED", "NOT_CHARGED"):
                continue
            attention = any(
                e["publisher"] == "relay"
                and e["detailType"] == "OrderNeedsAttention"
                and e["detail"].get("sequence") == closed["sequence"]
                for e in state.bus
            )
            started = state.requeue_starts.get(index, 0)
            if not started and not attention:
                found.append(
                    f"an order proven never charged (released at attempt {closed['attempt']}) was never"
                    " re-queued, and nothing says it needs attention"
                )
        found.extend(final_outcome_violations(state.bus, [intent["id"] for intent in charges]))
        return found


#: Steps the end of a schedule may take (every execution run out, re-queues and their executions).
_FINISH_STEPS = 200


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


@contextlib.contextmanager
def _patched(target: Any, attribute: str, value: Any) -> Iterator[None]:
    original = getattr(target, attribute)
    setattr(target, attribute, value)
    try:
        yield
    finally:
        setattr(target, attribute, original)


def _root() -> Any:
    from saga_local.template import ROOT

    return ROOT


def _stripe_error(status: int, kind: str, message: str) -> tuple[bytes, int, dict[str, str]]:
    return (
        json.dumps({"error": {"type": kind, "message": message}}).encode(),
        status,
        {"Request-Id": "req_model"},
    )


def _short(arn: str) -> str:
    return arn.rsplit(":", 1)[-1]


def _fault_text(fault: tuple[Any, ...] | None) -> str:
    if fault is None:
        return ""
    if fault[0] == "outage":
        return f" [{fault[1]} outage for the whole step]"
    what = "DynamoDB write" if fault[0] == "write" else "provider charge request"
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
