"""A small chaos run (``make chaos`` runs 1,000 orders x 4): random faults everywhere, then the sweeper.

The rates are turned up so that 30 orders exercise every path the big run does: stopped
executions and unknown outcomes that leave claims for the sweeper, redeliveries, start-function
failures that redrive messages, a provider outage (a few seconds here, minutes in the big run)
whose orders the sweeper releases and the relay sends again, a search lag longer than the
sweeper's grace, Stripe's webhooks delivered in disorder (duplicated, reordered, delayed, lost, the
endpoint down for a while) and bank debits that settle later; then the outcome events are counted
against the orders.
"""

from __future__ import annotations

import dataclasses
import html
import json
import random
import re
from typing import TYPE_CHECKING

import boto3
import pytest

from payment_saga.claims import ClaimsStore
from payment_saga.orders import Order
from saga_local import output
from saga_local.aws.stack import REGION
from saga_local.cli import main
from saga_local.harness.chaos import run_chaos
from saga_local.harness.chaos_plan import ChaosConfig, plan_faults
from saga_local.harness.chaos_report import broken_invariants, render
from saga_local.harness.chaos_sweep import SEARCH_GRACE_SECONDS, SweeperTicks
from saga_local.harness.chaos_webhooks import left_open_by_webhook
from saga_local.harness.outcomes import final_outcomes, tally
from saga_local.harness.simulate import LOST_ENDINGS, make_orders, money, order_ending
from saga_local.runtime.faults import Fault
from saga_local.stack.embedded import EmbeddedStack
from saga_local.stack.outcome_log import OutcomeEvent
from saga_local.stripe_emulator import DeliveryAttempt, LedgerEntry
from saga_local.trace.report import render_report

if TYPE_CHECKING:
    from saga_local.harness.chaos_report import ChaosReport

SMALL = ChaosConfig(
    orders=30,
    copies=4,
    concurrency=2,
    seed=24,
    step_fault_rate=0.5,
    start_fault_rate=0.1,
    relay_fault_rate=0.5,
    sweeper_fault_rate=0.7,
    sweep_trouble_rate=0.5,
    provider_fault_rate=0.25,
    stop_rate=0.2,
    redelivery_rate=0.1,
    visibility_timeout=1,
    # The outage first, with the orders flowing freely for two seconds; then the throttle, which lets
    # no claim through to a Charge: over the whole outage, the outage would meet no call.
    outage_start_seconds=0.5,
    # Long enough for a Charge and all its retries to meet it on a loaded machine: each retry is a
    # few state transitions, and on a shared machine five seconds saw some chains outlast it.
    outage_seconds=8.0,
    throttle_start_seconds=2.5,
    throttle_seconds=4.0,  # long enough for a Claim and its retries to all meet it on a slow machine
    # A third of the orders by bank debit (about ten), a third of those refused by the bank; most of
    # the webhook events lost, so that the sweeper still has charges to find and settlements that
    # never arrived to close, as webhooks close the rest before it. Which events are lost follows the
    # order the threads deliver them in: with half lost, the few stopped executions whose charge had
    # landed sometimes all had their webhook delivered (once in nine runs here), and the sweeper then
    # had nothing to find.
    debit_rate=0.35,
    debit_fail_rate=0.35,
    settle_seconds=1.0,
    webhook_duplicate_rate=0.3,
    webhook_reorder_rate=0.5,
    webhook_reorder_seconds=2.5,  # longer than a settlement: a processing arrives after its end
    webhook_delay_rate=0.4,
    webhook_delay_seconds=2.5,
    webhook_lose_rate=0.7,
    webhook_down_after_events=5,
    webhook_down_seconds=3.0,
)


def chaos_stack(config: ChaosConfig) -> EmbeddedStack:
    """The stack ``saga chaos`` runs on: in-process handlers, Retry waits not slept, and the webhooks."""
    return EmbeddedStack(
        runtime="inprocess",
        retry_time_scale=0,
        visibility_timeout=config.visibility_timeout,
        webhooks=config.webhooks,
        webhook_time_scale=config.webhook_time_scale,
    )


@dataclasses.dataclass(frozen=True)
class SmallRun:
    report: ChaosReport
    #: Every outcome event delivery the run published, as read from the archive queue.
    events: list[OutcomeEvent]
    #: orderId -> the provider's charge ids.
    ledger: dict[str, list[str]]

    @property
    def order_ids(self) -> list[str]:
        return [
            o["orderId"] for o in make_orders(SMALL.orders, decline_rate=SMALL.decline_rate, seed=SMALL.seed)
        ]


@pytest.fixture(scope="module")
def small() -> SmallRun:
    with chaos_stack(SMALL) as stack:
        report = run_chaos(stack, SMALL)
        assert stack.driver.outcome_log is not None
        ledger: dict[str, list[str]] = {}
        for entry in stack.provider.charges():
            ledger.setdefault(entry.order_id or "", []).append(entry.charge_id)
        return SmallRun(report, stack.driver.outcome_log.collect(), ledger)


@pytest.fixture(scope="module")
def small_run(small: SmallRun) -> ChaosReport:
    return small.report


def test_a_small_chaos_run_keeps_the_promise(small_run: ChaosReport) -> None:
    assert small_run.promise_kept, render(small_run)
    assert small_run.before.double_charged_orders == 0
    assert small_run.declined_sent_again == []
    assert small_run.after.needs_reconciliation == 0
    # Released NOT_CHARGED is not an end: such an order is lost until it is charged.
    assert small_run.after.order_endings.keys() <= {"charged", "declined"}


def test_forged_webhooks_planted_on_the_queue_move_no_claim_and_no_money(small: SmallRun) -> None:
    """A "succeeded" for a declined order's failed PaymentIntent, another account's PaymentIntent naming
    our order, and a whole event for another amount, each planted on the webhook queue: the consumer
    reads Stripe with the stack's key and believes none of them."""
    report = small.report
    assert set(report.forgeries_planted) == {"queue", "foreign", "amount"}, report.forgeries_planted
    assert report.forgeries_believed == []
    assert report.checks["no forged webhook moved a claim or money"]
    # Not one charge on our account for another account's PaymentIntent, and one charge at most each.
    assert all(len(charges) == 1 for charges in small.ledger.values()), small.ledger
    assert f"forged webhooks      {sum(report.forgeries_planted.values())} planted" in render(report)


def test_the_small_run_reaches_the_sweeper_and_every_kind_of_trouble(small_run: ChaosReport) -> None:
    assert small_run.before.needs_reconciliation > 0, "no claim was left for the sweeper: raise the rates"
    assert small_run.before.execution_outcomes.get("ABORTED", 0) > 0
    fired = set(small_run.faults_by_kind)
    every_kind = {
        "die",
        "timeout",
        "oom",
        "throttle",
        "throttle_call",
        "error_call",
        "delay",
        "stop",
        "lost_answer",
        "late_write",
    }
    assert every_kind <= fired, fired
    assert any(kind.startswith("provider ") for kind in fired)
    assert small_run.redeliveries.get("while running", 0) > 0
    assert small_run.redeliveries.get("after the end", 0) > 0
    assert small_run.late_writes["landed"] > 0


def test_the_report_is_words_and_figures_with_money_and_what_the_sweeper_did(small_run: ChaosReport) -> None:
    text = render(small_run)

    # No Python reprs: no dicts, lists or sets, no dataclass(field=...), no quoted keys.
    assert not re.search(r"[{}\[\]]|\w\(\w+=|'\w+': ", text), text
    assert "money" in text
    for currency in ("BRL", "EUR", "USD"):
        assert re.search(
            rf"  {currency}  ordered [\d,]+\.\d\d {currency}, billed [\d,]+\.\d\d {currency}", text
        )
    assert small_run.sweep, "the run left nothing for the sweeper"
    for resolved in small_run.sweep:
        assert f"  {resolved.order_id}  attempt {resolved.attempt}  {resolved.outcome}" in text
    assert "declined attempts sent to the provider again  0" in text


def test_the_report_page_shows_each_check_the_faults_fired_and_the_money_after_the_sweep(
    small_run: ChaosReport,
) -> None:
    page = render_report(
        {**small_run.to_dict(), "recorded": {"byError": {}, "leftOut": 0}}, kind="chaos", traces={}
    )

    checks = re.findall(r'<tr class="(ok|fail)" data-check="([^"]+)">', page)
    assert {check: state == "ok" for state, check in checks} == {
        html.escape(check, quote=True): ok for check, ok in small_run.checks.items()
    }
    fired = dict(re.findall(r'<tr data-fault="([^"]+)"><td>[^<]*</td><td class="num">(\d+)</td>', page))
    assert fired == {html.escape(kind, quote=True): str(n) for kind, n in small_run.faults_by_kind.items()}
    for entry in small_run.after.money:
        assert f'<td class="num">{output.money(entry.billed, entry.currency)}</td>' in page
    verdict = "PROMISE KEPT" if small_run.promise_kept else "PROMISE BROKEN"
    assert f"<title>saga chaos · {verdict}</title>" in page


def test_the_outage_leaves_orders_for_the_sweeper_and_the_relay_charges_them_later(
    small_run: ChaosReport,
) -> None:
    assert small_run.outage["callsFailed"] > 0, "the provider's outage met no call: start it earlier"
    outcomes = small_run.outcomes
    assert outcomes is not None
    assert outcomes.by_type["OrderNeedsReconciliation"] > 0
    assert small_run.sweep_counts.get("released", 0) > 0, "the sweeper released nothing NOT_CHARGED"
    assert outcomes.requeued, "the relay re-queued no order"
    # Each order sent again ends charged (or in another customer-visible end), never without an end.
    assert set(small_run.requeued_endings) <= {"OrderCharged", "OrderNeedsAttention", "OrderDeclined"}
    assert small_run.requeued_endings.get("OrderCharged", 0) > 0


def test_the_outcome_relay_is_faulted_and_every_order_still_has_its_one_final_outcome(
    small_run: ChaosReport,
) -> None:
    """The relay failed around its PutEvents and SendMessage (refused, throttled, answers lost, the
    function dying): the shard was retried from the failed record, and the outcome events are still
    exact: every order has its one final outcome, in agreement with the ledger."""
    assert small_run.faults_by_function.get("OutcomeRelayFunction", 0) > 0
    outcomes = small_run.outcomes
    assert outcomes is not None
    assert outcomes.exact, outcomes.problems or outcomes.missing


def test_the_sweeper_is_faulted_and_its_failed_ticks_are_swept_again_by_the_next(
    small_run: ChaosReport,
) -> None:
    """The sweeps are SweeperFunction's own invocations, and faults fired in them (at its points,
    and its secret or the provider's search or list failing around a tick): each failed tick was
    followed by the next, as EventBridge Scheduler's next run follows it, until one swept to the end,
    and the promise held."""
    assert small_run.sweeper_faults > 0, small_run.faults_by_function
    assert small_run.sweeper_troubles, "no trouble around a tick refused a call: raise the rate"
    assert small_run.sweeper_ticks.get("failed", 0) + small_run.sweeper_ticks.get("throttled", 0) > 0
    assert small_run.sweeper_ticks["swept"] > 0
    assert small_run.promise_kept, render(small_run)
    assert f"{small_run.sweeper_faults} sweeper faults fired" in render(small_run)


#: A few orders and no fault drawn: what fires is what the test plants.
QUIET = dataclasses.replace(
    SMALL,
    orders=4,
    copies=1,
    concurrency=1,
    step_fault_rate=0.0,
    start_fault_rate=0.0,
    relay_fault_rate=0.0,
    provider_fault_rate=0.0,
    stop_rate=0.5,
    redelivery_rate=0.0,
    sweeper_fault_rate=0.0,
    sweep_trouble_rate=0.0,
    outage_seconds=0.0,
    throttle_seconds=0.0,
    webhooks=False,
)


def test_faults_planted_in_the_sweeper_fire_in_chaos_sweeps_and_are_counted() -> None:
    planted = [
        Fault("SweeperFunction", "start", "throttle", attempt=1),
        Fault("SweeperFunction", "before:dynamodb.Query", "error_call", attempt=2),
    ]
    with chaos_stack(QUIET) as stack:
        stack.faults.extend(planted)
        report = run_chaos(stack, QUIET)
        # A tick whose container cannot read its key's secret fails at its first claim that needs Stripe,
        # before deciding anything (the sweeper reads the key for such a claim only): one left stale.
        stale = ClaimsStore(stack.stack.table_name, client=boto3.client("dynamodb", region_name=REGION))
        stale.claim(Order("ORDER-STALE-KEY", 1500, "BRL", "cus_1", "pm_card_visa"), token="dead-execution")
        ticks = SweeperTicks(stack, troubles={1: "secret unreadable"})
        unreadable, after = ticks.tick(), ticks.tick()

    assert [fault.fired for fault in planted] == [1, 1]
    assert (report.sweeper_ticks["throttled"], report.sweeper_ticks["failed"]) == (1, 1)
    assert report.sweeper_ticks["swept"] >= 1
    assert report.sweeper_faults == 2
    assert report.promise_kept, render(report)
    assert (unreadable[0], after[0]) == ("failed", "swept")
    assert ticks.troubles_fired == {"secret unreadable": 1}


def test_claims_and_releases_throttled_together_are_sent_back_and_charged_later(
    small_run: ChaosReport,
) -> None:
    """Lambda's concurrency exhausted: every Claim Order and Release Claim refused for a while. The
    orders that met it left no claim behind; the state machine sent each back itself, and the
    promise held (the verdict tests): nothing was lost."""
    assert small_run.throttle["throttles"] > 0, "the throttle window met no invocation: start it earlier"
    assert small_run.after.execution_outcomes.get("ClaimRetriedLater", 0) > 0
    assert "lambda throttled" in render(small_run)


def test_with_the_search_behind_the_grace_the_sweepers_decisions_rest_on_the_list(
    small_run: ChaosReport,
) -> None:
    assert small_run.search_lag_seconds > SEARCH_GRACE_SECONDS
    assert small_run.sweeper_requests["list"] > 0
    # The search saw none of the run's PaymentIntents: every charge the sweeper found, it found in
    # the list, and no release let a landed charge be charged again.
    assert small_run.sweep_counts.get("completed", 0) > 0
    assert small_run.after.double_charged_orders == 0


def test_every_order_has_exactly_one_final_outcome_event_that_agrees_with_the_ledger(
    small_run: ChaosReport,
) -> None:
    outcomes = small_run.outcomes
    assert outcomes is not None
    assert outcomes.missing == []
    assert outcomes.problems == []
    assert outcomes.charged_twice == []
    # The run's orders, and the debits redriven after their key expired.
    assert sum(outcomes.by_final.values()) == SMALL.orders + SMALL.expired_key_redrives
    assert outcomes.by_final["OrderCharged"] == small_run.after.charged
    assert outcomes.by_final["OrderDeclined"] == small_run.after.declined
    assert small_run.checks["each order exactly one final outcome event"]
    text = render(small_run)
    assert f"  {outcomes.by_type['OrderCharged']:6d}  OrderCharged" in text
    assert "       0  without a final outcome event" in text
    assert "       0  with two OrderCharged" in text


def test_the_verdict_fails_when_an_order_has_no_final_outcome_event(small: SmallRun) -> None:
    # The run's own events, but every delivery of one order's OrderCharged dropped, as if the relay
    # had lost it; and every other event delivered twice (at least once: that is allowed).
    finals = final_outcomes(small.events)
    order_id = next(o for o in small.order_ids if finals.get(o) == ["OrderCharged"])
    kept = [e for e in small.events if (e.order_id, e.detail_type) != (order_id, "OrderCharged")]

    outcomes = tally([*kept, *kept], small.order_ids, small.ledger)

    assert outcomes.missing == [order_id]
    assert outcomes.problems == []
    assert outcomes.duplicates >= len(kept)
    broken = dataclasses.replace(small.report, outcomes=outcomes)
    assert not broken.checks["each order exactly one final outcome event"]
    assert not broken.promise_kept
    assert "FAIL  each order exactly one final outcome event" in render(broken)


def test_an_order_lost_only_before_the_sweep_is_no_problem_in_the_report(small: SmallRun) -> None:
    # Before the sweep an order whose re-send still waits on the queue counts as lost; it is charged
    # later. The report's problems are what is wrong at the end: the report after the sweep.
    transient = "ORDER-X: lost (no claim; 1 execution(s) ended ClaimRetriedLater, 0 charges)"
    before = dataclasses.replace(small.report.before, problems=[transient])
    report = dataclasses.replace(small.report, before=before)
    assert transient not in render(report)

    stuck = dataclasses.replace(small.report.after, problems=[transient])
    assert transient in render(dataclasses.replace(small.report, after=stuck))


def test_the_verdict_fails_when_an_order_has_two_charge_events(small: SmallRun) -> None:
    charged = next(e for e in small.events if e.detail_type == "OrderCharged")
    again = dataclasses.replace(charged, detail={**charged.detail, "eventId": charged.event_id + "-again"})

    outcomes = tally([*small.events, again], small.order_ids, small.ledger)

    assert outcomes.charged_twice == [charged.order_id]
    assert not dataclasses.replace(small.report, outcomes=outcomes).promise_kept
    assert tally(small.events, small.order_ids, small.ledger).exact, "the run's own events are exact"


def test_the_same_seed_draws_the_same_faults() -> None:
    orders = make_orders(50, seed=3)

    first = plan_faults(orders, ChaosConfig(seed=3), random.Random(3))
    second = plan_faults(orders, ChaosConfig(seed=3), random.Random(3))

    assert [str(f) for f in first.faults] == [str(f) for f in second.faults]
    assert first.provider == second.provider
    assert first.faults


def charge(order_id: str, charge_id: str, attempt: int) -> LedgerEntry:
    return LedgerEntry(charge_id, order_id, str(attempt), 100, "brl", None, 0.0, "pm_card_visa", None)


def test_the_audit_catches_each_broken_invariant() -> None:
    claims = {
        "TWICE": {"status": "COMPLETED", "attempt": "1", "chargeId": "pi_1"},
        "RELEASED-BUT-CHARGED": {"status": "RELEASED", "attempt": "2"},
        "WRONG-CHARGE": {"status": "COMPLETED", "attempt": "1", "chargeId": "pi_other"},
        "FINE": {"status": "RELEASED", "attempt": "1"},
    }
    ledger = [
        charge("TWICE", "pi_1", 1),
        charge("TWICE", "pi_2", 2),
        charge("RELEASED-BUT-CHARGED", "pi_3", 1),
        charge("WRONG-CHARGE", "pi_4", 1),
        charge("FINE", "pi_5", 2),  # charged under a later attempt than the release: allowed
    ]

    problems = broken_invariants(claims, claims, ledger)

    assert [p.split(":")[0] for p in problems] == ["invariant 1", "invariant 7", "invariant 6", "invariant 7"]
    assert not any("FINE" in p for p in problems)


def test_saga_chaos_prints_a_json_report_and_exits_by_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--orders", "3", "--copies", "2", "--concurrency", "1", "--seed", "5", "--json"]
    status = main(["chaos", *flags, "--outage-start", "0", "--outage-seconds", "0.5", "--no-webhooks"])

    report = json.loads(capsys.readouterr().out)
    assert report["before"]["orders"] == 3
    assert report["outage"]["seconds"] == 0.5
    assert sum(report["outcomeEvents"]["byFinal"].values()) == 3
    assert report["before"]["deliveries"] >= 6  # and the customers' retries of declined orders
    assert report["webhooks"] is None  # --no-webhooks: no endpoint, no debit
    assert status == (0 if report["promiseKept"] else 1)


def test_money_counts_each_order_once_and_every_charge_it_got() -> None:
    orders = [
        {"orderId": "A", "amount": 15000, "currency": "BRL"},
        {"orderId": "B", "amount": 250, "currency": "BRL"},
        {"orderId": "C", "amount": 999, "currency": "BRL"},
        {"orderId": "D", "amount": 1000, "currency": "JPY"},
    ]
    charges = [
        dataclasses.replace(charge("A", "pi_1", 1), amount=15000),
        dataclasses.replace(charge("A", "pi_2", 2), amount=15000),
        dataclasses.replace(charge("D", "pi_3", 1), amount=1000, currency="jpy"),
    ]

    brl, jpy = money(orders, charges, {"A": "double-charged", "B": "declined", "C": "lost", "D": "charged"})

    assert (brl.ordered, brl.billed, brl.billed_twice, brl.declined, brl.not_billed) == (
        16249,
        30000,
        15000,
        250,
        999,
    )
    assert brl.format(brl.ordered) == "162.49 BRL"
    assert (jpy.ordered, jpy.billed) == (1000, 1000)
    assert jpy.format(jpy.billed) == "1,000 JPY"  # a whole-unit currency: no decimals


@pytest.mark.parametrize(
    ("claim", "charges", "ending"),
    [
        ({"status": "COMPLETED"}, 1, "charged"),
        ({"status": "RELEASED", "releaseReason": "DECLINED"}, 0, "declined"),
        ({"status": "RELEASED", "releaseReason": "NOT_CHARGED"}, 0, "released, not charged"),
        ({"status": "CLAIMED"}, 0, "needs-reconciliation"),
        (None, 0, "lost"),
        ({"status": "COMPLETED"}, 2, "double-charged"),
    ],
)
def test_an_order_released_not_charged_counts_as_lost(
    claim: dict[str, str] | None, charges: int, ending: str
) -> None:
    assert order_ending(claim, charges) == ending
    assert (ending in LOST_ENDINGS) == (ending in {"released, not charged", "lost"})


def test_webhooks_in_disorder_and_debits_settling_later_keep_the_promise(small_run: ChaosReport) -> None:
    assert small_run.promise_kept, render(small_run)
    hooks = small_run.webhooks
    assert hooks is not None
    # Every kind of disorder was drawn, and the endpoint's down window refused deliveries.
    assert hooks.duplicated > 0
    assert hooks.delayed > 0
    assert hooks.lost > 0
    assert hooks.down_began is not None
    assert hooks.refused_while_down > 0
    # Debits the bank accepted and debits it refused; each waited in Awaiting Settlement, unpaged.
    assert hooks.debits.get("succeeded", 0) > 0
    assert hooks.debits.get("failed", 0) > 0
    assert small_run.awaited_settlement > 0
    assert small_run.webhook_left_open == []
    assert small_run.settling_paged == []
    # Orders were closed by webhooks, by the sweeper and by their own executions.
    assert small_run.closed_by.get("a webhook", 0) > 0
    assert small_run.closed_by.get("the sweeper", 0) > 0
    assert small_run.closed_by.get("their own execution", 0) > 0
    assert sum(small_run.closed_by.values()) == SMALL.orders + SMALL.expired_key_redrives
    outcomes = small_run.outcomes
    assert outcomes is not None
    assert outcomes.by_type["OrderPaymentProcessing"] > 0
    assert "OrderPaymentProcessing" not in outcomes.by_final  # settling is never an end
    text = render(small_run)
    assert f"{hooks.duplicated} delivered twice, {hooks.reordered} overtaken by a later event" in text
    assert f"awaiting settlement  {small_run.awaited_settlement} orders waited (not an alarm)" in text
    assert "ok    no order a webhook resolved left in Needs Reconciliation" in text
    assert "ok    no settling payment paged (Awaiting Settlement is a state)" in text


#: Three orders, all paid by bank debit, every webhook event lost: nothing but the executions, the
#: hourly settlement check and the sweeper past the settlement window can close them.
LOST_SETTLEMENTS = dataclasses.replace(
    QUIET,
    orders=3,
    decline_rate=0.0,
    stop_rate=0.0,
    webhooks=True,
    debit_rate=1.0,
    debit_fail_rate=0.5,
    settle_seconds=0.5,
    webhook_lose_rate=1.0,
    webhook_down_seconds=0.0,
    expired_key_redrives=0,
)


def test_a_debit_whose_settlement_webhook_is_lost_is_closed_by_the_next_hourly_settlement_check() -> None:
    with chaos_stack(LOST_SETTLEMENTS) as stack:
        report = run_chaos(stack, LOST_SETTLEMENTS)

    assert report.promise_kept, render(report)
    assert report.webhooks is not None
    assert report.webhooks.lost == report.webhooks.events > 0
    # Each waited in Awaiting Settlement (the execution's own write), unpaged; once its bank answered,
    # the first settlement check asked Stripe by its PaymentIntent id and closed it, three weeks
    # before the sweeper would have found it past its settle-by date.
    assert report.awaited_settlement == 3
    assert report.backstop is not None
    assert (report.backstop.awaiting, report.backstop.closed, report.backstop.late) == (3, 3, [])
    assert report.backstop.checks == 1
    assert report.awaiting_before_sweep == 3
    assert report.before.execution_outcomes.get("NeedsReconciliation", 0) == 0
    assert report.settling_paged == []
    assert report.closed_by == {"the settlement check": 3}
    assert report.sweep == []
    assert report.after.charged + report.after.declined == 3
    assert report.after.charged == report.webhooks.debits.get("succeeded", 0)
    assert "ok    every awaiting debit closed within one settlement check of settling" in render(report)


def test_debits_redriven_after_the_key_expired_follow_their_payment_and_end_once(
    small_run: ChaosReport,
) -> None:
    """Stopped after the create, the PaymentIntent recorded by its processing webhook, redriven 25 hours
    later when Stripe no longer knows the key: each follows the PaymentIntent it recorded (Awaiting
    Settlement), sends no second create, and ends once as its bank answered, by its webhook or, where
    none came, by the next settlement check."""
    expiry = small_run.key_expiry
    assert expiry is not None
    assert len(expiry.orders) == expiry.recorded == expiry.redriven == SMALL.expired_key_redrives
    assert expiry.ended == {"AWAITING_SETTLEMENT": SMALL.expired_key_redrives}
    assert expiry.second_payments == []
    assert expiry.webhook_came > 0
    assert expiry.webhook_never_came > 0
    assert sum(expiry.bank.values()) == SMALL.expired_key_redrives
    assert small_run.backstop is not None
    assert small_run.backstop.closed >= expiry.webhook_never_came
    assert small_run.backstop.late == []
    outcomes = small_run.outcomes
    assert outcomes is not None
    assert all(outcomes.final_by_order.get(o) in ("OrderCharged", "OrderDeclined") for o in expiry.orders)
    assert small_run.charged_without_money == []
    assert small_run.after.double_charged_orders == 0
    text = render(small_run)
    assert "ok    no redrive after the idempotency key expired sent a second payment" in text
    assert "ok    no order charged without money taken" in text
    assert f"key expired, redrive {SMALL.expired_key_redrives} bank debits" in text


def test_the_verdict_fails_on_a_second_payment_a_late_settlement_or_a_charge_without_money(
    small: SmallRun,
) -> None:
    report = small.report
    assert report.key_expiry is not None
    assert report.backstop is not None
    second = "ORDER-X: 2 PaymentIntents (pi_1, pi_2)"
    late = "ORDER-Y: awaits pi_3 (settled at Stripe) after a settlement check ran to its end"
    free = "ORDER-Z: claim COMPLETED, no charge at the provider"
    broken = dataclasses.replace(
        report,
        key_expiry=dataclasses.replace(report.key_expiry, second_payments=[second]),
        backstop=dataclasses.replace(report.backstop, late=[late]),
        charged_without_money=[free],
    )

    assert not broken.promise_kept
    text = render(broken)
    assert "FAIL  no redrive after the idempotency key expired sent a second payment" in text
    assert "FAIL  every awaiting debit closed within one settlement check of settling" in text
    assert "FAIL  no order charged without money taken" in text
    assert all(f"  {line}" in text for line in (second, late, free))


def test_an_order_completed_or_announced_charged_with_no_charge_is_charged_without_money() -> None:
    from saga_local.harness.chaos_report import charged_without_money

    claims = {"A": {"status": "COMPLETED"}, "B": {"status": "COMPLETED"}, "C": {"status": "RELEASED"}}
    outcome_tally = tally([], ["A", "B", "C"])
    outcome_tally.final_by_order["C"] = "OrderCharged"
    ledger = [charge("B", "pi_1", 1)]

    assert charged_without_money(["A", "B", "C"], claims, ledger, outcome_tally) == [
        "A: claim COMPLETED, no charge at the provider",
        "C: OrderCharged published, no charge at the provider",
    ]


def test_the_verdict_fails_when_an_order_a_webhook_resolved_is_left_in_needs_reconciliation(
    small: SmallRun,
) -> None:
    # A succeeded webhook of the claim's attempt was delivered (the receiver answered 200), and the
    # claim is still CLAIMED: the consumer never closed it, and the order would page.
    delivered = DeliveryAttempt(
        "evt_1", "payment_intent.succeeded", "pi_1", "ORDER-HOOKED", "we_1", 1, 0.0, 200
    )
    intents = {"pi_1": {"id": "pi_1", "metadata": {"orderId": "ORDER-HOOKED", "attempt": "1"}}}
    open_claim = {"ORDER-HOOKED": {"status": "CLAIMED", "attempt": "1"}}

    left_open = left_open_by_webhook(open_claim, [delivered], intents)

    assert len(left_open) == 1
    assert left_open[0].startswith("ORDER-HOOKED: payment_intent.succeeded of pi_1")
    closed = {"ORDER-HOOKED": {"status": "COMPLETED", "attempt": "1", "chargeId": "pi_1"}}
    assert left_open_by_webhook(closed, [delivered], intents) == []
    broken = dataclasses.replace(small.report, webhook_left_open=left_open)
    assert not broken.promise_kept
    text = render(broken)
    assert "FAIL  no order a webhook resolved left in Needs Reconciliation" in text
    assert f"  {left_open[0]}" in text


def test_an_outage_and_a_throttle_the_run_ended_before_say_they_never_began() -> None:
    from saga_local.harness.chaos_troubles import LambdaThrottle, Outage
    from saga_local.stripe_emulator import ProviderEmulator

    outage = Outage(ProviderEmulator(), start_after=30, seconds=20)
    throttle = LambdaThrottle(None, start_after=45, seconds=60)
    outage.finish()  # the run ended before either began: both are called off
    throttle.finish()

    assert outage.line() == (
        "provider outage      never began: the run ended before its start, 30 s in"
        " (--outage-start sooner, or more --orders)"
    )
    assert throttle.line().startswith(
        "lambda throttled     never began: the run ended before its start, 45 s in"
    )
    assert Outage(ProviderEmulator(), start_after=30, seconds=0).line() == "provider outage      none"
    assert LambdaThrottle(None, start_after=45, seconds=0).line() == "lambda throttled     none"
