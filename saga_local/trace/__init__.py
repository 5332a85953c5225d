"""``saga trace EXECUTION``: the Step Functions console's graph inspector, offline.

Reads what the engine recorded (``DescribeExecution`` and ``GetExecutionHistory``, as boto3 returns
them) and the state machine's definition, and shows which states ran, in what order, how often each
was attempted, which errors were retried or caught and where a Catch sent them. Each part reads alone:

* :mod:`.history`: :func:`trace_steps` folds the event history into one :class:`Step` per state entered;
* :mod:`.text`: :func:`render_text` prints it like the console's event history (``color`` adds ANSI colours);
* :mod:`.graph`: the definition's states and transitions, and which of them the execution followed;
* :mod:`.layout`: pure geometry, a layered top-down layout of that graph and a spot for each edge label;
* :mod:`.svg` and :mod:`.html`: :func:`render_html` writes one self-contained page (the stylesheet and
  script in ``static/``, inlined; nothing fetched) that opens on the path taken (the states entered,
  each coloured by outcome, at a size read without zooming) beside the event table; the whole graph,
  the states not entered included, is folded under it and zooms and pans in its own box; selecting
  a state shows only its events;
* :mod:`.mermaid`: the definition as a Mermaid flowchart (the README's graph, drawn by
  ``make docs-figures``);
* :mod:`.report`: ``saga simulate --html`` and ``saga chaos --html``, a run's report as one page
  (from the plain dicts ``--json`` prints) linking the trace page of every execution that did not
  succeed.

Everything shown comes from the history or the definition, and execution inputs and error causes
are attacker-influenced: every string is escaped for HTML, and control and bidi-override
characters are made visible before they reach a terminal or a page.
"""

from __future__ import annotations

from saga_local.trace.formatting import pretty_json, summarize_cause
from saga_local.trace.history import Step, StepStatus, load_definition, trace_steps
from saga_local.trace.html import OUTCOME_COLORS, render_html
from saga_local.trace.text import render_text

__all__ = [
    "OUTCOME_COLORS",
    "Step",
    "StepStatus",
    "load_definition",
    "pretty_json",
    "render_html",
    "render_text",
    "summarize_cause",
    "trace_steps",
]
