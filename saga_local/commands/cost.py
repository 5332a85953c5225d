"""``saga cost``: AWS cost per million orders, from the usage one order makes in a local run."""

from __future__ import annotations

import argparse
import json
from typing import Any

from saga_local.output import Out, handlers_quiet


def _schedules() -> list[str]:
    """Every ScheduleV2 expression of template.yaml (the sweep, and its hourly settlement check)."""
    from saga_local.template import functions, load_template

    found = [
        str(event["Properties"]["ScheduleExpression"])
        for spec in functions(load_template()).values()
        for event in spec.events.values()
        if event.get("Type") in ("ScheduleV2", "Schedule")
    ]
    if not found:
        raise LookupError("template.yaml: no scheduled function")
    return found


def cmd_cost(args: argparse.Namespace) -> int:
    """AWS cost per million orders, from usage counted in a local run; list prices in harness/prices.json."""
    from saga_local.commands.demo import seed_order
    from saga_local.harness import cost
    from saga_local.harness.cost_measure import (
        GB,
        PLATFORM_LOG_BYTES,
        measure_order,
        stripe_requests,
        sweeps_per_month,
    )
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.template import load_template

    assumed = {"xray_sampled": args.xray_sampling, "cold_start_share": args.cold_starts}
    # LogLevel as deployed (INFO): the function logs are a line of the bill.
    with handlers_quiet():
        with EmbeddedStack(runtime="inprocess") as stack:
            for i in range(3):  # warm the handlers: cold imports are not what an order costs
                measure_order(stack, seed_order(f"ORDER-WARM-{i}"), **assumed)
            happy = measure_order(stack, seed_order("ORDER-COST"), **assumed)
            duplicate = measure_order(stack, seed_order("ORDER-COST"), **assumed)
        # Stripe's API requests per order, with Stripe's webhooks delivered and read back (the consumer
        # reads each PaymentIntent an event names): by card, and by a bank debit that settles later.
        with EmbeddedStack(runtime="inprocess", webhooks=True) as stack:
            stack.provider.settle_seconds = 0.5
            requests = {
                "card": stripe_requests(stack, seed_order("ORDER-COST-CARD")),
                "debit": stripe_requests(stack, seed_order("ORDER-COST-DEBIT"), debit=True),
            }
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
    sweeps = sum(sweeps_per_month(expression) for expression in _schedules())
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
        "Stripe API requests an order makes (not billed; they count against Stripe's rate limits):",
        *(f"  {path}: {_requests_line(counts)}" for path, counts in requests.items()),
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
        document["stripe_requests_per_order"] = requests
        print(json.dumps(document, indent=2))
    else:
        Out()(cost.render_table(rows, prices, legend=legend, wide=args.wide, monthly=monthly, notes=notes))
    return 0


def _requests_line(counts: dict[str, int]) -> str:
    """``1 create, 2 retrieve``: the endpoints an order called, in the emulator's words."""
    return ", ".join(f"{n} {endpoint}" for endpoint, n in counts.items() if n) or "none"
