"""``saga chaos``: many orders, duplicate deliveries and random faults everywhere; then the sweeper.

The command: its options and its report. What it runs and how it judges the run is the chaos
engine, :mod:`saga_local.harness.chaos` (its docstring says what is injected and what is checked).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings

from saga_local.commands.arguments import Parser, count, html_file, seconds
from saga_local.harness import simulate
from saga_local.harness.chaos import run_chaos
from saga_local.harness.chaos_plan import ChaosConfig
from saga_local.harness.chaos_report import render

# -- entry point -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="saga chaos",
        description="Many orders, duplicates and random faults everywhere; then the sweeper.",
    )
    defaults = ChaosConfig()
    parser.add_argument("--orders", type=count(), default=defaults.orders, help="distinct orders")
    parser.add_argument("--copies", type=count(), default=defaults.copies, help="deliveries of each order")
    parser.add_argument(
        "--concurrency", type=count(), default=defaults.concurrency, help="concurrent SQS pollers"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="the same seed draws the same faults")
    parser.add_argument(
        "--outage-start",
        type=seconds,
        default=defaults.outage_start_seconds,
        help="seconds into the run when the provider goes down",
    )
    parser.add_argument(
        "--outage-seconds",
        type=seconds,
        default=defaults.outage_seconds,
        help="how long every call to the provider fails (0: no outage)",
    )
    parser.add_argument(
        "--throttle-start",
        type=seconds,
        default=defaults.throttle_start_seconds,
        help="seconds into the run when Claim Order and Release Claim start being throttled",
    )
    parser.add_argument(
        "--throttle-seconds",
        type=seconds,
        default=defaults.throttle_seconds,
        help="how long both are throttled on every invocation (0: never)",
    )
    parser.add_argument(
        "--webhooks",
        action=argparse.BooleanOptionalAction,
        default=defaults.webhooks,
        help="Stripe's webhooks on, delivered in disorder (duplicated, reordered, delayed, lost, the"
        f" endpoint down for {defaults.webhook_down_seconds:.0f} s), and {defaults.debit_rate * 100:.0f}%% of"
        " the orders paid by bank debit, settling later; --no-webhooks: the sweeper alone closes what"
        " the executions leave open (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--html",
        type=html_file,
        metavar="PATH",
        help="also write the report as a page, with a trace page per execution that did not succeed"
        " in PATH's name + -traces/ (default: no page)",
    )
    parser.add_argument("--log-file", help="where the functions' JSON logs go (default: discarded)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the chaos; 0 if the promise held, 1 if it broke, 2 if it could not be judged (no sweeper)."""
    args = build_parser().parse_args(argv)
    config = ChaosConfig(
        orders=args.orders,
        copies=args.copies,
        concurrency=args.concurrency,
        seed=args.seed,
        outage_start_seconds=args.outage_start,
        outage_seconds=args.outage_seconds,
        throttle_start_seconds=args.throttle_start,
        throttle_seconds=args.throttle_seconds,
        webhooks=args.webhooks,
    )
    from saga_local.stack.embedded import EmbeddedStack

    progress = None if args.json else simulate.progress_bar
    # Powertools warns on every invocation that publishes no metric (a duplicate, a death).
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    # The in-process handlers log (and print their metrics) to stdout: keep it for the report.
    with (
        open(args.log_file or os.devnull, "a", encoding="utf-8") as logs,
        contextlib.redirect_stdout(logs),
        EmbeddedStack(
            runtime="inprocess",
            retry_time_scale=0,
            visibility_timeout=config.visibility_timeout,
            webhooks=config.webhooks,
            webhook_time_scale=config.webhook_time_scale,
        ) as stack,
    ):
        report = run_chaos(stack, config, progress=progress)
        # The stack stops with this command: what did not succeed is kept for `saga trace NAME`.
        recorded = simulate.record_unhappy(stack)
    if args.json:
        print(json.dumps({**report.to_dict(), "recorded": recorded.to_dict()}, indent=2))
    else:
        sys.stderr.write("\n")
        print("\n".join([render(report), *simulate.render_recorded(recorded)]))
    # After the report is printed: a page that cannot be written costs the page, not the run.
    if args.html:
        simulate.write_html_report(args.html, report.to_dict(), recorded, kind="chaos")
    return 0 if report.promise_kept else 1


if __name__ == "__main__":
    sys.exit(main())
