"""``saga``: run, watch and break the payment saga, locally or against a deployed stack.

saga demo                      the lab of field report 000, guard off then on, then a decline
saga up                        start the embedded local stack and keep it running
saga send [FILE] [--copies N]  send an order (events/order.json by default)
saga trace EXECUTION [--html]  an execution state by state, or as a graph page (or an order id)
saga executions [--status S]   the executions, newest first (--order-id, --since), as the console lists
saga events [--order-id ID]    the outcome events published (charged, declined, re-queued...)
saga logs [FUNCTION...]        the functions' log events (--order-id, --filter, --tail), as `sam logs`
saga fault KIND                break the running stack's provider or a function (outage, throttle...)
saga clock advance DURATION    let time pass at once on `saga up` (leases, grace, delays), then sweep
saga invoke FUNCTION -e EVENT  one function on one event, as `sam local invoke` runs it (no Docker)
saga simulate --orders N ...   many orders, duplicates and concurrency; a report
saga chaos --orders N ...      the same with random faults everywhere, then the sweeper
saga reconcile [--apply]       what the sweeper would do with stale claims (an order needs a person)
saga redrive [--apply]         move the dead-letter queue back to the orders queue (dry run by default)
saga replay-parked             replay the records the outcome relay parked (dry run; --apply)
saga cost [--wide]             AWS cost per million orders, from usage counted in a local run
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from saga_local.commands.arguments import Parser, count, duration, html_file, port, seconds, share
from saga_local.commands.clock import cmd_clock
from saga_local.commands.cost import cmd_cost
from saga_local.commands.demo import cmd_demo
from saga_local.commands.events import cmd_events
from saga_local.commands.executions import cmd_executions
from saga_local.commands.fault import cmd_fault
from saga_local.commands.invoke import cmd_invoke
from saga_local.commands.logs import cmd_logs
from saga_local.commands.redrive import cmd_redrive
from saga_local.commands.replay import cmd_replay_parked
from saga_local.commands.send import cmd_send
from saga_local.commands.simulate import cmd_simulate
from saga_local.commands.sweep import cmd_reconcile
from saga_local.commands.trace import cmd_trace
from saga_local.commands.up import cmd_up
from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Sequence


# -- targets: the local stack `saga up` runs, or a deployed one (commands/targets.py) ---------------


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", help="a deployed stack's name (default: the local stack of `saga up`)")
    parser.add_argument(
        "--region",
        default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        help="the deployed stack's region (default: AWS_REGION, AWS_DEFAULT_REGION or the profile's)",
    )
    parser.add_argument("--endpoint-url", help=argparse.SUPPRESS)  # tests point --stack at moto


# -- entry point ---------------------------------------------------------------------------------


def _add_demo(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="the lab of field report 000: four charges without the claim, one with it"
    )
    demo.add_argument(
        "--runtime",
        choices=["workers", "inprocess"],
        default="workers",
        help="run handlers in worker processes (as Lambda) or in threads",
    )
    demo.set_defaults(func=cmd_demo)


def _add_up(sub: Any) -> None:
    up = sub.add_parser(
        "up",
        help="start the embedded local stack and keep it running",
        description="Start the embedded local stack and keep it running until Ctrl-C. Its state (stack.json,"
        " the functions' logs, the executions it records) goes to .saga/ in the project, or to the"
        " directory SAGA_STATE_DIR names: one `saga up` runs per state directory, so"
        " `SAGA_STATE_DIR=/tmp/other saga up` runs a second one beside the first (and the other commands"
        " run with the same SAGA_STATE_DIR talk to it).",
    )
    up.add_argument("--port", type=port, default=0, help="moto's port (0: a free one)")
    up.add_argument(
        "--stripe-test",
        action="store_true",
        help="call Stripe's test mode (https://api.stripe.com) with the sk_test_/rk_test_ key in"
        " STRIPE_API_KEY instead of the emulator (docs/stripe-test-mode.md)",
    )
    up.add_argument(
        "--runtime",
        choices=["workers", "inprocess"],
        default="workers",
        help="run handlers in worker processes (as Lambda) or in threads",
    )
    up.add_argument("--pollers", type=count(), default=2, help="concurrent SQS pollers")
    up.add_argument(
        "--sweep-every",
        type=count(),
        default=None,
        metavar="SECONDS",
        help="run the sweeper this often (default: its template schedule, compressed as the queues' waits)",
    )
    up.set_defaults(func=cmd_up)


def _add_send(sub: Any) -> None:
    send = sub.add_parser("send", help="send an order to the orders queue")
    send.add_argument(
        "file",
        nargs="?",
        default=str(ROOT / "events" / "order.json"),
        help="an order JSON file (default: the project's events/order.json)",
    )
    send.add_argument("--copies", type=count(), default=1, help="send it this many times (new MessageIds)")
    send.add_argument("--order-id", help="the order's orderId (default: the file's)")
    send.add_argument("--amount", type=int, help="minor units: 15000 = 150.00 (default: the file's)")
    send.add_argument("--currency", help="ISO 4217 code, e.g. BRL, USD, JPY (default: the file's)")
    send.add_argument("--customer-id", help="the order's customerId (default: the file's)")
    send.add_argument(
        "--payment-method", help="e.g. pm_card_visa, pm_card_chargeDeclined (default: the file's)"
    )
    send.add_argument(
        "--payment-attempt",
        help="a customer's deliberate retry of a declined order (default: the file's, else none)",
    )
    send.add_argument(
        "--provider-customer-id",
        help="the Stripe Customer (cus_...) a saved card belongs to (default: the file's)",
    )
    send.add_argument(
        "--body",
        help="send this raw body instead (e.g. a malformed message; default: the order built from FILE)",
    )
    send.add_argument(
        "--wait", action="store_true", help="wait for each execution to end and print its path and outcome"
    )
    send.add_argument(
        "--wait-seconds", type=count(), default=120, metavar="SECONDS", help="how long --wait waits"
    )
    add_target_arguments(send)
    send.set_defaults(func=cmd_send)


def _add_trace(sub: Any) -> None:
    trace = sub.add_parser("trace", help="an execution state by state (or --html for the graph page)")
    trace.add_argument(
        "execution", help="the execution's name or ARN, or an order id (or a name's start) that finds one"
    )
    trace.add_argument(
        "--io",
        action="store_true",
        help="show each state's input and output, payment method and customers unredacted",
    )
    trace.add_argument(
        "--html", metavar="FILE", help="write a self-contained page with the graph (default: text only)"
    )
    add_target_arguments(trace)
    trace.set_defaults(func=cmd_trace)


def _add_executions(sub: Any) -> None:
    from saga_local.commands.executions import STATUSES

    ex = sub.add_parser(
        "executions",
        help="the state machine's executions, newest first, as the console lists them",
        description="The state machine's executions (the local stack of `saga up`, --stack NAME, or, with"
        " neither, those `saga demo`, `saga simulate` and `saga chaos` recorded), newest first: start,"
        " status, duration, error, name (what `saga trace` takes).",
    )
    ex.add_argument("--status", choices=STATUSES, help="only executions with this status (default: any)")
    ex.add_argument(
        "--order-id",
        help="only this order's executions (their names start with its id; default: every order's)",
    )
    ex.add_argument(
        "--since",
        type=duration,
        default=None,
        help="only those started this recently (10m, 2h; default: any time)",
    )
    ex.add_argument("--limit", type=count(), default=50, help="at most this many")
    add_target_arguments(ex)
    ex.set_defaults(func=cmd_executions)


def _add_events(sub: Any) -> None:
    events = sub.add_parser("events", help="the outcome events published (charged, declined, re-queued...)")
    events.add_argument("--order-id", help="only this order's events (default: every order's)")
    events.add_argument("--json", action="store_true", help="one JSON object per event (its detail)")
    add_target_arguments(events)
    events.set_defaults(func=cmd_events)


def _add_logs(sub: Any) -> None:
    lg = sub.add_parser(
        "logs",
        help="the functions' log events, merged in time (as `sam logs`; --tail follows them)",
        description="The functions' log events: .saga/logs/ of `saga up` locally (also after it stopped), or"
        " the functions' CloudWatch Logs groups of a deployed stack (--stack NAME). One line per event:"
        " time, function, level, event, orderId, then its fields.",
    )
    lg.add_argument(
        "function", nargs="*", help="function logical ids (ClaimOrderFunction, or ClaimOrder; default: all)"
    )
    lg.add_argument("--order-id", help="only the events about this order (default: every order's)")
    lg.add_argument(
        "--filter", help="only the lines that contain this text (case-insensitive; default: every line)"
    )
    lg.add_argument("--tail", action="store_true", help="keep printing new lines until Ctrl-C")
    lg.add_argument(
        "--since",
        type=duration,
        default=None,
        help="only lines this recent (90s, 10m, 2h, 1d; default: every local line, 10m with --stack)",
    )
    lg.add_argument("--metrics", action="store_true", help="also the EMF metric lines")
    lg.add_argument("--json", action="store_true", help="print each line as the function wrote it")
    add_target_arguments(lg)
    lg.set_defaults(func=cmd_logs)


def _add_fault(sub: Any) -> None:
    from saga_local.commands.fault import KINDS, THROTTLE_SECONDS

    ft = sub.add_parser(
        "fault",
        help="break the running `saga up`'s provider or a function (outage, throttle...; clear): rehearse"
        " the runbook",
    )
    ft.add_argument(
        "kind",
        choices=KINDS,
        help="outage: every provider call fails; lost-answer: a charge's answer is lost; webhook-outage: no"
        " Stripe webhook arrives; throttle: a function refused; crash: it dies; late-write: it dies with its"
        " write sent; clear: every fault removed",
    )
    ft.add_argument(
        "--function",
        help="throttle, crash, late-write (needed there): the function, as `saga logs` names it, e.g."
        " ClaimOrder, ChargePayment, Sweeper (or its logical id, ClaimOrderFunction; default: none)",
    )
    # No default in the parser for --seconds and --times: an option that does not apply to the kind
    # is refused (commands/fault.py), which needs to know whether it was given.
    ft.add_argument(
        "--seconds", type=seconds, help=f"throttle: for this long (default: {THROTTLE_SECONDS:g})"
    )
    ft.add_argument(
        "--point",
        help="crash: where it dies (start, before:<call>, after:<call>, end; default: start);"
        " late-write: which write (default: its first)",
    )
    ft.add_argument("--order-id", help="only this order's invocations or charge (default: any order's)")
    ft.add_argument(
        "--times", type=count(), help="lost-answer, crash, late-write: this many times (default: 1)"
    )
    ft.set_defaults(func=cmd_fault)


def _add_clock(sub: Any) -> None:
    ck = sub.add_parser(
        "clock",
        help="the local stack's clock; `advance DURATION` lets that much time pass at once (rehearsals)",
        description="The clock of the running `saga up`. `saga clock advance 75m` moves it on for"
        " everything that waits (the functions' clock: leases, settle-by times, the sweeper's grace; the"
        " provider emulator's; SQS's delays of re-queued orders), then runs the sweeper once on the new"
        " time. It only moves forward, for as long as `saga up` runs.",
    )
    ck.add_argument(
        "action", nargs="?", choices=["show", "advance"], default="show", help="show it, or move it on"
    )
    ck.add_argument(
        "seconds",
        nargs="?",
        type=duration,
        metavar="DURATION",
        help="advance: how long to let pass (4500, 90s, 75m, 2h; default: none)",
    )
    ck.set_defaults(func=cmd_clock)


def _add_invoke(sub: Any) -> None:
    inv = sub.add_parser(
        "invoke",
        help="run one function on an event as `sam local invoke` does, without Docker",
        description="Run one function's handler on an event, the way `sam local invoke` does (the template's"
        " environment, SAM's env-vars file format), in a fresh process, against the embedded stack of"
        " `saga up` (or the stack an --env-vars file points at). The result goes to stdout, logs to stderr.",
    )
    inv.add_argument(
        "function", help="the function's logical id in template.yaml, e.g. ClaimOrderFunction (or ClaimOrder)"
    )
    inv.add_argument("-e", "--event", required=True, help="the event JSON file, e.g. events/claim_order.json")
    inv.add_argument(
        "-n",
        "--env-vars",
        help="SAM's env-vars file (default: the one `saga up` wrote, .saga/sam-env.json)",
    )
    inv.add_argument(
        "--region", default=None, help="AWS region for the function (default: the shell's, else us-east-1)"
    )
    inv.set_defaults(func=cmd_invoke)


def _add_simulate(sub: Any) -> None:
    sim = sub.add_parser("simulate", help="many orders with duplicates, then check the promise")
    sim.add_argument("--orders", type=count(), default=100, help="distinct orders")
    sim.add_argument("--copies", type=count(), default=4, help="deliveries of each order")
    sim.add_argument("--concurrency", type=count(), default=4, help="concurrent SQS pollers")
    sim.add_argument("--decline-rate", type=share, default=0.0, help="share of orders with a declined card")
    sim.add_argument("--seed", type=int, default=7, help="the same seed sends the same orders")
    sim.add_argument(
        "--runtime",
        choices=["workers", "inprocess"],
        default="inprocess",
        help="inprocess (default) is several times faster; workers run each function in processes",
    )
    sim.add_argument("--json", action="store_true", help="print the report as JSON")
    sim.add_argument(
        "--html",
        type=html_file,
        metavar="PATH",
        help="also write the report as a page, with a trace page per execution that did not succeed"
        " in PATH's name + -traces/ (default: no page)",
    )
    sim.set_defaults(func=cmd_simulate)


def _add_reconcile(sub: Any) -> None:
    rec = sub.add_parser("reconcile", help="resolve stale claims by asking the provider (dry run by default)")
    rec.add_argument("--apply", action="store_true", help="write the decisions (default: only show them)")
    rec.add_argument(
        "--later",
        type=seconds,
        default=0.0,
        help="local stack only, without --apply: show what would be decided this many seconds later"
        " (`saga clock advance` lets the time pass)",
    )
    rec.add_argument(
        "--grace", type=count(0), default=3600, help="seconds after a lease ends before a search is trusted"
    )
    add_target_arguments(rec)
    rec.set_defaults(func=cmd_reconcile)


def _add_redrive(sub: Any) -> None:
    red = sub.add_parser(
        "redrive",
        help="move the dead-letter queue back to the orders queue (dry run by default; safe: idempotent)",
    )
    mode = red.add_mutually_exclusive_group()
    mode.add_argument(
        "--apply", action="store_true", help="move the messages (default: only say what would move)"
    )
    mode.add_argument("--dry-run", action="store_true", help="only say what would move (the default)")
    red.add_argument(
        "--include-rejected",
        action="store_true",
        help="also move the messages the start function will reject again (a rejectionReason, or a body"
        " its validation refuses); by default they stay on the dead-letter queue",
    )
    add_target_arguments(red)
    red.set_defaults(func=cmd_redrive)


def _add_replay_parked(sub: Any) -> None:
    replay = sub.add_parser(
        "replay-parked",
        help="replay the stream records the outcome relay parked, through its code (dry run by default)",
    )
    replay.add_argument(
        "--apply", action="store_true", help="replay them and delete each one replayed (default: only check)"
    )
    add_target_arguments(replay)
    replay.set_defaults(func=cmd_replay_parked)


def _add_chaos(sub: Any) -> None:
    # Its options are saga_local.commands.chaos's own: main() hands everything after `chaos` to it.
    sub.add_parser(
        "chaos", help="simulate with faults at every step, then sweep (saga chaos --help)", add_help=False
    )


def _add_cost(sub: Any) -> None:
    costs = sub.add_parser("cost", help="AWS cost per million orders, from figures counted in a local run")
    costs.add_argument(
        "--duplicate-share", type=share, default=0.1, help="share of orders delivered twice (mix)"
    )
    costs.add_argument("--xray-sampling", type=share, default=0.05, help="share of requests X-Ray records")
    costs.add_argument(
        "--cold-starts",
        type=share,
        default=0.01,
        help="share of Charge Payment invocations that start cold and read the secret",
    )
    costs.add_argument("--wide", action="store_true", help="also each line's unit price, in full")
    costs.add_argument("--json", action="store_true", help="print the usage and prices as JSON")
    costs.set_defaults(func=cmd_cost)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="saga", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_demo,
        _add_up,
        _add_send,
        _add_trace,
        _add_executions,
        _add_events,
        _add_logs,
        _add_fault,
        _add_clock,
        _add_invoke,
        _add_simulate,
        _add_reconcile,
        _add_redrive,
        _add_replay_parked,
        _add_chaos,
        _add_cost,
    ):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``saga`` command; a mistake ends it with one line on stderr and a non-zero exit."""
    try:
        try:
            code = _run(argv)
        finally:
            sys.stdout.flush()  # here, not at exit: a reader that went away fails this flush too (--help)
    except BrokenPipeError:
        # `saga logs | head`: the reader has what it wanted, which is no mistake, so nothing is said
        # (as cat and git say nothing). Point stdout at /dev/null so that Python's own flush at exit
        # does not raise again, and exit as a process killed by SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code


def _run(argv: Sequence[str] | None) -> int:
    import botocore.exceptions

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "chaos":
        from saga_local.commands import chaos

        return int(chaos.main(extra))
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args))
    except botocore.exceptions.ConnectionError as exc:  # refused, no DNS, timed out
        endpoint = exc.kwargs.get("endpoint_url")
        if getattr(args, "stack", None):
            raise SystemExit(
                f"saga {args.command}: cannot reach AWS at {endpoint} for stack {args.stack}: check the"
                f" network (DNS, a proxy or VPN) and the region ({args.region or 'none given'}), then run it"
                " again."
            ) from None
        raise SystemExit(
            f"saga {args.command}: nothing answers at {endpoint}: is `saga up` still"
            " running? (Start it again, or pass --stack NAME for a deployed stack.)"
        ) from None
    except botocore.exceptions.NoRegionError:
        raise SystemExit(
            f"saga {args.command}: no AWS region for --stack: pass --region REGION, or set AWS_REGION"
            " (or a region in your AWS profile)."
        ) from None
    except botocore.exceptions.NoCredentialsError:
        raise SystemExit(
            f"saga {args.command}: no AWS credentials found for --stack (aws configure)."
        ) from None
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        message = " ".join(str(error.get("Message")).split())  # one line, whatever AWS sent
        raise SystemExit(
            f"saga {args.command}: AWS refused {exc.operation_name}: {error.get('Code')}: {message}"
        ) from None


if __name__ == "__main__":
    sys.exit(main())
