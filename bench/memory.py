"""Peak memory of a long local run: ``saga simulate --orders 10000 --copies 4``, as a user runs it.

    python bench/memory.py [--orders 10000] [--copies 4] [--limit-mb 600] [--record PATH]

Runs the command in a child process and reads the child's peak resident set size from the kernel
(``getrusage(RUSAGE_CHILDREN)``, what ``/usr/bin/time -v`` prints as "Maximum resident set size").
stdout is one JSON object (``"benchmark": "memory"``); the command's progress goes to stderr.
``--record PATH`` also writes that object, with ``measured_on`` (bench/recording.py), to PATH: the
recorded figures docs/performance.md is rendered from.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from recording import record  # type: ignore[import-not-found]  # bench/, this script's

ROOT = Path(__file__).resolve().parent.parent


def report_of(stdout: str) -> dict[str, object] | None:
    """The JSON report ``saga simulate --json`` prints last (None if it printed none)."""
    start = stdout.rfind("\n{\n")
    text = stdout[start + 1 :] if start >= 0 else stdout
    try:
        report = json.loads(text)
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=10_000)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--limit-mb", type=float, default=600.0)
    parser.add_argument(
        "--record", type=Path, metavar="PATH", help="also write the result, and the machine's facts, to PATH"
    )
    args = parser.parse_args()
    command = ["simulate", "--orders", str(args.orders), "--copies", str(args.copies), "--json"]
    began = time.monotonic()
    child = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "saga_local.cli", *command],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    wall = time.monotonic() - began
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    report = report_of(child.stdout) or {}
    kept = report.get("lost_orders") == 0 and report.get("double_charged_orders") == 0
    measured = {
        "benchmark": "memory",
        "command": "saga " + " ".join(command),
        "peak_rss_mb": round(peak_mb, 1),
        "limit_mb": args.limit_mb,
        "within_limit": peak_mb <= args.limit_mb,
        "exit_code": child.returncode,
        "report_printed": bool(report),
        "promise_kept": kept,
        "executions": report.get("executions"),
        "wall_seconds": round(wall, 1),
    }
    if args.record is not None:
        record(args.record, measured)
    print(json.dumps(measured))


if __name__ == "__main__":
    main()
