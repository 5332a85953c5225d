"""``saga trace``: one execution state by state, or as a graph page (found by name or order id)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga_local.output import Out
from saga_local.stack import running, targets
from saga_local.stack.outcome_log import deduplicated, peek
from saga_local.stack.targets import local_state, resolve_target

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saga_local.stack.archive import RecordedExecution
    from saga_local.stack.outcome_log import OutcomeEvent


def execution_arn(state_machine_arn: str, execution: str) -> str:
    """An execution ARN from its name (execution ARNs are the state machine's, renamed)."""
    if execution.startswith("arn:"):
        return execution
    return state_machine_arn.replace(":stateMachine:", ":execution:") + ":" + execution


@dataclass(frozen=True)
class Found:
    """The execution ``saga trace`` shows, and what it says before it when the name found several."""

    execution: RecordedExecution
    preface: list[str] = field(default_factory=list)


def find_execution(args: argparse.Namespace) -> Found:
    """The execution ``args.execution`` names: on the target stack (``--stack``, or the local stack of
    `saga up` when one runs), else among those recorded (`saga demo`, `saga simulate`, `saga chaos`,
    and `saga up`, which records each execution as it ends).

    Each execution counts once: one `saga up` records, it does not duplicate. The running stack's
    executions are the ones an order id finds; those recorded by stacks that have gone are looked at
    when the running stack knows none. An order id, or the start of a name, that finds several traces
    the latest and lists them all first, with how to pick another. Raises SystemExit, in words, when
    nothing is found."""
    from saga_local.commands import executions
    from saga_local.stack import archive

    state = running.read_state(targets.STATE_FILE)
    where = "no local stack is running (`saga up` starts one)"
    if state is not None and running.gone(state):
        where = f"the local stack at {state.get('endpoint')} has gone (`saga up` starts it again)"
    listed: list[executions.Listed] = []
    sfn: Any = None
    state_machine = ""
    if args.stack or local_state() is not None:
        target = resolve_target(args)
        where = target.where
        sfn = target.clients("stepfunctions")
        state_machine = target.outputs["PaymentSagaStateMachineArn"]
        try:
            return Found(archive.read_execution(sfn, execution_arn(state_machine, args.execution)))
        except (sfn.exceptions.ExecutionDoesNotExist, sfn.exceptions.InvalidArn):
            pass
        listed = executions.from_stack(sfn, state_machine)
    found = executions.find(listed, args.execution)
    if not args.stack:
        recorded = archive.load(args.execution)
        if recorded is not None:
            return Found(recorded)
        if not found:
            # Only what no running stack knows: a stack that has gone, a demo, a simulation.
            live = {e.name for e in listed}
            listed += [e for e in executions.from_archive(archive.ARCHIVE_DIR) if e.name not in live]
            found = executions.find(listed, args.execution)
    if not found:
        # One line: the mistake, then what to paste instead.
        recent = [e.name + (" (recorded)" if e.recorded else "") for e in listed[:5]]
        latest = f"; the latest: {', '.join(recent)}" if recent else ""
        raise SystemExit(
            f"saga trace: no execution named {args.execution!r}, nor one of an order by that id: {where},"
            " and none was recorded by that name (names look like ORDER-003-<MessageId>; `saga send`"
            f" prints them){latest}"
        )
    newest = found[0]  # the lists are newest first
    kept = archive.load(newest.name) if newest.recorded else None
    chosen = kept or archive.read_execution(sfn, execution_arn(state_machine, newest.name))
    if len(found) == 1:
        return Found(chosen)
    return Found(chosen, _several(args.execution, where, found, sfn, state_machine))


def _several(text: str, where: str, found: list[Any], sfn: Any, state_machine: str) -> list[str]:
    """What `saga trace` says before the latest of the executions ``text`` starts: each with its
    status, and how to trace another."""
    from saga_local.commands import executions

    shown = executions.with_errors(sfn, state_machine, found[:20]) if sfn is not None else found[:20]
    lines = [f"{len(found)} executions start with {text!r} ({where}), newest first:"]
    lines += [f"  {e.line()}" for e in shown]
    if len(found) > 20:
        lines.append(f"  ... and {len(found) - 20} more (saga executions --order-id lists them all)")
    lines.append(f"Tracing the latest, {found[0].name} (saga trace NAME traces another):")
    return lines


def cmd_trace(args: argparse.Namespace) -> int:
    """``saga trace``: one execution state by state, or its graph page with --html."""
    from saga_local import trace
    from saga_local.trace.redact import redacted_description, redacted_history

    chosen = find_execution(args)
    found = chosen.execution
    definition = trace.load_definition(found.definition)
    # Who pays and with what stays out of a page made to be shared, unless --io asks for the data.
    description, history = found.description, found.history
    if not args.io:
        description, history = redacted_description(description), redacted_history(history)
    if args.html:
        page = trace.render_html(description, history, definition)
        try:
            with open(args.html, "w", encoding="utf-8") as page_file:
                page_file.write(page)
        except OSError as exc:
            raise SystemExit(f"saga trace: cannot write {args.html}: {exc.strerror}") from None
        Out()("\n".join([*chosen.preface, f"wrote {args.html}"]))
        return 0
    out = Out()
    if chosen.preface:
        out("\n".join(chosen.preface) + "\n")
    text = trace.render_text(description, history, definition, show_io=args.io, color=out.color)
    afterwards = _after_the_execution(args, found.description)
    out(text + ("\n" + "\n".join(afterwards) + "\n" if afterwards else ""))
    return 0


def _after_the_execution(args: argparse.Namespace, description: dict[str, Any]) -> list[str]:
    """What closed the execution's claim after it ended (a webhook, the sweeper), from the stack's
    outcome archive; nothing when no stack runs or it keeps no archive."""
    if not (args.stack or local_state() is not None):
        return []
    target = resolve_target(args)
    url = target.outputs.get("OutcomeArchiveQueueUrl")
    try:
        order_id = json.loads(description.get("input") or "{}")["order"]["orderId"]
    except (ValueError, KeyError, TypeError):
        return []
    if not url or not isinstance(order_id, str):
        return []
    return after_the_execution(peek(target.clients("sqs"), url), order_id)


_AFTERWARDS = {"webhook": "a Stripe webhook (the consumer's write)", "sweeper": "the sweeper"}


def after_the_execution(events: Iterable[OutcomeEvent], order_id: str) -> list[str]:
    """What ``saga trace`` adds after an execution's own steps: the final outcomes of its order that a
    webhook or the sweeper published (``resolvedBy``). A webhook often closes the claim while the
    execution still retries a step whose answer it lost, so these are not only what came after."""
    lines = []
    for event in deduplicated(events):
        by = event.detail.get("resolvedBy")
        if event.order_id != order_id or not event.final or by not in _AFTERWARDS:
            continue
        charge = event.detail.get("chargeId")
        when = event.detail.get("occurredAt") or event.time
        with_charge = f", with {charge}" if charge else ""
        lines.append(f"  {when}  {event.detail_type} by {_AFTERWARDS[str(by)]}{with_charge}")
    return [f"Besides its steps, order {order_id}'s claim was closed by:", *lines] if lines else []
