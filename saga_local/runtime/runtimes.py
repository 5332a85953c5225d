"""Run the template's functions the way Lambda runs them, without Docker.

:class:`InProcessRuntime` imports the real handlers from ``functions/`` (the same import root as
Lambda's ``CodeUri``) and calls them in the caller's thread: fast, used by the tests. A failed
invocation is reported as Lambda reports it: ``FunctionError: Unhandled`` and a payload of
``{"errorType": <exception class name>, "errorMessage": ...}``, or for a death injected by a
:class:`~saga_local.runtime.faults.Fault`, ``Runtime.ExitError`` / ``Sandbox.Timedout`` /
``Runtime.OutOfMemory``. The worker-process runtime of the local stack shares this contract.
Faults that do not end the invocation (AWS call errors, stalls, a stopped execution) are fired
from the same hooks; :mod:`saga_local.runtime.faults` describes every kind.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import os
import select
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3

from saga_local.private_files import open_private_append, private_directory
from saga_local.runtime.api import (
    GUARD_OFF_ENV,
    IAM_HOOK_ENV,
    IAM_ROLE_ENV,
    Invocation,
    LambdaContext,
    Throttled,
    death_error,
    lambda_error,
    order_id_of,
)
from saga_local.runtime.faults import (
    CALL_KINDS,
    ERROR_TYPES,
    FATAL_KINDS,
    LATE_WRITE_SECONDS,
    ChargeRequests,
    FaultPlan,
    InvocationKilled,
    apply_request,
    call_error,
    install_retry_sleep_skip,
    lost_answer_error,
)
from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from saga_local.runtime.api import Authorizer
    from saga_local.runtime.faults import Fault
    from saga_local.template import FunctionSpec

FUNCTIONS_DIR = ROOT / "functions"


@dataclass(frozen=True)
class InvocationRecord:
    """One invocation, for counting (invocations per order) and for the report."""

    function: str  # logical id
    order_id: str | None
    duration_ms: float
    error_type: str | None
    ended_at: float = 0.0  # time.monotonic() when it ended


class _Current(threading.local):
    function: str | None = None
    order_id: str | None = None
    invocation: int | None = None  # the Nth invocation of this function for this order
    token: str | None = None  # the invoking execution (claim token), for ``stop`` faults
    deadline: float = 0.0  # monotonic time at which Lambda would end this invocation
    call: str | None = None  # the AWS or provider call being made ("dynamodb.UpdateItem")
    sends: int = 0  # HTTP requests of that call so far (botocore's retries resend)


class InProcessRuntime:
    """Runs handlers in this process, in the invoking thread (moto runs each execution in its own).

    Args:
        functions: physical function name -> (spec, resolved environment).
        faults: injected faults (optional).
        iam: the stack's roles (``Stack.iam``): every AWS call a handler makes is checked against its
            function's role and refused as AWS refuses it. None checks nothing (a runtime with no
            functions, for tests of the adapter alone).
    """

    def __init__(
        self,
        functions: dict[str, tuple[FunctionSpec, dict[str, str]]],
        *,
        faults: FaultPlan | None = None,
        iam: Authorizer | None = None,
    ) -> None:
        self.functions = functions
        self.faults = faults or FaultPlan()
        self.iam = iam
        self.records: list[InvocationRecord] = []
        #: AWS and provider calls made by handlers: (function logical id, call name) -> count.
        self.calls: Counter[tuple[str, str]] = Counter()
        #: Every charge request the handlers sent, and its answer.
        self.charge_requests = ChargeRequests()
        #: HTTP requests the handlers' calls sent, botocore's and the SDK's resends included.
        self.sends: Counter[tuple[str, str]] = Counter()
        self._records_lock = threading.Lock()
        self._current = _Current()
        self._handlers: dict[str, Callable[[Any, Any], Any]] = {}
        self._sfn: Any = None
        self._install_environment()
        self._install_call_hooks()

    # -- setup ---------------------------------------------------------------------------------

    def _install_environment(self) -> None:
        """One process, one ``os.environ``: the functions' variables must agree where they overlap."""
        merged: dict[str, str] = {}
        for name, (_, env) in self.functions.items():
            for key, value in env.items():
                if merged.get(key, value) != value:
                    raise ValueError(f"{name}: {key} differs between functions; use the worker runtime")
                merged[key] = value
        os.environ.update(merged)
        if str(FUNCTIONS_DIR) not in sys.path:
            sys.path.insert(0, str(FUNCTIONS_DIR))
        from handlers import runtime as handler_runtime

        handler_runtime.reset()  # a fresh "container": clients are created inside the mock

    def _install_call_hooks(self) -> None:
        """Observe every AWS and provider call a handler makes, to count it and to inject faults.

        The hooks are installed once per process and dispatch to the newest runtime, so that a
        second runtime (a new test) never finds the first one's hooks in its way.
        """
        global _ACTIVE
        _ACTIVE = self
        events = boto3._get_default_session().events
        events.register("before-parameter-build", _before_parameter_build, unique_id="saga-runtime-authorize")
        events.register("before-call", _before_call, unique_id="saga-runtime-before")
        events.register("after-call", _after_call, unique_id="saga-runtime-after")
        # First: ahead of moto's stubber, which answers (and applies) the request in-process.
        events.register_first("before-send", _before_send, unique_id="saga-runtime-send")
        install_retry_sleep_skip()
        from payment_saga.payments import StripeProvider

        if not getattr(StripeProvider.charge, "__saga_hooked__", False):
            original = StripeProvider.charge

            def charge(provider: Any, order: Any, *args: Any, **kwargs: Any) -> Any:
                if _ACTIVE is None:
                    return original(provider, order, *args, **kwargs)
                return _ACTIVE.charge(original, provider, order, *args, **kwargs)

            charge.__saga_hooked__ = True  # type: ignore[attr-defined]
            StripeProvider.charge = charge  # type: ignore[method-assign,assignment]
        import stripe

        if not getattr(stripe.RequestsClient.request, "__saga_hooked__", False):
            send = stripe.RequestsClient.request

            def request(client: Any, method: str, url: str, headers: Any, post_data: Any = None) -> Any:
                def again() -> Any:
                    return send(client, method, url, headers, post_data)

                if _ACTIVE is None:
                    return again()
                return _ACTIVE.provider_send(again, method, url)

            request.__saga_hooked__ = True  # type: ignore[attr-defined]
            stripe.RequestsClient.request = request  # type: ignore[method-assign,assignment]

    def charge(self, original: Any, provider: Any, order: Any, *args: Any, **kwargs: Any) -> Any:
        """``StripeProvider.charge``, with its fault points, recorded in :attr:`charge_requests`."""
        current = self._current
        self.point("before:provider.charge")
        sent = self.charge_requests.sent(
            order.order_id, order.payment_attempt, str(kwargs.get("idempotency_key")), current.token
        )
        current.call, current.sends = "provider.charge", 0
        try:
            result = original(provider, order, *args, **kwargs)
        except BaseException as exc:
            self.charge_requests.answered(sent, _charge_outcome(exc))
            raise
        finally:
            current.call = None
        self.charge_requests.answered(sent, "charged")
        self.point("after:provider.charge")
        return result

    def provider_send(self, send: Callable[[], Any], method: str, url: str) -> Any:
        """One HTTP request of the Stripe SDK; a charge's create may lose its answer or land late."""
        current = self._current
        if current.function is None or current.call != "provider.charge" or method.lower() != "post":
            return send()
        self._count_send("provider.charge")
        current.sends += 1
        if current.sends > 1:
            return send()
        fault = self.faults.take(
            current.function, "after:provider.charge", current.order_id, current.invocation, send=True
        )
        if fault is None:
            return send()
        if fault.kind == "lost_answer":
            send()  # applied; its answer is lost (the connection was reset before it came back)
            self._count_send("provider.charge")
            return send()  # the same request, the same Idempotency-Key, sent again
        self._hold(send, fault, f"provider charge {url}")
        raise InvocationKilled(fault.dies_as, "after:provider.charge")

    def on_send(self, call: str, request: Any) -> None:
        """Botocore is about to send a request of the current call (its first, or a retry)."""
        current = self._current
        if current.function is None:
            return
        self._count_send(call)
        current.sends += 1
        if current.sends > 1:
            return  # botocore's own resend: the fault fired on the first one
        fault = self.faults.take(
            current.function, "after:" + call, current.order_id, current.invocation, send=True
        )
        if fault is None:
            return
        if fault.kind == "lost_answer":
            apply_request(request)
            raise lost_answer_error(request.url)
        self._hold(lambda: apply_request(request), fault, call)
        raise InvocationKilled(fault.dies_as, "after:" + call)

    def _count_send(self, call: str) -> None:
        with self._records_lock:
            self.sends[(str(self._current.function), call)] += 1

    @contextlib.contextmanager
    def acting_as(self, function: str, order_id: str | None = None) -> Iterator[None]:
        """Make the block's AWS calls as an invocation of ``function`` would: counted, hit by the
        faults aimed at it (to exercise a fault on a call no handler makes here), and checked against
        its role when it is a function of the template (a probe's name has none)."""
        current = self._current
        current.function, current.order_id = function, order_id
        current.invocation = self.faults.begin(function, order_id)
        try:
            yield
        finally:
            current.function = current.order_id = current.call = None
            current.invocation = None

    def _hold(self, apply: Callable[[], Any], fault: Fault, what: str) -> None:
        current = self._current
        self.faults.late.hold(
            apply,
            what=f"{current.function} {what} (order {current.order_id})",
            order_id=current.order_id,
            lands_after=fault.lands_after,
            seconds=fault.seconds or LATE_WRITE_SECONDS,
        )

    def observe(self, call: str) -> None:
        if self._current.function is not None:
            with self._records_lock:
                self.calls[(self._current.function, call)] += 1

    def point(self, point: str, model: Any = None) -> None:
        """Fire the fault planned for the current invocation at ``point``, if any.

        ``model`` is botocore's operation model at ``before:`` points of AWS calls.
        """
        current = self._current
        if current.function is None:
            return
        fault = self.faults.take(current.function, point, current.order_id, current.invocation)
        if fault is not None:
            self._fire(fault, point, model)

    def _fire(self, fault: Fault, point: str, model: Any) -> None:
        if fault.kind in FATAL_KINDS:
            raise InvocationKilled(fault.kind, point)
        if fault.kind == "throttle":
            raise Throttled("Rate Exceeded.")
        if fault.kind in CALL_KINDS:
            raise call_error(fault.kind, point.partition(":")[2], model)
        if fault.kind == "delay":
            remaining = self._current.deadline - time.monotonic()
            time.sleep(max(0.0, min(fault.seconds, remaining)))
            if fault.seconds > remaining:
                raise InvocationKilled("timeout", point)  # Lambda ends the invocation at its deadline
        elif fault.kind == "stop":
            self._stop_execution(self._current.token)

    def _stop_execution(self, execution_arn: str | None) -> None:
        """Stop the invoking execution; this invocation goes on, as a running Lambda does."""
        if execution_arn is None:
            return
        with self.outside_invocation():
            if self._sfn is None:
                self._sfn = boto3.client("stepfunctions")
            self._sfn.stop_execution(executionArn=execution_arn, error="Chaos.Stopped", cause="fault: stop")

    @contextlib.contextmanager
    def outside_invocation(self) -> Iterator[None]:
        """The block's AWS calls are the harness's own, even inside a handler's thread: neither
        counted, nor a fault point, nor checked against the function's role (a test that plays
        another party from inside an invocation, or the runtime stopping an execution)."""
        current = self._current
        saved = current.function
        current.function = None
        try:
            yield
        finally:
            current.function = saved

    # -- invoke --------------------------------------------------------------------------------

    def handler(self, spec: FunctionSpec) -> Callable[[Any, Any], Any]:
        if spec.handler not in self._handlers:
            module_name, _, attr = spec.handler.rpartition(".")
            self._handlers[spec.handler] = getattr(importlib.import_module(module_name), attr)
        return self._handlers[spec.handler]

    def invoke(self, function_name: str, payload: bytes) -> Invocation:
        spec, _ = self.functions[function_name]
        event = json.loads(payload or b"{}")
        order_id = order_id_of(event)
        started = time.perf_counter()
        error_type: str | None = None
        current = self._current
        current.function, current.order_id = spec.logical_id, order_id
        current.invocation = self.faults.begin(spec.logical_id, order_id)
        current.token = event.get("claimToken") if isinstance(event, dict) else None
        current.deadline = time.monotonic() + spec.timeout
        try:
            self.point("start")
            context = LambdaContext(function_name, spec.memory_mb, spec.timeout)
            result = self.handler(spec)(event, context)
            self.point("end")
            return Invocation(json.dumps(result).encode())
        except Throttled:
            error_type = "Lambda.TooManyRequestsException"
            raise
        except InvocationKilled as death:
            error_type = ERROR_TYPES[death.kind]
            return Invocation(death_error(death.kind, spec.timeout), "Unhandled")
        except Exception as exc:  # noqa: BLE001 - reported to the state machine, as Lambda does
            error_type = type(exc).__name__
            trace = traceback.format_exception(exc)
            return Invocation(lambda_error(error_type, str(exc), trace), "Unhandled")
        finally:
            current.function = current.order_id = current.token = current.call = None
            current.invocation = None
            record = InvocationRecord(
                spec.logical_id,
                order_id,
                (time.perf_counter() - started) * 1000,
                error_type,
                time.monotonic(),
            )
            with self._records_lock:
                self.records.append(record)
            self.faults.late.invocation_ended(spec.logical_id, order_id)


_ACTIVE: InProcessRuntime | None = None


def _point(point: str, model: Any = None) -> None:
    if _ACTIVE is not None:
        _ACTIVE.point(point, model)


def _before_parameter_build(params: dict[str, Any], model: Any, **_: Any) -> None:
    """A handler's call, checked against its function's role before anything is built or sent."""
    runtime = _ACTIVE
    if runtime is None or runtime.iam is None:
        return
    function = runtime._current.function
    # A probe that is no function of the template (``acting_as("ProbeFunction")``) has no role.
    if function is not None and function in runtime.iam.roles:
        runtime.iam.check(function, model, params)


def _before_call(event_name: str, model: Any = None, **_: Any) -> None:
    if _ACTIVE is not None:
        current = _ACTIVE._current
        current.call, current.sends = _call_name(event_name), 0
    _point("before:" + _call_name(event_name), model)


def _before_send(event_name: str, request: Any = None, **_: Any) -> None:
    if _ACTIVE is not None:
        _ACTIVE.on_send(_call_name(event_name), request)


def _charge_outcome(exc: BaseException) -> str:
    """How a charge request ended, by the error the provider client raised."""
    name = type(exc).__name__
    return {"PaymentDeclined": "declined", "InvocationKilled": "no answer"}.get(name, name)


def _after_call(event_name: str, **_: Any) -> None:
    call = _call_name(event_name)
    if _ACTIVE is not None:
        _ACTIVE.observe(call)
    _point("after:" + call)


def _call_name(event_name: str) -> str:
    # "after-call.dynamodb.UpdateItem" -> "dynamodb.UpdateItem"
    return event_name.split(".", 1)[1] if "." in event_name else event_name


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    requests: int  # fd the parent writes requests to
    responses: int  # fd the parent reads responses from
    buffer: bytearray = field(default_factory=bytearray)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        for fd in (self.requests, self.responses):
            with contextlib.suppress(OSError):
                os.close(fd)


class WorkerRuntime:
    """Runs each function in worker processes, as Lambda runs containers.

    A worker imports its handler once (cold start) and then serves one invocation at a time. The
    function's ``Timeout`` is enforced by killing the worker (``Sandbox.Timedout``); a worker that
    exits mid-invocation is reported as ``Runtime.ExitError``, or ``Runtime.OutOfMemory`` when it
    ran out of the memory its ``MemorySize`` allows. The stack survives all of these: the next
    invocation gets a fresh worker, as Lambda gives a fresh sandbox.

    Args:
        functions: physical function name -> (spec, resolved environment).
        base_environment: variables every worker gets (endpoint, credentials, region).
        faults: injected faults; ``start`` faults are decided here, others are armed in the worker.
        max_workers: warm workers per function; an invocation beyond that waits for one.
        log_dir: where each function's stdout/stderr (its JSON logs) go; ``None`` discards them.
        guard_off: bypass the claim inside the workers (``saga demo``'s first act only).
        iam: the stack's roles: each worker checks its handler's AWS calls against its function's
            role (``saga_local.aws.iam``), as the in-process runtime does.
    """

    def __init__(
        self,
        functions: dict[str, tuple[FunctionSpec, dict[str, str]]],
        *,
        base_environment: dict[str, str],
        faults: FaultPlan | None = None,
        max_workers: int = 4,
        log_dir: Path | None = None,
        guard_off: bool = False,
        iam: Authorizer | None = None,
    ) -> None:
        self.functions = functions
        self.iam = iam
        self.base_environment = base_environment
        self.faults = faults or FaultPlan()
        self.max_workers = max_workers
        self.log_dir = log_dir
        self.guard_off = guard_off
        self.records: list[InvocationRecord] = []
        self.calls: Counter[tuple[str, str]] = Counter()
        self.cold_starts: Counter[str] = Counter()
        #: Seconds the local stack's clock runs ahead of the machine's (`saga clock advance`): each
        #: invocation carries it, and the functions' ``time.time()`` adds it (runtime/worker.py).
        self.clock_offset = 0.0
        self._lock = threading.Condition()
        self._idle: dict[str, list[_Worker]] = {name: [] for name in functions}
        self._count: Counter[str] = Counter()
        self._closed = False

    # -- workers -------------------------------------------------------------------------------

    def _spawn(self, name: str) -> _Worker:
        spec, env = self.functions[name]
        request_read, request_write = os.pipe()
        response_read, response_write = os.pipe()
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(ROOT),
            **self.base_environment,
            **env,
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_TIMEOUT": str(spec.timeout),
        }
        if self.guard_off:
            environment[GUARD_OFF_ENV] = "1"
        if self.iam is not None:
            environment[IAM_ROLE_ENV] = self.iam.role_json(spec.logical_id)
            environment[IAM_HOOK_ENV] = self.iam.worker_hook_path()
        output: Any = subprocess.DEVNULL
        if self.log_dir is not None:
            private_directory(self.log_dir)
            output = open_private_append(self.log_dir / f"{spec.logical_id}.log")
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [
                sys.executable,
                "-m",
                "saga_local.runtime.worker",
                str(request_read),
                str(response_write),
                str(FUNCTIONS_DIR),
                spec.handler,
                str(spec.memory_mb),
            ],
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            pass_fds=(request_read, response_write),
        )
        if output is not subprocess.DEVNULL:
            output.close()
        os.close(request_read)
        os.close(response_write)
        worker = _Worker(process, request_write, response_read)
        # The init phase has its own limit in Lambda (10 s); imports are slow on a busy machine.
        ready = _read_line(worker, timeout=60)
        if ready is None:
            worker.kill()
            raise RuntimeError(f"{spec.logical_id}: the worker died while starting (see its log)")
        self.cold_starts[spec.logical_id] += 1
        return worker

    def _acquire(self, name: str) -> _Worker:
        with self._lock:
            while True:
                if self._closed:
                    raise RuntimeError("the runtime is shut down")
                if self._idle[name]:
                    return self._idle[name].pop()
                if self._count[name] < self.max_workers:
                    self._count[name] += 1
                    break
                self._lock.wait()
        try:
            return self._spawn(name)
        except BaseException:
            with self._lock:
                self._count[name] -= 1
                self._lock.notify_all()
            raise

    def _release(self, name: str, worker: _Worker | None) -> None:
        with self._lock:
            if worker is None or self._closed:
                self._count[name] -= 1
                if worker is not None:
                    worker.kill()
            else:
                self._idle[name].append(worker)
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = [w for idle in self._idle.values() for w in idle]
            for idle in self._idle.values():
                idle.clear()
            self._lock.notify_all()
        for worker in workers:
            worker.kill()

    # -- invoke --------------------------------------------------------------------------------

    def invoke(self, function_name: str, payload: bytes) -> Invocation:
        spec, _ = self.functions[function_name]
        event = json.loads(payload or b"{}")
        order_id = order_id_of(event)
        started = time.perf_counter()
        invocation = self.faults.begin(spec.logical_id, order_id)
        fault = self.faults.take(spec.logical_id, "start", order_id, invocation)
        if fault is not None and fault.kind == "throttle":
            self._record(spec, order_id, started, "Lambda.TooManyRequestsException")
            raise Throttled("Rate Exceeded.")
        armed = fault or self.faults.take_for_invocation(spec.logical_id, order_id, invocation)
        worker = self._acquire(function_name)
        request = {
            "payload": payload.decode(),
            "function_name": function_name,
            "timeout": spec.timeout,
            "clockOffset": self.clock_offset,
            "fault": (
                {"point": armed.point, "kind": armed.kind, "seconds": armed.seconds, "dies_as": armed.dies_as}
                if armed
                else None
            ),
        }
        try:
            os.write(worker.requests, json.dumps(request).encode() + b"\n")
            line = _read_line(worker, timeout=spec.timeout)
        except OSError:
            line = None
        if line is None:
            # Dead or hung: this sandbox is gone either way.
            # EOF arrives before the exit status: give a dead worker a moment to be reaped, so a
            # death is not mistaken for a timeout (a hung worker is still running after this).
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(timeout=0 if time.perf_counter() - started >= spec.timeout else 2)
            timed_out = worker.process.poll() is None
            worker.kill()
            self._release(function_name, None)
            if timed_out:
                kind = "timeout"
            elif worker.process.returncode in (137, -9):
                kind = "oom"
            else:
                kind = "die"
            self._record(spec, order_id, started, ERROR_TYPES[kind])
            return Invocation(death_error(kind, spec.timeout), "Unhandled")
        response = json.loads(line)
        if "late" in response and armed is not None:
            # The worker sent a write and died before its answer: the write lands later.
            self._hold_late(response["late"], armed, spec.logical_id, order_id)
            worker.kill()
            self._release(function_name, None)
            kind = response["late"]["dies_as"]
            self._record(spec, order_id, started, ERROR_TYPES[kind])
            self.faults.late.invocation_ended(spec.logical_id, order_id)
            return Invocation(death_error(kind, spec.timeout), "Unhandled")
        self._release(function_name, worker)
        if armed is not None and not response.get("fired"):
            self.faults.refund(armed)  # it answered without reaching the fault's point
        with self._lock:
            for call, n in response.get("calls", {}).items():
                self.calls[(spec.logical_id, call)] += n
        self._record(spec, order_id, started, response["error"])
        self.faults.late.invocation_ended(spec.logical_id, order_id)
        if response["error"]:
            return Invocation(response["payload"].encode(), "Unhandled")
        return Invocation(response["payload"].encode())

    def _hold_late(self, late: dict[str, Any], fault: Fault, function: str, order_id: str | None) -> None:
        def send() -> None:
            import urllib3

            body = base64.b64decode(late["body"])
            urllib3.PoolManager().request(late["method"], late["url"], body=body, headers=late["headers"])

        self.faults.late.hold(
            send,
            what=f"{function} {late['what']} (order {order_id})",
            order_id=order_id,
            lands_after=fault.lands_after,
            seconds=fault.seconds or LATE_WRITE_SECONDS,
        )

    def _record(self, spec: FunctionSpec, order_id: str | None, started: float, error: str | None) -> None:
        duration = (time.perf_counter() - started) * 1000
        record = InvocationRecord(spec.logical_id, order_id, duration, error, time.monotonic())
        with self._lock:
            self.records.append(record)


def _read_line(worker: _Worker, *, timeout: float) -> bytes | None:
    """One response line from the worker, or ``None`` if it died or did not answer in time."""
    deadline = time.monotonic() + timeout
    while b"\n" not in worker.buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        readable, _, _ = select.select([worker.responses], [], [], remaining)
        if not readable:
            return None
        chunk = os.read(worker.responses, 65536)
        if not chunk:
            return None
        worker.buffer.extend(chunk)
    line, _, rest = bytes(worker.buffer).partition(b"\n")
    worker.buffer[:] = rest
    return line
