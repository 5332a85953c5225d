"""Time, injectable. Every domain function takes a ``Clock`` so tests move time instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

#: Seconds since the epoch, UTC. ``time.time`` in production; a settable fake in tests.
Clock = Callable[[], float]

system_clock: Clock = time.time


def iso_utc(epoch_seconds: float) -> str:
    """``2026-11-30T04:15:00Z``: fixed width, so DynamoDB's byte-wise string order is time order."""
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
