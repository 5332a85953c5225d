"""``saga``: run, watch and break the payment saga, locally or against a deployed stack.

saga demo                      the lab of field report 000, guard off then on, then a decline
saga up                        start the embedded local stack and keep it running
saga send [FILE] [--copies N]  send an order (events/order.json by default)
saga trace EXECUTION [--html]  an execution state by state, or as a graph page (or an order id)
saga executions [--status S]   the executions, newest first (--order-id, --since), as the console lists
saga events [--order-id ID]    the outcome events published (charged, declined, re-queued...)
saga logs [FUNCTION...]        the functions' log events (--order-id, --filter, --tail), as `sam logs`
saga fault KIND                break the running stack's provider (outage, lost-answer; clear)
saga invoke FUNCTION -e EVENT  one function on one event, as `sam local invoke` runs it (no Docker)
saga simulate --orders N ...   many orders, duplicates and concurrency; a report
saga chaos --orders N ...      the same with random faults everywhere, then the sweeper
saga reconcile [--apply]       what the sweeper would do with stale claims (an order needs a person)
saga redrive [--apply]         move the dead-letter queue back to the orders queue (dry run by default)
saga replay-parked             replay the records the outcome relay parked (dry run; --apply)
saga cost [--wide]             AWS cost per million orders, from usage counted in a local run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga_local.commands import running
from saga_local.commands.arguments import Parser, count, duration, port, seconds, share
from saga_local.output import Out, handlers_quiet
from saga_local.paths import STATE_DIR
from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from saga_local.stack.archive import RecordedExecution


def cmd_demo(args: argparse.Namespace) -> int:
    from saga_local.commands.demo import run_demo

    return run_demo(args.runtime)


# -- targets: the local stack `saga up` runs, or a deployed one ------------------------------------

STATE_FILE = STATE_DIR / "stack.json"
#: Held by `saga up` while it runs (saga_local/commands/running.py): one stack per state directory.
LOCK_FILE = STATE_DIR / "up.lock"


@dataclass
class Target:
    """Where commands send and read: clients, and the stack's outputs (queue URL, state machine ARN...)."""

    clients: Callable[[str], Any]
    outputs: dict[str, str]
    where: str


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    """A deployed stack's outputs, by key (what `sam deploy` printed)."""
    stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def _gone_message(command: str, state: dict[str, Any]) -> str:
    return (
        f"saga {command}: the local stack at {state.get('endpoint')} ({running.describe(state)}) has gone"
        " without stopping cleanly: start it again with `saga up` (another terminal), or pass --stack NAME."
    )


def local_state() -> dict[str, Any] | None:
    """The description of the `saga up` stack that runs now, or None (none started, or it has gone)."""
    state = running.read_state(STATE_FILE)
    return None if state is None or running.gone(state) else state


def resolve_target(args: argparse.Namespace) -> Target:
    import boto3

    if getattr(args, "stack", None):
        region, endpoint = args.region, args.endpoint_url

        def clients(service: str) -> Any:
            return boto3.client(service, region_name=region, endpoint_url=endpoint)  # type: ignore[call-overload]

        return Target(clients, stack_outputs(clients("cloudformation"), args.stack), f"stack {args.stack}")
    command = getattr(args, "command", None) or "saga"
    state = running.read_state(STATE_FILE)
    if state is None:
        raise SystemExit(
            f"saga {command}: no local stack is running: start one with `saga up` (another terminal),"
            " or pass --stack NAME."
        )
    if running.gone(state):
        raise SystemExit(_gone_message(command, state))

    def local_clients(service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=state["endpoint"],
            region_name=state["region"],
            aws_access_key_id="local",
            aws_secret_access_key="local",  # noqa: S106 - moto accepts any credentials
        )

    return Target(local_clients, state["outputs"], f"local stack at {state['endpoint']}")


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", help="a deployed stack's name (default: the local stack of `saga up`)")
    parser.add_argument(
        "--region",
        default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        help="the deployed stack's region (default: AWS_REGION, AWS_DEFAULT_REGION or the profile's)",
    )
    parser.add_argument("--endpoint-url", help=argparse.SUPPRESS)  # tests point --stack at moto


# -- up ------------------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    """Run the embedded stack until Ctrl-C; refuse while another `saga up` runs from this state directory."""
    out = Out()
    log_dir = STATE_DIR / "logs"
    try:
        with running.exclusive(LOCK_FILE, STATE_FILE):
            return _serve_up(args, out, log_dir)
    except running.AlreadyRunning as exc:
        raise SystemExit(f"saga up: {exc}") from None


def _serve_up(args: argparse.Namespace, out: Out, log_dir: Path) -> int:
    from saga_local.aws.stack import REGION
    from saga_local.commands.activity import Activity
    from saga_local.commands.invoke import write_sam_env_file
    from saga_local.private_files import write_private_text
    from saga_local.stack.embedded import EmbeddedStack

    visibility = 30
    with EmbeddedStack(
        port=args.port, runtime=args.runtime, log_dir=log_dir, visibility_timeout=visibility
    ) as stack:
        sam_env = write_sam_env_file(stack.stack, stack.endpoint)
        state = {
            "endpoint": stack.endpoint,
            "region": REGION,
            "outputs": stack.stack.outputs,
            "provider": stack.provider.url,
            # The emulator's /_emulator/* routes need it: this file is the local tooling's way in.
            "providerAdminToken": stack.provider.admin_token,
            "samEnvVars": str(sam_env),
            "pid": os.getpid(),
        }
        scheduled = stack.schedule_sources(compress=visibility / _template_visibility_timeout())
        for source in scheduled:
            source.interval = args.sweep_every or source.interval
        state["schedules"] = {s.schedule.logical_id: s.interval for s in scheduled}
        write_private_text(STATE_FILE, json.dumps(state, indent=2))
        banner = up_banner(stack.endpoint, stack.stack.outputs, stack.provider.url, log_dir, sam_env)
        for source in scheduled:
            label = f"{source.schedule.logical_id} schedule"
            banner.insert(
                banner.index(""),
                f"  {label:28} every {source.interval:g} s ({source.schedule.expression} in template.yaml,"
                " compressed as the queues' waits are; leases are not)",
            )
        for line in banner:
            out(out.bold(line) if line.startswith("Embedded stack") else line)
        out("")
        out("Executions, as each ends (recorded: `saga trace NAME` shows them after this stops):")
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        watcher = threading.Thread(target=Activity(stack, out).run, args=(stop,), daemon=True)
        watcher.start()
        try:
            stack.serve(stop, pollers=args.pollers, scheduled=scheduled)
            watcher.join()
        finally:
            for path in (STATE_FILE, sam_env):  # both describe a stack that is gone
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
    out("stopped")
    return 0


def _template_visibility_timeout() -> int:
    """The orders queue's VisibilityTimeout in template.yaml: the local waits are compressed against it."""
    from saga_local.template import load_template

    return int(load_template()["Resources"]["OrdersQueue"]["Properties"]["VisibilityTimeout"])


def _relative(path: Path) -> str:
    """``path`` relative to the project root when it is inside it (what a user can paste from there)."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def up_banner(
    endpoint: str, outputs: dict[str, str], provider: str, log_dir: Path, sam_env: Path
) -> list[str]:
    """What `saga up` prints: the resources, then commands that work as printed.

    The AWS CLI lines name ``--endpoint-url`` explicitly: AWS CLI v1 (and v2 before 2.13) ignore
    ``AWS_ENDPOINT_URL``; the ``export AWS_ENDPOINT_URL`` line is for the rest (v2, boto3, SAM CLI).
    Credentials and region come from the environment in both versions.
    """
    from saga_local.aws.stack import REGION

    queue, machine = outputs["OrdersQueueUrl"], outputs["PaymentSagaStateMachineArn"]
    lines = [f"Embedded stack running on {endpoint}  (Ctrl-C stops it)"]
    lines += [f"  {key:28} {value}" for key, value in sorted(outputs.items())]
    lines += [
        f"  {'Provider (Stripe emulator)':28} {provider}",
        f"  {'Function logs (JSON)':28} {log_dir}/",
        f"  {'SAM env-vars file':28} {_relative(sam_env)}",
        "",
        "From another terminal, in this directory:",
        "  saga send --copies 4 --wait          # then: saga trace <name it prints>",
        "  saga invoke ClaimOrderFunction -e events/claim_order.json",
        "",
        "The AWS CLI (v1 or v2) or boto3:",
        f"  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION={REGION}",
        f"  export AWS_ENDPOINT_URL={endpoint}   # read by AWS CLI v2 (2.13+), boto3 and SAM CLI; not by v1",
        f"  aws --endpoint-url {endpoint} sqs send-message --queue-url {queue}"
        " --message-body file://events/order.json",
        f"  aws --endpoint-url {endpoint} stepfunctions list-executions --state-machine-arn {machine}",
        f"  boto3.client('stepfunctions', endpoint_url='{endpoint}', region_name='{REGION}')",
        "",
        "With Docker, SAM CLI's own local invoke against this stack (Linux: host network):",
        f"  sam local invoke ClaimOrderFunction -e events/claim_order.json --env-vars {_relative(sam_env)}"
        f" --docker-network host --region {REGION}",
    ]
    return lines


# -- send ----------------------------------------------------------------------------------------


def cmd_send(args: argparse.Namespace) -> int:
    out = Out()
    if args.body is not None:
        body = args.body
    else:
        order = _read_order(args.file)
        for field, value in (
            ("orderId", args.order_id),
            ("amount", args.amount),
            ("currency", args.currency),
            ("customerId", args.customer_id),
            ("paymentMethod", args.payment_method),
            ("paymentAttempt", args.payment_attempt),
            ("providerCustomerId", args.provider_customer_id),
        ):
            if value is not None:
                order[field] = value
        body = json.dumps(order)
    target = resolve_target(args)
    sqs = target.clients("sqs")
    queue_url = target.outputs["OrdersQueueUrl"]
    names = []
    for _ in range(args.copies):
        message_id = sqs.send_message(QueueUrl=queue_url, MessageBody=body)["MessageId"]
        names.append(message_id)
    out(f"sent {args.copies} message(s) to {target.where}")
    from saga_local.commands.redrive import rejection_reason

    rejection = rejection_reason(body)
    if rejection is not None:
        # The start function validates with the same code: no execution starts, so there is nothing to trace.
        for message_id in names:
            out(f"  {message_id}  dead-lettered: {rejection}")
        out("  (the start function sends it to the dead-letter queue with that reason; no claim is written)")
        return 0
    from payment_saga.execution_names import execution_name

    order_id = str(json.loads(body)["orderId"])
    executions = []
    for message_id in names:
        name = execution_name(order_id, message_id)
        executions.append(name)
        out(f"  {message_id}  ->  saga trace {name}")
    if args.wait:
        return _wait_for(out, target, executions, timeout=args.wait_seconds)
    return 0


def _wait_for(out: Out, target: Target, names: list[str], *, timeout: float) -> int:
    """Wait for each execution to end and print its path and outcome, as `saga demo` does; 1 if one
    did not end in time (it may not have started: the start function has not run yet)."""
    from saga_local.commands.demo import describe_path

    sfn = target.clients("stepfunctions")
    machine = target.outputs["PaymentSagaStateMachineArn"]
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            result = _ended(sfn, execution_arn(machine, name))
            if result is not None:
                out(f"  {name}")
                out(f"    {describe_path(out, result)}")
                pending.remove(name)
        if pending:
            time.sleep(0.5)
    for name in pending:
        out(f"  {name}  did not end within {timeout:g} s (saga trace {name} shows where it is)")
    return 1 if pending else 0


def _ended(sfn: Any, arn: str) -> Any:
    """The execution's ExecutionResult once it has ended; None while it runs or has not started."""
    from saga_local.stack.driver import ExecutionResult

    try:
        described = sfn.describe_execution(executionArn=arn)
    except sfn.exceptions.ExecutionDoesNotExist:
        return None  # not started yet: the start function has not read the message
    if described["status"] in ("RUNNING", "PENDING_REDRIVE"):
        return None
    pages = sfn.get_paginator("get_execution_history").paginate(executionArn=arn)
    entered = [e for page in pages for e in page["events"] if e["type"].endswith("StateEntered")]
    return ExecutionResult(
        arn=arn,
        name=described["name"],
        status=described["status"],
        order_id=None,
        output=json.loads(described["output"]) if described.get("output") else None,
        error=described.get("error"),
        cause=described.get("cause"),
        path=[e["stateEnteredEventDetails"]["name"] for e in entered],
    )


def _read_order(path: str) -> dict[str, Any]:
    """The order in ``path``, or SystemExit saying in one line why it cannot be sent."""
    try:
        with open(path, encoding="utf-8") as order_file:
            text = order_file.read()
    except OSError as exc:
        raise SystemExit(f"saga send: cannot read {path}: {exc.strerror}") from None
    try:
        order = json.loads(text)
    except ValueError as exc:
        raise SystemExit(
            f"saga send: {path} is not valid JSON ({exc}); to send a malformed body on purpose, use --body"
        ) from None
    if not isinstance(order, dict):
        raise SystemExit(f"saga send: {path} holds no order (a JSON object); use --body to send it as is")
    return order


# -- trace ---------------------------------------------------------------------------------------


def execution_arn(state_machine_arn: str, execution: str) -> str:
    """An execution ARN from its name (execution ARNs are the state machine's, renamed)."""
    if execution.startswith("arn:"):
        return execution
    return state_machine_arn.replace(":stateMachine:", ":execution:") + ":" + execution


def find_execution(args: argparse.Namespace) -> RecordedExecution:
    """The execution ``args.execution`` names: on the target stack (``--stack``, or the local stack of
    `saga up` when one runs), else among those recorded (`saga demo`, `saga simulate`, `saga chaos`).
    An order id, or the start of a name, finds the one execution it starts. Raises SystemExit, in
    words, when none does, or listing them with their status when several do."""
    from saga_local.commands import executions
    from saga_local.stack import archive

    state = running.read_state(STATE_FILE)
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
            return archive.read_execution(sfn, execution_arn(state_machine, args.execution))
        except (sfn.exceptions.ExecutionDoesNotExist, sfn.exceptions.InvalidArn):
            pass
        listed = executions.from_stack(sfn, state_machine)
    if not args.stack:
        recorded = archive.load(args.execution)
        if recorded is not None:
            return recorded
        listed += executions.from_archive(archive.ARCHIVE_DIR)
    found = executions.find(listed, args.execution)
    if len(found) == 1:
        (only,) = found
        kept = archive.load(only.name) if only.recorded else None
        return kept or archive.read_execution(sfn, execution_arn(state_machine, only.name))
    if found:
        raise SystemExit(_several(args.execution, where, found, sfn, state_machine))
    # One line: the mistake, then what to paste instead.
    recent = [e.name + (" (recorded)" if e.recorded else "") for e in listed[:5]]
    latest = f"; the latest: {', '.join(recent)}" if recent else ""
    raise SystemExit(
        f"saga trace: no execution named {args.execution!r}, nor one of an order by that id: {where},"
        " and none was recorded by that name (names look like ORDER-003-<MessageId>; `saga send`"
        f" prints them){latest}"
    )


def _several(text: str, where: str, found: list[Any], sfn: Any, state_machine: str) -> str:
    """What `saga trace` says when ``text`` starts several executions: each with its status, to pick."""
    from saga_local.commands import executions

    shown = executions.with_errors(sfn, state_machine, found[:20]) if sfn is not None else found[:20]
    lines = [f"saga trace: {len(found)} executions start with {text!r} ({where}); name one:"]
    lines += [f"  {e.line()}" for e in shown]
    if len(found) > 20:
        lines.append(f"  ... and {len(found) - 20} more (saga executions --order-id lists them all)")
    return "\n".join(lines)


def cmd_executions(args: argparse.Namespace) -> int:
    """The state machine's executions, newest first, as the console lists them (commands/executions.py)."""
    from datetime import UTC, datetime, timedelta

    from saga_local.commands import executions
    from saga_local.stack import archive

    since = datetime.now(UTC) - timedelta(seconds=args.since) if args.since is not None else None
    if args.stack or local_state() is not None:
        target = resolve_target(args)
        sfn = target.clients("stepfunctions")
        state_machine = target.outputs["PaymentSagaStateMachineArn"]
        listed = executions.from_stack(sfn, state_machine, status=args.status)
        chosen = executions.select(listed, status=args.status, order_id=args.order_id, since=since)
        chosen = executions.with_errors(sfn, state_machine, chosen[: args.limit])
        where = target.where
    else:
        listed = executions.from_archive(archive.ARCHIVE_DIR)
        chosen = executions.select(listed, status=args.status, order_id=args.order_id, since=since)
        chosen = chosen[: args.limit]
        where = f"recorded in {_relative(archive.ARCHIVE_DIR)}; no local stack is running"
    Out()(executions.render(chosen, where))
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from saga_local import trace
    from saga_local.trace.redact import redacted_description, redacted_history

    found = find_execution(args)
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
        Out()(f"wrote {args.html}")
        return 0
    out = Out()
    out(trace.render_text(description, history, definition, show_io=args.io, color=out.color))
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    """The outcome events the stack published (saga_local/commands/events.py)."""
    from saga_local.commands import events

    target = resolve_target(args)
    text = events.command(target.clients, target.outputs, target.where, order_id=args.order_id, raw=args.json)
    Out()(text.rstrip("\n"))
    return 0


# -- simulate ------------------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    from saga_local.harness import simulate
    from saga_local.stack.embedded import EmbeddedStack

    progress = None if args.json else simulate.progress_bar
    with (
        handlers_quiet(),
        EmbeddedStack(
            runtime=args.runtime, visibility_timeout=60, max_workers=args.concurrency, quiet=True
        ) as stack,
    ):
        report = simulate.run(
            stack,
            orders=args.orders,
            copies=args.copies,
            concurrency=args.concurrency,
            decline_rate=args.decline_rate,
            seed=args.seed,
            progress=progress,
            retire_after=simulate.RETIRE_AFTER_SECONDS,
        )
        # The stack stops with this command: what did not succeed is kept for `saga trace NAME`.
        recorded = simulate.record_unhappy(stack)
    if args.json:
        print(json.dumps({**report.to_dict(), "recorded": recorded.to_dict()}, indent=2))
    else:
        sys.stderr.write("\n")
        Out()("\n".join([simulate.render(report), *simulate.render_recorded(recorded)]))
    return 0 if report.promise_kept else 1


# -- reconcile, redrive, chaos -------------------------------------------------------------------


def cmd_reconcile(args: argparse.Namespace) -> int:
    from payment_saga.claims import ClaimsStore
    from payment_saga.payments import StripeProvider
    from payment_saga.reconcile import reconcile
    from saga_local.aws.stack import LOCAL_API_KEY
    from saga_local.harness.sweep import not_due, reconcile_deployed, render

    waiting = None
    if args.stack:
        report = reconcile_deployed(args.stack, apply=args.apply, region=args.region)
    else:
        target = resolve_target(args)
        state = json.loads(STATE_FILE.read_text())
        # Locally, --later looks past a lease without waiting for it; against AWS, time is time.
        now = time.time() + args.later
        store = ClaimsStore(
            target.outputs["ClaimsTableName"], client=target.clients("dynamodb"), clock=lambda: now
        )
        provider = StripeProvider(LOCAL_API_KEY, api_base=state["provider"])
        report = reconcile(store, provider, now=now, apply=args.apply, search_grace_seconds=args.grace)
        waiting = not_due(store, now)  # why nothing more is due: the leases still running
    Out()(render(report, waiting=waiting))
    return 0


def cmd_redrive(args: argparse.Namespace) -> int:
    from saga_local.commands.redrive import redrive, render, render_survey, survey

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


def cmd_replay_parked(args: argparse.Namespace) -> int:
    from payment_saga.outcomes import OutcomeRelay
    from saga_local.commands.replay import ReplayError, render, replay, requeue_policy

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


# -- logs ----------------------------------------------------------------------------------------


def cmd_logs(args: argparse.Namespace) -> int:
    """The functions' log lines: .saga/logs/ locally, CloudWatch Logs with --stack (commands/logs.py)."""
    from saga_local.commands import logs

    try:
        names = logs.resolve_functions(args.function)
    except logs.LogsError as exc:
        raise SystemExit(f"saga logs: {exc}") from None
    since = time.time() - args.since if args.since is not None else None
    source: logs.LocalLogs | logs.CloudWatchLogs
    if args.stack:
        target = resolve_target(args)
        groups = logs.log_group_names(args.stack, names)
        # As `sam logs`: the last 10 minutes unless told otherwise.
        start = since if since is not None else time.time() - 600
        source = logs.CloudWatchLogs(target.clients("logs"), groups, since=start, order_id=args.order_id)
    else:
        directory = STATE_DIR / "logs"
        if not directory.is_dir():
            raise SystemExit(
                f"saga logs: no function logs in {_relative(directory)}: `saga up` writes them there (another"
                " terminal); or pass --stack NAME for a deployed stack's CloudWatch Logs."
            )
        source = logs.LocalLogs(directory, names)
    out = Out()
    try:
        shown = logs.follow(
            source,
            out,
            order_id=args.order_id,
            text=args.filter,
            metrics=args.metrics,
            raw=args.json,
            tail=args.tail,
            since=since,
        )
    except KeyboardInterrupt:  # --tail ends with Ctrl-C
        return 0
    if not shown:
        sys.stderr.write("saga logs: no log line matches (fewer filters, or --since further back?)\n")
    return 0


# -- fault -------------------------------------------------------------------------------------


def cmd_fault(args: argparse.Namespace) -> int:
    """A provider fault on the running `saga up` (commands/fault.py)."""
    from saga_local.commands import fault

    state = running.read_state(STATE_FILE)
    if state is None:
        raise SystemExit(
            "saga fault: no local stack is running: start one with `saga up` (another terminal)."
        )
    if running.gone(state):
        raise SystemExit(_gone_message("fault", state))
    try:
        said = fault.apply(
            str(state["provider"]),
            args.kind,
            token=str(state.get("providerAdminToken", "")),
            order_id=args.order_id,
            times=args.times,
        )
    except fault.FaultError as exc:
        raise SystemExit(f"saga fault: {exc}") from None
    Out()(said)
    return 0


# -- invoke --------------------------------------------------------------------------------------


def cmd_invoke(args: argparse.Namespace) -> int:
    """One function on one event, as `sam local invoke` runs it: result on stdout, logs on stderr."""
    from pathlib import Path

    from saga_local.commands.invoke import SAM_ENV_FILE, InvokeError, invoke

    state = running.read_state(STATE_FILE)
    if args.env_vars:
        env_vars = Path(args.env_vars)
    elif state is not None and running.gone(state):
        raise SystemExit(_gone_message("invoke", state))
    elif state is not None and SAM_ENV_FILE.exists():
        env_vars = SAM_ENV_FILE
    else:
        raise SystemExit(
            "saga invoke: no local stack is running. Start one with `saga up` (another terminal): it writes"
            f" {_relative(SAM_ENV_FILE)}, which points every function at it. Or pass --env-vars FILE"
            " (SAM's format) for another stack."
        )
    try:
        result = invoke(args.function, Path(args.event), env_vars, region=args.region)
    except InvokeError as exc:
        raise SystemExit(f"saga invoke: {exc}") from None
    print(result.payload, flush=True)
    if result.function_error:
        sys.stderr.write(
            f"saga invoke: {args.function} failed ({result.function_error}); its error is above\n"
        )
        return 1
    return 0


# -- cost ----------------------------------------------------------------------------------------


def _sweeper_schedule() -> str:
    """The sweeper's ScheduleV2 expression, from template.yaml."""
    from saga_local.template import functions, load_template

    for spec in functions(load_template()).values():
        for event in spec.events.values():
            if event.get("Type") in ("ScheduleV2", "Schedule"):
                return str(event["Properties"]["ScheduleExpression"])
    raise LookupError("template.yaml: no scheduled function")


def cmd_cost(args: argparse.Namespace) -> int:
    """AWS cost per million orders, from usage counted in a local run; list prices in commands/prices.json."""
    from saga_local.commands.demo import seed_order
    from saga_local.harness import cost
    from saga_local.harness.cost_measure import GB, PLATFORM_LOG_BYTES, measure_order, sweeps_per_month
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.template import load_template

    assumed = {"xray_sampled": args.xray_sampling, "cold_start_share": args.cold_starts}
    # LogLevel as deployed (INFO): the function logs are a line of the bill.
    with handlers_quiet(), EmbeddedStack(runtime="inprocess") as stack:
        for i in range(3):  # warm the handlers: cold imports are not what an order costs
            measure_order(stack, seed_order(f"ORDER-WARM-{i}"), **assumed)
        happy = measure_order(stack, seed_order("ORDER-COST"), **assumed)
        duplicate = measure_order(stack, seed_order("ORDER-COST"), **assumed)
    share = args.duplicate_share

    def mix(field: str) -> float:
        return float(getattr(happy, field) + share * getattr(duplicate, field))

    mixed = cost.Usage(**{f: mix(f) for f in cost.Usage.__dataclass_fields__})
    step_ms = happy.lambda_gb_seconds / (256 / 1024) * 1000  # the same work, done by one function
    mix_name = f"mix {share:.0%}"
    rows = {
        "happy": happy,
        "duplicate": duplicate,
        mix_name: mixed,
        "1 Lambda": cost.single_lambda_baseline_usage(
            duration_ms=step_ms,
            # The same application log lines, and Lambda's own lines for one invocation instead of several.
            log_gb=happy.lambda_log_gb - (happy.lambda_invocations - 1) * PLATFORM_LOG_BYTES / GB,
            xray_traces=args.xray_sampling,
            secrets_manager_calls=args.cold_starts,
        ),
    }
    legend = {
        "happy": "the saga, happy path (one delivery, charged)",
        "duplicate": "the saga, a duplicate delivery (suppressed by the claim)",
        mix_name: f"the saga, {share:.0%} of orders delivered twice",
        "1 Lambda": "one Lambda + Powertools idempotency, no Step Functions (what it would replace)",
    }
    sweeps = sweeps_per_month(_sweeper_schedule())
    monthly = {"scheduler": (sweeps, f"{sweeps:,.0f} runs"), "secret": (1.0, "1 secret")}
    monthly.update(cost.stack_monthly_quantities(load_template()))  # alarms, dashboard, key, metrics, PITR
    notes = [
        f"Assumed: X-Ray samples {args.xray_sampling:.0%} of requests (--xray-sampling; its default rule past"
        " 1 a second);",
        f"  {args.cold_starts:.0%} of Charge Payment invocations start cold and read the secret"
        " (--cold-starts).",
        "Counted locally: everything else, against the emulator (a real provider adds Lambda duration).",
        "Outcome events: one PutEvents entry per charged order (OrderCharged, from the claims stream);",
        "  Lambda reads the stream for free; the relay's invocation is counted whole here (one order at a",
        "  time), where AWS batches up to 100 closed claims into one.",
    ]
    prices = cost.load_prices()
    if args.json:
        document: dict[str, Any] = {
            name: {"usage": vars(u), "usd_per_million": cost.cost_per_million(u, prices)}
            for name, u in rows.items()
        }
        document["per_month"] = cost.monthly_costs({k: q for k, (q, _) in monthly.items()}, prices)
        print(json.dumps(document, indent=2))
    else:
        Out()(cost.render_table(rows, prices, legend=legend, wide=args.wide, monthly=monthly, notes=notes))
    return 0


# -- entry point ---------------------------------------------------------------------------------


def _add_demo(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="the lab of field report 000: four charges without the claim, one with it"
    )
    demo.add_argument(
        "--runtime",
        choices=["workers", "inprocess"],
        default="workers",
        help="run handlers in worker processes (as Lambda) or in threads",
    )
    demo.set_defaults(func=cmd_demo)


def _add_up(sub: Any) -> None:
    up = sub.add_parser("up", help="start the embedded local stack and keep it running")
    up.add_argument("--port", type=port, default=0, help="moto's port (0: a free one)")
    up.add_argument(
        "--runtime",
        choices=["workers", "inprocess"],
        default="workers",
        help="run handlers in worker processes (as Lambda) or in threads",
    )
    up.add_argument("--pollers", type=count(), default=2, help="concurrent SQS pollers")
    up.add_argument(
        "--sweep-every",
        type=count(),
        default=None,
        metavar="SECONDS",
        help="run the sweeper this often (default: its template schedule, compressed as the queues' waits)",
    )
    up.set_defaults(func=cmd_up)


def _add_send(sub: Any) -> None:
    send = sub.add_parser("send", help="send an order to the orders queue")
    send.add_argument(
        "file", nargs="?", default=str(ROOT / "events" / "order.json"), help="an order JSON file"
    )
    send.add_argument("--copies", type=count(), default=1, help="send it this many times (new MessageIds)")
    send.add_argument("--order-id", help="the order's orderId (default: the file's)")
    send.add_argument("--amount", type=int, help="minor units: 15000 = 150.00")
    send.add_argument("--currency", help="ISO 4217 code, e.g. BRL, USD, JPY")
    send.add_argument("--customer-id", help="the order's customerId")
    send.add_argument("--payment-method", help="e.g. pm_card_visa, pm_card_chargeDeclined")
    send.add_argument("--payment-attempt", help="a customer's deliberate retry of a declined order")
    send.add_argument("--provider-customer-id", help="the Stripe Customer (cus_...) a saved card belongs to")
    send.add_argument("--body", help="send this raw body instead (e.g. a malformed message)")
    send.add_argument(
        "--wait", action="store_true", help="wait for each execution to end and print its path and outcome"
    )
    send.add_argument(
        "--wait-seconds", type=count(), default=120, metavar="SECONDS", help="how long --wait waits"
    )
    add_target_arguments(send)
    send.set_defaults(func=cmd_send)


def _add_trace(sub: Any) -> None:
    trace = sub.add_parser("trace", help="an execution state by state (or --html for the graph page)")
    trace.add_argument(
        "execution", help="the execution's name or ARN, or an order id (or a name's start) that finds one"
    )
    trace.add_argument(
        "--io",
        action="store_true",
        help="show each state's input and output, payment method and customers unredacted",
    )
    trace.add_argument("--html", metavar="FILE", help="write a self-contained page with the graph")
    add_target_arguments(trace)
    trace.set_defaults(func=cmd_trace)


def _add_executions(sub: Any) -> None:
    from saga_local.commands.executions import STATUSES

    ex = sub.add_parser(
        "executions",
        help="the state machine's executions, newest first, as the console lists them",
        description="The state machine's executions (the local stack of `saga up`, --stack NAME, or, with"
        " neither, those `saga demo`, `saga simulate` and `saga chaos` recorded), newest first: start,"
        " status, duration, error, name (what `saga trace` takes).",
    )
    ex.add_argument("--status", choices=STATUSES, help="only executions with this status")
    ex.add_argument("--order-id", help="only this order's executions (their names start with its id)")
    ex.add_argument("--since", type=duration, default=None, help="only those started this recently (10m, 2h)")
    ex.add_argument("--limit", type=count(), default=50, help="at most this many")
    add_target_arguments(ex)
    ex.set_defaults(func=cmd_executions)


def _add_events(sub: Any) -> None:
    events = sub.add_parser("events", help="the outcome events published (charged, declined, re-queued...)")
    events.add_argument("--order-id", help="only this order's events")
    events.add_argument("--json", action="store_true", help="one JSON object per event (its detail)")
    add_target_arguments(events)
    events.set_defaults(func=cmd_events)


def _add_logs(sub: Any) -> None:
    lg = sub.add_parser(
        "logs",
        help="the functions' log events, merged in time (as `sam logs`; --tail follows them)",
        description="The functions' log events: .saga/logs/ of `saga up` locally (also after it stopped), or"
        " the functions' CloudWatch Logs groups of a deployed stack (--stack NAME). One line per event:"
        " time, function, level, event, orderId, then its fields.",
    )
    lg.add_argument(
        "function", nargs="*", help="function logical ids (ClaimOrderFunction, or ClaimOrder; default: all)"
    )
    lg.add_argument("--order-id", help="only the events about this order")
    lg.add_argument("--filter", help="only the lines that contain this text (case-insensitive)")
    lg.add_argument("--tail", action="store_true", help="keep printing new lines until Ctrl-C")
    lg.add_argument(
        "--since",
        type=duration,
        default=None,
        help="only lines this recent (90s, 10m, 2h, 1d; default: every local line, 10m with --stack)",
    )
    lg.add_argument("--metrics", action="store_true", help="also the EMF metric lines")
    lg.add_argument("--json", action="store_true", help="print each line as the function wrote it")
    add_target_arguments(lg)
    lg.set_defaults(func=cmd_logs)


def _add_fault(sub: Any) -> None:
    from saga_local.commands.fault import KINDS

    ft = sub.add_parser(
        "fault",
        help="break the running `saga up`'s provider (outage, lost-answer; clear): rehearse the runbook",
    )
    ft.add_argument(
        "kind", choices=KINDS, help="outage: every call fails; lost-answer: a charge's answer is lost"
    )
    ft.add_argument("--order-id", help="lost-answer: only this order's charge (default: the next of any)")
    ft.add_argument("--times", type=count(), default=1, help="lost-answer: this many charges")
    ft.set_defaults(func=cmd_fault)


def _add_invoke(sub: Any) -> None:
    inv = sub.add_parser(
        "invoke",
        help="run one function on an event as `sam local invoke` does, without Docker",
        description="Run one function's handler on an event, the way `sam local invoke` does (the template's"
        " environment, SAM's env-vars file format), in a fresh process, against the embedded stack of"
        " `saga up` (or the stack an --env-vars file points at). The result goes to stdout, logs to stderr.",
    )
    inv.add_argument("function", help="the function's logical id in template.yaml, e.g. ClaimOrderFunction")
    inv.add_argument("-e", "--event", required=True, help="the event JSON file, e.g. events/claim_order.json")
    inv.add_argument(
        "-n",
        "--env-vars",
        help="SAM's env-vars file (default: the one `saga up` wrote, .saga/sam-env.json)",
    )
    inv.add_argument(
        "--region", default=None, help="AWS region for the function (default: the shell's, else us-east-1)"
    )
    inv.set_defaults(func=cmd_invoke)


def _add_simulate(sub: Any) -> None:
    sim = sub.add_parser("simulate", help="many orders with duplicates, then check the promise")
    sim.add_argument("--orders", type=count(), default=100, help="distinct orders")
    sim.add_argument("--copies", type=count(), default=4, help="deliveries of each order")
    sim.add_argument("--concurrency", type=count(), default=4, help="concurrent SQS pollers")
    sim.add_argument("--decline-rate", type=share, default=0.0, help="share of orders with a declined card")
    sim.add_argument("--seed", type=int, default=7, help="the same seed sends the same orders")
    sim.add_argument(
        "--runtime",
        choices=["workers", "inprocess"],
        default="inprocess",
        help="inprocess (default) is several times faster; workers run each function in processes",
    )
    sim.add_argument("--json", action="store_true", help="print the report as JSON")
    sim.set_defaults(func=cmd_simulate)


def _add_reconcile(sub: Any) -> None:
    rec = sub.add_parser("reconcile", help="resolve stale claims by asking the provider (dry run by default)")
    rec.add_argument("--apply", action="store_true", help="write the decisions (default: only show them)")
    rec.add_argument(
        "--later",
        type=seconds,
        default=0.0,
        help="local stack only: decide as if this many seconds had passed (look past a lease)",
    )
    rec.add_argument(
        "--grace", type=count(0), default=3600, help="seconds after a lease ends before a search is trusted"
    )
    add_target_arguments(rec)
    rec.set_defaults(func=cmd_reconcile)


def _add_redrive(sub: Any) -> None:
    red = sub.add_parser(
        "redrive",
        help="move the dead-letter queue back to the orders queue (dry run by default; safe: idempotent)",
    )
    mode = red.add_mutually_exclusive_group()
    mode.add_argument(
        "--apply", action="store_true", help="move the messages (default: only say what would move)"
    )
    mode.add_argument("--dry-run", action="store_true", help="only say what would move (the default)")
    red.add_argument(
        "--include-rejected",
        action="store_true",
        help="also move the messages the start function will reject again (a rejectionReason, or a body"
        " its validation refuses); by default they stay on the dead-letter queue",
    )
    add_target_arguments(red)
    red.set_defaults(func=cmd_redrive)


def _add_replay_parked(sub: Any) -> None:
    replay = sub.add_parser(
        "replay-parked",
        help="replay the stream records the outcome relay parked, through its code (dry run by default)",
    )
    replay.add_argument(
        "--apply", action="store_true", help="replay them and delete each one replayed (default: only check)"
    )
    add_target_arguments(replay)
    replay.set_defaults(func=cmd_replay_parked)


def _add_chaos(sub: Any) -> None:
    # Its options are saga_local.commands.chaos's own: main() hands everything after `chaos` to it.
    sub.add_parser(
        "chaos", help="simulate with faults at every step, then sweep (saga chaos --help)", add_help=False
    )


def _add_cost(sub: Any) -> None:
    costs = sub.add_parser("cost", help="AWS cost per million orders, from figures counted in a local run")
    costs.add_argument(
        "--duplicate-share", type=share, default=0.1, help="share of orders delivered twice (mix)"
    )
    costs.add_argument("--xray-sampling", type=share, default=0.05, help="share of requests X-Ray records")
    costs.add_argument(
        "--cold-starts",
        type=share,
        default=0.01,
        help="share of Charge Payment invocations that start cold and read the secret",
    )
    costs.add_argument("--wide", action="store_true", help="full column names and each line's unit price")
    costs.add_argument("--json", action="store_true", help="print the usage and prices as JSON")
    costs.set_defaults(func=cmd_cost)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="saga", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_demo,
        _add_up,
        _add_send,
        _add_trace,
        _add_executions,
        _add_events,
        _add_logs,
        _add_fault,
        _add_invoke,
        _add_simulate,
        _add_reconcile,
        _add_redrive,
        _add_replay_parked,
        _add_chaos,
        _add_cost,
    ):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``saga`` command; a mistake ends it with one line on stderr and a non-zero exit."""
    try:
        try:
            code = _run(argv)
        finally:
            sys.stdout.flush()  # here, not at exit: a reader that went away fails this flush too (--help)
    except BrokenPipeError:
        # `saga trace ... | head`: the reader has what it wanted. Point stdout at /dev/null so that
        # Python's own flush at exit does not raise again, and exit as a process killed by SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.stderr.write("saga: the output was closed before everything was written (broken pipe)\n")
        return 128 + signal.SIGPIPE
    return code


def _run(argv: Sequence[str] | None) -> int:
    import botocore.exceptions

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "chaos":
        from saga_local.commands import chaos

        return int(chaos.main(extra))
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return int(args.func(args))
    except botocore.exceptions.EndpointConnectionError as exc:
        raise SystemExit(
            f"saga {args.command}: nothing answers at {exc.kwargs.get('endpoint_url')}: is `saga up` still"
            " running? (Start it again, or pass --stack NAME for a deployed stack.)"
        ) from None
    except botocore.exceptions.NoRegionError:
        raise SystemExit(
            f"saga {args.command}: no AWS region for --stack: pass --region REGION, or set AWS_REGION"
            " (or a region in your AWS profile)."
        ) from None
    except botocore.exceptions.NoCredentialsError:
        raise SystemExit(
            f"saga {args.command}: no AWS credentials found for --stack (aws configure)."
        ) from None
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        message = " ".join(str(error.get("Message")).split())  # one line, whatever AWS sent
        raise SystemExit(
            f"saga {args.command}: AWS refused {exc.operation_name}: {error.get('Code')}: {message}"
        ) from None


if __name__ == "__main__":
    sys.exit(main())
