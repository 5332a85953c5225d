"""Moving the orders dead-letter queue back onto the orders queue, safely (``saga redrive``).

Redriving is safe because of what the saga already does with duplicates: every message is handled
at least once and the claim on ``orderId`` stops a second charge, so moving a message twice costs an
execution, never a charge. A malformed message simply comes back to the dead-letter queue with its
rejection reason. What a redrive must never do is *lose* a message: a message is deleted from the
dead-letter queue only after its copy is on the orders queue.

Two ways, the same outcome:

* **On AWS: SQS's own message move task** (``StartMessageMoveTask``, then ``ListMessageMoveTasks``
  until it ends). SQS moves the messages server side, oldest first, as new messages (new message id,
  new retention), and the move carries on even if this process dies. The source must be a queue
  that is the dead-letter queue of another SQS queue (ours is); one task at a time per queue; up to
  500 messages a second. Needs ``sqs:StartMessageMoveTask``, ``sqs:ListMessageMoveTasks``,
  ``sqs:ReceiveMessage``, ``sqs:DeleteMessage``, ``sqs:GetQueueAttributes`` on the dead-letter queue
  and ``sqs:SendMessage`` on the orders queue.
* **By hand** (moto, which the local stack pins at 5.2.5, does not implement the move task): receive
  from the dead-letter queue, send each body to the orders queue, delete from the dead-letter queue
  only once SQS accepted the copy. A crash between send and delete leaves both: the message comes
  round twice, which the claim absorbs. Messages that arrive on the dead-letter queue during the
  redrive *because of* it (rejected again, or failed again) are left there, not sent round in a
  loop.

A message the start function will reject again is known before it moves: it carries the
``rejectionReason`` the start function gave it, or its body fails the start function's own
validation. Moving it buys a new MessageId and a new final ``OrderRejected`` event for the same
order each time round (docs/outcome-events.md: one final outcome per order), and cannot make it
valid. ``skip_rejected`` leaves those where they are (moving by hand, since SQS's move task moves
everything); ``saga redrive`` skips them unless asked (``--include-rejected``), and by default only
says what a redrive would do (:func:`survey`), moving nothing until ``--apply``.

By hand, message attributes are carried over except the two the start function adds when it
rejects a message (``rejectionReason``, ``sourceMessageId``): they describe the last failure, belong
to the dead-letter queue, and the start function writes fresh ones if it rejects the message again.
(It reads only the body, so dropping them changes nothing in what it does.)

**Only what came through the saga is moved.** A valid order dropped straight on the dead-letter
queue would be charged by the redrive, so a message goes back only if it reached the dead-letter
queue the saga's ways: moved there by SQS from the orders queue (whose policy admits only the saga and
the producers the stack lists), or rejected by the start function (a body that is still invalid, so
it is rejected again). By hand that is checked per message: SQS's ``DeadLetterQueueSourceArn`` names
the orders queue (or, where the service does not set it, the receive count shows it was received
more than ``maxReceiveCount`` times), or the body is invalid. Anything else stays, counted as ``untrusted``.
SQS's move task cannot choose, so it is used only when the dead-letter queue's policy admits the
start function alone (the template's ``OnlyTheStartFunctionDeadLetters``); otherwise the redrive
moves by hand, with the check.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from saga_local.queue_reading import receive_each_once

if TYPE_CHECKING:
    from collections.abc import Callable

#: Attributes the start function puts on a rejected message (payment_saga/starting.py).
REJECTION_ATTRIBUTES = frozenset({"rejectionReason", "sourceMessageId"})
#: The dead-letter queue policy's statement that admits only the start function (template.yaml).
DEAD_LETTER_SENDERS_SID = "OnlyTheStartFunctionDeadLetters"
#: ListMessageMoveTasks statuses of a task that is still going.
_ACTIVE = frozenset({"RUNNING", "CANCELLING"})


@dataclass
class RedriveReport:
    """What a redrive did. ``moved`` counts messages now on the orders queue."""

    method: Literal["move-task", "by-hand"]
    moved: int
    #: By hand: copies SQS refused to take (left on the dead-letter queue, nothing lost).
    failed: int = 0
    #: By hand: messages left on the dead-letter queue because they came back during this redrive.
    left: int = 0
    #: The move task's final status (COMPLETED, CANCELLED, FAILED) and, if it failed, why.
    task_status: str | None = None
    failure_reason: str | None = None
    #: By hand: moved messages the start function will reject again, by reason (its own validation).
    rejected_again: Counter[str] = field(default_factory=Counter)
    #: By hand: why the messages left on the dead-letter queue were rejected when they came back.
    left_reasons: Counter[str] = field(default_factory=Counter)
    #: By hand: valid orders left on the dead-letter queue because nothing shows they came through
    #: the orders queue (sent to the dead-letter queue directly: possibly injected).
    untrusted: int = 0
    #: Why the move task was not used although the endpoint is AWS's (None: it was, or not asked).
    move_task_refused: str | None = None
    #: skip_rejected: messages left on the dead-letter queue because they would be rejected again.
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.untrusted == 0 and self.task_status in (None, "COMPLETED")


def redrive(
    sqs: Any,
    *,
    dead_letter_queue_url: str,
    source_queue_url: str,
    source_arn: str,
    dlq_arn: str,
    use_move_task: bool | None = None,
    poll_seconds: float = 2.0,
    timeout_seconds: float = 3600.0,
    visibility_timeout: int = 60,
    sleep: Callable[[float], None] = time.sleep,
    skip_rejected: bool = False,
) -> RedriveReport:
    """Move every message on the dead-letter queue back to the orders queue; see the module docstring.

    ``use_move_task``: ``True`` uses SQS's move task, ``False`` moves by hand, ``None`` (default)
    uses the move task when ``sqs`` talks to an AWS endpoint, and falls back to moving by hand
    where the service in front of it does not implement the move task (moto in-process, which
    raises ``NotImplementedError``: real SQS never does, so no real failure is hidden by it).
    ``visibility_timeout`` (by hand): how long a received message stays hidden while it is copied.
    ``skip_rejected``: leave the messages the start function will reject again (:func:`known_rejection`)
    on the dead-letter queue; this moves by hand, as the move task cannot choose.
    """
    if skip_rejected:
        if use_move_task:
            raise ValueError("SQS's message move task moves every message: it cannot skip rejected ones")
        return _by_hand(
            sqs,
            dead_letter_queue_url,
            source_queue_url,
            visibility_timeout=visibility_timeout,
            source=_Source(source_arn, _max_receive_count(sqs, source_queue_url)),
            skip_rejected=True,
        )
    automatic = use_move_task is None
    on_aws = _talks_to_aws(sqs)
    refused = None
    if use_move_task or (automatic and on_aws):
        refused = _why_not_move_task(sqs, dead_letter_queue_url)
        if refused is None:
            try:
                return _move_task(
                    sqs,
                    source_arn=source_arn,
                    dlq_arn=dlq_arn,
                    poll_seconds=poll_seconds,
                    timeout_seconds=timeout_seconds,
                    sleep=sleep,
                )
            except NotImplementedError:
                if not automatic:
                    raise
    report = _by_hand(
        sqs,
        dead_letter_queue_url,
        source_queue_url,
        visibility_timeout=visibility_timeout,
        source=_Source(source_arn, _max_receive_count(sqs, source_queue_url)),
    )
    report.move_task_refused = refused
    return report


def _why_not_move_task(sqs: Any, dead_letter_queue_url: str) -> str | None:
    """Why SQS's move task may not move this dead-letter queue wholesale (None: it may).

    The task moves everything; that is safe only if nobody but the start function can put a message
    there, which the queue's policy must say with the template's explicit Deny."""
    attributes = sqs.get_queue_attributes(QueueUrl=dead_letter_queue_url, AttributeNames=["Policy"])
    policy = json.loads(attributes.get("Attributes", {}).get("Policy") or "{}")
    statements = policy.get("Statement") or []
    if any(
        isinstance(s, dict) and s.get("Sid") == DEAD_LETTER_SENDERS_SID and s.get("Effect") == "Deny"
        for s in (statements if isinstance(statements, list) else [statements])
    ):
        return None
    return (
        f"the dead-letter queue's policy has no {DEAD_LETTER_SENDERS_SID} statement, so anyone with"
        " sqs:SendMessage may have put an order there"
    )


def _max_receive_count(sqs: Any, source_queue_url: str) -> int | None:
    attributes = sqs.get_queue_attributes(QueueUrl=source_queue_url, AttributeNames=["RedrivePolicy"])
    redrive_policy = json.loads(attributes.get("Attributes", {}).get("RedrivePolicy") or "{}")
    count = redrive_policy.get("maxReceiveCount")
    return int(count) if count is not None else None


@dataclass(frozen=True)
class _Source:
    """How to tell that a message on the dead-letter queue was moved there from the orders queue."""

    arn: str
    max_receive_count: int | None

    def moved_it(self, message: dict[str, Any]) -> bool:
        """SQS stamps ``DeadLetterQueueSourceArn`` on what it moves; where it does not (moto), a moved
        message keeps its receive count, more than ``maxReceiveCount``. The count is the weaker sign:
        a principal that may both send to and receive from the dead-letter queue can raise it, which
        the queue's policy (only the start function sends) is there to stop; this stops one that may
        only send."""
        attributes = message.get("Attributes") or {}
        if attributes.get("DeadLetterQueueSourceArn") == self.arn:
            return True
        if self.max_receive_count is None:
            return False
        # This receive counts too: a moved message has been received more than maxReceiveCount times.
        return int(attributes.get("ApproximateReceiveCount", 0)) > self.max_receive_count


def _talks_to_aws(sqs: Any) -> bool:
    host = urlsplit(str(sqs.meta.endpoint_url)).hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn", ".api.aws"))


# -- SQS's move task ---------------------------------------------------------------------------------


def _move_task(
    sqs: Any,
    *,
    source_arn: str,
    dlq_arn: str,
    poll_seconds: float,
    timeout_seconds: float,
    sleep: Callable[[float], None],
) -> RedriveReport:
    # ListMessageMoveTasks shows the last 10 tasks of the queue, and the task handle only while a task
    # runs: remember the tasks that were there before ours, so ours is the new one once it has ended.
    earlier = {_task_id(task) for task in _tasks(sqs, dlq_arn)}
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=source_arn)["TaskHandle"]
    deadline = time.monotonic() + timeout_seconds
    while True:
        tasks = _tasks(sqs, dlq_arn)
        ours = next((task for task in tasks if task.get("TaskHandle") == handle), None)
        if ours is None:
            new = [task for task in tasks if _task_id(task) not in earlier]
            ours = max(new, key=lambda task: int(task.get("StartedTimestamp", 0)), default=None)
        if ours is not None and ours.get("Status") not in _ACTIVE:
            return RedriveReport(
                method="move-task",
                moved=int(ours.get("ApproximateNumberOfMessagesMoved", 0)),
                task_status=ours.get("Status"),
                failure_reason=ours.get("FailureReason"),
            )
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the message move task {handle} is still running after {timeout_seconds:.0f} s;"
                f" it carries on in SQS (aws sqs list-message-move-tasks --source-arn {dlq_arn})"
            )
        sleep(poll_seconds)


def _tasks(sqs: Any, dlq_arn: str) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10).get(
        "Results", []
    )
    return results


def _task_id(task: dict[str, Any]) -> tuple[Any, ...]:
    return (task.get("StartedTimestamp"), task.get("DestinationArn"), task.get("SourceArn"))


# -- by hand -----------------------------------------------------------------------------------------


#: Why a message stays on the dead-letter queue: it came back during this redrive, nothing shows it
#: came through the orders queue, or (skip_rejected) the start function will reject it again.
_BACK, _UNTRUSTED = "came back", "untrusted"


def _why_held(message: dict[str, Any], sent: set[str], source: _Source, *, skip_rejected: bool) -> str | None:
    """None to move ``message``; otherwise why it stays: ``_BACK``, ``_UNTRUSTED`` or a rejection reason."""
    if _came_back(message, sent):
        return _BACK
    if not source.moved_it(message) and rejection_reason(message["Body"]) is None:
        # A valid order nothing shows came through the orders queue: never charged by us.
        return _UNTRUSTED
    if skip_rejected:
        return known_rejection(message)
    return None


def _count_held(report: RedriveReport, message: dict[str, Any], why_held: str) -> None:
    if why_held == _BACK:
        report.left_reasons[_rejection_attribute(message)] += 1
    elif why_held == _UNTRUSTED:
        report.untrusted += 1
    else:
        report.skipped[why_held] += 1


def _by_hand(
    sqs: Any,
    dead_letter_queue_url: str,
    source_queue_url: str,
    *,
    visibility_timeout: int,
    source: _Source,
    skip_rejected: bool = False,
) -> RedriveReport:
    report = RedriveReport(method="by-hand", moved=0)
    #: Message ids of the copies this redrive put on the orders queue.
    sent: set[str] = set()
    #: Messages that came back during this redrive: id -> receipt handle, shown again at the end.
    held: dict[str, str] = {}
    idle = 0
    try:
        while idle < 3:
            batch = sqs.receive_message(
                QueueUrl=dead_letter_queue_url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                AttributeNames=["All"],  # DeadLetterQueueSourceArn, ApproximateReceiveCount
                VisibilityTimeout=visibility_timeout,
                WaitTimeSeconds=1,  # long polling asks every server: an empty answer means empty
            ).get("Messages", [])
            if not batch:
                break
            to_move = []
            for message in batch:
                why_held = _why_held(message, sent, source, skip_rejected=skip_rejected)
                if why_held is None:
                    to_move.append(message)
                    continue
                if message["MessageId"] not in held:
                    _count_held(report, message, why_held)
                held[message["MessageId"]] = message["ReceiptHandle"]
            idle = 0 if to_move else idle + 1
            if to_move:
                _move(sqs, to_move, dead_letter_queue_url, source_queue_url, sent, report)
    finally:
        for chunk in _chunks(list(held.values()), 10):
            sqs.change_message_visibility_batch(
                QueueUrl=dead_letter_queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(chunk)
                ],
            )
        report.left = len(held) - report.untrusted - sum(report.skipped.values())
    return report


def _move(
    sqs: Any,
    messages: list[dict[str, Any]],
    dlq_url: str,
    source_url: str,
    sent: set[str],
    report: RedriveReport,
) -> None:
    entries = []
    for i, message in enumerate(messages):
        entry: dict[str, Any] = {"Id": str(i), "MessageBody": message["Body"]}
        attributes = _carried_attributes(message)
        if attributes:
            entry["MessageAttributes"] = attributes
        entries.append(entry)
    response = sqs.send_message_batch(QueueUrl=source_url, Entries=entries)
    accepted = response.get("Successful", [])
    report.failed += len(response.get("Failed", []))
    sent.update(ok["MessageId"] for ok in accepted)
    # Only now that SQS holds the copy: a failure before this line duplicates, never loses.
    if accepted:
        sqs.delete_message_batch(
            QueueUrl=dlq_url,
            Entries=[
                {"Id": ok["Id"], "ReceiptHandle": messages[int(ok["Id"])]["ReceiptHandle"]} for ok in accepted
            ],
        )
    report.moved += len(accepted)
    for ok in accepted:
        reason = rejection_reason(messages[int(ok["Id"])]["Body"])
        if reason is not None:
            report.rejected_again[reason] += 1


def rejection_reason(body: str) -> str | None:
    """Why the start function will reject ``body``: the same validation it runs, or None if it is valid."""
    from payment_saga.errors import InvalidOrder
    from payment_saga.orders import parse_order_body

    try:
        parse_order_body(body)
    except InvalidOrder as exc:
        return str(exc)
    return None


def known_rejection(message: dict[str, Any]) -> str | None:
    """Why the start function will reject this dead-lettered message again, or None if it may run:
    the ``rejectionReason`` it was given, else what the start function's validation says now."""
    attribute = (message.get("MessageAttributes") or {}).get("rejectionReason") or {}
    given = attribute.get("StringValue")
    return str(given) if given else rejection_reason(message["Body"])


@dataclass
class DeadLetterSurvey:
    """What is on the dead-letter queue, read without moving or deleting anything (``saga redrive``)."""

    #: Messages a redrive would send round: orders that failed for a reason a fix can remove.
    to_run: int = 0
    #: Messages the start function will reject again, by reason: left where they are by default.
    rejected: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.to_run + sum(self.rejected.values())


def survey(sqs: Any, dead_letter_queue_url: str, *, hide_seconds: int = 30) -> DeadLetterSurvey:
    """Read every message on the dead-letter queue without deleting any, and sort them as a redrive would.

    Each batch is hidden while the next is read (or the same ten would come back), and all are made
    visible again at the end.
    """
    found = DeadLetterSurvey()
    seen: dict[str, dict[str, Any]] = {}
    try:
        for message in receive_each_once(
            sqs, dead_letter_queue_url, hide_seconds=hide_seconds, seen=seen
        ).values():
            reason = known_rejection(message)
            if reason is None:
                found.to_run += 1
            else:
                found.rejected[reason] += 1
    finally:
        for chunk in _chunks([message["ReceiptHandle"] for message in seen.values()], 10):
            sqs.change_message_visibility_batch(
                QueueUrl=dead_letter_queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(chunk)
                ],
            )
    return found


def _rejection_attribute(message: dict[str, Any]) -> str:
    attribute = (message.get("MessageAttributes") or {}).get("rejectionReason") or {}
    return str(attribute.get("StringValue") or "failed again (no rejection reason: retries exhausted)")


def _came_back(message: dict[str, Any], sent: set[str]) -> bool:
    """A copy this redrive sent, back on the dead-letter queue: failed again (same message id) or
    rejected again by the start function (its ``sourceMessageId`` names the copy)."""
    source = (message.get("MessageAttributes") or {}).get("sourceMessageId", {}).get("StringValue")
    return message["MessageId"] in sent or source in sent


def _carried_attributes(message: dict[str, Any]) -> dict[str, Any]:
    carried = {}
    for name, value in (message.get("MessageAttributes") or {}).items():
        if name in REJECTION_ATTRIBUTES:
            continue
        carried[name] = {
            key: value[key] for key in ("DataType", "StringValue", "BinaryValue") if key in value
        }
    return carried


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
