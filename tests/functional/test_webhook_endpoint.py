"""The webhook endpoint against moto (Secrets Manager, SQS, the claims table from template.yaml), with
signatures built and checked by the real ``stripe`` SDK and PaymentIntents made by the real
``StripeProvider`` against the emulator: what Stripe is answered, what is queued, what the claim becomes.

Signing secrets are made up per test (``secrets.token_hex``): nothing key-shaped is committed."""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest
import stripe

from handlers import runtime as handler_runtime
from handlers import webhook_consumer, webhook_receiver
from payment_saga.claims import ClaimResult, ClaimsStore, ClaimStatus, ReleaseReason
from payment_saga.errors import PaymentDeclined
from payment_saga.orders import Order
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.runtime.api import LambdaContext
from saga_local.stripe_emulator import ProviderEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator

ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")
DECLINED = Order("ORDER-004", 15000, "BRL", "cus_123", "pm_card_chargeDeclined")
A = "arn:aws:states:us-east-1:123456789012:execution:saga:A"
B = "arn:aws:states:us-east-1:123456789012:execution:saga:B"


def whsec() -> str:
    return f"whsec_{secrets.token_hex(24)}"


class Endpoint:
    """The receiver and the consumer with their environment, as the template wires them."""

    def __init__(self, secret_arn: str, queue_url: str, store: ClaimsStore) -> None:
        self.secret_arn = secret_arn
        self.queue_url = queue_url
        self.store = store
        self.sqs = boto3.client("sqs", region_name=REGION)
        self.secretsmanager = boto3.client("secretsmanager", region_name=REGION)

    def set_secrets(self, *values: str) -> None:
        text = values[0] if len(values) == 1 else json.dumps({"signingSecrets": list(values)})
        self.secretsmanager.put_secret_value(SecretId=self.secret_arn, SecretString=text)

    def post(
        self, payload: str, *, secret: str | None = None, timestamp: int | None = None, encode: bool = False
    ) -> dict[str, Any]:
        headers = {"content-type": "application/json"}
        if secret is not None:
            headers["Stripe-Signature"] = stripe.WebhookSignature.generate_signature_header(
                payload, secret, timestamp=timestamp
            )
        request = {
            "version": "2.0",
            "requestContext": {"http": {"method": "POST", "path": "/"}},
            "headers": headers,
            "body": base64.b64encode(payload.encode()).decode() if encode else payload,
            "isBase64Encoded": encode,
        }
        answer: dict[str, Any] = webhook_receiver.handler(
            request, LambdaContext("payment-saga-WebhookReceiverFunction", 256, 10)
        )
        return answer

    def queued(self) -> list[dict[str, Any]]:
        messages: list[Any] = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", [])
        return messages

    def consume(self) -> dict[str, Any]:
        """One batch of the queue, through the consumer as its event source hands it over."""
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:webhooks",
                "awsRegion": REGION,
            }
            for m in self.queued()
        ]
        result: dict[str, Any] = webhook_consumer.handler(
            {"Records": records}, LambdaContext("payment-saga-WebhookConsumerFunction", 256, 10)
        )
        failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
        for record in records:
            if record["messageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=record["receiptHandle"])
        return result


@pytest.fixture
def emulator() -> Iterator[ProviderEmulator]:
    # On the real clock, as this module's events and signatures are, not on the test's clock as the
    # folder's emulator (conftest.py) is; the folder's provider fixture is built on this one.
    with ProviderEmulator() as emulator:
        yield emulator


@pytest.fixture
def endpoint(
    dynamodb: Any, claims_table: str, emulator: ProviderEmulator, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Endpoint]:
    secret = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="payment-saga/webhook", SecretString=whsec()
    )
    queue_url = boto3.client("sqs", region_name=REGION).create_queue(QueueName="webhooks")["QueueUrl"]
    monkeypatch.setenv("WEBHOOK_SIGNING_SECRET_ARN", secret["ARN"])
    monkeypatch.setenv("WEBHOOK_QUEUE_URL", queue_url)
    monkeypatch.setenv("WEBHOOK_TOLERANCE_SECONDS", "300")
    monkeypatch.setenv("CLAIMS_TABLE_NAME", claims_table)
    monkeypatch.setenv("CLAIM_RETENTION_DAYS", "30")
    # The consumer reads each PaymentIntent from Stripe (the emulator) with the stack's own key.
    monkeypatch.setenv("PAYMENT_API_BASE", emulator.url)
    monkeypatch.setenv("PAYMENT_API_KEY", LOCAL_API_KEY)
    handler_runtime.reset()
    webhook_receiver.reset()
    yield Endpoint(secret["ARN"], queue_url, ClaimsStore(claims_table, client=dynamodb))
    handler_runtime.reset()
    webhook_receiver.reset()


def stripe_event(intent: stripe.PaymentIntent, kind: str, event_id: str = "evt_1") -> str:
    """The event Stripe sends for ``intent``: the PaymentIntent as the API shows it, as its data.object."""
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": f"payment_intent.{kind}",
            "created": int(time.time()),
            "livemode": False,
            "api_version": "2026-10-28.endive",
            "data": {"object": intent.to_dict()},
        }
    )


def intent_of(emulator: ProviderEmulator, order: Order) -> stripe.PaymentIntent:
    client = stripe.StripeClient(LOCAL_API_KEY, base_addresses={"api": emulator.url}, max_network_retries=0)
    (intent,) = [
        i
        for i in client.v1.payment_intents.list({"limit": 100}).data
        if i.metadata is not None and i.metadata.to_dict().get("orderId") == order.order_id
    ]
    return intent


def charged(provider: StripeProvider, emulator: ProviderEmulator, store: ClaimsStore, order: Order) -> str:
    """The order claimed by A and charged, its Mark Complete answer lost: the claim is still CLAIMED."""
    assert store.claim(order, token=A).result is ClaimResult.NEW
    # A decline raises: the execution's answer is lost all the same.
    with contextlib.suppress(PaymentDeclined):
        provider.charge(order, attempt=1, idempotency_key=idempotency_key(order.order_id, 1))
    return stripe_event(intent_of(emulator, order), "succeeded")


def test_a_signed_succeeded_event_completes_the_claim_whose_mark_complete_answer_was_lost(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    payload = charged(provider, emulator, endpoint.store, ORDER)
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    assert endpoint.post(payload, secret=secret)["statusCode"] == 200
    endpoint.consume()
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, intent_of(emulator, ORDER).id)
    assert len(emulator.charges_for(ORDER.order_id)) == 1
    assert endpoint.store.claim(ORDER, token=B).result is ClaimResult.DUPLICATE


def test_only_what_identifies_the_event_is_queued_never_the_payers_data_or_the_client_secret(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    payload = charged(provider, emulator, endpoint.store, ORDER)
    event = json.loads(payload)
    event["data"]["object"].update(client_secret="pi_x_secret_y", receipt_email="payer@example.com")
    payload = json.dumps(event)
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    assert endpoint.post(payload, secret=secret, encode=True)["statusCode"] == 200
    (message,) = endpoint.queued()
    assert json.loads(message["Body"]) == {
        "eventId": "evt_1",
        "type": "payment_intent.succeeded",
        "paymentIntentId": intent_of(emulator, ORDER).id,
        "livemode": False,
        "created": event["created"],
    }
    assert "secret" not in message["Body"]
    assert "payer@" not in message["Body"]
    assert message["MessageAttributes"]["eventType"]["StringValue"] == "payment_intent.succeeded"


def test_a_body_planted_on_the_queue_moves_no_claim_stripe_did_not_move(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    """Whoever can send to the queue can only ring: a planted "succeeded" for a PaymentIntent that
    failed, one for an id Stripe never issued, and a whole forged event all read Stripe's answer."""
    charged(provider, emulator, endpoint.store, DECLINED)  # Stripe declined it: nothing was charged
    failed = intent_of(emulator, DECLINED)
    forged = json.loads(stripe_event(failed, "succeeded"))
    forged["data"]["object"].update(status="succeeded", amount_received=DECLINED.amount)
    bells = [
        {"eventId": "evt_f1", "type": "payment_intent.succeeded", "paymentIntentId": "pi_NeverIssued",
         "livemode": False, "created": 1},
        forged,
    ]  # fmt: skip
    for body in bells:
        endpoint.sqs.send_message(QueueUrl=endpoint.queue_url, MessageBody=json.dumps(body))
    assert endpoint.consume() == {"batchItemFailures": []}
    claim = endpoint.store.get(DECLINED.order_id)
    assert claim is not None
    # Stripe's answer for the real PaymentIntent is "failed": the claim is released as declined,
    # never completed; the made-up id changed nothing.
    assert (claim.status, claim.release_reason, claim.charge_id) == (
        ClaimStatus.RELEASED,
        ReleaseReason.DECLINED,
        None,
    )
    assert emulator.charges_for(DECLINED.order_id) == []


def test_a_connected_accounts_event_is_answered_200_and_never_queued(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    event = json.loads(charged(provider, emulator, endpoint.store, ORDER))
    payload = json.dumps({**event, "account": "acct_1Connected"})
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    assert endpoint.post(payload, secret=secret)["statusCode"] == 200
    assert endpoint.queued() == []
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert claim.status is ClaimStatus.CLAIMED


def test_stripe_unreachable_leaves_the_doorbell_to_ring_again_and_writes_nothing(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    payload = charged(provider, emulator, endpoint.store, ORDER)
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    assert endpoint.post(payload, secret=secret)["statusCode"] == 200
    emulator.inject("fail_before_apply", endpoint="retrieve")
    # The queue's visibility timeout, compressed: the failed doorbell comes back at once.
    endpoint.sqs.set_queue_attributes(QueueUrl=endpoint.queue_url, Attributes={"VisibilityTimeout": "0"})
    # The whole batch failed: the function fails (alarmed), and SQS delivers the doorbell again.
    with pytest.raises(handler_runtime.BatchFailed, match="every message of the batch failed"):
        endpoint.consume()
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert claim.status is ClaimStatus.CLAIMED  # nothing written on a guess
    assert endpoint.consume() == {"batchItemFailures": []}
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert claim.status is ClaimStatus.COMPLETED


def test_a_declined_charge_whose_release_never_ran_is_released_as_declined_by_its_failed_event(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    charged(provider, emulator, endpoint.store, DECLINED)
    payload = stripe_event(intent_of(emulator, DECLINED), "payment_failed")
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    assert endpoint.post(payload, secret=secret)["statusCode"] == 200
    endpoint.consume()
    claim = endpoint.store.get(DECLINED.order_id)
    assert claim is not None
    assert (claim.status, claim.release_reason) == (ClaimStatus.RELEASED, ReleaseReason.DECLINED)
    assert endpoint.store.claim(DECLINED, token=B).result is ClaimResult.DUPLICATE


@pytest.mark.parametrize(
    "forge",
    ["another-secret", "unsigned", "stale", "tampered", "non-ascii"],
)
def test_a_request_that_fails_the_signature_is_answered_400_and_moves_nothing(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator, forge: str
) -> None:
    payload = charged(provider, emulator, endpoint.store, ORDER)
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    if forge == "another-secret":
        answer = endpoint.post(payload, secret=whsec())
    elif forge == "unsigned":
        answer = endpoint.post(payload)
    elif forge == "stale":
        answer = endpoint.post(payload, secret=secret, timestamp=int(time.time()) - 301)
    elif forge == "non-ascii":
        # A header the SDK cannot even compare (hmac.compare_digest refuses non-ASCII text).
        request = {
            "requestContext": {"http": {"method": "POST"}},
            "headers": {"stripe-signature": f"t={int(time.time())},v1=\u00e9\u00e9"},
            "body": payload,
        }
        answer = webhook_receiver.handler(request, LambdaContext("receiver", 256, 10))
    else:
        signed_for = payload.replace('"succeeded"', '"processing"')
        header = stripe.WebhookSignature.generate_signature_header(signed_for, secret)
        request = {
            "requestContext": {"http": {"method": "POST"}},
            "headers": {"stripe-signature": header},
            "body": payload,
        }
        answer = webhook_receiver.handler(request, LambdaContext("receiver", 256, 10))
    assert answer["statusCode"] == 400
    assert endpoint.queued() == []
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert claim.status is ClaimStatus.CLAIMED


def test_both_secrets_of_a_rotation_verify_and_the_retired_one_stops_once_taken_out(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = whsec(), whsec()
    endpoint.set_secrets(new, old)
    body = json.dumps({"id": "evt_x", "type": "charge.refunded", "created": 1, "data": {"object": {}}})
    assert endpoint.post(body, secret=old)["statusCode"] == 200
    assert endpoint.post(body, secret=new)["statusCode"] == 200
    # The rotation ends: the old secret is taken out of the secret. Every warm receiver reads the
    # secret again within SECRET_MAX_AGE_SECONDS (five minutes; here at once).
    endpoint.set_secrets(new)
    monkeypatch.setattr(webhook_receiver, "SECRET_MAX_AGE_SECONDS", 0)
    assert endpoint.post(body, secret=old)["statusCode"] == 400
    assert endpoint.post(body, secret=new)["statusCode"] == 200


def test_a_secret_rolled_after_the_container_read_it_is_picked_up_without_a_deploy(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps({"id": "evt_x", "type": "charge.refunded", "created": 1, "data": {"object": {}}})
    first = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    assert endpoint.post(body, secret=first)["statusCode"] == 200
    rolled = whsec()
    endpoint.set_secrets(rolled)
    monkeypatch.setattr(webhook_receiver, "SECRET_REFRESH_SECONDS", 0)
    assert endpoint.post(body, secret=rolled)["statusCode"] == 200


def test_an_event_type_the_saga_does_not_act_on_is_answered_200_and_dropped(endpoint: Endpoint) -> None:
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    body = json.dumps({"id": "evt_x", "type": "customer.created", "created": 1, "data": {"object": {}}})
    assert endpoint.post(body, secret=secret)["statusCode"] == 200
    assert endpoint.queued() == []


@pytest.mark.parametrize("body", ["not json", "[]", '{"id": "evt_x"}', '{"id": 1, "type": "x"}'])
def test_a_signed_body_that_is_not_a_stripe_event_is_answered_400(endpoint: Endpoint, body: str) -> None:
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    assert endpoint.post(body, secret=secret)["statusCode"] == 400
    assert endpoint.queued() == []


def test_only_a_post_is_read(endpoint: Endpoint) -> None:
    request = {"requestContext": {"http": {"method": "GET"}}, "headers": {}, "body": ""}
    assert webhook_receiver.handler(request, LambdaContext("receiver", 256, 10))["statusCode"] == 405


def test_a_queue_that_refuses_the_event_fails_the_request_so_that_stripe_sends_it_again(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    payload = charged(provider, emulator, endpoint.store, ORDER)
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    endpoint.sqs.delete_queue(QueueUrl=endpoint.queue_url)
    with pytest.raises(Exception, match=r"NonExistentQueue|does not exist"):
        endpoint.post(payload, secret=secret)


def test_a_queued_event_the_consumer_cannot_read_fails_alone_and_its_neighbour_is_applied(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    payload = charged(provider, emulator, endpoint.store, ORDER)
    endpoint.sqs.send_message(QueueUrl=endpoint.queue_url, MessageBody='{"type": "payment_intent.succeeded"}')
    bell = json.loads(payload)
    endpoint.sqs.send_message(
        QueueUrl=endpoint.queue_url,
        MessageBody=json.dumps(
            {"eventId": bell["id"], "type": bell["type"], "paymentIntentId": bell["data"]["object"]["id"],
             "livemode": False, "created": bell["created"]}
        ),
    )  # fmt: skip
    result = endpoint.consume()
    assert len(result["batchItemFailures"]) == 1
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert claim.status is ClaimStatus.COMPLETED


def test_every_delivery_disorder_of_one_payment_ends_with_the_claim_completed_once(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    """Duplicated, reordered and late: processing after succeeded, succeeded twice, a stray failure."""
    succeeded = charged(provider, emulator, endpoint.store, ORDER)
    intent = json.loads(succeeded)["data"]["object"]
    processing = json.dumps(
        {**json.loads(succeeded), "id": "evt_0", "type": "payment_intent.processing",
         "data": {"object": {**intent, "status": "processing"}}}
    )  # fmt: skip
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    for payload in (succeeded, succeeded, processing, succeeded):
        assert endpoint.post(payload, secret=secret)["statusCode"] == 200
    assert endpoint.consume() == {"batchItemFailures": []}
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, intent["id"])
    assert len(emulator.charges_for(ORDER.order_id)) == 1


def test_another_stripe_accounts_payment_intent_carrying_our_order_settles_nothing_of_ours(
    endpoint: Endpoint, emulator: ProviderEmulator
) -> None:
    """A connected (or any other) account pays a PaymentIntent whose metadata names our order, and its
    doorbell reaches our queue: our key reads only our account, so Stripe has no such PaymentIntent."""
    assert endpoint.store.claim(ORDER, token=A).result is ClaimResult.NEW
    other_key = f"{LOCAL_API_KEY}_another_account"
    emulator.assign_key(other_key, "acct_1Another")
    theirs = StripeProvider(other_key, api_base=emulator.url).charge(
        ORDER, attempt=1, idempotency_key=idempotency_key(ORDER.order_id, 1)
    )
    endpoint.sqs.send_message(
        QueueUrl=endpoint.queue_url,
        MessageBody=json.dumps(
            {"eventId": "evt_c1", "type": "payment_intent.succeeded", "paymentIntentId": theirs.charge_id,
             "livemode": False, "created": 1}
        ),
    )  # fmt: skip
    assert endpoint.consume() == {"batchItemFailures": []}
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.CLAIMED, None)


def test_a_second_charge_and_a_charge_for_another_amount_are_alarmed_and_write_nothing(
    endpoint: Endpoint, provider: StripeProvider, emulator: ProviderEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    """Stripe shows, for the order's attempt, a second succeeded PaymentIntent (applied under another
    key) and one for another amount: each read from Stripe, each logged at ERROR for a person."""
    payload = charged(provider, emulator, endpoint.store, ORDER)
    secret = endpoint.secretsmanager.get_secret_value(SecretId=endpoint.secret_arn)["SecretString"]
    assert endpoint.post(payload, secret=secret)["statusCode"] == 200
    endpoint.consume()  # the claim is completed with the attempt's charge
    second = provider.charge(ORDER, attempt=1, idempotency_key="another-key")
    other_amount = Order(ORDER.order_id, 100, ORDER.currency, ORDER.customer_id, ORDER.payment_method)
    wrong = provider.charge(other_amount, attempt=1, idempotency_key="yet-another-key")
    for n, intent in enumerate((second.charge_id, wrong.charge_id)):
        endpoint.sqs.send_message(
            QueueUrl=endpoint.queue_url,
            MessageBody=json.dumps(
                {"eventId": f"evt_x{n}", "type": "payment_intent.succeeded", "paymentIntentId": intent,
                 "livemode": False, "created": 1}
            ),
        )  # fmt: skip
    assert endpoint.consume() == {"batchItemFailures": []}
    errors = {r.message for r in caplog.records if r.levelname == "ERROR"}
    assert {"duplicate_charge", "webhook_mismatch"} <= errors
    claim = endpoint.store.get(ORDER.order_id)
    assert claim is not None
    assert claim.charge_id == intent_of_first(emulator, ORDER)  # the order's own charge, unchanged


def intent_of_first(emulator: ProviderEmulator, order: Order) -> str:
    """The order's first charge (the ledger is oldest first)."""
    return emulator.charges_for(order.order_id)[0].charge_id
