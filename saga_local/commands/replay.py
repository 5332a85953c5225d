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

**A parked body is a claim to check, never a fact.** Whoever could send to the parking queue could
write any change there, and a replay acts with the operator's rights: a planted CLAIMED -> RELEASED
would re-queue an order of the planter's choosing, a planted change to COMPLETED would announce a
charge. So before anything is said or done, each record's claim row is read again from the claims
table (a strongly consistent ``GetItem`` of the base table), and what is relayed is that row as it
is now, never the parked image: its order message is the one re-queued, its charge the one
announced. A record the row does not bear out (:func:`contradiction`: another status, attempt,
charge, release reason or settling PaymentIntent, or no row at all) does nothing and is left on the
queue for a person, with what the table says: it was planted, or the claim has moved on since and
its later changes were relayed from the stream in their own right.

Needs ``sqs:ReceiveMessage``, ``sqs:DeleteMessage`` and ``sqs:ChangeMessageVisibility`` on the
parking queue, ``dynamodb:GetItem`` on the claims table, ``events:PutEvents`` on the bus and
``sqs:SendMessage`` on the orders queue (and ``cloudformation:DescribeStacks`` for ``--stack``).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from payment_saga.claims import Claim, ClaimStatus
from payment_saga.outcomes import (
    DEFAULT_MAX_REQUEUE_ATTEMPTS,
    DEFAULT_REQUEUE_BASE_DELAY_SECONDS,
    Closed,
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
    #: Records the claims table does not bear out now: nothing done, left on the queue.
    contradicted: int = 0

    @property
    def ok(self) -> bool:
        return not self.apply or (self.unreadable == 0 and self.contradicted == 0)


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


@dataclass(frozen=True)
class ClaimsTable:
    """The claims table, read as the saga's own decisions read it: one item of the base table by its
    key, strongly consistent (never an index, never a scan)."""

    dynamodb: Any
    table_name: str

    def row(self, order_id: str) -> dict[str, Any] | None:
        """The order's claim row now, as a stream image holds it, or None when there is none."""
        item: dict[str, Any] | None = self.dynamodb.get_item(
            TableName=self.table_name, Key={"orderId": {"S": order_id}}, ConsistentRead=True
        ).get("Item")
        return item


def contradiction(parked: Closed, row: dict[str, Any] | None) -> str | None:
    """Why the claim row as it is now does not bear out the parked change (None when it does).

    The parked change says the claim reached a status (and, with it, a charge, a release reason, a
    settling PaymentIntent) at an attempt; the row must say the same now. What is compared is what a
    relay acts on: a RELEASED row re-queues only if released as never charged, a COMPLETED one
    announces its charge.

    Raises:
        UnreadableChange: the row itself cannot be read as a claim.
    """
    if row is None:
        return "the claims table has no row for this order"
    try:
        now = Claim.from_item(row)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UnreadableChange(f"the claim row in the table cannot be read: {exc!r}") from exc
    claimed = parked.claim
    said = _state(claimed)
    found = _state(now)
    if found != said:
        return f"the claim is {found} now, not {said}"
    if claimed.status is ClaimStatus.COMPLETED and now.charge_id != claimed.charge_id:
        return f"the claim was completed with charge {now.charge_id}, not {claimed.charge_id}"
    if claimed.awaiting_settlement and now.settlement_intent_id != claimed.settlement_intent_id:
        return f"the claim awaits {now.settlement_intent_id}, not {claimed.settlement_intent_id}"
    return None


def _state(claim: Claim) -> str:
    """What a claim's row says, in the words a person reads: status, how, attempt."""
    reason = claim.release_reason.value if claim.release_reason else "without a reason"
    how = {
        ClaimStatus.RELEASED: f" {reason}",
        ClaimStatus.CLAIMED: " awaiting settlement" if claim.awaiting_settlement else "",
    }.get(claim.status, "")
    return f"{claim.status.value}{how} at attempt {claim.attempt} (payment attempt {claim.payment_attempt})"


def replay(
    sqs: Any,
    relay: OutcomeRelay,
    *,
    claims: ClaimsTable,
    parking_queue_url: str,
    apply: bool,
    clock: Callable[[], float] = time.time,
) -> ReplayReport:
    """Check (dry run) or replay (``apply``) every parked record; see the module's docstring."""
    report = ReplayReport(apply=apply)
    parked = read_parked(sqs, parking_queue_url)
    try:
        for message in parked:
            _one(sqs, relay, claims, parking_queue_url, message, report, apply=apply, now=clock())
    finally:
        # What this run did not delete is visible again at once, for the next reader.
        for message in parked:
            _show_again(sqs, parking_queue_url, message)
    return report


def _one(
    sqs: Any,
    relay: OutcomeRelay,
    claims: ClaimsTable,
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
        # The row as it is now stands for the parked image: it is what is relayed, if anything.
        row = claims.row(closed.claim.order_id) if closed is not None else new
        why_not = contradiction(closed, row) if closed is not None else None
    except UnreadableChange as exc:
        report.unreadable += 1
        report.lines.append(f"{message.order_id}: still unreadable: {exc} (parked because {message.reason})")
        return
    if why_not is not None:
        report.contradicted += 1
        report.lines.append(
            f"{message.order_id}: not replayed, the claims table says otherwise: {why_not}"
            f" (left on the queue; parked because {message.reason})"
        )
        return
    report.readable += 1
    if not apply:
        what = "closes nothing (nothing to publish)" if closed is None else "readable now: would be relayed"
        report.lines.append(f"{message.order_id}: {what} (parked because {message.reason})")
        return
    try:
        relayed = relay.relay(old, row) if closed is not None else None
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
    total = report.readable + report.unreadable + report.contradicted
    if not total:
        return f"The parking queue of the {where} is empty: nothing to replay."
    contradicted = f", {report.contradicted} not borne out by the claims table" if report.contradicted else ""
    if report.apply:
        lines.append(
            f"{plural(total, 'parked record')} on the {where}: {report.replayed} replayed,"
            f" {report.unreadable} still unreadable{contradicted} (left on the queue)."
        )
    else:
        lines.append(
            f"{plural(total, 'parked record')} on the {where}: {report.readable} readable now,"
            f" {report.unreadable} still unreadable{contradicted}. Dry run: nothing changed; --apply"
            " replays them."
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
        for key in ("OutcomeRelayFailureQueueUrl", "OutcomeEventBusName", "OrdersQueueUrl", "ClaimsTableName")
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
            sqs,
            relay,
            claims=ClaimsTable(target.clients("dynamodb"), target.outputs["ClaimsTableName"]),
            parking_queue_url=target.outputs["OutcomeRelayFailureQueueUrl"],
            apply=args.apply,
        )
    except ReplayError as exc:
        raise SystemExit(f"saga replay-parked: {exc}") from None
    Out()(render(report, target.where))
    return 0 if report.ok else 1
