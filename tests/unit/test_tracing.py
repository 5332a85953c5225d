"""X-Ray tracing where it is on, and nothing of the X-Ray SDK where it is off.

In Lambda (``LAMBDA_TASK_ROOT``), unless ``POWERTOOLS_TRACE_DISABLED``, the handlers' Tracer is X-Ray's:
it patches botocore at import and sends the handler's subsegment, its AWS calls' under it, to the
daemon. Elsewhere (local runs, tests) it neither imports the SDK (with asyncio, about a tenth of a
function's import) nor records. Each case runs in a fresh interpreter: the Tracer is built at import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from saga_local.template import ROOT

#: Imports the handlers' runtime, runs a traced handler that makes one AWS call (answered by a stub,
#: never sent), and says what was loaded, patched and sent to the X-Ray daemon.
PROGRAM = """
import json, sys
from handlers import runtime
sent = []
if "aws_xray_sdk.core" in sys.modules:
    from aws_xray_sdk.core import xray_recorder
    class Emitter:
        def send_entity(self, entity):
            sent.append(entity.to_dict())
        def set_daemon_address(self, address):
            pass
    xray_recorder.emitter = Emitter()
from botocore.stub import Stubber
sqs = runtime.client("sqs")
stub = Stubber(sqs)
stub.add_response("get_queue_url", {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/q"})
stub.activate()
@runtime.tracer.capture_lambda_handler
def handler(event, context):
    return sqs.get_queue_url(QueueName="q")["QueueUrl"]
answer = handler({}, None)
names = [entity["name"] for entity in sent]
print(json.dumps({"answer": answer, "xray_sdk": "aws_xray_sdk.core" in sys.modules,
                  "asyncio": "asyncio" in sys.modules, "sent": names}))
"""

TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def run(**environment: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("POWERTOOLS_TRACE_DISABLED", "LAMBDA_TASK_ROOT")}
    env.update(
        PYTHONPATH=str(ROOT / "functions"),
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="offline",
        AWS_SECRET_ACCESS_KEY="offline",
        _X_AMZN_TRACE_ID=TRACE_HEADER,
        **environment,
    )
    done = subprocess.run(  # noqa: S603 - this interpreter, the test's own program
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_in_lambda_the_handler_and_its_aws_calls_are_sent_to_xray() -> None:
    traced = run(LAMBDA_TASK_ROOT=str(ROOT / "functions"))

    assert traced["answer"] == "https://sqs.us-east-1.amazonaws.com/1/q"
    assert traced["xray_sdk"] is True
    assert traced["sent"] == ["sqs", "## handler"]  # the AWS call's subsegment, then the handler's


def test_with_tracing_off_nothing_of_the_xray_sdk_is_imported_and_the_handler_still_runs() -> None:
    for off in ({}, {"LAMBDA_TASK_ROOT": str(ROOT / "functions"), "POWERTOOLS_TRACE_DISABLED": "true"}):
        untraced = run(**off)

        assert untraced["answer"] == "https://sqs.us-east-1.amazonaws.com/1/q"
        assert untraced["xray_sdk"] is False, off
        assert untraced["asyncio"] is False, off
        assert untraced["sent"] == []
