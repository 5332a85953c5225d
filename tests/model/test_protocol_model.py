"""Model checking of the claim protocol: every interleaving of the CI scopes, the invariants after each step.

``SAGA_MODEL_SCOPE=full`` (``make model``) explores the bigger scopes instead. A failure prints the
shrunk schedule that breaks the invariant, step by step.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, cast

import pytest

from payment_saga import charging, webhooks
from payment_saga.claims import ClaimOutcome, ClaimResult, ClaimsStore
from payment_saga.errors import PaymentOutcomeUnknown
from payment_saga.outcomes import OutcomeRelay, Relayed
from saga_local.stripe_emulator import ProviderEmulator
from tests.model.explore import Explorer
from tests.model.scopes import selected
from tests.model.state import DECLINED_CARD, Delivery, Scope
from tests.model.webhooks import DEBIT

if TYPE_CHECKING:
    from payment_saga.claims import Claim


@pytest.mark.parametrize("scope", selected(), ids=lambda scope: scope.name)
def test_every_schedule_keeps_the_promise(scope: Scope) -> None:
    report = Explorer(scope).run()
    print(report.summary())

    assert report.complete, "the exploration hit its state limit: the scope was not covered"
    assert report.schedules > 0, "no schedule ran to its end"
    assert not report.counterexamples, report.summary()


def test_the_checker_finds_a_claim_that_mistakes_its_own_resend_for_a_duplicate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Hole 1, planted: a claim that answers DUPLICATE when it finds its own row. A Claim
    # Lambda that dies after its write is retried, finds its own claim and must go on charging.
    real_claim = ClaimsStore.claim

    def claim(self: ClaimsStore, order: Any, *, token: str) -> ClaimOutcome:
        outcome = real_claim(self, order, token=token)
        if outcome.result is ClaimResult.REENTRANT:
            return ClaimOutcome(ClaimResult.DUPLICATE, outcome.claim)
        return outcome

    monkeypatch.setattr(ClaimsStore, "claim", claim)
    scope = Scope(
        "planted-bug", (Delivery("d1"),), max_faults=1, requeues=0, fault_kinds=frozenset({"die_after"})
    )

    report = Explorer(scope).run()

    found = [example.invariant for example in report.counterexamples.values()]
    assert any("ended in 'Duplicate Suppressed' but holds the claim" in text for text in found), found
    example = next(e for e in report.counterexamples.values() if "Duplicate Suppressed" in e.invariant)
    assert any("die_after" in step for step in example.trace), example.trace


def test_the_checker_finds_a_relay_that_never_requeues_a_tombstone(monkeypatch: pytest.MonkeyPatch) -> None:
    # Planted: the relay ignores the tombstone the fence of a failed Claim step writes (attempt 0).
    # Only the relay sends that order again, so it is lost: never re-queued, no final outcome.
    real_relay = OutcomeRelay.relay

    def relay(self: OutcomeRelay, old: Any, new: Any) -> Relayed | None:
        if isinstance(new, dict) and new.get("attempt", {}).get("N") == "0":
            return None
        return real_relay(self, old, new)

    monkeypatch.setattr(OutcomeRelay, "relay", relay)
    scope = Scope(
        "planted-relay-bug",
        (Delivery("d1"),),
        max_faults=1,
        requeues=0,
        clock=False,
        sweeper=False,
        fault_kinds=frozenset({"outage"}),
    )

    report = Explorer(scope).run()

    found = [example.invariant for example in report.counterexamples.values()]
    assert any("was never re-queued" in text for text in found), found
    assert any("no final outcome event" in text for text in found), found
    example = next(e for e in report.counterexamples.values() if "never re-queued" in e.invariant)
    assert any("Claim Failed" in step for step in example.trace), example.trace


def test_the_checker_finds_a_relay_retry_that_starts_a_requeued_order_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planted: the relay's re-queue loses its requeueEventId, so the start function names each copy
    # after its MessageId. A relay retried after its send (an answer lost) then starts two executions.
    from handlers import outcome_relay

    make_relay = outcome_relay.outcome_relay

    class WithoutRequeueEventId:
        def __init__(self, sqs: Any) -> None:
            self.sqs = sqs

        def send_message(self, **request: Any) -> Any:
            attributes = request.pop("MessageAttributes")
            kept = {name: value for name, value in attributes.items() if name != "requeueEventId"}
            return self.sqs.send_message(**request, MessageAttributes=kept)

    def planted() -> OutcomeRelay:
        relay = make_relay()
        relay.sqs = cast("Any", WithoutRequeueEventId(relay.sqs))
        return relay

    monkeypatch.setattr(outcome_relay, "outcome_relay", planted)
    scope = Scope(
        "planted-relay-bug",
        (Delivery("d1"),),
        max_faults=2,
        requeues=0,
        clock=False,
        sweeper=False,
        fault_kinds=frozenset({"refused", "answer_lost"}),
    )

    report = Explorer(scope).run()

    example = next((e for e in report.counterexamples.values() if "re-queued 2 times" in e.invariant), None)
    assert example is not None, [e.invariant for e in report.counterexamples.values()]
    assert any("answer_lost" in step for step in example.trace), example.trace


def test_the_checker_finds_a_relay_that_goes_on_past_a_failed_record(monkeypatch: pytest.MonkeyPatch) -> None:
    # Planted: the relay handles every record of a batch whatever fails before it (as Powertools'
    # BatchProcessor does). A decline whose PutEvents fails is then published after the charge.
    from handlers import outcome_relay

    def in_every_order(records: list[dict[str, Any]]) -> dict[str, Any]:
        failed = []
        for record in records:
            try:
                outcome_relay.record_handler(record)
            except Exception:  # noqa: BLE001 - the planted bug: note it and go on
                failed.append({"itemIdentifier": record["dynamodb"]["SequenceNumber"]})
        return {"batchItemFailures": failed}

    monkeypatch.setattr(outcome_relay, "in_stream_order", in_every_order)
    scope = Scope(
        "planted-relay-bug",
        (Delivery("d1", "initial", DECLINED_CARD), Delivery("d2", "retry-1")),
        max_faults=1,
        requeues=0,
        clock=False,
        sweeper=False,
        fault_kinds=frozenset({"put_failed"}),
        relay_lags=True,
    )

    report = Explorer(scope).run()

    example = next((e for e in report.counterexamples.values() if "out of stream order" in e.invariant), None)
    assert example is not None, [e.invariant for e in report.counterexamples.values()]
    assert "OrderDeclined" in example.invariant, example.invariant


def test_the_emulator_still_has_what_the_model_reaches_into() -> None:
    # tests/model/stripe_link.py uses the emulator's request handler and state directly (no socket):
    # if they are renamed, say so here rather than with an AttributeError deep in a search.
    emulator = ProviderEmulator()
    assert callable(emulator._dispatch)
    state = vars(emulator)
    for name in ("_intents", "_saved", "_ledger", "_faults"):
        assert name in state, name


def plant_decision(
    monkeypatch: pytest.MonkeyPatch, decided: webhooks.WebhookOutcome, *, instead: webhooks.WebhookOutcome
) -> None:
    """Plant a bug in the webhook's decision (the function the consumer's handle_event calls): where it
    decides DECIDED, the consumer is told INSTEAD."""
    real_decide = webhooks.decide

    def decide(event: webhooks.PaymentIntentEvent, claim: Claim | None) -> webhooks.WebhookDecision:
        decision = real_decide(event, claim)
        if decision.outcome is decided:
            return dataclasses.replace(decision, outcome=instead)
        return decision

    monkeypatch.setattr(webhooks, "decide", decide)


def test_the_checker_finds_a_webhook_that_completes_the_claim_on_a_failed_payment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planted: a payment_failed event of the claim's attempt completes the claim instead of releasing it.
    plant_decision(monkeypatch, webhooks.WebhookOutcome.RELEASED, instead=webhooks.WebhookOutcome.COMPLETED)
    scope = Scope(
        "planted-webhook-bug",
        (Delivery("d1", "initial", DECLINED_CARD),),
        max_faults=0,
        requeues=0,
        clock=False,
        webhooks=True,
    )

    report = Explorer(scope).run()

    example = next(
        (e for e in report.counterexamples.values() if "COMPLETED with a charge" in e.invariant), None
    )
    assert example is not None, [e.invariant for e in report.counterexamples.values()]
    assert any("webhook payment_failed" in step for step in example.trace), example.trace


def test_the_checker_finds_a_webhook_that_applies_an_earlier_attempts_event_to_the_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planted: the decision reads every event as if it were of the claim's current attempt. The
    # declined first attempt's payment_failed, delivered late, then releases the retry's claim
    # while the retry is being charged.
    real_decide = webhooks.decide

    def decide(event: webhooks.PaymentIntentEvent, claim: Claim | None) -> webhooks.WebhookDecision:
        if claim is not None and event.attempt is not None:
            event = dataclasses.replace(event, attempt=claim.attempt)
        return real_decide(event, claim)

    monkeypatch.setattr(webhooks, "decide", decide)
    scope = Scope(
        "planted-webhook-bug",
        (Delivery("d1", "initial", DECLINED_CARD), Delivery("d2", "retry-1")),
        max_faults=0,
        requeues=0,
        clock=False,
        sweeper=False,
        webhooks=True,
        webhook_repeats=0,
        webhook_losses=0,
    )

    report = Explorer(scope).run()

    assert report.counterexamples, "the planted decision was not caught"
    example = min(report.counterexamples.values(), key=lambda e: len(e.trace))
    assert any("payment_failed" in step and "(attempt 1)" in step for step in example.trace), example.trace


def test_the_checker_finds_a_webhook_that_releases_a_debit_still_processing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planted: a processing event is taken for a failure (release without proof). The debit then
    # settles as succeeded: the order is charged on a released claim.
    plant_decision(
        monkeypatch, webhooks.WebhookOutcome.AWAITING_SETTLEMENT, instead=webhooks.WebhookOutcome.RELEASED
    )
    scope = Scope(
        "planted-webhook-bug",
        (Delivery("d1", "initial", DEBIT),),
        max_faults=0,
        requeues=0,
        clock=False,
        webhooks=True,
        webhook_repeats=0,
        webhook_losses=0,
    )

    report = Explorer(scope).run()

    found = [example.invariant for example in report.counterexamples.values()]
    assert any("RELEASED (DECLINED) but its attempt 1 was charged" in text for text in found), found


def test_the_checker_finds_a_charge_that_pages_for_a_webhook_during_its_last_try(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planted: a try whose answer was lost reads the claim again, but does not hand on the charge a
    # webhook completed meanwhile. Only a webhook delivered inside the last try (after the provider
    # applied the create, before the step learns its answer is lost) reaches that read.
    real_after_unknown = charging._after_unknown

    def after_unknown(
        step: charging.ChargeTry,
        store: ClaimsStore,
        provider: Any,
        journal: charging.Journal,
        unknown: PaymentOutcomeUnknown,
    ) -> Any:
        def refuse(*args: Any) -> Any:
            raise unknown

        with monkeypatch.context() as planted:
            planted.setattr(charging, "_hand_on", refuse)
            return real_after_unknown(step, store, provider, journal, unknown)

    monkeypatch.setattr(charging, "_after_unknown", after_unknown)
    scope = Scope(
        "planted-charge-bug",
        (Delivery("d1"),),
        max_faults=1,
        requeues=0,
        clock=False,
        fault_kinds=frozenset({"last_try"}),
        webhooks=True,
        webhook_repeats=0,
        webhook_losses=0,
    )

    report = Explorer(scope).run()

    found = report.counterexamples.values()
    example = next((e for e in found if "'Needs Reconciliation' because a webhook" in e.invariant), None)
    assert example is not None, [e.invariant for e in report.counterexamples.values()]
    assert "COMPLETED by the webhook" in example.invariant, example.invariant
    assert any("succeeded" in step and "delivered inside" in step for step in example.trace), example.trace


def test_the_checker_finds_a_redrive_that_debits_again_after_the_key_expired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planted: the charge does not follow the PaymentIntent its claim records (a debit's processing
    # webhook recorded it). A redrive a day after the lost answer then creates with a key the provider
    # has forgotten: a second debit.
    monkeypatch.setattr(charging, "_recorded_intent", lambda claim, step: None)
    scope = Scope(
        "planted-charge-bug",
        (Delivery("d1", "initial", DEBIT),),
        max_faults=1,
        redrives=1,
        requeues=0,
        clock=False,
        fault_kinds=frozenset({"lost"}),
        webhooks=True,
        webhook_repeats=0,
        webhook_losses=0,
        webhooks_inside=False,
        key_expiry=True,
    )

    report = Explorer(scope).run()

    found = report.counterexamples.values()
    example = next((e for e in found if "more than one charge" in e.invariant), None)
    assert example is not None, [e.invariant for e in report.counterexamples.values()]
    assert "processing, processing" in example.invariant, example.invariant
    steps = "\n".join(example.trace)
    assert "idempotency window" in steps, steps
    assert "redrive d1" in steps, steps


def test_the_checker_finds_a_consumer_that_believes_a_forged_event(monkeypatch: pytest.MonkeyPatch) -> None:
    # Planted: the consumer decides on a whole event queued on the webhook queue instead of reading
    # its PaymentIntent from Stripe. A forged succeeded (anyone with sqs:SendMessage) then completes
    # the open claim with a PaymentIntent the provider never made.
    from handlers import webhook_consumer

    real_record_handler = webhook_consumer.record_handler

    def believing(record: Any) -> None:
        body = json.loads(record["body"])
        if "data" not in body:
            real_record_handler(record)
            return
        store = cast("Any", webhook_consumer).claims_store()
        decision = webhooks.handle_event(store, webhooks.parse_event(body))
        webhook_consumer.record_decision(decision, body["type"])

    monkeypatch.setattr(webhook_consumer, "record_handler", believing)
    scope = Scope(
        "planted-webhook-bug",
        (Delivery("d1"),),
        max_faults=0,
        requeues=0,
        clock=False,
        webhooks=True,
        webhook_repeats=0,
        webhook_losses=0,
        forged_events=1,
    )

    report = Explorer(scope).run()

    found = report.counterexamples.values()
    example = next((e for e in found if "provider does not show as succeeded" in e.invariant), None)
    assert example is not None, [e.invariant for e in found]
    assert any(step.startswith("a forged succeeded") for step in example.trace), example.trace
