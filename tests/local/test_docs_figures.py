"""The figures the README and docs/ quote are the ones the commands count now.

Each figure sits in a marked block rendered by saga_local/harness/figures.py from ``saga cost
--json``, ``template.yaml`` and the webhook timing ``make bench`` recorded
(bench/recorded/webhook_latency.json); ``make docs-figures`` rewrites them. These tests fail when a
block has drifted from a fresh measurement (a count changed, a price moved by more than the run's
noise) or from the recorded run, when the recorded file no longer has the shape the benchmark
writes, or when a block the docs rely on has gone.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from saga_local.harness import figures
from saga_local.template import ROOT, load_template

if TYPE_CHECKING:
    from pathlib import Path


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


def _webhook_blocks_drifted(recorded: dict[str, Any]) -> list[str]:
    """The webhook blocks of docs/performance.md that differ from what ``recorded`` renders."""
    documented = figures.blocks((ROOT / "docs" / "performance.md").read_text(encoding="utf-8"))
    from_file = figures.Figures(cost={}, outputs={}, webhook=recorded)
    return [
        name
        for name in figures.WEBHOOK_BLOCKS
        if not figures.matches(name, documented[name], figures.render(name, from_file, documented[name]))
    ]


def test_the_webhook_timing_in_performance_md_is_the_recorded_bench_run() -> None:
    assert _webhook_blocks_drifted(figures.recorded_webhook_latency()) == [], (
        "run `make docs-figures` and commit the result"
    )


@pytest.mark.parametrize(
    ("field", "moved_to", "block"),
    [
        (("webhook_seconds", "median"), 0.5, "webhook-latency"),
        (("sweeper_seconds", "max"), 1500.0, "webhook-latency"),
        (("ratio",), 8000, "webhook-ratio"),
        (("measured_on", "load_average"), [9.5, 9.0, 8.5], "webhook-run"),
        (("orders",), 10, "webhook-run"),
    ],
)
def test_a_recorded_run_that_differs_from_the_docs_is_a_drift(
    field: tuple[str, ...], moved_to: object, block: str
) -> None:
    recorded = copy.deepcopy(figures.recorded_webhook_latency())
    *parents, leaf = field
    target = recorded
    for key in parents:
        target = target[key]
    target[leaf] = moved_to

    assert _webhook_blocks_drifted(recorded) == [block]


def _shape(value: object) -> object:
    """Keys and kinds of a JSON value, not its figures: what a renamed or retyped field changes."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    return type(value).__name__


def test_the_recorded_webhook_timing_has_the_shape_the_bench_writes(tmp_path: Path) -> None:
    written = tmp_path / "webhook_latency.json"
    command = [sys.executable, "bench/webhook_latency.py", "--orders", "2", "--record", str(written)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)  # noqa: S603

    assert done.returncode == 0, done.stderr[-2000:]
    fresh = json.loads(written.read_text(encoding="utf-8"))
    (line,) = done.stdout.splitlines()
    assert {key: item for key, item in fresh.items() if key != "measured_on"} == json.loads(line)
    recorded = figures.recorded_webhook_latency()
    assert _shape(recorded) == _shape(fresh)
    assert recorded["benchmark"] == "webhook_latency"
    assert recorded["promise_kept"] is True  # the documented run charged every order once
