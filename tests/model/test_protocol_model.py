"""Model checking of the claim protocol: every interleaving of the CI scopes, the invariants after each step.

``SAGA_MODEL_SCOPE=full`` (``make model``) explores the bigger scopes instead. A failure prints the
shrunk schedule that breaks the invariant, step by step.
"""

from __future__ import annotations

from typing import Any

import pytest

from payment_saga.claims import ClaimOutcome, ClaimResult, ClaimsStore
from saga_local.stripe_emulator import ProviderEmulator
from tests.model.explore import Explorer
from tests.model.protocol import Delivery, Scope
from tests.model.scopes import selected


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


def test_the_emulator_still_has_what_the_model_reaches_into() -> None:
    # tests/model/stripe_link.py uses the emulator's request handler and state directly (no socket):
    # if they are renamed, say so here rather than with an AttributeError deep in a search.
    emulator = ProviderEmulator()
    assert callable(emulator._dispatch)
    state = vars(emulator)
    for name in ("_intents", "_saved", "_ledger", "_faults"):
        assert name in state, name
