"""One example of the property test, run and judged: its waves through the local stack, the
sweeper's ticks, every write in flight landed, and each order's ending against the invariants."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from handlers import runtime as handler_runtime
from handlers import sweeper
from payment_saga import charging
from payment_saga.claims import SECONDS_PER_DAY, ClaimsStore
from payment_saga.execution_names import requeue_execution_name
from payment_saga.outcomes import attempt_event_id
from payment_saga.reconcile import DEFAULT_SEARCH_GRACE_SECONDS
from payment_saga.sweep_lock import LEASE_MARGIN_SECONDS, SweepLock
from saga_local.aws.stack import REGION
from saga_local.harness.chaos_report import broken_invariants
from saga_local.harness.chaos_sweep import land_what_is_in_flight, play_out_later
from saga_local.harness.chaos_troubles import PROVIDER_ENDPOINTS
from saga_local.harness.outcomes import tally
from saga_local.harness.redelivery import redeliver
from saga_local.harness.simulate import settle
from saga_local.runtime.api import Throttled
from saga_local.runtime.faults import call_error, declined_attempts_sent_again
from saga_local.stripe_emulator.webhooks import STATUS_EVENTS
from tests.helpers import signed_webhook_request, webhook_event_source, webhook_signing_secret
from tests.local.conftest import lease_seconds
from tests.local.property_schedule import (
    NO_WEBHOOKS,
    SWEEPER_FUNCTION,
    LastTrySpec,
    RefusedEntrySpec,
    Scenario,
    SweepTroubleSpec,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from saga_local.stack.driver import ExecutionResult
    from saga_local.stack.outcome_log import OutcomeEvent
    from tests.helpers import Saga

#: The state machine's definition: where the harness reads how many tries Charge Payment gets.
ASL = Path(__file__).resolve().parents[2] / "statemachine" / "payment_saga.asl.json"


def last_retry_count() -> int:
    """``$$.State.RetryCount`` of Charge Payment's last try when every try ends unknown: the
    ``MaxAttempts`` of its Retry for ``PaymentOutcomeUnknown``."""
    states = json.loads(ASL.read_text(encoding="utf-8"))["States"]
    (retrier,) = [r for r in states["Charge Payment"]["Retry"] if "PaymentOutcomeUnknown" in r["ErrorEquals"]]
    return int(retrier["MaxAttempts"])


#: The outcome types only the relay publishes (the start function and the state machine publish the
#: others): how a refused entry finds the relay's PutEvents.
RELAY_OUTCOMES = frozenset({"OrderCharged", "OrderDeclined", "OrderReleased", "OrderRequeued"})


# -- running one example -----------------------------------------------------------------------


@dataclass
class Outcome:
    """What the ledger and the table say about each order of an example."""

    endings: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def run(saga: Saga, scenario: Scenario, ids: list[str], sweeps: SweepSchedule) -> None:
    saga.faults.clear()
    saga.provider.clear_faults()
    spec = scenario.webhooks
    saga.provider.webhooks.disorder = spec.disorder() if spec is not None else NO_WEBHOOKS
    for fault_spec in scenario.faults:
        saga.faults.add(fault_spec.fault(ids))
    for provider_spec in scenario.provider_faults:
        # A timeout is held briefly then cut: to the SDK, the same unknown outcome as a read timeout.
        seconds = 0.1 if provider_spec.kind == "timeout_after_apply" else None
        saga.provider.inject(
            provider_spec.kind,  # type: ignore[arg-type]
            order_id=ids[provider_spec.order],
            times=provider_spec.times,
            seconds=seconds,
        )
    if scenario.last_try is not None:
        # The order's first create is applied and Stripe saves a 500 under its key, which it replays
        # to every retry: each try ends unknown, up to the last (webhook_during_last_try).
        order_id = ids[scenario.last_try.order]
        saga.provider.inject("fail_after_apply_replayed", order_id=order_id)
        if scenario.last_try.debit:
            saga.provider.force_outcome("processing", order_id=order_id)
    for wave in range(max(len(plan.waves) for plan in scenario.orders)):
        if wave == scenario.poison_before_wave:
            put_unreadable_row(saga, f"POISON-{ids[0]}")
        run_wave(saga, scenario, ids, wave)
        if wave in scenario.sweep_after_waves:
            land_what_is_in_flight(saga)
            sweeps()
            settle(saga, timeout=120)
    # Every write still in the air lands now; one may start nothing, but let what it moved settle.
    saga.faults.late.land_all()
    settle(saga, timeout=120)


def put_unreadable_row(saga: Saga, order_id: str) -> None:
    """A row that closes (COMPLETED) but is no claim (no token, no attempt): its stream record can
    never be read, and the relay must park it without holding up the records behind it."""
    saga.driver.dynamodb.put_item(
        TableName=saga.stack.table_name, Item={"orderId": {"S": order_id}, "status": {"S": "COMPLETED"}}
    )


def later(saga: Saga, sweeps: SweepSchedule) -> None:
    """Time passes after the sweep, as ``saga chaos`` lets it pass: orders re-queued with a delay
    (behind an open payment attempt, or proven never charged) come back and run, and whatever they
    leave open is swept again, until a sweep finds nothing to decide."""
    play_out_later(saga, sweeps, settle_timeout=120)


class _Frozen:
    """Stands in for the ``time`` module in the sweeper's handler: its one use is ``time.time()``."""

    def __init__(self, at: float) -> None:
        self.at = at

    def time(self) -> float:
        return self.at


class SweepSchedule:
    """The sweeper's ticks, each one an invocation of SweeperFunction through the runtime (its handler,
    its sweep lock, its role, the faults aimed at it), on a clock past every lease and the search
    grace. Each tick is later than the last by more than a sweep's lock lease: a sweep killed holding
    the lock leaves it to run out by the next tick, as on AWS, rather than making every later one skip.

    Returns what the tick decided (one entry per claim it looked at), or one entry saying why it did
    not finish (``failed``, ``skipped``, ``throttled``), so that :func:`play_out_later` goes on.
    """

    def __init__(self, saga: Saga) -> None:
        self.saga = saga
        self.name = saga.stack.function_name(SWEEPER_FUNCTION)
        spec, environment = saga.stack.functions[self.name]
        self.lease = lease_seconds(saga)
        self.grace = int(environment.get("CLAIM_SEARCH_GRACE_SECONDS", DEFAULT_SEARCH_GRACE_SECONDS))
        self.tick = spec.timeout + LEASE_MARGIN_SECONDS + 1
        #: The last tick's clock: kept from one example to the next (they share the table and its lock).
        self.at = 0.0
        self.troubles: dict[int, str] = {}
        self.ran = 0
        self.ends: Counter[str] = Counter()

    def begin(self, troubles: tuple[SweepTroubleSpec, ...]) -> SweepSchedule:
        """A new example: its ticks are counted from 1 (as the fault plan counts invocations)."""
        self.troubles = {trouble.sweep: trouble.kind for trouble in troubles}
        self.ran = 0
        self.ends = Counter()
        return self

    def __call__(self) -> list[str]:
        self.ran += 1
        self.at = max(time.time() + self.lease + self.grace + 1, self.at + self.tick)
        at = self.at
        try:
            with pytest.MonkeyPatch.context() as patch, self._trouble(self.troubles.get(self.ran), patch):
                patch.setattr(sweeper, "time", _Frozen(at))
                patch.setattr(sweeper, "SweepLock", lambda *a, **k: SweepLock(*a, clock=lambda: at, **k))
                patch.setattr(sweeper, "claims_store", lambda: claims_store_at(at))
                invocation = self.saga.runtime.invoke(self.name, b"{}")
        except Throttled:
            return self._ended("throttled")
        if invocation.function_error:
            return self._ended("failed")
        result = json.loads(invocation.payload)
        if result.get("skipped"):
            return self._ended("skipped")
        self.ends["swept"] += 1
        return [outcome for outcome, n in result["counts"].items() for _ in range(n)]

    def _ended(self, how: str) -> list[str]:
        self.ends[how] += 1
        return [how]

    @contextlib.contextmanager
    def _trouble(self, kind: str | None, patch: pytest.MonkeyPatch) -> Iterator[None]:
        if kind == "provider down":
            for endpoint in PROVIDER_ENDPOINTS:
                self.saga.provider.set_failure_rate("fail_before_apply", 1.0, endpoint=endpoint)
            try:
                yield
            finally:
                for endpoint in PROVIDER_ENDPOINTS:
                    self.saga.provider.set_failure_rate("fail_before_apply", 0.0, endpoint=endpoint)
            return
        if kind == "secret":
            # A cold container without the key in its environment reads the secret, as deployed;
            # Secrets Manager keeps refusing (throttled past the SDK's retries).
            patch.delenv("PAYMENT_API_KEY")
            handler_runtime.payment_key.cache_clear()
            handler_runtime.provider.cache_clear()
            hooks = boto3._get_default_session().events
            hooks.register(SECRET_CALL, _secret_refused)
            try:
                yield
            finally:
                hooks.unregister(SECRET_CALL, _secret_refused)
                handler_runtime.payment_key.cache_clear()
                handler_runtime.provider.cache_clear()  # the next container has the key again
            return
        yield


#: botocore's event for the sweeper's one read of its key (Secrets Manager's service id, hyphenated).
SECRET_CALL = "before-call.secrets-manager.GetSecretValue"


def _secret_refused(model: Any = None, **_: Any) -> None:
    raise call_error("throttle_call", "secretsmanager.GetSecretValue", model)


def claims_store_at(at: float) -> ClaimsStore:
    """The sweeper's claims store (``handlers.runtime.claims_store``), on a clock stopped at ``at``."""
    return ClaimsStore(
        handler_runtime.env("CLAIMS_TABLE_NAME"),
        client=handler_runtime.client("dynamodb"),
        lease_seconds=int(handler_runtime.env("CLAIM_LEASE_SECONDS")),
        retention_seconds=int(handler_runtime.env("CLAIM_RETENTION_DAYS")) * SECONDS_PER_DAY,
        clock=lambda: at,
    )


@contextlib.contextmanager
def refusing_entries(refused: tuple[RefusedEntrySpec, ...]) -> Iterator[list[str]]:
    """EventBridge refuses the entry of the relay's PutEvents calls numbered in ``refused``: the call
    is answered, not sent (nothing is put), as EventBridge answers an entry it failed to take. Yields
    the event ids refused."""
    calls = {spec.call for spec in refused}
    made = itertools.count(1)
    refusals: list[str] = []

    def refuse(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        entries = json.loads(params.get("body") or b"{}").get("Entries", [])
        if not any(entry.get("DetailType") in RELAY_OUTCOMES for entry in entries):
            return None
        if next(made) not in calls:
            return None
        refusals.extend(json.loads(entry.get("Detail") or "{}").get("eventId", "?") for entry in entries)
        failed = {"ErrorCode": "InternalFailure", "ErrorMessage": "Internal service error."}
        answer = {"FailedEntryCount": len(entries), "Entries": [failed] * len(entries)}
        return AWSResponse("", 200, HTTPHeaders(), None), answer

    # The relay's client, which copied the session's hooks when it was made: register on its own.
    hooks: Any = handler_runtime.client("events").meta.events
    if calls:
        hooks.register(PUT_EVENTS_CALL, refuse)
    try:
        yield refusals
    finally:
        if calls:
            hooks.unregister(PUT_EVENTS_CALL, refuse)


PUT_EVENTS_CALL = "before-call.eventbridge.PutEvents"


@dataclass(frozen=True)
class LastTryWebhook:
    """Stripe's webhook the harness delivered during a Charge Payment's last try, and what it did."""

    order_id: str
    #: The execution whose try it was (its claim token).
    execution: str
    event_type: str
    #: Whether the consumer's write settled the try's own claim (completed it, released it declined,
    #: or recorded the debit it awaits) under the try's token and attempt: the execution then ends
    #: as Stripe said, never in Needs Reconciliation.
    settled: bool


@contextlib.contextmanager
def webhook_during_last_try(
    saga: Saga, spec: LastTrySpec | None, ids: list[str]
) -> Iterator[list[LastTryWebhook]]:
    """Stripe's webhook delivered during the try of :class:`LastTrySpec`'s order whose ``RetryCount``
    is the last the Retry allows (:func:`run` makes every try before it end unknown). Yields what was
    delivered (at most one webhook)."""
    delivered: list[LastTryWebhook] = []
    if spec is None:
        yield delivered
        return
    order_id = ids[spec.order]
    last = last_retry_count()
    real = charging.charge
    armed: list[str] = []

    def stripe_side(step: charging.ChargeTry) -> None:
        # Stripe is another party: its delivery runs on a thread of its own, outside the function.
        def deliver() -> None:
            with saga.runtime.outside_invocation():
                delivered.extend(deliver_during(saga, spec, step))

        thread = threading.Thread(target=deliver, name="stripe-webhook-during-last-try")
        thread.start()
        thread.join()

    def charge(step: charging.ChargeTry, **kwargs: Any) -> Any:
        if step.order.order_id != order_id or step.retry_count != last or armed:
            return real(step, **kwargs)
        armed.append(step.token)
        if spec.moment == "before its read":
            stripe_side(step)
            return real(step, **kwargs)
        provider: Callable[[], charging.Provider] = kwargs.pop("provider")

        class InFlight:
            """The step's provider, with Stripe's webhook delivered as its create is sent."""

            def __init__(self) -> None:
                self.real = provider()

            def charge(self, order: Any, **charge_kwargs: Any) -> Any:
                stripe_side(step)
                return self.real.charge(order, **charge_kwargs)

            def follow(self, order: Any, **follow_kwargs: Any) -> Any:
                return self.real.follow(order, **follow_kwargs)

        return real(step, provider=InFlight, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(charging, "charge", charge)
        yield delivered


def deliver_during(saga: Saga, spec: LastTrySpec, step: charging.ChargeTry) -> list[LastTryWebhook]:
    """Stripe's webhook for the try's PaymentIntent as it stands (a debit's bank answering first if
    ``spec.bank`` says so), delivered to the receiver and consumed; then the claim, read."""
    order_id = step.order.order_id
    mine = [
        i
        for i in saga.provider.payment_intents(order_id)
        if i["metadata"].get("attempt") == str(step.attempt)
    ]
    if not mine:
        return []  # the create never landed: Stripe has nothing to say
    intent = mine[-1]
    if spec.debit and spec.bank != "processing" and intent["status"] == "processing":
        settled = "succeeded" if spec.bank == "succeeded" else "requires_payment_method"
        intent = saga.provider.set_status(intent["id"], settled)
    event_type = STATUS_EVENTS[intent["status"]]
    deliver_stripe_event(saga, event_type, intent)
    claim = saga.driver.claim(order_id) or {}
    status = claim.get("status")
    settled_here = (
        claim.get("claimToken") == step.token
        and str(claim.get("attempt")) == str(step.attempt)
        and (
            status == "COMPLETED"
            or (status == "RELEASED" and claim.get("releaseReason") == "DECLINED")
            or (status == "CLAIMED" and bool(claim.get("settlementIntentId")))
        )
    )
    return [LastTryWebhook(order_id, step.token, event_type, settled_here)]


#: How long the harness waits for the consumer to take a webhook it delivered off the queue.
CONSUME_SECONDS = 30.0


def deliver_stripe_event(saga: Saga, event_type: str, intent: dict[str, Any]) -> None:
    """``event_type`` about ``intent``, signed as Stripe signs it, answered 200 by the receiver, and
    consumed (the webhook queue emptied by the consumer, with its role)."""
    event = {
        "id": f"evt_last_try_{intent['id']}_{intent['status']}",
        "object": "event",
        "type": event_type,
        "created": int(time.time()),
        "livemode": False,
        "data": {"object": intent},
    }
    request = signed_webhook_request(json.dumps(event), webhook_signing_secret(saga.stack))
    answer = saga.runtime.invoke(saga.stack.function_name("WebhookReceiverFunction"), request)
    assert json.loads(answer.payload)["statusCode"] == 200, answer.payload
    source = webhook_event_source(saga)
    sqs = boto3.client("sqs", region_name=REGION)
    url = saga.stack.resolver.refs["WebhookQueue"]
    deadline = time.monotonic() + CONSUME_SECONDS
    while time.monotonic() < deadline:
        source.poll_once()
        attributes = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        if not int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        ):
            return
        time.sleep(0.01)


#: Hourly settlement checks the harness runs at most, one after the other, to close what a bank settled.
SETTLEMENT_CHECKS = 5


def bank_settles(saga: Saga, ids: list[str], spec: LastTrySpec | None) -> int:
    """The bank answers every debit of the example still settling (succeeded), no webhook comes, and
    the sweeper's hourly settlement check (SweeperFunction with ``"check": "settlements"``, through
    the runtime) closes each, as many checks as it takes. Returns the checks run."""
    if spec is None or not spec.debit:
        return 0
    for order_id in ids:
        for intent in saga.provider.payment_intents(order_id):
            if intent["status"] == "processing":
                saga.provider.set_status(intent["id"], "succeeded")
    name = saga.stack.function_name(SWEEPER_FUNCTION)
    event = {"source": "payment-saga.sweeper", "check": "settlements", "scheduledTime": "(property test)"}
    for checks in range(SETTLEMENT_CHECKS):
        if not any(_awaiting(saga.driver.claim(order_id)) for order_id in ids):
            return checks
        with contextlib.suppress(Throttled):
            saga.runtime.invoke(name, json.dumps(event).encode())
        settle(saga, timeout=120)
    return SETTLEMENT_CHECKS


def _awaiting(claim: dict[str, Any] | None) -> bool:
    return bool(claim and claim.get("status") == "CLAIMED" and claim.get("settlementIntentId"))


def paged_after_its_webhook(
    delivered: list[LastTryWebhook], executions: dict[str, dict[str, ExecutionResult]]
) -> list[str]:
    """An execution whose last try met Stripe's webhook settling its claim, ended in Needs
    Reconciliation anyway: a page for an order Stripe had already answered."""
    problems = []
    for webhook in delivered:
        result = executions.get(webhook.order_id, {}).get(webhook.execution)
        if webhook.settled and result is not None and result.outcome == "NeedsReconciliation":
            problems.append(
                f"invariant 2 (paged after its webhook): {webhook.order_id}: {webhook.event_type} settled"
                f" the claim during Charge Payment's last try of {result.name}, which ended in Needs"
                " Reconciliation"
            )
    return problems


def run_wave(saga: Saga, scenario: Scenario, ids: list[str], wave: int) -> None:
    """Send every delivery of this wave, then wait until every execution of it has ended."""
    arns: list[str] = []
    via_sqs = False
    for order_id, plan in zip(ids, scenario.orders, strict=True):
        if wave >= len(plan.waves):
            continue
        for copy, (attempt, route) in enumerate(plan.waves[wave]):
            message = plan.message(order_id, attempt)
            if route == "direct":
                arns.append(saga.driver.start(message, name=f"{order_id}-w{wave}-c{copy}"))
                continue
            [message_id] = saga.driver.send(message)
            via_sqs = True
            if route == "redelivered":
                # SQS hands the message out twice: here first, then to the poller (same MessageId).
                redeliver(saga.driver, message_id, json.dumps(message), receive_count=1)
    if via_sqs:
        settle(saga, timeout=120)
    for arn in arns:
        saga.driver.wait(arn, timeout=120)


def judge(
    saga: Saga, ids: list[str], *, swept: bool, delivered: list[LastTryWebhook] | None = None
) -> Outcome:
    """Classify every order and list every broken invariant (``delivered``: the webhooks delivered
    during a last try, whose executions must not have paged)."""
    outcome = Outcome()
    claims = {order_id: saga.driver.claim(order_id) or {} for order_id in ids}
    ledger = [c for c in saga.provider.charges() if c.order_id in claims]
    outcome.violations.extend(broken_invariants(ids, claims, ledger))
    requests = [r for r in saga.runtime.charge_requests.requests if r.order_id in claims]
    outcome.violations.extend(f"invariant 5: {p}" for p in declined_attempts_sent_again(requests))
    executions = executions_by_order(saga, ids)
    for order_id, claim in claims.items():
        charges = sum(1 for c in ledger if c.order_id == order_id)
        ending, problem = classify(claim, charges, executions[order_id], swept=swept)
        outcome.endings[order_id] = ending
        if problem:
            outcome.violations.append(f"invariant {problem.format(order_id=order_id)}")
        outcome.violations.extend(own_claim_left_open(order_id, claim, executions[order_id]))
    outcome.violations.extend(paged_after_its_webhook(delivered or [], executions))
    if swept:
        # Once time has played out, every order has said how it ended, and every release was sent again.
        assert saga.driver.outcome_log is not None, "the local stack archives the outcome bus"
        events = [e for e in saga.driver.outcome_log.collect() if e.order_id in claims]
        charged = {o: [c.charge_id for c in ledger if c.order_id == o] for o in ids}
        counted = tally(events, ids, charged)
        outcome.violations.extend(
            f"invariant 2 (final outcome): {o}: no final outcome event" for o in counted.missing
        )
        outcome.violations.extend(f"invariant 2 (final outcome): {p}" for p in counted.problems)
        outcome.violations.extend(requeued_once(saga, events))
    return outcome


def requeued_once(saga: Saga, events: list[OutcomeEvent]) -> list[str]:
    """Every attempt released as never charged (``OrderReleased``) was re-queued (``OrderRequeued``),
    and that re-queue started exactly one execution however often it was sent, or it was handed to
    a person (``OrderNeedsAttention``, the re-queue bound)."""
    published = {event.event_id for event in events}
    started = Counter(arn.rpartition(":")[2] for arn in saga.driver.execution_arns())
    problems: list[str] = []
    for event in events:
        if event.detail_type != "OrderReleased" or event.order_id is None:
            continue
        attempt = int(event.detail["attempt"])
        requeue = attempt_event_id(event.order_id, attempt, "requeued")
        if requeue in published:
            runs = started[requeue_execution_name(requeue)]
            if runs != 1:
                problems.append(
                    f"invariant 2 (re-queued once): {event.order_id}: attempt {attempt} released NOT_CHARGED"
                    f" and re-queued; the re-queue started {runs} executions"
                )
        elif attempt_event_id(event.order_id, attempt, "needs-attention") not in published:
            problems.append(
                f"invariant 2 (re-queued once): {event.order_id}: attempt {attempt} released NOT_CHARGED,"
                " neither re-queued nor handed to a person"
            )
    return list(dict.fromkeys(problems))


#: Ends of an execution whose Claim step failed before anything was charged: fenced (the relay
#: re-queues a tombstone), sent back by the state machine, or sent back its most allowed times.
CLAIM_FAILED_ENDS = frozenset({"ClaimFailed", "ClaimRetriedLater", "ResendsExhausted"})


def classify(
    claim: dict[str, Any], charges: int, executions: dict[str, ExecutionResult], *, swept: bool
) -> tuple[str, str | None]:
    """An order's ending, and the broken invariant it shows (``{order_id}`` left to fill), if any."""
    status = claim.get("status")
    every_claim_failed = bool(executions) and {e.outcome for e in executions.values()} <= CLAIM_FAILED_ENDS
    if charges > 1:
        return "double-charged", None  # invariant 1, reported by broken_invariants
    if status == "COMPLETED" and charges == 1:
        return "charged", None
    if status == "RELEASED" and charges == 0 and claim.get("releaseReason") == "DECLINED":
        return "declined", None
    if status == "CLAIMED":
        # A claim that records the debit it awaits is kept for the bank's answer (Awaiting Settlement).
        waits = "awaiting-settlement" if claim.get("settlementIntentId") else "needs-reconciliation"
        return waits, ("2 (still claimed): {order_id} still CLAIMED after the sweep" if swept else None)
    if (
        charges == 0
        and (status is None or claim.get("releaseReason") == "NOT_CHARGED")
        and every_claim_failed
    ):
        # Every claim write failed (or was fenced out): each execution ended in a failed claim, visibly,
        # before anything was charged. Nothing charged; the producer must send it again.
        return "claim-failed", None
    if status == "RELEASED" and charges == 0:
        # Proven never charged and not declined: not an end until someone charges it.
        return "lost", "2 (lost): {order_id} RELEASED NOT_CHARGED and never charged"
    return "lost", f"2 (lost): {{order_id}} is {status} with {charges} charge(s)"


def own_claim_left_open(
    order_id: str, claim: dict[str, Any], executions: dict[str, ExecutionResult]
) -> list[str]:
    """An execution that SUCCEEDED while its own claim stays open took itself for a duplicate, unless
    the claim records the debit it awaits: Awaiting Settlement keeps it for the bank's answer."""
    holder = executions.get(str(claim.get("claimToken")))
    if claim.get("status") != "CLAIMED" or holder is None or holder.status != "SUCCEEDED":
        return []
    if claim.get("settlementIntentId") and holder.outcome == "AWAITING_SETTLEMENT":
        return []
    return [
        f"invariant 2 (own claim open): {order_id}: execution {holder.name} SUCCEEDED ({holder.outcome})"
        " (a duplicate of itself) and left its own claim CLAIMED: nothing will charge the order"
    ]


def executions_by_order(saga: Saga, ids: list[str]) -> dict[str, dict[str, ExecutionResult]]:
    """Each order's executions by ARN. Their names start with the order id:
    ``<orderId>-w<wave>-c<copy>`` here, ``<orderId>-<MessageId>`` from the start function, and
    ``<orderId>_attempt-<n>_requeued-...`` for an order the relay re-queued."""
    found: dict[str, dict[str, ExecutionResult]] = {order_id: {} for order_id in ids}
    for arn in saga.driver.execution_arns():
        name = arn.rpartition(":")[2]
        for order_id in ids:
            # A re-queue's execution: ``<orderId>_attempt-<n>_requeued-<digest>`` (requeue_execution_name).
            if name.startswith((f"{order_id}-", f"{order_id}_attempt-")):
                found[order_id][arn] = saga.driver.result(arn, with_path=False)
    return found
