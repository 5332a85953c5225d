"""The emulator's webhooks, checked with the real stripe SDK: an endpoint made with
``WebhookEndpoint.create`` receives every PaymentIntent change as a Stripe Event that the SDK's own
``Webhook.construct_event`` verifies with the secret the create returned; a delivery that gets no 2xx
is retried and signed anew; the disorder (duplicates, reordering, losses, an endpoint down) does what
it says; a ``processing`` payment settles by itself and sends its event; the admin trigger resends;
an endpoint that fails every delivery for Stripe's whole retry window is disabled, sent nothing
while it is, and enabled again through the API."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pytest
import stripe

from payment_saga.errors import PaymentDeclined, PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import ProviderEmulator, WebhookDisorder

if TYPE_CHECKING:
    from collections.abc import Iterator

#: What the saga's endpoint subscribes to (docs/webhooks.md).
SAGA_EVENTS = [
    "payment_intent.succeeded",
    "payment_intent.payment_failed",
    "payment_intent.canceled",
    "payment_intent.processing",
    "payment_intent.requires_action",
]


class Receiver:
    """A webhook endpoint on loopback: records what it is sent, answers ``statuses`` in turn (then 200),
    and 500 to every delivery of the orders in ``failing``."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str]] = []  # (body, Stripe-Signature)
        self.statuses: list[int] = []
        self.failing: set[str] = set()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                order_id = json.loads(body)["data"]["object"]["metadata"].get("orderId")
                with receiver.lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    status = 500 if order_id in receiver.failing else status
                    receiver.received.append((body, self.headers.get("Stripe-Signature", "")))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/webhook"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def events(self, secret: str) -> list[stripe.Event]:
        """Every delivery, verified by the stripe SDK as a webhook handler verifies it."""
        with self.lock:
            received = list(self.received)
        return [stripe.Webhook.construct_event(body, header, secret) for body, header in received]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.server.shutdown()
    running.server.server_close()


@pytest.fixture
def emulator() -> Iterator[ProviderEmulator]:
    # Stripe's retry waits (a minute, five, half an hour...) compressed to milliseconds.
    with ProviderEmulator(webhook_time_scale=0.0001) as running:
        yield running


def sdk(emulator: ProviderEmulator, api_key: str = LOCAL_API_KEY) -> stripe.StripeClient:
    return stripe.StripeClient(api_key, base_addresses={"api": emulator.url})


def endpoint(emulator: ProviderEmulator, receiver: Receiver, api_key: str = LOCAL_API_KEY) -> str:
    """Register the receiver as the saga registers its endpoint; return the signing secret."""
    made = sdk(emulator, api_key).v1.webhook_endpoints.create(
        {"url": receiver.url, "enabled_events": SAGA_EVENTS}  # type: ignore[typeddict-item]
    )
    assert made.secret is not None
    assert made.secret.startswith("whsec_")
    return made.secret


def charge(emulator: ProviderEmulator, order_id: str, method: str = "pm_card_visa") -> str:
    """The saga's own Charge call (its provider client): the PaymentIntent's id. A payment left
    ``processing`` is an unknown outcome to the Charge step: its PaymentIntent all the same."""
    provider = StripeProvider(LOCAL_API_KEY, api_base=emulator.url, timeout_seconds=2.0)
    try:
        order = Order(order_id, 15000, "BRL", "cus_123", method)
        with contextlib.suppress(PaymentOutcomeUnknown):
            provider.charge(order, attempt=1, idempotency_key=idempotency_key(order_id, 1))
    finally:
        provider.close()
    (intent,) = emulator.payment_intents(order_id)
    return str(intent["id"])


def settled(emulator: ProviderEmulator) -> None:
    assert emulator.webhooks.wait_idle(10), "deliveries still pending"


def test_a_charge_sends_a_succeeded_event_the_sdk_verifies_with_the_endpoints_secret(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    secret = endpoint(emulator, receiver)
    intent = charge(emulator, "ORDER-WH-1")
    settled(emulator)

    (event,) = receiver.events(secret)
    assert event.type == "payment_intent.succeeded"
    assert event.id.startswith("evt_")
    assert event.livemode is False
    assert event.api_version
    assert event.data.object.id == intent
    assert event.data.object.status == "succeeded"
    assert event.data.object.metadata["orderId"] == "ORDER-WH-1"
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(receiver.received[0][0], receiver.received[0][1], "whsec_other")


def test_a_declined_card_sends_payment_failed_with_its_error(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    secret = endpoint(emulator, receiver)
    with pytest.raises(PaymentDeclined):
        charge(emulator, "ORDER-WH-2", "pm_card_chargeDeclined")
    settled(emulator)

    (event,) = receiver.events(secret)
    assert event.type == "payment_intent.payment_failed"
    assert event.data.object.status == "requires_payment_method"
    assert event.data.object.last_payment_error.code == "card_declined"


def test_a_delivery_answered_500_is_retried_and_signed_anew_until_it_gets_a_200(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    secret = endpoint(emulator, receiver)
    receiver.statuses = [500, 503]
    charge(emulator, "ORDER-WH-3")
    settled(emulator)

    events = receiver.events(secret)
    assert [e.type for e in events] == ["payment_intent.succeeded"] * 3
    assert len({e.id for e in events}) == 1  # one event, three attempts
    attempts = emulator.webhooks.attempts("ORDER-WH-3")
    assert [(a.attempt, a.status) for a in attempts] == [(1, 500), (2, 503), (3, 200)]


def test_an_endpoint_down_for_a_while_gets_the_event_on_a_later_retry(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    secret = endpoint(emulator, receiver)
    emulator.webhooks.time_scale = 0.002  # the first retry after 0.12 s, the second 0.6 s later
    emulator.webhooks.take_down(0.3)
    charge(emulator, "ORDER-WH-4")
    settled(emulator)

    (event,) = receiver.events(secret)
    assert event.type == "payment_intent.succeeded"
    attempts = emulator.webhooks.attempts("ORDER-WH-4")
    assert attempts[0].status is None
    assert attempts[0].error == "the endpoint is down"
    assert attempts[-1].delivered
    assert attempts[-1].attempt > 1


def test_disorder_duplicates_some_events_and_loses_others(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    secret = endpoint(emulator, receiver)
    emulator.webhooks.disorder = WebhookDisorder(duplicate=1.0, delay_seconds=0.05, seed=7)
    charge(emulator, "ORDER-WH-5")
    emulator.webhooks.disorder = WebhookDisorder(lose=1.0)
    charge(emulator, "ORDER-WH-6")
    settled(emulator)

    events = receiver.events(secret)
    assert [e.data.object.metadata["orderId"] for e in events] == ["ORDER-WH-5", "ORDER-WH-5"]
    assert events[0].id == events[1].id


def test_a_reordered_event_arrives_after_the_one_sent_after_it(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    secret = endpoint(emulator, receiver)
    emulator.force_outcome("processing", order_id="ORDER-WH-7")
    emulator.webhooks.disorder = WebhookDisorder(reorder=1.0, reorder_seconds=0.3)
    intent = charge(emulator, "ORDER-WH-7")
    emulator.webhooks.disorder = WebhookDisorder()
    emulator.set_status(intent, "succeeded")
    settled(emulator)

    events = receiver.events(secret)
    assert [e.type for e in events] == ["payment_intent.succeeded", "payment_intent.processing"]
    assert events[0].created <= events[1].created + 1  # the processing one was made first


def test_a_processing_payment_settles_after_the_delay_and_sends_its_event(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    secret = endpoint(emulator, receiver)
    emulator.settle_seconds = 0.3
    emulator.force_outcome("processing", order_id="ORDER-WH-8")
    emulator.force_outcome("processing", order_id="ORDER-WH-9")
    emulator.settle_as("ORDER-WH-9", "failed")
    charge(emulator, "ORDER-WH-8")
    charge(emulator, "ORDER-WH-9")
    emulator.settle_seconds = None
    deadline = threading.Event()
    for _ in range(100):
        if len(receiver.received) >= 4:
            break
        deadline.wait(0.05)
    settled(emulator)

    by_order: dict[str, list[str]] = {}
    for event in receiver.events(secret):
        by_order.setdefault(event.data.object.metadata["orderId"], []).append(event.type)
    assert by_order == {
        "ORDER-WH-8": ["payment_intent.processing", "payment_intent.succeeded"],
        "ORDER-WH-9": ["payment_intent.processing", "payment_intent.payment_failed"],
    }
    assert len(emulator.charges_for("ORDER-WH-8")) == 1
    assert emulator.charges_for("ORDER-WH-9") == []


def test_the_admin_trigger_resends_a_sent_event_and_settles_a_pending_payment(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    import urllib.request

    secret = endpoint(emulator, receiver)
    emulator.force_outcome("processing", order_id="ORDER-WH-10")
    charge(emulator, "ORDER-WH-10")

    def trigger(event: str) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 - the emulator on loopback
            f"{emulator.url}/_emulator/trigger",
            data=json.dumps({"event": event, "orderId": "ORDER-WH-10"}).encode(),
            headers={"X-Emulator-Token": emulator.admin_token, "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
            sent: dict[str, Any] = json.load(answer)
            return sent

    settled(emulator)  # deliveries run in parallel, as Stripe's: one step at a time, for their order
    settled_now = trigger("payment_intent.succeeded")  # the debit settles: a charge, its event
    settled(emulator)
    again = trigger("payment_intent.processing")  # sent before: the same event, late
    settled(emulator)

    events = receiver.events(secret)
    assert [e.type for e in events] == [
        "payment_intent.processing",
        "payment_intent.succeeded",
        "payment_intent.processing",
    ]
    assert events[1].id == settled_now["id"]
    assert events[2].id == events[0].id == again["id"]
    assert len(emulator.charges_for("ORDER-WH-10")) == 1


def test_a_live_endpoint_receives_no_test_mode_events(emulator: ProviderEmulator, receiver: Receiver) -> None:
    endpoint(emulator, receiver, api_key="sk_live_emulator_endpoint")
    charge(emulator, "ORDER-WH-11")
    settled(emulator)

    assert receiver.received == []
    made = emulator.webhooks.events()
    assert [(e["type"], e["livemode"]) for e in made] == [
        ("payment_intent.created", False),
        ("payment_intent.succeeded", False),
    ]


def test_an_endpoint_failing_every_delivery_for_the_retry_window_is_disabled_until_enabled_again(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    secret = endpoint(emulator, receiver)
    client = sdk(emulator)
    (registered,) = client.v1.webhook_endpoints.list().data
    emulator.webhooks.time_scale = 0.000001  # Stripe's three days of retries in a quarter of a second
    receiver.statuses = [500] * 15  # every attempt Stripe makes at the first event fails
    charge(emulator, "ORDER-WH-12")
    settled(emulator)

    failed = emulator.webhooks.attempts("ORDER-WH-12")
    assert [(a.attempt, a.status) for a in failed] == [(n, 500) for n in range(1, 16)]
    assert client.v1.webhook_endpoints.retrieve(registered.id).status == "disabled"

    unsent = charge(emulator, "ORDER-WH-13")  # its event is made while the endpoint is disabled
    settled(emulator)

    assert emulator.webhooks.attempts("ORDER-WH-13") == []
    (missed,) = [e for e in emulator.webhooks.events(unsent) if e["type"] == "payment_intent.succeeded"]
    assert missed["pending_webhooks"] == 0  # Stripe queues nothing for a disabled endpoint

    enabled = client.v1.webhook_endpoints.update(registered.id, {"disabled": False})
    assert enabled.status == "enabled"
    charge(emulator, "ORDER-WH-14")
    settled(emulator)

    delivered = [e.data.object.metadata["orderId"] for e in receiver.events(secret)]
    assert delivered == ["ORDER-WH-12"] * 15 + ["ORDER-WH-14"]  # ORDER-WH-13's event never comes
    assert client.v1.webhook_endpoints.retrieve(registered.id).status == "enabled"


def test_an_endpoint_that_answers_other_deliveries_meanwhile_stays_enabled_when_an_event_is_given_up(
    emulator: ProviderEmulator, receiver: Receiver
) -> None:
    endpoint(emulator, receiver)
    client = sdk(emulator)
    (registered,) = client.v1.webhook_endpoints.list().data
    emulator.webhooks.time_scale = 0.00002  # Stripe's three days of retries in five seconds
    receiver.failing = {"ORDER-WH-15"}  # a handler that fails on this one event only
    charge(emulator, "ORDER-WH-15")
    pause = threading.Event()
    for _ in range(500):  # its first attempt made (and failed) before the next event exists
        if emulator.webhooks.attempts("ORDER-WH-15"):
            break
        pause.wait(0.01)
    charge(emulator, "ORDER-WH-16")  # answered 200 while the first event's retries go on failing
    settled(emulator)

    given_up = emulator.webhooks.attempts("ORDER-WH-15")
    assert [(a.attempt, a.delivered) for a in given_up] == [(n, False) for n in range(1, 16)]
    assert [a.delivered for a in emulator.webhooks.attempts("ORDER-WH-16")] == [True]
    assert client.v1.webhook_endpoints.retrieve(registered.id).status == "enabled"
