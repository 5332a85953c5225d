"""The world the model drives, set up and wired: moto, the emulator, the handlers and their services."""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import json
import os
import pickle
import re
import sys
import time
import types
from typing import TYPE_CHECKING, Any, Self, cast

import boto3
import stripe
from botocore.exceptions import ClientError
from moto import mock_aws

from saga_local.aws.stack import LOCAL_API_KEY, REGION, table_request
from saga_local.stripe_emulator import ProviderEmulator
from saga_local.template import load_template
from tests.model import asl
from tests.model.dynamo import WRITES, ModelTable, canonical
from tests.model.relay import Mapping, ServiceError, bus_text, closing, lambda_record, served_client
from tests.model.state import (
    _ACTOR,
    _DISCARD,
    ACCOUNT_ARN,
    BUS_NAME,
    INSIDE,
    LAST_TRY_INSIDE,
    LOST_INSIDE,
    ORDER_ID,
    ORDERS_QUEUE_URL,
    PARKED_QUEUE_URL,
    STATE_MACHINE_ARN,
    STREAM_ARN,
    TABLE,
    Killed,
    Pending,
    Scope,
    Snapshot,
    State,
    _Clock,
    _LambdaContext,
    _rename_ids,
    _Run,
    _symmetries,
)
from tests.model.stripe_link import InProcessLink, emulator_restore, emulator_snapshot, emulator_summary
from tests.model.webhooks import ModelWebhooks, describe, event_key, forced_outcome, sqs_record

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


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


class WorldBase:
    """The live system the model drives, set up: moto, the emulator, the handlers wired to both."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.clock = _Clock()
        self.state = State()
        self._run: _Run | None = None
        self._stack = contextlib.ExitStack()
        self._symmetries = _symmetries(scope.deliveries)

    # -- setup ----------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            return self._enter()
        except BaseException:
            self._stack.close()  # moto's mock and the environment undone: the next world starts clean
            raise

    def _enter(self) -> Self:
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
            logical = _function_of(substitutions[name[2:-1]])
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
                    state.forged,
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

    def _processing(self) -> list[dict[str, Any]]:
        """The order's PaymentIntents still ``processing`` (a debit the provider has not settled)."""
        return sorted(
            (intent for intent in self.intents() if intent["status"] == "processing"),
            key=lambda intent: str(intent["id"]),
        )

    def _start_execution(self, actor: str, arn: str, execution_input: dict[str, Any]) -> None:
        state = self.state
        execution = self.machine.start(arn, execution_input, state.now)
        state.executions.append(execution)
        state.messages.append(execution_input["order"])
        state.actors.append(actor)

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
            answer = apply()
            if operation == "get_item":
                item = answer.get("Item") or {}
                run.claim_read = {name: next(iter(value.values())) for name, value in item.items()} or None
            return answer
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
        if not creates:
            return send()
        run.creates += 1
        plan = run.plan
        if run.outage == "provider":
            if not (plan and plan[0] == "outage" and run.last_try):
                return _stripe_error(500, "api_error", "An unknown error occurred (outage, model)")
            # The last try of a step the provider failed until now: its create is applied, its answer lost.
            kind: str | None = "lost"
            inside = plan[2] == LAST_TRY_INSIDE
            run.fired = run.fired or not inside
        else:
            planned = plan and plan[0] == "create" and plan[1] == run.creates
            kind = plan[2] if planned and plan else None
            inside = kind in (INSIDE, LOST_INSIDE)
            kind = {INSIDE: None, LOST_INSIDE: "lost"}.get(kind, kind) if kind else None
            if kind is not None and not inside:
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
        sent = len(self.state.outbox)
        with self._forcing(body):
            reply = send()
        self._attribute(before, run.payment_attempt)
        if inside:
            self._deliver_inside(run, sent)
        return reply

    def _deliver_inside(self, run: _Run, sent: int) -> None:
        """The events the provider made while applying a create (the outbox from ``sent`` on), each
        delivered to the consumer now: inside the Charge invocation, before it reads the answer."""
        state = self.state
        made = state.outbox[sent:]
        del state.outbox[sent:]
        self._run = None  # the consumer's calls are its own, not the Charge step's
        try:
            for event in made:
                decided, failed = self._consume(event)
                text = f"webhook {describe(event)} delivered inside: {decided}"
                if failed:
                    state.outbox.append(event)  # SQS delivers it again
                    text += "; the consumer failed it, it is delivered again"
                run.inside.append(text)
                run.fired = True
        finally:
            self._run = run

    def _consume(self, event: dict[str, Any], *, planted: bool = False) -> tuple[str, bool]:
        """One invocation of the real webhook consumer on one delivery of ``event``, queued as the
        receiver queues it (``planted``: the whole event, as someone else put it on the queue):
        (what it decided, whether it failed the message)."""
        state = self.state
        state.webhook_deliveries += 1
        record = sqs_record(event, state.webhook_deliveries, state.now, planted=planted)
        self._decisions = []
        try:
            with contextlib.redirect_stdout(_DISCARD):
                response = self.webhook_handler({"Records": [record]}, _LambdaContext())
            failed = bool(response.get("batchItemFailures"))
        except Exception:  # noqa: BLE001 - every record failed: Powertools raises, Lambda retries the batch
            failed = True
        finally:
            self._metrics.clear_metrics()
        decided = ", ".join(f"{d.outcome.value}{' (written)' if d.applied else ''}" for d in self._decisions)
        return decided or "no decision", failed

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


def _function_of(arn: dict[str, Any]) -> str:
    """The logical id of the function a Task's ARN names: its alias (``!Sub "${X.Arn}:live"``), or the
    function itself (``!GetAtt X.Arn``)."""
    if "Fn::Sub" in arn:
        alias = re.fullmatch(r"\$\{(\w+)\.Arn\}:\w+", str(arn["Fn::Sub"]))
        if alias is None:
            raise ValueError(f"not a function's alias: {arn}")
        return alias.group(1)
    return str(arn["Fn::GetAtt"][0])
