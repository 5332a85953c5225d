"""``saga cost``: AWS cost per million orders, from the usage one order makes in a local run."""

from __future__ import annotations

import argparse
import json
from typing import Any

from saga_local.output import Out, handlers_quiet


def _sweeper_schedule() -> str:
    """The sweeper's ScheduleV2 expression, from template.yaml."""
    from saga_local.template import functions, load_template

    for spec in functions(load_template()).values():
        for event in spec.events.values():
            if event.get("Type") in ("ScheduleV2", "Schedule"):
                return str(event["Properties"]["ScheduleExpression"])
    raise LookupError("template.yaml: no scheduled function")


def cmd_cost(args: argparse.Namespace) -> int:
    """AWS cost per million orders, from usage counted in a local run; list prices in harness/prices.json."""
    from saga_local.commands.demo import seed_order
    from saga_local.harness import cost
    from saga_local.harness.cost_measure import GB, PLATFORM_LOG_BYTES, measure_order, sweeps_per_month
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.template import load_template

    assumed = {"xray_sampled": args.xray_sampling, "cold_start_share": args.cold_starts}
    # LogLevel as deployed (INFO): the function logs are a line of the bill.
    with handlers_quiet(), EmbeddedStack(runtime="inprocess") as stack:
        for i in range(3):  # warm the handlers: cold imports are not what an order costs
            measure_order(stack, seed_order(f"ORDER-WARM-{i}"), **assumed)
        happy = measure_order(stack, seed_order("ORDER-COST"), **assumed)
        duplicate = measure_order(stack, seed_order("ORDER-COST"), **assumed)
    share = args.duplicate_share

    def mix(field: str) -> float:
        return float(getattr(happy, field) + share * getattr(duplicate, field))

    mixed = cost.Usage(**{f: mix(f) for f in cost.Usage.__dataclass_fields__})
    step_ms = happy.lambda_gb_seconds / (256 / 1024) * 1000  # the same work, done by one function
    mix_name = f"mix {share:.0%}"
    rows = {
        "happy": happy,
        "duplicate": duplicate,
        mix_name: mixed,
        "1 Lambda": cost.single_lambda_baseline_usage(
            duration_ms=step_ms,
            # The same application log lines, and Lambda's own lines for one invocation instead of several.
            log_gb=happy.lambda_log_gb - (happy.lambda_invocations - 1) * PLATFORM_LOG_BYTES / GB,
            xray_traces=args.xray_sampling,
            secrets_manager_calls=args.cold_starts,
        ),
    }
    legend = {
        "happy": "the saga, happy path (one delivery, charged)",
        "duplicate": "the saga, a duplicate delivery (suppressed by the claim)",
        mix_name: f"the saga, {share:.0%} of orders delivered twice",
        "1 Lambda": "one Lambda + Powertools idempotency, no Step Functions (what it would replace)",
    }
    sweeps = sweeps_per_month(_sweeper_schedule())
    template = load_template()
    # Each secret the stack reads is a parameter with its ARN: the provider key, the webhook signing secret.
    secrets = sum(1 for name in template.get("Parameters") or {} if name.endswith("SecretArn"))
    monthly = {"scheduler": (sweeps, f"{sweeps:,.0f} runs"), "secret": (float(secrets), f"{secrets} secrets")}
    monthly.update(cost.stack_monthly_quantities(template))  # alarms, dashboard, key, metrics, PITR
    notes = [
        f"Assumed: X-Ray samples {args.xray_sampling:.0%} of requests (--xray-sampling; its default rule past"
        " 1 a second);",
        f"  {args.cold_starts:.0%} of Charge Payment invocations start cold and read the secret"
        " (--cold-starts).",
        "Counted locally: everything else, against the emulator (a real provider adds Lambda duration).",
        "Outcome events: one PutEvents entry per charged order (OrderCharged, from the claims stream);",
        "  Lambda reads the stream for free; the relay's invocation is counted whole here (one order at a",
        "  time), where AWS batches up to 100 closed claims into one.",
    ]
    prices = cost.load_prices()
    if args.json:
        document: dict[str, Any] = {
            name: {"usage": vars(u), "usd_per_million": cost.cost_per_million(u, prices)}
            for name, u in rows.items()
        }
        document["per_month"] = cost.monthly_costs({k: q for k, (q, _) in monthly.items()}, prices)
        print(json.dumps(document, indent=2))
    else:
        Out()(cost.render_table(rows, prices, legend=legend, wide=args.wide, monthly=monthly, notes=notes))
    return 0
