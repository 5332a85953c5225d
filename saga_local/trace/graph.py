"""The definition as a graph (its states and every transition), and what an execution followed in it.

Pure data: where things go on the page is :mod:`saga_local.trace.layout`'s business.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from saga_local.trace.formatting import shorten
from saga_local.trace.history import TERMINAL_TYPES

if TYPE_CHECKING:
    from saga_local.trace.history import Step

Outcome = Literal["succeeded", "failed", "caught", "retried", "running", "not-entered"]
EdgeKind = Literal["start", "next", "choice", "default", "catch", "end"]

#: The start marker above ``StartAt``, and the end of the execution (a stub under each state that can
#: end it). Neither can be a state's name: names are printable.
START = "\x00start"
END = "\x00end"


@dataclass
class Edge:
    """One transition of the definition; ``points`` and ``chain`` are filled in by the layout."""

    source: str
    target: str
    kind: EdgeKind
    label: str = ""
    title: str = ""
    #: The position of the rule (Choice) or Catch in its state's list.
    index: int = 0
    #: The polyline the edge's curve passes through, source to target.
    points: list[tuple[float, float]] = field(default_factory=list)
    #: The nodes the edge passes through in the layering, dummy nodes included.
    chain: list[str] = field(default_factory=list)
    #: Laid out target to source, to break a cycle.
    reversed: bool = False


_OPERATORS = {
    "Equals": "==",
    "LessThan": "<",
    "GreaterThan": ">",
    "LessThanEquals": "<=",
    "GreaterThanEquals": ">=",
    "Matches": "matches",
}


def _without_implied_guards(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An ``And``'s rules without the ``IsPresent`` guards that another of its conditions implies."""
    variables = [str(r.get("Variable", "")) for r in parts]

    def implied(rule: dict[str, Any]) -> bool:
        guard = str(rule.get("Variable"))
        return rule.get("IsPresent") is True and any(
            v.startswith((guard + ".", guard + "[")) for v in variables
        )

    return [r for r in parts if not implied(r)] or parts


def _comparison(rule: dict[str, Any]) -> str:
    """A single condition: ``$.claim.outcome == "DUPLICATE"``, ``$.error is present``."""
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


def rule_text(rule: dict[str, Any], *, short: bool = False) -> str:
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
                parts = _without_implied_guards(parts)
            return f" {joiner.lower()} ".join(rule_text(r, short=short) for r in parts)
    if isinstance(rule.get("Not"), dict):
        return f"not ({rule_text(rule['Not'], short=short)})"
    return _comparison(rule)


def _choice_edges(name: str, state: dict[str, Any], states: dict[str, Any]) -> list[Edge]:
    edges = []
    for i, rule in enumerate(state.get("Choices") or []):
        if isinstance(rule, dict) and rule.get("Next") in states:
            label = shorten(rule_text(rule, short=True), 40)
            edges.append(Edge(name, rule["Next"], "choice", label, rule_text(rule), i))
    if state.get("Default") in states:
        edges.append(Edge(name, state["Default"], "default", "Default", "Default"))
    return edges


def _catch_edges(name: str, state: dict[str, Any], states: dict[str, Any]) -> list[Edge]:
    edges = []
    for i, catcher in enumerate(state.get("Catch") or []):
        if isinstance(catcher, dict) and catcher.get("Next") in states:
            errors = ", ".join(str(e) for e in catcher.get("ErrorEquals") or [])
            edges.append(Edge(name, catcher["Next"], "catch", shorten(errors, 40), errors, i))
    return edges


def graph_edges(definition: dict[str, Any]) -> list[Edge]:
    """Every transition the definition allows: start, Next, Choice rules and Default, Catch, end."""
    states: dict[str, Any] = definition.get("States") or {}
    edges = [Edge(START, str(definition.get("StartAt")), "start")]
    for name, state in states.items():
        if not isinstance(state, dict):
            continue
        kind = state.get("Type")
        if kind == "Choice":
            edges.extend(_choice_edges(name, state, states))
        elif state.get("Next") in states:
            edges.append(Edge(name, state["Next"], "next"))
        if state.get("End") or kind in TERMINAL_TYPES:
            edges.append(Edge(name, END, "end"))
        edges.extend(_catch_edges(name, state, states))
    return edges


_OUTCOME_RANK = {"failed": 5, "caught": 4, "retried": 3, "running": 2, "succeeded": 1}


def node_outcomes(steps: list[Step]) -> dict[str, Outcome]:
    """A state's outcome over all its entries: the most alarming one wins."""
    outcome: dict[str, Outcome] = {}
    for step in steps:
        seen = outcome.get(step.name)
        if seen is None or _OUTCOME_RANK[step.status] > _OUTCOME_RANK.get(seen, 0):
            outcome[step.name] = step.status
    return outcome


def _followed(edge: Edge, step: Step) -> bool:
    """Whether ``step`` left along ``edge``: its Catch rule when caught, any other edge otherwise."""
    if edge.source != step.name or edge.target != step.next:
        return False
    if step.status == "caught":
        return edge.kind == "catch" and edge.index == step.catch_index
    return edge.kind != "catch"


def taken_edges(edges: list[Edge], steps: list[Step], definition: dict[str, Any], status: str) -> set[int]:
    """Indexes of the edges the execution followed."""
    top = definition.get("States") or {}
    path = [s for s in steps if s.name in top]
    if not path:
        return set()
    taken = {i for i, edge in enumerate(edges) if edge.kind == "start" and edge.target == path[0].name}
    for step in path:
        if step.next is not None:
            taken.update(i for i, edge in enumerate(edges) if _followed(edge, step))
    last = path[-1]
    # A step that was retried and then succeeded ended the execution too.
    ended_here = last.status in {"succeeded", "retried"} or (last.status == "failed" and last.type == "Fail")
    if status != "RUNNING" and ended_here:
        taken.update(i for i, e in enumerate(edges) if e.kind == "end" and e.source == last.name)
    return taken
