"""``saga trace``: real executions of the real ASL (moto, in-process handlers), traced as text and HTML.

Histories here are what the engine recorded for a run, never hand-written: the trace must read
what Step Functions writes, not what we think it writes.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import shutil
import struct
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from saga_local.runtime.faults import Fault
from saga_local.stripe_emulator import SAVED_PAYMENT_METHOD
from saga_local.trace import OUTCOME_COLORS, load_definition, render_html, render_text, trace_steps
from tests.helpers import order
from tests.local.chromium_support import CHROMIUM, chromium

if TYPE_CHECKING:
    from tests.helpers import Saga

# Expected paths are read from the definition (the state machine gains and loses states); only the
# Task names, which the template's functions give, are named here.
CHARGE = "Charge Payment"
COMPLETE = "Mark Complete"
# Unknown order fields are ignored by the saga but travel in every state's input: the page shows them.
HOSTILE = (
    '</script><script>document.body.setAttribute("data-pwned","1")</script>'
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">\u202e\x1b[2J"
)


@dataclass
class Traced:
    description: dict[str, Any]
    history: list[dict[str, Any]]
    definition: dict[str, Any]


def run(saga: Saga, message: dict[str, Any], name: str) -> Traced:
    """Run one execution to its end and read it back as ``saga trace`` would."""
    arn = saga.driver.start(message, name=name)
    saga.driver.wait(arn)
    sfn = saga.driver.sfn
    described = sfn.describe_state_machine(stateMachineArn=saga.stack.state_machine_arn)
    return Traced(
        description=sfn.describe_execution(executionArn=arn),
        history=saga.driver.history(arn),
        # The engine's definition, substitutions applied: what `saga trace` reads from the stack.
        definition=load_definition(described["definition"]),
    )


def expected_outcomes(definition: dict[str, Any], entered: dict[str, str]) -> dict[str, str]:
    return {name: entered.get(name, "not-entered") for name in definition["States"]}


def happy_path(definition: dict[str, Any]) -> list[str]:
    """From StartAt along each Next (a Choice's Default), to the state that ends the execution."""
    states = definition["States"]
    path: list[str] = []
    name: str | None = definition["StartAt"]
    while name is not None and name not in path:
        path.append(name)
        state = states[name]
        name = state.get("Next") or (state.get("Default") if state["Type"] == "Choice" else None)
    return path


def edge_kind(definition: dict[str, Any], source: str, target: str) -> str:
    state = definition["States"][source]
    if state["Type"] == "Choice":
        return "default" if state.get("Default") == target else "choice"
    return "next"


def path_edges(definition: dict[str, Any], path: list[str]) -> set[tuple[str, str, str]]:
    """The edges an execution along ``path`` (no Catch) follows, as the page marks them taken."""
    edges = {("", path[0], "start"), (path[-1], "", "end")}
    edges |= {(a, b, edge_kind(definition, a, b)) for a, b in itertools.pairwise(path)}
    return edges


def catcher(definition: dict[str, Any], state: str, error: str) -> dict[str, Any]:
    """The Catch of ``state`` that ``error`` reaches first."""
    return next(
        c
        for c in definition["States"][state].get("Catch", [])
        if error in c["ErrorEquals"] or "States.ALL" in c["ErrorEquals"]
    )


def successors(definition: dict[str, Any], name: str) -> set[str]:
    state = definition["States"][name]
    found = {state.get("Next"), state.get("Default")} | {c.get("Next") for c in state.get("Choices", [])}
    found |= {c["Next"] for c in state.get("Catch", [])}
    return {n for n in found if n}


@dataclass
class Drawn:
    """One graph of the page: its nodes by state name, its edges, each node's badges."""

    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    edges: list[dict[str, str]] = field(default_factory=list)
    badges: dict[str, list[str]] = field(default_factory=dict)

    def outcomes(self) -> dict[str, str]:
        return {name: attrs["data-outcome"] for name, attrs in self.nodes.items()}

    def taken(self) -> set[tuple[str, str, str]]:
        return {
            (e["data-source"], e["data-target"], e["data-kind"])
            for e in self.edges
            if e["data-taken"] == "true"
        }


class Page(HTMLParser):
    """What the trace page draws: its nodes, edges, badges, scripts, and anything executable.

    ``nodes``, ``edges`` and ``badges`` are the whole graph's (``<svg id="graph">``); ``path`` holds
    those of the path taken (``<svg id="path-graph">``), which the page opens on."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.graphs: dict[str, Drawn] = {"graph": Drawn(), "path-graph": Drawn()}
        self._graph = self.graphs["graph"]
        self.tags: list[str] = []
        self.handlers: list[str] = []
        self.body: dict[str, str] = {}
        self.rows: list[dict[str, str]] = []
        self.steps: list[dict[str, str]] = []
        self.text: list[str] = []
        self._node: str | None = None
        self._depth = 0
        self._in_badge = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        self.handlers.extend(k for k in values if k.startswith("on"))
        if tag == "svg":
            self._graph = self.graphs.setdefault(values.get("id", ""), Drawn())
        if tag == "body":
            self.body = values
        elif tag == "tr" and "data-event-id" in values:
            self.rows.append(values)
        elif tag == "details" and "step" in values.get("class", "").split():
            self.steps.append(values)
        elif tag == "path" and "edge" in values.get("class", "").split():
            self._graph.edges.append(values)
        if tag == "g":
            if "data-state" in values:
                self._node, self._depth = values["data-state"], 0
                self._graph.nodes[self._node] = values
            elif self._node is not None:
                self._depth += 1
                self._in_badge = "badge" in values.get("class", "").split()

    def handle_endtag(self, tag: str) -> None:
        if tag == "g" and self._node is not None:
            if self._depth == 0:
                self._node = None
            else:
                self._depth -= 1
                self._in_badge = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_badge and self._node is not None and data.strip():
            self._graph.badges.setdefault(self._node, []).append(data.strip())

    @property
    def nodes(self) -> dict[str, dict[str, str]]:
        return self.graphs["graph"].nodes

    @property
    def edges(self) -> list[dict[str, str]]:
        return self.graphs["graph"].edges

    @property
    def badges(self) -> dict[str, list[str]]:
        return self.graphs["graph"].badges

    @property
    def path(self) -> Drawn:
        return self.graphs["path-graph"]

    def outcomes(self) -> dict[str, str]:
        return self.graphs["graph"].outcomes()

    def taken(self) -> set[tuple[str, str, str]]:
        return self.graphs["graph"].taken()


def parse(page_html: str) -> Page:
    page = Page()
    page.feed(page_html)
    page.close()
    return page


# -- text and HTML from real executions ----------------------------------------------------------


def test_happy_path_trace_shows_every_state_succeeded_once(saga: Saga) -> None:
    traced = run(saga, order(), "happy")

    steps = trace_steps(traced.history, traced.definition)
    text = render_text(traced.description, traced.history, traced.definition)
    page = parse(render_html(traced.description, traced.history, traced.definition))

    happy = happy_path(traced.definition)
    assert {CHARGE, COMPLETE} <= set(happy)
    assert [(s.name, s.status, s.attempts, s.errors) for s in steps] == [
        (name, "succeeded", 1, []) for name in happy
    ]
    assert all(s.entered is not None and s.exited is not None and s.exited >= s.entered for s in steps)
    assert "path: " + " -> ".join(happy) in text
    assert "retried" not in text
    assert text.rstrip().splitlines()[-2] == "SUCCEEDED"
    assert page.outcomes() == expected_outcomes(traced.definition, dict.fromkeys(happy, "succeeded"))
    assert page.taken() == path_edges(traced.definition, happy)
    assert page.body["data-status"] == "SUCCEEDED"


def test_decline_trace_shows_the_catch_routing_to_release_claim(saga: Saga) -> None:
    traced = run(saga, order("ORDER-DECLINED", paymentMethod="pm_card_chargeDeclined"), "declined")

    steps = trace_steps(traced.history, traced.definition)
    text = render_text(traced.description, traced.history, traced.definition, show_io=True)
    page = parse(render_html(traced.description, traced.history, traced.definition))

    definition = traced.definition
    names = [s.name for s in steps]
    happy = happy_path(definition)
    at = names.index(CHARGE)
    assert names[: at + 1] == happy[: happy.index(CHARGE) + 1]  # the happy path up to the charge
    caught_by = catcher(definition, CHARGE, "PaymentDeclined")
    charge = steps[at]
    assert (charge.status, charge.attempts, charge.next) == ("caught", 1, caught_by["Next"])
    assert [e for e, _ in charge.errors] == ["PaymentDeclined"]
    assert charge.catch_errors == caught_by["ErrorEquals"]
    assert names[at + 1] == caught_by["Next"]
    assert all(b in successors(definition, a) for a, b in itertools.pairwise(names)), names
    last = steps[-1]
    assert (last.type, last.status) == ("Fail", "failed")
    assert definition["States"][last.name]["Error"] == "PaymentDeclined"
    assert "path: " + " -> ".join(names) in text
    routed = f"caught PaymentDeclined -> {caught_by['Next']}  (Catch {', '.join(caught_by['ErrorEquals'])})"
    assert routed in text
    assert "Your card was declined." in text  # the cause, read out of the Lambda's error JSON
    assert '"paymentMethod": "pm_card_chargeDeclined"' in text  # show_io: pretty JSON input
    assert text.rstrip().splitlines()[-2] == "FAILED  PaymentDeclined"
    assert definition["States"][last.name]["Cause"][:30] in text.rstrip().splitlines()[-1]

    entered = dict.fromkeys(names, "succeeded") | {CHARGE: "caught", last.name: "failed"}
    assert page.outcomes() == expected_outcomes(definition, entered)
    taken = page.taken()
    assert (CHARGE, caught_by["Next"], "catch") in taken
    assert (CHARGE, definition["States"][CHARGE]["Next"], "next") not in taken
    assert (last.name, "", "end") in taken
    # Another state's Catch into the same target was not followed.
    for name, state in definition["States"].items():
        for other in state.get("Catch", []):
            if name != CHARGE and other["Next"] == caught_by["Next"]:
                assert (name, other["Next"], "catch") not in taken, name
    catch_targets = {c["Next"] for s in definition["States"].values() for c in s.get("Catch", [])}
    assert {e["data-target"] for e in page.edges if e["data-kind"] == "catch"} == catch_targets
    assert page.badges.get(CHARGE) == ["caught"]
    assert "PaymentDeclined" in "".join(page.text)  # header error


def test_a_saved_card_sent_without_its_customer_ends_saying_the_provider_refused_it(saga: Saga) -> None:
    # Stripe answers HTTP 400: it was called, it created nothing, and its reason ends the message.
    traced = run(saga, order("ORDER-TR-SAVED", paymentMethod=SAVED_PAYMENT_METHOD), "saved-card")

    text = render_text(traced.description, traced.history, traced.definition, show_io=False)

    failed = next(line for line in text.splitlines() if "attempt 1 failed: ChargeNotAttempted" in line)
    assert "HTTP 400" in failed
    assert "belongs to the Customer" in failed
    assert failed.rstrip().endswith("on the PaymentIntent.")  # the provider's reason, whole
    assert "before the provider was called" not in text
    assert "refused the request itself" in text.rstrip().splitlines()[-1]
    assert saga.charges("ORDER-TR-SAVED") == 0


def test_retried_step_trace_counts_attempts_and_names_the_errors(saga: Saga) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "start", "die", times=2))

    traced = run(saga, order(), "retried")

    steps = trace_steps(traced.history, traced.definition)
    text = render_text(traced.description, traced.history, traced.definition, color=True)
    page = parse(render_html(traced.description, traced.history, traced.definition))

    happy = happy_path(traced.definition)
    assert [s.name for s in steps] == happy
    mark = steps[happy.index(COMPLETE)]
    assert (mark.status, mark.attempts, mark.retries) == ("retried", 3, 2)
    assert [e for e, _ in mark.errors] == ["Runtime.ExitError", "Runtime.ExitError"]
    assert "retried 2x: Runtime.ExitError x2" in text
    assert "attempt 3 succeeded" in text
    assert "\x1b[33mretried\x1b[0m" in text  # amber, as in the console
    assert page.outcomes()[COMPLETE] == "retried"
    assert page.badges.get(COMPLETE) == ["retried 2x"]
    assert {page.outcomes()[name] for name in happy if name != COMPLETE} == {"succeeded"}
    assert path_edges(traced.definition, happy) == page.taken()  # on past the retries


def test_running_execution_shows_the_state_in_progress(saga: Saga) -> None:
    traced = run(saga, order(), "in-flight")
    # The history as read while Charge Payment's Lambda was still running.
    cut = next(
        i
        for i, e in enumerate(traced.history)
        if e["type"] == "TaskStarted" and i > 0 and "Charge" in str(traced.history[i - 1])
    )
    history = traced.history[: cut + 1]
    description = {**traced.description, "status": "RUNNING"}
    description.pop("stopDate", None)
    description.pop("output", None)

    steps = trace_steps(history, traced.definition)
    text = render_text(description, history, traced.definition)
    page = parse(render_html(description, history, traced.definition))

    assert [(s.name, s.status) for s in steps][-1] == ("Charge Payment", "running")
    assert text.rstrip().endswith("RUNNING  in Charge Payment")
    assert page.outcomes()["Charge Payment"] == "running"
    assert ("Charge Payment", "Mark Complete", "next") not in page.taken()


def test_hostile_input_is_inert_in_the_page_and_the_terminal(saga: Saga) -> None:
    traced = run(
        saga,
        order("ORDER-DECLINED", paymentMethod="pm_card_chargeDeclined", note=HOSTILE),
        "hostile",
    )

    page_html = render_html(traced.description, traced.history, traced.definition)
    text = render_text(traced.description, traced.history, traced.definition, show_io=True)
    page = parse(page_html)

    assert page.tags.count("script") == 1  # ours
    assert "img" not in page.tags
    assert page.handlers == []
    assert any("</script><script>document.body" in chunk for chunk in page.text)  # shown, as text
    assert "http://" not in page_html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page_html
    assert "\x1b" not in text  # no terminal escape reaches the screen
    assert "\u202e" not in text  # nor a bidi override
    assert "\\u202e" in text  # made visible instead


# -- the page in a real browser ------------------------------------------------------------------


def rgb(color: str) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


@dataclass
class Png:
    width: int
    height: int
    size: int


def read_png(path: Path) -> Png:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return Png(width, height, len(data))


@pytest.mark.chromium
@pytest.mark.skipif(
    not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None,
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)",
)
def test_decline_page_renders_in_chromium_with_the_path_coloured(saga: Saga, tmp_path: Path) -> None:
    traced = run(
        saga,
        order("ORDER-DECLINED", paymentMethod="pm_card_chargeDeclined", note=HOSTILE),
        "declined-in-browser",
    )
    page_file = tmp_path / "trace.html"
    page_file.write_text(render_html(traced.description, traced.history, traced.definition), encoding="utf-8")
    screenshot = tmp_path / "trace.png"

    dom = parse(chromium(tmp_path / "profile-dom", "--dump-dom", page_file.as_uri()).stdout)
    chromium(tmp_path / "profile-png", f"--screenshot={screenshot}", page_file.as_uri())
    print(f"\ntrace page: {page_file}\nscreenshot: {screenshot}")

    # The page's script ran to its end, and nothing from the input ran with it.
    assert dom.body.get("data-rendered") == "true"
    assert "data-pwned" not in dom.body
    # The executed path: entered nodes marked taken, each painted in its outcome's colour.
    steps = trace_steps(traced.history, traced.definition)
    last = steps[-1].name
    entered = dict.fromkeys((step.name for step in steps), "succeeded") | {CHARGE: "caught", last: "failed"}
    outcomes = expected_outcomes(traced.definition, entered)
    assert dom.outcomes() == outcomes
    for name, attrs in dom.nodes.items():
        fill, stroke = OUTCOME_COLORS[outcomes[name]]
        assert (attrs["data-fill"], attrs["data-stroke"]) == (rgb(fill), rgb(stroke)), name
        assert attrs["data-taken"] == ("true" if name in entered else "false"), name
    assert len({attrs["data-fill"] for attrs in dom.nodes.values()}) == 4  # green, amber, red, grey
    assert (CHARGE, catcher(traced.definition, CHARGE, "PaymentDeclined")["Next"], "catch") in dom.taken()
    # The script selected the state the execution ended in: its event rows are highlighted and its
    # step is open, and no event is hidden before the reader picks a state.
    assert dom.body.get("data-selected") == last
    selected = [r for r in dom.rows if "sel" in r.get("class", "").split()]
    assert selected
    assert {r["data-state"] for r in selected} == {last}
    assert [r["data-event-id"] for r in dom.rows if "hidden" in r] == []
    assert [s["data-state"] for s in dom.steps if "open" in s] == [last]

    png = read_png(screenshot)
    assert (png.width, png.height) == (1400, 1000)
    assert png.size > 30_000  # a drawn page, not a blank one


# -- the graph's layout, measured in a real browser -----------------------------------------------

GEOMETRY_JS = Path(__file__).with_name("trace_geometry.js")
#: Room a label's text must keep inside its box, and between two shapes (SVG user units).
INSET = 1.0


def with_geometry_probe(page_html: str, probe_file: Path = GEOMETRY_JS) -> str:
    """The page, plus the probe script (allowed by adding its hash to the page's own CSP)."""
    probe = probe_file.read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(probe.encode("utf-8")).digest()).decode("ascii")
    # In the meta tag's attribute the quotes are escaped: script-src &#x27;sha256-...&#x27;
    csp = re.search(r"script-src (&#x27;|')sha256-[^&']+(&#x27;|')", page_html)
    assert csp, "the page has no script-src hash to extend"
    quote = csp.group(1)
    page_html = page_html.replace(csp.group(0), f"{csp.group(0)} {quote}sha256-{digest}{quote}", 1)
    return page_html.replace("</body>", f"<script>{probe}</script></body>", 1)


Box = tuple[float, float, float, float]


def overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def union(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def inside(inner: Box, outer: Box, inset: float) -> bool:
    return (
        inner[0] >= outer[0] + inset
        and inner[2] <= outer[2] - inset
        and inner[1] >= outer[1] - inset
        and inner[3] <= outer[3] + inset
    )


def layout_problems(geometry: dict[str, Any]) -> list[str]:
    """Every label that spills out of its box, covers another label or a node, or sits on a
    highlighted edge other than its own; every node name wider than its node."""
    problems: list[str] = []
    labels = [(label, union(tuple(label["rect"]), tuple(label["ink"]))) for label in geometry["labels"]]
    for label, _ in labels:
        if not inside(tuple(label["ink"]), tuple(label["rect"]), INSET):
            problems.append(f"label {label['text']!r} (weight {label['weight']}) spills out of its box")
    for (a, box_a), (b, box_b) in itertools.combinations(labels, 2):
        if overlap(box_a, box_b):
            problems.append(f"labels {a['text']!r} and {b['text']!r} overlap")
    for label, box in labels:
        for node in geometry["nodes"]:
            if overlap(box, tuple(node["shape"])):
                problems.append(f"label {label['text']!r} covers node {node['name']!r}")
        for path in geometry["taken"]:
            if path["edge"] == label["edge"]:
                continue  # a label sits on its own edge
            reach = path["width"] / 2
            grown = (box[0] - reach, box[1] - reach, box[2] + reach, box[3] + reach)
            if any(grown[0] < x < grown[2] and grown[1] < y < grown[3] for x, y in path["points"]):
                problems.append(f"label {label['text']!r} sits on highlighted edge {path['edge']}")
    for node in geometry["nodes"]:
        if "ink" in node and not inside(tuple(node["ink"]), tuple(node["shape"]), INSET):
            problems.append(f"the name of {node['name']!r} spills out of its node")
    return problems


def rendered_geometry(page_html: str, tmp_path: Path, name: str) -> dict[str, Any]:
    page_file = tmp_path / f"{name}.html"
    page_file.write_text(with_geometry_probe(page_html), encoding="utf-8")
    dom = parse(chromium(tmp_path / f"profile-{name}", "--dump-dom", page_file.as_uri()).stdout)
    assert dom.body.get("data-rendered") == "true", "the page's own script did not finish"
    assert "data-geometry" in dom.body, "the probe did not run"
    geometry: dict[str, Any] = json.loads(dom.body["data-geometry"])
    return geometry


@pytest.mark.chromium
@pytest.mark.skipif(
    not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None,
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)",
)
def test_labels_fit_their_boxes_and_keep_off_nodes_labels_and_the_path(saga: Saga, tmp_path: Path) -> None:
    """In the duplicate and decline traces, bold Choice labels spilled out of their boxes and
    a Catch label sat on the highlighted edge. Geometry read from what Chromium laid out, for whatever
    graph the definition draws (the whole graph unfolded, and the path taken): every label, every
    node, every highlighted edge."""
    first = run(saga, order("ORDER-LAYOUT"), "layout-charged")
    traces = {
        "charged": first,
        "duplicate": run(saga, order("ORDER-LAYOUT"), "layout-duplicate"),
        "declined": run(
            saga, order("ORDER-LAYOUT-D", paymentMethod="pm_card_chargeDeclined"), "layout-declined"
        ),
    }
    problems: dict[str, list[str]] = {}
    bold: set[str] = set()
    for name, traced in traces.items():
        page_html = render_html(traced.description, traced.history, traced.definition)
        geometry = rendered_geometry(page_html, tmp_path, name)
        assert geometry["labels"], f"{name}: no edge label drawn: the check would pass on anything"
        assert geometry["taken"], f"{name}: no highlighted edge"
        bold.update(
            label["text"] for label in geometry["labels"] if label["weight"] in {"600", "700", "bold"}
        )
        problems[name] = layout_problems(geometry)
        # The path taken, drawn apart at its own size, is held to the same rules.
        problems[f"{name} (path taken)"] = layout_problems(geometry["path"])
    assert problems == {key: [] for key in problems}
    assert len(problems) == 2 * len(traces)
    assert bold, "no label on the path (bold): the spill check never saw one"


# -- the page at 900 px, used as a reader would ----------------------------------------------------

INTERACTION_JS = Path(__file__).with_name("trace_interaction.js")


def scale_of(transform: str) -> float:
    found = re.fullmatch(r"translate\(\S+ \S+\) scale\((\S+)\)", transform)
    assert found, transform
    return float(found.group(1))


@pytest.mark.chromium
@pytest.mark.skipif(
    not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None,
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)",
)
def test_at_900_px_the_page_fits_a_state_filters_the_events_and_the_graph_zooms(
    saga: Saga, tmp_path: Path
) -> None:
    """On a laptop's half screen: no sideways scroll, the path taken or the whole graph unfolded;
    picking a state shows only its events and "show all events" brings them back; the buttons, the
    wheel and the keys move the whole graph."""
    # As long as an execution name can be (80): the header's name and ARN must wrap, not widen the page.
    name = "ORDER-NARROW-000001_attempt-0_requeued-7391e7edaa954f6fbc1748e2f7a7275d-01234567"
    assert len(name) == 80
    traced = run(saga, order("ORDER-NARROW", paymentMethod="pm_card_chargeDeclined", note=HOSTILE), name)
    page_html = render_html(traced.description, traced.history, traced.definition)
    page_file = tmp_path / "narrow.html"
    page_file.write_text(with_geometry_probe(page_html, INTERACTION_JS), encoding="utf-8")
    dom = parse(chromium(tmp_path / "profile-narrow", "--dump-dom", page_file.as_uri(), width=900).stdout)
    assert dom.body.get("data-rendered") == "true", "the page's own script did not finish"
    assert "data-pwned" not in dom.body
    probe: dict[str, Any] = json.loads(dom.body["data-probe"])

    assert probe["foldedAtFirst"]
    assert probe["pathWidths"]["page"] <= probe["pathWidths"]["viewport"] == 900
    assert probe["pathWidths"]["graphRight"] <= 900
    for widths in (probe["widths"], probe["widthsZoomed"]):
        assert widths["viewport"] == 900
        assert widths["page"] <= widths["viewport"], "the page scrolls sideways"
        assert widths["graphRight"] <= widths["viewport"]
        assert widths["tableRight"] <= widths["viewport"]
        # One column: the graph gets the page's width, not the ~440 px left beside the table.
        assert widths["graphWidth"] >= 0.85 * widths["viewport"]

    rows_of: dict[str, int] = {}
    for row in parse(page_html).rows:
        rows_of[row.get("data-state", "")] = rows_of.get(row.get("data-state", ""), 0) + 1
    total = sum(rows_of.values())
    assert len(probe["initialRows"]) == total  # nothing hidden before a state is picked
    entered = {step.name for step in trace_steps(traced.history, traced.definition)}
    assert {s["state"] for s in probe["selections"]} == entered
    for selection in probe["selections"]:
        state = selection["state"]
        assert selection["rows"] == [state] * rows_of[state], state  # only its rows, every one of them
        assert selection["label"] == f"{state}: {rows_of[state]} of {total} events"
        assert selection["showAll"]
    assert len(probe["afterShowAll"]["rows"]) == total
    assert not probe["afterShowAll"]["showAll"]

    zoom = probe["zoom"]
    assert scale_of(zoom["initial"]) == 1
    assert scale_of(zoom["button"]) > 1
    assert zoom["unfocusedWheel"] == zoom["button"]  # the page scrolls past an unfocused graph
    assert scale_of(zoom["wheel"]) > scale_of(zoom["button"])
    assert zoom["arrow"] != zoom["wheel"]  # panned
    assert scale_of(zoom["arrow"]) == scale_of(zoom["wheel"])
    assert zoom["fit"] == zoom["initial"]


def test_the_overlap_check_catches_what_it_is_meant_to_catch() -> None:
    """The rule itself, on hand-made geometry: each of these is a finding."""
    label = {"edge": "1", "text": "x", "rect": [0, 0, 40, 17], "ink": [5, 3, 35, 14], "weight": "600"}
    clean = {"labels": [label], "nodes": [{"name": "N", "shape": [0, 40, 100, 90]}], "taken": []}
    assert layout_problems(clean) == []
    spill = {**clean, "labels": [{**label, "ink": [5, 3, 45, 14]}]}
    on_node = {**clean, "nodes": [{"name": "N", "shape": [30, 10, 100, 60]}]}
    twice = {
        **clean,
        "labels": [label, {**label, "edge": "2", "rect": [30, 5, 70, 22], "ink": [35, 8, 65, 19]}],
    }
    on_path = {**clean, "taken": [{"edge": "2", "width": 2.6, "points": [[20, -5], [20, 8], [20, 30]]}]}
    own_path = {**clean, "taken": [{"edge": "1", "width": 2.6, "points": [[20, -5], [20, 8], [20, 30]]}]}
    name_spill = {**clean, "nodes": [{"name": "N", "shape": [0, 40, 100, 90], "ink": [-3, 50, 90, 70]}]}
    for geometry in (spill, on_node, twice, on_path, name_spill):
        assert layout_problems(geometry), geometry
    assert layout_problems(own_path) == []
