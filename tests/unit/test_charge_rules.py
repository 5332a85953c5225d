"""The rarer rows of the provider-answer table (payments.py's docstring), each a rule about money.

A wrong row releases a claim whose charge may have landed, or takes a payment that did not happen for
one that did. Most rows are reached through the provider emulator; the answers the emulator does not
give (a 403, a 402 that is not a card error, a PaymentIntent for another amount...) come from a
canned Stripe: a local HTTP server answering each request with the body Stripe documents, read by
the real ``stripe`` SDK, so the SDK's own mapping of status codes to error classes is part of what
is tested. ``scripts/mutants`` checks that each of these tests notices the rule it guards.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from payment_saga.errors import ChargeNotAttempted, PaymentDeclined, PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import Charge, StripeProvider, idempotency_key
from saga_local.stripe_emulator import ProviderEmulator

API_KEY = "sk_test_canned_fake_key"
ORDER = Order(
    order_id="ORDER-003", amount=15000, currency="BRL", customer_id="cus_123", payment_method="pm_card_visa"
)
KEY = idempotency_key("ORDER-003", 1)


# -- a canned Stripe ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One request as the canned Stripe received it."""

    method: str
    path: str
    headers: dict[str, str]
    params: dict[str, list[str]]


class CannedStripe:
    """Answers each request with the next ``(status, body)`` queued for its path; records every request.

    A request with nothing queued gets a 500 naming it, so a test that did not expect it fails loudly.
    """

    def __init__(self) -> None:
        self.answers: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.seen: list[Seen] = []
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                form = self.rfile.read(length).decode() if length else url.query
                canned.seen.append(
                    Seen(self.command, url.path, dict(self.headers), urllib.parse.parse_qs(form))
                )
                queue = canned.answers.get(f"{self.command} {url.path}", [])
                status, body = (
                    queue.pop(0)
                    if queue
                    else (500, error_body("api_error", f"nothing canned for {self.command} {url.path}"))
                )
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Request-Id", "req_canned")
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def queue(self, method: str, path: str, status: int, body: dict[str, Any]) -> None:
        self.answers.setdefault(f"{method} {path}", []).append((status, body))

    def __enter__(self) -> CannedStripe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def intent(status: str, *, amount: int = 15000, currency: str = "brl", **extra: Any) -> dict[str, Any]:
    """A PaymentIntent of ORDER-003's attempt 1, as Stripe returns it."""
    return {
        "id": "pi_canned",
        "object": "payment_intent",
        "status": status,
        "amount": amount,
        "currency": currency,
        "created": 1_800_000_000,
        "metadata": {"orderId": "ORDER-003", "attempt": "1", "customerId": "cus_123"},
        "last_payment_error": None,
        **extra,
    }


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, **extra}}


@pytest.fixture
def canned() -> Iterator[CannedStripe]:
    with CannedStripe() as server:
        yield server


def provider_for(url: str, key: str = API_KEY) -> StripeProvider:
    return StripeProvider(key, api_base=url, timeout_seconds=2.0)


def charge(provider: StripeProvider) -> Charge:
    return provider.charge(ORDER, attempt=1, idempotency_key=KEY)


# -- the request ----------------------------------------------------------------------------------


def test_the_charge_is_one_confirmed_off_session_request_under_the_attempts_key(canned: CannedStripe) -> None:
    """Off-session tells the issuer no customer is present (a card that needs 3-D Secure fails the
    confirm instead of waiting for an authentication no one will do); the key makes a retry safe."""
    canned.queue("POST", "/v1/payment_intents", 200, intent("succeeded"))

    result = charge(provider_for(canned.url))

    assert result == Charge("pi_canned", "succeeded", 15000, "BRL", replayed=False)
    [request] = canned.seen
    assert request.headers["Idempotency-Key"] == "payment-saga/ORDER-003/attempt-1"
    sent = {name: values[0] for name, values in request.params.items()}
    assert (
        sent.items()
        >= {
            "amount": "15000",
            "currency": "brl",
            "payment_method": "pm_card_visa",
            "confirm": "true",
            "off_session": "true",
            "metadata[orderId]": "ORDER-003",
            "metadata[attempt]": "1",
        }.items()
    )


# -- answers that decline -------------------------------------------------------------------------


def test_a_confirm_answered_requires_payment_method_is_a_decline_with_the_issuers_reason(
    canned: CannedStripe,
) -> None:
    """Stripe may answer a failed confirm with a 200 whose PaymentIntent is back in
    requires_payment_method: nothing was charged, and a retry with the key replays this answer."""
    failed = {"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds"}
    canned.queue(
        "POST", "/v1/payment_intents", 200, intent("requires_payment_method", last_payment_error=failed)
    )

    with pytest.raises(PaymentDeclined) as raised:
        charge(provider_for(canned.url))

    assert (raised.value.decline_code, raised.value.charge_id) == ("insufficient_funds", "pi_canned")


# -- answers that prove nothing was sent ----------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            404,
            error_body("invalid_request_error", "No such PaymentMethod: 'pm_gone'", code="resource_missing"),
        ),
    ],
    ids=["404-no-such-payment-method"],
)
def test_a_request_refused_before_it_executed_is_charge_not_attempted(
    canned: CannedStripe, status: int, body: dict[str, Any]
) -> None:
    """Stripe resolves the objects a request names before it executes it: a 404 that carries no
    PaymentIntent proves this request charged nothing (a 403: tests/unit/test_provider_error_paths.py)."""
    canned.queue("POST", "/v1/payment_intents", status, body)

    with pytest.raises(ChargeNotAttempted):
        charge(provider_for(canned.url))


# -- answers that prove nothing either way --------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            400,
            error_body(
                "invalid_request_error",
                "This PaymentIntent's payment_method could not be updated.",
                payment_intent=intent("requires_confirmation"),
            ),
        ),
        (402, error_body("invalid_request_error", "Payment required.")),
        (
            402,
            error_body(
                "card_error",
                "Your card was declined.",
                code="card_declined",
                payment_intent=intent("succeeded"),
            ),
        ),
        (
            402,
            error_body(
                "card_error",
                "Your card was declined.",
                code="card_declined",
                payment_intent=intent("processing"),
            ),
        ),
    ],
    ids=["400-after-a-payment-intent-was-created", "402-not-a-card-error", "402-succeeded", "402-processing"],
)
def test_an_error_that_does_not_prove_the_payment_failed_is_unknown(
    canned: CannedStripe, status: int, body: dict[str, Any]
) -> None:
    """Only a card error whose PaymentIntent failed is a decline, and only an error raised before a
    PaymentIntent existed proves nothing was sent; anything else keeps the claim for reconciliation."""
    canned.queue("POST", "/v1/payment_intents", status, body)

    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider_for(canned.url))


@pytest.mark.parametrize(
    "answer", [{"amount": 1500}, {"currency": "usd"}], ids=["another-amount", "another-currency"]
)
def test_a_payment_intent_for_another_amount_or_currency_is_never_taken_for_the_orders_charge(
    canned: CannedStripe, answer: dict[str, Any]
) -> None:
    canned.queue("POST", "/v1/payment_intents", 200, intent("succeeded", **answer))

    with pytest.raises(PaymentOutcomeUnknown, match="pi_canned"):
        charge(provider_for(canned.url))


# -- the secret -----------------------------------------------------------------------------------


def test_a_key_of_any_shape_quoted_by_the_provider_is_not_repeated_in_the_steps_error(
    canned: CannedStripe,
) -> None:
    """The step's error message becomes the execution's Cause in the Step Functions console. A proxy
    or gateway in front of the provider may quote the key in full, and not every key looks like
    Stripe's (which a pattern would catch anyway)."""
    key = "gateway-credential-0123456789"
    failure = error_body("api_error", f"upstream refused credential {key}")
    canned.queue("POST", "/v1/payment_intents", 500, failure)

    with pytest.raises(PaymentOutcomeUnknown) as raised:
        charge(provider_for(canned.url, key))

    assert "upstream refused credential" in str(raised.value)
    assert key not in str(raised.value)


# -- a payment waiting for an authentication no one will give -------------------------------------


@pytest.fixture
def emulator() -> Iterator[ProviderEmulator]:
    with ProviderEmulator() as running:
        yield running


def test_a_payment_awaiting_authentication_that_could_not_be_canceled_stays_unknown(
    emulator: ProviderEmulator,
) -> None:
    """Not canceled means it could still be authenticated and charge: no decline, no release."""
    emulator.force_outcome("requires_action", order_id="ORDER-003")
    emulator.inject("fail_before_apply", endpoint="cancel")

    with pytest.raises(PaymentOutcomeUnknown, match="requires_action"):
        charge(provider_for(emulator.url))

    [waiting] = emulator.payment_intents("ORDER-003")
    assert waiting["status"] == "requires_action"


def test_a_payment_authenticated_before_the_retry_could_cancel_it_is_the_charge(
    emulator: ProviderEmulator,
) -> None:
    """The first try could not cancel it; the customer then authenticated: the retry must report the
    charge (so the claim completes), not an outcome it cannot know."""
    emulator.force_outcome("requires_action", order_id="ORDER-003")
    emulator.inject("fail_before_apply", endpoint="cancel")
    emulator.inject("fail_before_apply", endpoint="retrieve")
    provider = provider_for(emulator.url)
    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider)
    [waiting] = emulator.payment_intents("ORDER-003")
    emulator.set_status(waiting["id"], "succeeded")

    result = charge(provider)

    assert result.charge_id == waiting["id"]
    assert [entry.charge_id for entry in emulator.charges_for("ORDER-003")] == [waiting["id"]]


def test_reconciliation_does_not_take_a_payment_awaiting_authentication_for_no_charge(
    emulator: ProviderEmulator,
) -> None:
    """The sweeper must not release a claim whose PaymentIntent may still be authenticated."""
    emulator.force_outcome("requires_action", order_id="ORDER-003")
    emulator.inject("fail_before_apply", endpoint="cancel")
    emulator.inject("fail_before_apply", endpoint="retrieve")
    provider = provider_for(emulator.url)
    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider)

    with pytest.raises(PaymentOutcomeUnknown, match="in flight"):
        provider.find_charge(ORDER, attempt=1, idempotency_key=KEY)


def test_the_list_proof_for_an_attempt_never_counts_another_attempts_payment_intents(
    emulator: ProviderEmulator,
) -> None:
    """Attempt 1 was declined; attempt 2 (the customer's retry) never reached the provider. The list
    shows every PaymentIntent of the account, so attempt 2's record must keep only its own: taking
    attempt 1's failed PaymentIntent for attempt 2's would record a decline the customer never had."""
    provider = provider_for(emulator.url)
    declining = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_chargeDeclined")
    with pytest.raises(PaymentDeclined):
        provider.charge(declining, attempt=1, idempotency_key=KEY)
    now = int(emulator.now())

    record = provider.list_attempt(
        ORDER,
        attempt=2,
        idempotency_key=idempotency_key("ORDER-003", 2),
        created_from=now - 3600,
        created_to=now + 60,
    )

    assert (record.charge, record.failed_ids, record.declined) == (None, (), False)
