"""One self-contained page: the path taken (the whole graph folded under it), the states entered,
the event table.

The stylesheet and the script are ``static/trace.css`` and ``static/trace.js`` beside this module,
inlined into the page (nothing is fetched). A Content-Security-Policy allows only those two, by
hash, so nothing in an execution's input can load or run anything.
"""

from __future__ import annotations

import base64
import hashlib
import json
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from saga_local.trace.formatting import one_line, pretty_json, runs, seconds, shorten, stamp, summarize_cause
from saga_local.trace.history import (
    ATTEMPT_EVENTS,
    EXECUTION_FAILURES,
    FAILURE_EVENTS,
    TERMINAL_TYPES,
    details,
    event_id,
    execution_duration,
    execution_error,
    in_order,
    trace_steps,
    when,
)
from saga_local.trace.svg import escape, svg

if TYPE_CHECKING:
    from datetime import datetime

    from saga_local.trace.history import Step

#: Fill and stroke of a state node per outcome (the page's outcome CSS rules are generated from this).
OUTCOME_COLORS: dict[str, tuple[str, str]] = {
    "succeeded": ("#dcf5d9", "#1d8102"),
    "failed": ("#fde3e1", "#d13212"),
    "caught": ("#fff0d1", "#c77700"),
    "retried": ("#fff0d1", "#c77700"),
    "running": ("#dbeafe", "#0972d3"),
    "not-entered": ("#f2f3f3", "#9ba7a8"),
}


@cache
def static_text(name: str) -> str:
    """A file of ``saga_local/trace/static`` (package data: it ships with the installed ``saga``)."""
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def stylesheet() -> str:
    """The page's CSS: ``trace.css``, then one rule per outcome colour."""
    rules = "".join(
        f".outcome-{name} .shape {{ fill: {fill}; stroke: {stroke}; }}\n"
        f".legend i.outcome-{name}, .pill.outcome-{name} {{ background: {fill}; "
        f"border-color: {stroke}; }}\n"
        for name, (fill, stroke) in OUTCOME_COLORS.items()
    )
    return "\n" + static_text("trace.css") + rules


def script() -> str:
    """The page's JavaScript: ``trace.js``."""
    return "\n" + static_text("trace.js")


def csp_hash(text: str) -> str:
    """``'sha256-...'``: the CSP source that allows exactly this inline style or script."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


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
    css, js = stylesheet(), script()
    # base-uri and form-action do not fall back to default-src: an injected <base> or <form> could
    # otherwise point the page's links or a submission elsewhere.
    csp = (
        f"default-src 'none'; style-src {csp_hash(css)}; script-src {csp_hash(js)}; img-src data:;"
        " base-uri 'none'; form-action 'none'"
    )
    name = str(description.get("name", "?"))
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(name)} · {escape(status)} · saga trace</title>",
        f"<style>{css}</style></head>",
    ]
    initial = steps[-1].name if steps else ""
    page = [f'<body data-status="{escape(status)}" data-initial-state="{escape(initial)}">']
    page.extend(_header(description, history, steps))
    page.append("</header><main>")
    page.extend(_graph_panel(definition, steps, status))
    page.append('<div class="side"><section id="steps"><h2>States entered</h2>')
    for number, step in enumerate(steps, 1):
        page.extend(_step(number, step))
    page.append("</section>")
    started = when(description.get("startDate")) or (steps[0].entered if steps else None)
    page.extend(_events_table(history, steps, started))
    page.append("</tbody></table></div></section></div></main>")
    page.append(f"<script>{js}</script></body></html>")
    return "\n".join(head + page) + "\n"


def _header(description: dict[str, Any], history: list[dict[str, Any]], steps: list[Step]) -> list[str]:
    """The execution's name and status, when it started and how long it took, and its error."""
    name = str(description.get("name", "?"))
    status = str(description.get("status", "RUNNING"))
    parts = ["<header>"]
    parts.append(
        f'<h1>{escape(name)}<span class="status status-{escape(status)}">{escape(status)}</span></h1>'
    )
    meta = [f"started {escape(stamp(description.get('startDate')))}"]
    if description.get("stopDate"):
        meta.append(f"took {escape(seconds(execution_duration(description)))}")
    meta.append(f"{len(steps)} states entered, {len(history)} events")
    if description.get("executionArn"):
        meta.append(escape(description["executionArn"]))
    parts.append('<div class="meta">' + "".join(f"<span>{m}</span>" for m in meta) + "</div>")
    error, cause = execution_error(description, history)
    if error or cause:
        parts.append(f'<div class="error"><b>{escape(error)}</b> {escape(summarize_cause(cause, 400))}</div>')
    return parts


def path_only(definition: dict[str, Any], entered: set[str]) -> dict[str, Any]:
    """``definition`` cut down to the states in ``entered``, and the transitions between them."""
    states: dict[str, Any] = definition.get("States") or {}
    kept = {name: state for name, state in states.items() if name in entered}
    start = definition.get("StartAt")
    if start not in kept:  # a redriven execution may start further down
        start = next(iter(kept), start)
    return {**definition, "StartAt": start, "States": kept}


def _graph_panel(definition: dict[str, Any], steps: list[Step], status: str) -> list[str]:
    """The legend, the path taken at its own size, and the whole graph folded under it.

    The whole definition shrunk to the column's width is too small to read (31 states once drew
    5 px names at 1,400 px), so the page opens on the states entered and the transitions between
    them; the states not entered are one click away, in the whole graph, which zooms and pans."""
    states: dict[str, Any] = definition.get("States") or {}
    entered = {step.name for step in steps if step.name in states}
    folded = len(states) - len(entered)
    parts = [
        '<section id="graph-panel">'
        f'<h2>Path taken <span class="muted">{len(entered)} of {len(states)} states entered</span></h2>',
        '<div class="legend">',
    ]
    for outcome in ("succeeded", "caught", "failed", "running", "not-entered"):
        shown = "caught / retried" if outcome == "caught" else outcome.replace("-", " ")
        parts.append(f'<i class="outcome-{outcome}"></i>{shown}')
    parts.append("</div>")
    if entered:
        # At its own size: a wide path scrolls inside its box rather than shrinking.
        parts.append('<div id="path-view">')
        parts.append(
            svg(path_only(definition, entered), steps, status, graph_id="path-graph", zoomable=False)
        )
        parts.append("</div>")
    not_entered = f"{folded} state{'' if folded == 1 else 's'} not entered"
    parts.append(
        f'<details id="whole-graph" data-folded="{folded}"{"" if entered else " open"}>'
        f'<summary><span class="folded">{not_entered}</span> · the whole graph</summary>'
        '<div class="tools">'
        '<button id="zoom-in" type="button" title="zoom in (+)" aria-label="zoom in">+</button>'
        '<button id="zoom-out" type="button" title="zoom out (-)" aria-label="zoom out">&#8722;</button>'
        '<button id="zoom-fit" type="button" title="fit the whole graph (0)">fit</button></div>'
    )
    # The graph pans and zooms inside its own box (static/trace.js), so the page never scrolls sideways.
    parts.append(
        '<div id="graph-view" tabindex="0" aria-label="graph: drag or arrow keys to pan,'
        ' + and - or the wheel to zoom, 0 to fit">'
    )
    parts.append(svg(definition, steps, status))
    parts.append("</div>")
    parts.append(
        '<p class="hint muted">drag or arrow keys to pan · + / - or, once the graph is clicked, the wheel'
        " (Ctrl + wheel anywhere) to zoom · 0 fits</p>"
    )
    parts.append("</details></section>")
    return parts


def _step(number: int, step: Step) -> list[str]:
    """One state entered, folded: retries, failed attempts, where a Catch sent it, input and output."""
    summary = f"{number}. {escape(step.name)} <span class='muted'>{escape(step.type)}</span>"
    summary += f'<span class="pill outcome-{step.status}">{escape(step.status)}</span>'
    if step.duration is not None:
        summary += f" <span class='muted'>{escape(seconds(step.duration))}</span>"
    parts = [f'<details class="step" data-state="{escape(step.name)}"><summary>{summary}</summary>']
    if step.retries:
        parts.append(f"<div>retried {step.retries}x: {escape(runs(step.retried_errors))}</div>")
    for attempt, (err, why) in enumerate(step.errors if step.type not in TERMINAL_TYPES else [], 1):
        parts.append(
            f'<div class="err">attempt {attempt} failed: <b>{escape(err)}</b> '
            f"{escape(summarize_cause(why))}</div>"
        )
    if step.status == "caught" and step.errors:
        routed = f"caught {step.errors[-1][0]} → {step.next or '?'}"
        if step.catch_errors:
            routed += f" (Catch {', '.join(step.catch_errors)})"
        parts.append(f"<div>{escape(routed)}</div>")
    if step.type == "Fail" and step.errors:
        parts.append(
            f'<div class="err">fails with <b>{escape(step.errors[-1][0])}</b>: '
            f"{escape(summarize_cause(step.errors[-1][1]))}</div>"
        )
    for io_label, raw in (("input", step.input), ("output", step.output)):
        if raw is not None:
            parts.append(
                f"<div class='muted'>{io_label}</div>"
                f"<pre>{escape(pretty_json(raw, max_string=2000, max_lines=300))}</pre>"
            )
    parts.append("</details>")
    return parts


def _events_table(history: list[dict[str, Any]], steps: list[Step], started: datetime | None) -> list[str]:
    """Every event, in order, with the state it belongs to.

    Selecting a state shows only its rows (static/trace.js); "show all events" brings the rest back.
    """
    parts = [
        f'<section id="events-panel"><h2>Events <span class="muted" id="selection">all {len(history)}'
        ' events</span><button id="show-all" type="button" hidden>show all events</button></h2>'
        '<div id="events-wrap">',
        '<table id="events"><thead><tr><th class="id">ID</th><th class="time">Time</th>'
        '<th class="type">Type</th><th class="state">State</th><th>Details</th></tr></thead><tbody>',
    ]
    state_of: dict[int, str] = {}
    for step in steps:
        for number in step.event_ids:
            state_of.setdefault(number, step.name)
    for event in in_order(history):
        parts.append(_event_row(event, state_of.get(event_id(event)), started))
    return parts


def _event_row(event: dict[str, Any], state: str | None, started: datetime | None) -> str:
    number = event_id(event)
    kind = str(event.get("type", ""))
    short, full = event_summary(event)
    failed = kind in FAILURE_EVENTS or kind in EXECUTION_FAILURES
    row_attrs = ' class="ev-failed"' if failed else ""
    if state is not None:
        row_attrs += f' data-state="{escape(state)}"'
    cell = escape(short)
    if full and full != short:
        cell = f"<details><summary>{cell}</summary><pre>{escape(full)}</pre></details>"
    moment = when(event.get("timestamp"))
    offset = f"+{(moment - started).total_seconds():.3f}s" if moment and started else ""
    return (
        f'<tr{row_attrs} data-event-id="{number}"><td>{number}</td>'
        f'<td title="{escape(stamp(event.get("timestamp")))}">{escape(offset)}</td><td>{escape(kind)}</td>'
        f"<td>{escape(state or '')}</td><td>{cell}</td></tr>"
    )


def _io_summary(label: str, raw: Any) -> tuple[str, str]:
    return f"{label} " + one_line(raw, 70), pretty_json(raw, max_string=2000)


def event_summary(event: dict[str, Any]) -> tuple[str, str]:
    """A short line and, when there is more to see, the full text for an event's details cell."""
    kind = str(event.get("type", ""))
    found = details(event)
    if "error" in found or "cause" in found:
        short = f"{found.get('error', '')}: {summarize_cause(found.get('cause'), 160)}"
        return short, pretty_json(found.get("cause"), max_string=4000, max_lines=200)
    if kind.endswith("StateEntered") or kind == "ExecutionStarted":
        return _io_summary("input", found.get("input"))
    if kind.endswith("StateExited") or kind == "ExecutionSucceeded":
        return _io_summary("output", found.get("output"))
    if kind in ATTEMPT_EVENTS:
        return _scheduled_summary(found)
    if set(found) <= {"resource", "resourceType"} and found:
        return f"{found.get('resourceType', '')}:{found.get('resource', '')}", ""
    if kind.endswith("Succeeded"):
        return _io_summary("output", found.get("output"))
    if found:
        text = json.dumps(found, default=str, ensure_ascii=False)
        return shorten(text, 70), pretty_json(text, max_string=2000)
    return "", ""


def _scheduled_summary(found: dict[str, Any]) -> tuple[str, str]:
    """An attempt scheduled: the resource and the function it calls; its parameters in full."""
    resource = f"{found.get('resourceType', '')}:{found.get('resource', '')}"
    try:
        function = json.loads(found.get("parameters") or "{}").get("FunctionName", "")
    except (ValueError, AttributeError):
        function = ""
    short = f"{resource} {str(function).rsplit(':', 1)[-1]}".strip()
    return short, pretty_json(found.get("parameters"), max_string=2000)
