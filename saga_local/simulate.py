"""Many orders, duplicate deliveries and concurrency through a stack; then check the promise.

The report counts what a payments engineer asks first: charges, double-charged orders, lost
orders, and how each order ended, measured at the provider's ledger and the claims table, not
taken from the saga's own word.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.embedded import EmbeddedStack

DECLINING_CARD = "pm_card_chargeDeclined"


@dataclass
class Report:
    orders: int
    deliveries: int
    charges: int
    double_charged_orders: int
    lost_orders: int
    charged: int
    declined: int
    needs_reconciliation: int
    conflicts: int
    duplicates_suppressed: dict[str, int]
    executions: int
    execution_outcomes: dict[str, int]
    dead_lettered: int
    wall_seconds: float
    orders_per_second: float
    faults_injected: dict[str, int] = field(default_factory=dict)
    order_endings: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def promise_kept(self) -> bool:
        return self.double_charged_orders == 0 and self.lost_orders == 0


def make_orders(
    count: int, *, decline_rate: float = 0.0, seed: int = 7, prefix: str = "SIM"
) -> list[dict[str, Any]]:
    """Deterministic orders: the same arguments give the same orders."""
    rng = random.Random(seed)
    orders = []
    for i in range(count):
        declined = rng.random() < decline_rate
        orders.append(
            {
                "orderId": f"ORDER-{prefix}-{i:06d}",
                "amount": rng.randrange(100, 100_000),
                "currency": rng.choice(["BRL", "USD", "EUR"]),
                "customerId": f"cus_{rng.randrange(10_000):05d}",
                "paymentMethod": DECLINING_CARD if declined else "pm_card_visa",
            }
        )
    return orders


#: The producer keeps at most this many messages waiting: moto's SQS does work proportional to the
#: queue's depth on every send and receive, so a deep queue measures moto, not the saga.
MAX_QUEUE_DEPTH = 200
#: Executions in flight at once, locally (each is a thread in moto): enough to keep both cores busy
#: and the races real, few enough that the machine does not spend its time switching threads.
MAX_RUNNING_EXECUTIONS = 64


def shuffled_deliveries(orders: list[dict[str, Any]], copies: int, *, seed: int = 11) -> list[dict[str, Any]]:
    """Every order ``copies`` times, shuffled, as a misbehaving producer would send them."""
    bodies = [order for order in orders for _ in range(copies)]
    random.Random(seed).shuffle(bodies)
    return bodies


def send_all(stack: EmbeddedStack, bodies: list[dict[str, Any]], *, max_depth: int = MAX_QUEUE_DEPTH) -> None:
    """Send the bodies in batches of 10, never letting more than ``max_depth`` wait in the queue."""
    sqs = stack.driver.sqs
    for start in range(0, len(bodies), 10):
        while stack.driver.queue_depth() >= max_depth:
            time.sleep(0.05)
        chunk = bodies[start : start + 10]
        sqs.send_message_batch(
            QueueUrl=stack.stack.queue_url,
            Entries=[{"Id": str(i), "MessageBody": json.dumps(body)} for i, body in enumerate(chunk)],
        )


def progress_bar(done: int, total: int, began: float, stream: Any = sys.stderr) -> None:
    width = 30
    filled = int(width * done / total) if total else width
    rate = done / max(time.monotonic() - began, 1e-9)
    stream.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} executions  {rate:6.1f}/s")
    stream.flush()


def run(
    stack: EmbeddedStack,
    *,
    orders: int,
    copies: int,
    concurrency: int,
    decline_rate: float = 0.0,
    seed: int = 7,
    progress: Callable[[int, int, float], None] | None = None,
    timeout: float = 3600.0,
    prefix: str = "SIM",
) -> Report:
    """Send, pump until idle, and measure. ``concurrency`` is the number of concurrent pollers.

    ``prefix`` names the orders (``ORDER-<prefix>-000001``): runs on one stack need distinct ones.
    """
    batch = make_orders(orders, decline_rate=decline_rate, seed=seed, prefix=prefix)
    bodies = shuffled_deliveries(batch, copies, seed=seed)
    deliveries = len(bodies)
    began = time.monotonic()
    producer = threading.Thread(target=send_all, args=(stack, bodies), daemon=True)
    producer.start()
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(stack, stop, deliveries, began, progress), daemon=True)
    if progress is not None:
        watcher.start()
    try:
        stack.driver.pump(
            pollers=concurrency, timeout=timeout, busy=producer.is_alive, max_running=MAX_RUNNING_EXECUTIONS
        )
    finally:
        stop.set()
        if progress is not None:
            watcher.join()
    wall = time.monotonic() - began
    return measure(stack, batch, deliveries=deliveries, wall_seconds=wall)


def _watch(
    stack: EmbeddedStack,
    stop: threading.Event,
    total: int,
    began: float,
    progress: Callable[[int, int, float], None] | None,
) -> None:
    while not stop.wait(0.5):
        done = stack.driver.event_source.stats.deleted
        if progress is not None:
            progress(min(done, total), total, began)


def measure(
    stack: EmbeddedStack, orders: list[dict[str, Any]], *, deliveries: int, wall_seconds: float
) -> Report:
    """Read the ledger, the claims and the executions, and classify every order."""
    ledger = Counter(c.order_id for c in stack.provider.charges())
    claims = stack.driver.claims()
    outcomes = stack.driver.outcome_counts()
    executions = sum(outcomes.values())
    endings: Counter[str] = Counter()
    problems: list[str] = []
    for order in orders:
        order_id = order["orderId"]
        claim = claims.get(order_id)
        charges = ledger.get(order_id, 0)
        status = claim["status"] if claim else None
        if charges > 1:
            endings["double-charged"] += 1
            problems.append(f"{order_id}: {charges} charges")
        elif status == "COMPLETED" and charges == 1:
            endings["charged"] += 1
        elif status == "RELEASED" and charges == 0:
            endings["declined" if claim and claim.get("releaseReason") == "DECLINED" else "released"] += 1
        elif status == "CLAIMED":
            endings["needs-reconciliation"] += 1
        else:
            endings["lost"] += 1
            problems.append(f"{order_id}: claim {status}, {charges} charges")
    return Report(
        orders=len(orders),
        deliveries=deliveries,
        charges=sum(ledger.get(order["orderId"], 0) for order in orders),
        double_charged_orders=endings["double-charged"],
        lost_orders=endings["lost"],
        charged=endings["charged"],
        declined=endings["declined"],
        needs_reconciliation=endings["needs-reconciliation"],
        conflicts=outcomes.get("OrderConflict", 0),
        duplicates_suppressed={
            "start": max(stack.driver.event_source.stats.messages - executions, 0),
            "claim": outcomes.get("SUCCEEDED", 0) - endings["charged"],
        },
        executions=executions,
        dead_lettered=stack.driver.queue_depth(stack.stack.dead_letter_queue_url),
        execution_outcomes=dict(outcomes),
        wall_seconds=round(wall_seconds, 2),
        orders_per_second=round(len(orders) / wall_seconds, 2) if wall_seconds else 0.0,
        faults_injected=stack.faults.fired(),
        order_endings=dict(endings),
        problems=problems[:20],
    )


def render(report: Report) -> str:
    lines = [
        f"orders               {report.orders}",
        f"deliveries           {report.deliveries}",
        f"charges              {report.charges}",
        f"double-charged       {report.double_charged_orders}",
        f"lost                 {report.lost_orders}",
        f"charged              {report.charged}",
        f"declined             {report.declined}",
        f"needs reconciliation {report.needs_reconciliation}",
        f"order conflicts      {report.conflicts}",
        f"duplicates stopped   start {report.duplicates_suppressed['start']},"
        f" claim {report.duplicates_suppressed['claim']}",
        f"executions           {report.executions} {dict(sorted(report.execution_outcomes.items()))}",
        f"dead-lettered        {report.dead_lettered} deliveries (each with its reason, or after 5 receives)",
        f"wall time            {report.wall_seconds:.1f} s",
        f"orders per second    {report.orders_per_second:.1f}",
    ]
    if report.faults_injected:
        lines.append("faults injected")
        lines.extend(f"  {count:6d}  {kind}" for kind, count in sorted(report.faults_injected.items()))
    if report.problems:
        lines.append("problems")
        lines.extend(f"  {p}" for p in report.problems)
    return "\n".join(lines)
