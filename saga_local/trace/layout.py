"""Where each state, edge and edge label goes: a deterministic layered (Sugiyama-style) layout, top-down.

Pure geometry, no markup: :func:`layout` places the nodes and routes the edges, :func:`place_labels`
finds each edge label a spot that covers nothing, and :func:`path_d` / :func:`bezier` describe the
one curve both the page draws and the label placement avoids. The steps of :func:`layout`:

1. cycles are broken by reversing DFS back edges (:func:`_break_cycles`);
2. layers are longest paths from the start (:func:`_assign_layers`);
3. edges that span layers get dummy nodes (:func:`_add_dummies`);
4. barycentre sweeps order each layer, keeping the order with the fewest crossings (:func:`_order_layers`),
   then single nodes move along their layer while that removes a crossing (:func:`_sift`);
5. x positions are pulled towards connected nodes while keeping each layer's order and spacing
   (:func:`_place_x`);
6. edges leave from ports spread along a node's bottom and arrive along its top (:func:`_route`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga_local.trace.graph import END, START
from saga_local.trace.measure import node_width, text_width

if TYPE_CHECKING:
    from saga_local.trace.graph import Edge

#: ``(left, top, right, bottom)``.
Box = tuple[float, float, float, float]
Point = tuple[float, float]
#: A node's neighbours in the next or previous layer, with the weight of the link.
Links = dict[str, list[tuple[str, float]]]

NODE_H = 50.0
LAYER_GAP = 74.0
NODE_GAP = 36.0
#: Two dummies (edges passing through a layer) sit closer to each other than two states.
DUMMY_GAP = 10.0
DUMMY_W = 14.0
START_W = 70.0
START_H = 28.0
MARGIN = 30.0
#: Sweeps of the barycentre ordering, then of the x placement (the last ones pulling both ways).
ORDER_SWEEPS = 12
PLACE_SWEEPS = 16
PLACE_BOTH_FROM = 12
#: Edge labels: 10.5px (``.edge-label text``), bold on the path taken; padding each side; height.
LABEL_PX = 10.5
LABEL_PAD = 6.0
LABEL_H = 17.0
#: Where along a segment a label may sit, best first; then beside its edge instead of on it.
_ALONG = (0.5, 0.35, 0.65, 0.22, 0.8, 0.12, 0.9, 0.05, 0.95)
_DUMMY = "\x00d"


def is_dummy(node: str) -> bool:
    """A point an edge passes through in a layer it spans (not a state, not drawn)."""
    return node.startswith(_DUMMY)


@dataclass
class Layout:
    """Centre, width and height of every node (the start marker and dummies included), and the size."""

    x: dict[str, float]
    y: dict[str, float]
    width: dict[str, float]
    height: dict[str, float]
    edges: list[Edge]
    size: tuple[float, float]


def layout(definition: dict[str, Any], edges: list[Edge]) -> Layout:
    """Place every state of ``definition`` and route ``edges`` (their ``points`` and ``chain`` are set)."""
    states = list((definition.get("States") or {}).keys())
    nodes = [START, *states]
    # The end of the execution is drawn as a stub under each state that can end it, not laid out.
    discovery = _break_cycles(nodes, edges)
    forward = [e for e in edges if e.source != e.target and e.target != END]
    layer = _assign_layers(nodes, forward)
    width = {n: node_width(n) for n in states}
    height = dict.fromkeys(states, NODE_H)
    width[START] = START_W
    height[START] = START_H
    up, down = _add_dummies(forward, layer, width, height, discovery)
    layers = _order_layers(_initial_layers(layer, discovery), up, down)
    x = _place_x(layers, width, up, down)

    low = min(x[n] - width[n] / 2 for n in x)
    for node in x:
        x[node] += MARGIN - low
    high = max(x[n] + width[n] / 2 for n in x)
    y = {
        node: MARGIN + depth * (NODE_H + LAYER_GAP) + NODE_H / 2
        for depth, row in enumerate(layers)
        for node in row
    }
    _route(edges, x, y, width, height)
    depth_count = len(layers)
    size = (high + MARGIN, MARGIN * 2 + depth_count * NODE_H + (depth_count - 1) * LAYER_GAP + 24)
    return Layout(x, y, width, height, edges, size)


def _ends(edge: Edge) -> tuple[str, str]:
    """The edge's ends as laid out: reversed edges point up."""
    return (edge.target, edge.source) if edge.reversed else (edge.source, edge.target)


def _break_cycles(nodes: list[str], edges: list[Edge]) -> list[str]:
    """Mark DFS back edges ``reversed`` (from the start, then from every node it did not reach).

    Returns the nodes in discovery order: the first order of each layer.
    """
    out: dict[str, list[Edge]] = {n: [] for n in nodes}
    for edge in edges:
        if edge.target != END:
            out[edge.source].append(edge)
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
            if position >= len(out[node]):
                on_stack.discard(node)
                stack.pop()
                continue
            stack[-1] = (node, position + 1)
            edge = out[node][position]
            if edge.target in on_stack:
                edge.reversed = True
            elif edge.target not in visited:
                visited.add(edge.target)
                on_stack.add(edge.target)
                discovery.append(edge.target)
                stack.append((edge.target, 0))
    return discovery


def _assign_layers(nodes: list[str], forward: list[Edge]) -> dict[str, int]:
    """Longest-path layering over the acyclic orientation (Kahn, in definition order)."""
    rank = {n: i for i, n in enumerate(nodes)}
    indegree = dict.fromkeys(nodes, 0)
    successors: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in forward:
        a, b = _ends(edge)
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
    return layer


def _add_dummies(
    forward: list[Edge],
    layer: dict[str, int],
    width: dict[str, float],
    height: dict[str, float],
    discovery: list[str],
) -> tuple[Links, Links]:
    """A dummy node in each layer an edge spans; each edge's ``chain``; the weighted links up and down.

    Catch edges pull less than the normal flow, and long runs of dummies pull hardest, to keep long
    edges straight.
    """
    up: Links = {n: [] for n in layer}
    down: Links = {n: [] for n in layer}
    for number, edge in enumerate(forward):
        a, b = _ends(edge)
        chain = [a]
        for depth in range(layer[a] + 1, layer[b]):
            dummy = f"{_DUMMY}{number}.{depth}"
            layer[dummy] = depth
            width[dummy] = DUMMY_W
            height[dummy] = 0.0
            up[dummy], down[dummy] = [], []
            discovery.append(dummy)
            chain.append(dummy)
        chain.append(b)
        edge.chain = chain
        weight = 1.0 if edge.kind == "catch" else 2.0
        for u, v in itertools.pairwise(chain):
            w = 6.0 if is_dummy(u) and is_dummy(v) else weight
            down[u].append((v, w))
            up[v].append((u, w))
    return up, down


def _initial_layers(layer: dict[str, int], discovery: list[str]) -> list[list[str]]:
    """The nodes of each layer, in discovery order."""
    order_of = {n: i for i, n in enumerate(discovery)}
    layers: list[list[str]] = [[] for _ in range(max(layer.values()) + 1)]
    for node in sorted(layer, key=lambda n: order_of.get(n, len(order_of))):
        layers[layer[node]].append(node)
    return layers


def crossings(layering: list[list[str]], down: Links) -> int:
    """How many pairs of links cross between each layer and the others."""
    total = 0
    for upper in layering[:-1]:
        position = {n: i for i, n in enumerate(upper)}
        lower_pos: dict[str, int] = {}
        for row in layering:
            if row is not upper:
                lower_pos.update({n: i for i, n in enumerate(row)})
        links = [(position[u], lower_pos[v]) for u in upper for v, _ in down[u] if v in lower_pos]
        total += sum(
            1 for i, (a1, b1) in enumerate(links) for a2, b2 in links[i + 1 :] if (a1 - a2) * (b1 - b2) < 0
        )
    return total


def _order_layers(layers: list[list[str]], up: Links, down: Links) -> list[list[str]]:
    """Barycentre sweeps, down then up; the ordering with the fewest crossings seen wins."""
    depth_count = len(layers)
    best = [list(row) for row in layers]
    best_crossings = crossings(best, down)
    for sweep in range(ORDER_SWEEPS):
        downward = sweep % 2 == 0
        rows = range(1, depth_count) if downward else range(depth_count - 2, -1, -1)
        for r in rows:
            reference = layers[r - 1] if downward else layers[r + 1]
            layers[r] = barycentre_sort(layers[r], up if downward else down, reference)
        score = crossings(layers, down)
        if score < best_crossings:
            best, best_crossings = [list(row) for row in layers], score
    return _sift(best, down, best_crossings)


def _sift(layers: list[list[str]], down: Links, score: int) -> list[list[str]]:
    """Move single nodes along their layer while a move removes crossings.

    Barycentres leave knots where a long edge from high up passes a node whose own edges pull the
    other way (the Claim step's catches, say, which skip the charge on their way down).
    """
    improved = score > 0
    while improved:
        improved = False
        for row in layers:
            for node in list(row):
                home = row.index(node)
                row.remove(node)
                tried = []
                for position in range(len(row) + 1):
                    row.insert(position, node)
                    tried.append((crossings(layers, down), abs(position - home), position))
                    row.remove(node)
                moved, _, position = min(tried)
                row.insert(position if moved < score else home, node)
                if moved < score:
                    score, improved = moved, True
    return layers


def barycentre_sort(row: list[str], links: Links, reference: list[str]) -> list[str]:
    """``row`` ordered by the weighted mean position of each node's neighbours in ``reference``."""
    where = {n: i for i, n in enumerate(reference)}
    current = {n: i for i, n in enumerate(row)}

    def key(node: str) -> tuple[float, int]:
        placed = [(where[n], w) for n, w in links[node] if n in where]
        if not placed:
            return float(current[node]), current[node]
        return sum(p * w for p, w in placed) / sum(w for _, w in placed), current[node]

    return sorted(row, key=key)


def _place_x(layers: list[list[str]], width: dict[str, float], up: Links, down: Links) -> dict[str, float]:
    """x of every node: each layer centred, then sweeps pulling nodes towards their neighbours."""
    x: dict[str, float] = {}
    widest = max(sum(width[n] for n in row) + NODE_GAP * (len(row) - 1) for row in layers)
    for row in layers:
        total = sum(width[n] for n in row) + NODE_GAP * (len(row) - 1)
        cursor = (widest - total) / 2
        for node in row:
            x[node] = cursor + width[node] / 2
            cursor += width[node] + NODE_GAP

    def pull(node: str, links: list[tuple[str, float]]) -> float:
        if not links:
            return x[node]
        return sum(x[n] * w for n, w in links) / sum(w for _, w in links)

    for sweep in range(PLACE_SWEEPS):
        rows_order = layers if sweep % 2 == 0 else list(reversed(layers))
        for row in rows_order:
            if sweep >= PLACE_BOTH_FROM:
                desired = {n: pull(n, up[n] + down[n]) for n in row}
            elif sweep % 2 == 0:
                desired = {n: pull(n, up[n]) for n in row}
            else:
                desired = {n: pull(n, down[n]) for n in row}
            x.update(place_row(row, desired, width))
    return x


def _gap(a: str, b: str, width: dict[str, float]) -> float:
    """The least distance between the centres of two neighbours in a layer."""
    spacing = DUMMY_GAP if is_dummy(a) and is_dummy(b) else NODE_GAP
    return (width[a] + width[b]) / 2 + spacing


def place_row(row: list[str], desired: dict[str, float], width: dict[str, float]) -> dict[str, float]:
    """x for each node of ``row``: as near ``desired`` as the order and the gaps allow.

    The mean of a left-to-right pass (pushing right) and a right-to-left pass (pushing left).
    """
    left = [desired[n] for n in row]
    for i in range(1, len(row)):
        left[i] = max(left[i], left[i - 1] + _gap(row[i - 1], row[i], width))
    right = [desired[n] for n in row]
    for i in range(len(row) - 2, -1, -1):
        right[i] = min(right[i], right[i + 1] - _gap(row[i], row[i + 1], width))
    return {node: (left[i] + right[i]) / 2 for i, node in enumerate(row)}


def _ports(
    edges: list[Edge], x: dict[str, float], width: dict[str, float]
) -> tuple[dict[int, float], dict[int, float]]:
    """x where each edge leaves its source and arrives at its target, keyed by ``id(edge)``.

    Ports spread over the middle 70% of a node, in the order of where each edge heads (or comes
    from), so edges leaving one node do not cross each other.
    """
    leaving: dict[str, list[Edge]] = {}
    arriving: dict[str, list[Edge]] = {}
    for edge in edges:
        if edge.target == END:
            leaving.setdefault(edge.source, []).append(edge)
        if edge.source == edge.target or not edge.chain:
            continue
        leaving.setdefault(edge.chain[0], []).append(edge)
        arriving.setdefault(edge.chain[-1], []).append(edge)

    def heading(edge: Edge) -> float:
        return x[edge.source] if edge.target == END else x[edge.chain[1]]

    def spread(node: str, group: list[Edge], into: dict[int, float]) -> None:
        for i, edge in enumerate(group):
            into[id(edge)] = x[node] + (i + 1) / (len(group) + 1) * width[node] * 0.7 - width[node] * 0.35

    port_out: dict[int, float] = {}
    port_in: dict[int, float] = {}
    for node, group in leaving.items():
        group.sort(key=lambda e: (heading(e), e.index))
        spread(node, group, port_out)
    for node, group in arriving.items():
        group.sort(key=lambda e: (x[e.chain[-2]], e.index))
        spread(node, group, port_in)
    return port_out, port_in


def _route(
    edges: list[Edge],
    x: dict[str, float],
    y: dict[str, float],
    width: dict[str, float],
    height: dict[str, float],
) -> None:
    """Polyline points for each edge: ports spread along the node's bottom and top edges."""
    port_out, port_in = _ports(edges, x, width)
    for edge in edges:
        if edge.target == END:  # a short stub down to the end marker
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


# -- the curve through an edge's points ----------------------------------------------------------


def _bend(y0: float, y1: float) -> float:
    return (y1 - y0) / 2 if abs(y1 - y0) > 1 else 20.0


def path_d(points: list[Point]) -> str:
    """Smooth vertical curves through the points (an SVG path's ``d``)."""
    (x0, y0), rest = points[0], points[1:]
    parts = [f"M{x0:.1f},{y0:.1f}"]
    for x1, y1 in rest:
        bend = _bend(y0, y1)
        parts.append(f"C{x0:.1f},{y0 + bend:.1f} {x1:.1f},{y1 - bend:.1f} {x1:.1f},{y1:.1f}")
        x0, y0 = x1, y1
    return " ".join(parts)


def bezier(points: list[Point], segment: int, t: float) -> Point:
    """The point at ``t`` on segment ``segment`` of the curve :func:`path_d` draws."""
    (x0, y0), (x1, y1) = points[segment], points[segment + 1]
    bend = _bend(y0, y1)
    controls = [(x0, y0), (x0, y0 + bend), (x1, y1 - bend), (x1, y1)]
    weights = [(1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t**2, t**3]
    return (
        sum(w * px for w, (px, _) in zip(weights, controls, strict=True)),
        sum(w * py for w, (_, py) in zip(weights, controls, strict=True)),
    )


def curve_samples(points: list[Point], per_segment: int = 48) -> list[Point]:
    """Points along the curve :func:`path_d` draws through ``points``."""
    return [
        bezier(points, segment, step / per_segment)
        for segment in range(len(points) - 1)
        for step in range(per_segment + 1)
    ]


# -- edge labels -----------------------------------------------------------------------------------


@dataclass
class Label:
    """Where the label of ``edges[edge]`` goes."""

    edge: int
    box: Box
    width: float


def obstacles(placed: Layout) -> list[Box]:
    """What a label must not cover: every node (its order bubble above it included) and end marker."""
    boxes: list[Box] = [
        (
            placed.x[n] - placed.width[n] / 2 - 4,
            placed.y[n] - placed.height[n] / 2 - 10,
            placed.x[n] + placed.width[n] / 2 + 4,
            placed.y[n] + placed.height[n] / 2 + 4,
        )
        for n in placed.x
        if not is_dummy(n)
    ]
    for edge in placed.edges:
        if edge.kind == "end" and edge.points:
            ex, ey = edge.points[-1]
            boxes.append((ex - 9, ey - 2, ex + 9, ey + 16))
    return boxes


def overlaps(a: Box, b: Box) -> bool:
    """Whether two boxes share any area (touching edges do not count)."""
    return not (a[2] <= b[0] or a[0] >= b[2] or a[3] <= b[1] or a[1] >= b[3])


def _conflicts(
    box: Box,
    occupied: list[Box],
    paths: list[tuple[int, list[Point]]],
    own: int,
    bounds: tuple[float, float],
) -> int:
    """How bad a spot is: 1 per box covered, 2 per highlighted path crossed but its own, 1 if at the rim."""
    reach = 2.5  # half the highlighted stroke (2.6) and a little air
    count = sum(1 for o in occupied if overlaps(box, o))
    for index, samples in paths:
        if index != own and any(
            box[0] - reach < px < box[2] + reach and box[1] - reach < py < box[3] + reach
            for px, py in samples
        ):
            count += 2
    if box[0] < 2 or box[1] < 2 or box[2] > bounds[0] - 2 or box[3] > bounds[1] - 2:
        count += 1
    return count


def label_box(
    edge: Edge,
    label_w: float,
    occupied: list[Box],
    paths: list[tuple[int, list[Point]]],
    own: int,
    bounds: tuple[float, float],
) -> Box:
    """The first place along (then beside) ``edge`` that covers no box in ``occupied`` and no point of
    a highlighted path but its own; failing that, the place with the fewest such conflicts."""
    anchors = [bezier(edge.points, segment, t) for segment in range(len(edge.points) - 1) for t in _ALONG]
    beside = label_w / 2 + 6
    # On the curve, then beside it; only then above or below it (a crowded fan of edges, where a long
    # label finds no free place level with its curve).
    shifts = (
        (0.0, 0.0),
        (beside, 0.0),
        (-beside, 0.0),
        *((dx, dy) for dy in (LABEL_H + 2, -(LABEL_H + 2)) for dx in (0.0, beside, -beside)),
    )
    best: tuple[int, Box] | None = None
    for shift, rise in shifts:
        for cx, anchor_y in anchors:
            cy = anchor_y + rise
            box = (cx + shift - label_w / 2, cy - LABEL_H / 2, cx + shift + label_w / 2, cy + LABEL_H / 2)
            score = _conflicts(box, occupied, paths, own, bounds)
            if score == 0:
                return box
            if best is None or score < best[0]:
                best = (score, box)
    if best is None:
        raise ValueError("an edge label needs an edge of at least two points")
    return best[1]


def place_labels(placed: Layout, taken: set[int]) -> list[Label]:
    """Edge labels on their curves, each moved along (then beside) its edge until it covers no node,
    no other label and no highlighted edge but its own; each box as wide as its text (bold when taken).

    The path's labels come first: they get the best places.
    """
    edges = placed.edges
    occupied = obstacles(placed)
    paths = [(i, curve_samples(edges[i].points)) for i in sorted(taken) if len(edges[i].points) >= 2]
    labels: list[Label] = []
    for i in sorted(range(len(edges)), key=lambda i: (i not in taken, i)):
        edge = edges[i]
        if not edge.label or len(edge.points) < 2:
            continue
        label_w = text_width(edge.label, LABEL_PX, bold=i in taken) + 2 * LABEL_PAD
        box = label_box(edge, label_w, occupied, paths, i, placed.size)
        occupied.append(box)
        labels.append(Label(i, box, label_w))
    return labels
