"""The definition as a Mermaid flowchart: the README's graph, drawn from the ASL rather than by hand.

Every state of the definition and every transition :func:`saga_local.trace.graph.graph_edges` finds
(Next, each Choice rule and its Default, each Catch) becomes a node or an arrow, so the graph cannot
leave a state out or keep one the definition dropped. Shapes follow the trace page's: a Choice is a
hexagon, a Succeed or Fail a stadium (green or red), any other state a box; a Catch is dashed and
labelled with the errors it catches, a Choice rule with its condition. States that end the execution
without being a Succeed or a Fail (``"End": true``) point at one End node.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from saga_local.trace.graph import END, START, graph_edges

if TYPE_CHECKING:
    from saga_local.trace.graph import Edge

#: Node text per state type: ``(opening, closing)`` of the Mermaid shape.
_SHAPES = {"Choice": ("{{", "}}"), "Succeed": ("([", "])"), "Fail": ("([", "])"), "Pass": ("(", ")")}
_CLASSES = {"Succeed": "succeed", "Fail": "fail"}
#: The fills and strokes of the trace page's succeeded and failed states.
_CLASS_STYLES = {"succeed": "fill:#dcf5d9,stroke:#1d8102", "fail": "fill:#fde3e1,stroke:#d13212"}
_START_ID = "Start"
_END_ID = "End"


def _text(text: str) -> str:
    """Text for a quoted Mermaid label: a double quote would end it, so string values are quoted
    singly (``$.release.reason == 'KEPT'``). Mermaid's ``#quot;`` is not decoded by every renderer."""
    return text.replace('"', "'")


def node_ids(names: list[str]) -> dict[str, str]:
    """A Mermaid id per state name, readable (``Claim Order`` is ``ClaimOrder``) and distinct.

    Ids are letters, digits and underscores; one that is empty, starts with a digit, is ``end`` in
    any case (a Mermaid keyword) or is taken (by another state, Start or End) gets a suffix."""
    taken = {_START_ID.lower(), _END_ID.lower()}
    ids: dict[str, str] = {}
    for name in names:
        base = re.sub(r"\W", "", name, flags=re.ASCII) or "State"
        if base[0].isdigit():
            base = "S" + base
        candidate, number = base, 1
        while candidate.lower() in taken:
            number += 1
            candidate = f"{base}_{number}"
        taken.add(candidate.lower())
        ids[name] = candidate
    return ids


def _arrow(edge: Edge, ids: dict[str, str]) -> str:
    source = _START_ID if edge.source == START else ids[edge.source]
    target = _END_ID if edge.target == END else ids[edge.target]
    line = "-.->" if edge.kind == "catch" else "-->"
    label = f'|"{_text(edge.label)}"|' if edge.label else ""
    return f"    {source} {line}{label} {target}"


def flowchart(definition: dict[str, Any], *, source: str = "") -> str:
    """The fenced ```mermaid block drawing ``definition``: a comment naming ``source``, then the
    states in the definition's order, then the arrows as :func:`graph_edges` lists them."""
    states: dict[str, Any] = definition.get("States") or {}
    ids = node_ids(list(states))
    kinds = {name: str(state.get("Type", "")) for name, state in states.items() if isinstance(state, dict)}
    lines = ["```mermaid", "flowchart TD"]
    if source:
        lines.append(f"    %% Drawn from {source} (make docs-figures): edit the definition, not this.")
    lines.append(f'    {_START_ID}(["Start"])')
    for name in states:
        opening, closing = _SHAPES.get(kinds.get(name, ""), ("[", "]"))
        lines.append(f'    {ids[name]}{opening}"{_text(name)}"{closing}')
    edges = graph_edges(definition)
    # A Succeed or Fail is its own end; only the other states that end the execution point at End.
    ending = [e for e in edges if e.target == END and kinds.get(e.source) not in _CLASSES]
    if ending:
        lines.append(f'    {_END_ID}(["End"])')
    lines.extend(_arrow(edge, ids) for edge in edges if edge.target != END or edge in ending)
    for name, style in _CLASS_STYLES.items():
        members = [ids[state] for state, kind in kinds.items() if _CLASSES.get(kind) == name]
        if members:
            lines.append(f"    classDef {name} {style}")
            lines.append(f"    class {','.join(members)} {name}")
    lines.append("```")
    return "\n".join(lines)
