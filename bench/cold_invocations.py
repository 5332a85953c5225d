"""The local endpoints and the events of ``bench/cold_start.py``'s first invocations.

moto's server and the Stripe emulator run in the bench's own process, on loopback; the template's
resources are provisioned in moto as the local stack provisions them (``saga_local.aws.stack``), so
every function reads the environment the template gives it. The one deliberate difference from the
local stack: no ``PAYMENT_API_KEY``, so the functions that charge read the key from Secrets Manager,
as deployed ones do. The measured processes pay for every AWS and Stripe call they make (the client
side); the endpoints' own work is done in this process and is not counted.

Each round walks one cold order through its four functions, each in a fresh process, the output of
one step the input of the next (Start's SQS event, then Claim, Charge and Mark Complete as the state
machine calls them), and gives every other function a first invocation that does its usual work: a
declined order's release, the outcome relay's stream record, a sweep, and a signed Stripe webhook
received and then consumed. The alternative charges an order of its own.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from moto.server import ThreadedMotoServer

from saga_local.aws.stack import REGION, provision
from saga_local.stack.embedded import LOCAL_CREDENTIALS, free_port, quiet_libraries
from saga_local.stripe_emulator import ProviderEmulator
from saga_local.stripe_emulator.webhooks import signature_header
from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.aws.stack import Stack

EVENTS = ROOT / "events"
#: The alternative's idempotency table (Powertools' DynamoDB persistence: ``id`` as its key).
IDEMPOTENCY_TABLE = "cold-start-bench-idempotency"
#: The cold order's functions, in the order the state machine runs them.
COLD_ORDER = ("StartExecutionFunction", "ClaimOrderFunction", "ChargePaymentFunction", "MarkCompleteFunction")


def _event(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


class Endpoints:
    """moto's server and the emulator on loopback, the stack provisioned in moto."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.emulator = ProviderEmulator()
        self.stack: Stack
        self._exit = contextlib.ExitStack()

    def client(self, service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(retries={"mode": "standard", "max_attempts": 3}),
        )

    def __enter__(self) -> Endpoints:
        quiet_libraries()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        server.start()
        self._exit.callback(server.stop)
        self.emulator.start()
        self._exit.callback(self.emulator.stop)
        self.stack = provision(
            self.client,
            stack_name="cold-start-bench",
            extra_environment={"PAYMENT_API_BASE": self.emulator.url, "PAYMENT_API_TIMEOUT_SECONDS": "5"},
        )
        self.client("dynamodb").create_table(
            TableName=IDEMPOTENCY_TABLE,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._exit.close()

    def aws_environment(self) -> dict[str, str]:
        """What every measured process gets: the endpoint and credentials (Lambda's come as variables too)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, **LOCAL_CREDENTIALS}

    def function_environment(self, logical_id: str) -> dict[str, str]:
        """The template's environment of ``logical_id``, resolved against the provisioned stack."""
        for spec, environment in self.stack.functions.values():
            if spec.logical_id == logical_id:
                return {**environment, **self.aws_environment()}
        raise KeyError(logical_id)

    def yardstick_environment(self) -> dict[str, str]:
        """The bare handlers': the endpoint, and the Powertools settings of the template's Globals."""
        some = self.function_environment(COLD_ORDER[0])
        return {name: value for name, value in some.items() if name.startswith(("POWERTOOLS_", "AWS_"))}

    def alternative_environment(self) -> dict[str, str]:
        return {
            **self.yardstick_environment(),
            "IDEMPOTENCY_TABLE_NAME": IDEMPOTENCY_TABLE,
            "PAYMENT_API_KEY_SECRET_ARN": self.stack.resolver.parameters["PaymentApiKeySecretArn"],
            "PAYMENT_API_BASE": self.emulator.url,
        }

    def signing_secret(self) -> str:
        arn = self.stack.resolver.parameters["WebhookSigningSecretArn"]
        return str(self.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"])

    def claim(self, order: dict[str, Any], token: str) -> None:
        """Claim ``order`` for ``token`` from this process (a release needs a held claim)."""
        from payment_saga.claims import ClaimsStore
        from payment_saga.orders import order_from_message

        table = self.stack.table_name
        ClaimsStore(table, client=self.client("dynamodb"), retention_seconds=30 * 86400).claim(
            order_from_message(order), token=token
        )


def new_order(prefix: str, payment_method: str = "pm_card_visa") -> dict[str, Any]:
    return {
        "orderId": f"{prefix}-{uuid.uuid4().hex[:12]}",
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_123",
        "paymentMethod": payment_method,
    }


def token_of(order_id: str) -> str:
    return (
        f"arn:aws:states:{REGION}:123456789012:execution:cold-start-bench-PaymentSagaStateMachine:{order_id}"
    )


def sqs_event(body: str, attributes: dict[str, Any] | None = None) -> dict[str, Any]:
    event = _event("sqs_valid_order")
    record = event["Records"][0]
    record.update(messageId=str(uuid.uuid4()), body=body, messageAttributes=attributes or {})
    return event


def cold_order(invoke: Callable[[str, dict[str, Any]], Any]) -> dict[str, Any]:
    """One order through Start, Claim, Charge and Mark Complete; the order and its charge."""
    order = new_order("COLD")
    invoke("StartExecutionFunction", sqs_event(json.dumps(order)))
    message = {**order, "paymentAttempt": "initial"}
    token = token_of(order["orderId"])
    claim = invoke("ClaimOrderFunction", {"order": message, "claimToken": token})
    charge = invoke(
        "ChargePaymentFunction",
        {"order": message, "claim": claim, "claimToken": token, "retryCount": 0, "redriveCount": 0},
    )
    done = invoke(
        "MarkCompleteFunction",
        {"orderId": order["orderId"], "claimToken": token, "charge": charge, "attempt": claim["attempt"]},
    )
    if done.get("status") != "CHARGED":
        raise RuntimeError(f"the cold order did not end charged: {done}")
    return {"order": order, "charge": charge}


def release_event(endpoints: Endpoints) -> dict[str, Any]:
    """A declined order's release, its claim held by the execution (taken from this process)."""
    event = _event("release_claim")
    order = {**new_order("DECLINED", "pm_card_chargeDeclined"), "paymentAttempt": "initial"}
    token = token_of(order["orderId"])
    endpoints.claim(order, token)
    event["claimToken"] = token
    event["state"]["order"] = order
    return event


def relay_event(order_id: str) -> dict[str, Any]:
    """The stream record of ``order_id``'s claim completing (events/outcome_relay.json, renamed)."""
    text = json.dumps(_event("outcome_relay"))
    sample = json.loads(text)["Records"][0]["dynamodb"]["Keys"]["orderId"]["S"]
    renamed: dict[str, Any] = json.loads(text.replace(sample, order_id))
    return renamed


def webhook_request(endpoints: Endpoints, charge_id: str) -> tuple[dict[str, Any], str]:
    """A signed ``payment_intent.succeeded`` for ``charge_id`` as the function URL hands it; its body."""
    intent = endpoints.emulator.payment_intent(charge_id)
    now = int(time.time())
    payload = json.dumps(
        {
            "id": f"evt_{uuid.uuid4().hex[:24]}",
            "object": "event",
            "type": "payment_intent.succeeded",
            "created": now,
            "livemode": False,
            "data": {"object": intent},
        }
    )
    signature = signature_header(payload, endpoints.signing_secret(), now)
    event = {
        "version": "2.0",
        "rawPath": "/",
        "headers": {"content-type": "application/json", "stripe-signature": signature},
        "requestContext": {"http": {"method": "POST", "path": "/"}},
        "body": payload,
        "isBase64Encoded": False,
    }
    return event, payload


def other_functions(
    endpoints: Endpoints, invoke: Callable[[str, dict[str, Any]], Any], order: dict[str, Any], charge_id: str
) -> dict[str, Any]:
    """A first invocation of every function outside the cold order, after it. Returns the webhook
    consumer's event (a doorbell of the order's charge), which its levers are measured with."""
    invoke("ReleaseClaimFunction", release_event(endpoints))
    invoke("OutcomeRelayFunction", relay_event(order["orderId"]))
    invoke("SweeperFunction", _event("sweeper"))
    request, payload = webhook_request(endpoints, charge_id)
    answer = invoke("WebhookReceiverFunction", request)
    if answer.get("statusCode") != 200:
        raise RuntimeError(f"the webhook receiver refused the signed event: {answer}")
    data = json.loads(payload)
    attributes = {
        "eventId": {"stringValue": data["id"], "dataType": "String"},
        "eventType": {"stringValue": data["type"], "dataType": "String"},
    }
    doorbell = sqs_event(payload, attributes)
    invoke("WebhookConsumerFunction", doorbell)
    return doorbell


def alternative_event() -> dict[str, Any]:
    return new_order("ALT")
