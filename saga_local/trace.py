"""``saga trace EXECUTION``: the Step Functions console's graph inspector, offline.

Reads what the engine recorded (``DescribeExecution`` and ``GetExecutionHistory``, as boto3 returns
them) and the state machine's definition, and shows which states ran, in what order, how often each
was attempted, which errors were retried or caught and where a Catch sent them:

* :func:`trace_steps` folds the event history into one :class:`Step` per state entered;
* :func:`render_text` prints it like the console's event history (``color`` adds ANSI colours);
* :func:`render_html` writes one self-contained page (inline CSS, JS and SVG, nothing fetched) that
  draws every state of the definition with a layered top-down layout, the path taken highlighted,
  each state coloured by outcome, beside the event table.

Everything shown comes from the history or the definition, and execution inputs and error causes
are attacker-influenced: every string is escaped for HTML, and control and bidi-override
characters are made visible before they reach a terminal or a page.
"""

from __future__ import annotations

import base64
import hashlib
import html
import itertools
import json
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "OUTCOME_COLORS",
    "Step",
    "StepStatus",
    "load_definition",
    "render_html",
    "render_text",
    "trace_steps",
]

StepStatus = Literal["succeeded", "failed", "caught", "retried", "running"]
Outcome = Literal["succeeded", "failed", "caught", "retried", "running", "not-entered"]

#: Fill and stroke of a state node per outcome (the page's CSS is generated from this).
OUTCOME_COLORS: dict[str, tuple[str, str]] = {
    "succeeded": ("#dcf5d9", "#1d8102"),
    "failed": ("#fde3e1", "#d13212"),
    "caught": ("#fff0d1", "#c77700"),
    "retried": ("#fff0d1", "#c77700"),
    "running": ("#dbeafe", "#0972d3"),
    "not-entered": ("#f2f3f3", "#9ba7a8"),
}

# Events that start an attempt of a task (one per try, retries included).
_ATTEMPT_EVENTS = {
    "TaskScheduled",
    "LambdaFunctionScheduled",
    "LambdaFunctionScheduleFailed",
    "ActivityScheduled",
    "ActivityScheduleFailed",
}
# Events that end an attempt (or a Map/Parallel state) in failure; they carry ``error``/``cause``.
_FAILURE_EVENTS = {
    "TaskFailed",
    "TaskTimedOut",
    "TaskStartFailed",
    "TaskSubmitFailed",
    "LambdaFunctionFailed",
    "LambdaFunctionTimedOut",
    "LambdaFunctionStartFailed",
    "LambdaFunctionScheduleFailed",
    "ActivityFailed",
    "ActivityTimedOut",
    "ActivityScheduleFailed",
    "MapStateFailed",
    "ParallelStateFailed",
}
_SUCCESS_EVENTS = {
    "TaskSucceeded",
    "LambdaFunctionSucceeded",
    "ActivitySucceeded",
    "MapStateSucceeded",
    "ParallelStateSucceeded",
}
_EXECUTION_END = {"ExecutionSucceeded", "ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted"}
_TERMINAL_TYPES = {"Succeed", "Fail"}


# -- reading ---------------------------------------------------------------------------------------


def load_definition(text: str) -> dict[str, Any]:
    """Parse an ASL definition (JSON; YAML is accepted too, as SAM allows ``.asl.yaml``)."""
    try:
        definition = json.loads(text)
    except json.JSONDecodeError as json_error:
        import yaml  # only for YAML definitions

        try:
            definition = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ValueError(f"not an ASL definition (invalid JSON: {json_error})") from json_error
    if not isinstance(definition, dict) or not isinstance(definition.get("States"), dict):
        raise ValueError("not an ASL definition: no 'States' object")
    if definition.get("StartAt") not in definition["States"]:
        raise ValueError(f"not an ASL definition: StartAt {definition.get('StartAt')!r} names no state")
    return definition


@dataclass
class Step:
    """One state entered, as the history tells it.

    ``attempts`` counts the tries of a task (1 plus its retries; 1 for states that call nothing).
    ``errors`` holds ``(error, cause)`` for every failed attempt, the retried ones included, in
    order. ``status`` is ``retried`` when an attempt failed and a later one succeeded, ``caught``
    when the last attempt failed and a Catch routed the error to ``next``, ``failed`` when the
    execution ended in this state, ``running`` while it is still in it.
    """

    name: str
    type: str
    status: StepStatus = "running"
    attempts: int = 1
    errors: list[tuple[str, str]] = field(default_factory=list)
    input: str | None = None
    output: str | None = None
    entered: datetime | None = None
    exited: datetime | None = None
    #: The state entered after this one.
    next: str | None = None
    #: When caught: the position of the Catch rule that matched in the state's ``Catch`` list.
    catch_index: int | None = None
    #: When caught: that rule's ``ErrorEquals``.
    catch_errors: list[str] | None = None
    #: History event ids that belong to this state, in order.
    event_ids: list[int] = field(default_factory=list)

    @property
    def retries(self) -> int:
        """How many times the state was retried (attempts after the first)."""
        return max(0, self.attempts - 1)

    @property
    def retried_errors(self) -> list[tuple[str, str]]:
        """The errors that were retried: all of them, but the last one when the state ended failed."""
        return self.errors[: self.retries]

    @property
    def duration(self) -> float | None:
        """Seconds from entered to exited, if both are known."""
        if self.entered is None or self.exited is None:
            return None
        return (self.exited - self.entered).total_seconds()


def _when(value: Any) -> datetime | None:
    """A history timestamp as an aware datetime (boto3 gives datetimes; JSON dumps give strings)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _details(event: dict[str, Any]) -> dict[str, Any]:
    """The ``...EventDetails`` of an event (``TaskFailed`` -> ``taskFailedEventDetails``)."""
    kind = str(event.get("type", ""))
    key = kind[:1].lower() + kind[1:] + "EventDetails"
    details = event.get(key)
    if isinstance(details, dict):
        return details
    for name, value in event.items():  # tolerate a renamed key: any single *EventDetails
        if name.endswith("EventDetails") and isinstance(value, dict):
            return value
    return {}


def _matches(error: str, error_equals: Iterable[str]) -> bool:
    """Whether a Retry/Catch ``ErrorEquals`` list matches ``error`` (as the engine decides)."""
    for candidate in error_equals:
        if candidate == error or candidate == "States.ALL":
            return True
        # States.TaskFailed matches every task failure but a timeout.
        if candidate == "States.TaskFailed" and error != "States.Timeout":
            return True
    return False


def trace_steps(history: list[dict[str, Any]], definition: dict[str, Any]) -> list[Step]:
    """One :class:`Step` per state entered, in the order the states were entered.

    Events are attributed to a state by following ``previousEventId`` (so a Parallel or Map
    state's branches do not mix); an event whose predecessor is unknown belongs to the state most
    recently entered and not yet exited.
    """
    states: dict[str, Any] = definition.get("States") or {}
    events = sorted(history, key=lambda e: int(e.get("id", 0)))
    steps: list[Step] = []
    owner: dict[int, int] = {}
    exit_event: dict[int, int] = {}
    open_steps: list[int] = []
    last_failed: dict[int, bool] = {}
    scheduled: dict[int, int] = {}
    ended: dict[str, Any] | None = None

    for event in events:
        kind = str(event.get("type", ""))
        event_id = int(event.get("id", 0))
        previous = int(event.get("previousEventId", 0) or 0)
        details = _details(event)
        when = _when(event.get("timestamp"))

        if kind.endswith("StateEntered"):
            name = str(details.get("name", "?"))
            state_type = kind[: -len("StateEntered")] or str((states.get(name) or {}).get("Type", "?"))
            steps.append(Step(name=name, type=state_type, input=details.get("input"), entered=when))
            index = len(steps) - 1
            open_steps.append(index)
            if previous in exit_event:
                steps[exit_event[previous]].next = name
        elif kind.endswith("StateExited"):
            name = str(details.get("name", "?"))
            candidates = [i for i in open_steps if steps[i].name == name]
            if not candidates:
                continue
            index = candidates[-1]
            open_steps.remove(index)
            steps[index].output = details.get("output")
            steps[index].exited = when
            exit_event[event_id] = index
        elif kind in _EXECUTION_END:
            ended = event
            if open_steps:
                owner[event_id] = open_steps[-1]
            continue
        else:
            index_or_none = owner.get(previous)
            if index_or_none is None or index_or_none not in open_steps:
                index_or_none = open_steps[-1] if open_steps else None
            if index_or_none is None:
                continue  # ExecutionStarted and the like belong to no state
            index = index_or_none
            step = steps[index]
            if kind in _ATTEMPT_EVENTS:
                # A ScheduleFailed replaces the Scheduled event: either one starts an attempt.
                scheduled[index] = scheduled.get(index, 0) + 1
                step.attempts = scheduled[index]
            if kind in _FAILURE_EVENTS:
                step.errors.append((str(details.get("error", kind)), str(details.get("cause", ""))))
                last_failed[index] = True
            elif kind in _SUCCESS_EVENTS:
                last_failed[index] = False
        owner[event_id] = index
        steps[index].event_ids.append(event_id)

    for position, step in enumerate(steps):
        if step.exited is not None:
            if step.errors and last_failed.get(position):
                step.status = "caught"
            elif step.errors:
                step.status = "retried"
            else:
                step.status = "succeeded"
            if step.next is None and position + 1 < len(steps):
                step.next = steps[position + 1].name
        elif ended is not None:
            _close_with_execution(step, ended)
        if step.status == "caught" and step.next is not None:
            _find_catch(step, states.get(step.name) or {})
    return steps


def _close_with_execution(step: Step, ended: dict[str, Any]) -> None:
    """A state the execution ended in: it has no exit event, the execution's end tells its fate."""
    details = _details(ended)
    step.exited = _when(ended.get("timestamp"))
    kind = ended.get("type")
    if kind == "ExecutionSucceeded":
        step.status = "succeeded"
        return
    step.status = "failed"
    error = details.get("error") or {"ExecutionTimedOut": "States.Timeout"}.get(str(kind), str(kind))
    if step.type == "Fail" or not step.errors or step.errors[-1][0] != error:
        step.errors.append((str(error), str(details.get("cause", ""))))


def _find_catch(step: Step, state: dict[str, Any]) -> None:
    error = step.errors[-1][0] if step.errors else ""
    catchers = [c for c in state.get("Catch") or [] if isinstance(c, dict)]
    ranked = [i for i, c in enumerate(catchers) if c.get("Next") == step.next]
    for index in ranked:
        if _matches(error, catchers[index].get("ErrorEquals") or []):
            step.catch_index = index
            break
    else:
        step.catch_index = ranked[0] if ranked else None
    if step.catch_index is not None:
        step.catch_errors = [str(e) for e in catchers[step.catch_index].get("ErrorEquals") or []]


# -- shared formatting -----------------------------------------------------------------------------


def _clean(text: str, *, keep_newlines: bool = False) -> str:
    """Make control, format (bidi override) and separator characters visible as escapes."""
    out = []
    for char in text:
        if char == "\n" and keep_newlines:
            out.append(char)
        elif unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp"}:
            out.append(char.encode("unicode_escape").decode("ascii"))
        else:
            out.append(char)
    return "".join(out)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summarize_cause(cause: str | None, limit: int = 240) -> str:
    """One readable line for an error cause (a Lambda's cause is JSON with ``errorMessage``)."""
    if not cause:
        return ""
    text = cause
    try:
        parsed = json.loads(cause)
    except (ValueError, TypeError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("errorMessage"), str):
        text = parsed["errorMessage"]
    text = " ".join(text.split())
    return _clean(_shorten(text, limit))


def _truncate_json(value: Any, max_string: int) -> Any:
    if isinstance(value, str) and len(value) > max_string:
        return value[:max_string] + f"… (+{len(value) - max_string} chars)"
    if isinstance(value, dict):
        return {k: _truncate_json(v, max_string) for k, v in value.items()}
    if isinstance(value, list):
        return [_truncate_json(v, max_string) for v in value]
    return value


def pretty_json(raw: str | None, *, max_string: int = 160, max_lines: int = 40) -> str:
    """``raw`` pretty-printed when it is JSON; long strings and long documents cut, and said so."""
    if raw is None:
        return ""
    try:
        text = json.dumps(_truncate_json(json.loads(raw), max_string), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        text = raw if len(raw) <= max_string * 4 else raw[: max_string * 4] + f"… (+{len(raw)} chars)"
    lines = text.splitlines()
    if len(lines) > max_lines:
        lines = [*lines[:max_lines], f"… ({len(lines) - max_lines} more lines)"]
    return _clean("\n".join(lines), keep_newlines=True)


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _stamp(value: Any) -> str:
    when = _when(value)
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z" if when else ""


def _runs(errors: Iterable[tuple[str, str]]) -> str:
    """``A, A, B`` -> ``A x2, B``."""
    out: list[tuple[str, int]] = []
    for error, _ in errors:
        if out and out[-1][0] == error:
            out[-1] = (error, out[-1][1] + 1)
        else:
            out.append((error, 1))
    return ", ".join(_clean(e) + (f" x{n}" if n > 1 else "") for e, n in out)


def _execution_error(description: dict[str, Any], history: list[dict[str, Any]]) -> tuple[str, str]:
    error = description.get("error")
    cause = description.get("cause")
    if error is None:
        for event in reversed(history):
            if event.get("type") in _EXECUTION_END - {"ExecutionSucceeded"}:
                details = _details(event)
                error, cause = details.get("error"), details.get("cause")
                break
    return str(error or ""), str(cause or "")


def _duration(description: dict[str, Any]) -> float | None:
    start, stop = _when(description.get("startDate")), _when(description.get("stopDate"))
    return (stop - start).total_seconds() if start and stop else None


# -- text ------------------------------------------------------------------------------------------

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
    status = str(description.get("status", "RUNNING"))
    started = _when(description.get("startDate")) or (steps[0].entered if steps else None)
    lines = [
        f"{paint('Execution', 'bold')}  {_clean(str(description.get('name', '?')))}  {paint(status, status)}",
    ]
    if description.get("executionArn"):
        lines.append(paint(f"  {_clean(str(description['executionArn']))}", "dim"))
    if description.get("startDate"):
        timing = f"  started {_stamp(description.get('startDate'))}"
        if description.get("stopDate"):
            timing += f", took {_seconds(_duration(description))}"
        lines.append(paint(timing, "dim"))
    lines.append("  path: " + (" -> ".join(_clean(s.name) for s in steps) or "(no state entered yet)"))
    lines.append("")

    for number, step in enumerate(steps, 1):
        offset = f"+{_seconds((step.entered - started).total_seconds())}" if step.entered and started else ""
        took = _seconds(step.duration)
        timing = ", ".join(t for t in (f"at {offset}" if offset else "", took) if t)
        head = f"{number:>2}. {paint(_clean(step.name), 'bold')}  [{_clean(step.type)}]  "
        head += paint(step.status, step.status)
        if step.attempts > 1:
            head += f"  ({step.attempts} attempts)"
        if timing:
            head += "  " + paint(timing, "dim")
        if step.next and step.status != "caught":
            head += f"  -> {_clean(step.next)}"
        lines.append(head)
        if step.retries:
            lines.append("      " + paint(f"retried {step.retries}x: {_runs(step.retried_errors)}", "warn"))
        failed_attempts = step.errors if step.type not in _TERMINAL_TYPES else []
        for attempt, (error, cause) in enumerate(failed_attempts, 1):
            text = f"attempt {attempt} failed: {_clean(error)}"
            summary = summarize_cause(cause)
            lines.append("      " + paint(text + (f": {summary}" if summary else ""), "error"))
        if step.errors and step.status == "retried":
            lines.append(f"      attempt {step.attempts} succeeded")
        if step.status == "caught" and step.errors:
            routed = f"caught {_clean(step.errors[-1][0])} -> {_clean(step.next or '?')}"
            if step.catch_errors:
                routed += f"  (Catch {', '.join(_clean(e) for e in step.catch_errors)})"
            lines.append("      " + paint(routed, "warn"))
        if step.type == "Fail" and step.errors:
            error, cause = step.errors[-1]
            lines.append("      " + paint(f"fails with {_clean(error)}: {summarize_cause(cause)}", "error"))
        if show_io:
            for label, raw in (("input", step.input), ("output", step.output)):
                if raw is None:
                    continue
                lines.append(paint(f"      {label}:", "dim"))
                lines.extend("        " + line for line in pretty_json(raw).splitlines())
    lines.append("")

    error, cause = _execution_error(description, history)
    if status == "SUCCEEDED":
        lines.append(paint("SUCCEEDED", status))
        if show_io and description.get("output") is not None:
            lines.extend("  " + line for line in pretty_json(description.get("output")).splitlines())
        elif description.get("output") is not None:
            lines.append("  output: " + _clean(_shorten(" ".join(str(description["output"]).split()), 200)))
    elif status == "RUNNING":
        where = f"in {_clean(steps[-1].name)}" if steps else "(no state entered yet)"
        lines.append(paint("RUNNING", status) + f"  {where}")
    else:
        lines.append(f"{paint(_clean(status), status)}  {_clean(error)}")
        if cause:
            lines.append("  " + summarize_cause(cause, 400))
    return "\n".join(lines) + "\n"


# -- graph -----------------------------------------------------------------------------------------

_START = "\x00start"
_END = "\x00end"


@dataclass
class _Edge:
    source: str
    target: str
    kind: Literal["start", "next", "choice", "default", "catch", "end"]
    label: str = ""
    title: str = ""
    index: int = 0
    points: list[tuple[float, float]] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)
    reversed: bool = False


_OPERATORS = {
    "Equals": "==",
    "LessThan": "<",
    "GreaterThan": ">",
    "LessThanEquals": "<=",
    "GreaterThanEquals": ">=",
    "Matches": "matches",
}


def _rule_text(rule: dict[str, Any], *, short: bool = False) -> str:
    """A Choice rule as an expression: ``$.claim.outcome == "DUPLICATE"``.

    ``short`` leaves out ``IsPresent`` guards that another condition of the same ``And`` implies
    (``$.error is present and $.error.Error == ...`` reads as ``$.error.Error == ...``).
    """
    if "Condition" in rule:  # JSONata
        return str(rule["Condition"])
    for joiner in ("And", "Or"):
        if isinstance(rule.get(joiner), list):
            parts = [r for r in rule[joiner] if isinstance(r, dict)]
            if short and joiner == "And":
                variables = [str(r.get("Variable", "")) for r in parts]

                def implied(r: dict[str, Any], variables: list[str] = variables) -> bool:
                    guard = str(r.get("Variable"))
                    return r.get("IsPresent") is True and any(
                        v.startswith((guard + ".", guard + "[")) for v in variables
                    )

                parts = [r for r in parts if not implied(r)] or parts
            return f" {joiner.lower()} ".join(_rule_text(r, short=short) for r in parts)
    if isinstance(rule.get("Not"), dict):
        return f"not ({_rule_text(rule['Not'], short=short)})"
    variable = str(rule.get("Variable", "?"))
    for key, value in rule.items():
        if key in {"Variable", "Next", "Comment", "Assign", "Output"}:
            continue
        if key.startswith("Is"):
            what = key[2:].lower()
            return f"{variable} {'is' if value else 'is not'} {what}"
        by_path = key.endswith("Path")
        operator = key[: -len("Path")] if by_path else key
        symbol = next((s for suffix, s in _OPERATORS.items() if operator.endswith(suffix)), operator)
        shown = str(value) if by_path else json.dumps(value, ensure_ascii=False)
        return f"{variable} {symbol} {shown}"
    return "?"


def _graph_edges(definition: dict[str, Any]) -> list[_Edge]:
    states: dict[str, Any] = definition.get("States") or {}
    edges = [_Edge(_START, str(definition.get("StartAt")), "start")]
    for name, state in states.items():
        if not isinstance(state, dict):
            continue
        kind = state.get("Type")
        if kind == "Choice":
            for i, rule in enumerate(state.get("Choices") or []):
                if isinstance(rule, dict) and rule.get("Next") in states:
                    label = _shorten(_rule_text(rule, short=True), 40)
                    edges.append(_Edge(name, rule["Next"], "choice", label, _rule_text(rule), i))
            if state.get("Default") in states:
                edges.append(_Edge(name, state["Default"], "default", "Default", "Default"))
        elif state.get("Next") in states:
            edges.append(_Edge(name, state["Next"], "next"))
        if state.get("End") or kind in _TERMINAL_TYPES:
            edges.append(_Edge(name, _END, "end"))
        for i, catcher in enumerate(state.get("Catch") or []):
            if isinstance(catcher, dict) and catcher.get("Next") in states:
                errors = ", ".join(str(e) for e in catcher.get("ErrorEquals") or [])
                edges.append(_Edge(name, catcher["Next"], "catch", _shorten(errors, 40), errors, i))
    return edges


@dataclass
class _Layout:
    x: dict[str, float]
    y: dict[str, float]
    width: dict[str, float]
    height: dict[str, float]
    edges: list[_Edge]
    size: tuple[float, float]


_NODE_H = 50.0
_LAYER_GAP = 74.0
_NODE_GAP = 36.0
_DUMMY_W = 14.0


#: Advance widths in em of a wide sans-serif (DejaVu Sans, what ``system-ui`` falls back to on a
#: Linux without desktop fonts): narrower fonts (Segoe UI, SF, Roboto) always fit in what these give.
_EM_WIDTHS: dict[str, float] = {
    ch: em
    for chars, em in (
        ("iljI.,:;'!|", 0.30),
        (" ", 0.32),
        ("ftr()[]{}-/\\", 0.40),
        ('"*^`~', 0.50),
        ("_sczJ?", 0.55),
        ("FLP", 0.62),
        ("ABCDEGHKNOQRSTUVXYZ", 0.76),
        ("=<>+#&", 0.84),
        ("mM", 0.98),
        ("wW@%", 1.0),
    )
    for ch in chars
}
#: Bold (font-weight 600) glyphs of that font are up to 13% wider; the rest is a margin.
_BOLD = 1.14
_MARGIN = 1.04


def _text_width(text: str, size: float, *, bold: bool = False) -> float:
    """A generous estimate of ``text``'s rendered width at ``size`` px: never less than the browser's.

    Measured in Chromium against DejaVu Sans: 4 to 16% above the real width, normal and bold
    (tests/local/test_trace.py measures the page itself).
    """
    ems = 0.0
    for ch in text:
        if ch in _EM_WIDTHS:
            ems += _EM_WIDTHS[ch]
        elif ch.isdigit() or ch.islower():
            ems += 0.64
        elif ch.isupper():
            ems += 0.76
        else:
            ems += 0.8  # symbols, and anything outside ASCII
    return ems * size * (_BOLD if bold else 1.0) * _MARGIN


def _fit(text: str, room: float, size: float, *, bold: bool = False) -> str:
    """``text``, shortened with an ellipsis until it fits in ``room`` px."""
    if _text_width(text, size, bold=bold) <= room:
        return text
    cut = len(text)
    while cut > 1 and _text_width(text[:cut] + "…", size, bold=bold) > room:
        cut -= 1
    return text[:cut] + "…"


#: Node names: 13px, weight 600 (the stylesheet's ``.node .name``); padding inside the node.
_NAME_PX = 13.0
_NAME_PAD = 28.0


def _node_width(name: str) -> float:
    return max(150.0, min(260.0, _text_width(_clean(name), _NAME_PX, bold=True) + _NAME_PAD))


def _layout(definition: dict[str, Any], edges: list[_Edge]) -> _Layout:
    """A deterministic layered (Sugiyama-style) layout, top-down.

    Cycles are broken by reversing DFS back edges; layers are longest paths from the start; edges
    that span layers get dummy nodes; barycentre sweeps order each layer; x positions are pulled
    towards connected nodes while keeping each layer's order and spacing.
    """
    states = list((definition.get("States") or {}).keys())
    nodes = [_START, *states]
    rank = {n: i for i, n in enumerate(nodes)}
    out: dict[str, list[_Edge]] = {n: [] for n in nodes}
    # The end of the execution is drawn as a stub under each state that can end it, not laid out.
    for edge in edges:
        if edge.target != _END:
            out[edge.source].append(edge)

    # Break cycles: a DFS from the start, then from every state it did not reach.
    visited: set[str] = set()
    on_stack: set[str] = set()
    discovery: list[str] = []
    for root in nodes:
        if root in visited:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        visited.add(root)
        on_stack.add(root)
        discovery.append(root)
        while stack:
            node, position = stack[-1]
            if position < len(out[node]):
                stack[-1] = (node, position + 1)
                edge = out[node][position]
                if edge.target in on_stack:
                    edge.reversed = True
                elif edge.target not in visited:
                    visited.add(edge.target)
                    on_stack.add(edge.target)
                    discovery.append(edge.target)
                    stack.append((edge.target, 0))
            else:
                on_stack.discard(node)
                stack.pop()

    def ends(edge: _Edge) -> tuple[str, str]:
        return (edge.target, edge.source) if edge.reversed else (edge.source, edge.target)

    forward = [e for e in edges if e.source != e.target and e.target != _END]
    # Longest-path layering over the acyclic orientation (Kahn, in definition order).
    indegree = dict.fromkeys(nodes, 0)
    successors: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in forward:
        a, b = ends(edge)
        successors[a].append(b)
        indegree[b] += 1
    layer = dict.fromkeys(nodes, 0)
    ready = sorted((n for n in nodes if indegree[n] == 0), key=rank.__getitem__)
    while ready:
        node = ready.pop(0)
        for succ in successors[node]:
            layer[succ] = max(layer[succ], layer[node] + 1)
            indegree[succ] -= 1
            if indegree[succ] == 0:
                ready.append(succ)
                ready.sort(key=rank.__getitem__)

    width = {n: _node_width(n) for n in states}
    height = dict.fromkeys(states, _NODE_H)
    width[_START] = 70.0
    height[_START] = 28.0

    # Dummy nodes for edges spanning more than one layer.
    up: dict[str, list[tuple[str, float]]] = {n: [] for n in nodes}
    down: dict[str, list[tuple[str, float]]] = {n: [] for n in nodes}
    for number, edge in enumerate(forward):
        a, b = ends(edge)
        chain = [a]
        for depth in range(layer[a] + 1, layer[b]):
            dummy = f"\x00d{number}.{depth}"
            layer[dummy] = depth
            width[dummy] = _DUMMY_W
            height[dummy] = 0.0
            up[dummy], down[dummy] = [], []
            discovery.append(dummy)
            chain.append(dummy)
        chain.append(b)
        edge.chain = chain
        weight = 1.0 if edge.kind == "catch" else 2.0
        for u, v in itertools.pairwise(chain):
            w = 6.0 if u.startswith("\x00d") and v.startswith("\x00d") else weight
            down[u].append((v, w))
            up[v].append((u, w))

    depth_count = max(layer.values()) + 1
    order_of = {n: i for i, n in enumerate(discovery)}
    layers: list[list[str]] = [[] for _ in range(depth_count)]
    for node in sorted(layer, key=lambda n: order_of.get(n, len(order_of))):
        layers[layer[node]].append(node)

    def crossings(layering: list[list[str]]) -> int:
        total = 0
        for upper in layering[:-1]:
            position = {n: i for i, n in enumerate(upper)}
            lower_pos: dict[str, int] = {}
            for row in layering:
                if row is not upper:
                    lower_pos.update({n: i for i, n in enumerate(row)})
            links = [(position[u], lower_pos[v]) for u in upper for v, _ in down[u] if v in lower_pos]
            total += sum(
                1
                for i, (a1, b1) in enumerate(links)
                for a2, b2 in links[i + 1 :]
                if (a1 - a2) * (b1 - b2) < 0
            )
        return total

    best = [list(row) for row in layers]
    best_crossings = crossings(best)
    for sweep in range(12):
        downward = sweep % 2 == 0
        rows = range(1, depth_count) if downward else range(depth_count - 2, -1, -1)
        for r in rows:
            reference = layers[r - 1] if downward else layers[r + 1]
            layers[r] = _barycentre_sort(layers[r], up if downward else down, reference)
        score = crossings(layers)
        if score < best_crossings:
            best, best_crossings = [list(row) for row in layers], score
    layers = best

    # x: centre each layer, then pull towards neighbours while keeping order and spacing.
    x: dict[str, float] = {}
    widest = max(sum(width[n] for n in row) + _NODE_GAP * (len(row) - 1) for row in layers)
    for row in layers:
        total = sum(width[n] for n in row) + _NODE_GAP * (len(row) - 1)
        cursor = (widest - total) / 2
        for node in row:
            x[node] = cursor + width[node] / 2
            cursor += width[node] + _NODE_GAP

    def gap(a: str, b: str) -> float:
        spacing = 10.0 if a.startswith("\x00d") and b.startswith("\x00d") else _NODE_GAP
        return (width[a] + width[b]) / 2 + spacing

    def place(row: list[str], desired: dict[str, float]) -> None:
        left = [desired[n] for n in row]
        for i in range(1, len(row)):
            left[i] = max(left[i], left[i - 1] + gap(row[i - 1], row[i]))
        right = [desired[n] for n in row]
        for i in range(len(row) - 2, -1, -1):
            right[i] = min(right[i], right[i + 1] - gap(row[i], row[i + 1]))
        for i, node in enumerate(row):
            x[node] = (left[i] + right[i]) / 2

    def pull(node: str, links: list[tuple[str, float]]) -> float:
        if not links:
            return x[node]
        return sum(x[n] * w for n, w in links) / sum(w for _, w in links)

    for sweep in range(16):
        rows_order = layers if sweep % 2 == 0 else list(reversed(layers))
        for row in rows_order:
            if sweep >= 12:
                desired = {n: pull(n, up[n] + down[n]) for n in row}
            elif sweep % 2 == 0:
                desired = {n: pull(n, up[n]) for n in row}
            else:
                desired = {n: pull(n, down[n]) for n in row}
            place(row, desired)

    margin = 30.0
    low = min(x[n] - width[n] / 2 for n in x)
    for node in x:
        x[node] += margin - low
    high = max(x[n] + width[n] / 2 for n in x)
    y: dict[str, float] = {}
    for depth, row in enumerate(layers):
        for node in row:
            y[node] = margin + depth * (_NODE_H + _LAYER_GAP) + _NODE_H / 2

    _route(edges, x, y, width, height, out)
    size = (high + margin, margin * 2 + depth_count * _NODE_H + (depth_count - 1) * _LAYER_GAP + 24)
    return _Layout(x, y, width, height, edges, size)


def _barycentre_sort(
    row: list[str], links: dict[str, list[tuple[str, float]]], reference: list[str]
) -> list[str]:
    """``row`` ordered by the weighted mean position of each node's neighbours in ``reference``."""
    where = {n: i for i, n in enumerate(reference)}
    current = {n: i for i, n in enumerate(row)}

    def key(node: str) -> tuple[float, int]:
        placed = [(where[n], w) for n, w in links[node] if n in where]
        if not placed:
            return float(current[node]), current[node]
        return sum(p * w for p, w in placed) / sum(w for _, w in placed), current[node]

    return sorted(row, key=key)


def _route(
    edges: list[_Edge],
    x: dict[str, float],
    y: dict[str, float],
    width: dict[str, float],
    height: dict[str, float],
    out: dict[str, list[_Edge]],
) -> None:
    """Polyline points for each edge: ports spread along the node's bottom and top edges."""
    leaving: dict[str, list[_Edge]] = {}
    arriving: dict[str, list[_Edge]] = {}
    for edge in edges:
        if edge.target == _END:
            leaving.setdefault(edge.source, []).append(edge)
        if edge.source == edge.target or not edge.chain:
            continue
        leaving.setdefault(edge.chain[0], []).append(edge)
        arriving.setdefault(edge.chain[-1], []).append(edge)

    def heading(edge: _Edge) -> float:
        return x[edge.source] if edge.target == _END else x[edge.chain[1]]

    port_out: dict[int, float] = {}
    port_in: dict[int, float] = {}
    for node, group in leaving.items():
        group.sort(key=lambda e: (heading(e), e.index))
        for i, edge in enumerate(group):
            port_out[id(edge)] = x[node] + (i + 1) / (len(group) + 1) * width[node] * 0.7 - width[node] * 0.35
    for node, group in arriving.items():
        group.sort(key=lambda e: (x[e.chain[-2]], e.index))
        for i, edge in enumerate(group):
            port_in[id(edge)] = x[node] + (i + 1) / (len(group) + 1) * width[node] * 0.7 - width[node] * 0.35

    for edge in edges:
        if edge.target == _END:  # a short stub down to the end marker
            bottom = y[edge.source] + height[edge.source] / 2
            edge.points = [(port_out[id(edge)], bottom), (port_out[id(edge)], bottom + 14)]
            continue
        if edge.source == edge.target:  # a state that loops on itself: an arc on its right
            right = x[edge.source] + width[edge.source] / 2
            edge.points = [
                (right, y[edge.source] - 8),
                (right + 30, y[edge.source]),
                (right, y[edge.source] + 8),
            ]
            continue
        chain = edge.chain
        points = [(port_out[id(edge)], y[chain[0]] + height[chain[0]] / 2)]
        points.extend((x[n], y[n]) for n in chain[1:-1])
        points.append((port_in[id(edge)], y[chain[-1]] - height[chain[-1]] / 2))
        edge.points = list(reversed(points)) if edge.reversed else points


def _bezier(points: list[tuple[float, float]], segment: int, t: float) -> tuple[float, float]:
    """The point at ``t`` on segment ``segment`` of the curve :func:`_path_d` draws."""
    (x0, y0), (x1, y1) = points[segment], points[segment + 1]
    bend = (y1 - y0) / 2 if abs(y1 - y0) > 1 else 20.0
    controls = [(x0, y0), (x0, y0 + bend), (x1, y1 - bend), (x1, y1)]
    weights = [(1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t**2, t**3]
    return (
        sum(w * px for w, (px, _) in zip(weights, controls, strict=True)),
        sum(w * py for w, (_, py) in zip(weights, controls, strict=True)),
    )


_Box = tuple[float, float, float, float]
#: Edge labels: 10.5px (``.edge-label text``), bold on the path taken; padding each side; height.
_LABEL_PX = 10.5
_LABEL_PAD = 6.0
_LABEL_H = 17.0
#: Where along a segment a label may sit, best first; then beside its edge instead of on it.
_ALONG = (0.5, 0.35, 0.65, 0.22, 0.8, 0.12, 0.9, 0.05, 0.95)


def _curve_samples(points: list[tuple[float, float]], per_segment: int = 48) -> list[tuple[float, float]]:
    """Points along the curve :func:`_path_d` draws through ``points``."""
    return [
        _bezier(points, segment, step / per_segment)
        for segment in range(len(points) - 1)
        for step in range(per_segment + 1)
    ]


def _obstacles(layout: _Layout) -> list[_Box]:
    """What a label must not cover: every node (its order bubble above it included) and end marker."""
    boxes: list[_Box] = [
        (
            layout.x[n] - layout.width[n] / 2 - 4,
            layout.y[n] - layout.height[n] / 2 - 10,
            layout.x[n] + layout.width[n] / 2 + 4,
            layout.y[n] + layout.height[n] / 2 + 4,
        )
        for n in layout.x
        if not n.startswith("\x00d")
    ]
    for edge in layout.edges:
        if edge.kind == "end" and edge.points:
            ex, ey = edge.points[-1]
            boxes.append((ex - 9, ey - 2, ex + 9, ey + 16))
    return boxes


def _label_box(
    edge: _Edge,
    label_w: float,
    occupied: list[_Box],
    paths: list[tuple[int, list[tuple[float, float]]]],
    own: int,
    bounds: tuple[float, float],
) -> _Box:
    """The first place along (then beside) ``edge`` that covers no box in ``occupied`` and no point of
    a highlighted path but its own; failing that, the place with the fewest such conflicts."""
    reach = 2.5  # half the highlighted stroke (2.6) and a little air

    def conflicts(box: _Box) -> int:
        count = sum(
            1 for o in occupied if not (box[2] <= o[0] or box[0] >= o[2] or box[3] <= o[1] or box[1] >= o[3])
        )
        for index, samples in paths:
            if index != own and any(
                box[0] - reach < px < box[2] + reach and box[1] - reach < py < box[3] + reach
                for px, py in samples
            ):
                count += 2
        if box[0] < 2 or box[1] < 2 or box[2] > bounds[0] - 2 or box[3] > bounds[1] - 2:
            count += 1
        return count

    anchors = [_bezier(edge.points, segment, t) for segment in range(len(edge.points) - 1) for t in _ALONG]
    shifts = (0.0, label_w / 2 + 6, -(label_w / 2 + 6))
    best: tuple[int, _Box] | None = None
    for shift in shifts:
        for cx, cy in anchors:
            box = (cx + shift - label_w / 2, cy - _LABEL_H / 2, cx + shift + label_w / 2, cy + _LABEL_H / 2)
            score = conflicts(box)
            if score == 0:
                return box
            if best is None or score < best[0]:
                best = (score, box)
    assert best is not None
    return best[1]


def _labels(edges: list[_Edge], taken: set[int], layout: _Layout) -> list[str]:
    """Edge labels on their curves, each moved along (then beside) its edge until it covers no node,
    no other label and no highlighted edge but its own; each box as wide as its text in bold if bold."""
    occupied = _obstacles(layout)
    paths = [(i, _curve_samples(edges[i].points)) for i in sorted(taken) if len(edges[i].points) >= 2]
    out: list[str] = []
    # The path's labels first: they get the best places.
    for i in sorted(range(len(edges)), key=lambda i: (i not in taken, i)):
        edge = edges[i]
        if not edge.label or len(edge.points) < 2:
            continue
        label_w = _text_width(edge.label, _LABEL_PX, bold=i in taken) + 2 * _LABEL_PAD
        box = _label_box(edge, label_w, occupied, paths, i, layout.size)
        occupied.append(box)
        lx, ly = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        label_classes = "edge-label" + (" taken" if i in taken else "") + f" label-{edge.kind}"
        out.append(
            f'<g class="{label_classes}" data-edge="{i}"><rect x="{box[0]:.1f}" y="{box[1]:.1f}" '
            f'width="{label_w:.1f}" height="{_LABEL_H:.0f}" rx="3"/>'
            f'<text x="{lx:.1f}" y="{ly + 4:.1f}" text-anchor="middle">{_e(edge.label)}</text>'
            f"<title>{_e(edge.title)}</title></g>"
        )
    return out


def _path_d(points: list[tuple[float, float]]) -> str:
    """Smooth vertical curves through the points."""
    (x0, y0), rest = points[0], points[1:]
    parts = [f"M{x0:.1f},{y0:.1f}"]
    for x1, y1 in rest:
        bend = (y1 - y0) / 2 if abs(y1 - y0) > 1 else 20.0
        parts.append(f"C{x0:.1f},{y0 + bend:.1f} {x1:.1f},{y1 - bend:.1f} {x1:.1f},{y1:.1f}")
        x0, y0 = x1, y1
    return " ".join(parts)


# -- html ------------------------------------------------------------------------------------------


def _e(text: Any) -> str:
    """Escape for HTML text and double-quoted attributes, control characters made visible."""
    return html.escape(_clean(str(text), keep_newlines=True), quote=True)


_OUTCOME_RANK = {"failed": 5, "caught": 4, "retried": 3, "running": 2, "succeeded": 1}


def _node_outcomes(steps: list[Step]) -> dict[str, Outcome]:
    """A state's outcome over all its entries: the most alarming one wins."""
    outcome: dict[str, Outcome] = {}
    for step in steps:
        seen = outcome.get(step.name)
        if seen is None or _OUTCOME_RANK[step.status] > _OUTCOME_RANK.get(seen, 0):
            outcome[step.name] = step.status
    return outcome


def _taken(edges: list[_Edge], steps: list[Step], definition: dict[str, Any], status: str) -> set[int]:
    """Indexes of the edges the execution followed."""
    taken: set[int] = set()
    top = definition.get("States") or {}
    path = [s for s in steps if s.name in top]
    if path:
        for i, edge in enumerate(edges):
            if edge.kind == "start" and edge.target == path[0].name:
                taken.add(i)
    for step in path:
        if step.next is None:
            continue
        for i, edge in enumerate(edges):
            if edge.source != step.name or edge.target != step.next:
                continue
            if step.status == "caught":
                if edge.kind == "catch" and edge.index == step.catch_index:
                    taken.add(i)
            elif edge.kind != "catch":
                taken.add(i)
    if path and status != "RUNNING":
        last = path[-1]
        # A step that was retried and then succeeded ended the execution too.
        ended_here = last.status in {"succeeded", "retried"} or (
            last.status == "failed" and last.type == "Fail"
        )
        if ended_here:
            taken.update(i for i, e in enumerate(edges) if e.kind == "end" and e.source == last.name)
    return taken


def _badge_width(text: str) -> float:
    return _text_width(text, 10, bold=True) + 10


def _svg(definition: dict[str, Any], steps: list[Step], status: str) -> str:
    edges = _graph_edges(definition)
    layout = _layout(definition, edges)
    taken = _taken(edges, steps, definition, status)
    outcomes = _node_outcomes(steps)
    states: dict[str, Any] = definition.get("States") or {}
    order: dict[str, list[int]] = {}
    for number, step in enumerate(steps, 1):
        order.setdefault(step.name, []).append(number)
    by_name: dict[str, list[Step]] = {}
    for step in steps:
        by_name.setdefault(step.name, []).append(step)

    width, height = layout.size
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="graph" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="state machine graph">',
        "<defs>",
    ]
    for marker in ("plain", "taken", "taken-catch"):
        parts.append(
            f'<marker id="arrow-{marker}" class="arrow-{marker}" viewBox="0 0 10 10" refX="9" refY="5" '
            'markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto-start-reverse">'
            '<path d="M0,0 L10,5 L0,10 z"/></marker>'
        )
    parts.append("</defs>")

    labels: list[str] = []
    # Untaken edges first so the path is drawn over them.
    for i in sorted(range(len(edges)), key=lambda i: i in taken):
        edge = edges[i]
        if not edge.points:
            continue
        is_taken = i in taken
        classes = ["edge", f"edge-{edge.kind}"] + (["taken"] if is_taken else [])
        marker = ("taken-catch" if edge.kind == "catch" else "taken") if is_taken else "plain"
        end_marker = "" if edge.kind == "end" else f' marker-end="url(#arrow-{marker})"'
        source = "" if edge.source == _START else edge.source
        target = "" if edge.target == _END else edge.target
        points = edge.points
        parts.append(
            f'<path class="{" ".join(classes)}" d="{_path_d(points)}"{end_marker} '
            f'data-edge="{i}" data-source="{_e(source)}" data-target="{_e(target)}" data-kind="{edge.kind}" '
            f'data-taken="{"true" if is_taken else "false"}">'
            f"<title>{_e(edge.title or edge.kind)}</title></path>"
        )
    labels.extend(_labels(edges, taken, layout))
    parts.extend(labels)

    cx, cy = layout.x[_START], layout.y[_START]
    started = any(edges[i].kind == "start" for i in taken)
    parts.append(
        f'<g class="terminal{" taken" if started else ""}" data-terminal="start">'
        f'<rect x="{cx - 35:.1f}" y="{cy - 14:.1f}" width="70" height="28" rx="14"/>'
        f'<text x="{cx:.1f}" y="{cy + 4:.1f}" text-anchor="middle">Start</text></g>'
    )
    for i, edge in enumerate(edges):
        if edge.kind == "end" and edge.points:
            ex, ey = edge.points[-1]
            parts.append(
                f'<g class="final{" taken" if i in taken else ""}" data-terminal="end">'
                f'<circle class="ring" cx="{ex:.1f}" cy="{ey + 7:.1f}" r="7"/>'
                f'<circle class="dot" cx="{ex:.1f}" cy="{ey + 7:.1f}" r="3.5"/>'
                f"<title>End</title></g>"
            )

    for name, state in states.items():
        cx, cy = layout.x[name], layout.y[name]
        w, h = layout.width[name], layout.height[name]
        left, top = cx - w / 2, cy - h / 2
        outcome: Outcome = outcomes.get(name, "not-entered")
        kind = str(state.get("Type", "?")) if isinstance(state, dict) else "?"
        entered = name in outcomes
        if kind == "Choice":
            shape = (
                f'<polygon class="shape" points="{left + 14:.1f},{top:.1f} {left + w - 14:.1f},{top:.1f} '
                f"{left + w:.1f},{cy:.1f} {left + w - 14:.1f},{top + h:.1f} {left + 14:.1f},{top + h:.1f} "
                f'{left:.1f},{cy:.1f}"/>'
            )
        else:
            radius = 4 if kind in _TERMINAL_TYPES else 10
            shape = (
                f'<rect class="shape" x="{left:.1f}" y="{top:.1f}" width="{w:.1f}" height="{h:.1f}" '
                f'rx="{radius}"/>'
            )
        runs = by_name.get(name, [])
        tooltip = [f"{name} ({kind}): {outcome}"]
        for step in runs:
            line = f"{step.status}, {step.attempts} attempt(s)"
            if step.duration is not None:
                line += f", {_seconds(step.duration)}"
            tooltip.append(line)
            tooltip.extend(f"  {error}: {summarize_cause(cause, 160)}" for error, cause in step.errors)
        title = _fit(_clean(name), w - _NAME_PAD, _NAME_PX, bold=True)
        parts.append(
            f'<g class="node outcome-{outcome} type-{_e(kind.lower())}" data-state="{_e(name)}" '
            f'data-outcome="{outcome}" data-type="{_e(kind)}" data-taken="{"true" if entered else "false"}" '
            f'tabindex="0" role="button">{shape}'
            f'<text class="name" x="{cx:.1f}" y="{cy - 1:.1f}" text-anchor="middle">{_e(title)}</text>'
            f'<text class="kind" x="{cx:.1f}" y="{cy + 14:.1f}" text-anchor="middle">{_e(kind)}</text>'
            f"<title>{_e(chr(10).join(tooltip))}</title>"
        )
        order_w = 0.0
        if order.get(name):
            numbers = _shorten(",".join(str(n) for n in order[name]), 9)
            order_w = max(20.0, _text_width(numbers, 10, bold=True) + 10)
            parts.append(
                f'<g class="order"><rect x="{left - order_w / 2:.1f}" y="{top - 10:.1f}" '
                f'width="{order_w:.1f}" height="20" rx="10"/>'
                f'<text x="{left:.1f}" y="{top + 4:.1f}" text-anchor="middle">{_e(numbers)}</text></g>'
            )
        # Badges keep clear of the ports: edges arrive at the top centre and leave along the bottom.
        retries = sum(s.retries for s in runs)
        badges: list[tuple[str, str, float, float]] = []
        if retries:
            text = f"retried {retries}x"
            badges.append(("retried", text, left + w + 12 - _badge_width(text), top))
        if any(s.status == "caught" for s in runs):
            badges.append(("caught", "caught", left - 8, top + h))
        if len(runs) > 1:
            badges.append(("entered", f"entered {len(runs)}x", left + order_w / 2 + 4, top))
        for badge_kind, text, bx, by in badges:
            bw = _badge_width(text)
            parts.append(
                f'<g class="badge badge-{badge_kind}"><rect x="{bx:.1f}" y="{by - 9:.1f}" width="{bw:.1f}" '
                f'height="17" rx="8"/><text x="{bx + bw / 2:.1f}" y="{by + 3:.1f}" '
                f'text-anchor="middle">{_e(text)}</text></g>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


_CSS_BASE = """
:root { color-scheme: light; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
body { margin: 0; color: #16191f; background: #fafafa; font-size: 14px; }
header { padding: 14px 22px; background: #232f3e; color: #fff; }
header h1 { margin: 0 0 4px; font-size: 19px; font-weight: 600; }
header .meta { color: #d1d5db; font-size: 12.5px; }
header .meta span + span::before { content: " · "; }
.status { display: inline-block; padding: 1px 9px; border-radius: 10px; font-size: 13px; margin-left: 8px;
  vertical-align: 2px; }
.status-SUCCEEDED { background: #1d8102; } .status-RUNNING { background: #0972d3; }
.status-FAILED, .status-TIMED_OUT, .status-ABORTED { background: #d13212; }
.error { margin-top: 6px; font-size: 13.5px; } .error b { color: #ffb3a8; }
main { display: grid; grid-template-columns: minmax(0, 1.45fr) minmax(400px, 1fr); gap: 16px;
  padding: 16px 22px; align-items: start; }
section { background: #fff; border: 1px solid #e1e4e8; border-radius: 8px; padding: 12px 14px; min-width: 0; }
h2 { font-size: 14px; margin: 0 0 8px; }
#graph-panel { overflow: auto; }
#graph { max-width: 100%; height: auto; display: block; margin: 0 auto; }
.legend { font-size: 12px; color: #414d5c; margin-bottom: 6px; }
.legend i { display: inline-block; width: 11px; height: 11px; border-radius: 3px; margin: 0 4px -1px 10px;
  border: 1px solid; }
.node { cursor: pointer; }
.node .shape { stroke-width: 1.6; }
.node.selected .shape { stroke-width: 3.2; }
.node:focus { outline: none; } .node:focus .shape { stroke-dasharray: 4 2; }
.node .name { font-size: 13px; font-weight: 600; fill: #16191f; }
.node .kind { font-size: 10.5px; fill: #5f6b7a; }
.node.outcome-not-entered .name { fill: #5f6b7a; font-weight: 500; }
.order rect { fill: #232f3e; } .order text { fill: #fff; font-size: 10px; font-weight: 600; }
.badge rect { fill: #c77700; } .badge text { fill: #fff; font-size: 10px; font-weight: 600; }
.badge-entered rect { fill: #414d5c; }
.terminal rect { fill: #fff; stroke: #9ba7a8; stroke-width: 1.4; }
.terminal.taken rect { fill: #232f3e; stroke: #232f3e; } .terminal text { font-size: 12px; fill: #414d5c; }
.terminal.taken text { fill: #fff; }
.final .ring { fill: #fff; stroke: #9ba7a8; stroke-width: 1.4; } .final .dot { fill: #9ba7a8; }
.final.taken .ring { stroke: #232f3e; stroke-width: 2; } .final.taken .dot { fill: #232f3e; }
.edge { fill: none; stroke: #c3c8ce; stroke-width: 1.4; }
.edge-catch { stroke-dasharray: 6 4; }
.edge.taken { stroke: #232f3e; stroke-width: 2.6; }
.edge.taken.edge-catch { stroke: #c77700; }
.arrow-plain path { fill: #c3c8ce; } .arrow-taken path { fill: #232f3e; }
.arrow-taken-catch path { fill: #c77700; }
.edge-label rect { fill: #fff; stroke: #e1e4e8; } .edge-label text { font-size: 10.5px; fill: #5f6b7a; }
.edge-label.label-catch text { fill: #8d6100; font-style: italic; }
.edge-label.taken rect { stroke: #232f3e; } .edge-label.taken text { fill: #16191f; font-weight: 600; }
.edge-label.taken.label-catch rect { stroke: #c77700; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; table-layout: fixed; }
th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid #eef0f2; vertical-align: top;
  overflow-wrap: anywhere; }
th { background: #f4f5f6; position: sticky; top: 0; }
th.id { width: 28px; } th.time { width: 62px; } th.type { width: 132px; } th.state { width: 104px; }
tr.ev-failed td { background: #fff4f2; } tr.sel td { background: #e8f1fb; }
tr.ev-failed.sel td { background: #f8e1dc; }
tr[data-state] { cursor: pointer; }
#events-wrap { max-height: 560px; overflow: auto; }
pre { margin: 4px 0; padding: 6px 8px; background: #f4f5f6; border-radius: 4px; font-size: 12px;
  white-space: pre-wrap; overflow-wrap: anywhere; max-height: 320px; overflow: auto; }
details.step { border-top: 1px solid #eef0f2; padding: 5px 0; }
details.step > summary { cursor: pointer; font-weight: 600; }
details.step.sel > summary { color: #0972d3; }
.pill { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 11.5px; font-weight: 600;
  margin-left: 6px; border: 1px solid; }
.muted { color: #5f6b7a; font-weight: 400; font-size: 12px; }
.err { color: #b42318; }
button { font: inherit; font-size: 12px; padding: 2px 8px; margin-left: 8px; cursor: pointer; }
"""

_JS = """
(function () {
  "use strict";
  var body = document.body;
  var nodes = Array.prototype.slice.call(document.querySelectorAll("#graph .node[data-state]"));
  var rows = Array.prototype.slice.call(document.querySelectorAll("#events tbody tr"));
  var steps = Array.prototype.slice.call(document.querySelectorAll("details.step"));
  var label = document.getElementById("selection");
  // Record what the browser actually painted, so a reader (or a headless check) can confirm
  // the outcome classes took effect.
  nodes.forEach(function (node) {
    var shape = node.querySelector(".shape");
    var style = window.getComputedStyle(shape);
    node.setAttribute("data-fill", style.fill);
    node.setAttribute("data-stroke", style.stroke);
  });
  function select(name) {
    nodes.forEach(function (node) {
      node.classList.toggle("selected", name !== null && node.getAttribute("data-state") === name);
    });
    rows.forEach(function (row) {
      row.classList.toggle("sel", name !== null && row.getAttribute("data-state") === name);
    });
    var first = null;
    steps.forEach(function (step) {
      var hit = name !== null && step.getAttribute("data-state") === name;
      step.classList.toggle("sel", hit);
      step.open = hit;
      if (hit && first === null) { first = step; }
    });
    if (name === null) { body.removeAttribute("data-selected"); }
    else { body.setAttribute("data-selected", name); }
    label.textContent = name === null ? "all events" : name;
    return first;
  }
  nodes.forEach(function (node) {
    function pick() {
      var step = select(node.getAttribute("data-state"));
      if (step) { step.scrollIntoView({block: "nearest"}); }
    }
    node.addEventListener("click", pick);
    node.addEventListener("keydown", function (event) {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); pick(); }
    });
  });
  rows.forEach(function (row) {
    row.addEventListener("click", function () {
      if (row.hasAttribute("data-state")) { select(row.getAttribute("data-state")); }
    });
  });
  document.getElementById("clear").addEventListener("click", function () { select(null); });
  var initial = body.getAttribute("data-initial-state");
  select(initial === null || initial === "" ? null : initial);
  body.setAttribute("data-rendered", "true");
})();
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _event_summary(event: dict[str, Any]) -> tuple[str, str]:
    """A short line and, when there is more to see, the full text for an event's details cell."""
    kind = str(event.get("type", ""))
    details = _details(event)
    if "error" in details or "cause" in details:
        short = f"{details.get('error', '')}: {summarize_cause(details.get('cause'), 160)}"
        return short, pretty_json(details.get("cause"), max_string=4000, max_lines=200)
    if kind.endswith("StateEntered") or kind == "ExecutionStarted":
        raw = details.get("input")
        return "input " + _shorten(" ".join(str(raw or "").split()), 70), pretty_json(raw, max_string=2000)
    if kind.endswith("StateExited") or kind == "ExecutionSucceeded":
        raw = details.get("output")
        return "output " + _shorten(" ".join(str(raw or "").split()), 70), pretty_json(raw, max_string=2000)
    if kind in _ATTEMPT_EVENTS:
        resource = f"{details.get('resourceType', '')}:{details.get('resource', '')}"
        try:
            function = json.loads(details.get("parameters") or "{}").get("FunctionName", "")
        except (ValueError, AttributeError):
            function = ""
        short = f"{resource} {str(function).rsplit(':', 1)[-1]}".strip()
        return short, pretty_json(details.get("parameters"), max_string=2000)
    if set(details) <= {"resource", "resourceType"} and details:
        return f"{details.get('resourceType', '')}:{details.get('resource', '')}", ""
    if kind.endswith("Succeeded"):
        raw = details.get("output")
        return "output " + _shorten(" ".join(str(raw or "").split()), 70), pretty_json(raw, max_string=2000)
    if details:
        text = json.dumps(details, default=str, ensure_ascii=False)
        return _shorten(text, 70), pretty_json(text, max_string=2000)
    return "", ""


def render_html(
    description: dict[str, Any], history: list[dict[str, Any]], definition: dict[str, Any]
) -> str:
    """One self-contained HTML page: the graph with the path taken, the steps, the event table.

    No external resource is referenced, and a Content-Security-Policy allows only this page's own
    style and script (by hash), so nothing in an execution's input can load or run anything.
    Nodes carry ``data-state``/``data-outcome``, the edges followed ``data-taken="true"``; once its
    script has run, ``<body data-rendered="true">`` and each node's ``data-fill`` is its painted fill.
    """
    steps = trace_steps(history, definition)
    status = str(description.get("status", "RUNNING"))
    error, cause = _execution_error(description, history)
    css = _CSS_BASE + "".join(
        f".outcome-{name} .shape {{ fill: {fill}; stroke: {stroke}; }}\n"
        f".legend i.outcome-{name}, .pill.outcome-{name} {{ background: {fill}; border-color: {stroke}; }}\n"
        for name, (fill, stroke) in OUTCOME_COLORS.items()
    )
    csp = f"default-src 'none'; style-src {_csp_hash(css)}; script-src {_csp_hash(_JS)}; img-src data:"
    name = str(description.get("name", "?"))
    started = _when(description.get("startDate")) or (steps[0].entered if steps else None)

    def offset(value: Any) -> str:
        when = _when(value)
        return f"+{(when - started).total_seconds():.3f}s" if when and started else ""

    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(name)} · {_e(status)} · saga trace</title>",
        f"<style>{css}</style></head>",
    ]
    initial = steps[-1].name if steps else ""
    page = [f'<body data-status="{_e(status)}" data-initial-state="{_e(initial)}">', "<header>"]
    page.append(f'<h1>{_e(name)}<span class="status status-{_e(status)}">{_e(status)}</span></h1>')
    meta = [f"started {_e(_stamp(description.get('startDate')))}"]
    if description.get("stopDate"):
        meta.append(f"took {_e(_seconds(_duration(description)))}")
    meta.append(f"{len(steps)} states entered, {len(history)} events")
    if description.get("executionArn"):
        meta.append(_e(description["executionArn"]))
    page.append('<div class="meta">' + "".join(f"<span>{m}</span>" for m in meta) + "</div>")
    if error or cause:
        page.append(f'<div class="error"><b>{_e(error)}</b> {_e(summarize_cause(cause, 400))}</div>')
    page.append("</header><main>")

    page.append('<section id="graph-panel"><h2>Graph</h2><div class="legend">')
    for outcome in ("succeeded", "caught", "failed", "running", "not-entered"):
        shown = "caught / retried" if outcome == "caught" else outcome.replace("-", " ")
        page.append(f'<i class="outcome-{outcome}"></i>{shown}')
    page.append("</div>")
    page.append(_svg(definition, steps, status))
    page.append("</section>")

    page.append('<div class="side"><section id="steps"><h2>States entered</h2>')
    for number, step in enumerate(steps, 1):
        summary = f"{number}. {_e(step.name)} <span class='muted'>{_e(step.type)}</span>"
        summary += f'<span class="pill outcome-{step.status}">{_e(step.status)}</span>'
        if step.duration is not None:
            summary += f" <span class='muted'>{_e(_seconds(step.duration))}</span>"
        page.append(f'<details class="step" data-state="{_e(step.name)}"><summary>{summary}</summary>')
        if step.retries:
            page.append(f"<div>retried {step.retries}x: {_e(_runs(step.retried_errors))}</div>")
        for attempt, (err, why) in enumerate(step.errors if step.type not in _TERMINAL_TYPES else [], 1):
            page.append(
                f'<div class="err">attempt {attempt} failed: <b>{_e(err)}</b> '
                f"{_e(summarize_cause(why))}</div>"
            )
        if step.status == "caught" and step.errors:
            routed = f"caught {step.errors[-1][0]} → {step.next or '?'}"
            if step.catch_errors:
                routed += f" (Catch {', '.join(step.catch_errors)})"
            page.append(f"<div>{_e(routed)}</div>")
        if step.type == "Fail" and step.errors:
            page.append(
                f'<div class="err">fails with <b>{_e(step.errors[-1][0])}</b>: '
                f"{_e(summarize_cause(step.errors[-1][1]))}</div>"
            )
        for io_label, raw in (("input", step.input), ("output", step.output)):
            if raw is not None:
                page.append(
                    f"<div class='muted'>{io_label}</div>"
                    f"<pre>{_e(pretty_json(raw, max_string=2000, max_lines=300))}</pre>"
                )
        page.append("</details>")
    page.append("</section>")

    page.append(
        '<section id="events-panel"><h2>Events <span class="muted">showing <span id="selection">all'
        ' events</span></span><button id="clear" type="button">clear</button></h2><div id="events-wrap">'
    )
    page.append(
        '<table id="events"><thead><tr><th class="id">ID</th><th class="time">Time</th>'
        '<th class="type">Type</th><th class="state">State</th><th>Details</th></tr></thead><tbody>'
    )
    state_of: dict[int, str] = {}
    for step in steps:
        for event_id in step.event_ids:
            state_of.setdefault(event_id, step.name)
    for event in sorted(history, key=lambda e: int(e.get("id", 0))):
        event_id = int(event.get("id", 0))
        kind = str(event.get("type", ""))
        state = state_of.get(event_id)
        short, full = _event_summary(event)
        failed = kind in _FAILURE_EVENTS or kind in _EXECUTION_END - {"ExecutionSucceeded"}
        row_attrs = ' class="ev-failed"' if failed else ""
        if state is not None:
            row_attrs += f' data-state="{_e(state)}"'
        cell = _e(short)
        if full and full != short:
            cell = f"<details><summary>{cell}</summary><pre>{_e(full)}</pre></details>"
        stamp = _e(_stamp(event.get("timestamp")))
        page.append(
            f'<tr{row_attrs} data-event-id="{event_id}"><td>{event_id}</td>'
            f'<td title="{stamp}">{_e(offset(event.get("timestamp")))}</td><td>{_e(kind)}</td>'
            f"<td>{_e(state or '')}</td><td>{cell}</td></tr>"
        )
    page.append("</tbody></table></div></section></div></main>")
    page.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(head + page) + "\n"
