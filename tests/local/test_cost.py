"""The cost arithmetic and the prices file it reads (``saga_local/harness/cost.py`` and ``prices.json``)."""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import pytest

from saga_local.harness.cost import (
    ALWAYS_SHOWN,
    LINE_ITEMS,
    NARROW_COLUMNS,
    OPTION_PRICE_KEYS,
    PRICE_KEYS,
    PRICES_PATH,
    TOTAL,
    Usage,
    check_prices,
    cost_per_million,
    load_prices,
    monthly_costs,
    quoted_unit_price,
    render_table,
    single_lambda_baseline_usage,
    stack_monthly_quantities,
)
from saga_local.harness.cost_measure import state_machine_log_bytes, sweeps_per_month
from saga_local.template import load_template

#: A saga order as a local run might count it: 8 transitions, 4 Lambdas of 256 MB and ~100 ms each,
#: 3 writes and one strongly consistent read, 1 send + batched receive and delete.
SAGA = Usage(
    state_transitions=8,
    lambda_invocations=4,
    lambda_gb_seconds=0.1,
    dynamodb_wru=3,
    dynamodb_rru=1,
    sqs_requests=1.2,
)


@pytest.fixture(scope="module")
def prices() -> dict[str, Any]:
    return load_prices()


def round_prices() -> dict[str, Any]:
    """Prices of 1, 2, 3... micro-dollars, so that expected costs can be worked out by hand."""
    return {
        "region": "test-region",
        "currency": "USD",
        "retrieved": "2026-01-01",
        "prices": {
            key: {
                "usd": (index + 1) / 1_000_000,
                "unit": "unit",
                "quoted": f"${index + 1} per 1M units",
                "source": "https://example.com/",
            }
            for index, key in enumerate(sorted(PRICE_KEYS))
        },
    }


# -- arithmetic ------------------------------------------------------------------------------------


def test_each_line_item_is_usage_times_price_times_a_million() -> None:
    prices = round_prices()
    per_unit = {key: entry["usd"] * 1_000_000 for key, entry in prices["prices"].items()}
    usage = Usage(
        state_transitions=2,
        lambda_invocations=3,
        lambda_gb_seconds=5,
        dynamodb_wru=7,
        dynamodb_rru=11,
        sqs_requests=13,
        express_requests=17,
        express_gb_seconds=19,
        state_machine_log_gb=23,
        lambda_log_gb=29,
        xray_traces=31,
        secrets_manager_calls=37,
        eventbridge_events=41,
    )

    costs = cost_per_million(usage, prices)

    assert costs["step_functions_standard"] == pytest.approx(
        2 * per_unit["step_functions_standard_state_transition"]
    )
    assert costs["step_functions_express"] == pytest.approx(
        17 * per_unit["step_functions_express_request"] + 19 * per_unit["step_functions_express_gb_second"]
    )
    assert costs["lambda_requests"] == pytest.approx(3 * per_unit["lambda_arm64_request"])
    assert costs["lambda_duration"] == pytest.approx(5 * per_unit["lambda_arm64_gb_second"])
    assert costs["dynamodb_writes"] == pytest.approx(7 * per_unit["dynamodb_on_demand_write_request_unit"])
    assert costs["dynamodb_reads"] == pytest.approx(11 * per_unit["dynamodb_on_demand_read_request_unit"])
    assert costs["sqs"] == pytest.approx(13 * per_unit["sqs_standard_request"])
    assert costs["logs_state_machine"] == pytest.approx(23 * per_unit["cloudwatch_logs_ingestion_gb"])
    assert costs["logs_lambda"] == pytest.approx(29 * per_unit["cloudwatch_logs_ingestion_gb"])
    assert costs["xray"] == pytest.approx(31 * per_unit["xray_trace_recorded"])
    assert costs["secrets_manager"] == pytest.approx(37 * per_unit["secrets_manager_api_call"])
    assert costs["eventbridge"] == pytest.approx(41 * per_unit["eventbridge_custom_event"])
    assert set(costs) == {*LINE_ITEMS, TOTAL}
    assert costs[TOTAL] == pytest.approx(sum(value for key, value in costs.items() if key != TOTAL))


def test_a_counted_saga_order_at_list_prices(prices: dict[str, Any]) -> None:
    """Worked by hand from prices.json: 8 x $25 + 4 x $0.20 + 0.1 x $13.3334 + 3 x $0.625 + $0.125
    + 1.2 x $0.40 per million orders."""
    costs = cost_per_million(SAGA, prices)

    assert costs["step_functions_standard"] == pytest.approx(200.0)
    assert costs["lambda_requests"] == pytest.approx(0.8)
    assert costs["lambda_duration"] == pytest.approx(1.33334)
    assert costs["dynamodb_writes"] == pytest.approx(1.875)
    assert costs["dynamodb_reads"] == pytest.approx(0.125)
    assert costs["sqs"] == pytest.approx(0.48)
    assert costs["step_functions_express"] == 0
    assert costs[TOTAL] == pytest.approx(204.61334)


def test_the_single_lambda_baseline_is_one_invocation_and_two_idempotency_writes() -> None:
    usage = single_lambda_baseline_usage(duration_ms=120.2, memory_mb=256)

    assert usage.lambda_invocations == 1
    # Billed duration rounds up to the millisecond: 121 ms at 0.25 GB.
    assert usage.lambda_gb_seconds == pytest.approx(0.25 * 0.121)
    assert usage.dynamodb_wru == 2  # PutItem INPROGRESS, UpdateItem COMPLETED
    assert usage.dynamodb_rru == 0
    assert usage.state_transitions == 0
    assert usage.sqs_requests == pytest.approx(1.2)


def test_a_larger_idempotency_record_costs_a_write_unit_per_started_kilobyte() -> None:
    assert single_lambda_baseline_usage(duration_ms=100, record_kb=1.5).dynamodb_wru == 4


def test_state_transitions_dominate_the_saga_against_the_baseline(prices: dict[str, Any]) -> None:
    baseline = cost_per_million(single_lambda_baseline_usage(duration_ms=400, sqs_requests=1.2), prices)
    saga = cost_per_million(SAGA, prices)

    assert saga[TOTAL] > baseline[TOTAL]
    assert saga["step_functions_standard"] > 0.9 * (saga[TOTAL] - baseline[TOTAL])


@pytest.mark.parametrize("field", ["state_transitions", "lambda_gb_seconds", "sqs_requests"])
def test_usage_refuses_negative_or_missing_figures(field: str) -> None:
    figures: dict[str, Any] = {
        "state_transitions": 1,
        "lambda_invocations": 1,
        "lambda_gb_seconds": 1,
        "dynamodb_wru": 1,
        "dynamodb_rru": 1,
        "sqs_requests": 1,
    }
    with pytest.raises(ValueError, match=field):
        Usage(**{**figures, field: -1})
    with pytest.raises(ValueError, match=field):
        Usage(**{**figures, field: float("nan")})


# -- the table -------------------------------------------------------------------------------------


def test_the_table_compares_designs_and_shows_the_figures_behind_them(prices: dict[str, Any]) -> None:
    baseline = single_lambda_baseline_usage(duration_ms=400)

    table = render_table({"saga (counted)": SAGA, "single Lambda": baseline}, prices)

    lines = table.splitlines()
    assert "us-east-1" in lines[0]
    assert prices["retrieved"] in lines[1]
    assert "saga (counted)" in lines[3]
    assert "single Lambda" in lines[3]
    total = next(line for line in lines if line.startswith("Total"))
    assert total.split()[1:] == [  # each design's total, and the share column of the first
        f"{cost_per_million(SAGA, prices)[TOTAL]:,.2f}",
        "100%",
        f"{cost_per_million(baseline, prices)[TOTAL]:,.2f}",
    ]
    assert "Express" not in table, "a line item that is zero everywhere is left out"
    for item in ALWAYS_SHOWN:  # ... except what the design pays for even where nothing was counted
        assert LINE_ITEMS[item][0] in table
    transitions = next(line for line in lines if line.startswith("state transitions / order"))
    assert transitions.split()[-2:] == ["8", "0"]


#: What `saga cost` compares: four designs under short names, explained in a legend.
LEGEND = {
    "happy": "the saga, happy path (one delivery, charged)",
    "duplicate": "the saga, a duplicate delivery (suppressed by the claim)",
    "mix 10%": "the saga, 10% of orders delivered twice",
    "1 Lambda": "one Lambda + Powertools idempotency, no Step Functions (what it would replace)",
}
EVERYTHING = Usage(
    state_transitions=5.3,
    lambda_invocations=4.2,
    lambda_gb_seconds=0.0375,
    dynamodb_wru=2.1,
    dynamodb_rru=1,
    sqs_requests=1.32,
    state_machine_log_gb=7.3 / 1024 / 1024,
    lambda_log_gb=4.4 / 1024 / 1024,
    xray_traces=0.11,
    secrets_manager_calls=0.01,
    eventbridge_events=1.1,
)
MONTHLY = {"scheduler": (8640.0, "8,640 runs"), "secret": (1.0, "1 secret")}


def test_the_default_table_fits_a_100_column_terminal(prices: dict[str, Any]) -> None:
    rows = dict.fromkeys(LEGEND, EVERYTHING)

    table = render_table(rows, prices, legend=LEGEND, monthly=MONTHLY, notes=["Assumed: something."])

    widest = max(table.splitlines(), key=len)
    assert len(widest) <= NARROW_COLUMNS, widest
    assert "1 Lambda: one Lambda + Powertools idempotency" in table  # the legend explains short names


def test_wide_lists_each_line_s_full_unit_price_and_still_fits_the_terminal(prices: dict[str, Any]) -> None:
    rows = dict.fromkeys(LEGEND, EVERYTHING)

    table = render_table(rows, prices, legend=LEGEND, wide=True, monthly=MONTHLY, notes=["Assumed: x."])

    widest = max(table.splitlines(), key=len)
    assert len(widest) <= NARROW_COLUMNS, widest
    unwrapped = " ".join(line.strip() for line in table.splitlines())
    assert "Step Functions Standard (transitions): $0.025 per 1,000 state transitions" in table
    assert prices["prices"]["xray_trace_recorded"]["quoted"] in unwrapped  # in full, wrapped
    assert "the saga, a duplicate delivery (suppressed by the claim)" in table  # the legend


def test_the_share_column_gives_each_line_s_share_of_the_first_design_s_total(prices: dict[str, Any]) -> None:
    baseline = single_lambda_baseline_usage(duration_ms=400)
    costs = cost_per_million(EVERYTHING, prices)

    table = render_table({"happy": EVERYTHING, "1 Lambda": baseline}, prices, legend=LEGEND)

    lines = table.splitlines()
    assert lines[3].split() == ["happy", "share", "1", "Lambda"]
    standard = next(line for line in lines if line.startswith("Step Functions Standard"))
    assert standard.split()[-3:] == [
        f"{costs['step_functions_standard']:,.2f}",
        f"{costs['step_functions_standard'] / costs[TOTAL]:.0%}",
        "0.00",
    ]
    reads = next(line for line in lines if line.startswith("DynamoDB on-demand reads"))
    assert reads.split()[-2] == "<1%", "a line that costs something is never 0%"
    total = next(line for line in lines if line.startswith("Total"))
    assert total.split()[-2] == "100%"
    assert "share: each line's share of the happy column's total" in table


def test_logs_traces_secrets_and_events_are_each_a_priced_line(prices: dict[str, Any]) -> None:
    """$0.50 per GB, $5 per million traces, $0.05 per 10,000 calls, $1 per million events."""
    costs = cost_per_million(EVERYTHING, prices)

    assert costs["logs_state_machine"] == pytest.approx(7.3 / 1024 / 1024 * 0.5 * 1_000_000)
    assert costs["logs_lambda"] == pytest.approx(4.4 / 1024 / 1024 * 0.5 * 1_000_000)
    assert costs["xray"] == pytest.approx(0.11 * 5)
    assert costs["secrets_manager"] == pytest.approx(0.01 * 5)
    assert costs["eventbridge"] == pytest.approx(1.1)
    table = render_table({"saga": EVERYTHING}, prices)
    for label in (
        "CloudWatch Logs: state machine",
        "CloudWatch Logs: function logs",
        "X-Ray",
        "Secrets Manager",
    ):
        assert label in table
    assert "EventBridge custom events" in table


def test_what_does_not_scale_with_orders_is_priced_per_month(prices: dict[str, Any]) -> None:
    amounts = monthly_costs({"scheduler": sweeps_per_month("rate(5 minutes)"), "secret": 1}, prices)

    assert amounts["scheduler"] == pytest.approx(8640 * 0.000001)
    assert amounts["secret"] == pytest.approx(0.40)
    table = render_table({"saga": EVERYTHING}, prices, monthly=MONTHLY)
    assert "EventBridge Scheduler (the sweeper's runs): 0.01" in table
    assert "Secrets Manager (the secrets the stack reads): 0.40" in table


def test_what_the_stack_costs_by_existing_is_counted_from_its_template(prices: dict[str, Any]) -> None:
    """Alarms, the dashboard, the two keys, custom metrics, PITR: a month of one stack."""
    template = load_template()
    alarms = [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]

    quantities = stack_monthly_quantities(template)
    amounts = monthly_costs({item: quantity for item, (quantity, _) in quantities.items()}, prices)

    # CloudWatch prices a metric math alarm per metric its expression reads (the webhook silence
    # alarm: charges and deliveries, two); any other alarm is one alarm metric.
    metered = sum(max(1, sum("MetricStat" in q for q in r["Properties"].get("Metrics", []))) for r in alarms)
    assert len(alarms) >= 20
    assert metered == len(alarms) + 1  # the silence alarm reads two metrics
    assert quantities["alarms"][0] == metered
    assert amounts["alarms"] == pytest.approx(0.10 * metered)
    assert amounts["dashboard"] == pytest.approx(3.00)
    # The state machine's key, and the alarm topic's (AlarmTopicName empty, the default: the stack's topic).
    assert amounts["kms_key"] == pytest.approx(2.00)
    assert amounts["pitr"] == pytest.approx(0.20)  # per GB of the claims table
    # Every metric the dashboard shows in the stack's namespace is one, and more: the plain totals.
    assert quantities["custom_metrics"][0] > 30
    assert amounts["custom_metrics"] == pytest.approx(0.30 * quantities["custom_metrics"][0])
    table = render_table({"saga": EVERYTHING}, prices, monthly={**MONTHLY, **quantities})
    assert (
        f"CloudWatch alarms: {0.10 * metered:.2f}  ({len(alarms)} alarms, {metered} alarm metrics x $0.10"
        " per alarm metric" in table
    )
    assert "CloudWatch dashboard: 3.00" in table
    assert "KMS keys (execution history, alarms): 2.00" in table


def test_a_stack_that_notifies_a_topic_of_its_own_pays_for_the_state_machines_key_only() -> None:
    template = copy.deepcopy(load_template())
    template["Parameters"]["AlarmTopicName"]["Default"] = "on-call"

    assert stack_monthly_quantities(template)["kms_key"][0] == 1


@pytest.mark.parametrize(
    ("expression", "runs"),
    [("rate(5 minutes)", 8640), ("rate(1 hour)", 720), ("rate(2 days)", 15)],
)
def test_a_schedule_s_runs_per_month(expression: str, runs: float) -> None:
    assert sweeps_per_month(expression) == runs


def test_the_state_machine_log_leaves_execution_data_out() -> None:
    """IncludeExecutionData is false: an input of any size adds nothing to the log."""
    arn = "arn:aws:states:us-east-1:123456789012:execution:sm:e"

    def history(payload: str) -> list[dict[str, Any]]:
        return [
            {
                "id": 1,
                "type": "ExecutionStarted",
                "previousEventId": 0,
                "executionStartedEventDetails": {"input": payload, "roleArn": "arn:aws:iam::1:role/r"},
            }
        ]

    small, large = (
        state_machine_log_bytes(history("{}"), arn),
        state_machine_log_bytes(history("x" * 5000), arn),
    )

    assert small == large
    assert small > len(arn)  # each record names the execution
    assert small < 400


def test_the_table_needs_something_to_compare(prices: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="nothing"):
        render_table({}, prices)


# -- the prices file -------------------------------------------------------------------------------


def test_the_prices_file_names_its_region_currency_and_date(prices: dict[str, Any]) -> None:
    assert prices["region"] == "us-east-1"
    assert prices["currency"] == "USD"
    retrieved = dt.date.fromisoformat(prices["retrieved"])
    assert dt.date(2024, 11, 1) <= retrieved, "older than DynamoDB's on-demand price cut"


def test_every_price_has_a_unit_a_quote_and_a_source_page(prices: dict[str, Any]) -> None:
    wanted = PRICE_KEYS | OPTION_PRICE_KEYS
    assert set(prices["prices"]) == wanted, "a price nothing reads, or a line item without a price"
    for key, entry in prices["prices"].items():
        assert set(entry) <= {"usd", "unit", "quoted", "source", "read_from"}, key
        assert entry["unit"], key
        assert entry["source"].startswith("https://aws.amazon.com/"), f"{key}: cite the official pricing page"
        assert entry.get("read_from", "https://").startswith("https://"), key


@pytest.mark.parametrize(
    ("quoted", "unit_price"),
    [
        ("$0.025 per 1,000 state transitions", 0.000025),
        ("$1.00 per 1M requests", 0.000001),
        ("$0.625 per million write request units", 0.000000625),
        ("$0.0000133334 per GB-second, Arm", 0.0000133334),
        ("$0.05 per 10,000 API calls", 0.000005),
        ("$0.50 per GB ingested", 0.5),
        ("about twenty cents", None),
    ],
)
def test_a_quote_reads_as_the_price_of_one_unit(quoted: str, unit_price: float | None) -> None:
    found = quoted_unit_price(quoted)
    assert found == (None if unit_price is None else pytest.approx(unit_price, rel=1e-12))


def test_the_prices_file_is_the_one_the_module_reads() -> None:
    assert json.loads(PRICES_PATH.read_text(encoding="utf-8")) == load_prices()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.pop("retrieved"), "retrieved"),
        (lambda p: p["prices"].pop("sqs_standard_request"), "sqs_standard_request"),
        (lambda p: p["prices"]["lambda_arm64_request"].update(usd=0), "lambda_arm64_request"),
        (lambda p: p["prices"]["lambda_arm64_request"].update(usd="0.2"), "lambda_arm64_request"),
        (lambda p: p["prices"]["lambda_arm64_request"].update(usd=0.20), "disagrees with its quote"),
        (lambda p: p["prices"]["dynamodb_on_demand_read_request_unit"].pop("source"), "no source"),
    ],
)
def test_a_damaged_prices_file_is_refused(prices: dict[str, Any], damage: Any, message: str) -> None:
    broken = copy.deepcopy(prices)
    damage(broken)
    with pytest.raises(ValueError, match=message):
        check_prices(broken)
