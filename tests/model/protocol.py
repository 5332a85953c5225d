"""A model of the claim protocol whose steps run the real code, and its invariants.

One order; a few deliveries of it (each an execution of the real state machine definition, its Task
steps invoking the real handlers, which use the real ``ClaimsStore`` on moto and the real
``StripeProvider`` on the Stripe emulator); the sweeper (``payment_saga.reconcile.reconcile``); a
clock that jumps past the lease or past the sweeper's search grace (timing out every execution older
than the state machine's ``TimeoutSeconds``); a redrive of a timed-out execution; a re-send of the
order once it was released ``NOT_CHARGED``. Faults are actions too, up to a budget:

=================  ====================================================================================
``lost_resend``    a DynamoDB write is applied, its answer lost, and botocore sends it again
``lost_raise``     a DynamoDB write is applied, its answer lost, and the handler fails (retries gone)
``late``           a write (DynamoDB, or the provider's create) is sent, the Lambda is killed at its
                   timeout, and the write lands at a later step of the model, before the clock moves
``die_after``      a DynamoDB write lands, then the Lambda dies
``lost``           the provider applies the charge and its answer is lost (a 500 after the commit)
``refused``        the provider refuses the request before executing it (401: "not attempted")
``outage``         every DynamoDB call (or provider call) of one Task fails until its retries run out
=================  ====================================================================================

A declined card is not a fault but a delivery's payment method. Interleaving is at the grain of one
Lambda invocation (or one sweep, one clock jump...): a Lambda's calls run back to back, and what can
happen *inside* an invocation is what the faults say (an answer lost, a write delayed past others).

The invariants (docs/design.md) are checked after every step; see :meth:`World.violations` and
:meth:`World.end_violations`.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import itertools
import json
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
from saga_local.aws.template import load_template
from saga_local.stripe_emulator import ProviderEmulator
from tests.model import asl
from tests.model.dynamo import WRITES, ModelTable
from tests.model.stripe_link import InProcessLink, emulator_restore, emulator_snapshot, emulator_summary

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ORDER_ID = "ORDER-1"
TABLE = "claims"
START = 1_790_000_000
ACCOUNT_ARN = "arn:aws:states:us-east-1:123456789012:execution:PaymentSaga"
VISA = "pm_card_visa"
DECLINED_CARD = "pm_card_chargeDeclined"

WRITE_FAULTS = ("lost_resend", "lost_raise", "late", "die_after")
CREATE_FAULTS = ("lost", "late", "refused")
SWEEP_FAULTS = ("lost_resend", "late")
ALL_FAULTS = frozenset({*WRITE_FAULTS, *CREATE_FAULTS, "outage"})

#: Ends of an execution that say it holds no open claim: the order is charged, declined, not
#: charged, a duplicate of someone else's, or refused. An execution that ended so must not hold the
#: row ``CLAIMED``: nobody would ever act on it, and it suppresses every later delivery until the
#: sweeper frees it.
HOLDS_NOTHING = frozenset(
    {"Duplicate Suppressed", "Claim Failed", "Payment Declined", "Charge Not Attempted", "Order Conflict"}
)


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


@dataclass(frozen=True)
class StepResult:
    label: str
    writes: int = 0
    creates: int = 0
    dynamodb_calls: int = 0
    fired: bool = True


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
        self.lease_seconds = int(template["Parameters"]["ClaimLeaseSeconds"]["Default"])
        from payment_saga.claims import ClaimsStore
        from payment_saga.payments import StripeProvider
        from payment_saga.reconcile import DEFAULT_SEARCH_GRACE_SECONDS

        self.grace = DEFAULT_SEARCH_GRACE_SECONDS
        self.store = ClaimsStore(
            TABLE, client=cast("Any", self.table), clock=self.clock, lease_seconds=self.lease_seconds
        )
        self.emulator = ProviderEmulator(clock=self.clock, search_lag_seconds=self.scope.search_lag_seconds)
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
        self.machine = asl.StateMachine(definition)
        self.handlers = self._handlers(template, definition)
        self._wire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

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

    def fingerprint(self) -> str:
        """The state as text, up to renaming: the provider's random ids (``pi_...``) by order of
        appearance, and deliveries of the very same message by whichever naming sorts first."""
        state = self.state
        common = json.dumps(
            {
                "table": self.table.state_text(),
                "provider": emulator_summary(self.emulator),
                "now": state.now,
                "budget": [state.faults, state.redrives, state.requeues],
                "attempts": sorted(state.intent_attempts.items()),
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
        if state.requeues < self.scope.requeues and self._released_not_charged(row):
            yield ("requeue",)

    def _time_actions(self, row: dict[str, Any] | None) -> Iterator[tuple[Any, ...]]:
        """Moving the clock past the lease or the search grace, and the sweeps that then matter."""
        state = self.state
        if not (self.scope.clock and row and row["status"] == "CLAIMED" and not state.pending):
            return
        lease = int(row["leaseExpiresAt"])
        if lease >= state.now:
            yield ("clock", "lease")
        elif self.scope.sweeper:
            yield ("sweep", None)
        if self.scope.sweeper and lease + self.grace >= state.now:
            yield ("clock", "grace")

    def variants(
        self, action: tuple[Any, ...], done: StepResult, faults_used: int
    ) -> Iterator[tuple[Any, ...]]:
        """The faulty versions of a fault-free action, given what it did and the faults used before it."""
        if faults_used >= self.scope.max_faults or action[0] not in ("start", "run", "sweep") or action[-1]:
            return
        kinds = self.scope.fault_kinds
        if action[0] == "sweep":
            for k in range(1, done.writes + 1):
                for kind in SWEEP_FAULTS:
                    if kind in kinds:
                        yield ("sweep", ("write", k, kind))
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
        if kind == "requeue":
            self.state.requeues += 1
            return self._requeue()
        raise ValueError(action)

    def _start(self, actor: str, message: dict[str, Any]) -> StepResult:
        state = self.state
        execution = self.machine.start(
            f"{ACCOUNT_ARN}:{actor}", {"order": message, "messageId": f"msg-{actor}"}, state.now
        )
        state.executions.append(execution)
        state.messages.append(message)
        state.actors.append(actor)
        card = "declining card" if message["paymentMethod"] == DECLINED_CARD else "card"
        return StepResult(f"deliver {actor} (paymentAttempt {message['paymentAttempt']}, {card})")

    def _requeue(self) -> StepResult:
        row = self.row()
        attempt = row["paymentAttempt"] if row else self.scope.deliveries[0].payment_attempt
        delivery = next(
            (d for d in self.scope.deliveries if d.payment_attempt == attempt), self.scope.deliveries[0]
        )
        actor = f"r{self.state.requeues}"
        result = self._start(actor, delivery.message())
        return StepResult(f"re-send the order released NOT_CHARGED: {result.label}")

    def _released_not_charged(self, row: dict[str, Any] | None) -> bool:
        return bool(row and row["status"] == "RELEASED" and row.get("releaseReason") == "NOT_CHARGED")

    def _step(self, index: int, fault: tuple[Any, ...] | None) -> StepResult:
        """One Task of one execution: its Lambda invoked once (an outage: until its retries end)."""
        state = self.state
        execution = state.executions[index]
        task = execution.state
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
            return asl.TaskFailure(type(exc).__name__, str(exc))
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
        reply = send()
        self._attribute(before, run.payment_attempt)
        return reply

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

    def quiescent(self) -> bool:
        """Every delivery sent, every execution ended, no write in flight: a complete schedule."""
        state = self.state
        return (
            len(state.started) == len(self.scope.deliveries)
            and not state.pending
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
        """End a complete schedule: sweep past the grace, re-send a NOT_CHARGED order, run it out.

        Returns (what was done, violations): the order must end charged once, or declined.
        """
        done: list[str] = []
        for _ in range(3):
            row = self.row()
            if row and row["status"] == "CLAIMED":
                done.append(self._jump("grace").label)
                done.append(self._sweep(None).label)
                row = self.row()
            if row is not None and not self._released_not_charged(row):
                break
            self.state.requeues += 1
            done.append(self._requeue().label)
            index = len(self.state.executions) - 1
            while self.state.executions[index].status == asl.RUNNING:
                done.append(self._step(index, None).label)
            found = self.violations()
            if found:
                return done, found
        return done, self.end_violations()

    def end_violations(self) -> list[str]:
        row = self.row()
        charges = self.succeeded()
        if row and row["status"] == "COMPLETED" and len(charges) == 1:
            return []
        if row and row["status"] == "RELEASED" and row.get("releaseReason") == "DECLINED" and not charges:
            return []
        status = "no claim" if row is None else f"{row['status']} {row.get('releaseReason') or ''}".strip()
        return [f"the order ended {status} with {len(charges)} charge(s): neither charged once nor declined"]


@contextlib.contextmanager
def _patched(target: Any, attribute: str, value: Any) -> Iterator[None]:
    original = getattr(target, attribute)
    setattr(target, attribute, value)
    try:
        yield
    finally:
        setattr(target, attribute, original)


def _root() -> Any:
    from saga_local.aws.template import ROOT

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
