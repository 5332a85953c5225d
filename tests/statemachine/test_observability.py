"""Invariant 9: each claim, duplicate, charge, release and conflict is a log event with orderId, and a metric.

And what must never be logged: a card number, the provider's secret key, a payment method token.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from saga_local.aws.stack import LOCAL_API_KEY
from tests.helpers import Saga, order
from tests.statemachine.observability_support import Captured, lines

CARD_NUMBER = re.compile(r"(?<!\d)(?:\d[ -]?){13,19}(?!\d)")
EMF_TIMESTAMP = re.compile(r'"Timestamp":\d+')
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def luhn_valid(digits: str) -> bool:
    """The check card numbers pass: what separates a PAN from any long run of digits."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char) * (2 if i % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def card_numbers(text: str) -> list[str]:
    """Luhn-valid runs of 13-19 digits (spaces or dashes allowed), ids and timestamps removed."""
    scrubbed = UUID.sub("", EMF_TIMESTAMP.sub("", text))
    found = (re.sub(r"[ -]", "", m.group()) for m in CARD_NUMBER.finditer(scrubbed))
    return [digits for digits in found if luhn_valid(digits)]


def events(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_event: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if "event" in record:
            by_event.setdefault(record["event"], []).append(record)
    return by_event


def metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for record in records:
        for directive in record.get("_aws", {}).get("CloudWatchMetrics", []):
            dims = {d for group in directive["Dimensions"] for d in group}
            for metric in directive["Metrics"]:
                name = metric["Name"] + (
                    "" if dims == {"service"} else "[" + ",".join(sorted(dims - {"service"})) + "]"
                )
                totals[name] = totals.get(name, 0) + sum(record[metric["Name"]])
    return totals


def run(saga: Saga, captured: Captured, *orders: tuple[dict[str, Any], str]) -> list[dict[str, Any]]:
    captured.clear()
    for body, name in orders:
        saga.driver.wait(saga.driver.start(body, name=name))
    return lines(captured.text())


def test_every_path_emits_its_events_with_order_id_and_its_metrics(saga: Saga, captured: Captured) -> None:
    records = run(
        saga,
        captured,
        (order(), "happy"),
        (order(), "duplicate"),
        (order("ORDER-DECLINED", paymentMethod="pm_card_chargeDeclined"), "declined"),
        (order(amount=1500), "conflict"),
    )

    seen = events(records)
    for name in (
        "claim_won",
        "charge_applied",
        "claim_completed",
        "skip_duplicate",
        "charge_declined",
        "claim_released",
        "order_conflict",
    ):
        assert name in seen, f"no {name} event"
        assert all(r.get("orderId") for r in seen[name]), f"{name} without orderId"
    assert {r["orderId"] for r in seen["charge_declined"]} == {"ORDER-DECLINED"}
    totals = metrics(records)
    assert totals["ClaimWon"] == 2
    assert totals["ChargeApplied"] == 1
    assert totals["ChargeDeclined"] == 1
    assert totals["ClaimReleased"] == 1
    assert totals["OrderConflict"] == 1
    assert totals["DuplicateSuppressed"] == 1
    assert totals["DuplicateSuppressed[Layer]"] == 1


def test_start_lambda_logs_rejections_and_envelope_duplicates(saga: Saga, captured: Captured) -> None:
    captured.clear()
    saga.driver.send("{not json")
    saga.driver.send(order("ORDER-OBS"))
    saga.driver.pump()
    records = lines(captured.text())

    seen = events(records)
    assert seen["message_rejected"][0]["reason"].startswith("body is not valid JSON")
    assert seen["execution_started"][0]["orderId"] == "ORDER-OBS"
    assert metrics(records)["MalformedMessage"] == 1


def test_no_log_line_carries_a_card_number_a_secret_or_a_payment_method_token(
    saga: Saga, captured: Captured
) -> None:
    captured.clear()
    # A hostile producer puts a card number where a field should be, and in an unknown field.
    saga.driver.send(json.dumps({**order("ORDER-PAN"), "amount": 4242424242424242}))
    saga.driver.send(json.dumps({**order("ORDER-PAN2"), "note": "4242 4242 4242 4242"}))
    saga.driver.send(order("ORDER-OK"))
    saga.driver.pump()
    saga.driver.wait(
        saga.driver.start(order("ORDER-DEC", paymentMethod="pm_card_chargeDeclined"), name="dec")
    )
    text = captured.text()

    assert text.strip(), "the handlers logged nothing: the check below would be vacuous"
    assert LOCAL_API_KEY not in text
    assert "pm_card" not in text
    assert card_numbers(text) == []


def test_the_card_number_check_would_see_one() -> None:
    line = (
        '{"message":"x","note":"4242 4242 4242 4242",'
        '"function_request_id":"9f6e0c2a-7704-1100-4753-807000000000"}'
    )
    assert card_numbers(line) == ["4242424242424242"]


# -- every logged event is counted ---------------------------------------------------------------

HANDLERS_DIR = Path(__file__).resolve().parents[2] / "functions" / "handlers"
LOG_LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def logged_event(node: ast.AST) -> str | None:
    """The event a statement logs: ``log_event("x")``, or ``logger.<level>(..., extra={"event": "x"})``,
    or the same at a level chosen at run time: ``getattr(logger, level)(..., extra={"event": ...})``."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return None
    call = node.value
    if isinstance(call.func, ast.Name) and call.func.id == "log_event":
        first = call.args[0]
        return str(first.value) if isinstance(first, ast.Constant) else "<dynamic>"
    at_a_level = isinstance(call.func, ast.Attribute) and call.func.attr in LOG_LEVELS
    at_any_level = (
        isinstance(call.func, ast.Call)
        and isinstance(call.func.func, ast.Name)
        and call.func.func.id == "getattr"
        and isinstance(call.func.args[0], ast.Name)
        and call.func.args[0].id == "logger"
    )
    if at_a_level or at_any_level:
        for keyword in call.keywords:
            if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "event":
                        return str(value.value) if isinstance(value, ast.Constant) else "<dynamic>"
    return None


def counts_a_metric(node: ast.AST) -> bool:
    """A statement that counts: ``count(...)``, or a loop whose body does (one per extra charge)."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return isinstance(node.value.func, ast.Name) and node.value.func.id == "count"
    if isinstance(node, ast.For):
        return any(counts_a_metric(child) for child in node.body)
    return False


def uncounted_events(source: str) -> list[tuple[int, str]]:
    """(line, event) of every log event whose branch (the statement list it is in) counts no metric."""
    found = []
    for node in ast.walk(ast.parse(source)):
        blocks = [getattr(node, field, None) for field in ("body", "orelse", "finalbody")]
        for block in blocks:
            if not isinstance(block, list):
                continue
            counted = any(counts_a_metric(statement) for statement in block)
            for statement in block:
                event = logged_event(statement)
                if event is not None and not counted:
                    found.append((statement.lineno, event))
    return sorted(found)


def test_every_event_a_handler_logs_is_counted_in_the_same_branch() -> None:
    """Invariant 9: a log line and a metric. A log line alone shows in no dashboard and no alarm."""
    missing = [
        f"{path.name}:{line} {event}"
        for path in sorted(HANDLERS_DIR.glob("*.py"))
        if path.name != "runtime.py"  # where log_event and count themselves are defined
        for line, event in uncounted_events(path.read_text(encoding="utf-8"))
    ]
    assert len(list(HANDLERS_DIR.glob("*.py"))) > 5, "no handlers found: the check would be vacuous"
    assert missing == []


def test_the_check_sees_an_event_logged_without_its_metric() -> None:
    source = (
        "def handler(event, context):\n"
        "    try:\n"
        "        charge()\n"
        "    except ClaimLost as exc:\n"
        '        logger.error("charge_refused", extra={"event": "charge_refused"})\n'
        "        raise\n"
        "    if event:\n"
        '        log_event("claim_fenced", reason="x")\n'
        '        return {"released": False}\n'
        '    log_event("claim_released")\n'
        '    count("ClaimReleased")\n'
        "    for line in lines:\n"
        '        getattr(logger, line.level)(line.event, extra={"event": line.event})\n'
    )
    assert uncounted_events(source) == [(5, "charge_refused"), (8, "claim_fenced"), (13, "<dynamic>")]
