"""``saga events``: the outcome events on a stack's archive queue, one line each."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from saga_local.output import Out
from saga_local.stack.outcome_log import deduplicated, peek
from saga_local.stack.targets import resolve_target

if TYPE_CHECKING:
    from saga_local.stack.outcome_log import OutcomeEvent


def render(events: list[OutcomeEvent], *, raw: bool = False) -> str:
    """The events one line each (or, ``raw``, as JSON lines of their detail), then a count by type."""
    unique = deduplicated(events)
    if raw:
        return "".join(
            json.dumps({"detailType": e.detail_type, **e.detail}, sort_keys=True) + "\n" for e in unique
        )
    lines = [e.line() for e in unique]
    counts = Counter(e.detail_type for e in unique)
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no outcome events"
    duplicates = len(events) - len(unique)
    tail = f" ({duplicates} duplicate deliveries left out)" if duplicates else ""
    noun = "event" if len(unique) == 1 else "events"
    return "\n".join([*lines, "", f"{len(unique)} {noun}: {summary}{tail}"]) + "\n"


def command(clients: Any, outputs: dict[str, str], where: str, *, order_id: str | None, raw: bool) -> str:
    """``saga events``: the outcome events on a stack's archive queue, read without deleting them."""
    url = outputs.get("OutcomeArchiveQueueUrl")
    if not url:
        raise SystemExit(
            f"saga events: {where} has no outcome archive (deploy it with OutcomeArchive=Enabled, or add a"
            " rule of your own to the bus named by the OutcomeEventBusName output)."
        )
    events = [e for e in peek(clients("sqs"), url) if order_id is None or e.concerns(order_id)]
    return render(events, raw=raw)


def cmd_events(args: argparse.Namespace) -> int:
    """The outcome events the stack published."""
    target = resolve_target(args)
    text = command(target.clients, target.outputs, target.where, order_id=args.order_id, raw=args.json)
    Out()(text.rstrip("\n"))
    return 0
