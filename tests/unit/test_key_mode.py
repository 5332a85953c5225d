"""The key's mode against the stack's (``PaymentApiMode``): a key of the other mode is refused before any
request, so a stack whose webhooks would all be refused charges nothing instead of charging silently.

The keys are built at run time from their parts, so no string in the repository looks like a real key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from payment_saga.payments import KeyModeMismatch, StripeProvider, check_key_mode, key_mode
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
    ("key", "stack_mode"),
    [
        pytest.param(made_up("sk", "live"), "test", id="secret-live-key-on-a-test-stack"),
        pytest.param(made_up("rk", "live"), "test", id="restricted-live-key-on-a-test-stack"),
        pytest.param(made_up("sk", "test"), "live", id="secret-test-key-on-a-live-stack"),
        pytest.param(made_up("rk", "test"), "live", id="restricted-test-key-on-a-live-stack"),
    ],
)
def test_a_key_of_the_other_mode_is_refused_naming_both_modes_and_never_the_key(
    key: str, stack_mode: str
) -> None:
    with pytest.raises(KeyModeMismatch) as refused:
        check_key_mode(key, stack_mode)

    assert (refused.value.key_mode, refused.value.stack_mode) == (key_mode(key), stack_mode)
    assert refused.value.key_mode != stack_mode
    assert key not in str(refused.value)
    assert "x" * 24 not in str(refused.value)


@pytest.mark.parametrize(
    ("key", "stack_mode"),
    [
        pytest.param(made_up("sk", "live"), "live", id="secret-live-key-on-a-live-stack"),
        pytest.param(made_up("rk", "live"), "live", id="restricted-live-key-on-a-live-stack"),
        pytest.param(made_up("sk", "test"), "test", id="secret-test-key-on-a-test-stack"),
        pytest.param(made_up("rk", "test"), "test", id="restricted-test-key-on-a-test-stack"),
        # Of no mode at all: Stripe refuses it itself (401, nothing charged), as any bad key.
        pytest.param("not_a_stripe_key", "live", id="no-mode-key-left-to-stripe"),
    ],
)
def test_a_key_of_the_stacks_mode_is_accepted(key: str, stack_mode: str) -> None:
    check_key_mode(key, stack_mode)


def test_a_stack_mode_that_is_neither_test_nor_live_refuses_every_key() -> None:
    with pytest.raises(KeyModeMismatch, match="must be one of test, live"):
        check_key_mode(made_up("sk", "test"), "prod")


def test_a_provider_with_a_key_of_the_other_mode_sends_nothing(emulator: ProviderEmulator) -> None:
    with pytest.raises(KeyModeMismatch):
        StripeProvider(made_up("sk", "test"), api_base=emulator.url, mode="live")

    assert sum(emulator.request_count(endpoint) for endpoint in ENDPOINTS) == 0
    assert emulator.payment_intents() == []
