"""What the sweeper tells about each decision (payment_saga.sweeping): the log event, its level and the
metrics its alarms read, and the provider it builds only when a claim asks Stripe something."""

from __future__ import annotations

from typing import Any

import pytest

from payment_saga.claims import ReleaseReason
from payment_saga.reconcile import ReconcileDecision, ReconcileOutcome
from payment_saga.sweeping import Count, ProviderOnFirstUse, said_of_decision, said_of_settlement
from payment_saga.webhooks import WebhookDecision, WebhookOutcome


def decision(outcome: ReconcileOutcome, **extra: Any) -> ReconcileDecision:
    return ReconcileDecision("ORDER-1", 1, "execution-1", 0, outcome, "because", **extra)


def told(decided: ReconcileDecision) -> list[tuple[str, str, list[Count]]]:
    return [(said.event, said.level, list(said.counts)) for said in said_of_decision(decided)]


RESOLVED = "ReconciliationResolved"


@pytest.mark.parametrize(
    ("decided", "expected"),
    [
        (
            decision(ReconcileOutcome.COMPLETED, charge_id="pi_1"),
            [("reconciliation_completed", "info", [Count(RESOLVED, (("Outcome", "completed"),))])],
        ),
        (
            decision(ReconcileOutcome.RELEASED, release_reason=ReleaseReason.DECLINED),
            [("reconciliation_released", "info", [Count(RESOLVED, (("Outcome", "released"),))])],
        ),
        (
            decision(ReconcileOutcome.CHARGE_ON_RELEASED, charge_id="pi_1"),
            [("charge_on_released_claim", "error", [Count("ChargeOnReleasedClaim")])],
        ),
        (
            decision(ReconcileOutcome.PENDING, list_cap_reached=True, settlement_overdue=True),
            [
                (
                    "reconciliation_pending",
                    "info",
                    [
                        Count("ReconciliationPending"),
                        Count("ReconciliationListCapped"),
                        Count("SettlementOverdue"),
                    ],
                )
            ],
        ),
        (
            decision(ReconcileOutcome.CHANGED),
            [("reconciliation_changed", "info", [Count("ReconciliationChanged")])],
        ),
        (
            decision(ReconcileOutcome.FAILED),
            [("reconciliation_failed", "error", [Count("ReconciliationFailed")])],
        ),
    ],
    ids=lambda value: value.outcome.value if isinstance(value, ReconcileDecision) else "",
)
def test_each_decision_is_one_event_counted_for_its_alarm(
    decided: ReconcileDecision, expected: list[tuple[str, str, list[Count]]]
) -> None:
    assert told(decided) == expected
    assert said_of_decision(decided)[0].fields["orderId"] == "ORDER-1"


def test_a_release_says_why_so_a_decline_never_reads_as_never_charged() -> None:
    (said,) = said_of_decision(decision(ReconcileOutcome.RELEASED, release_reason=ReleaseReason.DECLINED))
    assert said.fields["releaseReason"] == "DECLINED"


def test_every_extra_charge_of_an_attempt_is_counted_for_a_refund() -> None:
    decided = decision(ReconcileOutcome.COMPLETED, charge_id="pi_1", extra_charge_ids=("pi_2", "pi_3"))

    duplicates, completed = said_of_decision(decided)

    assert (duplicates.event, duplicates.level) == ("duplicate_charge", "error")
    assert duplicates.counts == (Count("DuplicateCharge"), Count("DuplicateCharge"))
    assert duplicates.fields["duplicateChargeIds"] == ["pi_2", "pi_3"]
    assert completed.event == "reconciliation_completed"


def test_the_settlement_check_alarms_on_money_taken_wrongly_and_counts_what_it_could_not_ask() -> None:
    found = WebhookDecision(WebhookOutcome.DUPLICATE_CHARGE, "a second one", "check-1", "pi_2", "ORDER-1", 1)

    alarmed = said_of_settlement(found)
    failed = said_of_settlement(OSError("Stripe unreachable"))

    assert (alarmed.event, alarmed.level) == ("duplicate_charge", "error")
    assert alarmed.counts == (
        Count("DuplicateCharge"),
        Count("SettlementChecked", (("Outcome", "duplicate_charge"),)),
    )
    assert (failed.event, failed.level, failed.counts) == (
        "settlement_check_failed",
        "warning",
        (Count("SettlementCheckFailed"),),
    )


def test_the_provider_is_built_at_the_first_question_and_only_once() -> None:
    built: list[object] = []

    class Reader:
        def retrieve_intent(self, payment_intent_id: str) -> None:
            return None

    def build() -> Any:
        built.append(Reader())
        return built[-1]

    provider = ProviderOnFirstUse(build)
    assert built == []

    provider.retrieve_intent("pi_1")
    provider.retrieve_intent("pi_2")

    assert len(built) == 1
