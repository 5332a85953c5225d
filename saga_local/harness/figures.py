"""The figures the README and docs/ quote, generated from the commands that count them.

A figure typed by hand drifts: the README once said 5 transitions per order under a sentence saying
3, and $134 per million orders where ``saga cost`` printed $85. Each figure now sits in a marked
block, ``<!-- figures:NAME -->...<!-- /figures:NAME -->``, whose text this module renders from
``saga cost --json`` (usage counted in a local run, priced with harness/prices.json) and from
``template.yaml`` (the stack's outputs), and from what ``make bench`` recorded in bench/recorded/:
:data:`WEBHOOK_LATENCY` (``bench/webhook_latency.py --record``: a missed charge resolved by webhooks
against the sweeper) here, and cold start, throughput, memory and moto_speed's claim write in
:mod:`saga_local.harness.bench_figures`. Those are CPU and wall time, different on every run and
machine, so the docs quote one recorded run with the time, cores and load it ran on, rather than a
fresh measurement. Some figures need no run at all: the README's graph of the state machine and
the counts and defaults docs/design.md quotes are read off the repository itself
(:mod:`saga_local.harness.code_figures`).
``make docs-figures`` rewrites the blocks; ``--check`` (and tests/local/test_docs_figures.py) fails
when one has drifted.

Lambda durations and log sizes move a little between runs (a timestamp, a duration's digits), so
:func:`same_figures` compares the numbers of a block within :data:`TOLERANCE` and everything else
exactly: a count that changes (3 transitions to 4) or a price that moves by more than that fails.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga_local.harness import bench_figures, code_figures
from saga_local.harness.cost import MILLION, load_prices
from saga_local.harness.cost_measure import DEFAULT_XRAY_SAMPLED
from saga_local.harness.template_shape import measure as measure_template
from saga_local.template import ROOT, load_template

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: Relative difference allowed between a number in the docs and the one measured now.
TOLERANCE = 0.03
#: The files whose blocks this module writes.
DOCUMENTS = (
    "README.md",
    "docs/design.md",
    "docs/order-message.md",
    "docs/outcome-events.md",
    "docs/performance.md",
    "docs/webhooks.md",
)
_BLOCK = re.compile(r"<!-- figures:(?P<name>[a-z-]+) -->(?P<body>.*?)<!-- /figures:(?P=name) -->", re.DOTALL)
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
#: Bytes per GB as saga cost counts logs (saga_local.harness.cost_measure.GB).
_GB = 1024**3
#: The webhook-against-sweeper timing as ``make bench`` recorded it (bench/webhook_latency.py --record).
WEBHOOK_LATENCY = ROOT / "bench" / "recorded" / "webhook_latency.json"


def recorded_webhook_latency(path: Path = WEBHOOK_LATENCY) -> dict[str, Any]:
    """The recorded run of bench/webhook_latency.py: its JSON object and ``measured_on``."""
    recorded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return recorded


@dataclass(frozen=True)
class Figures:
    """What the blocks are rendered from: ``saga cost --json``, the template's Outputs, the
    recorded run of bench/webhook_latency.py, and the other benchmarks' recorded runs by name."""

    cost: dict[str, Any]
    outputs: dict[str, dict[str, Any]]
    webhook: dict[str, Any] = field(default_factory=recorded_webhook_latency)
    bench: dict[str, dict[str, Any]] = field(default_factory=bench_figures.recorded_runs)

    def usage(self, row: str) -> dict[str, float]:
        return dict(self.cost[row]["usage"])

    def usd(self, row: str, line: str = "total") -> float:
        return float(self.cost[row]["usd_per_million"][line])

    @property
    def mix_row(self) -> str:
        return next(name for name in self.cost if name.startswith("mix "))


def measure() -> Figures:
    """Run ``saga cost --json`` (a few seconds: a local stack, in-process) and read the template."""
    completed = subprocess.run(
        [sys.executable, "-m", "saga_local.cli", "cost", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return Figures(cost=json.loads(completed.stdout), outputs=dict(load_template()["Outputs"]))


def _word(n: float) -> str:
    return _WORDS[int(n)] if float(n).is_integer() and 0 <= n < len(_WORDS) else f"{n:g}"


def _dollars(usd: float) -> str:
    return f"${usd:,.0f}"


def _few_dollars(usd: float) -> str:
    """A small total in words: it is mostly Lambda duration, which moves with the machine's load."""
    return "a few dollars (under $10)" if usd < 10 else f"about {_dollars(usd)}"


def _kb(gb: float) -> str:
    return f"{gb * _GB / 1024:.1f} KB"


def transitions_sentence(figures: Figures) -> str:
    happy, duplicate = figures.usage("happy"), figures.usage("duplicate")
    sentence = (
        f"{_word(happy['state_transitions'])} state transitions for a charged order,"
        f" {_word(duplicate['state_transitions'])} for a duplicate"
    )
    return sentence[0].upper() + sentence[1:]


def per_order_table(figures: Figures) -> str:
    happy, duplicate = figures.usage("happy"), figures.usage("duplicate")

    def logs(usage: dict[str, float]) -> str:
        return _kb(usage["state_machine_log_gb"] + usage["lambda_log_gb"])

    rows = [
        "| Per order (counted by `saga cost --json`) | happy path | a duplicate delivery |",
        "|---|---|---|",
        f"| state transitions | {happy['state_transitions']:g} | {duplicate['state_transitions']:g} |",
        "| Lambda invocations (the start function, the steps, the outcome relay) |"
        f" {happy['lambda_invocations']:g} | {duplicate['lambda_invocations']:g} |",
        "| DynamoDB writes / strongly consistent reads |"
        f" {happy['dynamodb_wru']:g} / {happy['dynamodb_rru']:g} |"
        f" {duplicate['dynamodb_wru']:g} / {duplicate['dynamodb_rru']:g} |",
        f"| CloudWatch Logs (state machine and functions) | {logs(happy)} | {logs(duplicate)} |",
        f"| EventBridge events | {happy['eventbridge_events']:g} | {duplicate['eventbridge_events']:g} |",
        f"| cost per million (us-east-1 list prices) | {_dollars(figures.usd('happy'))} |"
        f" {_dollars(figures.usd('duplicate'))} |",
    ]
    return "\n".join(rows)


#: How the cost sentence names the lines of ``saga cost`` after Step Functions (the logs as one).
_REST_NAMES = {
    "logs": "CloudWatch Logs",
    "lambda_requests": "Lambda requests",
    "lambda_duration": "Lambda duration",
    "dynamodb_writes": "DynamoDB writes",
    "dynamodb_reads": "DynamoDB reads",
    "sqs": "SQS requests",
    "xray": "X-Ray",
    "secrets_manager": "Secrets Manager",
    "eventbridge": "EventBridge events",
}


def rest_of_the_cost(figures: Figures) -> list[str]:
    """The happy path's lines after Step Functions, largest first (the two log lines as one)."""
    lines = dict(figures.cost["happy"]["usd_per_million"])
    amounts = {"logs": float(lines.pop("logs_state_machine", 0.0)) + float(lines.pop("logs_lambda", 0.0))}
    amounts |= {key: float(lines[key]) for key in _REST_NAMES if key in lines}
    return [key for key, usd in sorted(amounts.items(), key=lambda kv: -kv[1]) if usd > 0]


def cost_sentence(figures: Figures) -> str:
    happy = figures.usd("happy")
    share = figures.mix_row.removeprefix("mix ")
    standard = figures.usd("happy", "step_functions_standard") / happy
    state_machine_logs = _kb(figures.usage("happy")["state_machine_log_gb"])
    largest, *after = rest_of_the_cost(figures)
    first = _REST_NAMES[largest] + (
        f" (the state machine logs at `Level: ALL`: about {state_machine_logs} an order)"
        if largest == "logs"
        else ""
    )
    then = " and ".join(_REST_NAMES[key] for key in after[:2])
    return (
        f"about **{_dollars(happy)} per million orders** on the happy path"
        f" ({_dollars(figures.usd('duplicate'))} for a duplicate delivery,"
        f" {_dollars(figures.usd(figures.mix_row))} when {share} of orders arrive twice),"
        f" {standard:.0%} of it Step Functions Standard transitions, the rest mostly {first}, then {then};"
        f" a single Lambda guarded by Powertools' idempotency utility costs"
        f" {_few_dollars(figures.usd('1 Lambda'))} for the same work"
    )


def outputs_list(figures: Figures) -> str:
    lines = []
    for key, output in figures.outputs.items():
        description = " ".join(str(output.get("Description", "")).split())
        condition = f" (only with {output['Condition']})" if "Condition" in output else ""
        lines.append(f"* `{key}`{condition}: {description}")
    return "\n".join(lines)


def transition_price(figures: Figures) -> str:
    happy = figures.usage("happy")
    per_transition = figures.usd("happy", "step_functions_standard") / happy["state_transitions"]
    return (
        f"{happy['state_transitions']:g} -> {happy['state_transitions'] + 1:g}: +{_dollars(per_transition)}"
    )


def happy_duplicate_transitions(figures: Figures) -> str:
    happy, duplicate = figures.usage("happy"), figures.usage("duplicate")
    return (
        f"stays at {happy['state_transitions']:g} transitions and a duplicate at"
        f" {duplicate['state_transitions']:g}"
    )


def happy_total(figures: Figures) -> str:
    return f"{_dollars(figures.usd('happy'))} for the whole happy path"


def quota_rate(figures: Figures) -> str:
    """Orders per second that the us-east-1 transition quota (5,000/s) allows."""
    happy = figures.usage("happy")["state_transitions"]
    duplicate = figures.usage("duplicate")["state_transitions"]
    return (
        f"**about {5000 / happy:,.0f} orders/s** at {happy:g} per order"
        f" ({5000 / duplicate:,.0f} duplicates/s at {duplicate:g})"
    )


def step_functions_per_order(figures: Figures) -> str:
    happy, duplicate = figures.usage("happy"), figures.usage("duplicate")
    return (
        f"1 `StartExecution`, {happy['state_transitions']:g} state transitions | a duplicate is 1"
        f" `StartExecution` and {duplicate['state_transitions']:g} transitions"
    )


def stack_per_month(figures: Figures) -> str:
    """What one stack costs a month by existing (its alarms, dashboard, key, metrics, backups)."""
    per_month = figures.cost["per_month"]
    existing = sum(usd for line, usd in per_month.items() if line not in {"scheduler", "secret"})
    return f"about {_dollars(existing)} a month"


def webhook_run(figures: Figures) -> str:
    """How the recorded run was measured: when, on how many cores, under what load."""
    run, on = figures.webhook, figures.webhook["measured_on"]
    when = on["utc"].replace("T", " ").removesuffix("Z")[:16]
    return (
        f"Recorded at {when} UTC by one run of {_word(run['orders'])} orders each way (the fewest that"
        f" still give a median and a range) on a shared {on['cpu_count']}-core machine busy with other"
        f" work (load average {on['load_average'][0]:.2f} over the last minute,"
        f" {on['load_average'][2]:.2f} over 15):"
    )


def webhook_latency_table(figures: Figures) -> str:
    """Medians and ranges of both halves, as the recorded run summarised them."""
    hooks, sweeper = figures.webhook["webhook_seconds"], figures.webhook["sweeper_seconds"]
    return "\n".join(
        [
            "| From the charge landing to the claim resolved | median | range |",
            "|---|---|---|",
            f"| webhooks (wall time, measured) | **{hooks['median']:.3f} s** |"
            f" {hooks['min']:.3f} to {hooks['max']:.3f} s |",
            f"| the sweeper alone (the schedule's clock) | **{sweeper['median']:,.0f} s** |"
            f" {sweeper['min']:,.0f} to {sweeper['max']:,.0f} s |",
        ]
    )


def webhook_ratio(figures: Figures) -> str:
    """The ratio the recorded run printed: the sweeper's median over the webhooks'."""
    return f"**{figures.webhook['ratio']:,}** in the recorded run"


#: Seconds in a day: a flood's ceiling is priced per day of it.
_DAY = 86_400


def webhook_flood(figures: Figures) -> str:
    """What a flood of refused requests to the receiver's public URL costs, and its ceiling per
    reserved receiver: Lambda's and X-Ray's prices (prices.json) at the receiver's memory (the
    template). Needs no run: a refusal's cost is the invocation, its billed milliseconds, its trace."""
    prices = {name: float(price["usd"]) for name, price in load_prices()["prices"].items()}
    globals_ = load_template()["Globals"]["Function"]
    receiver = load_template()["Resources"]["WebhookReceiverFunction"]["Properties"]
    memory_mb = int(receiver.get("MemorySize", globals_["MemorySize"]))
    if receiver.get("Architectures", globals_["Architectures"]) != ["arm64"]:
        raise ValueError("the receiver is priced as an arm64 function: price its architecture")
    if receiver.get("Tracing", globals_.get("Tracing")) != "Active":
        raise ValueError("the receiver is priced as traced by X-Ray: price it untraced")
    gb = memory_mb / 1024
    request = prices["lambda_arm64_request"] * MILLION
    per_ms = prices["lambda_arm64_gb_second"] * gb / 1000 * MILLION
    per_trace = prices["xray_trace_recorded"] * DEFAULT_XRAY_SAMPLED
    traced = per_trace * MILLION
    # One receiver refusing all day at Lambda's 1 ms billing floor: the most requests it can be billed for.
    day_requests = _DAY * 1000 * (prices["lambda_arm64_request"] + per_trace)
    day_duration = _DAY * gb * prices["lambda_arm64_gb_second"]
    ceiling = day_requests + day_duration
    return (
        f"A million refused requests cost **${request:.2f}** in invocations, **${per_ms:.4f}** for each"
        f" millisecond Lambda bills each of them (the receiver has {memory_mb} MB; Lambda bills by the"
        f" millisecond, 1 ms at least) and **${traced:.2f}** in X-Ray traces (its default rule records"
        f" {DEFAULT_XRAY_SAMPLED:.0%} of requests past the first each second), plus their log lines"
        f" (${prices['cloudwatch_logs_ingestion_gb']:.2f} per GB ingested). A throttled request costs"
        f" nothing. A receiver kept busy all day refusing requests billed at 1 ms, the most it can be"
        f" billed for, costs at most **${ceiling:,.2f}** a day before logs (${day_duration:.2f} of it"
        f" duration), so with `WebhookReceiverMaxConcurrency` set to 10 a flood costs at most"
        f" **${10 * ceiling:,.2f}** a day, however large it is."
    )


def template_shape(_figures: Figures) -> str:
    """How template.yaml and its operations' nested application are split: counted from the two files
    (saga_local/harness/template_shape.py), no run."""
    shape = measure_template()
    ((location, nested),) = shape.nested_lines.items()
    return (
        f"`template.yaml` is {shape.lines:,} lines, {shape.operations_lines} of them"
        f" ({shape.operations_share:.0%}) operations (the `Operations` application, the parameters"
        f" only it reads, the `AlarmTopicArn` output), and the state machine starts at line"
        f" {shape.state_machine_line}. `{location}` is {nested:,} lines: {shape.alarms} alarms,"
        f" {shape.metric_filters} metric filters, the dashboard and the alarm topic, reading"
        f" {shape.passed} values the saga passes in"
    )


#: Block name -> what renders it.
RENDERERS: dict[str, Callable[[Figures], str]] = {
    "transitions": transitions_sentence,
    "per-order": per_order_table,
    "cost": cost_sentence,
    "outputs": outputs_list,
    "transition-price": transition_price,
    "happy-duplicate-transitions": happy_duplicate_transitions,
    "happy-total": happy_total,
    "quota-rate": quota_rate,
    "step-functions-per-order": step_functions_per_order,
    "stack-per-month": stack_per_month,
    "webhook-run": webhook_run,
    "webhook-latency": webhook_latency_table,
    "webhook-ratio": webhook_ratio,
    "webhook-flood": webhook_flood,
    "template-shape": template_shape,
}


def _from_records(renderer: Callable[[dict[str, dict[str, Any]]], str]) -> Callable[[Figures], str]:
    def rendered(figures: Figures) -> str:
        return renderer(figures.bench)

    return rendered


def _from_code(renderer: Callable[[], str]) -> Callable[[Figures], str]:
    def rendered(_figures: Figures) -> str:  # read off the repository, not the run
        return renderer()

    return rendered


RENDERERS.update({name: _from_records(renderer) for name, renderer in bench_figures.RENDERERS.items()})
RENDERERS.update({name: _from_code(renderer) for name, renderer in code_figures.RENDERERS.items()})
#: The blocks rendered from the recorded webhook run alone (no ``saga cost`` needed).
WEBHOOK_BLOCKS = ("webhook-run", "webhook-latency", "webhook-ratio")
#: The blocks rendered from prices.json and the templates alone: no run, so no run's noise either.
PRICED_BLOCKS = ("webhook-flood", "template-shape")
#: The blocks read off the repository (the definition, the template): no run, so no noise either.
CODE_BLOCKS = tuple(code_figures.RENDERERS)
#: Every block rendered from a recorded run or from the repository: exactly what its file renders,
#: no run's noise allowed.
RECORDED_BLOCKS = (*WEBHOOK_BLOCKS, *PRICED_BLOCKS, *CODE_BLOCKS, *bench_figures.RENDERERS)


def render(name: str, figures: Figures, old: str) -> str:
    """Block ``name`` rendered from ``figures``, laid out as its ``old`` body was."""
    return _body(RENDERERS[name](figures), old)


def _body(rendered: str, old: str) -> str:
    """Rendered text laid out as the block was: inline, or on lines of its own indented as its
    closing marker is (a table inside a list item keeps the item's indentation)."""
    if not old.startswith("\n"):
        return rendered
    indent = old[len(old.rstrip(" ")) :]
    lines = "\n".join(f"{indent}{line}" if line else line for line in rendered.splitlines())
    return f"\n{lines}\n{indent}"


def rewrite(text: str, figures: Figures) -> str:
    """``text`` with every marked block rendered afresh."""

    def one_block(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise KeyError(f"no renderer for the block figures:{name}")
        body = render(name, figures, match["body"])
        if name not in RECORDED_BLOCKS and same_figures(match["body"], body):
            body = match["body"]  # within a run's noise: no churn in the docs
        return f"<!-- figures:{name} -->{body}<!-- /figures:{name} -->"

    return _BLOCK.sub(one_block, text)


def blocks(text: str) -> dict[str, str]:
    """The marked blocks of ``text``, by name."""
    return {m["name"]: m["body"] for m in _BLOCK.finditer(text)}


def same_figures(documented: str, measured: str, *, tolerance: float = TOLERANCE) -> bool:
    """The same words, and each number within ``tolerance`` of the one measured."""
    if _NUMBER.split(documented) != _NUMBER.split(measured):
        return False
    found, wanted = _NUMBER.findall(documented), _NUMBER.findall(measured)
    for a, b in zip(found, wanted, strict=True):
        x, y = float(a.replace(",", "")), float(b.replace(",", ""))
        if abs(x - y) > tolerance * max(abs(x), abs(y)):
            return False
    return True


def matches(name: str, documented: str, rendered: str) -> bool:
    """Block ``name`` as documented is the one rendered now.

    A recorded block must be exactly what its file renders: the file, not a fresh run, is its
    source, so there is no run's noise to allow for."""
    return documented == rendered if name in RECORDED_BLOCKS else same_figures(documented, rendered)


def drifted(figures: Figures, root: Path = ROOT) -> list[str]:
    """'file: block' for every block whose figures no longer match the measurement."""
    found = []
    for name in DOCUMENTS:
        text = (root / name).read_text(encoding="utf-8")
        fresh = blocks(rewrite(text, figures))
        for block, body in blocks(text).items():
            if not matches(block, body, fresh[block]):
                found.append(f"{name}: figures:{block}")
    return found


def main(argv: list[str] | None = None) -> int:
    """``--check``: exit 1 naming the drifted blocks; default: rewrite them in place."""
    parser = argparse.ArgumentParser(prog="python -m saga_local.harness.figures", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only say which blocks have drifted")
    args = parser.parse_args(argv)
    figures = measure()
    if args.check:
        stale = drifted(figures)
        for line in stale:
            print(f"drifted: {line} (make docs-figures rewrites it)", file=sys.stderr)
        return 1 if stale else 0
    for name in DOCUMENTS:
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        updated = rewrite(text, figures)
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            print(f"rewrote the figures of {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
