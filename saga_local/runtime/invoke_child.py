"""The process ``saga invoke`` runs a function in: one cold start, one invocation, then exit.

Usage (by :mod:`saga_local.stack.local_invoke` only):
``python -m saga_local.runtime.invoke_child HANDLER TIMEOUT MEMORY``, the event on stdin, the
function's environment already set. Like the Lambda runtime, it prints
``START`` / ``END`` / ``REPORT`` around the invocation; the handler's logs and those lines go to
stderr, the result (or Lambda's error payload) to stdout. Exit status 0 when the handler returned,
1 when it raised.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import uuid
import warnings

from saga_local.runtime.api import LambdaContext, lambda_error


def main(argv: list[str]) -> int:
    handler_path, timeout, memory = argv[0], int(argv[1]), int(argv[2])
    event = json.loads(sys.stdin.read())
    result_stream = sys.stdout
    # Everything the handler prints (Powertools JSON logs, EMF metric lines) is a log, not the result.
    sys.stdout = sys.stderr
    # Lambda's task root is the code alone: drop the project root the module was found through.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.getcwd()]
    # Powertools warns when an invocation publishes no metric (a step that failed before its count):
    # a Python warning, not a log line of the function, as the local stack's workers treat it too.
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    request_id = str(uuid.uuid4())
    name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "function")
    print(f"START RequestId: {request_id} Version: $LATEST", file=sys.stderr, flush=True)
    started = time.monotonic()
    status = 0
    try:
        module_name, _, attribute = handler_path.rpartition(".")
        handler = getattr(importlib.import_module(module_name), attribute)
        context = LambdaContext(name, memory, timeout, aws_request_id=request_id)
        payload = json.dumps(handler(event, context))
    except Exception as exc:  # noqa: BLE001 - reported as Lambda reports an unhandled error
        payload = lambda_error(type(exc).__name__, str(exc), traceback.format_exception(exc)).decode()
        status = 1
    elapsed = (time.monotonic() - started) * 1000
    print(f"END RequestId: {request_id}", file=sys.stderr)
    print(
        f"REPORT RequestId: {request_id}\tDuration: {elapsed:.2f} ms\tBilled Duration: {int(elapsed) + 1} ms"
        f"\tMemory Size: {memory} MB",
        file=sys.stderr,
        flush=True,
    )
    result_stream.write(payload + "\n")
    result_stream.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
