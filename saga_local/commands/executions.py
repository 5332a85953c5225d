"""``saga executions``: the state machine's executions, as the console's list shows them, and lookups
by order id for ``saga trace``.

An execution's name starts with its order's id (the start function names it ``<orderId>-<MessageId>``;
a re-queue, ``<orderId>_attempt-<n>_requeued-...``; characters Step Functions refuses become ``_``),
so an order id, or any prefix of a name, finds an order's executions. The list comes from the
target stack (ListExecutions, every page, newest first) or, with no stack running, from the
executions ``saga demo``, ``saga simulate`` and ``saga chaos`` recorded (``.saga/executions/``).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from payment_saga.execution_names import name_safe
from saga_local.output import Out
from saga_local.stack.targets import local_state, relative, resolve_target

if TYPE_CHECKING:
    from pathlib import Path

STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE")


@dataclass(frozen=True)
class Listed:
    """One execution in the list: its name, status, when it started and stopped, how it failed."""

    name: str
    status: str
    started: datetime
    stopped: datetime | None = None
    error: str | None = None
    recorded: bool = False

    def line(self) -> str:
        took = f"{(self.stopped - self.started).total_seconds():7.1f} s" if self.stopped else "      -  "
        started = self.started.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        error = self.error or ""
        where = "  (recorded)" if self.recorded else ""
        return f"{started}  {self.status:<9}  {took}  {error:<22}  {self.name}{where}".rstrip()


def name_prefix(text: str) -> str:
    """The start of the execution names of the order ``text`` (or ``text`` itself, as a name's start)."""
    return name_safe(text)


#: ``-<MessageId>`` (a UUID) after the order's id, or the ``_attempt-<n>_...`` of a re-queue.
_AFTER_ORDER = re.compile(r"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|_attempt-\d+_.*")


def of_order(name: str, order_id: str) -> bool:
    """Whether ``name`` is an execution of the order ``order_id`` (not of one whose id merely starts so)."""
    prefix = name_prefix(order_id)
    return name.startswith(prefix) and _AFTER_ORDER.fullmatch(name[len(prefix) :]) is not None


def find(listed: list[Listed], text: str) -> list[Listed]:
    """The executions ``text`` names: those of the order ``text`` if any, else those starting with it."""
    ordered = [e for e in listed if of_order(e.name, text)]
    return ordered or [e for e in listed if e.name.startswith((text, name_prefix(text)))]


def from_stack(sfn: Any, state_machine_arn: str, *, status: str | None = None) -> list[Listed]:
    """Every execution of the state machine (newest first), with the error of each failed one."""
    arguments: dict[str, Any] = {"stateMachineArn": state_machine_arn}
    if status:
        arguments["statusFilter"] = status
    found = []
    for page in sfn.get_paginator("list_executions").paginate(**arguments):
        for execution in page.get("executions", []):
            found.append(
                Listed(
                    name=execution["name"],
                    status=execution["status"],
                    started=execution["startDate"],
                    stopped=execution.get("stopDate"),
                )
            )
    return sorted(found, key=lambda e: e.started, reverse=True)


def with_errors(sfn: Any, state_machine_arn: str, listed: list[Listed]) -> list[Listed]:
    """``listed`` with the error of each failed execution (one DescribeExecution each)."""
    prefix = state_machine_arn.replace(":stateMachine:", ":execution:") + ":"
    out = []
    for execution in listed:
        if execution.status in ("FAILED", "TIMED_OUT", "ABORTED") and execution.error is None:
            described = sfn.describe_execution(executionArn=prefix + execution.name)
            execution = Listed(**{**vars(execution), "error": described.get("error")})
        out.append(execution)
    return out


def from_archive(directory: Path) -> list[Listed]:
    """The executions recorded under ``directory`` (newest first)."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.glob("*.json"):
        try:
            description = json.loads(path.read_text(encoding="utf-8"))["description"]
        except (OSError, ValueError, KeyError):
            continue
        found.append(
            Listed(
                name=str(description.get("name", path.stem)),
                status=str(description.get("status", "?")),
                started=_date(description.get("startDate"))
                or datetime.fromtimestamp(path.stat().st_mtime, UTC),
                stopped=_date(description.get("stopDate")),
                error=description.get("error"),
                recorded=True,
            )
        )
    return sorted(found, key=lambda e: e.started, reverse=True)


def _date(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return None


def select(
    listed: list[Listed], *, status: str | None, order_id: str | None, since: datetime | None
) -> list[Listed]:
    """The executions that pass every filter given."""
    return [
        e
        for e in listed
        if (status is None or e.status == status)
        and (order_id is None or of_order(e.name, order_id))
        and (since is None or e.started >= since)
    ]


def render(listed: list[Listed], where: str) -> str:
    """The list, one line each, then a count by status."""
    if not listed:
        return f"no executions ({where})"
    counts: dict[str, int] = {}
    for e in listed:
        counts[e.status] = counts.get(e.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    noun = "execution" if len(listed) == 1 else "executions"
    return "\n".join([*(e.line() for e in listed), "", f"{len(listed)} {noun} ({where}): {summary}"])


def cmd_executions(args: argparse.Namespace) -> int:
    """The state machine's executions, newest first, as the console lists them."""
    from datetime import UTC, datetime, timedelta

    from saga_local.stack import archive

    since = datetime.now(UTC) - timedelta(seconds=args.since) if args.since is not None else None
    if args.stack or local_state() is not None:
        target = resolve_target(args)
        sfn = target.clients("stepfunctions")
        state_machine = target.outputs["PaymentSagaStateMachineArn"]
        listed = from_stack(sfn, state_machine, status=args.status)
        chosen = select(listed, status=args.status, order_id=args.order_id, since=since)
        chosen = with_errors(sfn, state_machine, chosen[: args.limit])
        where = target.where
    else:
        listed = from_archive(archive.ARCHIVE_DIR)
        chosen = select(listed, status=args.status, order_id=args.order_id, since=since)
        chosen = chosen[: args.limit]
        where = f"recorded in {relative(archive.ARCHIVE_DIR)}; no local stack is running"
    Out()(render(chosen, where))
    return 0
