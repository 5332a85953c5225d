"""The execution as the console's event history tells it, for a terminal (ANSI colours optional)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from saga_local.trace.formatting import clean, pretty_json, runs, seconds, shorten, stamp, summarize_cause
from saga_local.trace.history import (
    TERMINAL_TYPES,
    execution_duration,
    execution_error,
    trace_steps,
    when,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from saga_local.trace.history import Step

    Paint = Callable[[str, str], str]

#: Longest error message shown whole for a failed attempt (a Lambda's errorMessage is rarely longer;
#: a stack trace pasted into one is cut).
ERROR_MESSAGE_LIMIT = 1000
_ANSI = {
    "succeeded": "32",
    "failed": "31",
    "caught": "33",
    "retried": "33",
    "running": "34",
    "SUCCEEDED": "1;32",
    "FAILED": "1;31",
    "TIMED_OUT": "1;31",
    "ABORTED": "1;31",
    "RUNNING": "1;34",
    "bold": "1",
    "dim": "2",
    "error": "31",
    "warn": "33",
}
#: Under a step's heading.
_INDENT = "      "


def render_text(
    description: dict[str, Any],
    history: list[dict[str, Any]],
    definition: dict[str, Any],
    *,
    show_io: bool = False,
    color: bool = False,
) -> str:
    """The execution as the console's event history tells it: one block per state, then the outcome."""

    def paint(text: str, style: str) -> str:
        return f"\x1b[{_ANSI[style]}m{text}\x1b[0m" if color and style in _ANSI else text

    steps = trace_steps(history, definition)
    started = when(description.get("startDate")) or (steps[0].entered if steps else None)
    lines = _heading(description, steps, paint)
    for number, step in enumerate(steps, 1):
        lines.extend(_step(number, step, started, paint, show_io=show_io))
    lines.append("")
    lines.extend(_outcome(description, history, steps, paint, show_io=show_io))
    return "\n".join(lines) + "\n"


def _heading(description: dict[str, Any], steps: list[Step], paint: Paint) -> list[str]:
    """The execution's name, status, ARN, timing and the path of states it took."""
    status = str(description.get("status", "RUNNING"))
    lines = [
        f"{paint('Execution', 'bold')}  {clean(str(description.get('name', '?')))}  {paint(status, status)}",
    ]
    if description.get("executionArn"):
        lines.append(paint(f"  {clean(str(description['executionArn']))}", "dim"))
    if description.get("startDate"):
        timing = f"  started {stamp(description.get('startDate'))}"
        if description.get("stopDate"):
            timing += f", took {seconds(execution_duration(description))}"
        lines.append(paint(timing, "dim"))
    lines.append("  path: " + (" -> ".join(clean(s.name) for s in steps) or "(no state entered yet)"))
    lines.append("")
    return lines


def _step_heading(number: int, step: Step, started: datetime | None, paint: Paint) -> str:
    """``3. Charge Payment  [Task]  retried  (3 attempts)  at +120 ms, 2.10 s  -> Mark Complete``."""
    offset = f"+{seconds((step.entered - started).total_seconds())}" if step.entered and started else ""
    took = seconds(step.duration)
    timing = ", ".join(t for t in (f"at {offset}" if offset else "", took) if t)
    head = f"{number:>2}. {paint(clean(step.name), 'bold')}  [{clean(step.type)}]  "
    head += paint(step.status, step.status)
    if step.attempts > 1:
        head += f"  ({step.attempts} attempts)"
    if timing:
        head += "  " + paint(timing, "dim")
    if step.next and step.status != "caught":
        head += f"  -> {clean(step.next)}"
    return head


def _step(number: int, step: Step, started: datetime | None, paint: Paint, *, show_io: bool) -> list[str]:
    """One state entered: its heading, retries, failed attempts, where a Catch sent it, its I/O."""
    lines = [_step_heading(number, step, started, paint)]
    if step.retries:
        lines.append(_INDENT + paint(f"retried {step.retries}x: {runs(step.retried_errors)}", "warn"))
    failed_attempts = step.errors if step.type not in TERMINAL_TYPES else []
    for attempt, (error, cause) in enumerate(failed_attempts, 1):
        text = f"attempt {attempt} failed: {clean(error)}"
        # The whole message: the provider's reason is at its end ("... belongs to the Customer ...").
        summary = summarize_cause(cause, ERROR_MESSAGE_LIMIT)
        lines.append(_INDENT + paint(text + (f": {summary}" if summary else ""), "error"))
    if step.errors and step.status == "retried":
        lines.append(f"{_INDENT}attempt {step.attempts} succeeded")
    if step.status == "caught" and step.errors:
        routed = f"caught {clean(step.errors[-1][0])} -> {clean(step.next or '?')}"
        if step.catch_errors:
            routed += f"  (Catch {', '.join(clean(e) for e in step.catch_errors)})"
        lines.append(_INDENT + paint(routed, "warn"))
    if step.type == "Fail" and step.errors:
        error, cause = step.errors[-1]
        lines.append(_INDENT + paint(f"fails with {clean(error)}: {summarize_cause(cause)}", "error"))
    if show_io:
        for label, raw in (("input", step.input), ("output", step.output)):
            if raw is not None:
                lines.append(paint(f"{_INDENT}{label}:", "dim"))
                lines.extend("        " + line for line in pretty_json(raw).splitlines())
    return lines


def _outcome(
    description: dict[str, Any],
    history: list[dict[str, Any]],
    steps: list[Step],
    paint: Paint,
    *,
    show_io: bool,
) -> list[str]:
    """How the execution ended (its output, or its error and cause), or where it is now."""
    status = str(description.get("status", "RUNNING"))
    output = description.get("output")
    if status == "SUCCEEDED":
        lines = [paint("SUCCEEDED", status)]
        if show_io and output is not None:
            lines.extend("  " + line for line in pretty_json(output).splitlines())
        elif output is not None:
            lines.append("  output: " + clean(shorten(" ".join(str(output).split()), 200)))
        return lines
    if status == "RUNNING":
        where = f"in {clean(steps[-1].name)}" if steps else "(no state entered yet)"
        return [paint("RUNNING", status) + f"  {where}"]
    error, cause = execution_error(description, history)
    lines = [f"{paint(clean(status), status)}  {clean(error)}"]
    if cause:
        lines.append("  " + summarize_cause(cause, 400))
    return lines
