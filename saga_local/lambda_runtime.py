"""Run the template's functions the way Lambda runs them, without Docker.

:class:`InProcessRuntime` imports the real handlers from ``functions/`` (the same import root as
Lambda's ``CodeUri``) and calls them in the caller's thread: fast, used by the tests. A failed
invocation is reported as Lambda reports it: ``FunctionError: Unhandled`` and a payload of
``{"errorType": <exception class name>, "errorMessage": ...}``, or for a death injected by a
:class:`~saga_local.faults.Fault`, ``Runtime.ExitError`` / ``Sandbox.Timedout`` /
``Runtime.OutOfMemory``. The worker-process runtime of the local stack shares this contract.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import boto3

from saga_local.faults import ERROR_TYPES, FaultPlan, InvocationKilled
from saga_local.moto_adapter import Invocation, Throttled
from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.template import FunctionSpec

FUNCTIONS_DIR = ROOT / "functions"


@dataclass
class LambdaContext:
    """The parts of Lambda's context object that handlers and Powertools read."""

    function_name: str
    memory_limit_in_mb: int
    timeout_seconds: int
    invoked_function_arn: str = ""
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_seconds - (time.monotonic() - self._started)) * 1000))


@dataclass(frozen=True)
class InvocationRecord:
    """One invocation, for counting (invocations per order) and for the report."""

    function: str  # logical id
    order_id: str | None
    duration_ms: float
    error_type: str | None


def order_id_of(event: Any) -> str | None:
    """The order an event concerns, wherever the step puts it (for fault targeting and counting)."""
    if not isinstance(event, dict):
        return None
    for candidate in (event.get("order"), (event.get("state") or {}).get("order"), event):
        if isinstance(candidate, dict) and isinstance(candidate.get("orderId"), str):
            return str(candidate["orderId"])
    return None


def lambda_error(error_type: str, message: str, trace: list[str] | None = None) -> bytes:
    """The payload Lambda's Python runtime returns for a failed invocation."""
    body: dict[str, Any] = {"errorMessage": message, "errorType": error_type, "requestId": str(uuid.uuid4())}
    if trace is not None:
        body["stackTrace"] = trace
    return json.dumps(body).encode()


def death_error(kind: str, timeout_seconds: int) -> bytes:
    """How Lambda words a death of each kind."""
    error_type = ERROR_TYPES[kind]
    message = {
        "Runtime.ExitError": "RequestId: local Error: Runtime exited with error: exit status 1",
        "Sandbox.Timedout": f"RequestId: local Error: Task timed out after {timeout_seconds:.2f} seconds",
        "Runtime.OutOfMemory": "RequestId: local Error: Runtime exited with error: signal: killed",
    }[error_type]
    return lambda_error(error_type, message)


class _Current(threading.local):
    function: str | None = None
    order_id: str | None = None


class InProcessRuntime:
    """Runs handlers in this process, in the invoking thread (moto runs each execution in its own).

    Args:
        functions: physical function name -> (spec, resolved environment).
        faults: injected faults (optional).
    """

    def __init__(
        self, functions: dict[str, tuple[FunctionSpec, dict[str, str]]], *, faults: FaultPlan | None = None
    ) -> None:
        self.functions = functions
        self.faults = faults or FaultPlan()
        self.records: list[InvocationRecord] = []
        #: AWS and provider calls made by handlers: (function logical id, call name) -> count.
        self.calls: Counter[tuple[str, str]] = Counter()
        self._records_lock = threading.Lock()
        self._current = _Current()
        self._handlers: dict[str, Callable[[Any, Any], Any]] = {}
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
        from handlers import runtime as handler_runtime  # noqa: PLC0415 - needs the path above

        handler_runtime.reset()  # a fresh "container": clients are created inside the mock

    def _install_call_hooks(self) -> None:
        """Observe every AWS and provider call a handler makes, to count it and to inject faults.

        The hooks are installed once per process and dispatch to the newest runtime, so that a
        second runtime (a new test) never finds the first one's hooks in its way.
        """
        global _ACTIVE  # noqa: PLW0603 - one runtime serves the process at a time
        _ACTIVE = self
        events = boto3._get_default_session().events  # noqa: SLF001 - the session the handlers use
        events.register("before-call", _before_call, unique_id="saga-runtime-before")
        events.register("after-call", _after_call, unique_id="saga-runtime-after")
        from payment_saga.payments import StripeProvider  # noqa: PLC0415

        if not getattr(StripeProvider.charge, "__saga_hooked__", False):
            original = StripeProvider.charge

            def charge(provider: Any, *args: Any, **kwargs: Any) -> Any:
                _point("before:provider.charge")
                result = original(provider, *args, **kwargs)
                _point("after:provider.charge")
                return result

            charge.__saga_hooked__ = True  # type: ignore[attr-defined]
            StripeProvider.charge = charge  # type: ignore[method-assign]

    def observe(self, call: str) -> None:
        if self._current.function is not None:
            with self._records_lock:
                self.calls[(self._current.function, call)] += 1

    def point(self, point: str) -> None:
        """Fire the fault planned for the current invocation at ``point``, if any."""
        function = self._current.function
        if function is None:
            return
        fault = self.faults.take(function, point, self._current.order_id)
        if fault is not None:
            raise InvocationKilled(fault.kind, point)

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
        self._current.function, self._current.order_id = spec.logical_id, order_id
        try:
            fault = self.faults.take(spec.logical_id, "start", order_id)
            if fault is not None and fault.kind == "throttle":
                error_type = "Lambda.TooManyRequestsException"
                raise Throttled("Rate Exceeded.")
            if fault is not None:
                raise InvocationKilled(fault.kind, "start")
            context = LambdaContext(function_name, spec.memory_mb, spec.timeout)
            result = self.handler(spec)(event, context)
            self.point("end")
            return Invocation(json.dumps(result).encode())
        except Throttled:
            raise
        except InvocationKilled as death:
            error_type = ERROR_TYPES[death.kind]
            return Invocation(death_error(death.kind, spec.timeout), "Unhandled")
        except Exception as exc:  # noqa: BLE001 - reported to the state machine, as Lambda does
            error_type = type(exc).__name__
            trace = traceback.format_exception(exc)
            return Invocation(lambda_error(error_type, str(exc), trace), "Unhandled")
        finally:
            self._current.function = self._current.order_id = None
            record = InvocationRecord(spec.logical_id, order_id, (time.perf_counter() - started) * 1000, error_type)
            with self._records_lock:
                self.records.append(record)


_ACTIVE: InProcessRuntime | None = None


def _point(point: str) -> None:
    if _ACTIVE is not None:
        _ACTIVE.point(point)


def _before_call(event_name: str, **_: Any) -> None:
    _point("before:" + _call_name(event_name))


def _after_call(event_name: str, **_: Any) -> None:
    call = _call_name(event_name)
    if _ACTIVE is not None:
        _ACTIVE.observe(call)
    _point("after:" + call)


def _call_name(event_name: str) -> str:
    # "after-call.dynamodb.UpdateItem" -> "dynamodb.UpdateItem"
    return event_name.split(".", 1)[1] if "." in event_name else event_name
