"""``saga simulate``: many orders through a fresh embedded stack, and the report (harness/simulate)."""

from __future__ import annotations

import argparse
import json
import sys

from saga_local.output import Out, handlers_quiet


def cmd_simulate(args: argparse.Namespace) -> int:
    """``saga simulate``: many orders through a fresh embedded stack, then the report."""
    from saga_local.harness import simulate
    from saga_local.stack.embedded import EmbeddedStack

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
            retire_after=simulate.RETIRE_AFTER_SECONDS,
        )
        # The stack stops with this command: what did not succeed is kept for `saga trace NAME`.
        recorded = simulate.record_unhappy(stack)
    if args.json:
        print(json.dumps({**report.to_dict(), "recorded": recorded.to_dict()}, indent=2))
    else:
        sys.stderr.write("\n")
        Out()("\n".join([simulate.render(report), *simulate.render_recorded(recorded)]))
    # After the report is printed: a page that cannot be written costs the page, not the run.
    if args.html:
        simulate.write_html_report(args.html, report.to_dict(), recorded, kind="simulate")
    return 0 if report.promise_kept else 1
