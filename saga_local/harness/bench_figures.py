"""The docs' benchmark figures, rendered from what ``make bench`` recorded in bench/recorded/.

Each benchmark's ``--record PATH`` writes its JSON object and ``measured_on`` (the UTC time, CPU
count and load average it ran on): cold start (bench/cold_start.py), throughput against the bare
engine (bench/throughput.py), peak memory of a long ``saga simulate`` (bench/memory.py) and a
claim's conditional write with and without moto_speed
(bench/moto_speed.py). CPU and wall time differ on every run and machine, so docs/performance.md
quotes one recorded run, with the machine it ran on, rather than a range typed by hand.
:mod:`saga_local.harness.figures` renders these blocks beside its own; a recorded block must be
exactly what its file renders.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: Where ``make bench`` records each benchmark, by its ``"benchmark"`` name.
RECORDED = ROOT / "bench" / "recorded"
BENCHMARKS = ("cold_start", "throughput", "memory", "moto_speed")
#: The three step handlers of a charged order, as bench/throughput.py's ``cpu_ms`` labels them.
STEP_HANDLERS = ("handler ClaimOrder", "handler ChargePayment", "handler MarkComplete")
#: The ``cpu_ms`` keys the throughput blocks read.
CPU_MS_RENDERED = (
    "saga_per_order",
    "bare_per_execution",
    "calls to dynamodb",
    "calls to stripe",
    "calls to sqs",
    "calls to events",
    *STEP_HANDLERS,
)
_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def recorded_run(benchmark: str, root: Path = RECORDED) -> dict[str, Any]:
    """The recorded run of ``bench/<benchmark>.py``: its JSON object and ``measured_on``."""
    recorded: dict[str, Any] = json.loads((root / f"{benchmark}.json").read_text(encoding="utf-8"))
    if recorded.get("benchmark") != benchmark:
        raise ValueError(f"{root / benchmark}.json is not a record of bench/{benchmark}.py")
    return recorded


def recorded_runs(root: Path = RECORDED) -> dict[str, dict[str, Any]]:
    """Every benchmark's recorded run, by its name."""
    return {name: recorded_run(name, root) for name in BENCHMARKS}


def _word(n: float) -> str:
    return _WORDS[int(n)] if float(n).is_integer() and 0 <= n < len(_WORDS) else f"{n:g}"


def measured_on(run: dict[str, Any]) -> str:
    """When and on what a recorded run was measured, as one phrase."""
    on = run["measured_on"]
    when = on["utc"].replace("T", " ").removesuffix("Z")[:16]
    return (
        f"recorded at {when} UTC on a shared {on['cpu_count']}-core machine busy with other work"
        f" (load average {on['load_average'][0]:.2f} over the last minute,"
        f" {on['load_average'][2]:.2f} over 15)"
    )


def _title(logical_id: str) -> str:
    """``ClaimOrderFunction`` -> ``Claim Order``."""
    return " ".join(re.findall(r"[A-Z][a-z]*", logical_id.removesuffix("Function")))


def cold_start_run(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["cold_start"]
    return (
        f"One run of `bench/cold_start.py`, {measured_on(run)}, Python {run['python']}:"
        f" median CPU milliseconds of the import over {_word(run['runs'])} runs per row"
        " (the ratios are what carry over to Lambda, not the milliseconds):"
    )


def cold_start_table(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["cold_start"]
    plain, same_way = run["baseline"]["bare_plain"], run["baseline"]["bare_bytecode"]
    lines = [
        "| | CPU ms | / bare, plain `sam build` | / bare, built as the functions are |",
        "| --- | --- | --- | --- |",
        f"| bare Powertools handler, plain `sam build` | {plain['cpu_ms']:.0f} | 1 |"
        f" {plain['x_bare_bytecode']:.2f} |",
        f"| bare Powertools handler, built as the functions are | {same_way['cpu_ms']:.0f} |"
        f" {same_way['x_bare_plain']:.2f} | 1 |",
    ]
    for logical_id, row in run["functions"].items():
        lines.append(
            f"| {_title(logical_id)} | {row['cpu_ms']:.0f} | {row['x_bare_plain']:.2f} |"
            f" {row['x_bare_bytecode']:.2f} |"
        )
    return "\n".join(lines)


def cold_start_goal(runs: dict[str, dict[str, Any]]) -> str:
    goal = runs["cold_start"]["goal"]
    verdict = "met" if goal["met"] else "not met"
    return (
        f"the worst function at **{goal['worst']:.2f}** of the bare handler's plain build, against"
        f" the goal's {goal['x_bare_plain_at_most']:g}: {verdict}"
    )


def throughput_run(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["throughput"]
    return (
        f"One run of `bench/throughput.py` ({run['orders']:,} orders a pass, {_word(run['repeat'])}"
        f" passes of each), {measured_on(run)}:"
    )


def _each(rows: list[dict[str, Any]], key: str, form: str) -> str:
    return " and ".join(format(row[key], form) for row in rows)


def throughput_ratios(runs: dict[str, dict[str, Any]]) -> str:
    rows = runs["throughput"]["concurrency"]
    at = " and ".join(f"{row['ratio']:.2f}x at concurrency {row['concurrency']}" for row in rows)
    return (
        f"**{at}** ({_each(rows, 'saga_orders_per_s', '.0f')} orders/s against"
        f" {_each(rows, 'bare_executions_per_s', '.0f')} executions/s)"
    )


def throughput_cpu_table(runs: dict[str, dict[str, Any]]) -> str:
    cpu = runs["throughput"]["cpu_ms"]
    handlers = sum(float(cpu[label]) for label in STEP_HANDLERS)
    return "\n".join(
        [
            "| | ms of CPU |",
            "|---|---|",
            f"| the whole saga, per order | {cpu['saga_per_order']:.1f} |",
            f"| the bare engine, per execution | {cpu['bare_per_execution']:.1f} |",
            "| inside DynamoDB calls (moto: two conditional `UpdateItem`, one `GetItem`) |"
            f" {cpu['calls to dynamodb']:.1f} |",
            f"| inside the Stripe SDK's calls to the emulator (client side) | {cpu['calls to stripe']:.1f} |",
            f"| inside SQS and EventBridge calls | {cpu['calls to sqs'] + cpu['calls to events']:.1f} |",
            f"| inside the three step handlers, their DynamoDB and Stripe calls included | {handlers:.1f} |",
        ]
    )


def throughput_ceiling(runs: dict[str, dict[str, Any]]) -> str:
    return f"**{runs['throughput']['ratio_ceiling']:.2f}** in the recorded run"


def throughput_without_dynamodb(runs: dict[str, dict[str, Any]]) -> str:
    """The ceiling if moto's DynamoDB cost nothing: bare / (saga - dynamodb)."""
    cpu = runs["throughput"]["cpu_ms"]
    bare, saga, dynamodb = cpu["bare_per_execution"], cpu["saga_per_order"], cpu["calls to dynamodb"]
    return f"{bare:.1f} / ({saga:.1f} - {dynamodb:.1f}) = {bare / (saga - dynamodb):.2f}"


def throughput_goal(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["throughput"]
    goal, rows = run["goal"], run["concurrency"]
    others = [row for row in rows if row["of_ceiling"] != goal["worst"]] or rows
    verdict = "true" if goal["met"] else "false"
    return (
        f"**{goal['worst']:.2f}** for the worse of the {_word(len(rows))} concurrencies"
        f" ({_each(others, 'of_ceiling', '.2f')} at the other), against the bar of"
        f' {goal["of_ceiling_at_least"]:.2f}: `"met": {verdict}`'
    )


def memory_peak(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["memory"]
    kept = "the promise kept" if run["promise_kept"] else "the promise NOT kept"
    return (
        f"**{run['peak_rss_mb']:,.0f} MB** ({run['executions']:,} executions in"
        f" {run['wall_seconds'] / 60:.1f} minutes, {kept}), {measured_on(run)}"
    )


def simulate_minutes(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["memory"]
    command = run["command"].removesuffix(" --json")
    return f"`{command}` took {run['wall_seconds'] / 60:.1f} minutes in the recorded run"


def moto_speed_figure(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["moto_speed"]
    cpu = run["update_item_cpu_ms"]
    return (
        f"a new order's claim (one conditional `UpdateItem`, botocore's side included) took"
        f" **{cpu['moto']:.1f} ms** of CPU in moto as shipped and **{cpu['with_moto_speed']:.1f} ms**"
        f" with `moto_speed`'s patches, **{run['ratio']:.1f}x** less: the least of"
        f" {_word(run['repeat'])} alternated passes of {run['claims']:,} claims each,"
        f" `bench/moto_speed.py` {measured_on(run)}"
    )


#: Block name -> what renders it from the recorded runs.
RENDERERS: dict[str, Callable[[dict[str, dict[str, Any]]], str]] = {
    "cold-start-run": cold_start_run,
    "cold-start": cold_start_table,
    "cold-start-goal": cold_start_goal,
    "throughput-run": throughput_run,
    "throughput-ratios": throughput_ratios,
    "throughput-cpu": throughput_cpu_table,
    "throughput-ceiling": throughput_ceiling,
    "throughput-without-dynamodb": throughput_without_dynamodb,
    "throughput-goal": throughput_goal,
    "memory-peak": memory_peak,
    "simulate-minutes": simulate_minutes,
    "moto-speed": moto_speed_figure,
}
