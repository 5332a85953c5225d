"""``saga clock``: the local stack's clock, and ``saga clock advance`` to let time pass at once.

What the saga waits for is minutes and hours: a claim's lease (15 minutes), the sweeper's grace
after it (an hour), a re-queued order's delay (5 or 15 minutes), a payment's settle-by time. A
rehearsal of the runbook should not wait for them, and neither should it pretend: ``saga clock
advance 75m`` moves the running `saga up`'s clock on for everything at once (the functions' clock,
the provider emulator's, the delays SQS holds messages for), then runs the sweeper once on the new
time, as its next scheduled run would. Everything the stack writes from then on carries the moved
clock, so ``saga events`` and ``saga logs`` keep the order things happened in.

The clock only moves forward, and only the stack of `saga up` has one to move: a deployed stack's
time is AWS's. Moto's own times (an execution's start and stop) stay the machine's.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from saga_local.commands.fault import FaultError, _request
from saga_local.output import Out, plural
from saga_local.runtime.control import TOKEN_HEADER
from saga_local.stack.targets import running_stack


def _ahead(seconds: float) -> str:
    """``1 h 15 min`` for a person (whole seconds below a minute)."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p) or "0 s"


def clock(state: dict[str, Any], advance: float) -> dict[str, Any]:
    """Ask the `saga up` that ``state`` describes for its clock, moved on by ``advance`` seconds."""
    control = state.get("faultControl") or {}
    if not state.get("clockMovable") or not control:
        raise FaultError(
            "this `saga up` has no clock to move (Stripe's test mode keeps Stripe's time, --runtime"
            " inprocess shares moto's): start `saga up` with neither to rehearse what waits"
        )
    headers = {TOKEN_HEADER: control["token"]}
    method, body = ("POST", {"advanceSeconds": advance}) if advance > 0 else ("GET", None)
    answer = _request(f"{control['url']}/clock", headers, method, body, "the clock of `saga up`")
    return answer if isinstance(answer, dict) else {}


def stack_offset(state: dict[str, Any]) -> float:
    """How far the running stack's clock is ahead of the machine's (0 when it has none to move)."""
    if not state.get("clockMovable"):
        return 0.0
    try:
        return float(clock(state, 0.0).get("offsetSeconds") or 0.0)
    except FaultError:
        return 0.0


def render(answer: dict[str, Any], advanced: float) -> str:
    """What ``saga clock`` prints: the stack's time, and what an advance let happen."""
    offset = float(answer.get("offsetSeconds") or 0.0)
    lines = [
        f"the local stack's clock: {answer.get('now')}"
        + (f" ({_ahead(offset)} ahead of this machine's)" if offset else " (this machine's)")
    ]
    if advanced:
        delivered = int(answer.get("delivered") or 0)
        lines[0] = f"moved on {_ahead(advanced)}: " + lines[0]
        lines.append(f"  {plural(delivered, 'delayed message')} delivered (their delay had run out)")
        for function, result in sorted((answer.get("ran") or {}).items()):
            lines.append(f"  {function} ran on the new time: {_result(result)}")
    return "\n".join(lines)


def _result(result: Any) -> str:
    if not isinstance(result, dict):
        return "it failed (saga logs Sweeper says why)"
    if "error" in result:
        return f"it could not be invoked: {result['error']}"
    if result.get("skipped"):
        return "skipped, another sweep held the lock"
    counts = result.get("counts")
    if isinstance(counts, dict):
        done = [f"{n} {outcome}" for outcome, n in sorted(counts.items()) if n]
        return ", ".join(done) if done else "no stale claim"
    checked = result.get("settlementCheck")
    if isinstance(checked, dict):  # the sweeper's hourly settlement check
        done = [f"{n} {outcome}" for outcome, n in sorted(checked.items()) if n]
        failed = int(result.get("failed") or 0)
        done += [f"{failed} left for the next check"] if failed else []
        return ", ".join(done) if done else "no debit awaiting settlement"
    return json.dumps(result, sort_keys=True)


def cmd_clock(args: argparse.Namespace) -> int:
    """``saga clock [advance DURATION]``."""
    advance = float(args.seconds or 0.0) if args.action == "advance" else 0.0
    if args.action == "advance" and advance <= 0:
        raise SystemExit("saga clock advance: say how long to let pass, e.g. `saga clock advance 75m`.")
    if args.action == "show" and args.seconds is not None:
        raise SystemExit(f"saga clock: to move it on, `saga clock advance {args.seconds:g}`.")
    state = running_stack("clock")
    if state is None:
        raise SystemExit(
            "saga clock: no local stack is running: start one with `saga up` (another terminal); a"
            " deployed stack's clock is AWS's and cannot be moved."
        )
    try:
        answer = clock(state, advance)
    except FaultError as exc:
        raise SystemExit(f"saga clock: {exc}") from None
    Out()(render(answer, advance))
    return 0
