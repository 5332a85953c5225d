"""``saga trace ORDER --html``: the page opens on the path taken, readable at 1,400 px without zooming.

The whole definition, shrunk to the page's graph column, drew 5 px state names at 1,400 px. The
page now draws the states entered, and the transitions between them, at their own size; the states
not entered are folded under it, in the whole graph. Orders are sent and traced with the saga
command against the stack (``--stack``), as a user runs it; what is expected is read from the
executions and the definition, never from a list of state names typed here.
"""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from saga_local import cli
from saga_local.aws.stack import REGION
from saga_local.runtime.faults import Fault
from saga_local.trace import load_definition
from tests.local.chromium_support import CHROMIUM, chromium
from tests.local.test_trace import parse, with_geometry_probe

if TYPE_CHECKING:
    from saga_local.stack.driver import ExecutionResult
    from tests.helpers import Saga

READABLE_JS = Path(__file__).with_name("trace_readable.js")
#: Width of the window the page must read in without zooming, and the smallest name it may draw (px).
WIDTH = 1400
SMALLEST_NAME_PX = 12.0


class Folded(HTMLParser):
    """Where each graph sits (inside the folded ``<details id="whole-graph">`` or not), the summary's
    words, whether the details start open, and the name each state's node shows."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.folded_graphs: dict[str, bool] = {}
        self.summary = ""
        self.starts_open = False
        self.names: dict[str, dict[str, str]] = {}
        self._in_details = self._in_summary = self._in_name = False
        self._graph = self._node = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "details" and values.get("id") == "whole-graph":
            self._in_details, self.starts_open = True, "open" in values
        elif tag == "summary" and self._in_details:
            self._in_summary = True
        elif tag == "svg":
            self._graph = values.get("id", "")
            self.folded_graphs[self._graph] = self._in_details
            self.names[self._graph] = {}
        elif tag == "g" and "data-state" in values:
            self._node = values["data-state"]
        elif tag == "text" and "name" in values.get("class", "").split():
            self._in_name = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "details":
            self._in_details = False
        elif tag == "summary":
            self._in_summary = False
        elif tag == "text":
            self._in_name = False

    def handle_data(self, data: str) -> None:
        if self._in_summary:
            self.summary += data
        if self._in_name and self._node:
            self.names[self._graph][self._node] = data


def release_failed(saga: Saga) -> None:
    """Release Claim dies on every attempt: the declined order ends in the Release Failed state."""
    saga.faults.add(Fault("ReleaseClaimFunction", "start", "die", times=100))


CASES = {
    "charged": ((), None),
    "release-failed": (("--payment-method", "pm_card_chargeDeclined"), release_failed),
}


def send_and_trace(
    case: str, label: str, saga: Saga, deployed: str, folder: Path
) -> tuple[Path, ExecutionResult]:
    """Prepare CASE, ``saga send --order-id ORDER-LABEL-CASE ...``, the stack runs it, then ``saga trace
    ORDER --html FOLDER/trace.html``: the page and the one execution's result."""
    options, prepare = CASES[case]
    order_id, page = f"ORDER-{label}-{case.upper()}", folder / "trace.html"
    if prepare is not None:
        prepare(saga)
    target = ["--stack", deployed, "--region", REGION]
    assert cli.main(["send", *target, "--order-id", order_id, *options]) == 0
    saga.driver.pump()
    assert cli.main(["trace", order_id, *target, "--html", str(page)]) == 0
    (result,) = saga.driver.results()
    return page, result


@pytest.mark.parametrize("case", list(CASES))
def test_the_page_opens_on_the_states_entered_and_folds_the_others_into_the_whole_graph(
    case: str, saga: Saga, deployed: str, tmp_path: Path
) -> None:
    page_file, result = send_and_trace(case, "PATH", saga, deployed, tmp_path)

    described = saga.driver.sfn.describe_state_machine(stateMachineArn=saga.stack.state_machine_arn)
    definition = load_definition(described["definition"])
    states = list(definition["States"])
    entered = list(dict.fromkeys(result.path))
    if case == "release-failed":
        assert definition["States"][result.path[-1]].get("Error") == result.error == "ReleaseFailed"
    else:
        assert result.status == "SUCCEEDED"
    html = page_file.read_text(encoding="utf-8")
    page, folded = parse(html), Folded()
    folded.feed(html)

    # Open: the path taken, every state entered under its own name, nothing else.
    assert folded.folded_graphs == {"path-graph": False, "graph": True}
    assert set(page.path.nodes) == set(entered)
    assert folded.names["path-graph"] == {name: name for name in entered}
    assert "not-entered" not in page.path.outcomes().values()
    assert page.path.taken() <= page.taken()
    # Folded: the whole graph, the states not entered counted in the toggle's words.
    assert not folded.starts_open
    not_entered = [name for name in states if name not in entered]
    assert not_entered, "an execution that entered every state folds nothing"
    assert folded.summary.startswith(f"{len(not_entered)} states not entered")
    assert [n for n, outcome in page.outcomes().items() if outcome == "not-entered"] == not_entered
    assert list(page.nodes) == states


@pytest.mark.chromium
@pytest.mark.skipif(
    not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None,
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)",
)
@pytest.mark.parametrize("case", list(CASES))
def test_at_1400_px_each_state_entered_is_named_in_readable_type_on_the_first_screen(
    case: str, saga: Saga, deployed: str, tmp_path: Path
) -> None:
    page_file, result = send_and_trace(case, "READ", saga, deployed, tmp_path)
    probed = tmp_path / "probed.html"
    probed.write_text(
        with_geometry_probe(page_file.read_text(encoding="utf-8"), READABLE_JS), encoding="utf-8"
    )

    dom = parse(chromium(tmp_path / "profile", "--dump-dom", probed.as_uri(), width=WIDTH).stdout)
    assert dom.body.get("data-rendered") == "true", "the page's own script did not finish"
    seen: dict[str, Any] = json.loads(dom.body["data-readable"])

    assert seen["viewport"] == WIDTH
    assert seen["pageWidth"] <= WIDTH, "the page scrolls sideways"
    assert seen["scale"] >= 0.999, "the path is shrunk to fit its column"
    assert seen["wholeOpen"] is False
    assert seen["wholeVisible"] is False, "the whole graph shows before it is unfolded"
    names = {name["state"]: name for name in seen["names"]}
    assert set(names) == set(result.path)
    for state, name in names.items():
        assert name["text"] == state
        assert name["px"] >= SMALLEST_NAME_PX, state
        assert name["left"] >= 0, state
        assert name["right"] <= WIDTH, state
    assert names[result.path[0]]["top"] < 1000, "the path starts below the first screen"
