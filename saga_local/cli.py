"""``saga``: run, watch and break the payment saga, locally or against a deployed stack.

saga demo                      the lab of seed 000, guard off then on, then a decline
saga up                        start the embedded local stack and keep it running
saga send [FILE] [--copies N]  send an order (events/order.json by default)
saga trace EXECUTION [--html]  an execution state by state, or as a graph page
saga simulate --orders N ...   many orders, duplicates and concurrency; a report
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from saga_local.driver import ExecutionResult
    from saga_local.embedded import EmbeddedStack

ZERO_DECIMAL = {
    "BIF",
    "CLP",
    "DJF",
    "GNF",
    "JPY",
    "KMF",
    "KRW",
    "MGA",
    "PYG",
    "RWF",
    "UGX",
    "VND",
    "VUV",
    "XAF",
    "XOF",
    "XPF",
}


def money(amount: int, currency: str) -> str:
    """Minor units to a readable amount: 15000 BRL -> '150.00 BRL'."""
    if currency in ZERO_DECIMAL:
        return f"{amount} {currency}"
    return f"{amount // 100}.{amount % 100:02d} {currency}"


class Out:
    """Terminal output with colour when it is a terminal."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stdout
        self.color = hasattr(stream, "isatty") and stream.isatty()

    def __call__(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def paint(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def ok(self, text: str) -> str:
        return self.paint(text, "32")

    def bad(self, text: str) -> str:
        return self.paint(text, "31")

    def warn(self, text: str) -> str:
        return self.paint(text, "33")

    def bold(self, text: str) -> str:
        return self.paint(text, "1")

    def dim(self, text: str) -> str:
        return self.paint(text, "2")


def describe_path(out: Out, result: ExecutionResult) -> str:
    arrow = " -> "
    path = arrow.join(result.path)
    outcome = result.outcome
    if outcome == "CHARGED":
        tag = out.ok(f"CHARGED {result.output.get('chargeId')}" if result.output else "CHARGED")
    elif outcome == "DUPLICATE":
        holder = (result.output or {}).get("holderStatus")
        tag = out.warn(f"DUPLICATE (holder {holder})")
    else:
        tag = out.bad(outcome)
    return f"{path}   {tag}"


def seed_order(order_id: str = "ORDER-003", **overrides: Any) -> dict[str, Any]:
    order: dict[str, Any] = json.loads((ROOT / "events" / "order.json").read_text())
    order.update({"orderId": order_id, **overrides})
    return order


@contextlib.contextmanager
def handlers_quiet() -> Iterator[None]:
    """In-process handlers print their EMF metric lines to stdout: keep them off a printed report."""
    with open(os.devnull, "w", encoding="utf-8") as devnull, contextlib.redirect_stdout(devnull):
        yield


# -- demo ----------------------------------------------------------------------------------------


def _act(out: Out, stack: EmbeddedStack, order: dict[str, Any], copies: int) -> list[ExecutionResult]:
    before = set(stack.driver.execution_arns())
    stack.driver.send(order, copies=copies)
    stack.driver.pump(pollers=min(copies, 4), timeout=120)
    results = [stack.driver.result(a) for a in stack.driver.execution_arns() if a not in before]
    for result in sorted(results, key=lambda r: r.name):
        out(f"    {out.dim(result.name[:24] + '...')}  {describe_path(out, result)}")
    return results


def _charges_line(out: Out, stack: EmbeddedStack, order: dict[str, Any]) -> int:
    charges = stack.provider.charges_for(order["orderId"])
    total = sum(c.amount for c in charges)
    owed = order["amount"]
    line = (
        f"    provider charges for {order['orderId']}: {len(charges)}"
        f" -> {money(total, order['currency'])} billed for a {money(owed, order['currency'])} order"
    )
    out(out.ok(line) if total == owed else out.bad(line))
    return len(charges)


def cmd_demo(args: argparse.Namespace) -> int:
    from saga_local.embedded import EmbeddedStack

    out = Out()
    began = time.monotonic()
    order = seed_order()
    out(out.bold("Payment saga demo: the lab of seed 000 on the embedded local stack"))
    out(
        out.dim(
            "  moto (pinned) on 127.0.0.1, the real ASL from statemachine/, the real handlers from\n"
            "  functions/ in worker processes, a Stripe emulator; every resource comes from template.yaml."
        )
    )
    out()
    out(
        out.bold(
            f"Act 1: guard OFF. {order['orderId']} ({money(order['amount'], order['currency'])}) delivered 4"
            " times at once."
        )
    )
    out(
        out.dim(
            "  The claim is bypassed (the lab's IDEMPOTENCY=0, local stack only) and the provider does not"
            " deduplicate."
        )
    )
    with EmbeddedStack(guard=False, provider_dedupe=False, runtime=args.runtime) as stack:
        _act(out, stack, order, 4)
        unguarded = _charges_line(out, stack, order)
    out()
    out(out.bold("Act 2: guard ON (the template as deployed). The same 4 deliveries."))
    out(out.dim("  The provider still does not deduplicate: one charge here is the claim's doing alone."))
    with EmbeddedStack(provider_dedupe=False, runtime=args.runtime) as stack:
        _act(out, stack, order, 4)
        guarded = _charges_line(out, stack, order)
        claim = stack.driver.claim(order["orderId"]) or {}
        out(f"    claim {order['orderId']}: status {claim.get('status')}, attempt {claim.get('attempt')}")
        out()
        declined = seed_order("ORDER-004", paymentMethod="pm_card_chargeDeclined")
        out(out.bold("Act 3: a declined card releases its claim."))
        results = _act(out, stack, declined, 1)
        claim = stack.driver.claim("ORDER-004") or {}
        out(
            f"    claim ORDER-004: status {claim.get('status')} ({claim.get('releaseReason')}),"
            f" charges {len(stack.provider.charges_for('ORDER-004'))}"
        )
    out()
    elapsed = time.monotonic() - began
    ok = unguarded == 4 and guarded == 1 and results and results[0].error == "PaymentDeclined"
    verdict = out.ok("as promised") if ok else out.bad("NOT as promised")
    out(f"Charges: {unguarded} without the claim, {guarded} with it; the decline charged nothing: {verdict}.")
    out(out.dim(f"Done in {elapsed:.1f} s. Next: `saga up`, then `saga send --copies 4` and `saga trace`."))
    return 0 if ok else 1


# -- targets: the local stack `saga up` runs, or a deployed one ------------------------------------

STATE_FILE = ROOT / ".saga" / "stack.json"


@dataclass
class Target:
    """Where commands send and read: clients, and the stack's outputs (queue URL, state machine ARN...)."""

    clients: Callable[[str], Any]
    outputs: dict[str, str]
    where: str


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    """A deployed stack's outputs, by key (what `sam deploy` printed)."""
    stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def resolve_target(args: argparse.Namespace) -> Target:
    import boto3

    if getattr(args, "stack", None):
        region, endpoint = args.region, args.endpoint_url

        def clients(service: str) -> Any:
            return boto3.client(service, region_name=region, endpoint_url=endpoint)  # type: ignore[call-overload]

        return Target(clients, stack_outputs(clients("cloudformation"), args.stack), f"stack {args.stack}")
    if not STATE_FILE.exists():
        raise SystemExit(
            "No local stack is running: start one with `saga up` (another terminal), or pass --stack NAME."
        )
    state = json.loads(STATE_FILE.read_text())

    def local_clients(service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=state["endpoint"],
            region_name=state["region"],
            aws_access_key_id="local",
            aws_secret_access_key="local",  # noqa: S106 - moto accepts any credentials
        )

    return Target(local_clients, state["outputs"], f"local stack at {state['endpoint']}")


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", help="a deployed stack's name (default: the local stack of `saga up`)")
    parser.add_argument(
        "--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )
    parser.add_argument("--endpoint-url", help=argparse.SUPPRESS)  # tests point --stack at moto


# -- up ------------------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    from saga_local.embedded import EmbeddedStack
    from saga_local.stack import REGION

    out = Out()
    log_dir = ROOT / ".saga" / "logs"
    with EmbeddedStack(port=args.port, runtime=args.runtime, log_dir=log_dir, visibility_timeout=30) as stack:
        STATE_FILE.parent.mkdir(exist_ok=True)
        state = {
            "endpoint": stack.endpoint,
            "region": REGION,
            "outputs": stack.stack.outputs,
            "provider": stack.provider.url,
            "pid": os.getpid(),
        }
        STATE_FILE.write_text(json.dumps(state, indent=2))
        outputs = stack.stack.outputs
        out(out.bold(f"Embedded stack running on {stack.endpoint}  (Ctrl-C stops it)"))
        for key, value in sorted(outputs.items()):
            out(f"  {key:28} {value}")
        out(f"  {'Provider (Stripe emulator)':28} {stack.provider.url}")
        out(f"  {'Function logs (JSON)':28} {log_dir}/")
        out()
        out("Point the AWS CLI or boto3 at it:")
        out(
            f"  export AWS_ENDPOINT_URL={stack.endpoint} AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local"
            f" AWS_DEFAULT_REGION={REGION}"
        )
        out(
            f"  aws sqs send-message --queue-url {outputs['OrdersQueueUrl']} --message-body file://events/order.json"
        )
        out(
            f"  aws stepfunctions list-executions --state-machine-arn {outputs['PaymentSagaStateMachineArn']}"
        )
        out(f"  boto3.client('stepfunctions', endpoint_url='{stack.endpoint}', region_name='{REGION}')")
        out("Or, from another terminal: `saga send --copies 4`, then `saga trace <execution name>`.")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        try:
            stack.serve(stop, pollers=args.pollers)
        finally:
            with contextlib.suppress(FileNotFoundError):
                STATE_FILE.unlink()
    out("stopped")
    return 0


# -- send ----------------------------------------------------------------------------------------

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")


def cmd_send(args: argparse.Namespace) -> int:
    out = Out()
    target = resolve_target(args)
    if args.body is not None:
        body = args.body
    else:
        order: dict[str, Any] = json.loads(open(args.file, encoding="utf-8").read())  # noqa: SIM115
        for field, value in (
            ("orderId", args.order_id),
            ("amount", args.amount),
            ("currency", args.currency),
            ("customerId", args.customer_id),
            ("paymentMethod", args.payment_method),
            ("paymentAttempt", args.payment_attempt),
        ):
            if value is not None:
                order[field] = value
        body = json.dumps(order)
    sqs = target.clients("sqs")
    queue_url = target.outputs["OrdersQueueUrl"]
    names = []
    for _ in range(args.copies):
        message_id = sqs.send_message(QueueUrl=queue_url, MessageBody=body)["MessageId"]
        names.append(message_id)
    out(f"sent {args.copies} message(s) to {target.where}")
    try:
        order_id = str(json.loads(body).get("orderId", ""))
    except (ValueError, AttributeError):
        order_id = ""
    prefix = _UNSAFE_NAME.sub("_", order_id)
    for message_id in names:
        name = f"{prefix[: 80 - len(message_id) - 1]}-{message_id}" if prefix else message_id
        out(f"  {message_id}  ->  saga trace {name}")
    return 0


# -- trace ---------------------------------------------------------------------------------------


def execution_arn(state_machine_arn: str, execution: str) -> str:
    """An execution ARN from its name (execution ARNs are the state machine's, renamed)."""
    if execution.startswith("arn:"):
        return execution
    return state_machine_arn.replace(":stateMachine:", ":execution:") + ":" + execution


def cmd_trace(args: argparse.Namespace) -> int:
    from saga_local import trace

    target = resolve_target(args)
    sfn = target.clients("stepfunctions")
    state_machine = target.outputs["PaymentSagaStateMachineArn"]
    arn = execution_arn(state_machine, args.execution)
    description = sfn.describe_execution(executionArn=arn)
    history: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
        history.extend(page["events"])
    definition = trace.load_definition(
        sfn.describe_state_machine(stateMachineArn=state_machine)["definition"]
    )
    if args.html:
        with open(args.html, "w", encoding="utf-8") as page_file:
            page_file.write(trace.render_html(description, history, definition))
        Out()(f"wrote {args.html}")
        return 0
    out = Out()
    out(trace.render_text(description, history, definition, show_io=args.io, color=out.color))
    return 0


# -- simulate ------------------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    from saga_local import simulate
    from saga_local.embedded import EmbeddedStack

    progress = None if args.json else simulate.progress_bar
    with (
        handlers_quiet(),
        EmbeddedStack(
            runtime=args.runtime, visibility_timeout=60, max_workers=args.concurrency, quiet=True
        ) as stack,
    ):
        report = simulate.run(
            stack,
            orders=args.orders,
            copies=args.copies,
            concurrency=args.concurrency,
            decline_rate=args.decline_rate,
            seed=args.seed,
            progress=progress,
        )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        sys.stderr.write("\n")
        Out()(simulate.render(report))
    return 0 if report.promise_kept else 1


# -- reconcile, redrive, chaos -------------------------------------------------------------------


def cmd_reconcile(args: argparse.Namespace) -> int:
    from payment_saga.claims import ClaimsStore
    from payment_saga.payments import StripeProvider
    from payment_saga.reconcile import reconcile
    from saga_local.reconcile import reconcile_deployed, render
    from saga_local.stack import LOCAL_API_KEY

    if args.stack:
        report = reconcile_deployed(args.stack, apply=args.apply, region=args.region)
    else:
        target = resolve_target(args)
        state = json.loads(STATE_FILE.read_text())
        # Locally, --later looks past a lease without waiting for it; against AWS, time is time.
        now = time.time() + args.later
        store = ClaimsStore(
            target.outputs["ClaimsTableName"], client=target.clients("dynamodb"), clock=lambda: now
        )
        provider = StripeProvider(LOCAL_API_KEY, api_base=state["provider"])
        report = reconcile(store, provider, now=now, apply=args.apply, search_grace_seconds=args.grace)
    Out()(render(report))
    return 0


def cmd_redrive(args: argparse.Namespace) -> int:
    from saga_local.redrive import redrive

    target = resolve_target(args)
    sqs = target.clients("sqs")
    source, dead = target.outputs["OrdersQueueUrl"], target.outputs["OrdersDeadLetterQueueUrl"]

    def arn(url: str) -> str:
        return str(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        )

    report = redrive(
        sqs, dead_letter_queue_url=dead, source_queue_url=source, source_arn=arn(source), dlq_arn=arn(dead)
    )
    Out()(f"redrive from {target.where}: {report}")
    return 0


def cmd_chaos(args: argparse.Namespace) -> int:
    from saga_local import chaos

    return chaos.main(args.rest)


# -- cost ----------------------------------------------------------------------------------------


def cmd_cost(args: argparse.Namespace) -> int:
    """AWS cost per million orders, from usage counted in a local run, prices from saga_local/prices.json."""
    from saga_local import cost
    from saga_local.embedded import EmbeddedStack
    from saga_local.usage import measure_order_usage

    with handlers_quiet(), EmbeddedStack(runtime="inprocess", quiet=True) as stack:
        for i in range(3):  # warm the handlers: cold imports are not what an order costs
            measure_order_usage(stack, seed_order(f"ORDER-WARM-{i}"))
        happy = measure_order_usage(stack, seed_order("ORDER-COST"))
        duplicate = measure_order_usage(stack, seed_order("ORDER-COST"))
    share = args.duplicate_share

    def mix(field: str) -> float:
        return float(getattr(happy, field) + share * getattr(duplicate, field))

    mixed = cost.Usage(**{f: mix(f) for f in cost.Usage.__dataclass_fields__})
    step_ms = happy.lambda_gb_seconds / (256 / 1024) * 1000  # the same work, done by one function
    rows = {
        "saga, happy path": happy,
        "saga, a duplicate delivery": duplicate,
        f"saga, mix ({share:.0%} of orders delivered twice)": mixed,
        "single Lambda + Powertools idempotency": cost.single_lambda_baseline_usage(duration_ms=step_ms),
    }
    prices = cost.load_prices()
    if args.json:
        print(
            json.dumps(
                {
                    name: {"usage": vars(u), "usd_per_million": cost.cost_per_million(u, prices)}
                    for name, u in rows.items()
                },
                indent=2,
            )
        )
    else:
        Out()(cost.render_table(rows, prices))
    return 0


# -- entry point ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="saga", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="the seed-000 lab: four charges without the claim, one with it")
    demo.add_argument(
        "--runtime",
        choices=["workers", "inprocess"],
        default="workers",
        help="run handlers in worker processes (as Lambda) or in threads",
    )
    demo.set_defaults(func=cmd_demo)

    up = sub.add_parser("up", help="start the embedded local stack and keep it running")
    up.add_argument("--port", type=int, default=0, help="moto's port (default: a free one)")
    up.add_argument("--runtime", choices=["workers", "inprocess"], default="workers")
    up.add_argument("--pollers", type=int, default=2, help="concurrent SQS pollers")
    up.set_defaults(func=cmd_up)

    send = sub.add_parser("send", help="send an order to the orders queue")
    send.add_argument(
        "file", nargs="?", default=str(ROOT / "events" / "order.json"), help="an order JSON file"
    )
    send.add_argument("--copies", type=int, default=1, help="send it this many times (new MessageIds)")
    send.add_argument("--order-id")
    send.add_argument("--amount", type=int, help="minor units: 15000 = 150.00")
    send.add_argument("--currency")
    send.add_argument("--customer-id")
    send.add_argument("--payment-method", help="e.g. pm_card_visa, pm_card_chargeDeclined")
    send.add_argument("--payment-attempt", help="a customer's deliberate retry of a declined order")
    send.add_argument("--body", help="send this raw body instead (e.g. a malformed message)")
    add_target_arguments(send)
    send.set_defaults(func=cmd_send)

    trace = sub.add_parser("trace", help="an execution state by state (or --html for the graph page)")
    trace.add_argument("execution", help="the execution's name or ARN")
    trace.add_argument("--io", action="store_true", help="show each state's input and output")
    trace.add_argument("--html", metavar="FILE", help="write a self-contained page with the graph")
    add_target_arguments(trace)
    trace.set_defaults(func=cmd_trace)

    sim = sub.add_parser("simulate", help="many orders with duplicates, then check the promise")
    sim.add_argument("--orders", type=int, default=100)
    sim.add_argument("--copies", type=int, default=4, help="deliveries of each order")
    sim.add_argument("--concurrency", type=int, default=4, help="concurrent SQS pollers")
    sim.add_argument("--decline-rate", type=float, default=0.0)
    sim.add_argument("--seed", type=int, default=7)
    sim.add_argument(
        "--runtime",
        choices=["workers", "inprocess"],
        default="inprocess",
        help="inprocess (default) is several times faster; workers run each function in processes",
    )
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(func=cmd_simulate)

    rec = sub.add_parser("reconcile", help="resolve stale claims by asking the provider (dry run by default)")
    rec.add_argument("--apply", action="store_true", help="write the decisions (default: only show them)")
    rec.add_argument(
        "--later",
        type=float,
        default=0.0,
        help="local stack only: decide as if this many seconds had passed (look past a lease)",
    )
    rec.add_argument(
        "--grace", type=int, default=3600, help="seconds after a lease ends before a search is trusted"
    )
    add_target_arguments(rec)
    rec.set_defaults(func=cmd_reconcile)

    red = sub.add_parser(
        "redrive", help="move the dead-letter queue back to the orders queue (safe: idempotent)"
    )
    add_target_arguments(red)
    red.set_defaults(func=cmd_redrive)

    cha = sub.add_parser(
        "chaos", help="simulate with faults at every step, then sweep (see --help)", add_help=False
    )
    cha.add_argument("rest", nargs=argparse.REMAINDER)
    cha.set_defaults(func=cmd_chaos)

    costs = sub.add_parser("cost", help="AWS cost per million orders, from figures counted in a local run")
    costs.add_argument(
        "--duplicate-share", type=float, default=0.1, help="share of orders delivered twice (mix)"
    )
    costs.add_argument("--json", action="store_true")
    costs.set_defaults(func=cmd_cost)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
