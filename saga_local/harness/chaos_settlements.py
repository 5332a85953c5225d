"""Chaos's debits after the fact: the hourly settlement backstop, and redrives after Stripe forgot the key.

Two things a bank debit can meet long after its charge, which the run of orders alone never reaches:

* **Its webhook never comes.** A debit awaits its bank with its claim kept (Awaiting Settlement),
  and its lease runs to its settle-by date, three weeks on. If Stripe's ``succeeded`` or
  ``payment_failed`` is lost, the sweeper's hourly settlement check (SweeperFunction with ``"check":
  "settlements"``, ``payment_saga/backstop.py``) asks Stripe about each awaiting claim by its
  PaymentIntent id and closes it. :func:`settlement_backstop` runs those checks, one an hour, once
  the bank has answered every debit, and records which check closed each one: every debit must be
  closed by the first check that ran to its end after its bank answered (a check a fault of the
  sweeper ended, or that could not apply an answer, is followed by the next hour's).
* **The execution is redriven after Stripe forgot the key.** :func:`redrive_after_key_expiry` pays
  :attr:`~saga_local.harness.chaos_plan.ChaosConfig.expired_key_redrives` orders of their own by
  bank debit: each create is applied and its answer lost, and the execution is stopped as Charge
  Payment's retry begins (as an execution that timed out there, its answer never recorded);
  Stripe's ``processing`` webhook records the PaymentIntent on the claim, the emulator's clock
  moves on past the 24 hours Stripe keeps an idempotency key, and the execution is redriven. Its
  Charge Payment must follow the PaymentIntent the claim records and never create a second one,
  whose key Stripe no longer knows. Then the bank answers each debit (succeeded or failed), its
  webhook delivered for some and never for the others, and the backstop closes those.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga_local.aws.moto_adapter import redrive_execution
from saga_local.harness import simulate
from saga_local.harness.chaos_sweep import SWEEPER_FUNCTION
from saga_local.runtime.api import Throttled
from saga_local.runtime.faults import Fault
from saga_local.stripe_emulator import IDEMPOTENCY_TTL_SECONDS, WebhookDisorder

if TYPE_CHECKING:
    import random

    from saga_local.harness.chaos_plan import ChaosConfig
    from saga_local.stack.embedded import EmbeddedStack

#: The settlement checks run at most, one an hour, until no debit the bank answered awaits.
MAX_SETTLEMENT_CHECKS = 10
#: How far the emulator's clock moves before the redrives: past the 24 hours Stripe keeps a key.
PAST_KEY_EXPIRY_SECONDS = IDEMPOTENCY_TTL_SECONDS + 3600
#: The Charge Payment function: its retry is where the execution is stopped.
CHARGE_FUNCTION = "ChargePaymentFunction"
#: How long to wait for a webhook the run delivered to be applied to its claim.
APPLIED_WITHIN_SECONDS = 60.0


@dataclass
class Backstop:
    """The settlement checks of a run: how each ended, and the debits each closed."""

    #: Checks run, and those a fault ended or that left an answer unapplied (``failed`` claims).
    checks: int = 0
    checks_failed: int = 0
    #: Debits the bank had answered whose claim still awaited when the checks began (their webhook
    #: never came, or has not yet), and those the checks closed.
    awaiting: int = 0
    closed: int = 0
    #: Debits a check that ran to its end left open after their bank answered: one line each.
    late: list[str] = field(default_factory=list)

    def add(self, other: Backstop) -> None:
        self.checks += other.checks
        self.checks_failed += other.checks_failed
        self.awaiting += other.awaiting
        self.closed += other.closed
        self.late.extend(other.late)

    def to_dict(self) -> dict[str, Any]:
        return {
            "checks": self.checks,
            "checksFailed": self.checks_failed,
            "awaiting": self.awaiting,
            "closed": self.closed,
            "late": self.late,
        }

    def line(self) -> str:
        return (
            f"settlement checks    {self.checks} hourly checks ({self.checks_failed} ended by a fault or left"
            f" an answer unapplied, followed by the next); {self.awaiting} debits the bank had answered"
            f" still awaited (no webhook came), {self.closed} closed by the checks,"
            f" {len(self.late)} left open past the first check after they settled"
        )


def settlement_backstop(stack: EmbeddedStack, order_ids: list[str]) -> Backstop:
    """The hourly settlement checks, once the bank has answered every debit: one check after the
    other, through the runtime as Scheduler invokes them (their faults included), until no claim of
    ``order_ids`` awaits a debit Stripe shows settled. See the module."""
    mine = set(order_ids)
    backstop = Backstop()
    settled = _settled_and_awaiting(stack, mine)
    backstop.awaiting = len(settled)
    source = next(
        s
        for s in stack.schedule_sources(compress=1.0)
        if s.function_name == stack.stack.function_name(SWEEPER_FUNCTION)
        and s.schedule.event_name == "SettlementCheck"
    )
    name = stack.stack.function_name(SWEEPER_FUNCTION)
    judged = False
    for _ in range(MAX_SETTLEMENT_CHECKS):
        if not _settled_and_awaiting(stack, mine):
            break
        backstop.checks += 1
        try:
            invocation = stack.runtime.invoke(name, source.event())
        except Throttled:
            clean = False
        else:
            answer = {} if invocation.function_error else json.loads(invocation.payload)
            clean = not invocation.function_error and not answer.get("failed")
        simulate.settle(stack)
        still = _settled_and_awaiting(stack, mine)
        if not clean:
            backstop.checks_failed += 1
        elif not judged:
            # The first check that asked about every debit and applied every answer: one backstop
            # period after each of them settled. Whatever it left open waits longer.
            judged = True
            backstop.late = [
                f"{order_id}: awaits {intent} (settled at Stripe) after a settlement check ran to its end"
                for order_id, intent in sorted(still.items())
                if order_id in settled
            ]
    backstop.closed = len(set(settled) - set(_settled_and_awaiting(stack, mine)))
    return backstop


def _settled_and_awaiting(stack: EmbeddedStack, order_ids: set[str]) -> dict[str, str]:
    """orderId -> the PaymentIntent its open claim awaits, for the claims whose debit Stripe shows
    settled (succeeded or failed): what the backstop must close."""
    found: dict[str, str] = {}
    for order_id, claim in stack.driver.claims().items():
        intent_id = claim.get("settlementIntentId")
        if order_id not in order_ids or claim.get("status") != "CLAIMED" or not intent_id:
            continue
        intent = stack.provider.payment_intent(str(intent_id))
        if intent is not None and intent["status"] != "processing":
            found[order_id] = str(intent_id)
    return found


@dataclass
class KeyExpiry:
    """The redrives after Stripe forgot the idempotency key (see the module)."""

    orders: list[str] = field(default_factory=list)
    #: Executions stopped in Charge Payment after their create, whose claim the processing webhook
    #: then recorded the PaymentIntent on, and those redriven past the key's 24 hours.
    recorded: int = 0
    redriven: int = 0
    #: How each redriven execution ended (``AWAITING_SETTLEMENT`` when it followed its debit).
    ended: dict[str, int] = field(default_factory=dict)
    #: Orders with more than one PaymentIntent at Stripe: a create sent again (one line each).
    second_payments: list[str] = field(default_factory=list)
    #: How the bank answered the debits, and whether their webhook came.
    bank: dict[str, int] = field(default_factory=dict)
    webhook_came: int = 0
    webhook_never_came: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "orders": len(self.orders),
            "recorded": self.recorded,
            "redriven": self.redriven,
            "ended": self.ended,
            "secondPayments": self.second_payments,
            "bank": self.bank,
            "webhookCame": self.webhook_came,
            "webhookNeverCame": self.webhook_never_came,
        }

    def line(self) -> str:
        ended = ", ".join(f"{outcome} {n}" for outcome, n in sorted(self.ended.items())) or "none"
        bank = ", ".join(f"{outcome} {n}" for outcome, n in sorted(self.bank.items())) or "none"
        return (
            f"key expired, redrive {len(self.orders)} bank debits whose create's answer was lost, stopped"
            f" in Charge Payment; the PaymentIntent recorded by its processing webhook on {self.recorded},"
            " redriven"
            f" {self.redriven} after {PAST_KEY_EXPIRY_SECONDS // 3600} h (Stripe keeps a key 24 h):"
            f" ended {ended}; {len(self.second_payments)} second PaymentIntents; the bank: {bank};"
            f" its webhook came for {self.webhook_came}, never for {self.webhook_never_came}"
        )


def expiry_orders(config: ChaosConfig) -> list[dict[str, Any]]:
    """The orders :func:`redrive_after_key_expiry` pays, apart from the run's (their own ids)."""
    return simulate.make_orders(config.expired_key_redrives, seed=config.seed + 6, prefix="EXPIRED-KEY")


def redrive_after_key_expiry(
    stack: EmbeddedStack, config: ChaosConfig, rng: random.Random
) -> tuple[KeyExpiry, Backstop]:
    """Run :func:`expiry_orders` through the redrive after the key expired (see the module), then the
    backstop for the debits whose webhook never came. The provider's settlement timer, disorder and
    clock are the run's again afterwards, its clock 25 hours on."""
    orders = expiry_orders(config)
    expiry = KeyExpiry(orders=[order["orderId"] for order in orders])
    if not orders:
        return expiry, Backstop()
    provider = stack.provider
    settle_seconds, disorder = provider.settle_seconds, provider.webhooks.disorder
    provider.settle_seconds = None  # each bank answers when this phase says, after the redrive
    provider.webhooks.disorder = WebhookDisorder()  # the processing webhook comes, once, in order
    try:
        arns = _stopped_after_the_create(stack, orders)
        expiry.recorded = sum(1 for order_id in expiry.orders if _recorded(stack, order_id))
        provider.advance_clock(PAST_KEY_EXPIRY_SECONDS)
        ended: Counter[str] = Counter()
        for arn in arns:
            redrive_execution(arn)
            expiry.redriven += 1
        for arn in arns:
            ended[stack.driver.wait(arn, timeout=120).outcome] += 1
        simulate.settle(stack)
        expiry.ended = dict(ended)
        expiry.second_payments = [
            f"{order_id}: {len(intents)} PaymentIntents ({', '.join(i['id'] for i in intents)})"
            for order_id in expiry.orders
            if len(intents := provider.payment_intents(order_id)) > 1
        ]
        _bank_answers(stack, expiry, config, rng)
    finally:
        provider.settle_seconds = settle_seconds
        provider.webhooks.disorder = disorder
    return expiry, settlement_backstop(stack, expiry.orders)


def _stopped_after_the_create(stack: EmbeddedStack, orders: list[dict[str, Any]]) -> list[str]:
    """Each order paid by debit: its create applied and its answer lost (a 500), and the execution
    stopped as Charge Payment's retry begins, before anything learned the answer; then its
    processing webhook delivered and applied. The executions' ARNs."""
    arns = []
    for order in orders:
        order_id = order["orderId"]
        stack.provider.force_outcome("processing", order_id=order_id)
        stack.provider.inject("fail_after_apply", order_id=order_id)
        stack.faults.add(Fault(CHARGE_FUNCTION, "start", "stop", order_id=order_id, attempt=2))
        arns.append(stack.driver.start(order, name=f"{order_id}-debit"))
    for arn in arns:
        stack.driver.wait(arn, timeout=120)
    deadline = time.monotonic() + APPLIED_WITHIN_SECONDS
    while time.monotonic() < deadline:
        simulate.settle(stack)
        if all(_recorded(stack, order["orderId"]) for order in orders):
            break
        time.sleep(0.1)
    return arns


def _recorded(stack: EmbeddedStack, order_id: str) -> bool:
    claim = stack.driver.claim(order_id) or {}
    return claim.get("status") == "CLAIMED" and bool(claim.get("settlementIntentId"))


def _bank_answers(stack: EmbeddedStack, expiry: KeyExpiry, config: ChaosConfig, rng: random.Random) -> None:
    """The bank answers every debit still processing: succeeded, or failed at the run's
    ``debit_fail_rate``; its webhook comes for every other order, and never for the rest."""
    bank: Counter[str] = Counter()
    provider = stack.provider
    for n, order_id in enumerate(expiry.orders):
        for intent in provider.payment_intents(order_id):
            if intent["status"] != "processing":
                continue
            failed = rng.random() < config.debit_fail_rate
            comes = n % 2 == 0
            provider.webhooks.disorder = WebhookDisorder(lose=0.0 if comes else 1.0)
            provider.set_status(intent["id"], "requires_payment_method" if failed else "succeeded")
            bank["failed" if failed else "succeeded"] += 1
            if comes:
                expiry.webhook_came += 1
            else:
                expiry.webhook_never_came += 1
    provider.webhooks.disorder = WebhookDisorder()
    simulate.settle(stack)
    expiry.bank = dict(bank)
