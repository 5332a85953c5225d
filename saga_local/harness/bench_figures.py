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
#: Records kept beside them, by name -> the benchmark that made them: the cold start as it was before the
#: clients, the botocore data and the tracer were changed for it (the functions of that commit, measured
#: by the same bench/cold_start.py; `make bench` records only the current code).
EARLIER = {"cold_start_before": "cold_start"}
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


def recorded_run(name: str, root: Path = RECORDED) -> dict[str, Any]:
    """The recorded run ``name`` of ``bench/<benchmark>.py``: its JSON object and ``measured_on``."""
    benchmark = EARLIER.get(name, name)
    recorded: dict[str, Any] = json.loads((root / f"{name}.json").read_text(encoding="utf-8"))
    if recorded.get("benchmark") != benchmark:
        raise ValueError(f"{root / name}.json is not a record of bench/{benchmark}.py")
    return recorded


def recorded_runs(root: Path = RECORDED) -> dict[str, dict[str, Any]]:
    """Every benchmark's recorded run, and the earlier records, by name."""
    return {name: recorded_run(name, root) for name in (*BENCHMARKS, *EARLIER)}


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
        f"One run of `bench/cold_start.py` (the functions built from commit {run['commit']}),"
        f" {measured_on(run)}, Python {run['python']}: median CPU milliseconds over"
        f" {_word(run['runs'])} rounds, each function in a fresh process per round (the ratios are what"
        " carry over to Lambda, not the milliseconds):"
    )


def _cells(row: dict[str, Any]) -> str:
    return (
        f"{row['import_cpu_ms']:.0f} | {row['cpu_ms'] - row['import_cpu_ms']:.0f} | {row['cpu_ms']:.0f} |"
        f" {row['x_alternative']:.2f}"
    )


def cold_start_table(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["cold_start"]
    alternative, bare, order = run["alternative"], run["baseline"], run["cold_order"]
    lines = [
        "| | import | first invocation | cold start | / the alternative |",
        "| --- | --- | --- | --- | --- |",
        "| **the alternative**: one Lambda, `@idempotent` + `stripe`, plain `sam build` |"
        f" {_cells(alternative['plain'])} |",
        f"| the alternative, built as the functions are | {_cells(alternative['bytecode'])} |",
        f"| bare Powertools handler, plain `sam build` | {_cells(bare['bare_plain'])} |",
        f"| bare Powertools handler, built as the functions are | {_cells(bare['bare_bytecode'])} |",
    ]
    lines += [f"| {_title(logical_id)} | {_cells(row)} |" for logical_id, row in run["functions"].items()]
    steps = " + ".join(_title(name) for name in order["functions"])
    lines.append(
        f"| **one cold order**: {steps} | {order['import_cpu_ms']:.0f} |"
        f" {order['cpu_ms'] - order['import_cpu_ms']:.0f} | {order['cpu_ms']:.0f} |"
        f" **{order['x_alternative']:.2f}** |"
    )
    return "\n".join(lines)


def cold_start_goal(runs: dict[str, dict[str, Any]]) -> str:
    goal = runs["cold_start"]["goal"]
    verdict = "met" if goal["met"] else "not met"
    return (
        f"one cold order at **{goal['order']:.2f}** of the alternative's single cold invocation (the goal:"
        f" {goal['order_x_alternative_at_most']:g}), the slowest function ({_title(goal['worst_function'])})"
        f" at **{goal['worst']:.2f}** (the goal: {goal['function_x_alternative_at_most']:g} each): {verdict}"
    )


def cold_start_before_after(runs: dict[str, dict[str, Any]]) -> str:
    before, after = runs["cold_start_before"], runs["cold_start"]
    lines = [
        f"| | before ({before['commit']}): cold start | / the alternative |"
        " now: cold start | / the alternative |",
        "| --- | --- | --- | --- | --- |",
    ]

    def line(label: str, old: dict[str, Any], new: dict[str, Any]) -> str:
        return (
            f"| {label} | {old['cpu_ms']:.0f} | {old['x_alternative']:.2f} | {new['cpu_ms']:.0f} |"
            f" {new['x_alternative']:.2f} |"
        )

    lines.append(
        line(
            "the alternative, plain `sam build`",
            before["alternative"]["plain"],
            after["alternative"]["plain"],
        )
    )
    for logical_id, row in after["functions"].items():
        lines.append(line(_title(logical_id), before["functions"][logical_id], row))
    old, new = before["cold_order"], after["cold_order"]
    lines.append(
        f"| **one cold order** | {old['cpu_ms']:.0f} | **{old['x_alternative']:.2f}** | {new['cpu_ms']:.0f} |"
        f" **{new['x_alternative']:.2f}** |"
    )
    return "\n".join(lines)


def cold_start_levers(runs: dict[str, dict[str, Any]]) -> str:
    """One table per function the levers were measured on: Claim Order's, then the webhook consumer's."""
    recorded = runs["cold_start"]
    tables = [_lever_table(recorded["levers"]), _lever_table(recorded["consumer_levers"])]
    return "\n\n".join(tables)


def _lever_table(measured: dict[str, Any]) -> str:
    levers = dict(measured)
    function, shipped = levers.pop("function"), levers.pop("shipped_least_cpu_ms")
    lines = [
        f"| {_title(function)}, in the same run | cold start, the least of the rounds | against as shipped |",
        "| --- | --- | --- |",
        f"| as shipped | {shipped:.0f} | |",
    ]
    for lever in levers.values():
        lines.append(
            f"| {lever['undone']} | {lever['least_cpu_ms']:.0f} |"
            f" {lever['least_against_shipped_ms']:+.0f} ms |"
        )
    return "\n".join(lines)


#: Hours in a month, as AWS's pricing examples count them.
HOURS_PER_MONTH = 730


def _lambda_sizes(*, aliased: bool = False) -> tuple[float, int]:
    """The functions' memory in GB (the template's Globals) and how many functions there are (with
    ``aliased``, those behind an alias: the ones SnapStart applies to)."""
    from saga_local.template import functions, load_template

    template = load_template()
    specs = functions(template)
    sizes = {spec.memory_mb for spec in specs.values()}
    if len(sizes) != 1:
        raise ValueError(f"the functions have different memory sizes: {sorted(sizes)}")
    return sizes.pop() / 1024, sum(1 for spec in specs.values() if spec.alias or not aliased)


def _price(key: str) -> float:
    from saga_local.harness.cost import load_prices

    return float(load_prices()["prices"][key]["usd"])


def snapstart_prices(runs: dict[str, dict[str, Any]]) -> str:
    gb, count = _lambda_sizes(aliased=True)
    seconds = HOURS_PER_MONTH * 3600
    cache = _price("lambda_snapstart_cache_gb_second") * gb * seconds
    restores = _price("lambda_snapstart_restore_gb") * gb * 1000
    return (
        f"At {gb * 1024:.0f} MB: **${cache:.2f} a month per function version** (${cache * count:.2f} for the"
        f" {_word(count)} functions behind an alias, and as much again for every older version not"
        " deleted: a deploy that changes a function publishes a version of it), plus"
        f" ${restores:.3f} per thousand cold starts restored"
    )


def provisioned_prices(runs: dict[str, dict[str, Any]]) -> str:
    gb, _ = _lambda_sizes()
    kept = _price("lambda_arm64_provisioned_concurrency_gb_second")
    on_demand = _price("lambda_arm64_gb_second")
    served = _price("lambda_arm64_provisioned_duration_gb_second")
    month = kept * gb * HOURS_PER_MONTH * 3600
    return (
        f"At {gb * 1024:.0f} MB: **${month:.2f} a month per environment kept ready**, used or not, and"
        f" ${served * 1e6:.2f} instead of ${on_demand * 1e6:.2f} per million GB-seconds of duration while"
        f" it serves: it pays for itself above {kept / (on_demand - served):.0%} utilisation"
        f" ({kept:.10f} / ({on_demand:.10f} - {served:.10f})); below that it buys latency, not savings"
    )


def cold_order_warm_parts(runs: dict[str, dict[str, Any]]) -> str:
    run = runs["cold_start"]
    order, plain = run["cold_order"], run["alternative"]["plain"]["cpu_ms"]
    imports = order["import_cpu_ms"]
    first = order["cpu_ms"] - imports
    return (
        f"in the recorded run, the four imports are {imports:.0f} ms of the cold order's"
        f" {order['cpu_ms']:.0f} ms of CPU ({imports / order['cpu_ms']:.0%}) and the four first"
        f" invocations (clients, the secret, the first calls) the other {first:.0f} ms. SnapStart would"
        f" leave a cold order those {first:.0f} ms ({first / plain:.2f} of the alternative's cold"
        " invocation) and four restores; provisioned concurrency would leave them to the first order"
        " each environment serves, and nothing to the next ones"
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
    "cold-start-before-after": cold_start_before_after,
    "cold-start-levers": cold_start_levers,
    "cold-order-warm-parts": cold_order_warm_parts,
    "snapstart-prices": snapstart_prices,
    "provisioned-prices": provisioned_prices,
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
