"""``saga send``: put an order on the stack's queue and name the executions it starts."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from saga_local.commands.trace import execution_arn
from saga_local.output import Out, plural
from saga_local.stack.targets import Target, resolve_target


def cmd_send(args: argparse.Namespace) -> int:
    """``saga send``: send an order (copies of it) and print the executions it starts."""
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
    out(f"sent {plural(args.copies, 'message')} to {target.where}")
    from saga_local.harness.redrive import rejection_reason

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
