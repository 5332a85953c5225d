"""The figures the README and docs/ quote are the ones the commands count now.

Each figure sits in a marked block rendered by saga_local/harness/figures.py from ``saga cost
--json`` and ``template.yaml``; ``make docs-figures`` rewrites them. These tests fail when a block
has drifted from a fresh measurement (a count changed, a price moved by more than the run's noise),
or when a block the docs rely on has gone.
"""

from __future__ import annotations

import pytest

from saga_local.harness import figures
from saga_local.template import ROOT, load_template


@pytest.fixture(scope="module")
def measured() -> figures.Figures:
    return figures.measure()


def test_every_figure_in_the_readme_and_docs_matches_saga_cost_json(measured: figures.Figures) -> None:
    assert figures.drifted(measured) == [], "run `make docs-figures` and commit the result"


def test_the_readme_says_the_transitions_its_table_counts(measured: figures.Figures) -> None:
    readme = figures.blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    happy = measured.usage("happy")["state_transitions"]
    duplicate = measured.usage("duplicate")["state_transitions"]

    assert f"| state transitions | {happy:g} | {duplicate:g} |" in readme["per-order"]
    assert readme["transitions"] == figures.transitions_sentence(measured)


def test_the_readme_lists_every_output_of_the_stack() -> None:
    readme = figures.blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    listed = [line.split("`")[1] for line in readme["outputs"].strip().splitlines()]

    assert listed == list(load_template()["Outputs"])


def test_every_marked_block_has_a_renderer_and_none_has_gone() -> None:
    found = {
        name: set(figures.blocks((ROOT / name).read_text(encoding="utf-8"))) for name in figures.DOCUMENTS
    }

    assert set().union(*found.values()) == set(figures.RENDERERS)


@pytest.mark.parametrize(
    ("documented", "measured", "same"),
    [
        ("| state transitions | 5 | 3 |", "| state transitions | 3 | 2 |", False),
        ("about **$85 per million**, 88% of it", "about **$86 per million**, 88% of it", True),
        ("about **$134 per million**, 93% of it", "about **$85 per million**, 88% of it", False),
        ("5 outputs", "10 outputs", False),
        ("`OrdersQueueUrl`", "`OrdersQueueUrl`, `AlarmTopicArn`", False),
    ],
)
def test_a_figure_that_moved_past_a_runs_noise_is_a_drift(documented: str, measured: str, same: bool) -> None:
    assert figures.same_figures(documented, measured) is same
