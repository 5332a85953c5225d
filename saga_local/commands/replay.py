"""``saga replay-parked``: run the records the outcome relay parked through the relay's code again.

The relay parks a stream record it can never read (``payment_saga.outcomes.UnreadableChange``) on
its parking queue (output ``OutcomeRelayFailureQueueUrl``): the whole record as the message body,
its reason in the ``parkReason`` attribute. Once what was wrong is fixed (the relay, deployed
again), the records can be replayed:

* by default a dry run: each parked record is read (and left on the queue) and checked with the
  relay's own reading of a change (``read_change``): readable now, or still not and why;
* with ``--apply``: each record readable now goes through ``OutcomeRelay.relay``, the code the
  relay function runs, with the stack's bus, orders queue and re-queue bounds; its message is
  deleted only once that returned. A record still unreadable is left with its reason. Replaying
  twice is safe: the events carry stable ids (consumers deduplicate), and a re-queue sent twice
  starts one execution.

Needs ``sqs:ReceiveMessage``, ``sqs:DeleteMessage`` and ``sqs:ChangeMessageVisibility`` on the
parking queue, ``events:PutEvents`` on the bus and ``sqs:SendMessage`` on the orders queue (and
``cloudformation:DescribeStacks`` for ``--stack``).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from payment_saga.outcomes import (
    DEFAULT_MAX_REQUEUE_ATTEMPTS,
    DEFAULT_REQUEUE_BASE_DELAY_SECONDS,
    OutcomeNotPublished,
    OutcomeRelay,
    RequeuePolicy,
    UnreadableChange,
    read_change,
)
from saga_local.output import Out, plural
from saga_local.queue_reading import receive_each_once
from saga_local.stack.targets import resolve_target

if TYPE_CHECKING:
    from collections.abc import Callable

#: How long a message read by this command stays hidden from another reader (seconds).
VISIBILITY_SECONDS = 60


class ReplayError(Exception):
    """The replay cannot go on (a publish refused): the message is left, the reason is one line."""


@dataclass(frozen=True)
class Parked:
    """One message of the parking queue."""

    message_id: str
    receipt_handle: str
    body: str
    reason: str
    order_id: str

    def change(self) -> tuple[Any, Any]:
        """(old image, new image) of the parked record; raises UnreadableChange if it has none."""
        try:
            record = json.loads(self.body)
        except ValueError as exc:
            raise UnreadableChange("the parked message is not a stream record (not JSON)") from exc
        change = record.get("dynamodb") if isinstance(record, dict) else None
        if not isinstance(change, dict):
            raise UnreadableChange("the parked message is not a stream record (no 'dynamodb' change)")
        return change.get("OldImage"), change.get("NewImage")


@dataclass
class ReplayReport:
    """What a replay found and did, one line per parked record."""

    apply: bool
    lines: list[str] = field(default_factory=list)
    readable: int = 0
    unreadable: int = 0
    replayed: int = 0

    @property
    def ok(self) -> bool:
        return not self.apply or self.unreadable == 0


def requeue_policy(parameters: dict[str, str]) -> RequeuePolicy:
    """The stack's re-queue bounds, from its parameters (the template's defaults where not given)."""
    return RequeuePolicy(
        max_attempts=int(parameters.get("MaxRequeueAttempts", DEFAULT_MAX_REQUEUE_ATTEMPTS)),
        base_delay_seconds=int(parameters.get("RequeueBaseDelaySeconds", DEFAULT_REQUEUE_BASE_DELAY_SECONDS)),
    )


def read_parked(sqs: Any, queue_url: str) -> list[Parked]:
    """Every message on the parking queue, each once (they stay hidden while this command runs)."""
    # Unlike the redrive's survey, nothing is shown again here: each stays hidden until the replay
    # deletes it (replayed) or shows it again (left for a person).
    parked = []
    for message in receive_each_once(sqs, queue_url, hide_seconds=VISIBILITY_SECONDS).values():
        attributes = message.get("MessageAttributes") or {}
        parked.append(
            Parked(
                message_id=message["MessageId"],
                receipt_handle=message["ReceiptHandle"],
                body=message.get("Body", ""),
                reason=str((attributes.get("parkReason") or {}).get("StringValue") or "no reason given"),
                order_id=str((attributes.get("orderId") or {}).get("StringValue") or "-"),
            )
        )
    return parked


def replay(
    sqs: Any,
    relay: OutcomeRelay,
    *,
    parking_queue_url: str,
    apply: bool,
    clock: Callable[[], float] = time.time,
) -> ReplayReport:
    """Check (dry run) or replay (``apply``) every parked record; see the module's docstring."""
    report = ReplayReport(apply=apply)
    parked = read_parked(sqs, parking_queue_url)
    try:
        for message in parked:
            _one(sqs, relay, parking_queue_url, message, report, apply=apply, now=clock())
    finally:
        # What this run did not delete is visible again at once, for the next reader.
        for message in parked:
            _show_again(sqs, parking_queue_url, message)
    return report


def _one(
    sqs: Any,
    relay: OutcomeRelay,
    queue_url: str,
    message: Parked,
    report: ReplayReport,
    *,
    apply: bool,
    now: float,
) -> None:
    try:
        old, new = message.change()
        closed = read_change(old, new, now)
    except UnreadableChange as exc:
        report.unreadable += 1
        report.lines.append(f"{message.order_id}: still unreadable: {exc} (parked because {message.reason})")
        return
    report.readable += 1
    if not apply:
        what = "closes nothing (nothing to publish)" if closed is None else "readable now: would be relayed"
        report.lines.append(f"{message.order_id}: {what} (parked because {message.reason})")
        return
    try:
        relayed = relay.relay(old, new)
    except OutcomeNotPublished as exc:
        raise ReplayError(
            f"{message.order_id}: the bus refused the event ({exc}); the record stays"
        ) from None
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message.receipt_handle)
    report.replayed += 1
    published = ", ".join(relayed.outcomes) if relayed is not None else "nothing (it closes nothing)"
    report.lines.append(f"{message.order_id}: replayed: {published}")


def _show_again(sqs: Any, queue_url: str, message: Parked) -> None:
    try:
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=message.receipt_handle, VisibilityTimeout=0
        )
    except Exception:  # noqa: BLE001 - deleted (replayed) already, or the handle expired: it shows again anyway
        return


def render(report: ReplayReport, where: str) -> str:
    """What a person reads: one line per parked record, then the count."""
    lines = list(report.lines)
    total = report.readable + report.unreadable
    if not total:
        return f"The parking queue of the {where} is empty: nothing to replay."
    if report.apply:
        lines.append(
            f"{plural(total, 'parked record')} on the {where}: {report.replayed} replayed,"
            f" {report.unreadable} still unreadable (left on the queue)."
        )
    else:
        lines.append(
            f"{plural(total, 'parked record')} on the {where}: {report.readable} readable now,"
            f" {report.unreadable} still unreadable. Dry run: nothing changed; --apply replays them."
        )
    return "\n".join(lines)


def cmd_replay_parked(args: argparse.Namespace) -> int:
    """``saga replay-parked``: replay the records the outcome relay parked (a dry run unless --apply)."""
    from payment_saga.outcomes import OutcomeRelay

    target = resolve_target(args)
    parameters: dict[str, str] = {}
    if args.stack:
        described = target.clients("cloudformation").describe_stacks(StackName=args.stack)["Stacks"][0]
        parameters = {p["ParameterKey"]: p["ParameterValue"] for p in described.get("Parameters", [])}
    missing = [
        key
        for key in ("OutcomeRelayFailureQueueUrl", "OutcomeEventBusName", "OrdersQueueUrl")
        if key not in target.outputs
    ]
    if missing:
        raise SystemExit(f"saga replay-parked: the {target.where} has no output {', '.join(missing)}")
    sqs = target.clients("sqs")
    relay = OutcomeRelay(
        events=target.clients("events"),
        bus_name=target.outputs["OutcomeEventBusName"],
        sqs=sqs,
        orders_queue_url=target.outputs["OrdersQueueUrl"],
        policy=requeue_policy(parameters),
    )
    try:
        report = replay(
            sqs, relay, parking_queue_url=target.outputs["OutcomeRelayFailureQueueUrl"], apply=args.apply
        )
    except ReplayError as exc:
        raise SystemExit(f"saga replay-parked: {exc}") from None
    Out()(render(report, target.where))
    return 0 if report.ok else 1
