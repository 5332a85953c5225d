"""The functions' log events, merged in time, as ``sam logs`` shows them (``saga logs``).

Locally, `saga up` writes each function's output to ``.saga/logs/<LogicalId>.log`` (Powertools' JSON
lines, one per log event, and its EMF metric lines); against a deployed stack (``--stack NAME``) the
same lines are in CloudWatch Logs, in each function's log group as template.yaml names it
(``/aws/lambda/<stack>-<LogicalId>``). Either way a line is one log event; this module picks them
by function, by ``orderId`` (every event the saga logs about an order carries it) and by a piece of
text, and renders each on one line: when, which function, the level, the event, the order, the rest.
``--tail`` keeps reading, as ``sam logs --tail`` does. The EMF lines (the metrics) are left out
unless asked for: they repeat what the log event next to them says.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from saga_local.template import functions, load_template

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path

#: Keys every Powertools line carries: shown in the columns, or not worth a column.
_COMMON = frozenset(
    {
        "level",
        "location",
        "message",
        "timestamp",
        "service",
        "cold_start",
        "function_name",
        "function_memory_size",
        "function_arn",
        "function_request_id",
        "orderId",
        "event",
        "xray_trace_id",
    }
)


class LogsError(Exception):
    """A request ``saga logs`` cannot serve (an unknown function), in words."""


@dataclass(frozen=True)
class LogLine:
    """One line of a function's log: its JSON, if it is JSON, and when it was written."""

    function: str
    text: str
    at: float

    @property
    def record(self) -> dict[str, Any] | None:
        try:
            parsed = json.loads(self.text)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None

    @property
    def is_metric(self) -> bool:
        record = self.record
        return record is not None and "_aws" in record

    @property
    def order_id(self) -> str | None:
        record = self.record
        value = record.get("orderId") if record else None
        return str(value) if value is not None else None

    def matches(self, *, order_id: str | None, text: str | None, metrics: bool) -> bool:
        if self.is_metric and not metrics:
            return False
        if order_id is not None and self.order_id != order_id:
            return False
        return text is None or text.lower() in self.text.lower()

    def render(self) -> str:
        """One line for a person: time, function, level, event, order, then the event's own fields."""
        stamp = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
        record = self.record
        if record is None:
            return f"{stamp}  {self.function:<24}  {self.text.rstrip()}"
        if "_aws" in record:
            names = [
                m["Name"] for d in record["_aws"].get("CloudWatchMetrics", []) for m in d.get("Metrics", [])
            ]
            return f"{stamp}  {self.function:<24}  METRIC   {', '.join(names)}"
        level = str(record.get("level", ""))
        event = str(record.get("event") or record.get("message", ""))
        order = str(record.get("orderId") or "-")
        rest = " ".join(f"{k}={_value(v)}" for k, v in record.items() if k not in _COMMON)
        return f"{stamp}  {self.function:<24}  {level:<7}  {event:<24}  {order:<20}  {rest}".rstrip()


def _value(value: Any) -> str:
    if isinstance(value, str):
        # An execution's ARN is long and the same but for its name, which `saga trace` takes.
        return value.rsplit(":", 1)[1] if value.startswith("arn:") and ":execution:" in value else value
    return json.dumps(value, separators=(",", ":"))


def _when(text: str, fallback: float) -> float:
    """A Powertools line's ``timestamp`` (``2026-12-01 15:56:45,589+0000``), else an EMF line's."""
    try:
        record = json.loads(text)
    except ValueError:
        return fallback
    if not isinstance(record, dict):
        return fallback
    stamp = record.get("timestamp")
    if isinstance(stamp, str):
        try:
            return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f%z").timestamp()
        except ValueError:
            pass
    emf = (record.get("_aws") or {}).get("Timestamp")
    return emf / 1000 if isinstance(emf, int | float) else fallback


def function_ids() -> list[str]:
    """The template's functions' logical ids."""
    return sorted(functions(load_template()))


def resolve_functions(names: Iterable[str]) -> list[str]:
    """Logical ids for what a person typed: ``ClaimOrderFunction``, ``ClaimOrder`` or ``claimorder``."""
    known = function_ids()
    by_name = {k.lower(): k for k in known} | {k.lower().removesuffix("function"): k for k in known}
    chosen = []
    for name in names:
        found = by_name.get(name.lower())
        if found is None:
            raise LogsError(f"no function {name!r} in template.yaml; the functions: {', '.join(known)}")
        chosen.append(found)
    return chosen or known


# -- local: .saga/logs/ -------------------------------------------------------------------------------


class LocalLogs:
    """The files `saga up` writes, read from where the last read stopped (for ``--tail``)."""

    def __init__(self, directory: Path, function_names: list[str]) -> None:
        self.directory = directory
        self.functions = function_names
        self._offsets: dict[str, int] = {}

    def read(self) -> list[LogLine]:
        """The lines written since the last read, in time order."""
        lines: list[LogLine] = []
        for function in self.functions:
            path = self.directory / f"{function}.log"
            try:
                with path.open("rb") as handle:
                    handle.seek(self._offsets.get(function, 0))
                    data = handle.read()
            except FileNotFoundError:
                continue
            complete = data.rfind(b"\n") + 1  # a line still being written waits for the next read
            self._offsets[function] = self._offsets.get(function, 0) + complete
            modified = path.stat().st_mtime
            for raw in data[:complete].decode("utf-8", errors="replace").splitlines():
                if raw.strip():
                    lines.append(LogLine(function, raw, _when(raw, modified)))
        return sorted(lines, key=lambda line: line.at)


# -- deployed: CloudWatch Logs ------------------------------------------------------------------------


def log_group_names(stack_name: str, function_names: list[str]) -> dict[str, str]:
    """Each function's log group as template.yaml names it (its LoggingConfig's LogGroup resource)."""
    template = load_template()
    resources = template["Resources"]
    groups = {}
    for function in function_names:
        config = resources[function]["Properties"].get("LoggingConfig", {})
        ref = (config.get("LogGroup") or {}).get("Ref")
        name = resources.get(ref, {}).get("Properties", {}).get("LogGroupName") if ref else None
        pattern = name.get("Fn::Sub") if isinstance(name, dict) else None
        if isinstance(pattern, str):
            groups[function] = pattern.replace("${AWS::StackName}", stack_name)
        else:  # Lambda's default group
            groups[function] = f"/aws/lambda/{stack_name}-{function}"
    return groups


class CloudWatchLogs:
    """The functions' log groups, read with FilterLogEvents from ``since`` on (for ``--tail``)."""

    def __init__(self, client: Any, groups: dict[str, str], *, since: float, order_id: str | None) -> None:
        self.client = client
        self.groups = groups
        self.since_ms = int(since * 1000)
        # A term the service can match (quoted: any text); the exact checks run here afterwards.
        self.pattern = f'"{order_id}"' if order_id else None
        self._seen: set[str] = set()

    def read(self) -> list[LogLine]:
        lines: list[LogLine] = []
        newest = self.since_ms
        for function, group in self.groups.items():
            arguments: dict[str, Any] = {"logGroupName": group, "startTime": self.since_ms}
            if self.pattern:
                arguments["filterPattern"] = self.pattern
            try:
                pages = self.client.get_paginator("filter_log_events").paginate(**arguments)
                events = [event for page in pages for event in page.get("events", [])]
            except self.client.exceptions.ResourceNotFoundException:
                continue  # a function that never ran has no group yet
            for event in events:
                if event["eventId"] in self._seen:
                    continue
                self._seen.add(event["eventId"])
                newest = max(newest, int(event["timestamp"]))
                lines.append(LogLine(function, event["message"].rstrip("\n"), event["timestamp"] / 1000))
        self.since_ms = newest  # the next read starts where this one ended (events of that ms again)
        return sorted(lines, key=lambda line: line.at)


def follow(
    source: LocalLogs | CloudWatchLogs,
    write: Callable[[str], None],
    *,
    order_id: str | None,
    text: str | None,
    metrics: bool,
    raw: bool,
    tail: bool,
    since: float | None = None,
    poll_seconds: float = 1.0,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Print the matching lines; with ``tail``, keep reading until ``stop()``. Returns how many."""
    shown = 0
    while True:
        for line in _matching(source.read(), order_id=order_id, text=text, metrics=metrics, since=since):
            write(line.text if raw else line.render())
            shown += 1
        if not tail or stop():
            return shown
        time.sleep(poll_seconds)


def _matching(
    lines: list[LogLine], *, order_id: str | None, text: str | None, metrics: bool, since: float | None
) -> Iterator[LogLine]:
    for line in lines:
        if since is not None and line.at < since:
            continue
        if line.matches(order_id=order_id, text=text, metrics=metrics):
            yield line
