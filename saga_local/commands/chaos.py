"""``saga chaos``: many orders, duplicate deliveries and random faults everywhere; then the sweeper.

The command: its options and its report. What it runs and how it judges the run is the chaos
engine, :mod:`saga_local.harness.chaos` (its docstring says what is injected and what is checked).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import warnings
from typing import TYPE_CHECKING

from saga_local.commands.arguments import Parser, count, html_file, seconds
from saga_local.harness import simulate
from saga_local.harness.chaos import run_chaos
from saga_local.harness.chaos_plan import ChaosConfig
from saga_local.harness.chaos_sweep import SEARCH_GRACE_SECONDS

if TYPE_CHECKING:
    from saga_local.harness.chaos_report import ChaosReport


def render(report: ChaosReport) -> str:
    """``saga simulate``'s report (before the sweep), then the faults, the sweep and the verdict."""
    lines = [simulate.render(dataclasses.replace(report.before, faults_injected={}, problems=[]))]
    lines.append(
        f"faults injected      {sum(report.faults_by_kind.values())} fired"
        f" (from {report.faults_planned} planned faults)"
    )
    lines.extend(f"  {n:6d}  {kind}" for kind, n in report.faults_by_kind.items())
    lines.append("  by function: " + _counts(report.faults_by_function))
    lines.append(report.outage_line)
    lines.append(report.throttle_line)
    lines.append(f"late writes          {_counts(report.late_writes)}")
    lines.append(f"redeliveries         {_counts(report.redeliveries)}")
    lines.append(f"dead letters         {report.dead_letters}")
    lines.append(f"declined attempts sent to the provider again  {len(report.declined_sent_again)}")
    lines.append(f"endings, before the sweep  {_counts(report.before.order_endings)}")
    lines.extend(_render_sweep(report))
    lines.extend(_render_outcomes(report))
    # What is wrong at the end: the report after the sweep names every double charge and every order
    # still lost. An order "lost" before it (its re-send still delayed on the queue) is not a problem.
    problems = report.violations_before + report.violations_after
    problems += report.declined_sent_again
    if report.outcomes is not None:
        problems += [f"{o}: no final outcome event" for o in report.outcomes.missing[:20]]
        problems += report.outcomes.problems[:20]
    problems += report.after.problems
    if problems:
        lines.append("problems")
        lines.extend(f"  {p}" for p in dict.fromkeys(problems))
    lines.append(f"total wall time      {report.wall_seconds:.1f} s")
    lines.append("verdict")
    lines.extend(f"  {'ok  ' if ok else 'FAIL'}  {check}" for check, ok in report.checks.items())
    lines.append("  PROMISE KEPT" if report.promise_kept else "  PROMISE BROKEN")
    return "\n".join(lines)


def _render_sweep(report: ChaosReport) -> list[str]:
    lines = [
        f"sweep                {len(report.sweep)} stale claims in {report.sweep_seconds:.1f} s:"
        f" {_counts(report.sweep_counts)}"
    ]
    lines.extend(f"  {resolved}" for resolved in report.sweep)
    lines.append(
        f"sweeper ticks        {sum(report.sweeper_ticks.values())} invocations of SweeperFunction:"
        f" {_counts(report.sweeper_ticks)}; {report.sweeper_faults} sweeper faults fired"
        f" (troubles around the ticks: {_counts(report.sweeper_troubles)})"
    )
    lines.append(f"endings, after the sweep   {_counts(report.after.order_endings)}")
    lines.extend(simulate.render_money(report.after.money))
    return lines


def _render_outcomes(report: ChaosReport) -> list[str]:
    """One line per outcome type, then each order's final outcome counted against the orders."""
    outcomes = report.outcomes
    if outcomes is None:
        return ["outcome events       none read: the stack has no outcome archive (OutcomeArchive=Enabled)"]
    lines = [
        f"outcome events       {sum(outcomes.by_type.values())} distinct"
        f" ({outcomes.duplicates} duplicate deliveries dropped by eventId)"
    ]
    lines.extend(f"  {n:6d}  {kind}" for kind, n in sorted(outcomes.by_type.items()))
    lines.append(
        f"final outcome events per order ({report.before.orders} orders: exactly one each, after"
        " declines of earlier payment attempts)"
    )
    lines.extend(f"  {n:6d}  {kind}" for kind, n in sorted(outcomes.by_final.items()))
    lines.append(f"  {len(outcomes.missing):6d}  without a final outcome event")
    lines.append(f"  {len(outcomes.charged_twice):6d}  with two OrderCharged")
    lines.append(f"  {len(outcomes.problems):6d}  with final events out of rule or against the ledger")
    lines.append(
        f"re-queued by the relay  {len(outcomes.requeued)} orders, ended: {_counts(report.requeued_endings)}"
    )
    lines.append(
        f"search lag           {report.search_lag_seconds:.0f} s"
        f" (the sweeper's grace: {SEARCH_GRACE_SECONDS} s);"
        f" the sweeps asked the search {report.sweeper_requests.get('search', 0)} times and the list"
        f" {report.sweeper_requests.get('list', 0)} times"
    )
    return lines


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none"


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
            runtime="inprocess", retry_time_scale=0, visibility_timeout=config.visibility_timeout
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
