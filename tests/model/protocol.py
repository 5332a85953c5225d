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
``last_try``       the provider fails every try of Charge Payment but its last, whose create is
                   applied and its answer lost (with or without the create's webhook inside it)
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
``canceled``) whose doorbell the real webhook consumer (``handlers.webhook_consumer``: it reads the
PaymentIntent from the emulator with the stack's key, and ``payment_saga.webhooks.answer_doorbell``
decides on that answer) is delivered once, several times (``webhook_repeats``), or
never (``webhook_losses``), in any order, between any two other steps; and a bank debit's charge
answers ``processing`` and settles later, as succeeded or failed, at a step of its own (see
:mod:`tests.model.webhooks`). The events a create makes may also be delivered inside the Charge
invocation that sent it, after the provider applied the create and before the step reads its
answer, or learns it lost and reads the claim again (not a fault: a variant of the step, ``webhook
inside``, alone or with ``lost`` or ``last_try``). With ``key_expiry``, the clock may jump once a
day ahead while the claim is open (the settle-by of a debit in flight is weeks away): every
idempotency key the provider holds is forgotten, and a redrive then sends a create it no longer
deduplicates. With ``forged_events``, a made-up ``succeeded`` of the open claim's attempt (a
PaymentIntent the provider never issued) is planted whole on the webhook queue and delivered, at any
step. The clock never passes a claim's settle-by deadline while its payment is still
processing: the settlement window is chosen to be longer than the provider's.

A declined card is not a fault but a delivery's payment method (so are a bank debit and a card that
needs authentication). Interleaving is at the grain of one
Lambda invocation (or one sweep, one clock jump...): a Lambda's calls run back to back, and what can
happen *inside* an invocation is what the faults say (an answer lost, a write delayed past others),
and a webhook delivered inside a create (above).

The invariants (docs/design.md, docs/outcome-events.md) are checked after every step; see
:meth:`World.violations` and :meth:`World.end_violations`.
"""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from saga_local.aws.stack import REGION
from saga_local.stripe_emulator.idempotency import IDEMPOTENCY_TTL_SECONDS
from tests.model import asl
from tests.model.invariants import Invariants
from tests.model.relay import RELAY_CALL_FAULTS, RELAY_FAULTS, lambda_record, poison_record
from tests.model.state import (
    _DISCARD,
    _METHODS,
    ACCOUNT_ARN,
    CREATE_FAULTS,
    INSIDE,
    LAST_TRY,
    LAST_TRY_INSIDE,
    LOST_INSIDE,
    START,
    STREAM_ARN,
    SWEEP_FAULTS,
    WRITE_FAULTS,
    Killed,
    StepResult,
    _describe,
    _fault_text,
    _LambdaContext,
    _relay_fault_text,
    _Run,
    _short,
    is_fault,
)
from tests.model.webhooks import SETTLEMENTS, describe, forged_succeeded

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class World(Invariants):
    """The model's actions and their steps, on the system :class:`WorldBase` sets up and wires."""

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
        row = self.row()
        if state.forged < self.scope.forged_events and row is not None and row["status"] == "CLAIMED":
            yield ("forge",)

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
        """Moving the clock past the lease or the search grace, and the sweeps that then matter; and,
        once, past the provider's idempotency window."""
        state = self.state
        if not (row and row["status"] == "CLAIMED" and not state.pending):
            return
        if self.scope.key_expiry and state.now - START <= IDEMPOTENCY_TTL_SECONDS:
            yield ("clock", "key")
        if not self.scope.clock:
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
        """The other versions of a fault-free action, given what it did and the faults used before it:
        its faults, and (no fault) the webhook of each of its creates delivered inside it."""
        if action[0] not in ("start", "run", "sweep", "relay") or action[-1]:
            return
        inside = self.scope.webhooks and self.scope.webhooks_inside and action[0] in ("start", "run")
        if inside:
            yield from ((action[0], action[1], ("create", k, INSIDE)) for k in range(1, done.creates + 1))
        if faults_used >= self.scope.max_faults:
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
        yield from self._step_faults(action[0], action[1], done, inside=inside)

    def _step_faults(
        self, verb: str, who: Any, done: StepResult, *, inside: bool
    ) -> Iterator[tuple[Any, ...]]:
        """The faulty versions of one step of an execution (``inside``: webhooks delivered inside too)."""
        kinds = self.scope.fault_kinds
        for where, calls, fault_kinds in (
            ("write", done.writes, WRITE_FAULTS),
            ("create", done.creates, CREATE_FAULTS),
        ):
            for k in range(1, calls + 1):
                for kind in fault_kinds:
                    if kind in kinds:
                        yield (verb, who, (where, k, kind))
                    if kind == "lost" and kind in kinds and inside:
                        yield (verb, who, (where, k, LOST_INSIDE))
        if "outage" in kinds:
            if done.dynamodb_calls:
                yield (verb, who, ("outage", "dynamodb"))
            if done.creates:
                yield (verb, who, ("outage", "provider"))
        if "last_try" in kinds and done.creates:
            yield (verb, who, ("outage", "provider", LAST_TRY))
            if inside:
                yield (verb, who, ("outage", "provider", LAST_TRY_INSIDE))

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
        if kind == "forge":
            return self._forge()
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
        run.plan = fault
        results: list[str] = []
        for _ in range(20):
            run.last_try = not self.machine.retried(execution, "PaymentOutcomeUnknown")
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
        if is_fault(fault):
            state.faults += 1
        inside = "".join(f" {{{text}}}" for text in run.inside)
        label = f"{state.actors[index]}: {task}{_fault_text(fault)}{inside} -> {' / '.join(results)}"
        if execution.status != asl.RUNNING:
            label += f" => {execution.status} {execution.end or ''}".rstrip()
            state.findings.extend(self._ended_violations(index, execution, step, run.claim_read))
        fired = fault is None or run.fired or (run.outage is not None and len(fault) == 2)
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
        if how == "key":
            # A day on: the provider forgets every idempotency key sent so far. A debit in flight
            # settles within its window, and its claim's settle-by is weeks away: not passed.
            target = state.now + IDEMPOTENCY_TTL_SECONDS + 1
            assert not self._settlement_in_flight(row) or target < lease, "the jump passes a settle-by"
        else:
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
        what = {
            "lease": "past the lease",
            "grace": "past the lease and the sweeper's search grace",
            "key": "past the provider's 24-hour idempotency window: every key sent so far forgotten",
        }[how]
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
        decided, failed = self._consume(event)
        again = "" if how == "last" else " (again later)"
        label = f"webhook {what} delivered{again}: {decided}"
        if failed:
            if how == "last":
                state.outbox.insert(index, event)  # SQS delivers it again
            label += "; the consumer failed it, it is delivered again"
        return StepResult(label)

    def _forge(self) -> StepResult:
        """A forged ``succeeded`` of the open claim's attempt, planted on the webhook queue whole and
        delivered to the consumer: only Stripe's answer to the consumer's read may move the claim."""
        state = self.state
        state.forged += 1
        row = self.row()
        assert row is not None
        amount, currency, _ = str(row["fingerprint"]).split("|", 2)
        event = forged_succeeded(int(row["attempt"]), int(amount), currency, state.now)
        decided, failed = self._consume(event, planted=True)
        label = f"a forged {describe(event)} planted on the webhook queue, delivered: {decided}"
        if failed:
            # Nothing in the model fails the consumer's calls: it fails the message every time, and
            # the dead-letter queue's alarm pages for a message that names no payment of ours.
            state.findings.append(
                "the consumer failed a forged event instead of answering it not found: it is"
                " dead-lettered, and a person is paged for it"
            )
            label += "; the consumer failed it"
        return StepResult(label)

    def _settle(self, index: int, outcome: str) -> StepResult:
        """The provider settles a ``processing`` PaymentIntent (a debit), as the emulator's timer does."""
        intent = self._processing()[index]
        self.emulator.set_status(intent["id"], SETTLEMENTS[outcome])
        return StepResult(f"the provider settles {intent['id']} as {outcome}")

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
            or not any(action[0] == "clock" and action[1] != "key" for action in self.actions())
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


#: Steps the end of a schedule may take (every execution run out, re-queues and their executions).
_FINISH_STEPS = 200
