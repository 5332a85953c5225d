"""The handlers' clients: one botocore session for all, kept per container, and the one a host has set up.

A cold start pays once for botocore's endpoints data and each model: every client comes from one
session, and a client asked for again is the same one. The local stack's runtimes hook boto3's default
session's events to authorize, count and fault every call a handler makes: where one is set up, the
handlers' clients must come from it, or the hooks see nothing. Each case runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from saga_local.template import ROOT

#: Makes clients through the handlers' runtime, one call each answered by a stub, and reports.
PROGRAM = """
import json, sys
if sys.argv[1] == "host":
    import boto3
    seen = []
    def hook(model, **_):
        seen.append(model.name)
    boto3._get_default_session().events.register("before-parameter-build", hook)
else:
    seen = None
from botocore.stub import Stubber
from handlers import runtime
sqs, dynamodb = runtime.client("sqs"), runtime.client("dynamodb")
stub = Stubber(sqs)
stub.add_response("get_queue_url", {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/q"})
stub.activate()
sqs.get_queue_url(QueueName="q")
secrets = runtime._client("secretsmanager", "eu-west-1")
print(json.dumps({
    "same_client": runtime.client("sqs") is sqs,
    "one_loader": sqs._loader is dynamodb._loader is secrets._loader,
    "secret_client_kept": runtime._client("secretsmanager", "eu-west-1") is secrets,
    "secret_region": secrets.meta.region_name,
    "boto3": "boto3" in sys.modules,
    "hook_saw": seen,
}))
"""


def run(mode: str) -> dict[str, object]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "functions"),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "offline",
        "AWS_SECRET_ACCESS_KEY": "offline",
    }
    done = subprocess.run(  # noqa: S603 - this interpreter, the test's own program
        [sys.executable, "-c", PROGRAM, mode],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_every_client_comes_from_one_session_and_boto3_is_never_imported() -> None:
    alone = run("lambda")

    assert alone["boto3"] is False
    assert alone["same_client"] is True
    assert alone["one_loader"] is True
    assert alone["secret_client_kept"] is True
    assert alone["secret_region"] == "eu-west-1"


def test_a_host_that_set_up_boto3s_default_session_sees_every_call_the_handlers_make() -> None:
    hosted = run("host")

    assert hosted["hook_saw"] == ["GetQueueUrl"]
    assert hosted["one_loader"] is True
