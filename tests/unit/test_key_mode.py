"""The key's mode against the stack's (``PaymentApiMode``): a key of the other mode is refused before any
request, so a stack whose webhooks would all be refused charges nothing instead of charging silently.

The keys are built at run time from their parts, so no string in the repository looks like a real key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from payment_saga.api_keys import KeyModeMismatch, check_key_mode, key_mode
from payment_saga.payments import StripeProvider
from saga_local.stripe_emulator import ENDPOINTS, ProviderEmulator

if TYPE_CHECKING:
    from collections.abc import Iterator


def made_up(kind: str, mode: str) -> str:
    """A key of ``kind`` (``sk``, ``rk``) and ``mode`` (``live``, ``test``) that is no one's."""
    return kind + "_" + mode + "_" + "x" * 24


@pytest.fixture
def emulator() -> Iterator[ProviderEmulator]:
    with ProviderEmulator() as emulator:
        yield emulator


@pytest.mark.parametrize(
    ("kind", "key_of", "stack_mode", "refused"),
    [
        pytest.param("sk", "live", "test", True, id="secret-live-key-on-a-test-stack"),
        pytest.param("rk", "live", "test", True, id="restricted-live-key-on-a-test-stack"),
        pytest.param("sk", "test", "live", True, id="secret-test-key-on-a-live-stack"),
        pytest.param("rk", "test", "live", True, id="restricted-test-key-on-a-live-stack"),
        pytest.param("sk", "live", "live", False, id="secret-live-key-on-a-live-stack"),
        pytest.param("rk", "live", "live", False, id="restricted-live-key-on-a-live-stack"),
        pytest.param("sk", "test", "test", False, id="secret-test-key-on-a-test-stack"),
        pytest.param("rk", "test", "test", False, id="restricted-test-key-on-a-test-stack"),
    ],
)
def test_only_a_key_of_the_stacks_mode_is_accepted_and_a_refusal_names_the_modes_never_the_key(
    kind: str, key_of: str, stack_mode: str, refused: bool
) -> None:
    key = made_up(kind, key_of)
    if not refused:
        check_key_mode(key, stack_mode)
        return
    with pytest.raises(KeyModeMismatch) as refusal:
        check_key_mode(key, stack_mode)

    assert (refusal.value.key_mode, refusal.value.stack_mode) == (key_of, stack_mode)
    assert key not in str(refusal.value)
    assert "x" * 24 not in str(refusal.value)


def test_a_key_of_no_mode_is_left_to_stripe_which_refuses_it_itself() -> None:
    check_key_mode("not_a_stripe_key", "live")  # Stripe answers 401: nothing charged, as any bad key
    assert key_mode("not_a_stripe_key") is None


def test_a_stack_mode_that_is_neither_test_nor_live_refuses_every_key() -> None:
    with pytest.raises(KeyModeMismatch, match="must be one of test, live"):
        check_key_mode(made_up("sk", "test"), "prod")


def test_a_provider_with_a_key_of_the_other_mode_sends_nothing(emulator: ProviderEmulator) -> None:
    with pytest.raises(KeyModeMismatch):
        StripeProvider(made_up("sk", "test"), api_base=emulator.url, mode="live")

    assert sum(emulator.request_count(endpoint) for endpoint in ENDPOINTS) == 0
    assert emulator.payment_intents() == []
