"""The Stripe emulator held to Stripe's published API: every answer, event and accepted request it saw.

One run drives the emulator as the saga does (the product's own provider client, through the real
``stripe`` SDK) and as the webhook consumer does (``GET /v1/payment_intents/{id}``), through the
outcomes the saga depends on: a charge, a decline (402), a payment left ``processing`` that settles
or fails, one that ``requires_action`` and is cancelled, a replay under the same key, a 409 for a key
in flight, injected 5xx and 429, the search, a list of more than one page, retrieves, and the
webhooks of every event type the saga subscribes to. The emulator records it all
(``ProviderEmulator.record``), and each piece is validated against the part of Stripe's OpenAPI spec
vendored in ``saga_local/stripe_emulator/openapi/`` (``tests/local/stripe_contract_support.py``):
required fields, types, enums, nullability, and no field Stripe does not document.

What the emulator deliberately does otherwise is listed in its package docstring; what the local
world does not model at all, in docs/design.md ("What the local world does not model").
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
import stripe

from payment_saga.errors import (
    ChargeNotAttempted,
    PaymentDeclined,
    PaymentOutcomeUnknown,
    PaymentProcessing,
)
from payment_saga.orders import Order
from payment_saga.payments import StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import ProviderEmulator, intents, search
from saga_local.template import ROOT
from tests.local.stripe_contract_support import Contract, contract, load
from tests.local.test_emulator_webhooks import SAGA_EVENTS, Receiver

if TYPE_CHECKING:
    from collections.abc import Iterator

    from saga_local.stripe_emulator.recording import Exchange

#: What the emulator answers before it reads a request's parameters: these requests are not checked
#: against the operation (a 400 is the emulator refusing them; 401 and 403 never got that far).
_REFUSED = frozenset({400, 401, 403})


@dataclass(frozen=True, repr=False)
class Run:
    """What the emulator was asked, answered and sent in the run."""

    exchanges: list[Exchange]
    events: list[dict[str, Any]]
    #: The bodies the saga's webhook endpoint received (every delivery, retries included).
    delivered: list[dict[str, Any]]

    def __repr__(self) -> str:
        return f"Run({len(self.exchanges)} exchanges, {len(self.events)} events)"


def _order(order_id: str, method: str = "pm_card_visa") -> Order:
    return Order(order_id, 15000, "BRL", "cus_123", method)


def _charge(provider: StripeProvider, order: Order, attempt: int = 1) -> None:
    with contextlib.suppress(PaymentDeclined, PaymentProcessing, PaymentOutcomeUnknown, ChargeNotAttempted):
        provider.charge(order, attempt=attempt, idempotency_key=idempotency_key(order.order_id, attempt))


def _post(emulator: ProviderEmulator, path: str, body: str, key: str | None = None) -> int:
    """A raw POST, as the SDK sends one (for what the SDK would retry or refuse to send)."""
    headers = {
        "Authorization": f"Bearer {LOCAL_API_KEY}",
        "Content-Type": "application/x-www-form-urlencoded",
    }
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(  # noqa: S310 - the emulator on loopback
        emulator.url + path, data=body.encode(), headers=headers, method="POST"
    )
    return _send(request)


def _get(emulator: ProviderEmulator, path: str) -> int:
    """A raw GET of ``path`` (with its query string)."""
    headers = {"Authorization": f"Bearer {LOCAL_API_KEY}"}
    return _send(urllib.request.Request(emulator.url + path, headers=headers))  # noqa: S310 - loopback


def _send(request: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - the emulator on loopback
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def _in_flight_conflict(emulator: ProviderEmulator) -> list[int]:
    """Two creates under one key, the second while the first executes: Stripe's 409 for the second."""
    body = "amount=15000&currency=brl&payment_method=pm_card_visa&confirm=true&off_session=true"
    body += "&automatic_payment_methods[enabled]=true&automatic_payment_methods[allow_redirects]=never"
    body += "&metadata[orderId]=C-409&metadata[attempt]=1"
    statuses: list[int] = []
    emulator.latency = 1.0
    first = threading.Thread(
        target=lambda: statuses.append(_post(emulator, "/v1/payment_intents", body, "C-409"))
    )
    first.start()
    try:
        while emulator.request_count("create") == 0:
            threading.Event().wait(0.01)
        statuses.append(_post(emulator, "/v1/payment_intents", body, "C-409"))
    finally:
        first.join()
        emulator.latency = 0.0
    return statuses


def _scenarios(emulator: ProviderEmulator, receiver: Receiver) -> None:
    sdk = stripe.StripeClient(LOCAL_API_KEY, base_addresses={"api": emulator.url})
    sdk.v1.webhook_endpoints.create({"url": receiver.url, "enabled_events": SAGA_EVENTS})  # type: ignore[typeddict-item]
    provider = StripeProvider(LOCAL_API_KEY, api_base=emulator.url, timeout_seconds=5.0)
    try:
        charged = _order("C-CHARGED")
        _charge(provider, charged)  # 200, succeeded
        _charge(provider, charged)  # the same key again: Stripe's replay
        _charge(provider, _order("C-DECLINED", "pm_card_chargeDeclined"))  # 402 card_error
        _charge(provider, _order("C-INSUFFICIENT", "pm_card_visa_chargeDeclinedInsufficientFunds"))
        emulator.force_outcome("requires_action", order_id="C-3DS")
        _charge(provider, _order("C-3DS"))  # requires_action, then the saga cancels it
        emulator.force_outcome("processing", order_id="C-DEBIT-OK")
        _charge(provider, _order("C-DEBIT-OK"))
        emulator.force_outcome("processing", order_id="C-DEBIT-RETURNED")
        _charge(provider, _order("C-DEBIT-RETURNED"))
        emulator.inject("fail_before_apply", order_id="C-500")
        _charge(provider, _order("C-500"))
        emulator.inject("fail_after_apply_replayed", order_id="C-500-SAVED")
        _charge(provider, _order("C-500-SAVED"))
        emulator.inject("rate_limit", order_id="C-429")
        _charge(provider, _order("C-429"))
        assert sorted(_in_flight_conflict(emulator)) == [200, 409]

        # The settlements: one debit succeeds, one is returned by the bank.
        (debit_ok,) = emulator.payment_intents("C-DEBIT-OK")
        emulator.set_status(debit_ok["id"], "succeeded")
        (returned,) = emulator.payment_intents("C-DEBIT-RETURNED")
        emulator.set_status(returned["id"], "requires_payment_method")

        # What the sweeper reads: the search, and a list longer than a page (of 100).
        now = int(emulator.now())
        emulator.add_history(150, created_from=now - 50, created_to=now - 10)
        provider.search_attempt(charged, attempt=1, idempotency_key=idempotency_key("C-CHARGED", 1))
        provider.list_attempt(
            charged,
            attempt=1,
            idempotency_key=idempotency_key("C-CHARGED", 1),
            created_from=now - 60,
            created_to=now + 60,
        )
        # What the webhook consumer reads: the PaymentIntent an event names, as it is now.
        for intent in emulator.payment_intents():
            if intent["metadata"].get("orderId", "").startswith("C-"):
                sdk.v1.payment_intents.retrieve(intent["id"])
        with contextlib.suppress(stripe.InvalidRequestError):
            sdk.v1.payment_intents.retrieve("pi_3NoSuchIntent000000000000")  # 404
        # A cancel of a PaymentIntent that cannot be cancelled any more: 400 with the PaymentIntent.
        (succeeded,) = emulator.payment_intents("C-CHARGED")
        with contextlib.suppress(stripe.InvalidRequestError):
            sdk.v1.payment_intents.cancel(succeeded["id"])
        # Requests the emulator must refuse (an unknown parameter, on every operation, as Stripe
        # does), answered in Stripe's error shape. One it accepted is checked, and fails, below.
        intent_path = f"/v1/payment_intents/{succeeded['id']}"
        _post(emulator, "/v1/payment_intents", "amount=1500&currency=brl&colour=red")
        _post(emulator, f"{intent_path}/cancel", "colour=red")
        _get(emulator, "/v1/payment_intents?colour=red")
        _get(emulator, "/v1/payment_intents/search?query=status%3A%27succeeded%27&colour=red")
        _get(emulator, f"{intent_path}?colour=red")
        with contextlib.suppress(stripe.AuthenticationError):
            stripe.StripeClient(
                "sk_test_revoked", base_addresses={"api": emulator.url}
            ).v1.payment_intents.list()
    finally:
        provider.close()
    assert emulator.webhooks.wait_idle(10), "webhook deliveries still pending"


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    receiver = Receiver()
    try:
        with ProviderEmulator(webhook_time_scale=0.0001) as emulator:
            emulator.revoke_key("sk_test_revoked")
            recording = emulator.record()
            _scenarios(emulator, receiver)
            delivered = [json.loads(body) for body, _ in receiver.received]
            yield Run(recording.exchanges, recording.events, delivered)
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


@pytest.fixture(scope="module")
def stripe_api() -> Contract:
    return contract()


def test_the_run_reaches_every_operation_outcome_and_event_the_saga_depends_on(
    run: Run, stripe_api: Contract
) -> None:
    answered = set()
    for exchange in run.exchanges:
        found = stripe_api.operation(exchange.method, exchange.path)
        if found is not None and exchange.status == 200:
            answered.add(found[1]["operationId"])

    # Every operation the emulator serves answered at least once (confirm it does not serve: the
    # saga creates with confirm=true).
    assert answered == {
        "PostPaymentIntents",
        "GetPaymentIntents",
        "GetPaymentIntentsSearch",
        "GetPaymentIntentsIntent",
        "PostPaymentIntentsIntentCancel",
    }
    assert {200, 400, 401, 402, 404, 409, 429, 500} <= {e.status for e in run.exchanges}
    assert any("starting_after" in e.query for e in run.exchanges), "the list never went past its first page"
    assert set(SAGA_EVENTS) <= {e["type"] for e in run.events}


def test_every_answer_is_what_stripes_spec_says_the_operation_answers(run: Run, stripe_api: Contract) -> None:
    problems = [p for e in run.exchanges for p in stripe_api.response_problems(e)]

    assert problems == []


def test_every_request_the_emulator_accepted_is_one_stripes_spec_accepts(
    run: Run, stripe_api: Contract
) -> None:
    accepted = [e for e in run.exchanges if e.status not in _REFUSED]
    problems = [p for e in accepted for p in stripe_api.request_problems(e)]

    assert len(accepted) > 20
    assert problems == []


def test_every_webhook_event_is_a_stripe_event_carrying_a_payment_intent(
    run: Run, stripe_api: Contract
) -> None:
    problems = [p for event in run.events + run.delivered for p in stripe_api.event_problems(event)]

    assert len(run.delivered) >= len(SAGA_EVENTS)
    assert problems == []


@pytest.mark.parametrize(
    ("operation_id", "accepted"),
    [
        ("PostPaymentIntents", intents._CREATE_PARAMS),
        ("PostPaymentIntentsIntentCancel", intents._CANCEL_PARAMS),
        ("GetPaymentIntentsIntent", intents._RETRIEVE_PARAMS),
        ("GetPaymentIntents", search._LIST_PARAMS),
        ("GetPaymentIntentsSearch", search._SEARCH_PARAMS),
    ],
)
def test_the_emulator_knows_no_parameter_stripe_does_not(
    stripe_api: Contract, operation_id: str, accepted: frozenset[str]
) -> None:
    # Every name the emulator takes is one Stripe lists: at the SDK's version, or (removed since,
    # and refused on the SDK's version) on an older one.
    (operation,) = [
        o for m in stripe_api.spec["paths"].values() for o in m.values() if o["operationId"] == operation_id
    ]
    removed = load()["x-sdk-newer"]["operations"][operation_id]["removed"]

    assert accepted - set(operation["x-parameters"]["properties"]) - set(removed) == set()


# -- the check itself -----------------------------------------------------------------------------


def test_stripes_own_payment_intent_example_passes_the_check(stripe_api: Contract) -> None:
    # Stripe's example object of a newer version than the spec: the SDK's fields must be allowed.
    example = load()["x-fixtures"]["payment_intent"]

    assert stripe_api.object_problems("payment_intent", example) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda pi: pi.pop("status"), "'status' is a required property"),
        (lambda pi: pi.update(status="charged"), "'charged' is not one of"),
        (lambda pi: pi.update(amount="15000"), "'15000' is not of type 'integer'"),
        (lambda pi: pi.update(canceled_at="never"), "is not of type 'integer', 'null'"),
        (lambda pi: pi.update(chargeId="ch_1"), "Additional properties are not allowed ('chargeId'"),
        (lambda pi: pi.update(invoice=None), "Additional properties are not allowed ('invoice'"),
    ],
    ids=["missing", "enum", "type", "nullable", "undocumented", "removed-by-the-sdk-version"],
)
def test_the_check_refuses_a_payment_intent_stripe_would_never_send(
    stripe_api: Contract, change: Any, expected: str
) -> None:
    intent = copy.deepcopy(load()["x-fixtures"]["payment_intent"])
    change(intent)

    problems = stripe_api.object_problems("payment_intent", intent)

    assert len(problems) == 1
    assert expected in problems[0]


def test_the_recorded_sdk_differences_are_the_installed_sdks() -> None:
    # Upgrading the stripe SDK changes what it says is newer than the spec: re-extract, then look.
    spec = importlib.util.spec_from_file_location(
        "stripe_openapi_subset", ROOT / "scripts" / "stripe_openapi_subset.py"
    )
    assert spec is not None
    assert spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    document = load()
    subset = {k: v for k, v in document.items() if not k.startswith("x-") or k == "x-webhook-event-types"}

    assert script.sdk_differences(subset) == document["x-sdk-newer"]
    assert document["x-source"]["commit"] == script.SOURCE_COMMIT
    assert document["x-sdk-newer"]["api_version"] == stripe.api_version
