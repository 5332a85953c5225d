"""``saga up --stripe-test``: the local stack on Stripe's test mode, checked without the network.

The key check runs through the installed entry point: anything but a test key is refused in one line
that never shows the key. The wiring runs an order through the real state machine and handlers with
Stripe's base and a test key; the SDK's requests are turned to the emulator at the last moment, after
the provider client built them, so what they were addressed to and which key they carried is what
Stripe would have received.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
import requests

from saga_local.stack.embedded import EmbeddedStack
from tests.helpers import order
from tests.local.entry_point_support import SAGA, assert_one_line, clean_environment

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

STRIPE = "https://api.stripe.com"
#: Made-up keys of each mode's shape: neither is a real key.
TEST_KEY = "sk_test_made-up-for-the-wiring-test"
LIVE_KEY = "sk_live_made-up-and-refused"


def up_with(state_dir: Path, key: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - the project's own entry point
        [str(SAGA), "up", "--stripe-test"],
        cwd=state_dir,
        env={**clean_environment(state_dir), "STRIPE_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(not SAGA.exists(), reason=f"{SAGA} is not installed (make install)")
@pytest.mark.parametrize(
    ("key", "says"),
    [
        (LIVE_KEY, "STRIPE_API_KEY holds a live key: --stripe-test takes only a test-mode key"),
        ("rk_live_made-up-and-refused", "holds a live key"),
        ("pk_test_a-publishable-key", "holds not a Stripe test key"),
    ],
)
def test_up_on_stripe_test_mode_refuses_any_key_but_a_test_one_without_showing_it(
    key: str, says: str, tmp_path: Path
) -> None:
    result = up_with(tmp_path, key)

    assert_one_line(result, says)
    assert key not in result.stderr + result.stdout
    assert not (tmp_path / "stack.json").exists(), "no stack started"


@pytest.fixture
def on_stripe(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[EmbeddedStack, list[dict[str, Any]]]]:
    """An in-process stack whose functions call Stripe's base with :data:`TEST_KEY`, the requests
    recorded, then answered by the emulator (no network here)."""
    environment = dict(os.environ)
    sent: list[dict[str, Any]] = []
    real = requests.Session.request
    try:
        with EmbeddedStack(runtime="inprocess", payment_api=(STRIPE, TEST_KEY)) as stack:

            def to_the_emulator(session: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
                if url.startswith(STRIPE):
                    headers = kwargs.get("headers") or {}
                    sent.append({"url": url, "authorization": headers.get("Authorization")})
                    url = stack.provider.url + url[len(STRIPE) :]
                return real(session, method, url, *args, **kwargs)

            monkeypatch.setattr(requests.Session, "request", to_the_emulator)
            yield stack, sent
    finally:
        # The in-process runtime installs the functions' environment in this process: put ours back.
        os.environ.clear()
        os.environ.update(environment)


def test_an_order_on_stripe_test_mode_is_charged_through_stripes_base_with_the_test_key(
    on_stripe: tuple[EmbeddedStack, list[dict[str, Any]]],
) -> None:
    stack, sent = on_stripe
    stack.driver.send(json.dumps(order("ORDER-STRIPE-TEST")))
    stack.driver.pump()

    assert stack.driver.outcome_counts() == {"SUCCEEDED": 1}
    creates = [r for r in sent if r["url"] == f"{STRIPE}/v1/payment_intents"]
    assert len(creates) == 1
    assert creates[0]["authorization"] == f"Bearer {TEST_KEY}"
    assert len(stack.provider.charges_for("ORDER-STRIPE-TEST")) == 1


def test_a_function_that_reads_the_stacks_secret_gets_the_test_key_too(
    on_stripe: tuple[EmbeddedStack, list[dict[str, Any]]],
) -> None:
    # `saga invoke` with SAM's env-vars file sets no PAYMENT_API_KEY: the function reads the secret.
    stack, _ = on_stripe
    secret = stack.client("secretsmanager").get_secret_value(
        SecretId=stack.stack.resolver.parameters["PaymentApiKeySecretArn"]
    )
    charge = stack.stack.functions[next(k for k in stack.stack.functions if "ChargePayment" in k)][1]

    assert json.loads(secret["SecretString"]) == {"apiKey": TEST_KEY}
    assert charge["PAYMENT_API_BASE"] == STRIPE
