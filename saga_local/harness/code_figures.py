"""The figures the README and docs/ read off the repository itself, not off a run.

The README's graph of the state machine is drawn from the definition (``template.yaml``'s
``DefinitionS3Location``) by :func:`saga_local.trace.mermaid.flowchart`, so it shows every state the
definition holds and no other. :mod:`saga_local.harness.figures` writes these blocks with the
others (``make docs-figures``) and checks them exactly: with no run behind them there is no run's
noise to allow for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from saga_local.template import ROOT, load_template
from saga_local.trace.history import load_definition
from saga_local.trace.mermaid import flowchart

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: The state machine whose definition the README draws.
STATE_MACHINE = "PaymentSagaStateMachine"


def definition_path(template: dict[str, Any] | None = None) -> Path:
    """The definition's file, as the template names it (relative to the repository)."""
    properties = (template or load_template())["Resources"][STATE_MACHINE]["Properties"]
    location = properties.get("DefinitionS3Location") or properties.get("DefinitionUri")
    if not isinstance(location, str):
        raise ValueError(f"{STATE_MACHINE} names no local definition file")
    return ROOT / location


def state_machine_graph(definition: dict[str, Any] | None = None) -> str:
    """The README's graph: a Mermaid flowchart of ``definition`` (the template's, by default)."""
    path = definition_path()
    if definition is None:
        definition = load_definition(path.read_text(encoding="utf-8"))
    return flowchart(definition, source=path.relative_to(ROOT).as_posix())


#: Block name -> what renders it (from the repository alone).
RENDERERS: dict[str, Callable[[], str]] = {
    "state-machine": state_machine_graph,
}
