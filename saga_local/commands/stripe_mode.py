"""``saga up --stripe-test``: the local stack against Stripe's test mode instead of its emulator.

Everything runs as under a plain `saga up` (moto, the real state machine, the handlers in workers),
but the functions' provider is ``https://api.stripe.com`` with the user's test key, read from
:data:`KEY_VARIABLE`. Only a test key is accepted (``sk_test_``, ``rk_test_``): test mode moves no
money, and a local run must never be able to. The key is never printed, logged or written to a
file: it reaches the functions through their environment and the stack's own (in-memory) secret,
and `saga reconcile` of this stack reads it from the same variable again.

What does not work in test mode is what only the emulator has: ``saga fault outage|lost-answer``
and its ``/_emulator/`` admin routes (charges by order, refunds' rehearsal with ``$PROVIDER``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Where the test key is read from (the name the Stripe CLI reads too).
KEY_VARIABLE = "STRIPE_API_KEY"
#: Stripe's API base: what the functions' provider client is given in test mode.
STRIPE_API_BASE = "https://api.stripe.com"
#: The prefixes of Stripe's test-mode keys: secret and restricted.
TEST_KEY_PREFIXES = ("sk_test_", "rk_test_")


class StripeKeyError(Exception):
    """The test key is missing or is not a test key. The message never contains the key."""


def read_test_key(environ: Mapping[str, str] | None = None) -> str:
    """The Stripe test-mode key of :data:`KEY_VARIABLE`; :class:`StripeKeyError` in one line else."""
    key = (os.environ if environ is None else environ).get(KEY_VARIABLE, "").strip()
    if not key:
        raise StripeKeyError(
            f"--stripe-test needs your Stripe test key in {KEY_VARIABLE} (Dashboard, Developers, API keys,"
            " test mode: sk_test_...)"
        )
    if not key.startswith(TEST_KEY_PREFIXES):
        # Name what the key is, never the key: a live key here would move real money.
        kind = "a live key" if key.startswith(("sk_live_", "rk_live_")) else "not a Stripe test key"
        raise StripeKeyError(
            f"{KEY_VARIABLE} holds {kind}: --stripe-test takes only a test-mode key (sk_test_ or rk_test_)"
        )
    return key


def provider_key(state: Mapping[str, Any]) -> str:
    """The key local tooling (``saga reconcile``) sends to the provider of the `saga up` that
    ``state`` (its stack file) describes: the emulator's fixed one, or in test mode the user's."""
    if state.get("stripeTestMode"):
        try:
            return read_test_key()
        except StripeKeyError as exc:
            raise SystemExit(f"saga reconcile: the stack runs on Stripe's test mode: {exc}") from None
    from saga_local.aws.stack import LOCAL_API_KEY

    return LOCAL_API_KEY


def payment_api(enabled: bool) -> tuple[str, str] | None:
    """``(Stripe's base, the test key)`` for ``saga up --stripe-test``, None without it."""
    return (STRIPE_API_BASE, read_test_key()) if enabled else None
