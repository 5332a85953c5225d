"""The smallest handler that still carries Powertools' Logger, Metrics and Tracer: the baseline that
``bench/cold_start.py`` compares every saga handler with (what the saga costs on top of Powertools)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer

logger = Logger()
tracer = Tracer()
metrics = Metrics()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Return the event's keys: enough to run the decorators, nothing more."""
    return {"keys": sorted(event)}
