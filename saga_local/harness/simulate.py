"""Many orders, duplicate deliveries and concurrency through a stack; then check the promise.

The report counts what a payments engineer asks first: charges, double-charged orders, lost
orders, how each order ended, and the money (ordered against billed, per currency), measured at the
provider's ledger and the claims table, not taken from the saga's own word.

An order is *lost* unless it was charged or ended in an outcome the customer sees (declined; a
conflict or a rejection never reaches the claims table as the same order), or is still waiting for
the sweeper (needs reconciliation). A claim released as ``NOT_CHARGED`` proves the order was never
charged, which is not an end: it counts as lost until the order is charged.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from saga_local.output import plural

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from saga_local.stack.driver import ExecutionSummary
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.trace.report import Kind

DECLINING_CARD = "pm_card_chargeDeclined"
#: Digits after the decimal point where a currency's minor unit is not a hundredth (ISO 4217).
_EXPONENTS = {
    **dict.fromkeys(("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG"), 0),
    **dict.fromkeys(("RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}
#: How an order can end (``Report.order_endings``); the lost ones are counted in ``lost_orders``.
LOST_ENDINGS = frozenset({"lost", "released, not charged"})


@dataclass
class Money:
    """One currency's amounts, in minor units."""

    currency: str
    ordered: int = 0  # every order, once
    billed: int = 0  # every charge at the provider
    declined: int = 0  # orders that ended declined
    billed_twice: int = 0  # charges beyond an order's first
    not_billed: int = 0  # orders neither charged nor declined (lost, or awaiting the sweeper)

    def format(self, amount: int) -> str:
        exponent = _EXPONENTS.get(self.currency, 2)
        whole = f"{amount / 10**exponent:,.{exponent}f}"
        return f"{whole} {self.currency}"


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
    money: list[Money] = field(default_factory=list)
    #: Why each lost order was lost (every one is counted here; ``problems`` names the first few).
    lost_reasons: dict[str, int] = field(default_factory=dict)

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


def customer_retries(
    orders: list[dict[str, Any]], *, rate: float, seed: int = 7
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Customers whose card was declined try again: ``(retries, late_copies)``.

    A share ``rate`` of the declining orders is paid again as ``paymentAttempt`` ``retry-1``, half of
    them with a card that works and half with one that declines again; each of those orders is also
    sent once more as it first was, late (a producer's duplicate arriving after the retry), which
    must never reach the provider again once declined.
    """
    rng = random.Random(seed + 101)
    retries: list[dict[str, Any]] = []
    late: list[dict[str, Any]] = []
    for order in orders:
        if order["paymentMethod"] != DECLINING_CARD or rng.random() >= rate:
            continue
        card = DECLINING_CARD if rng.random() < 0.5 else "pm_card_visa"
        retries.append({**order, "paymentMethod": card, "paymentAttempt": "retry-1"})
        late.append(order)
    return retries, late


#: The producer keeps at most this many messages waiting: moto's SQS does work proportional to the
#: queue's depth on every send and receive, so a deep queue measures moto, not the saga.
MAX_QUEUE_DEPTH = 200
#: Executions in flight at once, locally (each is a thread in moto): enough to keep both cores busy
#: and the races real, few enough that the machine does not spend its time switching threads.
MAX_RUNNING_EXECUTIONS = 64


#: How often a run with ``retire_after`` retires closed executions.
RETIRE_EVERY_SECONDS = 2.0
#: ``saga simulate``'s horizon: a succeeded execution leaves moto 5 s after it closed (Step
#: Functions keeps them 90 days; a local run keeps what its report needs). The longer the horizon,
#: the more executions a run holds at once, and its peak memory grows with them (bench/memory.py
#: records the peak at this one: docs/performance.md).
RETIRE_AFTER_SECONDS = 5.0


def shuffled_deliveries(orders: list[dict[str, Any]], copies: int, *, seed: int = 11) -> list[dict[str, Any]]:
    """Every order ``copies`` times, shuffled, as a misbehaving producer would send them."""
    bodies = [order for order in orders for _ in range(copies)]
    random.Random(seed).shuffle(bodies)
    return bodies


def send_all(stack: EmbeddedStack, bodies: list[dict[str, Any]], *, max_depth: int = MAX_QUEUE_DEPTH) -> None:
    """Send the bodies in batches of 10, never letting more than ``max_depth`` wait in the queue."""
    sqs = stack.driver.sqs
    for start in range(0, len(bodies), 10):
        # Delayed messages (orders sent back for minutes) are not waited on: they would hold the
        # producer until a delay no local run sits out.
        while stack.driver.backlog() >= max_depth:
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
    retry_rate: float = 0.0,
    retire_after: float | None = None,
) -> Report:
    """Send, pump until idle, and measure. ``concurrency`` is the number of concurrent pollers.

    ``prefix`` names the orders (``ORDER-<prefix>-000001``): runs on one stack need distinct ones.
    ``retry_rate`` is the share of declined orders whose customer pays again
    (:func:`customer_retries`): their retries, ``copies`` each, and one late copy of the first
    attempt are sent after every first delivery.
    ``retire_after`` (seconds) retires succeeded executions closed that long ago while the run goes
    on (:meth:`~saga_local.stack.driver.Driver.retire_executions`), so that a long run's memory stays
    bounded; the report still counts them.
    """
    batch = make_orders(orders, decline_rate=decline_rate, seed=seed, prefix=prefix)
    bodies = shuffled_deliveries(batch, copies, seed=seed)
    retries, late = customer_retries(batch, rate=retry_rate, seed=seed)
    bodies += shuffled_deliveries(retries, copies, seed=seed) + late
    deliveries = len(bodies)
    scope = RunScope.now(stack)
    began = time.monotonic()
    producer = threading.Thread(target=send_all, args=(stack, bodies), daemon=True)
    producer.start()
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(stack, stop, deliveries, began, progress), daemon=True)
    if progress is not None:
        watcher.start()
    try:
        settle(
            stack,
            pollers=concurrency,
            timeout=timeout,
            busy=producer.is_alive,
            max_running=MAX_RUNNING_EXECUTIONS,
            retire_after=retire_after,
        )
    finally:
        stop.set()
        if progress is not None:
            watcher.join()
    wall = time.monotonic() - began
    return measure(stack, batch, deliveries=deliveries, wall_seconds=wall, scope=scope)


def settle(
    stack: Any,
    *,
    pollers: int = 2,
    timeout: float = 600.0,
    busy: Callable[[], bool] | None = None,
    max_running: int | None = None,
    retire_after: float | None = None,
) -> None:
    """Run the orders queue's pollers and the outcome relay until nothing can happen *now*: no
    message visible or in flight, no execution running, the relay drained.

    Messages delayed into the future (an order re-queued behind an open payment attempt waits 15
    minutes) are left for later; :func:`saga_local.aws.moto_adapter.deliver_delayed_messages` lets
    that time pass. (``Driver.pump`` waits for them, which locally means waiting those minutes.)

    ``retire_after`` (seconds), if given, retires succeeded executions closed that long ago every
    :data:`RETIRE_EVERY_SECONDS` (:meth:`~saga_local.stack.driver.Driver.retire_executions`).
    """
    driver = stack.driver
    deadline = time.monotonic() + timeout
    with driver.polling(pollers=pollers, max_running=max_running), _retiring(driver, retire_after):
        while time.monotonic() < deadline:
            relayed = driver.relay() if hasattr(driver, "relay") else 0
            if (busy is None or not busy()) and not relayed and _idle(driver):
                time.sleep(0.05)  # a poller mid-batch finishes before the stack is called idle
                if _idle(driver) and not (driver.relay() if hasattr(driver, "relay") else 0):
                    return
            time.sleep(0.1)
        raise TimeoutError(f"stack still busy after {timeout} s")


@contextlib.contextmanager
def _retiring(driver: Any, retire_after: float | None) -> Iterator[None]:
    """Retire closed executions every :data:`RETIRE_EVERY_SECONDS` in a thread of its own while the
    block runs (the loop of :func:`settle` can spend a long time in one relay drain)."""
    if retire_after is None:
        yield
        return
    stop = threading.Event()

    def retire() -> None:
        while not stop.wait(RETIRE_EVERY_SECONDS):
            driver.retire_executions(closed_for=retire_after)

    thread = threading.Thread(target=retire, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _idle(driver: Any) -> bool:
    attributes = driver.sqs.get_queue_attributes(
        QueueUrl=driver.stack.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    if any(int(v) for v in attributes.values()) or driver.running():
        return False
    # Stripe's webhooks (a stack that serves them): a delivery still to come can still move a claim.
    return bool(getattr(driver, "webhooks_idle", lambda: True)())


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


@dataclass(frozen=True)
class RunScope:
    """What a report counts as its own run on a stack that may have run others before it: the
    executions started since ``since`` for its orders, the messages received beyond
    ``messages_before``."""

    since: datetime | None = None
    messages_before: int = 0

    @classmethod
    def now(cls, stack: EmbeddedStack) -> RunScope:
        # Step Functions' dates are read back to the millisecond: a start in this very millisecond
        # must not fall before the run.
        since = datetime.now(tz=UTC) - timedelta(milliseconds=1)
        return cls(since=since, messages_before=stack.driver.event_source.stats.messages)


def measure(
    stack: EmbeddedStack,
    orders: list[dict[str, Any]],
    *,
    deliveries: int,
    wall_seconds: float,
    scope: RunScope | None = None,
) -> Report:
    """Read the ledger, the claims and the executions, and classify every order.

    Only this run's orders count, and only their executions since ``scope.since``: a stack that ran
    other orders before reports them in their own report, not in this one.
    """
    scope = scope or RunScope()
    order_ids = {order["orderId"] for order in orders}
    charges = [c for c in stack.provider.charges() if c.order_id in order_ids]
    ledger: Counter[str] = Counter(str(c.order_id) for c in charges)
    claims = stack.driver.claims()
    summaries = stack.driver.executions(since=scope.since, order_ids=order_ids)
    outcomes = Counter(e.error or e.status for e in summaries)
    executions = sum(outcomes.values())
    endings: Counter[str] = Counter()
    ended: dict[str, str] = {}
    for order in orders:
        order_id = order["orderId"]
        ending = order_ending(claims.get(order_id), ledger.get(order_id, 0))
        ended[order_id] = ending
        endings[ending] += 1
    problems, lost_reasons, dead_lettered = _problems(stack, orders, ended, claims, ledger, summaries)
    received = stack.driver.event_source.stats.messages - scope.messages_before
    return Report(
        orders=len(orders),
        deliveries=deliveries,
        charges=sum(ledger.get(order["orderId"], 0) for order in orders),
        double_charged_orders=endings["double-charged"],
        lost_orders=sum(endings[e] for e in LOST_ENDINGS),
        charged=endings["charged"],
        declined=endings["declined"],
        needs_reconciliation=endings["needs-reconciliation"],
        conflicts=outcomes.get("OrderConflict", 0),
        duplicates_suppressed={
            "start": max(received - executions, 0),
            "claim": outcomes.get("SUCCEEDED", 0) - endings["charged"],
        },
        executions=executions,
        dead_lettered=dead_lettered,
        execution_outcomes=dict(outcomes),
        wall_seconds=round(wall_seconds, 2),
        orders_per_second=round(len(orders) / wall_seconds, 2) if wall_seconds else 0.0,
        faults_injected=stack.faults.fired(),
        order_endings=dict(endings),
        problems=problems[:20],
        money=money(orders, charges, ended),
        lost_reasons=dict(lost_reasons),
    )


def _problems(
    stack: EmbeddedStack,
    orders: list[dict[str, Any]],
    ended: dict[str, str],
    claims: dict[str, dict[str, Any]],
    ledger: Counter[str],
    summaries: list[ExecutionSummary],
) -> tuple[list[str], Counter[str], int]:
    """Each double charge and each lost order with its reason; the reasons counted; and how many of
    this run's deliveries were dead-lettered."""
    dead = _dead_letters(stack, set(ended))
    by_order: dict[str | None, list[ExecutionSummary]] = {}
    for summary in summaries:
        by_order.setdefault(summary.order_key, []).append(summary)
    problems: list[str] = []
    reasons: Counter[str] = Counter()
    for order in orders:
        order_id = order["orderId"]
        trace = _trace_hint(by_order.get(order_id, []))
        if ended[order_id] == "double-charged":
            problems.append(f"{order_id}: charged {ledger[order_id]} times{trace}")
        elif ended[order_id] in LOST_ENDINGS:
            reason = lost_reason(claims.get(order_id), dead.get(order_id, []), by_order.get(order_id, []))
            reasons[reason] += 1
            problems.append(f"{order_id}: lost ({reason}, {ledger.get(order_id, 0)} charges){trace}")
    return problems, reasons, sum(len(d) for d in dead.values())


def _trace_hint(executions: list[ExecutionSummary]) -> str:
    """'; saga trace NAME' for the order's latest execution, a failed one first: what to look at."""
    if not executions:
        return ""
    latest = max(executions, key=lambda e: (e.status != "SUCCEEDED", e.start_date))
    return f"; saga trace {latest.name} ({latest.error or latest.status})"


@dataclass
class Recorded:
    """The executions of a run that did not succeed, recorded so that ``saga trace NAME`` shows them
    after the run's stack is gone (as ``saga demo`` records its own)."""

    #: Error (or status) -> the names recorded with it.
    by_error: dict[str, list[str]] = field(default_factory=dict)
    #: Executions that did not succeed but were not recorded (past ``limit``).
    left_out: int = 0
    #: Where they were recorded (None: the archive's default, ``.saga/executions``).
    directory: Path | None = None

    @property
    def total(self) -> int:
        return sum(len(names) for names in self.by_error.values())

    def to_dict(self) -> dict[str, Any]:
        return {"byError": self.by_error, "leftOut": self.left_out}


def record_unhappy(stack: EmbeddedStack, *, limit: int = 1000, directory: Path | None = None) -> Recorded:
    """Record every execution on ``stack`` that did not succeed, up to ``limit`` (the first ones
    first), under ``directory`` (default: ``.saga/executions``); call it before the stack stops."""
    from saga_local.stack import archive

    found = Recorded(directory=directory)
    arns = {e.name: e for e in stack.driver.executions() if e.status != "SUCCEEDED"}
    for summary in sorted(arns.values(), key=lambda e: e.start_date)[:limit]:
        # Execution ARNs are the state machine's, renamed (as `saga trace` builds them).
        arn = stack.stack.state_machine_arn.replace(":stateMachine:", ":execution:") + ":" + summary.name
        archive.record(archive.read_execution(stack.driver.sfn, arn), directory)
        found.by_error.setdefault(summary.error or summary.status, []).append(summary.name)
    found.left_out = max(len(arns) - limit, 0)
    return found


def write_html_report(path: str | Path, report: dict[str, Any], recorded: Recorded, *, kind: Kind) -> Path:
    """``--html PATH``: the report (``report`` is its ``to_dict()``) as a page at ``path``, with a trace
    page for each recorded execution in ``<PATH's name>-traces/`` beside it
    (:func:`saga_local.trace.report.write_report`). A file that cannot be written ends the command
    with one line (SystemExit), as ``saga trace --html`` does; call it once the report is printed."""
    from pathlib import Path

    from saga_local.stack import archive
    from saga_local.trace.report import traces_folder, write_report

    def load(name: str) -> archive.RecordedExecution | None:
        return archive.load(name, recorded.directory)

    data = {**report, "recorded": recorded.to_dict()}
    try:
        written = write_report(Path(path), data, kind=kind, load=load)
    except OSError as exc:
        raise SystemExit(f"saga {kind}: cannot write {exc.filename or path}: {exc.strerror}") from None
    # On stderr, with the progress bar: stdout stays the report (and valid JSON under --json).
    pages = f", a trace page per execution that did not succeed in {traces_folder(written)}"
    pages = pages if recorded.total else ""
    sys.stderr.write(f"\nwrote {written}{pages}\n")
    return written


def render_recorded(recorded: Recorded) -> list[str]:
    """The recorded executions: how many of each end, and one to paste into ``saga trace`` each."""
    if not recorded.total:
        return ["not the happy way    none (every execution succeeded)"]
    left = f"; {recorded.left_out} more not recorded" if recorded.left_out else ""
    lines = [f"not the happy way    {plural(recorded.total, 'execution')} recorded for saga trace{left}"]
    for error, names in sorted(recorded.by_error.items()):
        lines.append(f"  {len(names):6d}  {error:<24}  e.g. saga trace {names[0]}")
    return lines


def lost_reason(
    claim: dict[str, Any] | None, dead_letters: list[str], executions: list[ExecutionSummary]
) -> str:
    """Why an order is lost, from what the stack holds of it: its claim, its dead letters, its
    executions; the last resort is that it never reached the state machine."""
    if claim:
        release = f" {claim['releaseReason']}" if claim.get("releaseReason") else ""
        return f"claim {claim['status']}{release}"
    if dead_letters:
        return f"no claim; dead-lettered: {dead_letters[0]}"
    if executions:
        ends = sorted({e.error or e.status for e in executions})
        return f"no claim; {len(executions)} execution(s) ended {', '.join(ends)}"
    return "no claim; no execution: its delivery never started one"


def _dead_letters(stack: EmbeddedStack, order_ids: set[str]) -> dict[str, list[str]]:
    """This run's orders on the dead-letter queue: order id -> each delivery's reason."""
    if not stack.driver.queue_depth(stack.stack.dead_letter_queue_url):
        return {}
    found: dict[str, list[str]] = {}
    for message in stack.driver.dead_letters():
        try:
            order_id = json.loads(message["Body"]).get("orderId")
        except (ValueError, AttributeError):
            continue
        if order_id in order_ids:
            attributes = message.get("MessageAttributes", {})
            reason = attributes.get("rejectionReason", {}).get("StringValue")
            found.setdefault(order_id, []).append(reason or "every receive failed, redriven by the queue")
    return found


def order_ending(claim: dict[str, Any] | None, charges: int) -> str:
    """How one order ended, from its claim row and its charges at the provider."""
    status = claim["status"] if claim else None
    if charges > 1:
        return "double-charged"
    if status == "COMPLETED" and charges == 1:
        return "charged"
    if status == "RELEASED" and charges == 0:
        # DECLINED is an outcome the customer sees; NOT_CHARGED proves only that nothing was charged.
        return "declined" if claim and claim.get("releaseReason") == "DECLINED" else "released, not charged"
    if status == "CLAIMED":
        return "needs-reconciliation"
    return "lost"


def money(orders: list[dict[str, Any]], charges: list[Any], endings: dict[str, str]) -> list[Money]:
    """Ordered against billed, per currency (each order counted once, whatever its copies)."""
    by_currency: dict[str, Money] = {}
    seen: set[str] = set()
    for order in orders:
        if order["orderId"] in seen:
            continue
        seen.add(order["orderId"])
        entry = by_currency.setdefault(order["currency"], Money(order["currency"]))
        entry.ordered += order["amount"]
        ending = endings.get(order["orderId"])
        if ending == "declined":
            entry.declined += order["amount"]
        elif ending not in ("charged", "double-charged"):
            entry.not_billed += order["amount"]
    first: set[str | None] = set()
    for charge in charges:
        if charge.order_id not in seen:
            continue
        entry = by_currency.setdefault(charge.currency.upper(), Money(charge.currency.upper()))
        entry.billed += charge.amount
        if charge.order_id in first:
            entry.billed_twice += charge.amount
        first.add(charge.order_id)
    return [by_currency[c] for c in sorted(by_currency)]


def render(report: Report) -> str:
    lines = [
        f"orders               {report.orders}",
        f"deliveries           {report.deliveries}",
        f"charges              {report.charges}",
        f"double-charged       {report.double_charged_orders}",
        f"lost                 {report.lost_orders}"
        + _lost_detail(report.order_endings.get("released, not charged", 0)),
        f"charged              {report.charged}",
        f"declined             {report.declined}",
        f"needs reconciliation {report.needs_reconciliation}",
        f"order conflicts      {report.conflicts}",
        f"duplicates stopped   start {report.duplicates_suppressed['start']},"
        f" claim {report.duplicates_suppressed['claim']}",
        f"executions           {report.executions}: {_counts(report.execution_outcomes)}",
        f"dead-lettered        {report.dead_lettered} deliveries (each with its reason, or after 5 receives)",
        f"wall time            {report.wall_seconds:.1f} s",
        f"orders per second    {report.orders_per_second:.1f}",
    ]
    lines.extend(render_money(report.money))
    if report.faults_injected:
        lines.append("faults injected")
        lines.extend(f"  {count:6d}  {kind}" for kind, count in sorted(report.faults_injected.items()))
    if report.lost_reasons:
        lines.append("lost, by reason")
        lines.extend(f"  {count:6d}  {reason}" for reason, count in sorted(report.lost_reasons.items()))
    if report.problems:
        lines.append("problems")
        lines.extend(f"  {p}" for p in report.problems)
    return "\n".join(lines)


def render_money(money: list[Money]) -> list[str]:
    """One line per currency: ordered, billed, and where the difference went."""
    if not money:
        return []
    lines = ["money                ordered / billed, per currency"]
    for m in money:
        line = f"  {m.currency}  ordered {m.format(m.ordered)}, billed {m.format(m.billed)}"
        details = [
            f"declined {m.format(m.declined)}",
            f"not billed {m.format(m.not_billed)}",
            f"billed twice {m.format(m.billed_twice)}",
        ]
        lines.append(f"{line} ({', '.join(details)})")
    return lines


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none"


def _lost_detail(released: int) -> str:
    return f" ({released} released NOT_CHARGED, never charged since)" if released else ""
