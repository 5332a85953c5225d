"""``saga redrive``: what is on the dead-letter queue, or with ``--apply`` moving it back, in words.

The engine (the survey, the move by hand or by SQS's move task, and why a message stays) is
saga_local/harness/redrive.py; this renders its reports and calls it on the command's target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga_local.harness.redrive import redrive, survey
from saga_local.output import Out
from saga_local.stack.targets import resolve_target

if TYPE_CHECKING:
    import argparse

    from saga_local.harness.redrive import DeadLetterSurvey, RedriveReport


def render_survey(found: DeadLetterSurvey, where: str, *, include_rejected: bool) -> str:
    """What ``saga redrive --apply`` would do, in words (the dry run's answer)."""
    if not found.total:
        return f"redrive ({where}): dry run: the dead-letter queue is empty; nothing to move."
    rejected = sum(found.rejected.values())
    lines = [
        f"redrive ({where}): dry run, nothing moved. The dead-letter queue holds"
        f" {_plural(found.total, 'message')}:"
    ]
    if found.to_run:
        lines.append(
            f"  {_plural(found.to_run, 'order')} would run again (no rejection reason: each failed until"
            " the queue's redrive policy moved it); the claim on orderId charges each at most once."
        )
    if rejected:
        fate = (
            "would be moved anyway (--include-rejected), and come back with a new MessageId and a new"
            " OrderRejected event"
            if include_rejected
            else "would stay where they are: the start function would reject them again (fix the"
            " producer; --include-rejected moves them anyway)"
        )
        lines.append(f"  {_plural(rejected, 'message')} {fate}:")
        lines += [f"    {count} x {reason}" for reason, count in sorted(found.rejected.items())]
    movable = found.to_run + (rejected if include_rejected else 0)
    if movable:
        again = " --include-rejected" if include_rejected else ""
        lines.append(
            f"Run saga redrive --apply{again} (with the same --stack) to move {_plural(movable, 'message')}."
        )
    return "\n".join(lines)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def render(report: RedriveReport, where: str) -> str:
    """The report in words, for the operator who ran ``saga redrive``."""
    how = "SQS message move task" if report.method == "move-task" else "copied, then deleted"
    if (
        report.moved == 0
        and not report.failed
        and not report.left
        and not report.untrusted
        and not report.skipped
        and report.task_status in (None, "COMPLETED")
    ):
        return f"redrive ({where}): the dead-letter queue is empty; nothing to move."
    lines = [
        f"redrive ({where}): moved {_plural(report.moved, 'message')} from the dead-letter queue"
        f" to the orders queue ({how})."
    ]
    if report.task_status not in (None, "COMPLETED"):
        why = f": {report.failure_reason}" if report.failure_reason else ""
        lines.append(
            f"  The move task ended {report.task_status}{why}; what it did not move is still on the"
            " dead-letter queue (run saga redrive --apply again)."
        )
    rejected = sum(report.rejected_again.values())
    if report.method == "by-hand" and report.moved > rejected:
        lines.append(
            f"  {_plural(report.moved - rejected, 'order')} will run again;"
            " the claim on orderId charges each order at most once."
        )
    if report.rejected_again:
        lines.append(
            f"  {_plural(rejected, 'message')} will be rejected again by the start function and go back to"
            " the dead-letter queue (fix the producer; redriving cannot make them valid):"
        )
        lines += [f"    {count} x {reason}" for reason, count in sorted(report.rejected_again.items())]
    if report.skipped:
        lines.append(
            f"  {_plural(sum(report.skipped.values()), 'message')} left on the dead-letter queue: the start"
            " function would reject them again (fix the producer; --include-rejected moves them anyway):"
        )
        lines += [f"    {count} x {reason}" for reason, count in sorted(report.skipped.items())]
    if report.failed:
        lines.append(
            f"  SQS refused to take {_plural(report.failed, 'message')}: left on the dead-letter queue"
            " (nothing lost); run saga redrive --apply again."
        )
    if report.move_task_refused:
        lines.append(f"  Not SQS's move task: {report.move_task_refused}; each message was checked instead.")
    if report.untrusted:
        lines.append(
            f"  {_plural(report.untrusted, 'valid order')} left on the dead-letter queue: nothing shows"
            " it came through the orders queue (not moved there by SQS, not rejected by the start"
            " function), so it may have been put there directly. Not moved: find out who sent it."
        )
    if report.left:
        lines.append(
            f"  {_plural(report.left, 'message')} came back during this redrive and stayed on the dead-letter"
            " queue (not sent round again):"
        )
        lines += [f"    {count} x {reason}" for reason, count in sorted(report.left_reasons.items())]
    return "\n".join(lines)


def cmd_redrive(args: argparse.Namespace) -> int:
    """``saga redrive``: survey the dead-letter queue, or with --apply move it back to the orders queue."""
    target = resolve_target(args)
    sqs = target.clients("sqs")
    source, dead = target.outputs["OrdersQueueUrl"], target.outputs["OrdersDeadLetterQueueUrl"]
    if not args.apply:
        found = survey(sqs, dead)
        Out()(render_survey(found, target.where, include_rejected=args.include_rejected))
        return 0

    def arn(url: str) -> str:
        return str(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        )

    report = redrive(
        sqs,
        dead_letter_queue_url=dead,
        source_queue_url=source,
        source_arn=arn(source),
        dlq_arn=arn(dead),
        skip_rejected=not args.include_rejected,
    )
    Out()(render(report, target.where))
    return 0 if report.ok else 1
