"""A Lambda "container": one process running one function's handler, invocation after invocation.

Started by :class:`saga_local.runtime.runtimes.WorkerRuntime` with the function's environment. It
imports the handler once (the cold start), then serves requests read from a pipe, one at a time,
and writes each response to another pipe; the handler's own stdout and stderr (its structured
logs) go wherever the parent pointed them, as Lambda sends them to CloudWatch Logs.

Faults armed by the parent fire here, for real: ``die`` exits the process, ``timeout`` hangs
until the parent kills it at the function's timeout, ``oom`` allocates until the address-space
limit (the function's memory size over what the runtime already uses) raises MemoryError.
``throttle_call`` / ``error_call`` raise the AWS SDK's error from the call, ``delay`` sleeps (past
the function's timeout the parent kills it, as Lambda would), ``stop`` stops the invoking
execution and goes on (see :mod:`saga_local.runtime.faults`). ``lost_answer`` sends the request to the
moto server, drops its answer and lets botocore send it again (or, for the provider, sends the
create twice with one ``Idempotency-Key``); ``late_write`` hands the unsent request to the parent,
which holds it and sends it later, and dies.
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import resource
import sys
import time
import traceback
from typing import Any

#: Exit codes the parent reads: Lambda reports these deaths as Runtime.ExitError / OutOfMemory.
EXIT_DIED = 1
EXIT_OUT_OF_MEMORY = 137

_armed: dict[str, Any] | None = None
#: The execution that invoked us (the event's claim token), for ``stop``.
_token: str | None = None
#: True while the worker makes its own AWS call (``stop``), which the hooks must ignore.
_own_call = False
#: HTTP requests of the call being made (botocore's retries resend; faults fire on the first).
_sends = 0
#: Where responses go (the parent), for a ``late_write`` handing over its request.
_response_fd = -1
_SEND_KINDS = frozenset({"lost_answer", "late_write"})
#: How far the local stack's clock runs ahead of the machine's (`saga clock advance`), as the parent
#: sent it with the invocation: what ``time.time()`` adds here, so that leases, settle-by times and the
#: sweeper's grace move with the stack's clock while the functions' code reads time as it always does.
_clock_offset = 0.0
_machine_time = time.time


def _stack_time() -> float:
    return _machine_time() + _clock_offset


def _install_stack_clock() -> None:
    """Every ``time.time()`` of the functions reads the stack's clock. Installed before any of their
    modules is imported, so that a clock bound at import (``payment_saga.clock.system_clock``, the
    default of every store) is this one too."""
    time.time = _stack_time


def _fire(point: str, model: Any = None) -> None:
    global _armed
    if _armed is None or _armed["point"] != point:
        return
    if fault_kind_is_send():
        return
    fault, _armed = _armed, None
    kind = fault["kind"]
    if kind == "die":
        os._exit(EXIT_DIED)
    if kind == "timeout":
        while True:  # the parent kills us at the function's timeout
            time.sleep(3600)
    if kind == "oom":
        _exhaust_memory()
    if kind in ("throttle_call", "error_call"):
        from saga_local.runtime.faults import call_error

        raise call_error(kind, point.partition(":")[2], model)
    if kind == "delay":
        time.sleep(float(fault.get("seconds") or 0))  # past the timeout, the parent kills us
    if kind == "stop" and _token:
        _stop_execution(_token)


def fault_kind_is_send() -> bool:
    return _armed is not None and _armed["kind"] in _SEND_KINDS


def _fire_send(point: str, method: str, url: str, headers: dict[str, Any], body: bytes) -> bool:
    """A request of ``point``'s call is about to go out for the first time: fire a send fault.

    Returns True for a ``lost_answer`` (the caller sends the request, drops the answer and lets it
    be sent again); a ``late_write`` hands the request to the parent and dies here.
    """
    global _armed, _sends
    _sends += 1
    if _sends > 1 or _armed is None or _armed["point"] != point or not fault_kind_is_send():
        return False
    fault, _armed = _armed, None
    if fault["kind"] == "lost_answer":
        return True
    late = {
        "method": method,
        "url": url,
        "headers": {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in headers.items()},
        "body": base64.b64encode(body).decode(),
        "what": point.partition(":")[2],
        "dies_as": fault.get("dies_as") or "die",
    }
    os.write(_response_fd, json.dumps({"late": late}).encode() + b"\n")
    os._exit(EXIT_DIED)


def _stop_execution(execution_arn: str) -> None:
    """Stop the invoking execution and go on, as a running Lambda does when its execution stops."""
    global _own_call
    import boto3

    _own_call = True
    try:
        boto3.client("stepfunctions").stop_execution(
            executionArn=execution_arn, error="Chaos.Stopped", cause="fault: stop"
        )
    finally:
        _own_call = False


def _exhaust_memory() -> None:
    hog = []
    try:
        while True:
            hog.append(bytearray(64 * 1024 * 1024))
    except MemoryError:
        os._exit(EXIT_OUT_OF_MEMORY)


def _limit_memory(memory_mb: int) -> None:
    """Cap the address space at what the runtime uses now plus the function's memory size."""
    with open("/proc/self/status", encoding="ascii") as status:
        vm_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    limit = (vm_kb * 1024) + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _install_hooks(calls: dict[str, int]) -> None:
    import boto3

    from saga_local.runtime.api import IAM_HOOK_ENV, IAM_ROLE_ENV
    from saga_local.runtime.faults import apply_request, install_retry_sleep_skip, lost_answer_error

    def before(event_name: str, model: Any = None, **_: Any) -> None:
        global _sends
        if _own_call:
            return
        _sends = 0
        _fire("before:" + event_name.split(".", 1)[1], model)

    def after(event_name: str, **_: Any) -> None:
        name = event_name.split(".", 1)[1]
        if _own_call:
            return  # the worker's own StopExecution: neither the handler's call nor a fault point
        calls[name] = calls.get(name, 0) + 1
        _fire("after:" + name)

    def send(event_name: str, request: Any = None, **_: Any) -> None:
        if _own_call or request is None:
            return
        body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
        point = "after:" + event_name.split(".", 1)[1]
        if _fire_send(point, request.method, request.url, dict(request.headers), body):
            apply_request(request)
            raise lost_answer_error(request.url)

    events = boto3._get_default_session().events
    role = os.environ.get(IAM_ROLE_ENV)
    if role:
        # The stack's authorizer named its check (IAM_HOOK_ENV): the runtime imports no part of aws/.
        module, _, name = os.environ[IAM_HOOK_ENV].partition(":")
        authorize = getattr(importlib.import_module(module), name)(role)

        def before_parameter_build(**kwargs: Any) -> None:
            if not _own_call:
                authorize(**kwargs)

        events.register("before-parameter-build", before_parameter_build)
    events.register("before-call", before)
    events.register("after-call", after)
    events.register_first("before-send", send)
    install_retry_sleep_skip()
    _install_provider_hooks()


def _install_provider_hooks() -> None:
    import stripe

    from payment_saga.payments import StripeProvider

    original = StripeProvider.charge

    def charge(provider: Any, *args: Any, **kwargs: Any) -> Any:
        global _sends
        _fire("before:provider.charge")
        _sends = 0
        try:
            result = original(provider, *args, **kwargs)
        finally:
            _sends = -1_000_000  # no more charge requests until the next charge
        _fire("after:provider.charge")
        return result

    StripeProvider.charge = charge  # type: ignore[method-assign,assignment]
    request = stripe.RequestsClient.request

    def send(client: Any, method: str, url: str, headers: Any, post_data: Any = None) -> Any:
        if method.lower() == "post" and _sends >= 0:
            body = (post_data or "").encode() if isinstance(post_data, str) else (post_data or b"")
            if _fire_send("after:provider.charge", method.upper(), url, dict(headers or {}), body):
                request(client, method, url, headers, post_data)  # applied, its answer lost
        return request(client, method, url, headers, post_data)

    stripe.RequestsClient.request = send  # type: ignore[method-assign,assignment]


def _read_line(fd: int, buffer: bytearray) -> bytes | None:
    while b"\n" not in buffer:
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        buffer.extend(chunk)
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def main() -> None:
    global _armed, _token, _response_fd, _clock_offset
    _install_stack_clock()
    request_fd, response_fd = int(sys.argv[1]), int(sys.argv[2])
    _response_fd = response_fd
    functions_dir, handler_path, memory_mb = sys.argv[3], sys.argv[4], int(sys.argv[5])
    sys.path.insert(0, functions_dir)
    calls: dict[str, int] = {}
    from saga_local.runtime.api import GUARD_OFF_ENV, LambdaContext, lambda_error

    if os.environ.get(GUARD_OFF_ENV) == "1":
        from saga_local.runtime.guard import disable_claim_guard

        disable_claim_guard()
    _install_hooks(calls)
    import importlib

    module_name, _, attr = handler_path.rpartition(".")
    handler = getattr(importlib.import_module(module_name), attr)

    _limit_memory(memory_mb)
    os.write(response_fd, b'{"ready": true}\n')
    buffer = bytearray()
    while True:
        line = _read_line(request_fd, buffer)
        if line is None:
            return  # the parent closed the pipe: shut down
        request = json.loads(line)
        _armed = request.get("fault")
        _clock_offset = float(request.get("clockOffset") or 0.0)
        calls.clear()
        event = json.loads(request["payload"] or "{}")
        _token = event.get("claimToken") if isinstance(event, dict) else None
        context = LambdaContext(request["function_name"], memory_mb, request["timeout"])
        try:
            if _armed and _armed["point"] == "start":
                _fire("start")
            result = handler(event, context)
            _fire("end")
            response: dict[str, Any] = {"payload": json.dumps(result), "error": None}
        except MemoryError:
            os._exit(EXIT_OUT_OF_MEMORY)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, as Lambda does
            error = lambda_error(type(exc).__name__, str(exc), traceback.format_exception(exc))
            response = {"payload": error.decode(), "error": type(exc).__name__}
        response["fired"] = _armed is None and request.get("fault") is not None
        response["calls"] = calls
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(response_fd, json.dumps(response).encode() + b"\n")


if __name__ == "__main__":
    main()
