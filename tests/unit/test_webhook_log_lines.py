"""What the webhook consumer says about each event, directly: the level, the event's name and the
fields a person reads, ``orderId`` always, and the charge to refund when money was taken wrongly."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from payment_saga.webhooks import ALARMED, WebhookDecision, WebhookOutcome, log_line

#: A decision about ORDER-003's first attempt, whose claim records pi_1; the event named pi_2.
BASE = WebhookDecision(
    outcome=WebhookOutcome.LEFT,
    reason="because",
    event_id="evt_1",
    payment_intent_id="pi_2",
    order_id="ORDER-003",
    attempt=1,
    claim_charge_id="pi_1",
)


def decision(outcome: WebhookOutcome, **overrides: Any) -> WebhookDecision:
    return dataclasses.replace(BASE, outcome=outcome, **overrides)


def test_an_event_that_moved_the_claim_is_an_info_line_named_after_its_outcome() -> None:
    line = log_line(decision(WebhookOutcome.COMPLETED, applied=True), "payment_intent.succeeded")

    assert (line.level, line.event) == ("info", "webhook_completed")
    assert line.fields == {
        "orderId": "ORDER-003",
        "attempt": 1,
        "eventId": "evt_1",
        "eventType": "payment_intent.succeeded",
        "paymentIntentId": "pi_2",
        "reason": "because",
        "applied": True,
    }


def test_a_payment_intent_stripe_does_not_have_here_is_a_warning() -> None:
    line = log_line(decision(WebhookOutcome.NOT_FOUND, order_id=None), "payment_intent.succeeded")

    assert (line.level, line.event) == ("warning", "webhook_not_found")
    assert "chargeId" not in line.fields


def test_a_second_charge_is_an_error_naming_the_charge_kept_and_the_one_to_refund() -> None:
    line = log_line(decision(WebhookOutcome.DUPLICATE_CHARGE), "payment_intent.succeeded")

    assert (line.level, line.event) == ("error", "duplicate_charge")
    assert line.fields["orderId"] == "ORDER-003"
    assert line.fields["chargeId"] == "pi_1"
    assert line.fields["duplicateChargeIds"] == ["pi_2"]


@pytest.mark.parametrize(
    ("outcome", "event"),
    [
        (WebhookOutcome.CHARGE_ON_RELEASED, "charge_on_released_claim"),
        (WebhookOutcome.MISMATCH, "webhook_mismatch"),
        (WebhookOutcome.WRONG_MODE, "webhook_wrong_mode"),
    ],
)
def test_every_outcome_a_person_must_look_at_is_an_error_under_its_alarm_name(
    outcome: WebhookOutcome, event: str
) -> None:
    line = log_line(decision(outcome), "payment_intent.succeeded")

    assert (line.level, line.event) == ("error", event)
    assert line.fields["chargeId"] == "pi_1"
    assert "duplicateChargeIds" not in line.fields


def test_no_outcome_that_changes_nothing_wrongly_is_logged_at_error() -> None:
    quiet = set(WebhookOutcome) - set(ALARMED)

    assert {log_line(decision(outcome), "t").level for outcome in quiet} == {"info", "warning"}
