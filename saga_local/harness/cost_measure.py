"""Count what one order uses on the embedded stack, for ``saga cost``.

:func:`saga_local.harness.usage.measure_order_usage` counts transitions, invocations, durations, DynamoDB
and SQS; this adds what the bill has besides, each counted where a local run can count it:

* **CloudWatch Logs, functions**: the bytes the handlers write (Powertools JSON at the template's
  ``LogLevel``, and the EMF metric lines), plus Lambda's own ``START`` / ``END`` / ``REPORT`` lines
  (:data:`PLATFORM_LOG_BYTES` an invocation, X-Ray's trace id included).
* **CloudWatch Logs, state machine**: ``Level: ALL`` writes one log event per history event; with
  ``IncludeExecutionData: false`` it carries the event's type, ids, timestamps, the execution ARN
  and the details without inputs, outputs or parameters. Each event is rebuilt in that shape from
  the execution's history and its size counted (an estimate of the real record, field for field).
* **EventBridge**: ``PutEvents`` calls the functions make, and ``events`` tasks the state machine runs.

And what a local run cannot count, from an assumption the caller states:

* **X-Ray**: one trace per execution and one per start-function invocation, times the share of
  requests sampled (X-Ray's default rule records the first request each second, then 5%).
* **Secrets Manager**: Charge Payment reads the secret once per container (cold start); the share
  of its invocations that start cold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from saga_local.harness.usage import measure_order_usage

if TYPE_CHECKING:
    from saga_local.harness.cost import Usage
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.stripe_emulator.server import Endpoint

#: START (58 bytes), END (52) and REPORT with X-Ray's TraceId/SegmentId/Sampled (about 240): per invocation.
PLATFORM_LOG_BYTES = 350
#: X-Ray's default sampling rule, past its one-a-second reservoir.
DEFAULT_XRAY_SAMPLED = 0.05
#: Charge Payment invocations that start a new container (and read the secret): an assumption.
DEFAULT_COLD_START_SHARE = 0.01
GB = 1024**3
#: History fields that are execution data: left out of the log when IncludeExecutionData is false.
_DATA_FIELDS = frozenset({"input", "output", "parameters", "result"})
#: The functions whose cold start reads the provider's secret, per order.
_SECRET_READERS_PER_ORDER = frozenset({"ChargePaymentFunction"})


class ByteCounter(io.TextIOBase):
    """A text stream that keeps only the number of UTF-8 bytes written to it."""

    def __init__(self) -> None:
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.bytes += len(text.encode("utf-8"))
        return len(text)


def state_machine_log_bytes(history: list[dict[str, Any]], execution_arn: str) -> int:
    """Bytes Step Functions logs for ``history`` at ``Level: ALL`` without execution data."""
    total = 0
    for event in history:
        details: dict[str, Any] = {}
        for key, value in event.items():
            if key.endswith("EventDetails") and isinstance(value, dict):
                details = {k: v for k, v in value.items() if k not in _DATA_FIELDS}
        timestamp: Any = event.get("timestamp")
        record = {
            "id": str(event.get("id")),
            "type": event.get("type"),
            "details": details,
            "previous_event_id": str(event.get("previousEventId", 0)),
            "event_timestamp": str(int(timestamp.timestamp() * 1000))
            if hasattr(timestamp, "timestamp")
            else "",
            "execution_arn": execution_arn,
            "redrive_count": "0",
        }
        total += len(json.dumps(record, separators=(",", ":"), default=str).encode("utf-8")) + 1
    return total


def _published_events(calls: Counter[tuple[str, str]], history: list[dict[str, Any]]) -> int:
    # botocore names the EventBridge client's events "eventbridge.<Operation>".
    by_functions = sum(
        n for (_, call), n in calls.items() if call in ("events.PutEvents", "eventbridge.PutEvents")
    )
    by_state_machine = sum(
        1
        for event in history
        if event["type"] == "TaskScheduled"
        and (event.get("taskScheduledEventDetails") or {}).get("resourceType") == "events"
    )
    return by_functions + by_state_machine


def measure_order(
    stack: EmbeddedStack,
    body: dict[str, Any],
    *,
    xray_sampled: float = DEFAULT_XRAY_SAMPLED,
    cold_start_share: float = DEFAULT_COLD_START_SHARE,
) -> Usage:
    """One order through an in-process embedded stack, and everything it used (see the module doc)."""
    from handlers import runtime as handler_runtime

    runtime, driver = stack.runtime, stack.driver
    before_arns, before_records = set(driver.execution_arns()), len(runtime.records)
    before_calls = Counter(runtime.calls)
    counter = ByteCounter()
    # Powertools' handler holds the stream it was created with: point it at the counter meanwhile.
    log_handler: Any = handler_runtime.logger.registered_handler
    previous = log_handler.setStream(counter)
    try:
        with contextlib.redirect_stdout(counter):  # the EMF metric lines are printed
            base = measure_order_usage(stack, body)
    finally:
        log_handler.setStream(previous)
    (arn,) = set(driver.execution_arns()) - before_arns
    history = driver.history(arn)
    records = runtime.records[before_records:]
    starts = sum(1 for r in records if r.function == "StartExecutionFunction")
    secret_readers = sum(1 for r in records if r.function in _SECRET_READERS_PER_ORDER)
    usage: Usage = dataclasses.replace(
        base,
        state_machine_log_gb=state_machine_log_bytes(history, arn) / GB,
        lambda_log_gb=(counter.bytes + PLATFORM_LOG_BYTES * len(records)) / GB,
        xray_traces=(1 + starts) * xray_sampled,
        secrets_manager_calls=secret_readers * cold_start_share,
        eventbridge_events=_published_events(runtime.calls - before_calls, history),
    )
    return usage


def sweeps_per_month(schedule_expression: str, days: int = 30) -> float:
    """Runs a month of an EventBridge ``rate(N minutes|hours|days)`` schedule (``cron(...)``: ValueError)."""
    import re

    found = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", schedule_expression.strip())
    if found is None:
        raise ValueError(f"not a rate() expression: {schedule_expression!r}")
    minutes = int(found[1]) * {"minute": 1, "hour": 60, "day": 1440}[found[2].rstrip("s")]
    return days * 1440 / minutes


#: The Stripe API endpoints an order's path may call, as the emulator counts them.
STRIPE_ENDPOINTS: tuple[Endpoint, ...] = ("create", "retrieve", "search", "list", "cancel")


def stripe_requests(stack: EmbeddedStack, body: dict[str, Any], *, debit: bool = False) -> dict[str, int]:
    """Stripe API requests one order makes, by endpoint, on a stack that serves Stripe's webhooks.

    ``debit``: the order pays by bank debit (its confirm answers ``processing`` and settles later, as
    succeeded): the webhook consumer reads the PaymentIntent once per event that rings (``processing``
    and ``succeeded``). Stripe does not bill API requests; they count against its rate limits.
    """
    from saga_local.harness import simulate
    from saga_local.harness.chaos_sweep import wait_for_settlements

    provider = stack.provider
    before = {endpoint: provider.request_count(endpoint) for endpoint in STRIPE_ENDPOINTS}
    if debit:
        provider.force_outcome("processing", order_id=body["orderId"], times=1)
    stack.driver.send(body)
    simulate.settle(stack)
    wait_for_settlements(provider)
    simulate.settle(stack)
    return {endpoint: provider.request_count(endpoint) - n for endpoint, n in before.items()}
