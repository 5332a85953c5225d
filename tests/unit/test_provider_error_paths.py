"""Stripe's error paths and its list endpoint, as the emulator speaks them, through the real ``stripe``
SDK over HTTP; and what ``StripeProvider`` concludes from each.

The "nothing was charged" proofs rest on these answers: a 429 is never one (retried with the same
key, never released), a 403 or a validation 400 before execution is one for that request, a 400
raised while executing is saved under the key and replayed, and only the list (not the lagging
search) proves that an attempt has no PaymentIntent at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import stripe

from payment_saga.errors import ChargeNotAttempted, PaymentOutcomeUnknown
from payment_saga.orders import Order
from payment_saga.payments import Charge, ListTooLong, StripeProvider, idempotency_key
from saga_local.aws.stack import LOCAL_API_KEY
from saga_local.stripe_emulator import SAVED_PAYMENT_METHOD, TEST_CUSTOMER, ProviderEmulator
from tests.helpers import FakeClock, live_mode_provider

START = 1_800_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def emulator(clock: FakeClock) -> Iterator[ProviderEmulator]:
    with ProviderEmulator(clock=clock, hang_seconds=5.0) as running:
        yield running


def provider_for(emulator: ProviderEmulator, key: str = LOCAL_API_KEY) -> StripeProvider:
    return StripeProvider(key, api_base=emulator.url, timeout_seconds=2.0)


@pytest.fixture
def provider(emulator: ProviderEmulator) -> Iterator[StripeProvider]:
    client = provider_for(emulator)
    yield client
    client.close()


@pytest.fixture
def raw(emulator: ProviderEmulator) -> stripe.StripeClient:
    """The SDK itself, for requests the saga never makes."""
    return stripe.StripeClient(LOCAL_API_KEY, base_addresses={"api": emulator.url}, max_network_retries=0)


def order(
    order_id: str = "ORDER-003", *, amount: int = 15000, currency: str = "BRL", **changes: Any
) -> Order:
    fields: dict[str, Any] = {
        "order_id": order_id,
        "amount": amount,
        "currency": currency,
        "customer_id": "cus_123",
        "payment_method": "pm_card_visa",
    }
    fields.update(changes)
    return Order(**fields)


def charge(provider: StripeProvider, an_order: Order, attempt: int = 1) -> Charge:
    return provider.charge(
        an_order, attempt=attempt, idempotency_key=idempotency_key(an_order.order_id, attempt)
    )


def stripe_error(raised: pytest.ExceptionInfo[BaseException]) -> stripe.StripeError:
    cause = raised.value.__cause__
    assert isinstance(cause, stripe.StripeError)
    return cause


# -- 429: never proof, never saved ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rate_limit", "lock_timeout"])
def test_a_429_is_an_unknown_outcome_and_the_retry_with_the_same_key_charges_once(
    kind: str, provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.inject(kind, order_id="ORDER-003")  # type: ignore[arg-type]

    with pytest.raises(PaymentOutcomeUnknown) as raised:
        charge(provider, order())
    error = stripe_error(raised)
    assert isinstance(error, stripe.RateLimitError)
    assert error.error is not None  # the SDK keeps the body's error object; its code names the limiter
    assert (error.http_status, error.error.code) == (429, kind)
    assert emulator.charges() == []

    # Answered before the idempotency layer: nothing saved, the retry is applied, not replayed.
    retried = charge(provider, order())
    assert retried.replayed is False
    assert [c.charge_id for c in emulator.charges()] == [retried.charge_id]


def test_a_429_is_answered_before_the_key_is_looked_up_even_after_the_charge_landed(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    landed = charge(provider, order())
    emulator.inject("rate_limit", order_id="ORDER-003")

    # The 429 says nothing about the earlier request with the key: unknown, never proof.
    with pytest.raises(PaymentOutcomeUnknown, match="RateLimitError"):
        charge(provider, order())
    again = charge(provider, order())

    assert (again.charge_id, again.replayed) == (landed.charge_id, True)
    assert len(emulator.charges()) == 1


# -- keys: live and restricted, 403 --------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["sk_live_fake_for_tests", "rk_test_fake_for_tests", "rk_live_fake_for_tests"]
)
def test_live_and_restricted_keys_are_accepted(emulator: ProviderEmulator, key: str) -> None:
    # A live key goes to Stripe's host only: to reach the emulator it needs a client of the test's own.
    client = live_mode_provider(key, emulator.url) if "_live_" in key else provider_for(emulator, key)
    try:
        assert charge(client, order()).status == "succeeded"
    finally:
        client.close()


def test_a_restricted_key_without_write_permission_is_charge_not_attempted_and_applies_nothing(
    emulator: ProviderEmulator,
) -> None:
    key = "rk_test_fake_read_only"
    emulator.restrict_key(key, payment_intents="read")
    client = provider_for(emulator, key)

    with pytest.raises(ChargeNotAttempted, match="HTTP 403") as raised:
        charge(client, order())

    error = stripe_error(raised)
    assert isinstance(error, stripe.PermissionError)
    assert "rak_payment_intent_write" in str(error.user_message)
    assert emulator.request_count("create") == 0
    assert emulator.charges() == []
    # Reading is allowed: the sweeper's key needs no more.
    assert client.search_attempt(order(), attempt=1, idempotency_key="k").charge is None
    client.close()


def test_a_restricted_key_that_may_not_read_cannot_reconcile(emulator: ProviderEmulator) -> None:
    key = "rk_test_fake_no_access"
    emulator.restrict_key(key, payment_intents="none")
    client = provider_for(emulator, key)

    with pytest.raises(PaymentOutcomeUnknown, match="HTTP 403"):
        client.list_attempt(order(), attempt=1, idempotency_key="k", created_from=0, created_to=int(START))
    client.close()


def test_a_403_is_not_saved_under_the_key_so_the_charge_goes_through_once_permission_is_granted(
    emulator: ProviderEmulator,
) -> None:
    key = "rk_test_fake_later_granted"
    emulator.restrict_key(key, payment_intents="read")
    client = provider_for(emulator, key)
    with pytest.raises(ChargeNotAttempted):
        charge(client, order())

    emulator.restrict_key(key, payment_intents="write")

    assert charge(client, order()).replayed is False
    assert len(emulator.charges()) == 1
    client.close()


# -- 400: validation before the key, execution errors saved ----------------------------------------


def test_a_400_raised_while_executing_is_saved_and_replayed(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    missing = order(payment_method="pm_does_not_exist")

    with pytest.raises(ChargeNotAttempted, match="No such PaymentMethod"):
        charge(provider, missing)
    with pytest.raises(ChargeNotAttempted, match="No such PaymentMethod") as again:
        charge(provider, missing)

    headers = stripe_error(again).headers or {}
    assert headers.get("Idempotent-Replayed") == "true"
    assert emulator.charges() == []


def test_parameters_are_validated_before_the_key_is_looked_up(
    provider: StripeProvider, raw: stripe.StripeClient, emulator: ProviderEmulator
) -> None:
    landed = charge(provider, order())
    key = idempotency_key("ORDER-003", 1)

    # The same key with a parameter Stripe does not know: a plain 400, neither a replay nor an
    # idempotency_error, because validation runs first.
    with pytest.raises(stripe.InvalidRequestError) as raised:
        raw.v1.payment_intents.create(
            {"amount": 15000, "currency": "brl", "no_such_param": "x"},  # type: ignore[typeddict-unknown-key]
            {"idempotency_key": key},
        )
    assert raised.value.code == "parameter_unknown"
    assert not isinstance(raised.value, stripe.IdempotencyError)
    assert (raised.value.headers or {}).get("Idempotent-Replayed") is None
    # And the key still replays the charge.
    assert charge(provider, order()).charge_id == landed.charge_id


@pytest.mark.parametrize(
    ("currency", "too_small", "smallest"),
    [
        ("BRL", 49, 50),
        ("USD", 49, 50),
        ("GBP", 29, 30),
        ("HUF", 17499, 17500),
        ("JPY", 49, 50),
        ("MXN", 999, 1000),
    ],
)
def test_amounts_below_the_currency_minimum_are_refused_and_nothing_is_charged(
    provider: StripeProvider, emulator: ProviderEmulator, currency: str, too_small: int, smallest: int
) -> None:
    with pytest.raises(ChargeNotAttempted, match="at least") as raised:
        charge(provider, order("SMALL", amount=too_small, currency=currency))
    assert stripe_error(raised).code == "amount_too_small"
    assert emulator.charges() == []

    assert charge(provider, order("SMALLEST", amount=smallest, currency=currency)).amount == smallest


@pytest.mark.parametrize(
    ("currency", "step"), [("KWD", 10), ("BHD", 10), ("JOD", 10), ("OMR", 10), ("TND", 10), ("ISK", 100)]
)
def test_three_decimal_and_whole_unit_currencies_must_be_rounded(
    provider: StripeProvider, emulator: ProviderEmulator, currency: str, step: int
) -> None:
    with pytest.raises(ChargeNotAttempted, match=f"multiple of {step}"):
        charge(provider, order("ODD", amount=5124, currency=currency))
    assert emulator.charges() == []

    assert charge(provider, order("ROUND", amount=5100, currency=currency)).status == "succeeded"


# -- the list endpoint ---------------------------------------------------------------------------


def test_the_list_pages_newest_first_with_cursors_and_filters_on_created(
    raw: stripe.StripeClient, provider: StripeProvider, clock: FakeClock
) -> None:
    made = []
    for n in range(25):
        made.append(charge(provider, order(f"ORDER-{n:02}")).charge_id)
        clock.now += 10

    first = raw.v1.payment_intents.list({"limit": 10})
    assert (first.to_dict()["object"], first.has_more, first.url) == ("list", True, "/v1/payment_intents")
    assert [i.id for i in first.data] == made[::-1][:10]
    listed = [i.id for i in raw.v1.payment_intents.list({"limit": 10}).auto_paging_iter()]
    assert listed == made[::-1]
    after = raw.v1.payment_intents.list({"limit": 10, "starting_after": made[5]})
    assert ([i.id for i in after.data], after.has_more) == (made[4::-1], False)
    window = raw.v1.payment_intents.list({"created": {"gte": int(START) + 50, "lte": int(START) + 90}})
    assert [i.id for i in window.data] == made[9:4:-1]


def test_the_list_finds_an_attempt_among_many_payment_intents_across_pages(
    provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    # Other orders' PaymentIntents go straight into the account (a charge request each would be
    # most of this test's time): 120 before the attempt's charge, 60 after it, all in the window.
    emulator.add_history(120, created_from=int(START) - 500, created_to=int(START) - 1)
    landed = charge(provider, order())
    emulator.add_history(60, created_from=int(START) + 1, created_to=int(START) + 500)
    lists = emulator.request_count("list")

    record = provider.list_attempt(
        order(), attempt=1, idempotency_key="k", created_from=int(START) - 600, created_to=int(START) + 600
    )

    assert (record.source, record.charge, record.extra_charge_ids) == ("list", landed, ())
    assert emulator.request_count("list") - lists == 2  # 181 PaymentIntents, 100 a page


def test_the_list_only_covers_the_window_it_is_given(provider: StripeProvider, clock: FakeClock) -> None:
    charge(provider, order())

    record = provider.list_attempt(
        order(), attempt=1, idempotency_key="k", created_from=int(START) + 1, created_to=int(START) + 600
    )

    assert record.charge is None


def test_the_search_lags_on_updates_too_while_the_list_shows_the_payment_as_it_is(
    provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    emulator.force_outcome("processing", order_id="ORDER-003")
    with pytest.raises(PaymentOutcomeUnknown):
        charge(provider, order())
    clock.now += 3600
    emulator.search_lag_seconds = 1800
    (intent,) = emulator.payment_intents("ORDER-003")
    emulator.set_status(intent["id"], "succeeded")

    # The search still sees it processing (an hour-old state is searchable, the new one is not).
    with pytest.raises(PaymentOutcomeUnknown, match="processing"):
        provider.search_attempt(order(), attempt=1, idempotency_key="k")
    listed = provider.list_attempt(
        order(), attempt=1, idempotency_key="k", created_from=int(START) - 600, created_to=int(clock.now)
    )
    assert listed.charge is not None
    assert listed.charge.charge_id == intent["id"]

    clock.now += 1800
    searched = provider.search_attempt(order(), attempt=1, idempotency_key="k")
    assert searched.charge is not None
    assert searched.charge.charge_id == intent["id"]


def test_a_search_lag_longer_than_any_grace_hides_new_payment_intents_for_that_long(
    provider: StripeProvider, emulator: ProviderEmulator, clock: FakeClock
) -> None:
    emulator.search_lag_seconds = 2 * 3600
    charge(provider, order())
    clock.now += 2 * 3600 - 1
    assert provider.search_attempt(order(), attempt=1, idempotency_key="k").charge is None
    clock.now += 1
    assert provider.search_attempt(order(), attempt=1, idempotency_key="k").charge is not None


def test_a_declined_attempt_is_recorded_as_failed_by_search_and_list(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    declined = order(payment_method="pm_card_chargeDeclined")
    with pytest.raises(Exception, match="declined"):
        charge(provider, declined)
    (intent,) = emulator.payment_intents("ORDER-003")

    for record in (
        provider.search_attempt(declined, attempt=1, idempotency_key="k"),
        provider.list_attempt(
            declined, attempt=1, idempotency_key="k", created_from=0, created_to=int(START) + 1
        ),
    ):
        assert (record.charge, record.failed_ids, record.declined) == (None, (intent["id"],), True)
    never = provider.list_attempt(
        order(), attempt=2, idempotency_key="k", created_from=0, created_to=int(START) + 1
    )
    assert (never.failed_ids, never.declined) == ((), False)


def test_the_list_filters_an_accounts_history_on_customer_and_created_and_pages_within_the_filter(
    raw: stripe.StripeClient, emulator: ProviderEmulator
) -> None:
    # 3,000 PaymentIntents without a customer around 250 of one customer, all in the same hour.
    emulator.add_history(3000, created_from=int(START), created_to=int(START) + 3600)
    theirs = emulator.add_history(
        250, created_from=int(START), created_to=int(START) + 3600, customer=TEST_CUSTOMER
    )
    requests = emulator.request_count("list")

    first = raw.v1.payment_intents.list({"customer": TEST_CUSTOMER, "limit": 100})
    listed = [i.id for i in first.auto_paging_iter()]

    assert (len(first.data), first.has_more) == (100, True)
    assert listed == theirs[::-1]  # only the customer's, newest first, every one once
    assert emulator.request_count("list") - requests == 3  # 250 in pages of 100
    window: Any = {"gte": int(START) + 1800, "lte": int(START) + 2700}
    in_window = list(
        raw.v1.payment_intents.list({"customer": TEST_CUSTOMER, "created": window}).auto_paging_iter()
    )
    assert in_window
    assert all(i.customer == TEST_CUSTOMER and 1800 <= i.created - START <= 2700 for i in in_window)
    assert {i.id for i in in_window} == {
        i
        for i in theirs
        if 1800 <= emulator.payment_intent(i)["created"] - START <= 2700  # type: ignore[index]
    }


def test_a_customers_charge_is_listed_in_one_request_among_a_busy_accounts_payment_intents(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    saved = order(payment_method=SAVED_PAYMENT_METHOD, provider_customer_id=TEST_CUSTOMER)
    emulator.add_history(20_000, created_from=int(START) - 600, created_to=int(START) + 600)
    landed = charge(provider, saved)
    lists = emulator.request_count("list")

    record = provider.list_attempt(
        saved,
        attempt=1,
        idempotency_key="k",
        created_from=int(START) - 600,
        created_to=int(START) + 600,
        customer=TEST_CUSTOMER,
        max_pages=1,
    )

    assert (record.source, record.charge) == ("list", landed)
    assert emulator.request_count("list") - lists == 1


def test_a_list_past_its_page_cap_concludes_nothing(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.add_history(1000, created_from=int(START) - 600, created_to=int(START) + 600)
    lists = emulator.request_count("list")

    with pytest.raises(ListTooLong, match="more than 3 pages") as raised:
        provider.list_attempt(
            order(), attempt=1, idempotency_key="k", created_from=0, created_to=int(START) + 600, max_pages=3
        )

    assert isinstance(raised.value, PaymentOutcomeUnknown)  # whoever only knows "unknown" keeps the claim
    assert raised.value.pages == 3
    assert emulator.request_count("list") - lists == 3


def test_a_list_told_to_stop_between_pages_concludes_nothing(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    emulator.add_history(250, created_from=int(START) - 600, created_to=int(START) + 600)

    with pytest.raises(PaymentOutcomeUnknown, match="time budget"):
        provider.list_attempt(
            order(),
            attempt=1,
            idempotency_key="k",
            created_from=0,
            created_to=int(START) + 600,
            keep_going=lambda: False,
        )


# -- a PaymentIntent read by id: the doorbell's answer ---------------------------------------------


def test_a_payment_intent_read_by_id_says_what_stripe_holds_for_the_order(
    provider: StripeProvider, emulator: ProviderEmulator
) -> None:
    """The webhook consumer's and the settlement check's read: Stripe's JSON, not the SDK's objects."""
    result = charge(provider, order(), attempt=2)

    reading = provider.retrieve_intent(result.charge_id)

    assert reading is not None
    assert (reading.payment_intent_id, reading.status) == (result.charge_id, "succeeded")
    assert (reading.amount, reading.currency, reading.livemode) == (15000, "BRL", False)
    assert (reading.order_id, reading.attempt, reading.failed_after_confirm) == ("ORDER-003", 2, False)


@pytest.mark.parametrize("forged", ["pi_nothing", "pi_x/cancel", "pi_x?expand[]=customer", "ch_1"])
def test_an_id_stripe_never_issued_reads_as_not_ours_whatever_it_holds(
    provider: StripeProvider, emulator: ProviderEmulator, forged: str
) -> None:
    """An id from a queued doorbell is untrusted: it goes into the URL quoted, one path segment, and
    reads as nothing rather than as another resource of the account."""
    charge(provider, order())
    recording = emulator.record()

    assert provider.retrieve_intent(forged) is None
    asked = [(exchange.method, exchange.path, exchange.query) for exchange in recording.exchanges]
    if forged.startswith("pi_"):
        assert asked == [("GET", "/v1/payment_intents/" + quote(forged, safe=""), "")]
    else:
        assert asked == []  # not a PaymentIntent id: nothing asked
