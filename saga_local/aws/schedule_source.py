"""The template's schedules, run locally: EventBridge Scheduler invoking a function every so often.

``template.yaml`` gives the sweeper a ``ScheduleV2`` event (``rate(5 minutes)``) with an ``Input``
holding Scheduler's placeholders (``<aws.scheduler.scheduled-time>``...). moto creates no schedule
that fires, so without this nothing sweeps under `saga up`: a stale claim stays ``CLAIMED`` until
someone runs ``saga reconcile --apply``. :class:`ScheduleSource` invokes the function through the
Lambda API, as Scheduler does, with the Input's placeholders filled in, every ``interval`` seconds.

The interval is compressed like the queues' visibility timeout (`saga up` runs the orders queue at
30 s for the template's 180 s, so a ``rate(5 minutes)`` schedule fires every 50 s): the waits of a
local run are shortened in the same proportion. What a sweep decides is not: a claim is stale only
once its lease (``ClaimLeaseSeconds``) has run out, and released on a search that found nothing only
``CLAIM_SEARCH_GRACE_SECONDS`` after that, in real time, as deployed.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.template import FunctionSpec

_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


def rate_seconds(expression: str) -> float:
    """Seconds between runs of an EventBridge ``rate(N unit)`` expression (``cron(...)``: ValueError)."""
    found = _RATE.fullmatch(expression.strip())
    if found is None:
        raise ValueError(f"not a rate() expression: {expression!r}")
    return int(found[1]) * _UNIT_SECONDS[found[2].rstrip("s")]


@dataclass(frozen=True)
class Schedule:
    """One ``ScheduleV2`` (or ``Schedule``) event of a function in the template."""

    logical_id: str
    event_name: str
    expression: str
    input: str

    @property
    def seconds(self) -> float:
        return rate_seconds(self.expression)


def schedules(specs: dict[str, FunctionSpec]) -> list[Schedule]:
    """Every scheduled event of the template's functions."""
    found = []
    for logical_id, spec in specs.items():
        for name, event in spec.events.items():
            if event.get("Type") in ("ScheduleV2", "Schedule"):
                properties = event.get("Properties", {})
                found.append(
                    Schedule(
                        logical_id=logical_id,
                        event_name=name,
                        expression=str(properties["ScheduleExpression"]),
                        input=str(properties.get("Input") or "{}"),
                    )
                )
    return found


def schedule_names(schedules: list[Schedule]) -> list[str]:
    """A name for each schedule, as people read them: its function's logical id for the function's first
    (the sweeper's sweep), ``LogicalId/EventName`` for any other (its hourly settlement check)."""
    seen: set[str] = set()
    names = []
    for schedule in schedules:
        first = schedule.logical_id not in seen
        seen.add(schedule.logical_id)
        names.append(schedule.logical_id if first else f"{schedule.logical_id}/{schedule.event_name}")
    return names


@dataclass
class ScheduleSource:
    """Invokes ``function_name`` every ``interval`` seconds with the schedule's Input, until stopped."""

    lambda_client: Any
    function_name: str
    schedule: Schedule
    interval: float
    clock: Callable[[], float] = time.time
    #: Invocations made, and those whose function failed (the sweeper raises after a claim it could
    #: not resolve: its Errors metric pages; here, the function's own logs say which).
    ticks: int = 0
    errors: int = 0
    last_result: dict[str, Any] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self) -> bytes:
        """The Input with Scheduler's placeholders filled in, as Scheduler sends it."""
        scheduled = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = (
            self.schedule.input.replace("<aws.scheduler.scheduled-time>", scheduled)
            .replace("<aws.scheduler.schedule-arn>", f"local:schedule/{self.schedule.event_name}")
            .replace("<aws.scheduler.execution-id>", str(uuid.uuid4()))
        )
        json.loads(text)  # the template's Input is JSON: a broken one fails here, not in the function
        return text.encode()

    def tick(self) -> dict[str, Any] | None:
        """One scheduled run; its result (the function's payload), or None if it failed."""
        with self._lock:
            self.ticks += 1
            response = self.lambda_client.invoke(FunctionName=self.function_name, Payload=self.event())
            payload = response["Payload"].read()
            if response.get("FunctionError"):
                self.errors += 1
                return None
            result = json.loads(payload or b"null")
            self.last_result = result if isinstance(result, dict) else {"result": result}
            return self.last_result

    def run(self, stop: threading.Event) -> None:
        """Tick every ``interval`` seconds (the first after one interval, as a new schedule does)."""
        while not stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - Scheduler retries and moves on; so does the next tick
                with self._lock:
                    self.errors += 1
