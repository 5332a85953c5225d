"""Stripe's webhooks through the embedded stack as `saga up` wires them: the emulator's own signed
deliveries to the receiver's local function URL (payload format 2.0), the secret it registered in the
stack's Secrets Manager secret, the webhook queue's event source running the consumer with its role,
the real state machine. No sweeper runs here but in the last test: what resolves a claim is the
webhook alone, until Stripe disables an endpoint that kept failing and the sweeper, the backstop,
closes the claims whose events never came."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from typing import TYPE_CHECKING, Any

import pytest

from saga_local.harness.chaos_sweep import SweeperTicks
from saga_local.runtime.faults import Fault
from saga_local.stack.embedded import EmbeddedStack
from saga_local.stripe_emulator import WebhookDisorder
from saga_local.template import ROOT
from tests.helpers import order, webhook_signing_secret

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from saga_local.stack.outcome_log import OutcomeEvent

#: Stripe's retry waits (a minute, five, half an hour...) compressed to 0.3 s, 1.5 s, 9 s...
TIME_SCALE = 0.005


@pytest.fixture
def hooked() -> Iterator[EmbeddedStack]:
    """An embedded stack with in-process handlers and Stripe's webhooks wired as `saga up` wires them."""
    environment = dict(os.environ)
    try:
        with EmbeddedStack(runtime="inprocess", webhooks=True, webhook_time_scale=TIME_SCALE) as embedded:
            yield embedded
    finally:
        os.environ.clear()
        os.environ.update(environment)


def eventually(predicate: Callable[[], Any], what: str, seconds: float = 30) -> Any:
    """Wait for something the stack does in the background (a delivery, the consumer's write)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def claim_status(stack: EmbeddedStack, order_id: str) -> str | None:
    claim = stack.driver.claim(order_id)
    return None if claim is None else str(claim["status"])


def final_events(stack: EmbeddedStack, order_id: str) -> list[OutcomeEvent]:
    stack.driver.relay()
    log = stack.driver.outcome_log
    assert log is not None
    return [e for e in log.collect() if e.order_id == order_id and e.final]


def finals(stack: EmbeddedStack, order_id: str) -> list[str]:
    return [e.detail_type for e in final_events(stack, order_id)]


def test_saga_up_registers_the_receivers_url_and_stores_the_secret_it_was_given(
    hooked: EmbeddedStack,
) -> None:
    (endpoint,) = hooked.provider.webhooks.endpoints()
    assert hooked.webhook_url is not None
    assert endpoint["url"] == hooked.webhook_url.url == hooked.stack.outputs["WebhookEndpointUrl"]
    assert "payment_intent.succeeded" in endpoint["enabled_events"]
    secret = webhook_signing_secret(hooked.stack)
    # The secret in Secrets Manager is the one the emulator signs with: a delivery verifies.
    assert secret.startswith("whsec_")
    with hooked.driver.polling():
        hooked.driver.wait(hooked.driver.start(order("ORDER-WL-0"), name="plain"))
        eventually(lambda: hooked.provider.webhooks.attempts("ORDER-WL-0"), "the succeeded delivery")
    (attempt,) = hooked.provider.webhooks.attempts("ORDER-WL-0")
    assert (attempt.event_type, attempt.status) == ("payment_intent.succeeded", 200)


def test_a_lost_mark_complete_answer_is_completed_by_the_emulators_succeeded_webhook(
    hooked: EmbeddedStack,
) -> None:
    hooked.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100))
    with hooked.driver.polling():
        result = hooked.driver.wait(hooked.driver.start(order("ORDER-WL-1"), name="lost-answer"))
        eventually(lambda: claim_status(hooked, "ORDER-WL-1") == "COMPLETED", "the webhook's completion")

    assert result.error == "NeedsReconciliation"  # the execution never learned; the webhook did
    (landed,) = hooked.provider.charges_for("ORDER-WL-1")
    claim = hooked.driver.claim("ORDER-WL-1")
    assert claim is not None
    assert claim["chargeId"] == landed.charge_id
    (charged,) = [e for e in final_events(hooked, "ORDER-WL-1") if e.detail_type == "OrderCharged"]
    assert charged.detail["resolvedBy"] == "webhook"  # what `saga events` shows as (webhook)
    assert "(webhook)" in charged.line()


def test_duplicated_and_reordered_deliveries_change_nothing(hooked: EmbeddedStack) -> None:
    hooked.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100, order_id="ORDER-WL-2"))
    hooked.provider.force_outcome("processing", order_id="ORDER-WL-3")
    # Every event twice; each held back so that the one sent after it arrives first.
    hooked.provider.webhooks.disorder = WebhookDisorder(
        duplicate=1.0, reorder=1.0, reorder_seconds=0.5, delay_seconds=0.3, seed=3
    )
    with hooked.driver.polling():
        hooked.driver.wait(hooked.driver.start(order("ORDER-WL-2"), name="duplicated"))
        hooked.driver.wait(hooked.driver.start(order("ORDER-WL-3"), name="settles-later"))
        (pending,) = hooked.provider.payment_intents("ORDER-WL-3")
        hooked.provider.webhooks.disorder = WebhookDisorder()  # the succeeded overtakes the processing
        hooked.provider.set_status(pending["id"], "succeeded")
        assert hooked.provider.webhooks.wait_idle(30)
        eventually(
            lambda: hooked.driver.queue_depth(hooked.stack.resolver.refs["WebhookQueue"]) == 0, "the queue"
        )
        eventually(lambda: claim_status(hooked, "ORDER-WL-3") == "COMPLETED", "the settled debit")

    attempts = hooked.provider.webhooks.attempts("ORDER-WL-3")
    kinds = [a.event_type for a in attempts]
    assert kinds.index("payment_intent.succeeded") < max(
        i for i, kind in enumerate(kinds) if kind == "payment_intent.processing"
    )  # a processing delivery came after the succeeded one
    for order_id in ("ORDER-WL-2", "ORDER-WL-3"):
        (landed,) = hooked.provider.charges_for(order_id)
        claim = hooked.driver.claim(order_id)
        assert claim is not None
        assert (claim["status"], claim["chargeId"]) == ("COMPLETED", landed.charge_id)
        assert finals(hooked, order_id).count("OrderCharged") == 1
    assert len([a for a in hooked.provider.webhooks.attempts("ORDER-WL-2") if a.delivered]) == 2


def test_an_endpoint_down_for_a_while_gets_the_retried_delivery_later(hooked: EmbeddedStack) -> None:
    hooked.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100))
    hooked.provider.webhooks.take_down(1.0)
    with hooked.driver.polling():
        hooked.driver.wait(hooked.driver.start(order("ORDER-WL-4"), name="endpoint-down"))
        eventually(lambda: claim_status(hooked, "ORDER-WL-4") == "COMPLETED", "the retried delivery")

    attempts = hooked.provider.webhooks.attempts("ORDER-WL-4")
    assert attempts[0].error == "the endpoint is down"
    assert attempts[-1].delivered
    assert attempts[-1].attempt > 1
    assert len(hooked.provider.charges_for("ORDER-WL-4")) == 1


def docs_trigger_line() -> str:
    """The lines of docs/webhooks.md's admin trigger block that read ``.saga/stack.json`` and send the
    ``curl``, as a person pastes them (its ``saga`` lines, which need a running ``saga up``, are run
    as written by ``tests/local/test_doc_rehearsals.py``)."""
    text = (ROOT / "docs" / "webhooks.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```bash\n([^`]*/_emulator/trigger[^`]*)```", text)
    return "\n".join(line for line in block.splitlines() if not line.startswith("saga "))


def test_the_admin_trigger_curl_line_of_the_docs_sends_an_event_the_receiver_accepts(
    hooked: EmbeddedStack, tmp_path: Path
) -> None:
    # What `saga up` writes where the line reads it (the project's .saga/stack.json).
    (tmp_path / ".saga").mkdir()
    state = {"provider": hooked.provider.url, "providerAdminToken": hooked.provider.admin_token}
    (tmp_path / ".saga" / "stack.json").write_text(json.dumps(state), encoding="utf-8")
    with hooked.driver.polling():
        hooked.driver.wait(hooked.driver.start(order("ORDER-WEBHOOK"), name="triggered"))
        assert hooked.provider.webhooks.wait_idle(30)
        ran = subprocess.run(  # noqa: S603 - the docs' own line, against this test's emulator
            ["/bin/bash", "-c", docs_trigger_line()],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        event = json.loads(ran.stdout)
        assert hooked.provider.webhooks.wait_idle(30)

    attempts = [a for a in hooked.provider.webhooks.attempts("ORDER-WEBHOOK") if a.event_id == event["id"]]
    assert event["type"] == "payment_intent.succeeded"
    assert [a.status for a in attempts] == [200, 200]  # the first delivery, and the triggered one
    assert claim_status(hooked, "ORDER-WEBHOOK") == "COMPLETED"
    assert len(hooked.provider.charges_for("ORDER-WEBHOOK")) == 1


def test_orders_whose_events_a_disabled_endpoint_never_got_are_closed_by_the_sweeper(
    hooked: EmbeddedStack,
) -> None:
    """Stripe disabled the endpoint after three days of failures: the first order's events were
    given up, the second's never sent. The sweeper, the backstop, still closes both claims from the
    provider's own record, each charged once."""
    hooked.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100))
    webhooks = hooked.provider.webhooks
    webhooks.time_scale = 0.000001  # Stripe's three days of retries in a quarter of a second
    webhooks.take_down(3600)  # the receiver's URL answers nothing (a wrong or deleted URL)
    with hooked.driver.polling():
        first = hooked.driver.wait(hooked.driver.start(order("ORDER-WL-5"), name="endpoint-failing"))
        eventually(lambda: webhooks.endpoints()[0]["status"] == "disabled", "Stripe disabling the endpoint")
        second = hooked.driver.wait(hooked.driver.start(order("ORDER-WL-6"), name="endpoint-disabled"))
        assert webhooks.wait_idle(30)

    assert (first.error, second.error) == ("NeedsReconciliation", "NeedsReconciliation")
    assert not any(a.delivered for a in webhooks.attempts("ORDER-WL-5"))
    assert webhooks.attempts("ORDER-WL-6") == []  # nothing is sent to a disabled endpoint
    assert claim_status(hooked, "ORDER-WL-5") == claim_status(hooked, "ORDER-WL-6") == "CLAIMED"

    end, decided = SweeperTicks(hooked).tick()  # the scheduled SweeperFunction, past lease and grace

    assert end == "swept"
    assert sorted((d.order_id, d.outcome) for d in decided) == [
        ("ORDER-WL-5", "completed"),
        ("ORDER-WL-6", "completed"),
    ]
    for order_id in ("ORDER-WL-5", "ORDER-WL-6"):
        (landed,) = hooked.provider.charges_for(order_id)
        claim = hooked.driver.claim(order_id)
        assert claim is not None
        assert (claim["status"], claim["chargeId"]) == ("COMPLETED", landed.charge_id)
        (charged,) = [e for e in final_events(hooked, order_id) if e.detail_type == "OrderCharged"]
        assert charged.detail["resolvedBy"] == "sweeper"
