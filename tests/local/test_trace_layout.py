"""The trace page's graph layout (``saga_local/trace/layout.py``): pure geometry, no browser.

What a reader of the page relies on: states do not overlap, every transition flows down from where it
leaves to where it arrives (but the one edge of a loop drawn back up), edge labels cover no state and
no other label, and the same definition always draws the same picture. The Chromium test
(tests/local/test_trace.py) measures the rendered page on top of this.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import TYPE_CHECKING, Any

import pytest

from saga_local.template import ROOT
from saga_local.trace.graph import END, START, graph_edges
from saga_local.trace.layout import (
    NODE_GAP,
    crossings,
    layout,
    obstacles,
    overlaps,
    place_labels,
    place_row,
)
from saga_local.trace.measure import fit, text_width

if TYPE_CHECKING:
    from saga_local.trace.layout import Box, Layout

SAGA = json.loads((ROOT / "statemachine" / "payment_saga.asl.json").read_text(encoding="utf-8"))

#: A poll loop: a Choice sends the execution back up to a state above it.
LOOP: dict[str, Any] = {
    "StartAt": "Poll",
    "States": {
        "Poll": {"Type": "Task", "Next": "Done?"},
        "Done?": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.done", "BooleanEquals": True, "Next": "Finished"}],
            "Default": "Poll",
        },
        "Finished": {"Type": "Succeed"},
    },
}
#: A -> B -> C -> D and a shortcut A -> D: the shortcut spans two layers.
SHORTCUT: dict[str, Any] = {
    "StartAt": "A",
    "States": {
        "A": {"Type": "Task", "Next": "B", "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "D"}]},
        "B": {"Type": "Task", "Next": "C"},
        "C": {"Type": "Task", "Next": "D"},
        "D": {"Type": "Succeed"},
    },
}


def laid_out(definition: dict[str, Any]) -> Layout:
    return layout(definition, graph_edges(definition))


def node_box(placed: Layout, name: str) -> Box:
    x, y, w, h = placed.x[name], placed.y[name], placed.width[name], placed.height[name]
    return (x - w / 2, y - h / 2, x + w / 2, y + h / 2)


def drawn_nodes(definition: dict[str, Any]) -> list[str]:
    return [START, *definition["States"]]


@pytest.mark.parametrize("definition", [SAGA, LOOP, SHORTCUT], ids=["saga", "loop", "shortcut"])
def test_no_two_states_overlap_and_all_fit_in_the_picture(definition: dict[str, Any]) -> None:
    placed = laid_out(definition)

    width, height = placed.size
    for name in drawn_nodes(definition):
        left, top, right, bottom = node_box(placed, name)
        assert (left >= 0, top >= 0, right <= width, bottom <= height) == (True,) * 4, name
    for a, b in itertools.combinations(drawn_nodes(definition), 2):
        assert not overlaps(node_box(placed, a), node_box(placed, b)), (a, b)


@pytest.mark.parametrize("definition", [SAGA, SHORTCUT], ids=["saga", "shortcut"])
def test_without_a_cycle_every_transition_flows_down_from_source_to_target(
    definition: dict[str, Any],
) -> None:
    placed = laid_out(definition)

    for edge in placed.edges:
        if edge.target == END:
            continue
        assert not edge.reversed, edge
        assert placed.y[edge.target] > placed.y[edge.source], (edge.source, edge.target)
        # It leaves from the source's bottom and arrives at the target's top.
        assert edge.points[0][1] == node_box(placed, edge.source)[3]
        assert edge.points[-1][1] == node_box(placed, edge.target)[1]
        left, _, right, _ = node_box(placed, edge.source)
        assert left < edge.points[0][0] < right


def test_the_start_is_on_top_and_the_start_state_right_under_it() -> None:
    placed = laid_out(SAGA)

    assert placed.y[START] == min(placed.y.values())
    assert placed.y[SAGA["StartAt"]] == min(placed.y[name] for name in SAGA["States"])


def test_a_transition_that_skips_layers_passes_beside_the_states_in_between() -> None:
    placed = laid_out(SHORTCUT)

    shortcut = next(e for e in placed.edges if e.kind == "catch")
    assert [placed.y[n] for n in ("A", "B", "C", "D")] == sorted(placed.y[n] for n in ("A", "B", "C", "D"))
    assert len(shortcut.chain) == 4  # A, a point beside B, a point beside C, D
    for middle, point in zip(("B", "C"), shortcut.points[1:-1], strict=True):
        left, top, right, bottom = node_box(placed, middle)
        assert not (left <= point[0] <= right and top <= point[1] <= bottom), middle


def test_a_loop_is_laid_out_with_its_back_edge_drawn_upwards() -> None:
    placed = laid_out(LOOP)

    back = [e for e in placed.edges if e.reversed]
    assert [(e.source, e.target) for e in back] == [("Done?", "Poll")]
    assert placed.y["Poll"] < placed.y["Done?"] < placed.y["Finished"]
    # Drawn from Done? up to Poll: it starts at Done?'s top and ends at Poll's bottom.
    assert back[0].points[0][1] == node_box(placed, "Done?")[1]
    assert back[0].points[-1][1] == node_box(placed, "Poll")[3]


def test_the_saga_is_drawn_without_crossing_edges_between_layers() -> None:
    placed = laid_out(SAGA)

    layers: dict[float, list[str]] = {}
    for name in sorted(placed.x, key=placed.x.__getitem__):
        layers.setdefault(placed.y[name], []).append(name)
    down: dict[str, list[tuple[str, float]]] = {name: [] for name in placed.x}
    for edge in placed.edges:
        for u, v in itertools.pairwise(edge.chain):
            down[u].append((v, 1.0))

    assert crossings([layers[y] for y in sorted(layers)], down) == 0


def test_the_same_definition_always_draws_the_same_picture() -> None:
    first = laid_out(SAGA)
    again = laid_out(copy.deepcopy(SAGA))

    assert (first.x, first.y, first.size) == (again.x, again.y, again.size)
    assert [e.points for e in first.edges] == [e.points for e in again.edges]


@pytest.mark.parametrize("definition", [SAGA, LOOP, SHORTCUT], ids=["saga", "loop", "shortcut"])
def test_edge_labels_cover_no_state_and_no_other_label(definition: dict[str, Any]) -> None:
    placed = laid_out(definition)
    taken = {i for i, e in enumerate(placed.edges) if e.kind in {"start", "next"}}

    labels = place_labels(placed, taken)

    labelled = [i for i, e in enumerate(placed.edges) if e.label]
    assert sorted(label.edge for label in labels) == labelled
    assert labelled, "no labelled edge: the check would pass on anything"
    for label in labels:
        for obstacle in obstacles(placed):
            assert not overlaps(label.box, obstacle), placed.edges[label.edge].label
    for a, b in itertools.combinations(labels, 2):
        assert not overlaps(a.box, b.box), (placed.edges[a.edge].label, placed.edges[b.edge].label)


def test_a_label_on_the_path_taken_is_sized_for_bold_text() -> None:
    placed = laid_out(LOOP)
    default = next(i for i, e in enumerate(placed.edges) if e.kind == "default")

    (plain,) = [label for label in place_labels(placed, set()) if label.edge == default]
    (bold,) = [label for label in place_labels(placed, {default}) if label.edge == default]

    assert bold.width > plain.width


def test_a_row_keeps_its_order_and_gaps_however_its_nodes_are_pulled() -> None:
    width = {"a": 150.0, "b": 200.0, "c": 150.0}

    placed = place_row(["a", "b", "c"], {"a": 300.0, "b": 100.0, "c": 100.0}, width)

    assert placed["a"] < placed["b"] < placed["c"]
    assert placed["b"] - placed["a"] >= (150 + 200) / 2 + NODE_GAP
    assert placed["c"] - placed["b"] >= (200 + 150) / 2 + NODE_GAP


def test_a_long_name_is_cut_to_fit_its_box_with_an_ellipsis() -> None:
    name = "Publish Reconciliation Request To The Operations Queue"

    shown = fit(name, 200.0, 13.0, bold=True)

    assert shown.endswith("…")
    assert name.startswith(shown[:-1])
    assert text_width(shown, 13.0, bold=True) <= 200.0
    assert fit("Claim Order", 200.0, 13.0, bold=True) == "Claim Order"
