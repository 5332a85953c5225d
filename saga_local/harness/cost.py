"""What a million orders cost on AWS, from figures counted in a local run.

The usage side comes from counting, never from guessing: state transitions from the executions'
histories, invocations and durations from the runtime's records, DynamoDB request units from the
calls the stores made (see :class:`Usage`). The price side is data, in ``prices.json`` beside this
module (region, date, and the page each figure was read from). The arithmetic is one line per
service::

    cost per million orders = usage per order x unit price x 1,000,000

Free tiers are left out on purpose: this is the marginal cost of an order, which is what a design
choice changes. What does not scale with orders is priced per month, apart (:func:`monthly_costs`:
the sweeper's schedule, the secret, and what the stack costs by existing, counted from
``template.yaml`` by :func:`stack_monthly_quantities`: its alarms, its dashboard, the alarm topic's
KMS key, its custom metrics, and point-in-time recovery per GB of the claims table); log storage is
not priced here.

Counted locally: transitions, invocations, durations, DynamoDB and SQS requests, the bytes the
functions log, the state machine's log events (``Level: ALL`` writes one per history event),
events published. Assumed, because no local run can count them (each is an argument of
``saga cost``): the share of requests X-Ray samples, and how often a Charge Payment container
starts cold (each cold start reads the secret once).
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

PRICES_PATH = Path(__file__).with_name("prices.json")
MILLION = 1_000_000


@dataclass(frozen=True)
class Usage:
    """What one order uses, on average over a run (fractions are expected: batching, retries, duplicates).

    ``state_transitions``   Step Functions Standard state transitions (retries included).
    ``lambda_invocations``  Lambda invocations, every function and retry included.
    ``lambda_gb_seconds``   Sum over invocations of memory (GB) x billed duration (s, rounded up to 1 ms).
    ``dynamodb_wru``        Write request units (1 per KB written, rounded up; a failed conditional write
                            consumes one too).
    ``dynamodb_rru``        Read request units (1 per 4 KB for a strongly consistent read).
    ``sqs_requests``        SQS API requests (send, receive, delete; a batch call is one request per 64 KB).
    ``express_requests``    Step Functions Express executions started (a design that uses Express).
    ``express_gb_seconds``  Express duration x memory (100 ms and 64 MB steps).
    ``state_machine_log_gb`` CloudWatch Logs ingested from the state machine (``Level: ALL``, no data).
    ``lambda_log_gb``       CloudWatch Logs ingested from the functions (their JSON logs, metric lines,
                            and Lambda's START/END/REPORT lines).
    ``xray_traces``         X-Ray traces recorded (sampled share x traces per order).
    ``secrets_manager_calls`` ``GetSecretValue`` calls (one per cold start of a function that reads it).
    ``eventbridge_events``  Custom events published to EventBridge (outcome events).
    """

    state_transitions: float
    lambda_invocations: float
    lambda_gb_seconds: float
    dynamodb_wru: float
    dynamodb_rru: float
    sqs_requests: float
    express_requests: float = 0
    express_gb_seconds: float = 0
    state_machine_log_gb: float = 0
    lambda_log_gb: float = 0
    xray_traces: float = 0
    secrets_manager_calls: float = 0
    eventbridge_events: float = 0

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if not isinstance(value, int | float) or value < 0 or math.isnan(value):
                raise ValueError(f"Usage.{item.name} must be a non-negative number, got {value!r}")


#: Line item -> (label, [(Usage field, price key), ...]); the order is the table's.
LINE_ITEMS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "step_functions_standard": (
        "Step Functions Standard (transitions)",
        [("state_transitions", "step_functions_standard_state_transition")],
    ),
    "step_functions_express": (
        "Step Functions Express (requests + GB-s)",
        [
            ("express_requests", "step_functions_express_request"),
            ("express_gb_seconds", "step_functions_express_gb_second"),
        ],
    ),
    "lambda_requests": ("Lambda requests (arm64)", [("lambda_invocations", "lambda_arm64_request")]),
    "lambda_duration": ("Lambda duration (arm64 GB-s)", [("lambda_gb_seconds", "lambda_arm64_gb_second")]),
    "dynamodb_writes": (
        "DynamoDB on-demand writes",
        [("dynamodb_wru", "dynamodb_on_demand_write_request_unit")],
    ),
    "dynamodb_reads": (
        "DynamoDB on-demand reads",
        [("dynamodb_rru", "dynamodb_on_demand_read_request_unit")],
    ),
    "sqs": ("SQS standard requests", [("sqs_requests", "sqs_standard_request")]),
    "logs_state_machine": (
        "CloudWatch Logs: state machine, Level ALL",
        [("state_machine_log_gb", "cloudwatch_logs_ingestion_gb")],
    ),
    "logs_lambda": ("CloudWatch Logs: function logs", [("lambda_log_gb", "cloudwatch_logs_ingestion_gb")]),
    "xray": ("X-Ray traces recorded", [("xray_traces", "xray_trace_recorded")]),
    "secrets_manager": (
        "Secrets Manager GetSecretValue",
        [("secrets_manager_calls", "secrets_manager_api_call")],
    ),
    "eventbridge": ("EventBridge custom events", [("eventbridge_events", "eventbridge_custom_event")]),
}
#: Line items printed even when zero: what the design promises to pay for, so a zero is news.
ALWAYS_SHOWN = frozenset({"logs_state_machine", "logs_lambda", "xray", "secrets_manager", "eventbridge"})

#: What does not scale with orders, per month: item -> (label, price key).
MONTHLY_ITEMS: dict[str, tuple[str, str]] = {
    "scheduler": ("EventBridge Scheduler (the sweeper's runs)", "scheduler_invocation"),
    "secret": ("Secrets Manager (the secrets the stack reads)", "secrets_manager_secret_month"),
    # What one stack costs by existing (stack_monthly_quantities counts each from the template).
    "alarms": ("CloudWatch alarms", "cloudwatch_alarm_standard_month"),
    "dashboard": ("CloudWatch dashboard", "cloudwatch_dashboard_month"),
    "custom_metrics": ("CloudWatch custom metrics", "cloudwatch_custom_metric_month"),
    "kms_key": ("KMS keys (execution history, alarms)", "kms_customer_managed_key_month"),
    "pitr": ("DynamoDB point-in-time recovery", "dynamodb_pitr_gb_month"),
}
#: Monthly prices may exceed a dollar (a dashboard is $3): one unit is a month of a whole resource.
MONTHLY_PRICE_CEILING = 100
TOTAL = "total"

#: Every price key the line items read: prices.json must hold each of them.
PRICE_KEYS = frozenset(
    [key for _, parts in LINE_ITEMS.values() for _, key in parts] + [key for _, key in MONTHLY_ITEMS.values()]
)
#: Prices the docs read beside the line items: what SnapStart and provisioned concurrency would cost
#: (docs/performance.md, rendered by saga_local/harness/bench_figures.py). Checked as the others are
#: wherever a prices file holds them.
OPTION_PRICE_KEYS = frozenset(
    {
        "lambda_snapstart_cache_gb_second",
        "lambda_snapstart_restore_gb",
        "lambda_arm64_provisioned_concurrency_gb_second",
        "lambda_arm64_provisioned_duration_gb_second",
    }
)


def load_prices(path: Path = PRICES_PATH) -> dict[str, Any]:
    """Read and check a prices file (see ``prices.json`` for the shape)."""
    prices: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    check_prices(prices)
    return prices


def check_prices(prices: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming what is missing or wrong in a prices mapping."""
    for key in ("region", "currency", "retrieved", "prices"):
        if key not in prices:
            raise ValueError(f"prices: missing {key!r}")
    missing = PRICE_KEYS - set(prices["prices"])
    if missing:
        raise ValueError(f"prices: no price for {sorted(missing)}")
    monthly_keys = {key for _, key in MONTHLY_ITEMS.values()}
    for key in PRICE_KEYS | (OPTION_PRICE_KEYS & set(prices["prices"])):
        entry = prices["prices"][key]
        usd = entry.get("usd")
        ceiling = MONTHLY_PRICE_CEILING if key in monthly_keys else 1
        if not isinstance(usd, int | float) or isinstance(usd, bool) or not 0 < usd < ceiling:
            raise ValueError(f"prices: {key}.usd must be the price of one unit in USD, got {usd!r}")
        if not str(entry.get("source", "")).startswith("https://"):
            raise ValueError(f"prices: {key} has no source page")
        quoted = quoted_unit_price(str(entry.get("quoted", "")))
        if quoted is None or not math.isclose(usd, quoted, rel_tol=1e-9):
            raise ValueError(f"prices: {key}.usd {usd!r} disagrees with its quote {entry.get('quoted')!r}")


_QUOTE = re.compile(r"\$(?P<amount>\d+(?:\.\d+)?) per (?:(?P<per>1M|million|10,000|1,000) )?\S")
_PER = {None: 1, "1M": MILLION, "million": MILLION, "10,000": 10_000, "1,000": 1_000}


def quoted_unit_price(quoted: str) -> float | None:
    """The price of one unit in a quote such as ``$0.025 per 1,000 state transitions``, else None.

    The quote is what a person checks against the pricing page; ``usd`` is what the arithmetic uses:
    the two must agree, so that a slip of a factor of a thousand cannot hide in the data.
    """
    found = _QUOTE.match(quoted)
    if found is None:
        return None
    return float(found["amount"]) / _PER[found["per"]]


def cost_per_million(usage: Usage, prices: dict[str, Any]) -> dict[str, float]:
    """USD per million orders, by line item (keys of ``LINE_ITEMS``) and ``"total"``."""
    check_prices(prices)
    unit = prices["prices"]
    costs = {
        item: sum(getattr(usage, field) * unit[key]["usd"] for field, key in parts) * MILLION
        for item, (_, parts) in LINE_ITEMS.items()
    }
    costs[TOTAL] = sum(costs.values())
    return costs


#: The per-order figures printed under the costs, so that every number above can be traced.
USAGE_LABELS = {
    "state_transitions": "state transitions / order",
    "express_requests": "Express executions / order",
    "express_gb_seconds": "Express GB-s / order",
    "lambda_invocations": "Lambda invocations / order",
    "lambda_gb_seconds": "Lambda GB-s / order",
    "dynamodb_wru": "DynamoDB WRU / order",
    "dynamodb_rru": "DynamoDB RRU / order",
    "sqs_requests": "SQS requests / order",
    "state_machine_log_gb": "state machine log KB / order",
    "lambda_log_gb": "function log KB / order",
    "xray_traces": "X-Ray traces / order",
    "secrets_manager_calls": "GetSecretValue calls / order",
    "eventbridge_events": "EventBridge events / order",
}
#: Usage kept in GB, shown in KB (a few KB an order reads better than 0.0000031 GB).
_SHOWN_IN_KB = frozenset({"state_machine_log_gb", "lambda_log_gb"})
#: The table fits a terminal this wide, with ``wide=True`` too (its unit prices are wrapped to it).
NARROW_COLUMNS = 100
#: The share column: "share", or up to "100%".
_SHARE_WIDTH = 5


def _short_quote(quoted: str) -> str:
    """``$0.025 per 1,000 state transitions`` out of the quote's longer text."""
    return re.split(r" \(|, |; ", quoted, maxsplit=1)[0]


def monthly_costs(quantities: dict[str, float], prices: dict[str, Any]) -> dict[str, float]:
    """USD per month for what does not scale with orders: ``quantities`` (per month) by MONTHLY_ITEMS key."""
    check_prices(prices)
    return {item: quantities[item] * prices["prices"][MONTHLY_ITEMS[item][1]]["usd"] for item in quantities}


def stack_monthly_quantities(template: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """What one stack of ``template`` (defaults) pays for per month just by existing: item -> (quantity
    per month, how it is counted), for :func:`render_table`'s ``monthly`` and :func:`monthly_costs`.

    Counted from the template, not typed in: its alarms (standard resolution, one per metric each
    reads), dashboards, KMS keys
    (the alarm topic's, made when ``AlarmTopicName`` is empty, the default), the custom metrics of the
    dashboard's namespace (each name and dimension set is one metric, and every broken-down count
    also publishes its plain total, see ``handlers/runtime.py`` ``count``), and point-in-time recovery
    priced per GB of the claims table (its size grows with orders times ``ClaimRetentionDays``).
    """
    resources = template["Resources"]

    def of_type(type_name: str) -> dict[str, dict[str, Any]]:
        return {name: r for name, r in resources.items() if r["Type"] == type_name}

    conditions = template.get("Conditions") or {}
    defaults = {name: spec.get("Default") for name, spec in (template.get("Parameters") or {}).items()}

    def created(resource: dict[str, Any]) -> bool:
        # The template's conditions are Equals of a parameter and a literal: evaluated at the defaults.
        name = resource.get("Condition")
        if name is None:
            return True
        ((operator, (left, right)),) = conditions[name].items()
        return bool(operator == "Fn::Equals" and defaults.get(left.get("Ref")) == right)

    # CloudWatch prices an alarm per metric it reads: a metric math alarm is one alarm metric for each
    # metric in its expression (the expression itself is free).
    alarm_metrics = [
        sum(1 for query in r["Properties"].get("Metrics") or [] if "MetricStat" in query) or 1
        for r in of_type("AWS::CloudWatch::Alarm").values()
        if created(r)
    ]
    alarms, metered = len(alarm_metrics), sum(alarm_metrics)
    dashboards = of_type("AWS::CloudWatch::Dashboard")
    keys = sum(1 for r in of_type("AWS::KMS::Key").values() if created(r))
    metrics = _custom_metrics(template, dashboards)
    pitr = any(
        (r["Properties"].get("PointInTimeRecoverySpecification") or {}).get("PointInTimeRecoveryEnabled")
        for r in of_type("AWS::DynamoDB::Table").values()
    )
    quantities: dict[str, tuple[float, str]] = {
        "alarms": (
            float(metered),
            f"{alarms} alarms" if metered == alarms else f"{alarms} alarms, {metered} alarm metrics",
        ),
        "dashboard": (float(len(dashboards)), f"{len(dashboards)} dashboard"),
        "custom_metrics": (float(metrics), f"{metrics} metrics"),
        "kms_key": (float(keys), f"{keys} key" if keys == 1 else f"{keys} keys"),
    }
    if pitr:
        quantities["pitr"] = (1.0, "1 GB of claims")
    return quantities


def _custom_metrics(template: dict[str, Any], dashboards: dict[str, dict[str, Any]]) -> int:
    """The distinct custom metrics the dashboard shows, plus the plain totals of the broken-down ones."""
    namespace = template["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]
    own = namespace["Fn::Sub"] if isinstance(namespace, dict) else str(namespace)
    service = template["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
    found: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    for dashboard in dashboards.values():
        body = dashboard["Properties"]["DashboardBody"]
        text = body["Fn::Sub"] if isinstance(body, dict) else str(body)
        if isinstance(text, list):  # the list form: the string, then its variables
            text = str(text[0])
        # ${X} placeholders stay as they are: only the custom namespace's entries are read.
        for entry in re.findall(r"\[\s*\"" + re.escape(own) + r"\"[^\]]*\]", text):
            metric = json.loads(entry)
            options = metric[-1] if isinstance(metric[-1], dict) else {}
            parts = [part for part in metric if not isinstance(part, dict)]
            name, dimensions = parts[1], frozenset(zip(parts[2::2], parts[3::2], strict=True))
            found.add((name, dimensions))
            # count(name, Layer=...) also publishes the plain total; a reading (measure, shown by its
            # Maximum) is published broken down only.
            if len(dimensions) > 1 and options.get("stat", "Sum") == "Sum":
                found.add((name, frozenset({("service", service)})))
    return len(found)


def render_table(
    rows: dict[str, Usage],
    prices: dict[str, Any],
    *,
    legend: dict[str, str] | None = None,
    wide: bool = False,
    monthly: dict[str, tuple[float, str]] | None = None,
    notes: list[str] | None = None,
) -> str:
    """A plain-text table: one column per design (``rows``' keys), USD per million orders by line item,
    then the per-order usage each column was computed from.

    After the first design's column, ``share`` is each line's share of that design's per-order total
    (the first design is the one the others are compared with: the saga's happy path). ``legend``
    explains each column's short name (printed under the table). ``wide`` adds each line's unit
    price, in full, as a list under the table: the table keeps its width, so that ``--wide`` fits
    an 80-100 column terminal too. The table fits :data:`NARROW_COLUMNS` columns when the names do.
    ``monthly``: item -> (quantity per month, how it is counted), priced apart. ``notes``: the
    assumptions behind the figures, one line each. Line items that are zero in every column are
    left out, except :data:`ALWAYS_SHOWN`.
    """
    if not rows:
        raise ValueError("render_table: nothing to compare")
    names = list(rows)
    legend = legend or {}
    costs = {name: cost_per_million(usage, prices) for name, usage in rows.items()}
    shown = [item for item in LINE_ITEMS if item in ALWAYS_SHOWN or any(costs[name][item] for name in names)]
    used = [field for field in USAGE_LABELS if any(getattr(rows[name], field) for name in names)]
    width = max(9, *(len(name) for name in names))
    label_width = max(
        len("Total"), *(len(LINE_ITEMS[item][0]) for item in shown), *(len(USAGE_LABELS[f]) for f in used)
    )
    unit = prices["prices"]
    first = names[0]
    first_total = costs[first][TOTAL]

    def share(amount: float) -> str:
        if not first_total:
            return "-"
        ratio = amount / first_total
        # A line that costs something is never shown as 0% of the total.
        return "<1%" if 0 < ratio < 0.005 else f"{ratio:.0%}"

    def line(label: str, cells: list[str], share_cell: str = "") -> str:
        # The share sits right after the column it is a share of.
        columns = [f"{cells[0]:>{width}}", f"{share_cell:>{_SHARE_WIDTH}}"]
        columns += [f"{cell:>{width}}" for cell in cells[1:]]
        return (f"{label:<{label_width}}  " + "  ".join(columns)).rstrip()

    rule = "-" * (label_width + (width + 2) * len(names) + _SHARE_WIDTH + 2)
    out = [
        f"AWS cost per 1,000,000 orders, {prices['currency']}, {prices['region']}",
        f"(on-demand list prices of {prices['retrieved']}; free tiers left out)",
        "",
        line("", names, "share"),
        rule,
    ]
    for item in shown:
        cells = [f"{costs[name][item]:,.2f}" for name in names]
        out.append(line(LINE_ITEMS[item][0], cells, share(costs[first][item])))
    out.append(rule)
    out.append(line("Total", [f"{costs[name][TOTAL]:,.2f}" for name in names], share(first_total)))
    out.append("")
    for field in used:
        scale = 1024 * 1024 if field in _SHOWN_IN_KB else 1
        out.append(line(USAGE_LABELS[field], [_figure(getattr(rows[name], field) * scale) for name in names]))
    out.append("")
    out.append(f"{'share':>{width}}: each line's share of the {first} column's total")
    out += [f"{name:>{width}}: {text}" for name, text in legend.items() if name in rows]
    if wide:
        # Wrapped to the table's own width: what fits the table fits them.
        table_width = max(len(text) for text in out)
        out += ["", f"Unit prices ({prices['region']}, on-demand list prices of {prices['retrieved']}):"]
        for item in shown:
            quotes = "; ".join(unit[key]["quoted"] for _, key in LINE_ITEMS[item][1])
            out += textwrap.wrap(
                f"{LINE_ITEMS[item][0]}: {quotes}",
                width=table_width,
                initial_indent="  ",
                subsequent_indent="      ",
            )
    if monthly:
        amounts = monthly_costs({item: quantity for item, (quantity, _) in monthly.items()}, prices)
        out += ["", f"Per month, whatever the volume ({prices['currency']}):"]
        for item, (_, how) in monthly.items():
            label, key = MONTHLY_ITEMS[item]
            out.append(f"  {label}: {amounts[item]:,.2f}  ({how} x {_short_quote(unit[key]['quoted'])})")
        out.append(f"  Total per month: {sum(amounts.values()):,.2f}")
    if notes:
        out += ["", *notes]
    return "\n".join(out) + "\n"


def _figure(value: float) -> str:
    return f"{value:,.4f}".rstrip("0").rstrip(".") if value else "0"


def single_lambda_baseline_usage(
    *,
    duration_ms: float,
    memory_mb: int = 256,
    sqs_requests: float = 1.2,
    record_kb: float = 1.0,
    log_gb: float = 0.0,
    xray_traces: float = 0.0,
    secrets_manager_calls: float = 0.0,
) -> Usage:
    """What one order would use in the design the saga replaces: one Lambda, fed by SQS, whose handler
    is wrapped in Powertools' ``@idempotent`` (DynamoDB persistence) and calls the provider inside.

    Derivation, per order, happy path (every order charged once, no duplicate):

    * Lambda: 1 invocation, ``memory_mb / 1024 x ceil(duration_ms) / 1000`` GB-s. ``duration_ms`` should be
      the counted time of the claim, the charge and the completion together (one function does all three).
    * DynamoDB: Powertools writes the idempotency record twice, as its DynamoDB persistence layer does:
      ``PutItem`` (conditional: no record, or an expired one) to mark the key INPROGRESS, then
      ``UpdateItem`` to save the result as COMPLETED. Each write is ``ceil(record_kb)`` WRU (1 KB steps).
      No read: a conflicting ``PutItem`` returns the existing record itself
      (``ReturnValuesOnConditionCheckFailure``), so no ``GetItem`` on the happy path.
    * SQS: the same delivery as the saga's: ``sqs_requests`` (default: 1 send by the producer, plus one
      receive and one delete per batch of 10, = 1.2). Pass the counted figure to compare like with like.
    * No Step Functions.
    * Logs, traces, secret reads: passed in (``log_gb``, ``xray_traces``, ``secrets_manager_calls``), for
      the caller to derive from the saga's counted figures: the same application log lines, one
      invocation's platform lines, one trace per order, one function reading the secret.

    What it does not buy, and the saga does: a visible graph per order, Retry/Catch per step, release only
    on proof and a reconciliation path that a crash inside the handler cannot skip.
    """
    if duration_ms < 0 or memory_mb <= 0 or record_kb <= 0:
        raise ValueError("duration_ms must be >= 0, memory_mb and record_kb > 0")
    billed_seconds = math.ceil(duration_ms) / 1000
    return Usage(
        state_transitions=0,
        lambda_invocations=1,
        lambda_gb_seconds=memory_mb / 1024 * billed_seconds,
        dynamodb_wru=2 * math.ceil(record_kb),
        dynamodb_rru=0,
        sqs_requests=sqs_requests,
        lambda_log_gb=log_gb,
        xray_traces=xray_traces,
        secrets_manager_calls=secrets_manager_calls,
    )
