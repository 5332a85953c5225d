"""Helpers shared by tests across folders (conftest files keep fixtures only).

``Saga`` bundles a provisioned stack with its runtime, provider emulator and driver; ``order`` builds
the seed-000 order message; ``FakeClock`` moves time by hand so leases expire without sleeping.
"""

from __future__ import annotations

import json
import time
from typing import Any

import boto3

from payment_saga.payments import StripeProvider
from saga_local.aws.event_source import SqsEventSource
from saga_local.aws.moto_adapter import EngineHooks
from saga_local.aws.stack import REGION, Stack
from saga_local.runtime.faults import FaultPlan
from saga_local.runtime.runtimes import InProcessRuntime
from saga_local.stack.driver import Driver
from saga_local.stripe_emulator import ProviderEmulator


class FakeClock:
    """A clock tests move by hand: leases expire without sleeping."""

    def __init__(self, now: float = 1_790_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Saga:
    """One provisioned stack, its runtime and provider, and a driver."""

    def __init__(
        self, stack: Stack, runtime: InProcessRuntime, provider: ProviderEmulator, hooks: EngineHooks
    ) -> None:
        self.stack = stack
        self.runtime = runtime
        self.provider = provider
        self.hooks = hooks
        self.faults: FaultPlan = runtime.faults
        self.driver = Driver(lambda service: boto3.client(service, region_name=REGION), stack)

    def charges(self, order_id: str) -> int:
        return len(self.provider.charges_for(order_id))

    def invocations(self, function: str | None = None, order_id: str | None = None) -> int:
        return sum(
            1
            for r in self.runtime.records
            if (function is None or r.function == function) and (order_id is None or r.order_id == order_id)
        )


def order(order_id: str = "ORDER-003", **overrides: Any) -> dict[str, Any]:
    """The seed-000 order (150.00 BRL) unless told otherwise."""
    return {
        "orderId": order_id,
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_123",
        "paymentMethod": "pm_card_visa",
        **overrides,
    }


def live_mode_provider(api_key: str, url: str) -> StripeProvider:
    """A provider with a live-mode key (``sk_live_...``) pointed at the emulator, which models modes by
    the key's prefix. The provider itself sends a live key to Stripe's host only, so the SDK client
    is the test's own (a provider given a client leaves pointing it to its maker)."""
    import stripe  # the SDK, only for the tests that need it

    client = stripe.StripeClient(
        api_key,
        base_addresses={"api": url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=2.0),
    )
    return StripeProvider(api_key, client=client)


#: The orders queue's maxReceiveCount (template.yaml): receives before SQS moves a message.
MAX_RECEIVE_COUNT = 5


def failed_receives(sqs: Any, url: str, body: str, copies: int) -> None:
    """``copies`` of ``body`` on ``url``, each received ``MAX_RECEIVE_COUNT`` times, as a message SQS
    moved to a dead-letter queue has been (it keeps its receive count; moto stamps no
    ``DeadLetterQueueSourceArn``). What the queue held is hidden meanwhile and visible again after."""
    parked: list[str] = []

    def park_visible() -> None:
        while True:
            batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600)
            if not batch.get("Messages"):
                return
            parked.extend(message["ReceiptHandle"] for message in batch["Messages"])

    park_visible()  # a receive returns the oldest ten: the new copy must be the only one visible
    for _ in range(copies):
        sqs.send_message(QueueUrl=url, MessageBody=body)
        for _ in range(MAX_RECEIVE_COUNT - 1):
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=0)
        park_visible()  # its last failed receive
    for handle in parked:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)


def webhook_signing_secret(stack: Stack) -> str:
    """The signing secret the local stack made for its webhook endpoint, read as the receiver reads it."""
    arn = stack.resolver.parameters["WebhookSigningSecretArn"]
    secret: str = boto3.client("secretsmanager", region_name=REGION).get_secret_value(SecretId=arn)[
        "SecretString"
    ]
    return secret


def signed_webhook_request(payload: str, secret: str, *, timestamp: int | None = None) -> bytes:
    """The function URL request (payload format 2.0) Stripe's delivery of ``payload`` makes, signed by
    the real ``stripe`` SDK with ``secret``."""
    import stripe

    header = stripe.WebhookSignature.generate_signature_header(payload, secret, timestamp=timestamp)
    request = {
        "version": "2.0",
        "requestContext": {"http": {"method": "POST", "path": "/"}},
        "headers": {"content-type": "application/json", "stripe-signature": header},
        "body": payload,
        "isBase64Encoded": False,
    }
    return json.dumps(request).encode()


def webhook_event_source(saga: Saga) -> SqsEventSource:
    """The webhook queue's event source, polling with the consumer's role as Lambda's mapping does."""
    sqs = boto3.client("sqs", region_name=REGION)
    iam = saga.stack.iam
    return SqsEventSource(
        iam.act_as(sqs, "WebhookConsumerFunction") if iam is not None else sqs,
        boto3.client("lambda", region_name=REGION),
        saga.stack.resolver.refs["WebhookQueue"],
        saga.stack.resolver.attrs[("WebhookQueue", "Arn")],
        saga.stack.function_name("WebhookConsumerFunction"),
    )


def deliver_webhook(saga: Saga, order_id: str, kind: str, *, livemode: bool = False) -> None:
    """Stripe's ``payment_intent.<kind>`` event for the order's PaymentIntent, delivered and applied."""
    (intent,) = saga.provider.payment_intents(order_id)
    event = {
        "id": f"evt_{kind}_{order_id}",
        "object": "event",
        "type": f"payment_intent.{kind}",
        "created": int(time.time()),
        "livemode": livemode,
        "data": {"object": intent},
    }
    request = signed_webhook_request(json.dumps(event), webhook_signing_secret(saga.stack))
    with saga.runtime.outside_invocation():
        answer = saga.runtime.invoke(saga.stack.function_name("WebhookReceiverFunction"), request)
        assert json.loads(answer.payload)["statusCode"] == 200, answer.payload
        assert webhook_event_source(saga).poll_once() == 1
