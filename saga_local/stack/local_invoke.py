"""One function on one event, the way ``sam local invoke`` runs it, without Docker (``saga invoke``).

What ``sam local invoke FUNCTION -e EVENT --env-vars FILE`` does, and this does too:

* the handler, timeout and memory from ``template.yaml`` (Globals merged in);
* the environment: the variables the function declares in the template, each overridden by the
  shell's value of the same name, then by the env-vars file (SAM's format: ``{"Parameters": {...}}``
  for every function, ``{"<LogicalId>": {...}}`` for one; the function's own section wins). As in
  SAM CLI, a variable the function does not declare is **not** set, whatever the file says;
* Lambda's own variables (``AWS_LAMBDA_FUNCTION_NAME``, ``AWS_REGION``, ``AWS_SAM_LOCAL``...) and
  credentials;
* a fresh process per invocation (a cold start), whose logs go to stderr and whose result goes to
  stdout, so that ``saga invoke ... > result.json`` keeps the result alone.

Where SAM runs the function in the Lambda image (Docker), this runs it in a child process of the
project's Python with ``functions/`` as its task root. ``saga up`` writes the env-vars file that
points every function at the embedded local stack (:data:`SAM_ENV_FILE`): the same file serves
``sam local invoke ... --env-vars .saga/sam-env.json --docker-network host``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from saga_local.paths import STATE_DIR
from saga_local.private_files import write_private_text
from saga_local.stack.running import endpoint_answers
from saga_local.template import ROOT, functions, load_template, parameter_defaults

if TYPE_CHECKING:
    from pathlib import Path

    from saga_local.aws.stack import Stack
    from saga_local.template import FunctionSpec

#: The env-vars file ``saga up`` writes (SAM CLI's ``--env-vars`` format).
SAM_ENV_FILE = STATE_DIR / "sam-env.json"
FUNCTIONS_DIR = ROOT / "functions"
#: What SAM CLI puts in the container when it finds no credentials or region.
SAM_DEFAULTS = {"region": "us-east-1", "key": "defaultkey", "secret": "defaultsecret"}
#: The pseudo parameters' values in a local invoke (SAM CLI's IntrinsicsSymbolTable defaults).
SAM_PSEUDO_PARAMETERS = {
    "AWS::StackName": "local",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::Partition": "aws",
    "AWS::URLSuffix": "localhost",
}
#: Interpreter start and imports, on top of the function's own timeout (Lambda's init is separate too).
INIT_ALLOWANCE_SECONDS = 10.0


class InvokeError(Exception):
    """The invocation could not be set up (unknown function, unreadable file...): a message for people."""


def sam_env_vars(stack: Stack, endpoint: str) -> dict[str, dict[str, str]]:
    """SAM CLI's env-vars file for the embedded stack: per function, each variable it declares set
    to the embedded stack's value, and ``AWS_ENDPOINT_URL`` (declared in the template's Globals) to
    ``endpoint``, so that its AWS calls reach the embedded stack."""
    document: dict[str, dict[str, str]] = {}
    for spec, environment in stack.functions.values():
        values = {name: environment[name] for name in spec.environment if name in environment}
        values["AWS_ENDPOINT_URL"] = endpoint
        document[spec.logical_id] = dict(sorted(values.items()))
    return dict(sorted(document.items()))


def write_sam_env_file(stack: Stack, endpoint: str, path: Path = SAM_ENV_FILE) -> Path:
    return write_private_text(path, json.dumps(sam_env_vars(stack, endpoint), indent=2) + "\n")


def read_env_vars_file(path: Path) -> dict[str, dict[str, Any]]:
    """A SAM env-vars file (JSON): every top-level value must be an object, as SAM CLI requires."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvokeError(f"cannot read the env-vars file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvokeError(f"the env-vars file {path} is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or not all(isinstance(v, dict) for v in document.values()):
        raise InvokeError(
            f"the env-vars file {path} must look like"
            ' {"Parameters": {"VAR": "value"}, "<FunctionLogicalId>": {"VAR": "value"}}'
        )
    return document


def _template_value(value: Any, defaults: dict[str, str]) -> str:
    """A declared variable's value as SAM CLI sees it: parameters resolved, a ``!Sub`` of parameters
    and pseudo parameters filled in (SAM's local values), other intrinsics blank."""
    if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in defaults:
        return defaults[value["Ref"]]
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        # The metrics namespace (PaymentSaga/${AWS::StackName}): blank, Powertools would refuse to
        # publish any metric; SAM CLI makes it PaymentSaga/local, out of every deployed stack's way.
        known = {**SAM_PSEUDO_PARAMETERS, **defaults}
        text = value["Fn::Sub"]
        names = re.findall(r"\$\{([^}!][^}]*)\}", text)
        if all(name in known for name in names):
            return re.sub(r"\$\{([^}!][^}]*)\}", lambda match: known[match.group(1)], text)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list) or value is None:
        return ""
    return str(value)


def function_environment(
    spec: FunctionSpec,
    overrides: dict[str, dict[str, Any]],
    *,
    defaults: dict[str, str],
    shell: dict[str, str],
    region: str,
    credentials: dict[str, str],
) -> dict[str, str]:
    """The function's environment, resolved the way SAM CLI's ``EnvironmentVariables.resolve`` does."""
    file_values = {**overrides.get("Parameters", {}), **overrides.get(spec.logical_id, {})}
    environment = {
        "AWS_SAM_LOCAL": "true",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
        "AWS_LAMBDA_FUNCTION_TIMEOUT": str(spec.timeout),
        "AWS_LAMBDA_FUNCTION_HANDLER": spec.handler,
        "AWS_LAMBDA_FUNCTION_NAME": spec.logical_id,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"aws/lambda/{spec.logical_id}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "$LATEST",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": credentials["key"],
        "AWS_SECRET_ACCESS_KEY": credentials["secret"],
    }
    if credentials.get("token"):
        environment["AWS_SESSION_TOKEN"] = credentials["token"]
    for name, value in spec.environment.items():
        chosen: Any = value
        if name in shell:
            chosen = shell[name]
        if name in file_values:
            chosen = file_values[name]
        environment[name] = _template_value(chosen, defaults)
    return environment


def _is_loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


def credentials_for(endpoint_url: str) -> dict[str, str]:
    """Credentials for the function. Against a loopback endpoint (the embedded stack, which accepts
    any) fixed local ones, so no real key is handed to a local run; otherwise the caller's own
    (environment or profile), as SAM CLI passes them, else SAM's placeholders."""
    if _is_loopback(endpoint_url):
        return {"key": "local", "secret": "local"}
    import boto3

    found = boto3.Session().get_credentials()
    if found is None:
        return {"key": SAM_DEFAULTS["key"], "secret": SAM_DEFAULTS["secret"]}
    frozen = found.get_frozen_credentials()
    return {"key": frozen.access_key or "", "secret": frozen.secret_key or "", "token": frozen.token or ""}


@dataclass
class InvokeResult:
    """What the invocation returned: the payload (stdout) and whether the function failed."""

    payload: str
    function_error: str | None
    duration_ms: float


def find_function(logical_id: str) -> FunctionSpec:
    specs = functions(load_template())
    if logical_id not in specs:
        raise InvokeError(
            f"no function {logical_id!r} in template.yaml; the functions: {', '.join(sorted(specs))}"
        )
    return specs[logical_id]


def invoke(
    logical_id: str,
    event_path: Path,
    env_vars_path: Path,
    *,
    region: str | None = None,
    shell: dict[str, str] | None = None,
) -> InvokeResult:
    """Run ``logical_id``'s handler on the event in ``event_path``, in a fresh process (logs to stderr)."""
    spec = find_function(logical_id)
    try:
        event_text = event_path.read_text(encoding="utf-8")
        json.loads(event_text)
    except OSError as exc:
        raise InvokeError(f"cannot read the event {event_path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvokeError(f"the event {event_path} is not valid JSON: {exc}") from None
    overrides = read_env_vars_file(env_vars_path)
    shell = dict(os.environ) if shell is None else shell
    file_values = {**overrides.get("Parameters", {}), **overrides.get(logical_id, {})}
    endpoint = str(file_values.get("AWS_ENDPOINT_URL") or shell.get("AWS_ENDPOINT_URL") or "")
    if endpoint and _is_loopback(endpoint) and not endpoint_answers(endpoint):
        # The function would fail on its first AWS call, as a page of connection-error JSON.
        raise InvokeError(
            f"nothing answers at {endpoint} (where {env_vars_path} points the function): is `saga up` still"
            " running? Start it again, or pass --env-vars FILE for another stack."
        )
    region = region or shell.get("AWS_REGION") or shell.get("AWS_DEFAULT_REGION") or SAM_DEFAULTS["region"]
    environment = function_environment(
        spec,
        overrides,
        defaults=parameter_defaults(load_template()),
        shell=shell,
        region=region,
        credentials=credentials_for(endpoint),
    )
    # The child is a clean "container": the function's environment, the interpreter's PATH, and the
    # task root (functions/) on its path; nothing else of this shell leaks in.
    environment["PATH"] = shell.get("PATH", os.defpath)
    environment["PYTHONPATH"] = str(FUNCTIONS_DIR)
    environment["PYTHONUNBUFFERED"] = "1"
    started = time.monotonic()
    try:
        completed = subprocess.run(  # noqa: S603 - our own interpreter and module
            [
                sys.executable,
                "-m",
                "saga_local.runtime.invoke_child",
                spec.handler,
                str(spec.timeout),
                str(spec.memory_mb),
            ],
            input=event_text.encode(),
            stdout=subprocess.PIPE,
            env=environment,
            cwd=ROOT,
            timeout=spec.timeout + INIT_ALLOWANCE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        elapsed = (time.monotonic() - started) * 1000
        payload = {
            "errorType": "Sandbox.Timedout",
            "errorMessage": f"Task timed out after {spec.timeout:.2f} seconds",
        }
        return InvokeResult(json.dumps(payload), "Unhandled", elapsed)
    elapsed = (time.monotonic() - started) * 1000
    payload_text = completed.stdout.decode("utf-8", errors="replace").strip()
    if completed.returncode == 0:
        return InvokeResult(payload_text, None, elapsed)
    if not payload_text:
        payload_text = json.dumps(
            {
                "errorType": "Runtime.ExitError",
                "errorMessage": f"Runtime exited with error: exit status {completed.returncode}",
            }
        )
    return InvokeResult(payload_text, "Unhandled", elapsed)
