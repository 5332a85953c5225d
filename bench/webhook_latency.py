"""From a missed Charge answer to a resolved claim: Stripe's webhooks against the sweeper alone.

    python bench/webhook_latency.py [--orders 10] [--record PATH]

Both halves run the same orders through the embedded stack as `saga up` wires it (the real ASL and
handlers in-process, the Stripe emulator sending signed webhooks to the receiver's local function
URL, the webhook queue's consumer), with every answer of the Charge step lost after the charge
landed at the provider (each retry too, so the execution ends in Needs Reconciliation, its claim
open). The clock starts when the charge lands (the emulator's ledger time):

* **webhooks**: the emulator's ``payment_intent.succeeded`` delivery; the clock stops when the claim
  row reads COMPLETED. Wall seconds, measured.
* **the sweeper alone**: every webhook delivery lost (``WebhookDisorder(lose=1.0)``); the real
  sweeper (``payment_saga.reconcile``, against the emulator's search) runs as its schedule would,
  every ``rate(...)`` of the template, on a clock moved forward instead of waited for (the lease is
  15 minutes). The sweeps' phase against the charge is spread evenly over one interval across the
  orders, as a schedule that does not know when the charge landed meets it. The clock stops at the
  first sweep that completes the claim. Seconds of that clock.

``ratio`` is the sweeper's median over the webhooks' median. stdout is one JSON object
(``"benchmark": "webhook_latency"``); the handlers' log and metric lines go to /dev/null.
``--record PATH`` also writes that object, with ``measured_on`` (the UTC time, the CPU count and the
load average it ran on, since the webhooks' wall time moves with them), to PATH: the recorded
figures that docs/performance.md is rendered from (saga_local/harness/figures.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

import boto3
from recording import record  # type: ignore[import-not-found]  # bench/, this script's
from throughput import stdout_for_json_only  # type: ignore[import-not-found]  # bench/, this script's

from payment_saga.claims import ClaimsStore
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import reconcile
from saga_local.aws.schedule_source import schedules
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.runtime.faults import Fault
from saga_local.stack.embedded import EmbeddedStack
from saga_local.stripe_emulator import WebhookDisorder
from saga_local.template import load_template

if TYPE_CHECKING:
    from collections.abc import Callable

#: As `saga up` compresses Stripe's retry waits: its queues' 30 s against the template's timeout.
TIME_SCALE = 30 / int(load_template()["Resources"]["OrdersQueue"]["Properties"]["VisibilityTimeout"])


def an_order(order_id: str) -> dict[str, Any]:
    return {
        "orderId": order_id,
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_123",
        "paymentMethod": "pm_card_visa",
    }


def charged_at(stack: EmbeddedStack, order_id: str) -> float:
    (landed,) = stack.provider.charges_for(order_id)
    return float(landed.time)


def claim_status(stack: EmbeddedStack, order_id: str) -> str | None:
    claim = stack.driver.claim(order_id)
    return None if claim is None else str(claim["status"])


def with_webhooks(stack: EmbeddedStack, orders: list[str]) -> list[float]:
    """Wall seconds from each charge landing to its claim reading COMPLETED, webhooks on."""
    seconds = []
    with stack.driver.polling():
        for order_id in orders:
            arn = stack.driver.start(an_order(order_id), name=f"webhook-{order_id}")
            deadline = time.monotonic() + 60
            while claim_status(stack, order_id) != "COMPLETED":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{order_id}: no webhook completed the claim in 60 s")
                time.sleep(0.002)
            done = time.time()
            seconds.append(done - charged_at(stack, order_id))
            stack.driver.wait(arn)
    return seconds


def stopped_at(moment: float) -> Callable[[], float]:
    """A clock that reads ``moment``: the sweep's time, as the sweeper's store sees it."""
    return lambda: moment


def sweeper_alone(stack: EmbeddedStack, orders: list[str], lease: int, every: float) -> list[float]:
    """Seconds (of a clock moved forward) from each charge to the first sweep that completes it.

    One order at a time: a sweep resolves every stale claim, so an order swept with others would be
    resolved by a sweep of another order's timeline."""
    stack.provider.webhooks.disorder = WebhookDisorder(lose=1.0)
    provider = StripeProvider(LOCAL_API_KEY, api_base=stack.provider.url)
    client = boto3.client("dynamodb", region_name=REGION)
    seconds = []
    try:
        for n, order_id in enumerate(orders):
            with stack.driver.polling():
                stack.driver.wait(stack.driver.start(an_order(order_id), name=f"sweeper-{order_id}"))
            if claim_status(stack, order_id) != "CLAIMED":
                raise RuntimeError(f"{order_id}: the claim was resolved without the sweeper")
            start = charged_at(stack, order_id)
            sweep_at = start + every * n / len(orders)  # this order's phase against the schedule
            while claim_status(stack, order_id) != "COMPLETED":
                sweep_at += every
                if sweep_at - start > 30 * 24 * 3600:
                    raise TimeoutError(f"{order_id}: no sweep completed the claim in 30 days")
                store = ClaimsStore(
                    stack.stack.table_name, client=client, clock=stopped_at(sweep_at), lease_seconds=lease
                )
                reconcile(store, provider, now=sweep_at, apply=True)
            seconds.append(sweep_at - start)
    finally:
        provider.close()
    return seconds


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def result(
    orders: int, hooked: list[float], swept: list[float], lease: int, every: float, promise_kept: bool
) -> dict[str, Any]:
    """The benchmark's JSON object: what it prints and what ``--record`` writes."""
    webhooks, sweeper = summary(hooked), summary(swept)
    return {
        "benchmark": "webhook_latency",
        "orders": orders,
        "webhook_seconds": webhooks,
        "sweeper_seconds": sweeper,
        "ratio": round(sweeper["median"] / webhooks["median"]),
        "lease_seconds": lease,
        "sweep_every_seconds": every,
        "promise_kept": promise_kept,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=10)
    parser.add_argument(
        "--record", type=Path, metavar="PATH", help="also write the result, and the machine's facts, to PATH"
    )
    args = parser.parse_args()
    with stdout_for_json_only() as out:
        with EmbeddedStack(
            runtime="inprocess", webhooks=True, webhook_time_scale=TIME_SCALE, quiet=True
        ) as stack:
            # Every Charge answer lost once the charge landed, its retries' too.
            stack.faults.add(Fault("ChargePaymentFunction", "after:provider.charge", "die", times=10**6))
            environments = [env for _, env in stack.stack.functions.values()]
            lease = int(
                next(env for env in environments if "CLAIM_LEASE_SECONDS" in env)["CLAIM_LEASE_SECONDS"]
            )
            specs = {spec.logical_id: spec for spec, _ in stack.stack.functions.values()}
            (sweep,) = [
                s for s in schedules(specs) if (s.logical_id, s.event_name) == ("SweeperFunction", "Sweep")
            ]
            hooked = with_webhooks(stack, [f"BENCH-WH-{n}" for n in range(args.orders)])
            swept = sweeper_alone(stack, [f"BENCH-SW-{n}" for n in range(args.orders)], lease, sweep.seconds)
            per_order = collections.Counter(entry.order_id for entry in stack.provider.charges())
        promise_kept = len(per_order) == 2 * args.orders and set(per_order.values()) == {1}
        measured = result(args.orders, hooked, swept, lease, sweep.seconds, promise_kept)
        if args.record is not None:
            record(args.record, measured)
        print(json.dumps(measured), file=out)


if __name__ == "__main__":
    main()
