"""What a million orders cost on AWS, from figures counted in a local run.

The usage side comes from counting, never from guessing: state transitions from the executions'
histories, invocations and durations from the runtime's records, DynamoDB request units from the
calls the stores made (see :class:`Usage`). The price side is data, in ``prices.json`` beside this
module (region, date, and the page each figure was read from). The arithmetic is one line per
service::

    cost per million orders = usage per order x unit price x 1,000,000

Free tiers are left out on purpose: this is the marginal cost of an order, which is what a design
choice changes. So is everything that does not scale with orders (alarms, dashboards, the KMS key,
log storage).
"""

from __future__ import annotations

import json
import math
import re
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
    """

    state_transitions: float
    lambda_invocations: float
    lambda_gb_seconds: float
    dynamodb_wru: float
    dynamodb_rru: float
    sqs_requests: float
    express_requests: float = 0
    express_gb_seconds: float = 0

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
}
TOTAL = "total"

#: Every price key the line items read: prices.json must hold each of them.
PRICE_KEYS = frozenset(key for _, parts in LINE_ITEMS.values() for _, key in parts)


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
    for key in PRICE_KEYS:
        entry = prices["prices"][key]
        usd = entry.get("usd")
        if not isinstance(usd, int | float) or isinstance(usd, bool) or not 0 < usd < 1:
            raise ValueError(f"prices: {key}.usd must be the price of one unit in USD, got {usd!r}")
        if not str(entry.get("source", "")).startswith("https://"):
            raise ValueError(f"prices: {key} has no source page")
        quoted = quoted_unit_price(str(entry.get("quoted", "")))
        if quoted is None or not math.isclose(usd, quoted, rel_tol=1e-9):
            raise ValueError(f"prices: {key}.usd {usd!r} disagrees with its quote {entry.get('quoted')!r}")


_QUOTE = re.compile(r"\$(?P<amount>\d+(?:\.\d+)?) per (?:(?P<per>1M|million|1,000) )?\S")
_PER = {None: 1, "1M": MILLION, "million": MILLION, "1,000": 1_000}


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
}


def render_table(rows: dict[str, Usage], prices: dict[str, Any]) -> str:
    """A plain-text table: one column per design (``rows``' keys), USD per million orders by line item,
    then the per-order usage each column was computed from. Line items that are zero in every column
    are left out."""
    if not rows:
        raise ValueError("render_table: nothing to compare")
    names = list(rows)
    costs = {name: cost_per_million(usage, prices) for name, usage in rows.items()}
    shown = [item for item in LINE_ITEMS if any(costs[name][item] for name in names)]
    width = max(len(name) for name in names)
    width = max(width, 12)
    label_width = max(
        len("Total"),
        *(len(LINE_ITEMS[item][0]) for item in shown),
        *(len(label) for label in USAGE_LABELS.values()),
    )

    def line(label: str, cells: list[str]) -> str:
        return f"{label:<{label_width}}  " + "  ".join(f"{cell:>{width}}" for cell in cells)

    rule = "-" * (label_width + (width + 2) * len(names))
    out = [
        f"AWS cost per 1,000,000 orders, {prices['currency']}, {prices['region']} "
        f"(on-demand list prices retrieved {prices['retrieved']}; free tiers left out)",
        "",
        line("", names),
        rule,
    ]
    for item in shown:
        out.append(line(LINE_ITEMS[item][0], [f"{costs[name][item]:,.2f}" for name in names]))
    out.append(rule)
    out.append(line("Total", [f"{costs[name][TOTAL]:,.2f}" for name in names]))
    out.append("")
    for field, label in USAGE_LABELS.items():
        values = [getattr(rows[name], field) for name in names]
        if any(values):
            out.append(line(label, [_figure(value) for value in values]))
    return "\n".join(out) + "\n"


def _figure(value: float) -> str:
    return f"{value:,.4f}".rstrip("0").rstrip(".") if value else "0"


def single_lambda_baseline_usage(
    *,
    duration_ms: float,
    memory_mb: int = 256,
    sqs_requests: float = 1.2,
    record_kb: float = 1.0,
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
    )
