"""The webhook queues' and the relay's parking queue's own policies, enforced on a local run as AWS
enforces them.

The consumer applies what it finds on the webhook queue, so a role of the account granted
``sqs:SendMessage`` on ``*`` must not be able to queue a forged event there, nor plant one on the
dead-letter queue for the runbook's redrive to move back, nor read the events. The local stack
evaluates the Deny statements of every queue policy on each call a function's role makes
(``saga_local.aws.iam``): a role widened here with the grant it would need is refused all the same,
while the receiver still sends and the consumer's event source still receives and deletes. The same
goes for the parking queue, whose records ``saga replay-parked`` reads with an operator's rights:
only the relay parks.
"""

from __future__ import annotations

import json

import boto3
import pytest

from saga_local.aws.iam import Authorizer, Role, Statement
from saga_local.aws.stack import REGION
from tests.helpers import Saga, webhook_event_source


def _allowing(iam: Authorizer, principal: str, action: str, resource: str) -> Role:
    """``principal``'s role with one more Allow: what a careless policy change would grant."""
    role = iam.roles[principal]
    extra = Statement("Allow", (action,), resources=(resource,), where="added")
    return Role(role.principal, role.name, (*role.statements, extra), role.service, role.arn)


def _queue(saga: Saga, logical_id: str) -> tuple[str, str]:
    """(URL, ARN) of one of the stack's queues."""
    return saga.stack.resolver.refs[logical_id], saga.stack.resolver.attrs[(logical_id, "Arn")]


def _iam(saga: Saga) -> Authorizer:
    iam = saga.runtime.iam
    assert isinstance(iam, Authorizer)
    return iam


FORGED = json.dumps({"id": "evt_forged", "type": "payment_intent.succeeded"})


def test_a_role_other_than_the_receivers_cannot_queue_a_webhook_event(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    iam = _iam(saga)
    url, arn = _queue(saga, "WebhookQueue")
    monkeypatch.setitem(
        iam.roles, "ChargePaymentFunction", _allowing(iam, "ChargePaymentFunction", "sqs:SendMessage", arn)
    )
    forger = iam.act_as(boto3.client("sqs", region_name=REGION), "ChargePaymentFunction")

    with pytest.raises(forger.exceptions.ClientError) as refused:
        forger.send_message(QueueUrl=url, MessageBody=FORGED)

    assert "explicit deny in a resource-based policy" in str(refused.value)
    assert "OnlyTheReceiverQueuesWebhooks" in str(refused.value)
    assert ("ChargePaymentFunction", "sqs:SendMessage", arn) in iam.denied
    assert webhook_event_source(saga).poll_once() == 0, "nothing reached the consumer"


def test_the_receiver_queues_and_the_consumers_event_source_receives_and_deletes(saga: Saga) -> None:
    iam = _iam(saga)
    url, arn = _queue(saga, "WebhookQueue")
    receiver = iam.act_as(boto3.client("sqs", region_name=REGION), "WebhookReceiverFunction")
    consumer = iam.act_as(boto3.client("sqs", region_name=REGION), "WebhookConsumerFunction")

    receiver.send_message(QueueUrl=url, MessageBody=FORGED)
    (message,) = consumer.receive_message(QueueUrl=url, WaitTimeSeconds=0)["Messages"]
    handle = message["ReceiptHandle"]
    consumer.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=5)
    consumer.delete_message(QueueUrl=url, ReceiptHandle=handle)

    assert ("WebhookReceiverFunction", "sqs:SendMessage", arn) in iam.used
    assert ("WebhookConsumerFunction", "sqs:ReceiveMessage", arn) in iam.used
    assert ("WebhookConsumerFunction", "sqs:DeleteMessage", arn) in iam.used
    assert not [d for d in iam.denied if d[0] in {"WebhookReceiverFunction", "WebhookConsumerFunction"}]


def test_a_role_other_than_the_consumers_cannot_read_the_webhook_events(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    iam = _iam(saga)
    url, arn = _queue(saga, "WebhookQueue")
    monkeypatch.setitem(
        iam.roles, "SweeperFunction", _allowing(iam, "SweeperFunction", "sqs:ReceiveMessage", arn)
    )
    reader = iam.act_as(boto3.client("sqs", region_name=REGION), "SweeperFunction")

    with pytest.raises(reader.exceptions.ClientError) as refused:
        reader.receive_message(QueueUrl=url, WaitTimeSeconds=0)

    assert "OnlyTheConsumerAndOperatorsReadWebhooks" in str(refused.value)


def test_not_even_the_receiver_can_plant_an_event_on_the_dead_letter_queue(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    iam = _iam(saga)
    url, arn = _queue(saga, "WebhookDeadLetterQueue")
    monkeypatch.setitem(
        iam.roles,
        "WebhookReceiverFunction",
        _allowing(iam, "WebhookReceiverFunction", "sqs:SendMessage", arn),
    )
    planter = iam.act_as(boto3.client("sqs", region_name=REGION), "WebhookReceiverFunction")

    with pytest.raises(planter.exceptions.ClientError) as refused:
        planter.send_message(QueueUrl=url, MessageBody=FORGED)

    assert "NobodyDeadLettersWebhooks" in str(refused.value)


def test_a_role_other_than_the_relays_cannot_park_a_record(
    saga: Saga, monkeypatch: pytest.MonkeyPatch
) -> None:
    iam = _iam(saga)
    url, arn = _queue(saga, "OutcomeRelayFailureQueue")
    monkeypatch.setitem(
        iam.roles, "SweeperFunction", _allowing(iam, "SweeperFunction", "sqs:SendMessage", arn)
    )
    planter = iam.act_as(boto3.client("sqs", region_name=REGION), "SweeperFunction")
    relay = iam.act_as(boto3.client("sqs", region_name=REGION), "OutcomeRelayFunction")

    with pytest.raises(planter.exceptions.ClientError) as refused:
        planter.send_message(QueueUrl=url, MessageBody=json.dumps({"dynamodb": {}}))
    relay.send_message(QueueUrl=url, MessageBody=json.dumps({"dynamodb": {}}))

    assert "OnlyTheRelayParks" in str(refused.value)
    assert ("OutcomeRelayFunction", "sqs:SendMessage", arn) in iam.used
