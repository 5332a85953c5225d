"""Drive a provisioned stack: send orders, run the event source, wait, and read what happened.

Used by the tests (moto in-process), the local stack and the ``saga`` command alike, so that what
the tests prove is what the demo shows.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from payment_saga.execution_names import execution_name
from saga_local.aws import moto_adapter
from saga_local.aws.event_source import SqsEventSource
from saga_local.aws.stream_source import StreamEventSource, stream_event_source
from saga_local.stack.outcome_log import OutcomeLog

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from saga_local.aws.stack import Stack

TERMINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}


#: SQS MessageIds are UUIDs: the order's part of an execution name is what the start function's rule
#: (payment_saga.execution_names) leaves before ``-<MessageId>``.
_MESSAGE_ID_LENGTH = 36
_ANY_MESSAGE_ID = "0" * _MESSAGE_ID_LENGTH


def _order_key(order_id: str) -> str:
    return execution_name(order_id, _ANY_MESSAGE_ID)[: -_MESSAGE_ID_LENGTH - 1]


def _order_key_of_name(name: str) -> str | None:
    cut = len(name) - _MESSAGE_ID_LENGTH - 1
    return name[:cut] if cut > 0 and name[cut] == "-" else None


@dataclass(frozen=True)
class ExecutionSummary:
    """One execution as a report counts it: ``order_key`` is the order id its name carries."""

    name: str
    order_key: str | None
    status: str
    error: str | None
    start_date: datetime


@dataclass(frozen=True)
class ExecutionResult:
    """How one execution ended, read from ``DescribeExecution`` and its history."""

    arn: str
    name: str
    status: str
    order_id: str | None
    output: dict[str, Any] | None
    error: str | None
    cause: str | None
    path: list[str]

    @property
    def outcome(self) -> str:
        """``CHARGED``, ``DUPLICATE``, ``AWAITING_SETTLEMENT``, or the Fail state's error
        (``PaymentDeclined``, ``ClaimBusy``...)."""
        if self.status == "SUCCEEDED" and self.output:
            if "duplicate" in self.output:  # Claim Order's DuplicateOrder, caught into Duplicate Suppressed
                return "DUPLICATE"
            if "settlement" in self.output:  # a payment that settles later: the claim is kept for it
                return "AWAITING_SETTLEMENT"
            return str(self.output.get("status"))
        return self.error or self.status

    @property
    def holder_status(self) -> str | None:
        """For a duplicate, the status of the claim that stopped it (``CLAIMED``, ``COMPLETED``...)."""
        if self.outcome != "DUPLICATE" or not self.output:
            return None
        try:
            cause = json.loads(self.output["duplicate"]["Cause"])
            detail = json.loads(cause["errorMessage"])
        except (KeyError, TypeError, ValueError):
            return None
        status = detail.get("holderStatus") if isinstance(detail, dict) else None
        return str(status) if status else None


class Driver:
    """Sends orders to a stack and observes it. ``clients`` maps a service name to a boto3 client."""

    def __init__(self, clients: Any, stack: Stack) -> None:
        self.stack = stack
        self.sqs = clients("sqs")
        self.sfn = clients("stepfunctions")
        self.dynamodb = clients("dynamodb")
        self.lambda_client = clients("lambda")
        start_function = stack.function_name("StartExecutionFunction")
        self.event_source = SqsEventSource(
            self._as_function(clients("sqs"), start_function),
            self.lambda_client,
            stack.queue_url,
            stack.resolver.attrs[("OrdersQueue", "Arn")],
            stack.function_name("StartExecutionFunction"),
            batch_size=int(
                stack.functions[stack.function_name("StartExecutionFunction")][0]
                .events["Orders"]["Properties"]
                .get("BatchSize", 10)
            ),
        )
        #: The claims table's stream -> the outcome relay (None if the template has no stream function).
        self.stream_source: StreamEventSource | None = None
        for name, (spec, _) in stack.functions.items():
            streams = [e["Properties"]["Stream"] for e in spec.events.values() if e.get("Type") == "DynamoDB"]
            stream_arn = str(stack.resolver.resolve(streams[0])) if streams else None
            self.stream_source = self.stream_source or stream_event_source(
                spec,
                clients=functools.partial(self._client_as, clients, name, stream_arn),
                resolve=stack.resolver.resolve,
                function_name=name,
                function_arn=stack.resolver.attrs[(spec.logical_id, "Arn")],
                queue_url_of=lambda arn: str(
                    self.sqs.get_queue_url(QueueName=arn.rsplit(":", 1)[-1])["QueueUrl"]
                ),
            )
        #: The webhook queue's event source (the WebhookConsumerFunction), when the stack serves
        #: Stripe's webhooks (``EmbeddedStack(webhooks=True)``): :meth:`polling` and ``serve`` run it.
        self.webhook_source: SqsEventSource | None = None
        #: Whether the provider has no webhook delivery queued or in flight (set with the source).
        self.webhook_deliveries_idle: Callable[[], bool] = lambda: True
        #: Whether :meth:`pump` runs the outcome relay too (off: closed claims publish nothing, and an
        #: order released never charged is not sent again).
        self.relay_outcomes = self.stream_source is not None
        #: The outcome events published so far, read from the archive queue (OutcomeArchive=Enabled).
        archive = stack.outcome_archive_queue_url
        self.outcome_log: OutcomeLog | None = OutcomeLog(self.sqs, archive) if archive else None

    def webhooks_idle(self) -> bool:
        """Whether nothing of Stripe's webhooks can happen now: no delivery queued or in flight at the
        provider (a retry due later counts as queued), and the webhook queue empty."""
        if self.webhook_source is None:
            return True
        if not self.webhook_deliveries_idle():
            return False
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.webhook_source.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return not any(int(v) for v in attributes.values())

    def consumer_source(self, logical_id: str, queue_id: str, clients: Any) -> SqsEventSource:
        """The event source mapping of ``queue_id`` to ``logical_id``, polling with the function's role."""
        function_name = self.stack.function_name(logical_id)
        return SqsEventSource(
            self._as_function(clients("sqs"), function_name),
            self.lambda_client,
            self.stack.resolver.refs[queue_id],
            self.stack.resolver.attrs[(queue_id, "Arn")],
            function_name,
        )

    def _client_as(self, clients: Any, function_name: str, stream_arn: str | None, service: str) -> Any:
        return self._as_function(clients(service), function_name, stream_arn=stream_arn)

    def _as_function(self, client: Any, function_name: str, *, stream_arn: str | None = None) -> Any:
        """A client of an event source: its calls are checked against the function's role, which
        Lambda's event source mapping polls with (its Lambda invokes are the service's own)."""
        iam = self.stack.iam
        if iam is None or client.meta.service_model.service_name == "lambda":
            return client
        return iam.act_as(client, self.stack.logical_id(function_name), stream_arn=stream_arn)

    # -- input ---------------------------------------------------------------------------------

    def send(self, order: dict[str, Any] | str, *, copies: int = 1) -> list[str]:
        """Send ``copies`` messages carrying ``order`` (each a new MessageId, like a producer's retry)."""
        body = order if isinstance(order, str) else json.dumps(order)
        return [
            self.sqs.send_message(QueueUrl=self.stack.queue_url, MessageBody=body)["MessageId"]
            for _ in range(copies)
        ]

    def start(self, order: dict[str, Any], *, name: str) -> str:
        """Start an execution directly (as the start Lambda would), bypassing SQS."""
        payload = json.dumps({"order": order, "messageId": name}, sort_keys=True)
        return str(
            self.sfn.start_execution(stateMachineArn=self.stack.state_machine_arn, name=name, input=payload)[
                "executionArn"
            ]
        )

    # -- running -------------------------------------------------------------------------------

    def pump(
        self,
        *,
        timeout: float = 60.0,
        pollers: int = 1,
        busy: Callable[[], bool] | None = None,
        max_running: int | None = None,
    ) -> None:
        """Run the event source until the queue is empty and every execution has ended.

        The outcome relay (:attr:`stream_source`) runs in this thread between checks, while
        :attr:`relay_outcomes`: the stack is idle only once it has read the stream to its end and any
        order it re-queued has run too.

        ``busy``, if given, keeps it running while it returns true (a producer still sending).
        ``max_running`` pauses the pollers while that many executions are running.
        """
        deadline = time.monotonic() + timeout
        with self.polling(pollers=pollers, max_running=max_running):
            pause = 0.05
            while time.monotonic() < deadline:
                relayed = self.relay()
                if busy is not None and busy():
                    time.sleep(0.2)
                    continue
                if not relayed and self.queue_depth() == 0 and not self.running():
                    # Let a poller that is mid-batch finish before declaring the stack idle.
                    time.sleep(0.05)
                    if self.queue_depth() == 0 and not self.running() and not self.relay():
                        return
                if relayed:
                    pause = 0.05
                # Asking moto for the queue depth walks every message: ask less often as we wait.
                time.sleep(pause)
                pause = min(pause * 1.5, 0.5)
            raise TimeoutError(f"stack still busy after {timeout} s: depth={self.queue_depth()}")

    @contextlib.contextmanager
    def polling(self, *, pollers: int = 1, max_running: int | None = None) -> Iterator[None]:
        """Run ``pollers`` SQS event source threads for the duration of the block, then stop them.

        ``max_running`` pauses the pollers while that many executions are running.
        """
        stop = threading.Event()
        saturated = None if max_running is None else _Saturation(self.running_count, max_running)
        threads = [
            threading.Thread(
                target=self.event_source.run, args=(stop,), kwargs={"saturated": saturated}, daemon=True
            )
            for _ in range(pollers)
        ]
        if self.webhook_source is not None:
            threads.append(threading.Thread(target=self.webhook_source.run, args=(stop,), daemon=True))
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            for thread in threads:
                thread.join()

    def relay(self) -> int:
        """Run the outcome relay over what the claims table's stream holds now. Returns records read."""
        if self.stream_source is None or not self.relay_outcomes:
            return 0
        return self.stream_source.drain()

    def wait(self, arn: str, *, timeout: float = 60.0) -> ExecutionResult:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.sfn.describe_execution(executionArn=arn)["status"]
            if status in TERMINAL:
                return self.result(arn)
            time.sleep(0.02)
        raise TimeoutError(f"execution {arn} still running after {timeout} s")

    def queue_depth(self, url: str | None = None) -> int:
        url = url or self.stack.queue_url
        local = moto_adapter.messages_in_queue(url)
        if local is not None:
            return local
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",  # a re-queued order waiting out its delay
            ],
        )["Attributes"]
        return sum(int(value) for value in attrs.values())

    def backlog(self, url: str | None = None) -> int:
        """Messages a poller could take now or has taken (visible and in flight), not those waiting
        out a delay: what a producer keeping the queue full should wait on. A delayed re-send (an
        order the state machine put back for minutes) is not work the pollers can do now."""
        url = url or self.stack.queue_url
        local = moto_adapter.messages_in_queue(url, delayed=False)
        if local is not None:
            return local
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(value) for value in attrs.values())

    def running_count(self) -> int:
        local = moto_adapter.running_executions(self.stack.state_machine_arn)
        if local is not None:
            return local
        page = self.sfn.list_executions(
            stateMachineArn=self.stack.state_machine_arn, statusFilter="RUNNING", maxResults=1000
        )
        return len(page["executions"])

    def running(self) -> bool:
        page = self.sfn.list_executions(stateMachineArn=self.stack.state_machine_arn, statusFilter="RUNNING")
        return bool(page["executions"])

    # -- reading -------------------------------------------------------------------------------

    def execution_arns(self) -> list[str]:
        arns: list[str] = []
        for page in self.sfn.get_paginator("list_executions").paginate(
            stateMachineArn=self.stack.state_machine_arn
        ):
            arns.extend(e["executionArn"] for e in page["executions"])
        return arns

    def results(self, *, with_path: bool = True) -> list[ExecutionResult]:
        return [self.result(arn, with_path=with_path) for arn in self.execution_arns()]

    def history(self, arn: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for page in self.sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
            events.extend(page["events"])
        return events

    def result(self, arn: str, *, with_path: bool = True) -> ExecutionResult:
        """How the execution ended; ``with_path`` also reads its history for the states it went through."""
        described = self.sfn.describe_execution(executionArn=arn)
        execution_input = json.loads(described.get("input") or "{}")
        output = json.loads(described["output"]) if described.get("output") else None
        path: list[str] = []
        if with_path:
            path = [
                e["stateEnteredEventDetails"]["name"]
                for e in self.history(arn)
                if e["type"].endswith("StateEntered")
            ]
        return ExecutionResult(
            arn=arn,
            name=described["name"],
            status=described["status"],
            order_id=(execution_input.get("order") or {}).get("orderId"),
            output=output,
            error=described.get("error"),
            cause=described.get("cause"),
            path=path,
        )

    def claim(self, order_id: str) -> dict[str, Any] | None:
        item = self.dynamodb.get_item(
            TableName=self.stack.table_name, Key={"orderId": {"S": order_id}}, ConsistentRead=True
        ).get("Item")
        return {k: next(iter(v.values())) for k, v in item.items()} if item else None

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every message on the dead-letter queue (received and left there), with its attributes."""
        messages: dict[str, dict[str, Any]] = {}
        for _ in range(20):
            response = self.sqs.receive_message(
                QueueUrl=self.stack.dead_letter_queue_url,
                MaxNumberOfMessages=10,
                MessageAttributeNames=["All"],
                VisibilityTimeout=0,
            )
            batch = response.get("Messages", [])
            if not batch:
                break
            fresh = [m for m in batch if m["MessageId"] not in messages]
            if not fresh:
                break
            messages.update({m["MessageId"]: m for m in fresh})
        return list(messages.values())

    def executions(
        self, *, since: datetime | None = None, order_ids: Iterable[str] | None = None
    ) -> list[ExecutionSummary]:
        """Every execution (retired ones too, see :meth:`retire_executions`), or those started at or
        after ``since`` for one of ``order_ids`` (read from the execution's name, which the start
        Lambda makes ``<orderId>-<MessageId>``). A failure's error costs one DescribeExecution."""
        keys = None if order_ids is None else {_order_key(order_id) for order_id in order_ids}
        listed: list[dict[str, Any]] = [
            {"name": r.name, "executionArn": r.arn, "status": r.status, "startDate": r.start_date}
            for r in moto_adapter.retired_executions(self.stack.state_machine_arn)
        ]
        for page in self.sfn.get_paginator("list_executions").paginate(
            stateMachineArn=self.stack.state_machine_arn
        ):
            listed.extend(page["executions"])
        summaries = []
        for execution in listed:
            order_key = _order_key_of_name(execution["name"])
            if keys is not None and order_key not in keys:
                continue
            if since is not None and execution["startDate"] < since:
                continue
            error = None
            if execution["status"] == "FAILED":
                error = self.sfn.describe_execution(executionArn=execution["executionArn"]).get("error")
            summaries.append(
                ExecutionSummary(
                    execution["name"], order_key, execution["status"], error, execution["startDate"]
                )
            )
        return summaries

    def outcome_counts(
        self, *, since: datetime | None = None, order_ids: Iterable[str] | None = None
    ) -> Counter[str]:
        """Executions by status, failures by their error (scoped as :meth:`executions` is)."""
        return Counter(e.error or e.status for e in self.executions(since=since, order_ids=order_ids))

    def retire_executions(self, *, closed_for: float) -> int:
        """Retire the succeeded executions closed more than ``closed_for`` seconds ago, as Step
        Functions' retention does (:func:`saga_local.aws.moto_adapter.retire_executions`): they leave
        ListExecutions and DescribeExecution, and still count in :meth:`executions`."""
        return moto_adapter.retire_executions(self.stack.state_machine_arn, closed_for=closed_for)

    def outcomes(self) -> Counter[str]:
        return Counter(r.outcome for r in self.results(with_path=False))

    def claims(self) -> dict[str, dict[str, Any]]:
        """Every claim row, for reports (a Scan: never on a path that decides anything)."""
        rows: dict[str, dict[str, Any]] = {}
        for page in self.dynamodb.get_paginator("scan").paginate(TableName=self.stack.table_name):
            for item in page["Items"]:
                row = {k: next(iter(v.values())) for k, v in item.items()}
                rows[row["orderId"]] = row
        return rows


class _Saturation:
    """Whether ``limit`` executions are running, asked at most every ``interval`` seconds.

    Every poller asks before every poll; each answer is a ListExecutions that serialises every
    running execution, a large share of a busy run's CPU when each poller asked on its own.
    A cap read a tenth of a second late is still a cap.
    """

    def __init__(self, count: Callable[[], int], limit: int, *, interval: float = 0.1) -> None:
        self._count = count
        self._limit = limit
        self._interval = interval
        self._lock = threading.Lock()
        self._read_at = -interval
        self._running = 0

    def __call__(self) -> bool:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= self._interval:
                self._running = self._count()
                self._read_at = now
            return self._running >= self._limit
