"""The roles as deployed are enforced on every local run: a role one action short fails here, not on AWS.

moto accepts any call from anyone. ``saga_local.aws.iam`` reads each function's and the state
machine's role through SAM's translator (what ``sam deploy`` creates) and checks every AWS call a
handler, or the state machine's service integrations, make against the caller's role. These tests
show a refusal as AWS answers it, in each runtime, and that the grants are the calls the code makes:
each one is exercised by the scenarios below, so taking any one of them away breaks a scenario.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from payment_saga.claims import ClaimsStore
from payment_saga.orders import order_from_message
from payment_saga.payments import StripeProvider, idempotency_key
from payment_saga.reconcile import ReconcileOutcome, reconcile
from saga_local.aws.iam import Authorizer, Role, Statement
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.runtime.faults import Fault
from saga_local.stack.embedded import EmbeddedStack
from tests.helpers import Saga, order, signed_webhook_request, webhook_event_source, webhook_signing_secret

if TYPE_CHECKING:
    from saga_local.aws.iam import Authorizer

#: The claim lease the template deploys (ClaimLeaseSeconds).
LEASE = 900

#: Grants that no run of these scenarios exercises, and why each is needed all the same. Every other
#: grant of every role must be used by ``test_every_grant_is_a_call_the_code_makes``. The local event
#: sources poll with the function's role, as Lambda's event source mappings do, so their calls count.
NOT_CALLED_LOCALLY = {
    # Lambda reads the claims table's stream for the relay with the relay's role (AWS lists these four
    # as what a DynamoDB event source needs); the in-process stream source reads moto's shard directly.
    ("OutcomeRelayFunction", "dynamodb:DescribeStream", "/stream/"): "the stream event source mapping",
    ("OutcomeRelayFunction", "dynamodb:GetRecords", "/stream/"): "the stream event source mapping",
    ("OutcomeRelayFunction", "dynamodb:GetShardIterator", "/stream/"): "the stream event source mapping",
    ("OutcomeRelayFunction", "dynamodb:ListStreams", "/stream/"): "the stream event source mapping",
    # The relay parks a record it can never read there (tests/local/test_outcome_events.py parks one);
    # none of these scenarios writes such a record.
    ("OutcomeRelayFunction", "sqs:SendMessage", "OutcomeRelayFailureQueue"): "parking an unreadable record",
    # Step Functions encrypts and decrypts an execution's data with the state machine's role, and its
    # log delivery's data key; moto's engine encrypts nothing. (Its callers' key grants are checked.)
    ("PaymentSagaStateMachine", "kms:Decrypt", "StateMachineKey"): "Step Functions' own encryption",
    ("PaymentSagaStateMachine", "kms:GenerateDataKey", "StateMachineKey"): "Step Functions' own encryption",
}
#: Grants of a function unqualified ($LATEST) beside its alias: only an execution started before the
#: functions had an alias invokes them so (template.yaml, the state machine's role); every execution
#: here starts on the aliases.
NOT_CALLED_BY_NEW_EXECUTIONS = {("PaymentSagaStateMachine", "lambda:InvokeFunction")}
#: Services whose grants belong to the platform around the code (Lambda's own logs, the X-Ray SDK's
#: segments, Step Functions' log delivery): no local run writes to them.
PLATFORM_SERVICES = frozenset({"logs", "xray"})


def without(iam: Authorizer, principal: str, action: str, *, on: str = "") -> Role:
    """``principal``'s role with ``action`` taken out (only on resources containing ``on``, if given)."""
    role = iam.roles[principal]
    if not on:
        return role.without(action)
    kept = [s for s in role.statements if not (action in s.actions and any(on in r for r in s.resources))]
    return Role(role.principal, role.name, tuple(kept), role.service, role.arn)


def test_a_function_whose_role_lacks_an_action_is_refused_as_aws_refuses_it(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Charge Payment re-reads its claim before it charges; without GetItem that read is refused,
    so it charges nothing and the order goes to reconciliation (its claim is kept)."""
    iam = saga.runtime.iam
    assert isinstance(iam, Authorizer)
    monkeypatch.setitem(
        iam.roles, "ChargePaymentFunction", without(iam, "ChargePaymentFunction", "dynamodb:GetItem")
    )

    result = saga.driver.wait(saga.driver.start(order("IAM-1"), name="no-get-item"))

    assert result.error == "NeedsReconciliation", result
    assert saga.charges("IAM-1") == 0
    assert {(p, a) for p, a, _ in iam.denied} == {("ChargePaymentFunction", "dynamodb:GetItem")}
    failed = [e for e in saga.driver.history(result.arn) if e["type"] == "TaskFailed"]
    assert failed, "the refused step reached the state machine as a failure"
    cause = failed[0]["taskFailedEventDetails"]
    # DynamoDB's model has no AccessDeniedException: boto3 raises a plain ClientError, as in Lambda.
    assert cause["error"] == "ClientError"
    assert "AccessDeniedException" in cause["cause"]
    assert "is not authorized to perform: dynamodb:GetItem" in cause["cause"]


def test_the_state_machine_role_is_enforced_on_its_lambda_invocations(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state machine that may not invoke Charge Payment never reaches the provider."""
    iam = saga.runtime.iam
    assert isinstance(iam, Authorizer)
    monkeypatch.setitem(
        iam.roles,
        "PaymentSagaStateMachine",
        without(iam, "PaymentSagaStateMachine", "lambda:InvokeFunction", on="ChargePaymentFunction"),
    )

    result = saga.driver.wait(saga.driver.start(order("IAM-2"), name="no-invoke"))

    assert result.status == "FAILED", result
    assert saga.invocations("ChargePaymentFunction") == 0
    assert saga.charges("IAM-2") == 0
    assert {(p, a) for p, a, _ in iam.denied} == {("PaymentSagaStateMachine", "lambda:InvokeFunction")}


def _allowing(iam: Authorizer, principal: str, action: str, resource: str) -> Role:
    """``principal``'s role with one more Allow: what a careless policy change would grant."""
    role = iam.roles[principal]
    extra = Statement("Allow", (action,), resources=(resource,), where="added")
    return Role(role.principal, role.name, (*role.statements, extra), role.service, role.arn)


def test_a_role_the_orders_queue_does_not_name_cannot_inject_an_order_though_its_policy_allows_it(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orders queue's own policy denies SendMessage to all but the saga's re-queues and the named
    producers: an Allow in some other role (here Charge Payment's) is refused, as on AWS."""
    iam = saga.runtime.iam
    assert isinstance(iam, Authorizer)
    sqs = boto3.client("sqs", region_name=REGION)
    queue_arn = sqs.get_queue_attributes(QueueUrl=saga.stack.queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    widened = _allowing(iam, "ChargePaymentFunction", "sqs:SendMessage", queue_arn)
    monkeypatch.setitem(iam.roles, "ChargePaymentFunction", widened)
    iam.act_as(sqs, "ChargePaymentFunction")

    with pytest.raises(sqs.exceptions.ClientError) as refused:
        sqs.send_message(QueueUrl=saga.stack.queue_url, MessageBody=json.dumps(order("IAM-4")))

    assert "explicit deny in a resource-based policy" in str(refused.value)
    assert "OnlyTheSagaAndItsProducersSendOrders" in str(refused.value)
    assert ("ChargePaymentFunction", "sqs:SendMessage", queue_arn) in iam.denied
    # The relay, which the policy names, re-queues there (test_every_grant_is_a_call_the_code_makes).


def test_a_role_the_bus_does_not_name_cannot_forge_an_outcome_though_its_policy_allows_it(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Subscribers ship on OrderCharged: only the relay, the start function and the state machine may
    put events on the bus, whatever another role's policy says."""
    iam = saga.runtime.iam
    assert isinstance(iam, Authorizer)
    events = boto3.client("events", region_name=REGION)
    bus = events.describe_event_bus(Name=saga.stack.outputs["OutcomeEventBusName"])["Arn"]
    monkeypatch.setitem(
        iam.roles, "SweeperFunction", _allowing(iam, "SweeperFunction", "events:PutEvents", bus)
    )
    iam.act_as(events, "SweeperFunction")
    forged = {"Source": "payment-saga", "DetailType": "OrderCharged", "Detail": "{}", "EventBusName": bus}

    with pytest.raises(events.exceptions.ClientError) as refused:
        events.put_events(Entries=[forged])

    assert "OnlyTheSagaPublishesOutcomes" in str(refused.value)
    assert ("SweeperFunction", "events:PutEvents", bus) in iam.denied


def test_a_worker_process_checks_its_handlers_calls_against_its_role() -> None:
    """The worker runtime (``saga up``, ``saga demo``): the role travels to the worker, which refuses."""
    with EmbeddedStack(runtime="workers", max_workers=1, quiet=True) as stack:
        assert stack.stack is not None
        assert stack.stack.iam is not None
        iam = stack.stack.iam
        iam.roles["ClaimOrderFunction"] = without(iam, "ClaimOrderFunction", "dynamodb:UpdateItem")
        driver = stack.driver
        result = driver.wait(driver.start(order("IAM-3"), name="worker-denied"), timeout=120)
        failed = [e for e in driver.history(result.arn) if e["type"] == "TaskFailed"]
    assert result.status == "FAILED", result
    assert failed
    assert "AccessDeniedException" in failed[0]["taskFailedEventDetails"]["cause"]


# -- every grant is a call the code makes ----------------------------------------------------------


def _stale(saga: Saga, order_id: str, *, hours_ago: float) -> dict[str, Any]:
    """An order claimed ``hours_ago`` by an execution that died: its lease ran out long ago."""
    then = time.time() - hours_ago * 3600
    store = ClaimsStore(
        saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION), clock=lambda: then
    )
    message = order(order_id)
    store.claim(order_from_message(message), token="dead-execution")
    return message


def _sweep(saga: Saga) -> dict[str, Any]:
    """One run of the sweeper function, as its schedule invokes it."""
    invocation = saga.runtime.invoke(saga.stack.function_name("SweeperFunction"), b"{}")
    assert invocation.function_error is None, invocation.payload
    result: dict[str, Any] = json.loads(invocation.payload)
    return result


def _exercise_every_path(saga: Saga, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = saga.driver
    # A start function slower than half the queue's visibility timeout: the event source keeps the
    # batch hidden while it runs (ChangeMessageVisibility, with the function's role).
    saga.faults.add(Fault("StartExecutionFunction", "start", "delay", seconds=1.5, times=1))
    # Through the orders queue: a good order (start, claim, charge, complete, relay: OrderCharged),
    # a malformed body (the dead-letter queue and OrderRejected), a declined card (release).
    driver.send(order("IAM-OK"))
    driver.send('{"orderId": "IAM-BAD", "amount": 1.5}')
    driver.send(order("IAM-DECLINED", paymentMethod="pm_card_chargeDeclined"))
    # A Claim step that never lands: the fence's tombstone (PutItem), then the relay re-queues it.
    saga.faults.add(Fault("ClaimOrderFunction", "start", "die", times=4, order_id="IAM-TOMB"))
    driver.send(order("IAM-TOMB"))
    driver.pump(timeout=120)
    # Another payment attempt is open: the state machine sends this one back (SQS integration).
    store = ClaimsStore(saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION))
    store.claim(order_from_message(order("IAM-BUSY", paymentAttempt="1")), token="open-attempt")
    driver.wait(driver.start(order("IAM-BUSY", paymentAttempt="2"), name="busy"))
    # The same orderId for another amount: OrderConflict (EventBridge integration).
    driver.wait(driver.start(order("IAM-OK", amount=99), name="conflict"))
    # The sweeper function: discovery (the index), a release, with its key read from the secret.
    _stale(saga, "IAM-STALE", hours_ago=3)
    monkeypatch.delenv("PAYMENT_API_KEY")
    from handlers import runtime as handler_runtime

    handler_runtime.reset()
    swept = _sweep(saga)
    assert swept["counts"][ReconcileOutcome.RELEASED.value] == 1, swept
    # Charge Payment with its key read from the secret too (in-process, the functions share one
    # module cache: a fresh "container" for it, as Lambda gives every function its own).
    handler_runtime.reset()
    driver.wait(driver.start(order("IAM-SECRET"), name="secret"))
    # A charge found for an attempt whose claim was released meanwhile: the sweeper's consistent read.
    message = _stale(saga, "IAM-LATE", hours_ago=3)
    with saga.runtime.outside_invocation():
        StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url).charge(
            order_from_message(message), attempt=1, idempotency_key=idempotency_key("IAM-LATE", 1)
        )
    real_open_claims = handler_runtime.claims_store().open_claims

    def released_once_seen(**kwargs: Any) -> Any:
        for seen in real_open_claims(**kwargs):
            with saga.runtime.outside_invocation():
                store.release_stale(seen)
            yield seen

    monkeypatch.setattr(handler_runtime.claims_store(), "open_claims", released_once_seen)
    with saga.runtime.acting_as("SweeperFunction"):
        report = reconcile(
            handler_runtime.claims_store(),
            handler_runtime.provider(),
            now=time.time(),
            apply=True,
        )
    assert [d.outcome for d in report.decisions] == [ReconcileOutcome.CHARGE_ON_RELEASED], report
    driver.relay()
    _webhook(saga)


def _webhook(saga: Saga) -> None:
    """A charge whose execution never learned of it, then Stripe's webhook: the receiver reads its signing
    secret and queues the event; the consumer's event source polls the webhook queue (a batch slower than
    half the visibility timeout: ChangeMessageVisibility) and the consumer reads the Stripe key's secret,
    the PaymentIntent from Stripe, and completes the claim."""
    message = order("IAM-HOOK")
    store = ClaimsStore(saga.stack.table_name, client=boto3.client("dynamodb", region_name=REGION))
    store.claim(order_from_message(message), token="hook-execution")
    with saga.runtime.outside_invocation():
        charge = StripeProvider(LOCAL_API_KEY, api_base=saga.provider.url).charge(
            order_from_message(message), attempt=1, idempotency_key=idempotency_key("IAM-HOOK", 1)
        )
    intent = {
        "id": charge.charge_id,
        "object": "payment_intent",
        "status": "succeeded",
        "amount": charge.amount,
        "currency": charge.currency.lower(),
        "metadata": {"orderId": "IAM-HOOK", "attempt": "1"},
    }
    event = {"id": "evt_iam", "type": "payment_intent.succeeded", "created": 1, "data": {"object": intent}}
    payload = json.dumps(event)
    receiver = saga.stack.function_name("WebhookReceiverFunction")
    answer = saga.runtime.invoke(
        receiver, signed_webhook_request(payload, webhook_signing_secret(saga.stack))
    )
    assert json.loads(answer.payload)["statusCode"] == 200, answer.payload
    saga.faults.add(Fault("WebhookConsumerFunction", "start", "delay", seconds=1.5, times=1))
    # The consumer reads the PaymentIntent from Stripe with the key from the secret, in a fresh
    # "container" of its own (in-process, the functions share one module cache).
    from handlers import runtime as handler_runtime

    handler_runtime.reset()
    assert webhook_event_source(saga).poll_once() == 1
    claim = store.get("IAM-HOOK")
    assert claim is not None
    assert claim.charge_id == charge.charge_id


def test_every_grant_is_a_call_the_code_makes(saga: Saga, monkeypatch: pytest.MonkeyPatch) -> None:
    """Least privilege that works: every action each role grants, on each resource, is used by a run
    of the real code (or is listed in ``NOT_CALLED_LOCALLY`` with who uses it), and no call was
    refused. A grant nothing uses is one too many; since each is used, removing any one fails a call."""
    iam = saga.runtime.iam
    assert isinstance(iam, Authorizer)

    _exercise_every_path(saga, monkeypatch)

    assert not iam.denied, f"refused: {sorted(iam.denied)}"
    unused = []
    for principal, role in iam.roles.items():
        for statement in role.statements:
            if statement.effect != "Allow":
                continue
            for action in statement.actions:
                if action.partition(":")[0] in PLATFORM_SERVICES:
                    continue
                for resource in statement.resources:
                    if any(
                        (who, done) == (principal, action) and part in resource
                        for who, done, part in NOT_CALLED_LOCALLY
                    ):
                        continue
                    unqualified = not resource.endswith(":live")
                    if (principal, action) in NOT_CALLED_BY_NEW_EXECUTIONS and unqualified:
                        continue
                    grant = Statement("Allow", (action,), resources=(resource,))
                    if not any(who == principal and grant.applies(done, arn) for who, done, arn in iam.used):
                        unused.append(f"{principal}: {action} on {resource} ({statement.where})")
    assert unused == [], "granted but never called:\n" + "\n".join(unused)
