"""The graph as SVG: every state of the definition where :mod:`saga_local.trace.layout` put it, the
path the execution took highlighted, each state coloured by outcome (the classes the stylesheet paints).

Every string from the definition or the history goes through :func:`escape`.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from saga_local.trace.formatting import clean, seconds, shorten, summarize_cause
from saga_local.trace.graph import END, START, graph_edges, node_outcomes, taken_edges
from saga_local.trace.history import TERMINAL_TYPES
from saga_local.trace.layout import LABEL_H, layout, path_d, place_labels
from saga_local.trace.measure import NAME_PAD, NAME_PX, badge_width, fit, text_width

if TYPE_CHECKING:
    from saga_local.trace.graph import Edge, Outcome
    from saga_local.trace.history import Step
    from saga_local.trace.layout import Label, Layout


def escape(text: Any) -> str:
    """Escape for HTML text and double-quoted attributes, control characters made visible."""
    return html.escape(clean(str(text), keep_newlines=True), quote=True)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def svg(
    definition: dict[str, Any],
    steps: list[Step],
    status: str,
    *,
    graph_id: str = "graph",
    zoomable: bool = True,
) -> str:
    """The graph of ``definition``: edges (the path over the rest), their labels, start and end
    markers, states. ``graph_id`` is the ``<svg>``'s id (two graphs share a page: their arrowheads'
    ids are prefixed with it); a ``zoomable`` graph's states sit in ``<g id="graph-zoom">``, the
    group static/trace.js zooms and pans."""
    edges = graph_edges(definition)
    placed = layout(definition, edges)
    taken = taken_edges(edges, steps, definition, status)
    outcomes = node_outcomes(steps)
    states: dict[str, Any] = definition.get("States") or {}
    by_name: dict[str, list[tuple[int, Step]]] = {}
    for number, step in enumerate(steps, 1):
        by_name.setdefault(step.name, []).append((number, step))

    width, height = placed.size
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(graph_id)}" class="graph" '
        f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        'role="img" aria-label="state machine graph">',
        "<defs>",
    ]
    for marker in ("plain", "taken", "taken-catch"):
        parts.append(
            f'<marker id="{escape(graph_id)}-arrow-{marker}" class="arrow-{marker}" viewBox="0 0 10 10" '
            'refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" '
            'orient="auto-start-reverse">'
            '<path d="M0,0 L10,5 L0,10 z"/></marker>'
        )
    parts.append("</defs>")
    # Zoom and pan (static/trace.js) set this group's transform; the graph's own coordinates never change.
    parts.append('<g id="graph-zoom" transform="translate(0 0) scale(1)">' if zoomable else "<g>")
    # Untaken edges first so the path is drawn over them.
    for i in sorted(range(len(edges)), key=lambda i: i in taken):
        if edges[i].points:
            parts.append(_edge(i, edges[i], is_taken=i in taken, graph_id=graph_id))
    parts.extend(
        _label(label, edges[label.edge], is_taken=label.edge in taken)
        for label in place_labels(placed, taken)
    )
    parts.extend(_terminals(edges, taken, placed))
    for name, state in states.items():
        kind = str(state.get("Type", "?")) if isinstance(state, dict) else "?"
        parts.append(_node(name, kind, outcomes.get(name), by_name.get(name, []), placed))
    parts.append("</g></svg>")
    return "\n".join(parts)


def _edge(i: int, edge: Edge, *, is_taken: bool, graph_id: str) -> str:
    classes = ["edge", f"edge-{edge.kind}"] + (["taken"] if is_taken else [])
    marker = ("taken-catch" if edge.kind == "catch" else "taken") if is_taken else "plain"
    end_marker = "" if edge.kind == "end" else f' marker-end="url(#{escape(graph_id)}-arrow-{marker})"'
    source = "" if edge.source == START else edge.source
    target = "" if edge.target == END else edge.target
    return (
        f'<path class="{" ".join(classes)}" d="{path_d(edge.points)}"{end_marker} '
        f'data-edge="{i}" data-source="{escape(source)}" data-target="{escape(target)}" '
        f'data-kind="{edge.kind}" data-taken="{_flag(is_taken)}">'
        f"<title>{escape(edge.title or edge.kind)}</title></path>"
    )


def _label(label: Label, edge: Edge, *, is_taken: bool) -> str:
    box = label.box
    lx, ly = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    label_classes = "edge-label" + (" taken" if is_taken else "") + f" label-{edge.kind}"
    return (
        f'<g class="{label_classes}" data-edge="{label.edge}"><rect x="{box[0]:.1f}" y="{box[1]:.1f}" '
        f'width="{label.width:.1f}" height="{LABEL_H:.0f}" rx="3"/>'
        f'<text x="{lx:.1f}" y="{ly + 4:.1f}" text-anchor="middle">{escape(edge.label)}</text>'
        f"<title>{escape(edge.title)}</title></g>"
    )


def _terminals(edges: list[Edge], taken: set[int], placed: Layout) -> list[str]:
    """The start marker, and an end marker under each state that can end the execution."""
    cx, cy = placed.x[START], placed.y[START]
    started = any(edges[i].kind == "start" for i in taken)
    parts = [
        f'<g class="terminal{" taken" if started else ""}" data-terminal="start">'
        f'<rect x="{cx - 35:.1f}" y="{cy - 14:.1f}" width="70" height="28" rx="14"/>'
        f'<text x="{cx:.1f}" y="{cy + 4:.1f}" text-anchor="middle">Start</text></g>'
    ]
    for i, edge in enumerate(edges):
        if edge.kind == "end" and edge.points:
            ex, ey = edge.points[-1]
            parts.append(
                f'<g class="final{" taken" if i in taken else ""}" data-terminal="end">'
                f'<circle class="ring" cx="{ex:.1f}" cy="{ey + 7:.1f}" r="7"/>'
                f'<circle class="dot" cx="{ex:.1f}" cy="{ey + 7:.1f}" r="3.5"/>'
                f"<title>End</title></g>"
            )
    return parts


def _shape(kind: str, centre: tuple[float, float], w: float, h: float) -> str:
    """A Choice is a hexagon, a Succeed or Fail a square-cornered box, any other state a rounded one."""
    cx, cy = centre
    left, top = cx - w / 2, cy - h / 2
    if kind == "Choice":
        return (
            f'<polygon class="shape" points="{left + 14:.1f},{top:.1f} {left + w - 14:.1f},{top:.1f} '
            f"{left + w:.1f},{cy:.1f} {left + w - 14:.1f},{top + h:.1f} {left + 14:.1f},{top + h:.1f} "
            f'{left:.1f},{cy:.1f}"/>'
        )
    radius = 4 if kind in TERMINAL_TYPES else 10
    return (
        f'<rect class="shape" x="{left:.1f}" y="{top:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{radius}"/>'
    )


def _tooltip(name: str, kind: str, outcome: Outcome, runs: list[Step]) -> str:
    lines = [f"{name} ({kind}): {outcome}"]
    for step in runs:
        line = f"{step.status}, {step.attempts} attempt(s)"
        if step.duration is not None:
            line += f", {seconds(step.duration)}"
        lines.append(line)
        lines.extend(f"  {error}: {summarize_cause(cause, 160)}" for error, cause in step.errors)
    return "\n".join(lines)


def _order_bubble(numbers: list[int], left: float, top: float) -> tuple[str, float]:
    """The bubble on the node's top-left corner: when (in steps entered) the state was entered."""
    shown = shorten(",".join(str(n) for n in numbers), 9)
    order_w = max(20.0, text_width(shown, 10, bold=True) + 10)
    return (
        f'<g class="order"><rect x="{left - order_w / 2:.1f}" y="{top - 10:.1f}" '
        f'width="{order_w:.1f}" height="20" rx="10"/>'
        f'<text x="{left:.1f}" y="{top + 4:.1f}" text-anchor="middle">{escape(shown)}</text></g>'
    ), order_w


def _badges(runs: list[Step], box: tuple[float, float, float, float], order_w: float) -> list[str]:
    """Retried, caught, entered more than once.

    Badges keep clear of the ports: edges arrive at the top centre and leave along the bottom.
    """
    left, top, w, h = box
    retries = sum(s.retries for s in runs)
    badges: list[tuple[str, str, float, float]] = []
    if retries:
        text = f"retried {retries}x"
        badges.append(("retried", text, left + w + 12 - badge_width(text), top))
    if any(s.status == "caught" for s in runs):
        badges.append(("caught", "caught", left - 8, top + h))
    if len(runs) > 1:
        badges.append(("entered", f"entered {len(runs)}x", left + order_w / 2 + 4, top))
    parts = []
    for badge_kind, text, bx, by in badges:
        bw = badge_width(text)
        parts.append(
            f'<g class="badge badge-{badge_kind}"><rect x="{bx:.1f}" y="{by - 9:.1f}" width="{bw:.1f}" '
            f'height="17" rx="8"/><text x="{bx + bw / 2:.1f}" y="{by + 3:.1f}" '
            f'text-anchor="middle">{escape(text)}</text></g>'
        )
    return parts


def _node(
    name: str, kind: str, outcome: Outcome | None, entries: list[tuple[int, Step]], placed: Layout
) -> str:
    """One state: its shape, name and type, tooltip, order bubble and badges."""
    cx, cy = placed.x[name], placed.y[name]
    w, h = placed.width[name], placed.height[name]
    left, top = cx - w / 2, cy - h / 2
    shown: Outcome = outcome or "not-entered"
    runs = [step for _, step in entries]
    title = fit(clean(name), w - NAME_PAD, NAME_PX, bold=True)
    parts = [
        f'<g class="node outcome-{shown} type-{escape(kind.lower())}" data-state="{escape(name)}" '
        f'data-outcome="{shown}" data-type="{escape(kind)}" data-taken="{_flag(outcome is not None)}" '
        f'tabindex="0" role="button">{_shape(kind, (cx, cy), w, h)}'
        f'<text class="name" x="{cx:.1f}" y="{cy - 1:.1f}" text-anchor="middle">{escape(title)}</text>'
        f'<text class="kind" x="{cx:.1f}" y="{cy + 14:.1f}" text-anchor="middle">{escape(kind)}</text>'
        f"<title>{escape(_tooltip(name, kind, shown, runs))}</title>"
    ]
    order_w = 0.0
    if entries:
        bubble, order_w = _order_bubble([number for number, _ in entries], left, top)
        parts.append(bubble)
    parts.extend(_badges(runs, (left, top, w, h), order_w))
    parts.append("</g>")
    return "\n".join(parts)
