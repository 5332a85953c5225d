"""StripeProvider against the provider emulator, through the real ``stripe`` SDK over real HTTP.

Every test counts what matters: how many charges the provider applied (the emulator's ledger) and
which of Charge / PaymentDeclined / ChargeNotAttempted / PaymentOutcomeUnknown the saga was told.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any, cast

import pytest
import stripe

from payment_saga.api_keys import UnsafeApiBase, check_api_base, stripe_secret_from_string
from payment_saga.errors import ChargeNotAttempted, PaymentDeclined, PaymentOutcomeUnknown, PaymentProcessing
from payment_saga.orders import Order
from payment_saga.payments import Charge, PaymentProvider, StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import IDEMPOTENCY_TTL_SECONDS, ProviderEmulator
from tests.helpers import FakeClock, live_mode_provider


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
def emulator(clock: FakeClock) -> Iterator[ProviderEmulator]:
    with ProviderEmulator(clock=clock, hang_seconds=5.0) as running:
        yield running


@pytest.fixture
def provider(emulator: ProviderEmulator) -> Iterator[StripeProvider]:
    client = StripeProvider(LOCAL_API_KEY, api_base=emulator.url, timeout_seconds=2.0)
    yield client
    client.close()


#: Live-mode keys, for the emulator's modes and the base URL check: built, so that no string in the
#: repository looks like a live key to a scanner (these are not keys of any account).
LIVE_KEY = "_".join(("sk", "live", "emulator", "same", "account"))
RESTRICTED_LIVE_KEY = "_".join(("rk", "live", "emulator", "restricted"))


def make_order(order_id: str = "ORDER-003", payment_method: str = "pm_card_visa", **changes: Any) -> Order:
    fields: dict[str, Any] = {
        "order_id": order_id,
        "amount": 15000,
        "currency": "BRL",
        "customer_id": "cus_123",
        "payment_method": payment_method,
    }
    fields.update(changes)
    return Order(**fields)


def charge(provider: StripeProvider, order: Order, attempt: int = 1) -> Charge:
    return provider.charge(order, attempt=attempt, idempotency_key=idempotency_key(order.order_id, attempt))


def find(provider: StripeProvider, order: Order, attempt: int = 1) -> Charge | None:
    return provider.find_charge(
        order, attempt=attempt, idempotency_key=idempotency_key(order.order_id, attempt)
    )


# -- the idempotency key -------------------------------------------------------------------------


def test_idempotency_key_is_derived_from_the_order_and_the_attempt_only() -> None:
    assert idempotency_key("ORDER-003", 1) == "payment-saga/ORDER-003/attempt-1"
    assert idempotency_key("ORDER-003", 1) == idempotency_key("ORDER-003", 1)
    assert idempotency_key("ORDER-003", 2) != idempotency_key("ORDER-003", 1)
    assert len(idempotency_key("A" * 64, 10**6)) <= 255  # Stripe's limit


@pytest.mark.parametrize("attempt", [-1, True, 1.0])
def test_idempotency_key_rejects_an_attempt_that_is_not_a_natural_number(attempt: Any) -> None:
    with pytest.raises(ValueError, match="attempt"):
        idempotency_key("ORDER-003", attempt)


def test_stripe_provider_is_a_payment_provider(provider: StripeProvider) -> None:
    implementation: PaymentProvider = provider
    assert implementation is provider
    assert LOCAL_API_KEY not in repr(provider)


# -- charging ------------------------------------------------------------------------------------


def test_a_successful_charge_returns_the_payment_intent_and_lands_once(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    result = charge(provider, make_order())

    assert result.status == "succeeded"
    assert (result.amount, result.currency, result.replayed) == (15000, "BRL", False)
    [entry] = emulator.charges()
    assert entry.charge_id == result.charge_id
    assert (entry.order_id, entry.attempt, entry.amount, entry.currency) == ("ORDER-003", "1", 15000, "BRL")
    assert entry.idempotency_key == "payment-saga/ORDER-003/attempt-1"


def test_the_charge_is_a_confirmed_card_payment_with_the_order_in_its_metadata(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    result = charge(provider, make_order(), attempt=3)

    intent = emulator.payment_intent(result.charge_id)
    assert intent is not None
    assert intent["currency"] == "brl"
    assert intent["customer"] is None  # our customer ids are not Stripe Customers
    assert intent["metadata"] == {"orderId": "ORDER-003", "attempt": "3", "customerId": "cus_123"}
    assert intent["automatic_payment_methods"] == {"enabled": True, "allow_redirects": "never"}


def test_the_same_key_twice_charges_once_and_reports_the_replay(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    first = charge(provider, make_order())
    second = charge(provider, make_order())

    assert second.charge_id == first.charge_id
    assert (first.replayed, second.replayed) == (False, True)
    assert len(emulator.charges()) == 1
    assert emulator.request_count("create") == 1  # the replay never reached the endpoint


@pytest.mark.parametrize(
    ("payment_method", "decline_code"),
    [
        ("pm_card_chargeDeclined", "generic_decline"),
        ("pm_card_visa_chargeDeclinedInsufficientFunds", "insufficient_funds"),
        ("pm_card_chargeDeclinedExpiredCard", "expired_card"),
        ("pm_card_chargeDeclinedProcessingError", "processing_error"),
    ],
)
def test_a_decline_raises_payment_declined_with_the_decline_code_and_charges_nothing(
    provider: StripeProvider, emulator: ProviderEmulator, payment_method: str, decline_code: str
) -> None:
    order = make_order(payment_method=payment_method)

    with pytest.raises(PaymentDeclined) as declined:
        charge(provider, order)

    assert declined.value.decline_code == decline_code
    assert declined.value.charge_id is not None
    assert declined.value.charge_id.startswith("pi_")
    assert emulator.charges() == []
    # A retry of the same attempt replays the decline: still nothing charged.
    with pytest.raises(PaymentDeclined):
        charge(provider, order)
    assert emulator.charges() == []
    assert emulator.request_count("create") == 1


def test_a_card_that_needs_authentication_is_declined_because_no_customer_is_there(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    with pytest.raises(PaymentDeclined) as declined:
        charge(provider, make_order(payment_method="pm_card_authenticationRequired"))

    assert declined.value.decline_code == "authentication_required"
    assert emulator.charges() == []


def test_requires_action_counts_as_declined_only_once_the_payment_intent_is_canceled(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.force_outcome("requires_action", order_id="ORDER-003")

    with pytest.raises(PaymentDeclined) as declined:
        charge(provider, make_order())

    assert declined.value.decline_code == "authentication_required"
    assert declined.value.charge_id is not None
    intent = emulator.payment_intent(declined.value.charge_id)
    assert intent is not None
    assert intent["status"] == "canceled"
    # A retried step replays the create (still requires_action) and the cancel: same answer.
    with pytest.raises(PaymentDeclined):
        charge(provider, make_order())
    assert emulator.charges() == []


def test_a_failed_cancel_of_requires_action_keeps_the_outcome_unknown(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.force_outcome("requires_action", order_id="ORDER-003")
    emulator.inject("fail_before_apply", endpoint="cancel")
    emulator.inject("fail_before_apply", endpoint="retrieve")

    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider, make_order())


def test_a_processing_payment_settles_later_and_names_its_payment_intent(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.force_outcome("processing", order_id="ORDER-003")

    with pytest.raises(PaymentProcessing, match="processing") as settles:
        charge(provider, make_order())
    [pending] = emulator.payment_intents("ORDER-003")
    assert settles.value.payment_intent_id == pending["id"]
    assert json.loads(str(settles.value))["paymentIntentId"] == pending["id"]  # the state machine reads it
    with pytest.raises(PaymentOutcomeUnknown, match="in flight"):
        find(provider, make_order())

    [intent] = emulator.payment_intents("ORDER-003")
    intent_id = intent["id"]
    emulator.set_status(intent_id, "succeeded")
    found = find(provider, make_order())
    assert found is not None
    assert found.charge_id == intent_id
    assert len(emulator.charges()) == 1


# -- unknown outcomes and retries with the same key ---------------------------------------------


def test_a_response_lost_after_the_charge_is_unknown_and_the_retry_replays_the_same_charge(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.inject("fail_after_apply", order_id="ORDER-003")

    with pytest.raises(PaymentOutcomeUnknown, match="HTTP 500"):
        charge(provider, make_order())
    [landed] = emulator.charges_for("ORDER-003")

    retried = charge(provider, make_order())
    assert retried.charge_id == landed.charge_id
    assert retried.replayed is True
    assert len(emulator.charges()) == 1


def test_a_saved_server_error_replays_so_only_reconciliation_learns_the_charge_landed(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.inject("fail_after_apply_replayed", order_id="ORDER-003")

    for _ in range(3):
        with pytest.raises(PaymentOutcomeUnknown, match="HTTP 500"):
            charge(provider, make_order())

    [landed] = emulator.charges()
    found = find(provider, make_order())
    assert found is not None
    assert found.charge_id == landed.charge_id


def test_a_connection_reset_after_the_charge_is_unknown(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.inject("reset_after_apply", order_id="ORDER-003")

    with pytest.raises(PaymentOutcomeUnknown, match="APIConnectionError"):
        charge(provider, make_order())

    assert len(emulator.charges()) == 1
    assert charge(provider, make_order()).replayed is True
    assert len(emulator.charges()) == 1


def test_a_client_timeout_after_the_charge_is_unknown(emulator: ProviderEmulator) -> None:
    impatient = StripeProvider(LOCAL_API_KEY, api_base=emulator.url, timeout_seconds=0.2)
    emulator.inject("timeout_after_apply", order_id="ORDER-003")

    with pytest.raises(PaymentOutcomeUnknown, match="timed out"):
        charge(impatient, make_order())

    assert len(emulator.charges()) == 1
    assert charge(impatient, make_order()).replayed is True
    impatient.close()


def test_a_server_error_before_the_charge_is_unknown_too_and_the_retry_charges_once(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.inject("fail_before_apply", order_id="ORDER-003")

    # The client cannot tell this 500 from one after the charge: the claim must be kept.
    with pytest.raises(PaymentOutcomeUnknown, match="HTTP 500"):
        charge(provider, make_order())
    assert emulator.charges() == []

    retried = charge(provider, make_order())
    assert retried.replayed is False
    assert [entry.charge_id for entry in emulator.charges()] == [retried.charge_id]


def test_a_concurrent_request_with_the_same_key_is_unknown_and_charges_once(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.latency = 0.3
    start = threading.Barrier(2)
    outcomes: list[object] = []

    def attempt() -> None:
        start.wait()
        try:
            outcomes.append(charge(provider, make_order()))
        except PaymentOutcomeUnknown as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    charged = [o for o in outcomes if isinstance(o, Charge)]
    unknown = [o for o in outcomes if isinstance(o, PaymentOutcomeUnknown)]
    assert (len(charged), len(unknown)) == (1, 1)
    assert "HTTP 409" in str(unknown[0])
    assert len(emulator.charges()) == 1


def test_the_same_key_with_other_parameters_is_unknown_because_the_first_may_have_charged(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    charge(provider, make_order(payment_method="pm_card_visa"))

    with pytest.raises(PaymentOutcomeUnknown, match="other parameters"):
        charge(provider, make_order(payment_method="pm_card_mastercard"))
    assert len(emulator.charges()) == 1


def test_without_dedupe_the_provider_applies_every_request(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.dedupe = False

    first = charge(provider, make_order())
    second = charge(provider, make_order())

    assert first.charge_id != second.charge_id
    assert not first.replayed
    assert not second.replayed
    assert len(emulator.charges_for("ORDER-003")) == 2


def test_idempotent_replays_expire_after_24_hours(
    provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    first = charge(provider, make_order())

    clock.now += IDEMPOTENCY_TTL_SECONDS - 1
    assert charge(provider, make_order()).charge_id == first.charge_id
    assert len(emulator.charges()) == 1

    clock.now += 1
    later = charge(provider, make_order())
    assert later.charge_id != first.charge_id
    assert later.replayed is False
    assert len(emulator.charges()) == 2  # why a takeover after 24 h must reconcile, never re-charge


# -- idempotency keys belong to the account, not to the API key -----------------------------------

#: The key a rotation replaced, still valid for hours beside its successor (both of one account).
ROLLED_KEY = "sk_test_emulator_rolled"
NEW_KEY = "sk_test_emulator_successor"


def test_a_charge_retried_with_the_rolled_keys_successor_is_replayed_not_charged_again(
    emulator: ProviderEmulator,
) -> None:
    # The first request, with the key about to be rolled, is applied and its answer lost (a 500).
    emulator.inject("fail_after_apply")
    old = StripeProvider(ROLLED_KEY, api_base=emulator.url, timeout_seconds=2.0)
    with pytest.raises(PaymentOutcomeUnknown):
        charge(old, make_order())
    old.close()
    # The key is rolled: the retry of the same attempt runs with the new key of the same account.
    new = StripeProvider(NEW_KEY, api_base=emulator.url, timeout_seconds=2.0)

    retried = charge(new, make_order())
    new.close()

    assert retried.replayed is True
    (charged,) = emulator.charges()
    assert retried.charge_id == charged.charge_id


def test_the_same_idempotency_key_in_another_account_or_mode_is_its_own_request(
    emulator: ProviderEmulator, provider: StripeProvider
) -> None:
    first = charge(provider, make_order())
    emulator.assign_key("sk_test_emulator_other_account", "acct_other")
    elsewhere = [
        StripeProvider("sk_test_emulator_other_account", api_base=emulator.url, timeout_seconds=2.0),
        live_mode_provider(LIVE_KEY, emulator.url),
    ]

    charges = [charge(other, make_order()) for other in elsewhere]
    for other in elsewhere:
        other.close()

    assert [c.replayed for c in charges] == [False, False]
    assert len({first.charge_id, *(c.charge_id for c in charges)}) == 3
    assert len(emulator.charges()) == 3


# -- requests rejected before anything was applied ----------------------------------------------


@pytest.mark.parametrize("key", ["sk_test_fake_rolled_key", "not_a_stripe_key"], ids=["revoked", "malformed"])
def test_a_rejected_api_key_is_charge_not_attempted(emulator: ProviderEmulator, key: str) -> None:
    emulator.revoke_key("sk_test_fake_rolled_key")
    wrong = StripeProvider(key, api_base=emulator.url)

    with pytest.raises(ChargeNotAttempted, match="HTTP 401"):
        charge(wrong, make_order())
    assert emulator.charges() == []
    assert emulator.request_count("create") == 0


def test_a_request_stripe_refuses_while_validating_is_charge_not_attempted(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    with pytest.raises(ChargeNotAttempted, match="No such PaymentMethod"):
        charge(provider, make_order(payment_method="pm_does_not_exist"))
    assert emulator.charges() == []


@pytest.mark.parametrize(
    "scenario", ["unauthorised", "declined", "server_error", "reset", "invalid", "search_failure"]
)
def test_the_api_key_never_appears_in_an_exception(emulator: ProviderEmulator, scenario: str) -> None:
    key = "sk_test_fake_secret_value" if scenario == "unauthorised" else LOCAL_API_KEY
    emulator.revoke_key("sk_test_fake_secret_value")
    provider = StripeProvider(key, api_base=emulator.url, timeout_seconds=2.0)
    order = make_order(payment_method="pm_card_chargeDeclined" if scenario == "declined" else "pm_card_visa")
    if scenario == "invalid":
        order = make_order(payment_method="pm_does_not_exist")
    if scenario == "server_error":
        emulator.inject("fail_after_apply")
    if scenario == "reset":
        emulator.inject("reset_after_apply")
    if scenario == "search_failure":
        emulator.inject("fail_before_apply", endpoint="search")

    call = find if scenario == "search_failure" else charge
    with pytest.raises((ChargeNotAttempted, PaymentDeclined, PaymentOutcomeUnknown)) as raised:
        call(provider, order)

    chain: list[BaseException] = []
    error: BaseException | None = raised.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    for link in chain:
        assert key not in str(link)
        assert key not in repr(link)
        assert key not in repr(link.args)


# -- reconciliation ------------------------------------------------------------------------------


def test_find_charge_finds_a_landed_charge_without_charging_again(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.inject("reset_after_apply", order_id="ORDER-003")
    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider, make_order())

    found = find(provider, make_order())

    [landed] = emulator.charges()
    assert found == Charge(landed.charge_id, "succeeded", 15000, "BRL", replayed=False)
    assert emulator.request_count("create") == 1


def test_find_charge_returns_none_for_an_attempt_that_never_charged(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    charge(provider, make_order("ORDER-OTHER"))
    charge(provider, make_order(), attempt=1)
    with pytest.raises(PaymentDeclined):
        charge(provider, make_order(payment_method="pm_card_chargeDeclined"), attempt=2)

    assert find(provider, make_order("ORDER-NEVER")) is None
    assert find(provider, make_order(), attempt=2) is None  # declined: nothing charged
    assert find(provider, make_order(), attempt=3) is None  # never attempted
    assert emulator.request_count("create") == 3


def test_find_charge_only_sees_a_charge_once_search_has_caught_up(
    provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    emulator.search_lag_seconds = 60
    charge(provider, make_order())

    assert find(provider, make_order()) is None  # why the sweeper waits a grace period
    clock.now += 60
    assert find(provider, make_order()) is not None


def test_find_charge_is_unknown_when_the_search_fails(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    charge(provider, make_order())
    emulator.inject("fail_before_apply", endpoint="search", order_id="ORDER-003")

    with pytest.raises(PaymentOutcomeUnknown, match="could not search"):
        find(provider, make_order())


def test_find_charge_returns_the_attempt_asked_for(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    for attempt in range(1, 4):
        charge(provider, make_order(), attempt=attempt)

    found = find(provider, make_order(), attempt=2)

    assert found is not None
    assert found.charge_id == emulator.charges()[1].charge_id


# -- the secret ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        LOCAL_API_KEY,
        f"  {LOCAL_API_KEY}\n",
        json.dumps({"apiKey": LOCAL_API_KEY}),
        json.dumps({"apiKey": LOCAL_API_KEY, "x": 1}),
    ],
)
def test_the_secret_is_a_plain_key_or_json_with_an_api_key(raw: str) -> None:
    assert stripe_secret_from_string(raw) == LOCAL_API_KEY


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "{not json",
        json.dumps({"key": LOCAL_API_KEY}),
        json.dumps({"apiKey": ""}),
        "{" + LOCAL_API_KEY,
    ],
)
def test_a_malformed_secret_is_refused_without_quoting_it(raw: str) -> None:
    with pytest.raises(ValueError, match="secret") as refused:
        stripe_secret_from_string(raw)
    assert LOCAL_API_KEY not in str(refused.value)


# -- the emulator is faithful where it matters ---------------------------------------------------


def test_the_emulator_refuses_what_stripe_refuses_on_the_pinned_api_version(
    emulator: ProviderEmulator,
) -> None:
    client = stripe.StripeClient(LOCAL_API_KEY, base_addresses={"api": emulator.url}, max_network_retries=0)

    def create(**extra: Any) -> None:
        params = {
            "amount": 100,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "confirm": True,
            **extra,
        }
        client.v1.payment_intents.create(cast("Any", params))  # parameters the SDK's types forbid

    with pytest.raises(stripe.InvalidRequestError) as removed:
        create(payment_method_types=["card"])
    assert removed.value.code == "payment_method_types_no_longer_supported"
    with pytest.raises(stripe.InvalidRequestError, match="return_url"):
        create()
    with pytest.raises(stripe.InvalidRequestError, match="No such customer"):
        create(customer="cus_123", automatic_payment_methods={"enabled": True, "allow_redirects": "never"})
    assert emulator.charges() == []


def test_the_emulator_pages_search_results_like_stripe(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    for attempt in range(1, 4):
        charge(provider, make_order(), attempt=attempt)
    client = stripe.StripeClient(LOCAL_API_KEY, base_addresses={"api": emulator.url}, max_network_retries=0)

    page = client.v1.payment_intents.search({"query": "metadata['orderId']:'ORDER-003'", "limit": 1})

    assert page.has_more is True
    assert {intent.id for intent in page.auto_paging_iter()} == {e.charge_id for e in emulator.charges()}


def test_the_emulator_is_driven_over_http_too(provider: StripeProvider, emulator: ProviderEmulator) -> None:
    def admin(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(  # noqa: S310 - the emulator's http:// URL
            emulator.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json", "X-Emulator-Token": emulator.admin_token},
        )
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - a local URL
            return json.load(response)

    admin("POST", "/_emulator/faults", {"kind": "fail_after_apply", "orderId": "ORDER-003"})
    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider, make_order())

    [entry] = admin("GET", "/_emulator/charges")["data"]
    assert (entry["orderId"], entry["amount"], entry["currency"]) == ("ORDER-003", 15000, "BRL")
    admin("POST", "/_emulator/reset", {})
    assert admin("GET", "/_emulator/charges")["data"] == []


# -- where the key may be sent --------------------------------------------------------------------


@pytest.mark.parametrize(
    "base",
    [
        "https://api.stripe.com.attacker.example",
        "https://203.0.113.7:8443/collect",
        "https://api.stripe.com:8443",
        "https://api.stripe.com/collect",
        "https://api.stripe.com@attacker.example",
        "http://127.0.0.1:12111",  # the emulator takes test keys only
    ],
)
@pytest.mark.parametrize("key", [LIVE_KEY, RESTRICTED_LIVE_KEY], ids=["secret", "restricted"])
def test_a_live_key_is_refused_for_any_base_but_stripes_own(base: str, key: str) -> None:
    with pytest.raises(UnsafeApiBase) as refused:
        StripeProvider(key, api_base=base)

    assert key not in str(refused.value)


@pytest.mark.parametrize("base", [None, "", "https://api.stripe.com", "https://api.stripe.com/"])
def test_a_live_key_goes_to_stripes_own_host(base: str | None) -> None:
    check_api_base(base, api_key=LIVE_KEY)
    StripeProvider(LIVE_KEY, api_base=base).close()


@pytest.mark.parametrize(
    ("base", "rule"),
    [
        ("http://api.stripe.com", "plain http is allowed only to a loopback address"),
        ("http://203.0.113.7:8080", "plain http is allowed only to a loopback address"),
        ("http://127.0.0.1.attacker.example", "plain http is allowed only to a loopback address"),
        ("ftp://api.stripe.com", "must be an https:// URL"),
        ("https://user:pass@api.stripe.com", "without credentials, query or fragment"),
        ("https://api.stripe.com/?to=attacker.example", "without credentials, query or fragment"),
        ("https://api.stripe.com:99999", "invalid port"),
        ("api.stripe.com", "without credentials, query or fragment"),
    ],
)
def test_a_redirected_base_url_is_refused_whatever_the_key(base: str, rule: str) -> None:
    with pytest.raises(UnsafeApiBase, match=rule):
        StripeProvider(LOCAL_API_KEY, api_base=base)


def test_a_test_key_may_reach_the_emulator_on_loopback(emulator: ProviderEmulator) -> None:
    for base in (emulator.url, emulator.url.replace("127.0.0.1", "localhost")):
        check_api_base(base, api_key=LOCAL_API_KEY)
    provider = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    assert charge(provider, make_order()).charge_id.startswith("pi_")
    provider.close()
