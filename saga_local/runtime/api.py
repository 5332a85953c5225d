"""What Lambda's Python runtime gives a handler and returns for it: kept free of moto and boto3.

Imported by the worker processes (``saga_local.runtime.worker``), which must start fast.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from saga_local.runtime.faults import ERROR_TYPES

if TYPE_CHECKING:
    from collections.abc import Mapping

#: The demo's one switch: set to "1" in a worker's environment by ``WorkerRuntime(guard_off=True)``
#: only; the worker then applies :func:`saga_local.runtime.guard.disable_claim_guard`.
GUARD_OFF_ENV = "SAGA_LOCAL_GUARD_OFF"
#: The function's role as deployed (``Authorizer.role_json``), in a worker's environment: the worker
#: checks every AWS call of its handler against it (``saga_local.aws.iam``).
IAM_ROLE_ENV = "SAGA_LOCAL_IAM_ROLE"
#: Beside it, what turns that role into the worker's check (``Authorizer.worker_hook_path``): the
#: stack's authorizer names it, so the runtime enforces the roles without importing aws/ above it.
IAM_HOOK_ENV = "SAGA_LOCAL_IAM_HOOK"


class Authorizer(Protocol):
    """What the runtime asks of the stack's roles (``saga_local.aws.iam.Authorizer`` evaluates them)."""

    @property
    def roles(self) -> Mapping[str, object]:
        """principal (a function's logical id) -> its role."""
        ...

    def check(self, principal: str, model: Any, params: dict[str, Any]) -> None:
        """Raise what AWS raises when ``principal``'s role may not make this call."""
        ...

    def role_json(self, principal: str) -> str:
        """One role, for a worker process (it checks its own calls)."""
        ...

    def worker_hook_path(self) -> str:
        """``module:function`` that a worker imports and calls with :meth:`role_json`'s text to get
        its botocore ``before-parameter-build`` check."""
        ...


@dataclass(frozen=True)
class Invocation:
    """What a Lambda invocation returned: the payload, and ``FunctionError`` when it failed."""

    payload: bytes
    function_error: str | None = None


class LambdaRuntime(Protocol):
    """Runs a function by name. Raises :class:`Throttled` to answer as the Lambda service would."""

    def invoke(self, function_name: str, payload: bytes) -> Invocation: ...


class Throttled(Exception):
    """The Lambda service refused the invocation (429 ``TooManyRequestsException``)."""


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
