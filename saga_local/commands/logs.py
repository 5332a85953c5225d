"""``saga logs``: the functions' log lines, merged in time, as ``sam logs`` shows them.

Reading them (`saga up`'s files under .saga/logs/, or a deployed stack's CloudWatch log groups)
and picking the lines is saga_local/stack/function_logs.py; this chooses the source and prints.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from saga_local.output import Out
from saga_local.paths import STATE_DIR
from saga_local.stack.function_logs import (
    CloudWatchLogs,
    LocalLogs,
    LogsError,
    follow,
    log_group_names,
    resolve_functions,
)
from saga_local.stack.targets import local_state, relative, resolve_target

if TYPE_CHECKING:
    import argparse


def cmd_logs(args: argparse.Namespace) -> int:
    """The functions' log lines: .saga/logs/ locally, CloudWatch Logs with --stack."""
    try:
        names = resolve_functions(args.function)
    except LogsError as exc:
        raise SystemExit(f"saga logs: {exc}") from None
    since = time.time() - args.since if args.since is not None else None
    source: LocalLogs | CloudWatchLogs
    if since is not None and not args.stack:
        # The functions of `saga up` log on the stack's clock, which `saga clock advance` moves on.
        from saga_local.commands.clock import stack_offset

        state = local_state()
        since += stack_offset(state) if state is not None else 0.0
    if args.stack:
        target = resolve_target(args)
        groups = log_group_names(args.stack, names)
        # As `sam logs`: the last 10 minutes unless told otherwise.
        start = since if since is not None else time.time() - 600
        source = CloudWatchLogs(target.clients("logs"), groups, since=start, order_id=args.order_id)
    else:
        directory = STATE_DIR / "logs"
        if not directory.is_dir():
            raise SystemExit(
                f"saga logs: no function logs in {relative(directory)}: `saga up` writes them there (another"
                " terminal); or pass --stack NAME for a deployed stack's CloudWatch Logs."
            )
        source = LocalLogs(directory, names)
    out = Out()
    try:
        shown = follow(
            source,
            out,
            order_id=args.order_id,
            text=args.filter,
            metrics=args.metrics,
            raw=args.json,
            tail=args.tail,
            since=since,
        )
    except KeyboardInterrupt:  # --tail ends with Ctrl-C
        return 0
    if not shown:
        sys.stderr.write("saga logs: no log line matches (fewer filters, or --since further back?)\n")
    return 0
