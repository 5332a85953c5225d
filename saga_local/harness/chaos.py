"""``saga chaos``: many orders, duplicate deliveries and random faults everywhere; then the sweeper.

Every order is sent ``--copies`` times through SQS (``saga simulate``'s producer), and faults are
drawn at random, reproducibly from ``--seed``:

* for each order and each step function (Claim, Charge, Mark Complete, Release), with
  :attr:`ChaosConfig.step_fault_rate`, one fault of any kind at any point of that function
  (:data:`~saga_local.runtime.faults.POINTS`, :func:`~saga_local.runtime.faults.kinds_at`): deaths, timeouts,
  out-of-memory, Lambda throttles, DynamoDB throttles and 500s, stalls, requests applied whose
  answer is lost and that botocore (or the provider's HTTP client) sends again, and writes sent by
  a Lambda that dies and landing later, after the state machine moved on; sometimes aimed at a
  later invocation (a retry) rather than the first;
* on the start function, with :attr:`ChaosConfig.start_fault_rate` per invocation (a batch);
* on the outcome relay, with :attr:`ChaosConfig.relay_fault_rate` per invocation (a batch of the
  claims table's stream): any kind at any of its points (its PutEvents and SendMessage refused,
  throttled, applied with the answer lost, or the relay dying around them), so that the shard
  stalls and is retried from the failed record, and a re-queue sent twice must still run once;
* on the sweeper, with :attr:`ChaosConfig.sweeper_fault_rate` per tick of its schedule (its first
  :data:`~saga_local.harness.chaos_plan.SWEEPER_TICKS_FAULTED` invocations): any kind at any of its
  points, dealt from a shuffled deck of them (its lock's and its claims' UpdateItem, the index's
  Query, the GetItem after a fenced write lost, its start and end), and with
  :attr:`ChaosConfig.sweep_trouble_rate` per tick, its key's secret unreadable or the provider's
  search or list down for that tick; a tick that failed is followed by the next, as EventBridge
  Scheduler's next run follows it;
* at the provider, with :attr:`ChaosConfig.provider_fault_rate` per order: every kind the
  emulator injects (500 before or after applying, a 500 saved under the key, resets, hangs);
* with :attr:`ChaosConfig.stop_rate` per order, the execution is stopped half-way (``stop``);
* with :attr:`ChaosConfig.redelivery_rate` per delivery, SQS delivers a message again (same
  MessageId), half of them while the execution it started runs and half after it ended;
* with :attr:`ChaosConfig.retry_rate` per declined order, the customer pays again (a new
  ``paymentAttempt``, with a card that works or not), and the first attempt arrives once more
  afterwards: a declined attempt must never reach the provider again;
* a provider outage (:class:`Outage`): from :attr:`ChaosConfig.outage_start_seconds` into the run,
  for :attr:`ChaosConfig.outage_seconds` of wall time (3 minutes by default), every call to every
  endpoint of the provider fails (a 500 before anything is applied). The charges of that window
  end in Needs Reconciliation with their claims kept; the sweeper releases them NOT_CHARGED and the
  outcome relay puts them back on the orders queue, where they must be charged exactly once;
* Lambda's concurrency exhausted (:class:`LambdaThrottle`): from
  :attr:`ChaosConfig.throttle_start_seconds` into the run, for :attr:`ChaosConfig.throttle_seconds`
  (a minute by default), every invocation of Claim Order and Release Claim is throttled, retries
  included: a failed claim that cannot even be fenced, which the state machine itself must send
  back to the orders queue;
* with :attr:`ChaosConfig.webhooks` (the default), Stripe's webhooks on and in disorder, and bank
  debits (:mod:`saga_local.harness.chaos_webhooks`): every event delivered twice, overtaken,
  delayed or lost at its own rate, the endpoint down for :attr:`ChaosConfig.webhook_down_seconds`,
  and :attr:`ChaosConfig.debit_rate` of the orders that do not decline paid by a debit whose charge
  answers ``processing`` and which the bank settles :attr:`ChaosConfig.settle_seconds` later,
  succeeded or (:attr:`ChaosConfig.debit_fail_rate`) failed; the sweeps leave a debit awaiting its
  bank alone (its claim's lease runs to its settle-by date), and once the sweep is done the
  sweeper's hourly settlement check runs until it has closed those whose settlement webhook was
  lost (:mod:`saga_local.harness.chaos_settlements`), each by the first check that ran to its end;
* after the sweep, with webhooks on, :attr:`ChaosConfig.expired_key_redrives` orders of their own
  paid by bank debit are redriven after Stripe forgot their idempotency key: the create applied and
  its answer lost, the execution stopped in Charge Payment, the ``processing`` webhook recording the
  PaymentIntent on the claim, the emulator's clock moved on 25 hours, the execution redriven; then
  their bank answers, their webhook comes for half of them, and the settlement check closes the
  others. From then on they count as orders of the run;
* the provider's search lags :attr:`ChaosConfig.search_lag_seconds` (two hours by default), longer
  than the sweeper's grace (one hour): the search sees none of the run's PaymentIntents, so every
  release rests on the list (``GET /v1/payment_intents``) and every completion the sweeper makes
  was found there.

Then every write still in flight lands, the sweeper runs with a clock past every lease and the
search grace, and "later" is played out: the relay re-queues what was released, delayed messages
are delivered, they run, and what they leave open is swept again, until nothing moves. Every
sweep is SweeperFunction itself, invoked through the runtime as its schedule invokes it (its
handler, its sweep lock, its role and the faults aimed at it), ticking until one tick sweeps to the
end, and reading every page of the provider's list a claim's proof needs (its
``CLAIM_LIST_PAGE_CAP``: :mod:`saga_local.harness.chaos_sweep`). The report
says, at the provider's ledger and in the claims table: charges, double charges, lost orders (a
claim released NOT_CHARGED is lost until the order is charged), declined attempts sent to the
provider again, the money ordered and billed per currency, how each order ended before and after
the sweep, which orders the sweeper resolved and how, how its ticks ended and the sweeper faults
that fired, the outage and the search lag, the outcome
events (one line per type) counted against the orders
(:func:`saga_local.harness.outcomes.tally`: after deduplication by ``eventId`` every order has
exactly one final outcome event, or declines of earlier payment attempts before it, and it agrees
with the provider's ledger), what closed each order (its execution, a webhook, the settlement
check, the sweeper), the webhooks' disorder and the debits, the settlement checks, the redrives
after the key expired, and the verdict.
The exit status is 0 only if the promise held: no order charged twice, none lost, no declined
attempt sent again, every needs-reconciliation resolved, invariants 6 (release only on proof) and
7 (the completed charge is the ledger's) unbroken, the outcome events exact
(``OrderPaymentProcessing`` is never an end), no order a delivered webhook resolved left open or
paged, no payment that was only settling paged, no debit its bank had answered left open by a
settlement check that ran to its end, no redrive after the key expired sending a second payment,
and no order completed or announced charged with no charge at the provider.

The stack is the embedded one, in-process (``retry_time_scale=0``: the ASL's Retry waits are
recorded, not slept), with a short visibility timeout so redriven messages come back in seconds.
The handlers' JSON logs go to ``--log-file`` (discarded by default).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from saga_local.harness import simulate
from saga_local.harness.chaos_forgeries import Planted, moved, plant
from saga_local.harness.chaos_plan import ChaosConfig, FaultSchedule, plan_faults
from saga_local.harness.chaos_report import (
    ChaosReport,
    broken_invariants,
    charged_without_money,
    count_outcome_events,
)
from saga_local.harness.chaos_settlements import (
    Backstop,
    KeyExpiry,
    expiry_orders,
    redrive_after_key_expiry,
    settlement_backstop,
)
from saga_local.harness.chaos_sweep import (
    SWEEPER_FUNCTION,
    SweeperTicks,
    sweep_and_play_out_later,
    wait_for_settlements,
)
from saga_local.harness.chaos_troubles import LambdaThrottle, Outage, Redeliverer
from saga_local.harness.chaos_webhooks import (
    EndpointDown,
    arm,
    awaited_settlement,
    closed_by,
    left_open_by_webhook,
    paged_needlessly,
    summarize,
)
from saga_local.runtime.faults import declined_attempts_sent_again

#: The sweeper's words for a decision it could not take because the provider did not answer
#: (``payment_saga.reconcile``: its search or its list failed).
PROVIDER_COULD_NOT_TELL = "cannot tell yet"

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.harness.chaos_sweep import Resolved
    from saga_local.harness.outcomes import OutcomeTally
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.stripe_emulator import ProviderFault


def run_chaos(
    stack: EmbeddedStack,
    config: ChaosConfig,
    *,
    progress: Callable[[int, int, float], None] | None = None,
) -> ChaosReport:
    """Inject, run (``simulate.run``) through the outage, redeliver, land late writes, measure, sweep
    and play out later, measure again, and count the outcome events against the orders."""
    began = time.monotonic()
    rng = random.Random(config.seed)
    orders = simulate.make_orders(config.orders, decline_rate=config.decline_rate, seed=config.seed)
    schedule = plan_faults(orders, config, rng)
    stack.faults.extend(schedule.faults)
    provider_faults = _inject_provider_faults(stack, schedule)
    stack.provider.search_lag_seconds = config.search_lag_seconds
    redeliveries = Redeliverer(
        stack,
        orders,
        budget=round(config.orders * config.copies * config.redelivery_rate),
        seed=config.seed + 1,
    )
    outage = Outage(stack.provider, start_after=config.outage_start_seconds, seconds=config.outage_seconds)
    throttle = LambdaThrottle(
        stack, start_after=config.throttle_start_seconds, seconds=config.throttle_seconds
    )
    down = arm(stack, config, schedule.debits) if config.webhooks else None
    outage.start()
    throttle.start()
    if down is not None:
        down.start()
    redeliveries.start()
    try:
        ran = simulate.run(
            stack,
            orders=config.orders,
            copies=config.copies,
            concurrency=config.concurrency,
            decline_rate=config.decline_rate,
            seed=config.seed,
            progress=progress,
            retry_rate=config.retry_rate,
        )
    except BaseException:
        outage.abort()
        raise
    finally:
        redeliveries.stop()
        throttle.finish()
        if down is not None:
            down.finish()
    _settle_after_the_run(stack, outage, redeliveries, webhooks=config.webhooks)
    order_ids = [order["orderId"] for order in orders]
    before = simulate.measure(stack, orders, deliveries=ran.deliveries, wall_seconds=ran.wall_seconds)
    claims_before = stack.driver.claims()
    violations_before = broken_invariants(order_ids, claims_before, stack.provider.charges())
    left_open = _left_open(stack, claims_before) if config.webhooks else []

    sweep_began = time.monotonic()
    # An hour and a quarter on, not three weeks: a debit awaiting its bank keeps its claim's lease to
    # its settle-by date, and the sweep leaves it to the settlement check.
    ticks = SweeperTicks(stack, troubles=schedule.sweep_troubles)
    swept, sweeper_requests = sweep_and_play_out_later(stack, ticks)
    sweep_seconds = time.monotonic() - sweep_began
    # The bank has answered every debit: the hourly settlement check closes those whose webhook was
    # lost. After the sweep's ticks, so that the faults aimed at them still meet them.
    backstop = settlement_backstop(stack, order_ids) if config.webhooks else None
    expiry = _redrive_after_key_expiry(stack, config, backstop, [throttle, down])
    forged = _forge(stack, order_ids, config)
    # From here on the redriven debits are orders of the run like the others.
    orders = orders + (expiry_orders(config) if expiry is not None else [])
    order_ids = [order["orderId"] for order in orders]
    after = simulate.measure(stack, orders, deliveries=ran.deliveries, wall_seconds=ran.wall_seconds)
    claims_after = stack.driver.claims()
    violations_after = broken_invariants(order_ids, claims_after, stack.provider.charges())

    by_kind, by_function = _fired(stack, ticks, provider_faults)
    requests = getattr(stack.runtime, "charge_requests", None)
    return ChaosReport(
        config=config,
        before=before,
        after=after,
        faults_by_kind={k: n for k, n in sorted(by_kind.items()) if n},
        faults_by_function={k: n for k, n in sorted(by_function.items()) if n},
        faults_planned=len(schedule.faults) + len(provider_faults) + len(schedule.sweep_troubles),
        redeliveries=dict(redeliveries.counts),
        sweep=swept,
        sweep_seconds=round(sweep_seconds, 2),
        dead_letters=len(stack.driver.dead_letters()),
        violations_before=violations_before,
        violations_after=violations_after or [],
        wall_seconds=round(time.monotonic() - began, 2),
        declined_sent_again=declined_attempts_sent_again(requests.requests) if requests else [],
        late_writes={
            "landed": len(stack.faults.late.landed),
            "failed to land": len(stack.faults.late.failed),
        },
        outage=outage.to_dict(),
        outage_line=outage.line(),
        throttle=throttle.to_dict(),
        throttle_line=throttle.line(),
        search_lag_seconds=stack.provider.search_lag_seconds,
        sweeper_requests=dict(sweeper_requests),
        sweeper_ticks=dict(ticks.ends),
        sweeper_troubles=dict(ticks.troubles_fired),
        outcomes=(outcomes := count_outcome_events(stack, order_ids)),
        webhooks=summarize(stack.provider, down, schedule.debits) if down is not None else None,
        awaiting_before_sweep=sum(1 for o in order_ids if _awaiting(claims_before.get(o))),
        forgeries_planted=forged.by_kind if forged is not None else {},
        # Closed claims only: nothing after the forgeries (the sweep included) may move them.
        forgeries_believed=moved(stack, forged) if forged is not None else [],
        charged_without_money=charged_without_money(
            order_ids, claims_after, stack.provider.charges(), outcomes
        ),
        backstop=backstop,
        key_expiry=expiry,
        **_webhook_verdict(stack, order_ids, outcomes, swept, left_open),
    )


def _fired(
    stack: EmbeddedStack, ticks: SweeperTicks, provider_faults: list[ProviderFault]
) -> tuple[Counter[str], Counter[str]]:
    """The faults that fired, by kind and by function (the sweeper's troubles and the provider's
    faults included)."""
    by_kind = Counter(stack.faults.fired_by_kind())
    by_function: Counter[str] = Counter()
    for fault in stack.faults.faults:  # the plan's, the throttle's, and any a caller planted
        by_function[fault.function] += fault.fired
    for trouble, n in ticks.troubles_fired.items():
        by_kind[f"sweeper {trouble}"] += n
        by_function[SWEEPER_FUNCTION] += n
    for provider_fault in provider_faults:
        by_kind[f"provider {provider_fault.kind}"] += provider_fault.fired
        by_function["provider"] += provider_fault.fired
    return by_kind, by_function


def _redrive_after_key_expiry(
    stack: EmbeddedStack,
    config: ChaosConfig,
    backstop: Backstop | None,
    windows: list[LambdaThrottle | EndpointDown | None],
) -> KeyExpiry | None:
    """The redrives after Stripe forgot the key (``chaos_settlements``), once the run's orders are
    swept: the emulator's clock moves on a day, which the sweeps' proofs never see. Their settlement
    checks count in ``backstop``. Lambda's throttle and the webhook endpoint's down window are over
    by then (a day has passed): one still under way when a short run ended is waited out."""
    if not (config.webhooks and config.expired_key_redrives) or backstop is None:
        return None
    for window in windows:
        if window is not None:
            window.wait_out()
    expiry, checked = redrive_after_key_expiry(stack, config, random.Random(config.seed + 7))
    backstop.add(checked)
    return expiry


def _forge(stack: EmbeddedStack, order_ids: list[str], config: ChaosConfig) -> Planted | None:
    """Forged webhook messages on the queue, once the orders ran and the sweeper closed what they left,
    on orders already closed: whatever
    the consumer makes of them is its own doing. It reads each PaymentIntent from Stripe, and believes
    none of them (``chaos_forgeries``)."""
    if not (config.webhooks and config.forgeries):
        return None
    forged = plant(stack, order_ids, count=config.forgeries, seed=config.seed + 5)
    simulate.settle(stack)
    return forged


def _settle_after_the_run(
    stack: EmbeddedStack, outage: Outage, redeliveries: Redeliverer, *, webhooks: bool
) -> None:
    outage.finish()  # the outage lasts its whole window; what it left open is settled below
    redeliveries.after_the_end()
    simulate.settle(stack)
    stack.faults.late.land_all()  # every write still in flight lands before anything is judged
    simulate.settle(stack)
    if webhooks:
        # The bank answers every debit, and its webhook (if not lost) is delivered and consumed.
        wait_for_settlements(stack.provider)
        simulate.settle(stack)


def _awaiting(claim: dict[str, Any] | None) -> bool:
    return bool(claim and claim.get("status") == "CLAIMED" and claim.get("settlementIntentId"))


def _left_open(stack: EmbeddedStack, claims: dict[str, dict[str, Any]]) -> list[str]:
    """Orders whose claim a delivered webhook should have closed, still open (before the sweep)."""
    attempts = stack.provider.webhooks.attempts()
    intents = {i["id"]: i for i in stack.provider.payment_intents()}
    return left_open_by_webhook(claims, attempts, intents)


def _webhook_verdict(
    stack: EmbeddedStack,
    order_ids: list[str],
    outcomes: OutcomeTally | None,
    swept: list[Resolved],
    left_open: list[str],
) -> dict[str, Any]:
    """What closed each order, who waited for their bank, and who was paged needlessly: the
    :class:`ChaosReport` fields read from the outcome events and the sweeps."""
    log = stack.driver.outcome_log
    mine = set(order_ids)
    events = [e for e in (log.collect() if log is not None else []) if e.order_id in mine]
    after_webhook, while_settling = paged_needlessly(events)
    # Every sweep came after the bank had answered each debit (chaos waits for it): an overdue
    # settlement is a page for a settled payment. One the sweeper could not ask the provider about
    # (its search or list down in that tick) is the sweeper's "unknown is not no", shown on its own;
    # one the provider answered is a needless page.
    overdue = [r for r in swept if r.settlement_overdue]
    unasked = [r for r in overdue if PROVIDER_COULD_NOT_TELL in r.reason]
    needless = [
        f"{r.order_id}: settlement overdue at attempt {r.attempt}, the provider answered: {r.reason}"
        for r in overdue
        if r not in unasked
    ]
    claims = stack.driver.claims()
    return {
        "closed_by": closed_by(events, outcomes.final_by_order, claims) if outcomes is not None else {},
        "awaited_settlement": awaited_settlement(events),
        "webhook_left_open": left_open + after_webhook,
        "settling_paged": while_settling + needless,
        "overdue_unasked": [f"{r.order_id}  attempt {r.attempt}" for r in unasked],
    }


def _inject_provider_faults(stack: EmbeddedStack, schedule: FaultSchedule) -> list[ProviderFault]:
    injected: list[ProviderFault] = []
    for planned in schedule.provider:
        # A hang is held briefly, then cut: to the SDK the same unknown outcome as a read timeout.
        seconds = 0.2 if planned.kind == "timeout_after_apply" else None
        injected.append(
            stack.provider.inject(
                planned.kind, order_id=planned.order_id, times=planned.times, seconds=seconds
            )
        )
    return injected
