"""The figures the README and docs/ quote are the ones the commands count now.

Each figure sits in a marked block rendered by saga_local/harness/figures.py (and bench_figures.py)
from ``saga cost --json``, ``template.yaml`` and the benchmarks' runs ``make bench`` recorded
(bench/recorded/*.json: cold start, throughput, memory, moto_speed, the webhook timing);
``make docs-figures`` rewrites them. These tests fail when a
block has drifted from a fresh measurement (a count changed, a price moved by more than the run's
noise) or from the recorded run, when the recorded file no longer has the shape the benchmark
writes, or when a block the docs rely on has gone.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest

from saga_local.harness import bench_figures, code_figures, figures
from saga_local.template import ROOT, load_template

if TYPE_CHECKING:
    from collections.abc import Callable
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


def _bench_blocks_drifted(runs: dict[str, dict[str, Any]]) -> list[str]:
    """The benchmark blocks of docs/performance.md that differ from what ``runs`` render."""
    documented = figures.blocks((ROOT / "docs" / "performance.md").read_text(encoding="utf-8"))
    from_files = figures.Figures(cost={}, outputs={}, bench=runs)
    return [
        name
        for name in bench_figures.RENDERERS
        if not figures.matches(name, documented[name], figures.render(name, from_files, documented[name]))
    ]


def test_the_benchmark_figures_in_performance_md_are_the_recorded_runs() -> None:
    assert _bench_blocks_drifted(bench_figures.recorded_runs()) == [], (
        "run `make docs-figures` and commit the result"
    )


@pytest.mark.parametrize(
    ("benchmark", "field", "moved_to", "blocks"),
    [
        (
            "cold_start",
            ("functions", "ClaimOrderFunction", "cpu_ms"),
            999.0,
            ["cold-start", "cold-start-before-after"],
        ),
        ("cold_start", ("cold_order", "import_cpu_ms"), 999.0, ["cold-start", "cold-order-warm-parts"]),
        ("cold_start", ("cold_order", "x_alternative"), 9.9, ["cold-start", "cold-start-before-after"]),
        ("cold_start", ("levers", "tracing_off", "least_against_shipped_ms"), 99.0, ["cold-start-levers"]),
        ("cold_start", ("levers", "shipped_least_cpu_ms"), 9.0, ["cold-start-levers"]),
        (
            "cold_start",
            ("consumer_levers", "batch_utility_imported", "least_against_shipped_ms"),
            99.0,
            ["cold-start-levers"],
        ),
        ("cold_start", ("goal", "worst"), 0.9, ["cold-start-goal"]),
        ("cold_start", ("goal", "met"), None, ["cold-start-goal"]),
        ("cold_start", ("measured_on", "utc"), "2020-01-01T00:00:00Z", ["cold-start-run"]),
        ("cold_start_before", ("cold_order", "x_alternative"), 9.9, ["cold-start-before-after"]),
        ("throughput", ("concurrency", 1, "ratio"), 0.9, ["throughput-ratios"]),
        ("throughput", ("cpu_ms", "calls to sqs"), 99.0, ["throughput-cpu"]),
        (
            "throughput",
            ("cpu_ms", "bare_per_execution"),
            99.0,
            ["throughput-cpu", "throughput-without-dynamodb"],
        ),
        ("throughput", ("ratio_ceiling",), 0.9, ["throughput-ceiling"]),
        ("throughput", ("goal", "met"), None, ["throughput-goal"]),
        ("throughput", ("measured_on", "load_average"), [9.5, 9.0, 8.5], ["throughput-run"]),
        ("memory", ("peak_rss_mb",), 9999.0, ["memory-peak"]),
        ("memory", ("wall_seconds",), 60.0, ["memory-peak", "simulate-minutes"]),
        ("memory", ("promise_kept",), False, ["memory-peak"]),
        ("moto_speed", ("update_item_cpu_ms", "with_moto_speed"), 99.0, ["moto-speed"]),
        ("moto_speed", ("ratio",), 99.0, ["moto-speed"]),
    ],
)
def test_a_recorded_benchmark_run_that_differs_from_the_docs_is_a_drift(
    benchmark: str, field: tuple[str | int, ...], moved_to: object, blocks: list[str]
) -> None:
    runs = copy.deepcopy(bench_figures.recorded_runs())
    *parents, leaf = field
    target: Any = runs[benchmark]
    for key in parents:
        target = target[key]
    target[leaf] = (not target[leaf]) if moved_to is None else moved_to

    assert _bench_blocks_drifted(runs) == blocks


def test_a_record_of_another_benchmark_is_refused(tmp_path: Path) -> None:
    (tmp_path / "moto_speed.json").write_text(json.dumps({"benchmark": "throughput"}), encoding="utf-8")

    with pytest.raises(ValueError, match=r"not a record of bench/moto_speed\.py"):
        bench_figures.recorded_run("moto_speed", tmp_path)


def _recorded_by(script: str, options: list[str], tmp_path: Path) -> dict[str, Any]:
    """What ``bench/<script>`` writes with ``--record``, checked against the line it prints."""
    written = tmp_path / "recorded.json"
    command = [sys.executable, f"bench/{script}", *options, "--record", str(written)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)  # noqa: S603

    assert done.returncode == 0, done.stderr[-2000:]
    fresh: dict[str, Any] = json.loads(written.read_text(encoding="utf-8"))
    (line,) = done.stdout.splitlines()
    assert {key: item for key, item in fresh.items() if key != "measured_on"} == json.loads(line)
    return fresh


def _rendered_cpu_only(record: dict[str, Any]) -> dict[str, Any]:
    """The throughput record with only the ``cpu_ms`` keys the docs render (the rest are per run)."""
    return {**record, "cpu_ms": {key: record["cpu_ms"][key] for key in bench_figures.CPU_MS_RENDERED}}


@pytest.mark.parametrize(
    ("script", "options", "comparable"),
    [
        ("throughput.py", ["--orders", "6", "--concurrency", "1", "4", "--repeat", "1"], _rendered_cpu_only),
        ("memory.py", ["--orders", "20", "--copies", "1"], dict),
        ("moto_speed.py", ["--claims", "5", "--repeat", "1"], dict),
    ],
)
def test_each_recorded_benchmark_run_has_the_shape_its_bench_writes(
    script: str, options: list[str], comparable: Callable[[dict[str, Any]], dict[str, Any]], tmp_path: Path
) -> None:
    fresh = _recorded_by(script, options, tmp_path)
    recorded = bench_figures.recorded_run(fresh["benchmark"])

    assert _shape(comparable(recorded)) == _shape(comparable(fresh))
    assert recorded.get("promise_kept", recorded.get("every_claim_won")) is True


def test_the_recorded_cold_starts_time_every_function_of_the_template_and_one_cold_order() -> None:
    # bench/cold_start.py needs `make sam-build`, python3.13 and a few minutes: the records are checked
    # against what it measures (the template's functions) and the keys the tables read, not by running it.
    functions = [
        logical_id
        for logical_id, resource in load_template()["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    ]
    row_keys = {"cpu_ms", "import_cpu_ms", "invoke_cpu_ms", "x_alternative", "compiled_at_import"}
    for name in ("cold_start", "cold_start_before"):
        recorded = bench_figures.recorded_run(name)
        plain = [recorded["alternative"]["plain"], recorded["baseline"]["bare_plain"]]

        assert sorted(recorded["functions"]) == sorted(functions), name
        for row in [
            *recorded["functions"].values(),
            *recorded["alternative"].values(),
            *recorded["baseline"].values(),
        ]:
            assert row_keys <= set(row), name
            assert (row["compiled_at_import"] == 0) is (row not in plain), (
                name
            )  # only sam's own build compiles
        assert recorded["alternative"]["plain"]["x_alternative"] == 1.0
        order = recorded["cold_order"]
        assert order["functions"] == [
            "StartExecutionFunction",
            "ClaimOrderFunction",
            "ChargePaymentFunction",
            "MarkCompleteFunction",
        ]
        assert (
            abs(order["x_alternative"] - order["cpu_ms"] / recorded["alternative"]["plain"]["cpu_ms"]) < 0.01
        )
        goal = recorded["goal"]
        assert goal["met"] is (
            goal["order"] <= goal["order_x_alternative_at_most"]
            and goal["worst"] <= goal["function_x_alternative_at_most"]
        )
        assert set(recorded["measured_on"]) == {"utc", "cpu_count", "load_average"}
    levers = {"function", "shipped_least_cpu_ms", "botocore_data_untrimmed", "boto3_imported", "tracing_off"}
    assert set(bench_figures.recorded_run("cold_start")["levers"]) == levers
    consumer = {"function", "shipped_least_cpu_ms", "batch_utility_imported", "payment_intent_objects"}
    assert set(bench_figures.recorded_run("cold_start")["consumer_levers"]) == consumer


def test_what_a_flood_costs_in_webhooks_md_is_priced_from_prices_json_and_the_template() -> None:
    """No run needed: a refused request costs its invocation, its billed milliseconds and its trace."""
    documented = figures.blocks((ROOT / "docs" / "webhooks.md").read_text(encoding="utf-8"))["webhook-flood"]
    priced = figures.Figures(cost={}, outputs={}, webhook={}, bench={})

    assert figures.matches(
        "webhook-flood", documented, figures.render("webhook-flood", priced, documented)
    ), "run `make docs-figures` and commit the result"


def test_the_cost_sentence_names_the_largest_lines_after_step_functions_in_order(
    measured: figures.Figures,
) -> None:
    rest = figures.cost_sentence(measured).split("the rest mostly ")[1].split(";")[0]
    lines = measured.cost["happy"]["usd_per_million"]
    logs = lines["logs_state_machine"] + lines["logs_lambda"]
    named = figures.rest_of_the_cost(measured)
    amounts = [logs if key == "logs" else lines[key] for key in named]

    assert amounts == sorted(amounts, reverse=True)
    assert [rest.index(figures._REST_NAMES[key]) for key in named[:3]] == sorted(
        rest.index(figures._REST_NAMES[key]) for key in named[:3]
    )
    assert not any(figures._REST_NAMES[key] in rest for key in named[3:]), "only the largest are named"


# -- the README's graph, drawn from the definition ------------------------------------------------

_NODE = re.compile(r'^\s+(?P<id>\w+)[\[\(\{]+"(?P<label>[^"]*)"[\]\)\}]+$')


def _readme_graph() -> str:
    return figures.blocks((ROOT / "README.md").read_text(encoding="utf-8"))["state-machine"]


def _drawn_states(graph: str) -> list[str]:
    """The states a Mermaid block draws: its labelled nodes but the Start and End markers."""
    found = (_NODE.match(line) for line in graph.splitlines())
    return [m["label"] for m in found if m and m["id"] not in {"Start", "End"}]


def _definition() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(code_figures.definition_path().read_text(encoding="utf-8"))
    return loaded


def test_the_readme_graph_is_the_one_the_definition_draws_now() -> None:
    documented = _readme_graph()
    unmeasured = figures.Figures(cost={}, outputs={}, webhook={}, bench={})

    assert figures.matches(
        "state-machine", documented, figures.render("state-machine", unmeasured, documented)
    ), "run `make docs-figures` and commit the result"


def test_the_readme_graph_draws_every_state_of_the_definition_and_no_other() -> None:
    definition = _definition()
    graph = _readme_graph()

    assert _drawn_states(graph) == list(definition["States"])
    arrows = [line for line in graph.splitlines() if "-->" in line or "-.->" in line]
    catches = sum(len(state.get("Catch", [])) for state in definition["States"].values())
    assert sum("-.->" in line for line in arrows) == catches  # every Catch, dashed


@pytest.mark.parametrize("change", ["add", "remove"])
def test_a_state_added_to_or_removed_from_the_definition_makes_the_readme_graph_drift(change: str) -> None:
    definition = _definition()
    states = definition["States"]
    if change == "add":
        states["Planted State"] = {"Type": "Succeed"}
    else:
        states.pop(list(states)[-1])
    documented = _readme_graph()
    redrawn = figures._body(code_figures.state_machine_graph(definition), documented)

    assert not figures.matches("state-machine", documented, redrawn)
    assert _drawn_states(redrawn) == list(states)


# -- docs/design.md's counts and defaults, read off the template and the code --------------------

UNMEASURED = figures.Figures(cost={}, outputs={}, webhook={}, bench={})


def _code_blocks_drifted() -> list[str]:
    """'file: block' for every block read off the repository that differs from what it renders now."""
    found = []
    for name in figures.DOCUMENTS:
        for block, body in figures.blocks((ROOT / name).read_text(encoding="utf-8")).items():
            rendered = figures.render(block, UNMEASURED, body) if block in figures.CODE_BLOCKS else body
            if not figures.matches(block, body, rendered):
                found.append(f"{name}: figures:{block}")
    return found


def test_every_figure_read_off_the_code_is_what_the_code_says_now() -> None:
    design = figures.blocks((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))

    # Besides the numbers read off the code, design.md holds the template's shape (rendered from the
    # templates alone, with the priced blocks); the README draws the state machine, and
    # order-message.md counts the currencies.
    assert set(design) - set(figures.PRICED_BLOCKS) == set(figures.CODE_BLOCKS) - {
        "state-machine",
        "currency-count",
    }
    assert _code_blocks_drifted() == [], "run `make docs-figures` and commit the result"


def test_a_default_changed_in_the_template_makes_design_md_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    template = copy.deepcopy(load_template())
    template["Parameters"]["ClaimLeaseSeconds"]["Default"] = 1200
    template["Resources"]["OrdersQueue"]["Properties"]["MessageRetentionPeriod"] = 7 * 86_400
    monkeypatch.setattr(code_figures, "_template", lambda: template)

    assert sorted(_code_blocks_drifted()) == [
        f"docs/design.md: figures:{block}"
        for block in ("claim-lease", "list-cap", "list-window", "orders-queue-days", "redrive-days")
    ]
