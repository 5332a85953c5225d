"""Our adapter onto moto's internals: run Lambdas without Docker, compress retry waits, make writes atomic.

moto 5.2.5 executes Step Functions state machines (``execute_state_machine``), but it invokes Lambda
functions in Docker and, like any Python server, applies a DynamoDB conditional write as a check
followed by a store with no lock. This module patches the internals below, all guarded by
``tests/local/test_moto_contract.py`` (and ``tests/local/test_moto_speed.py``) against the exact
moto version pinned in pyproject.toml:

* ``LambdaBackend.invoke`` -> a :class:`LambdaRuntime` of ours (in-process for tests, worker
  processes for the local stack), reporting errors the way Lambda does: a ``FunctionError`` header
  and ``{"errorType", "errorMessage"}``, so the state machine sees ``Error`` = the class name.
* the retrier's ``time.sleep`` -> a scaled sleep that also records every wait the ASL asked for,
  so tests can run the real Retry policies (and check their backoff) without waiting minutes.
* the ASL parser -> parsed once per definition, not once per execution (moto's ANTLR parser
  is slower than many executions' work; the parsed program keeps its per-execution state in the
  execution's own environment, so one program serves many executions).
* the engine's clients and JSONPath parser -> cached: moto builds a new boto3 client for every
  Lambda task and re-parses every JSONPath on every evaluation, which dominates a busy run.
* EventBridge's target input -> its JSONPaths parsed once: moto re-parses them (building a
  parser, tables and all) for every target of every event put, a visible share of a busy run.
* SQS's retention check and queue attributes -> linear, not quadratic, in a queue's depth
  (:mod:`saga_local.aws.moto_sqs`).
* the execution's context object -> gains ``Execution.RedriveCount`` (0), which AWS has carried
  since executions could be redriven and the Charge step reads; moto 5.2.5 omits it.
* Retry and Catch's error matching, a Choice rule on an absent field, a Task's input over the payload
  quota, a Task's answer after its timeout, a workflow variable read in a JSONPath state -> AWS's
  documented rules (:mod:`saga_local.aws.moto_strict`).
* Step Functions' RedriveExecution -> :func:`redrive_execution`, which moto 5.2.5 lacks: the
  execution continues from its unsuccessful state with that state's input, under the same ARN,
  its history kept, ``Execution.RedriveCount`` one more and every retrier's count back to 0.
* Step Functions' ListExecutions and DescribeExecution -> behind the lock a start takes: moto
  appends a new execution to the list before it sets its status, so a listing at that moment
  raised (and a thread that lists, such as chaos's redeliveries, died of it).
* Step Functions' executions -> retirable (:func:`retire_executions`): a closed execution past a
  horizon leaves moto's list, as Step Functions' retention removes it, and keeps its name (a start
  under it still answers ``ExecutionAlreadyExists``) and a summary for reports
  (:func:`retired_executions`). moto keeps every execution with its history, and walks them all on
  every start, describe and list; its engine also lists every thread it started, forever.
* moto's model registry -> off: every model instance moto creates (each DynamoDB item version,
  each state machine copied for an execution, each SQS message...) is appended to its class's
  ``instances_tracked`` list for moto's dashboard, and never leaves it: the leak that made RSS grow
  with every execution whatever was deleted or retired. S3's models, which moto itself
  reads back from that list, are still tracked.
* moto's DynamoDB update expressions and response serialiser -> the same answers for less work
  (:mod:`saga_local.aws.moto_speed`: each expression parsed and each condition lexed once, two
  quadratic validators checked at the root first, the tree walks' type questions answered once per
  class, plain-dict members serialised by direct lookup), because a conditional ``UpdateItem`` was
  the largest share of an order's CPU.
* DynamoDB's request handling -> serialised behind one lock, so a conditional write (and the
  ``ALL_OLD`` item it returns, which moto reads *before* applying the write) is atomic under
  concurrent requests, as it is in DynamoDB. Without it two racing claims can both win.
* SQS's receive, delete and visibility change -> each behind its queue's own lock
  (:mod:`saga_local.aws.moto_sqs`), so that two pollers never both receive one message and a message
  sent during a delete is never lost.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import threading
import time as _time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from unittest import mock

import jsonpath_ng.ext as jsonpath_ext
import moto
from moto.awslambda import models as lambda_models
from moto.awslambda.exceptions import LambdaClientError
from moto.core.common_models import BaseModel
from moto.core.config import DefaultConfig
from moto.dynamodb.responses import DynamoHandler
from moto.sqs.models import Queue, SQSBackend
from moto.stepfunctions.exceptions import ExecutionAlreadyExists
from moto.stepfunctions.models import StateMachine
from moto.stepfunctions.parser.api import (
    ExecutionStatus,
    HistoryEventType,
)
from moto.stepfunctions.parser.asl.component.common.error_name.error_equals_decl import ErrorEqualsDecl
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
from moto.stepfunctions.parser.asl.component.common.string.string_expression import StringVariableSample
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.component.state.choice.comparison.comparison_variable import (
    ComparisonVariable,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service import (
    StateTaskService,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.state_task import StateTask
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.utils import boto_client as engine_boto_client
from moto.stepfunctions.parser.asl.utils import json_path as engine_json_path
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
from moto.stepfunctions.parser.models import StepFunctionsParserBackend, stepfunctions_parser_backends
from moto.stepfunctions.parser.utils import TMP_THREADS as engine_threads

from saga_local.aws import moto_speed, moto_sqs, moto_strict
from saga_local.runtime.api import Throttled

if TYPE_CHECKING:
    from collections.abc import Iterator

    from saga_local.runtime.api import LambdaRuntime

MOTO_VERSION = "5.2.5"
SFN_CONFIG: DefaultConfig = {"stepfunctions": {"execute_state_machine": True}}


@dataclass
class EngineHooks:
    """What the patched engine observed. ``retry_waits`` are the waits the ASL asked for, in seconds."""

    retry_time_scale: float = 0.0
    retry_waits: list[float] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.retry_waits.append(seconds)
        if self.retry_time_scale > 0:
            _time.sleep(seconds * self.retry_time_scale)


class _ScaledTime:
    """Stands in for the ``time`` module inside moto's retrier (only ``sleep`` is used there)."""

    def __init__(self, hooks: EngineHooks) -> None:
        self._hooks = hooks

    def sleep(self, seconds: float) -> None:
        self._hooks.sleep(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)


#: Serialises moto's DynamoDB in this process (its backend is not thread-safe): every request
#: takes it, and so must any code that reads or changes moto's DynamoDB state directly (the stream
#: source reading and trimming a shard).
DYNAMODB_LOCK = threading.RLock()


def _locked(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with DYNAMODB_LOCK:
            return method(*args, **kwargs)

    wrapper.__saga_locked__ = True
    return wrapper


_PROGRAMS: dict[str, Any] = {}
_PROGRAMS_LOCK = threading.RLock()  # re-entrant: the patch may be nested (bench/throughput.py)


class _CachedBoto3:
    """Stands in for ``boto3`` inside moto's engine: one client per (service, region, endpoint)."""

    def __init__(self, real: Any, authorize: Any = None) -> None:
        self._real = real
        self._clients: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()
        self._authorize = authorize

    def client(self, *args: Any, **kwargs: Any) -> Any:
        key = (kwargs.get("service_name"), kwargs.get("region_name"), kwargs.get("endpoint_url"), args)
        with self._lock:
            if key not in self._clients:
                client = self._real.client(*args, **kwargs)
                if self._authorize is not None:
                    # The engine's service integrations (Lambda invoke, SQS, EventBridge) are calls
                    # the state machine's role makes: checked against it, as AWS checks them.
                    client.meta.events.register("before-parameter-build", self._authorize)
                self._clients[key] = client
            return self._clients[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _prewarm_heap_keys(root: Any) -> None:
    """Give every component its heap key now: moto makes it lazily, which races across threads."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, EvalComponent):
            _ = node.heap_key
            stack.extend(vars(node).values())
        elif isinstance(node, (list, tuple, set)):
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())


@dataclass(frozen=True)
class RetiredExecution:
    """What a report needs of an execution moto no longer keeps (ListExecutions' fields, and the error)."""

    name: str
    arn: str
    status: str
    start_date: datetime.datetime
    stop_date: datetime.datetime


#: Starts and retirements of executions, one at a time: moto appends to the state machine's list
#: while a retirement replaces it.
_EXECUTIONS_LOCK = threading.RLock()


#: Per moto state machine (gone with it): its retired executions by name. Not an attribute of the
#: state machine, which moto deep-copies into every execution it starts.
_RETIRED: weakref.WeakKeyDictionary[Any, dict[str, RetiredExecution]] = weakref.WeakKeyDictionary()


def _retired_of(state_machine: Any) -> dict[str, RetiredExecution]:
    with _EXECUTIONS_LOCK:
        return _RETIRED.setdefault(state_machine, {})


def _start_execution(original: Any) -> Any:
    @functools.wraps(original)
    def start_execution(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _EXECUTIONS_LOCK:
            return original(self, *args, **kwargs)

    return start_execution


def _listing_locked(original: Any) -> Any:
    """ListExecutions and DescribeExecution between starts: moto appends an execution to the list
    before it sets its status, and reading a status that is not set yet raises."""

    @functools.wraps(original)
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _EXECUTIONS_LOCK:
            return original(self, *args, **kwargs)

    return read


def _name_idempotency(original: Any) -> Any:
    @functools.wraps(original)
    def handle(self: Any, name: str, execution_input: str) -> Any:
        retired = _retired_of(self).get(name)
        if retired is not None:  # closed, so Step Functions refuses the name whatever the input
            raise ExecutionAlreadyExists("Execution Already Exists: '" + retired.arn + "'")
        return original(self, name, execution_input)

    return handle


def _state_machines(state_machine_arn: str) -> Iterator[Any]:
    for regions in list(stepfunctions_parser_backends.values()):
        for backend in list(regions.values()):
            for state_machine in list(backend.state_machines):
                if state_machine.arn == state_machine_arn:
                    yield state_machine


def retire_executions(state_machine_arn: str, *, closed_for: float) -> int:
    """Drop the executions of ``state_machine_arn`` closed more than ``closed_for`` seconds ago
    from moto, keeping each one's name and summary (:func:`retired_executions`). Returns how many.

    Step Functions keeps a closed execution for a retention period, then it is gone from
    ListExecutions and DescribeExecution, and its name stays refused. This is that, with a horizon
    a long local run can afford. Executions that did not succeed are kept (what ``saga trace`` is
    for); so is every execution of a run that does not call this.
    """
    horizon = datetime.datetime.now(tz=datetime.UTC) - datetime.timedelta(seconds=closed_for)
    count = 0
    # moto's engine lists every thread it ever started (three or four per execution) and never
    # drops one; nothing reads the list. A start racing this may go unlisted, which costs nothing.
    engine_threads[:] = [thread for thread in engine_threads if thread.is_alive()]
    for state_machine in _state_machines(state_machine_arn):
        with _EXECUTIONS_LOCK:
            kept: list[Any] = []
            retired = _retired_of(state_machine)
            for execution in state_machine.executions:
                status = getattr(execution.exec_status, "value", None)
                stopped = execution.stop_date
                if status != "SUCCEEDED" or stopped is None or stopped > horizon:
                    kept.append(execution)
                    continue
                retired[execution.name] = RetiredExecution(
                    execution.name, execution.execution_arn, status, execution.start_date, stopped
                )
                count += 1
            # A new list, not edits to the old: a reader iterating the old one sees it unchanged.
            state_machine.executions = kept
    return count


def running_executions(state_machine_arn: str) -> int | None:
    """How many executions of ``state_machine_arn`` are running, read from moto in this process
    (None if it is not here): what ListExecutions(RUNNING) counts, without building, sorting and
    serialising the page."""
    found = False
    running = 0
    for state_machine in _state_machines(state_machine_arn):
        found = True
        running += sum(1 for e in list(state_machine.executions) if e.exec_status == ExecutionStatus.RUNNING)
    return running if found else None


def messages_in_queue(queue_url: str, *, delayed: bool = True) -> int | None:
    """How many messages the queue at ``queue_url`` holds, visible, in flight or delayed, read from
    moto in this process (None if it is not here, or if its name is ambiguous): what
    GetQueueAttributes' three counts add up to, without moto walking every message once per count
    (a cost that grows with the queue, paid on every poll of a producer that keeps the queue full).
    ``delayed=False`` leaves out the messages waiting out a ``DelaySeconds``."""
    account, name = queue_url.rstrip("/").split("/")[-2:]
    queues = [b.queues[name] for b in _sqs_backends() if b.account_id == account and name in b.queues]
    if len(queues) != 1:
        return None
    if delayed:
        return len(queues[0]._messages)
    return sum(1 for message in queues[0]._messages if not message.delayed)


def _sqs_backends() -> Iterator[Any]:
    """moto's SQS backend of every account and region this process has touched."""
    from moto.sqs.models import sqs_backends

    for regions in list(sqs_backends.values()):
        yield from list(regions.values())


#: The statuses RedriveExecution accepts: "failed, aborted, or timed out executions".
_REDRIVABLE = {ExecutionStatus.FAILED, ExecutionStatus.ABORTED, ExecutionStatus.TIMED_OUT}


class _RedriveWorker(ExecutionWorker):
    """The redriven run of an execution: its program starts at the unsuccessful state, with that
    state's input, and writes on in the first run's history."""

    def __init__(self, first: Any, state: str, state_input: Any, redrive_count: int) -> None:
        super().__init__(
            evaluation_details=first._evaluation_details,
            exec_comm=first._execution_communication,
            cloud_watch_logging_session=first._cloud_watch_logging_session,
            activity_store=first._activity_store,
        )
        self._first_env = first.env
        self._state = state
        self._state_input = state_input
        self._redrive_count = redrive_count

    def _get_evaluation_entrypoint(self) -> Any:
        definition = json.loads(self._evaluation_details.state_machine_details.definition)
        definition["StartAt"] = self._state
        return AmazonStateLanguageParser.parse(json.dumps(definition))[0]

    def _get_evaluation_environment(self) -> Any:
        env = ExecutionWorker._get_evaluation_environment(self)
        env.event_manager = self._first_env.event_manager
        env.states.context_object.context_object_data["Execution"]["RedriveCount"] = self._redrive_count
        env.states.reset(input_value=self._state_input)
        return env

    def _execution_logic(self) -> None:
        program = self._get_evaluation_entrypoint()
        self.env = env = self._get_evaluation_environment()
        env.event_manager.add_event(
            context=env.event_history_context,
            event_type=HistoryEventType.ExecutionRedriven,
            event_details=EventDetails(executionRedrivenEventDetails={"redriveCount": self._redrive_count}),
            update_source_event_id=False,
        )
        program.eval(env)
        self._execution_communication.terminated()


def _unsuccessful_state(history: list[Any]) -> tuple[str, Any]:
    """The state the execution entered last and never left, with the input it entered with."""
    entered: dict[str, Any] = {}
    for event in history:
        if event["type"].endswith("StateEntered"):
            details = event["stateEnteredEventDetails"]
            entered[details["name"]] = json.loads(details["input"])
        elif event["type"].endswith("StateExited"):
            entered.pop(event["stateExitedEventDetails"]["name"], None)
    if not entered:
        raise ValueError("the execution has no unsuccessful state to redrive from")
    name = list(entered)[-1]
    return name, entered[name]


def redrive_execution(execution_arn: str) -> int:
    """Step Functions' RedriveExecution, on this process's moto (which lacks it). Returns the new
    ``RedriveCount``.

    As AWS documents it: the execution "continues the failed execution from the unsuccessful step
    and uses the same input", keeps "the results and execution history of the successful steps",
    and runs under "the same state machine definition and execution ARN"; a retried state's
    attempts start again from 0. Inline Map and Parallel branches are not modelled (the saga has
    none).
    """
    with _EXECUTIONS_LOCK:
        found = [
            execution
            for regions in list(stepfunctions_parser_backends.values())
            for backend in list(regions.values())
            for machine in list(backend.state_machines)
            for execution in list(machine.executions)
            if execution.execution_arn == execution_arn
        ]
        if not found:
            raise ValueError(f"no execution {execution_arn}")
        execution = found[0]
        if execution.exec_status not in _REDRIVABLE:
            raise ValueError(
                f"{execution_arn} is {execution.exec_status.value}, not failed, aborted or timed out"
            )
        first = execution.exec_worker
        context = first.env.states.context_object.context_object_data["Execution"]
        redrive_count = int(context.get("RedriveCount", 0)) + 1
        state, state_input = _unsuccessful_state(first.env.event_manager.get_event_history())
        worker: Any = _RedriveWorker(first, state, state_input, redrive_count)
        execution.exec_worker = worker
        execution.exec_status = ExecutionStatus.RUNNING
        execution.error = execution.cause = execution.stop_date = None
        worker.start()
        return redrive_count


def retired_executions(state_machine_arn: str) -> list[RetiredExecution]:
    """The executions :func:`retire_executions` dropped, oldest first."""
    retired: list[RetiredExecution] = []
    for state_machine in _state_machines(state_machine_arn):
        retired.extend(_retired_of(state_machine).values())
    return sorted(retired, key=lambda r: r.start_date)


def _untracked_new(cls: Any, *args: Any, **kwargs: Any) -> Any:
    """``BaseModel.__new__`` without the registry (see the module's docstring)."""
    instance: Any = object.__new__(cls)
    if cls.__module__.startswith("moto.s3."):
        cls.instances_tracked.append(instance)
    return instance


def check_moto_version() -> None:
    if moto.__version__ != MOTO_VERSION:
        raise RuntimeError(
            f"saga_local is pinned to moto {MOTO_VERSION} (its internals are patched);"
            f" found {moto.__version__}"
        )


@contextlib.contextmanager
def patched_moto(runtime: LambdaRuntime, *, retry_time_scale: float = 0.0) -> Iterator[EngineHooks]:
    """Install the patches for the duration of the block. Not re-entrant across runtimes.

    When ``runtime`` carries the stack's roles (``runtime.iam``), the engine's own calls (its Lambda
    invokes and service integrations) are checked against the state machine's role.
    """
    check_moto_version()
    hooks = EngineHooks(retry_time_scale=retry_time_scale)
    iam = getattr(runtime, "iam", None)
    machine = iam.state_machine() if iam is not None else None
    authorize = iam.hook(machine) if iam is not None and machine is not None else None
    saved_environment = ExecutionWorker._get_evaluation_environment
    saved_entrypoint = ExecutionWorker._get_evaluation_entrypoint

    def invoke(
        self: Any, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any
    ) -> bytes:
        fn = self.get_function(function_name, qualifier)  # 404 ResourceNotFound, as Lambda answers
        raw = body if isinstance(body, bytes) else (body or "{}").encode()
        try:
            result = runtime.invoke(fn.function_name, raw)
        except Throttled as exc:
            error = LambdaClientError("TooManyRequestsException", str(exc) or "Rate Exceeded.")
            error.code = 429
            raise error from None
        if result.function_error:
            response_headers["x-amz-function-error"] = result.function_error
        response_headers["Content-Length"] = str(len(result.payload))
        return result.payload

    def evaluation_environment(worker: Any) -> Any:
        env = saved_environment(worker)
        env.states.context_object.context_object_data["Execution"].setdefault("RedriveCount", 0)
        return env

    def evaluation_entrypoint(worker: Any) -> Any:
        definition = worker._evaluation_details.state_machine_details.definition
        with _PROGRAMS_LOCK:
            program = _PROGRAMS.get(definition)
            if program is None:
                program = saved_entrypoint(worker)
                _prewarm_heap_keys(program)
                _PROGRAMS[definition] = program
        return program

    # Every patch is undone on the way out, in reverse order, whatever happens in the block.
    patches: list[tuple[Any, str, Any]] = [
        (lambda_models.LambdaBackend, "invoke", invoke),
        (retrier_decl, "time", _ScaledTime(hooks)),
        (ErrorEqualsDecl, "_eval_body", moto_strict.error_equals(ErrorEqualsDecl._eval_body)),
        (ComparisonVariable, "_eval_body", moto_strict.absent_variable_fails(ComparisonVariable._eval_body)),
        (StateTask, "_eval_parameters", moto_strict.parameters_within_quota(StateTask._eval_parameters)),
        (
            StringVariableSample,
            "_eval_body",
            moto_strict.jsonpath_variable_sample(StringVariableSample._eval_body),
        ),
        (
            StateTaskService,
            "_after_eval_execution",
            moto_strict.no_late_success(StateTaskService._after_eval_execution),
        ),
        (ExecutionWorker, "_get_evaluation_environment", evaluation_environment),
        (ExecutionWorker, "_get_evaluation_entrypoint", evaluation_entrypoint),
        (engine_boto_client, "boto3", _CachedBoto3(engine_boto_client.boto3, authorize)),
        (engine_json_path, "parse", functools.lru_cache(maxsize=4096)(engine_json_path.parse)),
        (jsonpath_ext, "parse", functools.lru_cache(maxsize=256)(jsonpath_ext.parse)),
        (SQSBackend, "is_message_valid_based_on_retention_period", moto_sqs.retention_check),
        (SQSBackend, "receive_message", moto_sqs.receive_locked(SQSBackend.receive_message)),
        (Queue, "delete_message", moto_sqs.delete_locked(Queue.delete_message)),
        (
            SQSBackend,
            "change_message_visibility",
            moto_sqs.visibility_locked(SQSBackend.change_message_visibility),
        ),
        (Queue, "attributes", property(moto_sqs.QueueAttributes)),
        (BaseModel, "__new__", staticmethod(_untracked_new)),
        (
            StepFunctionsParserBackend,
            "start_execution",
            _start_execution(StepFunctionsParserBackend.start_execution),
        ),
        (
            StepFunctionsParserBackend,
            "list_executions",
            _listing_locked(StepFunctionsParserBackend.list_executions),
        ),
        (
            StepFunctionsParserBackend,
            "describe_execution",
            _listing_locked(StepFunctionsParserBackend.describe_execution),
        ),
        (
            StateMachine,
            "_handle_name_input_idempotency",
            _name_idempotency(StateMachine._handle_name_input_idempotency),
        ),
    ]
    patches += moto_speed.patches()
    if not getattr(DynamoHandler.call_action, "__saga_locked__", False):
        patches.append((DynamoHandler, "call_action", _locked(DynamoHandler.call_action)))
    with contextlib.ExitStack() as stack:
        for owner, name, value in patches:
            stack.enter_context(mock.patch.object(owner, name, value))
        yield hooks


def deliver_delayed_messages() -> int:
    """Let time pass for SQS: every message waiting out a ``DelaySeconds`` (in this process's moto,
    any queue) can be received now. Returns how many there were.

    The state machine re-queues an order behind an open payment attempt for 15 minutes, and the
    outcome relay re-queues an order proven never charged with a delay: a local run that judges
    what happens *later* (after the sweeper, say) delivers them now instead of waiting.
    """
    delivered = 0
    for backend in _sqs_backends():
        for queue in list(backend.queues.values()):
            for message in list(queue._messages):
                if message.delayed:
                    message.delayed_until = 0
                    delivered += 1
    return delivered
