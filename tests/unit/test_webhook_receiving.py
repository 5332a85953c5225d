"""The webhook receiver's decisions, directly: what each request is answered and what is queued, and
when the signing secrets are read again. No AWS, no Stripe: the signature check is the SDK's own."""

from __future__ import annotations

import base64
import json
import secrets
from typing import TYPE_CHECKING, Any

import pytest
import stripe

from payment_saga.receiving import Dropped, Queued, Rejected, Request, SigningSecrets, receive
from payment_saga.webhooks import Doorbell

if TYPE_CHECKING:
    from collections.abc import Callable


def stripe_event(**overrides: Any) -> dict[str, Any]:
    """A ``payment_intent.succeeded`` event for ORDER-003, as Stripe sends it."""
    intent = {
        "id": "pi_1",
        "object": "payment_intent",
        "status": "succeeded",
        "metadata": {"orderId": "ORDER-003"},
    }
    return {
        "id": "evt_1",
        "type": "payment_intent.succeeded",
        "created": 1_790_000_010,
        "livemode": False,
        "data": {"object": intent},
        **overrides,
    }


def noting(checked: list[str]) -> Callable[[str, str | None], bool]:
    """A signature check that passes and notes the payload it was given."""

    def verified(payload: str, _header: str | None) -> bool:
        checked.append(payload)
        return True

    return verified


def answer(payload: str, *, method: str = "POST", signed: bool = True, valid: bool = True) -> object:
    request = Request(method, payload, False, "t=1,v1=abc" if signed else None)
    return receive(request, lambda _payload, _header: valid)


def test_a_payment_intent_event_is_queued_as_its_doorbell_only() -> None:
    verdict = answer(json.dumps(stripe_event()))

    assert isinstance(verdict, Queued)
    assert (verdict.status, verdict.message) == (200, "queued")
    assert verdict.bell == Doorbell("evt_1", "payment_intent.succeeded", "pi_1", False, 1_790_000_010)
    assert verdict.claimed_order_id == "ORDER-003"
    message = verdict.queue_message()
    assert json.loads(message["MessageBody"]) == verdict.bell.to_message()
    assert "metadata" not in message["MessageBody"]
    assert message["MessageAttributes"]["eventId"] == {"DataType": "String", "StringValue": "evt_1"}


def test_only_a_post_is_read() -> None:
    assert answer("{}", method="GET") == Rejected("method", "POST only", 405)


def test_a_base64_body_that_is_not_utf8_is_malformed_and_never_checked() -> None:
    checked: list[str] = []
    request = Request("POST", base64.b64encode(b"\xff\xfe").decode(), True, "t=1,v1=abc")

    verdict = receive(request, noting(checked))

    assert verdict == Rejected("malformed", "the body is not UTF-8")
    assert checked == []


def test_a_base64_body_is_decoded_before_its_signature_is_checked() -> None:
    payload = json.dumps(stripe_event())
    checked: list[str] = []
    request = Request("POST", base64.b64encode(payload.encode()).decode(), True, "t=1,v1=abc")

    verdict = receive(request, noting(checked))

    assert checked == [payload]
    assert isinstance(verdict, Queued)


@pytest.mark.parametrize("signed", [True, False])
def test_a_signature_that_does_not_verify_is_refused_and_told_apart_when_signed(signed: bool) -> None:
    verdict = answer(json.dumps(stripe_event()), signed=signed, valid=False)

    assert isinstance(verdict, Rejected)
    assert (verdict.reason, verdict.status, verdict.signed) == ("signature", 400, signed)


@pytest.mark.parametrize(
    "payload", ["not json", "[1]", json.dumps({"id": "evt_1"}), json.dumps({"id": 1, "type": "x"})]
)
def test_a_body_that_is_not_a_stripe_event_is_malformed(payload: str) -> None:
    assert answer(payload) == Rejected("malformed", "the body is not a Stripe event")


def test_an_event_type_the_saga_does_not_act_on_is_dropped_with_200() -> None:
    verdict = answer(json.dumps(stripe_event(type="customer.created")))

    assert verdict == Dropped("evt_1", "customer.created", "an event type the saga does not act on")
    assert isinstance(verdict, Dropped)
    assert (verdict.status, verdict.message) == (200, "ignored")


def test_another_stripe_accounts_event_is_dropped_never_queued() -> None:
    verdict = answer(json.dumps(stripe_event(account="acct_other")))

    assert verdict == Dropped("evt_1", "payment_intent.succeeded", "an event of another Stripe account")


def test_a_payment_intent_event_that_names_no_payment_intent_is_malformed() -> None:
    verdict = answer(json.dumps(stripe_event(data={"object": {"object": "charge", "id": "ch_1"}})))

    assert verdict == Rejected("malformed", "the event does not name a PaymentIntent")


# -- the signing secrets ---------------------------------------------------------------------------


class Secrets:
    """A secret store read by ARN and a clock, both counted and moved by the test."""

    def __init__(self) -> None:
        self.value = f"whsec_{secrets.token_hex(24)}"
        self.reads = 0
        self.now = 1_790_000_000.0

    def read(self, _arn: str) -> str:
        self.reads += 1
        return self.value

    def signed(self, payload: str, secret: str | None = None) -> str:
        return stripe.WebhookSignature.generate_signature_header(
            payload, secret or self.value, timestamp=int(self.now)
        )


def verify(cache: SigningSecrets, header: str | None, *, source: str = "arn:1") -> bool:
    # The test's clock is not the SDK's: any timestamp is recent enough here.
    return cache.verify(
        "{}", header, source=source, tolerance=10**10, refresh_seconds=60, max_age_seconds=300
    )


@pytest.fixture
def store() -> Secrets:
    return Secrets()


@pytest.fixture
def cache(store: Secrets) -> SigningSecrets:
    return SigningSecrets(read=store.read, clock=lambda: store.now)


def test_the_secret_is_read_once_while_it_is_young(cache: SigningSecrets, store: Secrets) -> None:
    assert verify(cache, store.signed("{}"))
    store.now += 299
    assert verify(cache, store.signed("{}"))

    assert store.reads == 1


def test_the_secret_is_read_again_once_it_is_old_so_a_retired_one_stops_verifying(
    cache: SigningSecrets, store: Secrets
) -> None:
    retired = store.value
    assert verify(cache, store.signed("{}"))
    store.value = f"whsec_{secrets.token_hex(24)}"
    store.now += 300

    assert not verify(cache, store.signed("{}", retired))
    assert store.reads == 2


def test_a_signed_failure_reads_a_rotated_secret_again_at_most_once_a_minute(
    cache: SigningSecrets, store: Secrets
) -> None:
    assert verify(cache, store.signed("{}"))
    store.value = f"whsec_{secrets.token_hex(24)}"

    assert not verify(cache, store.signed("{}"))  # read just now: not again yet
    store.now += 60
    assert verify(cache, store.signed("{}"))  # now read again, and the new secret verifies
    assert store.reads == 2


def test_an_unsigned_request_never_reads_the_secret_again(cache: SigningSecrets, store: Secrets) -> None:
    assert verify(cache, store.signed("{}"))
    store.now += 120

    assert not verify(cache, None)
    assert store.reads == 1


def test_another_secret_arn_is_read_at_once(cache: SigningSecrets, store: Secrets) -> None:
    assert verify(cache, store.signed("{}"))
    assert verify(cache, store.signed("{}"), source="arn:2")

    assert store.reads == 2


def test_forgetting_reads_the_secret_again(cache: SigningSecrets, store: Secrets) -> None:
    assert verify(cache, store.signed("{}"))
    cache.forget()
    assert verify(cache, store.signed("{}"))

    assert store.reads == 2
