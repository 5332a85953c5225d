"""Who may reach the saga's queues and its outcome bus: the resource policies.

An identity policy of ours says what the saga's roles may do; it cannot stop another principal of the
account that was granted ``sqs:SendMessage`` or ``events:PutEvents`` on ``*``. Only an explicit Deny
in the resource's own policy binds those too. These tests provision the stack locally (the roles
resolved as ``saga_local.aws.iam`` enforces them on every run) and evaluate the template's resource
policies for each principal: the local IAM checks identity policies only, so the resource policies'
difference is evaluated here directly, as IAM does (an explicit Deny wins over any Allow).

Admitted, and nobody else: to the orders queue the saga's own re-queues (the relay, the state machine)
and the producers ``OrderProducerPrincipalArns`` lists; to the dead-letter queue the start function;
to the bus the three publishers (the relay, the start function, the state machine); to the relay's
parking queue the relay; to the webhook queue
the receiver and the operators ``WebhookQueueOperatorPrincipalArns`` lists (a DLQ redrive sends with its
caller's rights), to its dead-letter queue nobody, and from both the consumer and those operators read.
Each principal the policy admits is one whose role grants the call, so the policy takes nothing the saga
needs.
"""

from __future__ import annotations

import fnmatch
import functools
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from saga_local.aws.iam import as_list
from saga_local.aws.stack import ACCOUNT_ID, REGION, provision
from saga_local.template import load_template, resources_of_type

if TYPE_CHECKING:
    from saga_local.aws.iam import Authorizer
    from saga_local.aws.stack import Stack

#: A producer the stack's parameter admits, and a role of the same account it does not.
PRODUCER = f"arn:aws:iam::{ACCOUNT_ID}:role/order-service"
INTRUDER = f"arn:aws:iam::{ACCOUNT_ID}:role/any-role-with-send-on-star"
#: An operator the stack's parameter admits to the webhook queues (to read them and redrive).
OPERATOR = f"arn:aws:iam::{ACCOUNT_ID}:role/payments-on-call"


@pytest.fixture
def stack(aws: None) -> Stack:
    clients = functools.partial(boto3.client, region_name=REGION)
    parameters = {"OrderProducerPrincipalArns": PRODUCER, "WebhookQueueOperatorPrincipalArns": OPERATOR}
    provisioned = provision(clients, parameters=parameters)
    # The roles' ARNs as IAM names them (the local stack creates no role per function).
    assert provisioned.iam is not None
    for role in provisioned.iam.roles.values():
        provisioned.resolver.attrs[(role.name, "Arn")] = f"arn:aws:iam::{ACCOUNT_ID}:role/{role.name}"
    return provisioned


def role_arn(iam: Authorizer, principal: str) -> str:
    return f"arn:aws:iam::{ACCOUNT_ID}:role/{iam.roles[principal].name}"


def resource_statements(stack: Stack, resource_type: str) -> list[dict[str, Any]]:
    """Every statement of the template's resource policies of ``resource_type``, resolved locally."""
    found = []
    for resource in resources_of_type(load_template(), resource_type).values():
        properties = stack.resolver.resolve(resource["Properties"])
        document = properties.get("PolicyDocument") or {"Statement": [properties["Statement"]]}
        found.extend(as_list(document["Statement"]))
    return found


def _condition_holds(condition: dict[str, Any], principal_arn: str) -> bool:
    """IAM's condition operators these policies use, for a call over TLS by ``principal_arn``."""
    for operator, tests in condition.items():
        for key, values in tests.items():
            patterns = [str(value) for value in as_list(values)]
            if operator == "Bool" and key == "aws:SecureTransport":
                holds = "true" in patterns
            elif operator == "ArnNotLike" and key == "aws:PrincipalArn":
                holds = not any(fnmatch.fnmatchcase(principal_arn, p) for p in patterns)
            elif operator == "ArnNotEquals" and key == "aws:PrincipalArn":
                holds = principal_arn not in patterns
            elif operator == "ArnEquals" and key == "aws:SourceArn":
                holds = False  # no call in these tests is made by a service on a rule's behalf
            else:
                raise AssertionError(f"condition {operator} {key} is not evaluated here: add it")
            if not holds:
                return False
    return True


def denied(statements: list[dict[str, Any]], action: str, resource: str, principal_arn: str) -> bool:
    """Whether an explicit Deny of the resource policy applies to this call."""
    for statement in statements:
        if statement["Effect"] != "Deny" or statement.get("Principal") != "*":
            continue
        if not any(fnmatch.fnmatchcase(action, str(a)) for a in as_list(statement["Action"])):
            continue
        if resource not in as_list(statement["Resource"]):
            continue
        if _condition_holds(statement.get("Condition") or {}, principal_arn):
            return True
    return False


def senders(stack: Stack, resource_type: str, action: str, resource: str) -> dict[str, bool]:
    """Principal -> whether its call is allowed: its identity policy allows it (a principal from
    outside the saga is granted ``action`` on ``*``) and the resource policy denies it not."""
    assert stack.iam is not None
    statements = resource_statements(stack, resource_type)
    result = {}
    for principal, role in stack.iam.roles.items():
        identity = role.allows(action, resource)
        result[principal] = identity and not denied(
            statements, action, resource, role_arn(stack.iam, principal)
        )
    for outsider in (PRODUCER, INTRUDER, OPERATOR):
        result[outsider] = not denied(statements, action, resource, outsider)
    return {who: ok for who, ok in result.items() if ok}


def admitted_saga_roles(stack: Stack, resource_type: str, action: str, resource: str) -> set[str]:
    """The saga's principals the resource policy admits, whatever their roles grant."""
    assert stack.iam is not None
    statements = resource_statements(stack, resource_type)
    return {p for p in stack.iam.roles if not denied(statements, action, resource, role_arn(stack.iam, p))}


def granted(stack: Stack, action: str, resource: str) -> set[str]:
    assert stack.iam is not None
    return {p for p, role in stack.iam.roles.items() if role.allows(action, resource)}


def test_only_the_sagas_requeues_and_the_listed_producers_may_send_an_order(stack: Stack) -> None:
    queue = stack.resolver.attrs[("OrdersQueue", "Arn")]

    allowed = senders(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", queue)

    assert set(allowed) == {"OutcomeRelayFunction", "PaymentSagaStateMachine", PRODUCER}
    assert INTRUDER not in allowed, "a role with sqs:SendMessage on * cannot inject an order"
    # The policy admits exactly the roles that send there: it takes no grant the saga uses.
    assert admitted_saga_roles(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", queue) == granted(
        stack, "sqs:SendMessage", queue
    )


def test_only_the_start_function_may_dead_letter_a_message(stack: Stack) -> None:
    dlq = stack.resolver.attrs[("OrdersDeadLetterQueue", "Arn")]

    allowed = senders(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", dlq)

    assert set(allowed) == {"StartExecutionFunction"}, "a valid order dropped there would be redriven"
    assert admitted_saga_roles(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", dlq) == granted(
        stack, "sqs:SendMessage", dlq
    )


def test_only_the_sagas_three_publishers_may_put_an_outcome_event(stack: Stack) -> None:
    bus = stack.resolver.attrs[("OutcomeEventBus", "Arn")]

    allowed = senders(stack, "AWS::Events::EventBusPolicy", "events:PutEvents", bus)

    assert set(allowed) == {"OutcomeRelayFunction", "StartExecutionFunction", "PaymentSagaStateMachine"}
    assert PRODUCER not in allowed, "a producer may send orders, never announce their outcome"
    assert admitted_saga_roles(stack, "AWS::Events::EventBusPolicy", "events:PutEvents", bus) == granted(
        stack, "events:PutEvents", bus
    )


def test_only_the_relay_may_park_a_record(stack: Stack) -> None:
    """saga replay-parked reads what is parked with an operator's rights: nobody else may put it there."""
    parking = stack.resolver.attrs[("OutcomeRelayFailureQueue", "Arn")]

    allowed = senders(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", parking)

    assert set(allowed) == {"OutcomeRelayFunction"}
    assert admitted_saga_roles(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", parking) == granted(
        stack, "sqs:SendMessage", parking
    )


@pytest.fixture
def bare(aws: None) -> Stack:
    """A stack deployed with no producers and no operators listed."""
    clients = functools.partial(boto3.client, region_name=REGION)
    provisioned = provision(clients, stack_name="bare")
    assert provisioned.iam is not None
    for role in provisioned.iam.roles.values():
        provisioned.resolver.attrs[(role.name, "Arn")] = f"arn:aws:iam::{ACCOUNT_ID}:role/{role.name}"
    return provisioned


def test_a_stack_without_listed_producers_admits_only_its_own_requeues(bare: Stack) -> None:
    queue = bare.resolver.attrs[("OrdersQueue", "Arn")]

    allowed = senders(bare, "AWS::SQS::QueuePolicy", "sqs:SendMessage", queue)

    assert set(allowed) == {"OutcomeRelayFunction", "PaymentSagaStateMachine"}


# -- the webhook queues: what the consumer acts on ---------------------------------------------------

#: What reading a queue is: receiving, deleting, hiding a message; a DLQ redrive receives and deletes
#: with its caller's rights.
READ_ACTIONS = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility")


def test_only_the_receiver_and_the_listed_operators_may_queue_a_webhook_event(stack: Stack) -> None:
    queue = stack.resolver.attrs[("WebhookQueue", "Arn")]

    allowed = senders(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", queue)

    assert set(allowed) == {"WebhookReceiverFunction", OPERATOR}
    assert INTRUDER not in allowed, "a role with sqs:SendMessage on * cannot queue a forged event"
    assert PRODUCER not in allowed, "a producer of orders is no operator of the webhook queues"
    assert admitted_saga_roles(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", queue) == granted(
        stack, "sqs:SendMessage", queue
    )


def test_nobody_may_send_to_the_webhook_dead_letter_queue(stack: Stack) -> None:
    """SQS's own move after five receives is no SendMessage; a message planted there would be moved
    back onto the webhook queue by the runbook's redrive."""
    dlq = stack.resolver.attrs[("WebhookDeadLetterQueue", "Arn")]

    assert senders(stack, "AWS::SQS::QueuePolicy", "sqs:SendMessage", dlq) == {}


@pytest.mark.parametrize("action", READ_ACTIONS)
@pytest.mark.parametrize("queue", ["WebhookQueue", "WebhookDeadLetterQueue"])
def test_only_the_consumer_and_the_listed_operators_may_read_the_webhook_queues(
    stack: Stack, queue: str, action: str
) -> None:
    arn = stack.resolver.attrs[(queue, "Arn")]
    statements = resource_statements(stack, "AWS::SQS::QueuePolicy")

    assert admitted_saga_roles(stack, "AWS::SQS::QueuePolicy", action, arn) == {"WebhookConsumerFunction"}
    assert granted(stack, action, arn) <= {"WebhookConsumerFunction"}
    assert not denied(statements, action, arn, OPERATOR)
    assert denied(statements, action, arn, INTRUDER)
    assert denied(statements, action, arn, PRODUCER)


def test_the_listed_operators_may_redrive_the_webhook_dead_letter_queue_and_nobody_else(stack: Stack) -> None:
    """What ``aws sqs start-message-move-task`` needs from its caller: start it on the dead-letter queue,
    receive and delete there, send to the webhook queue."""
    dlq = stack.resolver.attrs[("WebhookDeadLetterQueue", "Arn")]
    queue = stack.resolver.attrs[("WebhookQueue", "Arn")]
    statements = resource_statements(stack, "AWS::SQS::QueuePolicy")
    redrive = [
        ("sqs:StartMessageMoveTask", dlq),
        ("sqs:ReceiveMessage", dlq),
        ("sqs:DeleteMessage", dlq),
        ("sqs:SendMessage", queue),
    ]

    assert [denied(statements, action, on, OPERATOR) for action, on in redrive] == [False] * 4
    assert [denied(statements, action, on, INTRUDER) for action, on in redrive] == [True] * 4


def test_a_stack_without_listed_operators_admits_only_the_receiver_and_the_consumer(bare: Stack) -> None:
    queue = bare.resolver.attrs[("WebhookQueue", "Arn")]
    statements = resource_statements(bare, "AWS::SQS::QueuePolicy")

    allowed = senders(bare, "AWS::SQS::QueuePolicy", "sqs:SendMessage", queue)

    assert set(allowed) == {"WebhookReceiverFunction"}
    assert denied(statements, "sqs:ReceiveMessage", queue, OPERATOR)


def _tls_denied(statement: dict[str, Any]) -> bool:
    condition = statement.get("Condition") or {}
    return (
        statement.get("Effect") == "Deny"
        and statement.get("Principal") == "*"
        and condition.get("Bool", {}).get("aws:SecureTransport") == "false"
    )


def test_every_queue_and_the_alarm_topic_refuse_plain_http(template: Any) -> None:
    """Nothing reaches an order, an outcome or an alarm over an unencrypted connection."""
    covered: set[str] = set()
    for policy_type, targets in (("AWS::SQS::QueuePolicy", "Queues"), ("AWS::SNS::TopicPolicy", "Topics")):
        for resource in resources_of_type(template.data, policy_type).values():
            statements = as_list(resource["Properties"]["PolicyDocument"]["Statement"])
            if any(_tls_denied(s) for s in statements if isinstance(s, dict)):
                for target in as_list(resource["Properties"][targets]):
                    chosen = target.get("Fn::If", [None, target])[1] if isinstance(target, dict) else target
                    covered.add(str(chosen.get("Ref")) if isinstance(chosen, dict) else str(chosen))
    expected = set(resources_of_type(template.data, "AWS::SQS::Queue")) | set(
        resources_of_type(template.data, "AWS::SNS::Topic")
    )
    assert covered == expected
