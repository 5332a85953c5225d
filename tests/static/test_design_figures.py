"""The numbers docs/design.md states inside its drawings are the code's.

Figures in its prose sit in marked blocks that ``make docs-figures`` renders from the code
(tests/local/test_docs_figures.py checks them); a fenced drawing cannot hold a marker, so these
read the numbers out of the drawings and hold them to what they describe: the floors of
``saga_local`` in the Layout (as tests/static/test_floors.py ranks them), and how often the sweeper
runs in the overview (the template's schedule).
"""

from __future__ import annotations

import re

from saga_local.template import ROOT, load_template
from tests.static.test_floors import FLOORS, LEAVES

DESIGN = ROOT / "docs" / "design.md"
#: A line of the Layout naming one part of saga_local and its floor: ``  harness/   3. runs...``.
_FLOOR_LINE = re.compile(r"^  (?P<part>[a-z_]+(?:/|\.py))\s+(?P<floor>\d+)\. ", re.MULTILINE)


def floors_drawn(text: str) -> dict[str, int]:
    """Each part of saga_local the Layout numbers, as a module name, and the floor it gives it."""
    return {
        "saga_local." + m["part"].removesuffix("/").removesuffix(".py"): int(m["floor"])
        for m in _FLOOR_LINE.finditer(text)
    }


def floors_ranked(modules: list[str]) -> dict[str, int]:
    """The floors test_floors.py gives those modules, counted from 1 as the Layout counts them."""
    return {module: FLOORS.get(module, LEAVES) + 1 for module in modules}


def test_the_layout_numbers_each_floor_of_saga_local_as_the_floors_test_ranks_it() -> None:
    drawn = floors_drawn(DESIGN.read_text(encoding="utf-8"))

    assert set(FLOORS) <= set(drawn), "the Layout leaves out a floor"
    assert drawn == floors_ranked(list(drawn))


def test_a_floor_numbered_wrong_is_caught() -> None:
    drawn = floors_drawn("  cli.py            1. parsing\n  runtime/          5. below aws/\n")

    assert drawn == {"saga_local.cli": 1, "saga_local.runtime": 5}
    assert drawn != floors_ranked(list(drawn))


def test_the_overview_runs_the_sweeper_as_often_as_the_template_schedules_it() -> None:
    events = load_template()["Resources"]["SweeperFunction"]["Properties"]["Events"]
    schedule = events["Sweep"]["Properties"]["ScheduleExpression"]
    every = re.fullmatch(r"rate\((\d+) minutes?\)", schedule)
    assert every, schedule

    drawn = re.findall(r"sweeper Lambda \(every (\d+) minutes?\)", DESIGN.read_text(encoding="utf-8"))
    assert drawn == [every[1]]
