"""The embedded local stack end to end: moto's server, worker processes as Lambda, the SQS event source.

Worker processes die for real here (exit, hang past the timeout, exhaust their memory limit): the
state machine sees the error names Lambda gives, retries, and the stack itself survives.
"""

from __future__ import annotations

import gc
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

import boto3
import pytest

from saga_local.runtime.faults import Fault, FaultPlan

if TYPE_CHECKING:
    from collections.abc import Iterator
from saga_local.stack.embedded import EmbeddedStack
from tests.helpers import order


@pytest.fixture(scope="module")
def workers() -> Iterator[EmbeddedStack]:
    faults = FaultPlan()
    with EmbeddedStack(runtime="workers", faults=faults, visibility_timeout=1, max_workers=2) as stack:
        yield stack


def failed_errors(stack: EmbeddedStack, arn: str) -> list[str]:
    return [
        e["taskFailedEventDetails"]["error"] for e in stack.driver.history(arn) if e["type"] == "TaskFailed"
    ]


def test_real_clients_reach_the_stack_over_http(workers: EmbeddedStack) -> None:
    sfn = boto3.client(
        "stepfunctions",
        endpoint_url=workers.endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    machines = sfn.list_state_machines()["stateMachines"]
    assert [m["stateMachineArn"] for m in machines] == [workers.stack.state_machine_arn]
    admin = urllib.request.Request(  # noqa: S310 - the emulator's loopback URL
        f"{workers.provider.url}/_emulator/charges",
        headers={"X-Emulator-Token": workers.provider.admin_token},
    )
    with urllib.request.urlopen(admin, timeout=5) as response:  # noqa: S310
        assert response.status == 200


def status_of(
    url: str, *, method: str = "GET", headers: dict[str, str] | None = None, body: bytes = b""
) -> int:
    """The HTTP status a raw request gets (what a browser's request would get)."""
    request = urllib.request.Request(url, data=body or None, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback only
            return int(response.status)
    except urllib.error.HTTPError as refused:
        return int(refused.code)


#: What a web page's request carries: a no-preflight text/plain POST from another site.
FROM_A_WEB_PAGE = {"Origin": "https://attacker.example", "Content-Type": "text/plain"}


def test_a_web_page_cannot_drive_the_local_aws(workers: EmbeddedStack) -> None:
    """moto answers any Origin and any Host; in front of it the stack refuses both, before any action."""
    purge = f"{workers.endpoint}/?Action=PurgeQueue&QueueUrl={workers.stack.queue_url}"
    workers.driver.send(order("ORDER-WEB"))
    depth = workers.driver.queue_depth()

    assert status_of(purge, method="POST", headers=FROM_A_WEB_PAGE) == 403
    assert status_of(purge, headers={"Sec-Fetch-Site": "cross-site"}) == 403  # an <img> tag
    rebound = workers.endpoint.replace("127.0.0.1", "rebind.attacker.example")
    assert status_of(purge, headers={"Host": urllib.parse.urlsplit(rebound).netloc}) == 403
    assert workers.driver.queue_depth() == depth, "nothing was purged"
    # The real clients (boto3, the AWS CLI, SAM CLI) still are answered, under any loopback name.
    local = workers.endpoint.replace("127.0.0.1", "localhost")
    sqs = boto3.client(
        "sqs", endpoint_url=local, region_name="us-east-1", aws_access_key_id="l", aws_secret_access_key="l"
    )
    assert sqs.get_queue_url(QueueName=workers.stack.queue_url.rsplit("/", 1)[-1])["QueueUrl"]


def test_a_web_page_cannot_drive_the_stripe_emulator(workers: EmbeddedStack) -> None:
    """The admin routes reset the emulator, inject faults or turn deduplication off: a page's request,
    a rebound Host or a request without this run's token is refused, and nothing changes."""
    provider = workers.provider
    reset = f"{provider.url}/_emulator/reset"
    token = {"X-Emulator-Token": provider.admin_token}
    workers.driver.send(order("ORDER-WEB-2"))
    workers.driver.pump()
    charged = len(provider.charges())
    assert charged >= 1

    assert status_of(reset, method="POST", headers={**FROM_A_WEB_PAGE, **token}, body=b"{}") == 403
    rebound = {"Host": f"rebind.attacker.example:{urllib.parse.urlsplit(provider.url).port}", **token}
    assert status_of(reset, method="POST", headers=rebound, body=b"{}") == 403
    assert status_of(reset, method="POST", body=b"{}") == 403, "no token, no admin route"
    assert status_of(reset, method="POST", headers={"X-Emulator-Token": "guess"}, body=b"{}") == 403
    assert status_of(f"{provider.url}/v1/payment_intents", headers=FROM_A_WEB_PAGE) == 403
    assert len(provider.charges()) == charged, "the emulator was not reset"
    # With the token the stack file holds, local tooling may.
    assert status_of(reset, method="POST", headers=token, body=b"{}") == 200
    assert provider.charges() == []


def test_a_web_page_cannot_put_faults_on_the_functions_only_the_stack_files_token_can(
    workers: EmbeddedStack,
) -> None:
    """The fault control of `saga up` throttles or kills functions: a page's request, a rebound Host or
    a request without this run's token is refused, and no fault is added."""
    control = workers.fault_control()
    faults = f"{control['url']}/faults"
    token = {"X-Saga-Token": control["token"], "Content-Type": "application/json"}
    throttle = json.dumps(
        {"function": "ClaimOrderFunction", "point": "start", "kind": "throttle", "orderId": "ORDER-NONE"}
    ).encode()
    before = len(workers.faults.faults)

    assert status_of(faults, method="POST", headers={**FROM_A_WEB_PAGE, **token}, body=throttle) == 403
    rebound = {"Host": f"rebind.attacker.example:{urllib.parse.urlsplit(faults).port}", **token}
    assert status_of(faults, method="POST", headers=rebound, body=throttle) == 403
    assert status_of(faults, method="POST", body=throttle) == 403, "no token, no fault"
    assert status_of(faults, method="POST", headers={**token, "X-Saga-Token": "guess"}, body=throttle) == 403
    assert len(workers.faults.faults) == before, "no fault was added"
    # With the token the stack file holds, `saga fault` may; a fault that could never fire is refused.
    never = json.dumps({"function": "ClaimOrderFunction", "point": "after:sqs.SendMessage"}).encode()
    assert status_of(faults, method="POST", headers=token, body=never) == 400
    assert status_of(faults, method="POST", headers=token, body=throttle) == 200
    assert [str(f) for f in workers.faults.faults[before:]] == [
        "ClaimOrderFunction: throttle at start (order ORDER-NONE)"
    ]
    assert status_of(faults, method="DELETE", headers=token) == 200
    assert workers.faults.faults == []


@pytest.mark.parametrize(
    ("kind", "error"),
    [("die", "Runtime.ExitError"), ("oom", "Runtime.OutOfMemory"), ("timeout", "Sandbox.Timedout")],
)
def test_a_worker_that_dies_after_its_write_is_reported_as_lambda_would_and_the_order_charges_once(
    workers: EmbeddedStack, kind: str, error: str
) -> None:
    order_id = f"ORDER-W-{kind}"
    workers.faults.add(Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", kind, order_id=order_id))  # type: ignore[arg-type]

    result = workers.driver.wait(workers.driver.start(order(order_id), name=f"worker-{kind}"), timeout=120)

    assert result.outcome == "CHARGED"
    assert failed_errors(workers, result.arn) == [error]
    assert len(workers.provider.charges_for(order_id)) == 1


def test_four_deliveries_through_sqs_charge_once(workers: EmbeddedStack) -> None:
    workers.driver.send(order("ORDER-W-SQS"), copies=4)

    workers.driver.pump(pollers=2, timeout=120)

    assert len(workers.provider.charges_for("ORDER-W-SQS")) == 1
    assert workers.driver.claim("ORDER-W-SQS")["status"] == "COMPLETED"  # type: ignore[index]


def test_a_message_that_keeps_failing_reaches_the_dead_letter_queue_after_max_receives(
    workers: EmbeddedStack,
) -> None:
    # The start function dies on every batch that carries it: SQS redelivers, then redrives it.
    body = json.dumps(order("ORDER-W-POISON"))
    workers.faults.add(Fault("StartExecutionFunction", "start", "die", times=5))
    workers.driver.send(body)

    workers.driver.pump(timeout=120)

    assert workers.driver.event_source.stats.invocation_errors >= 5
    dead = [m["Body"] for m in workers.driver.dead_letters()]
    assert body in dead
    assert workers.provider.charges_for("ORDER-W-POISON") == []


def test_a_running_stack_keeps_its_startup_objects_out_of_the_collectors_walks_and_gives_them_back() -> None:
    # Full collections over the objects alive at startup made every order slower; a process that
    # runs many stacks (this test suite) must get them back when each stops, or what they hold in
    # cycles would never be freed.
    environment = dict(os.environ)
    try:
        with EmbeddedStack(runtime="inprocess"):
            assert gc.get_freeze_count() > 100_000
    finally:
        os.environ.clear()
        os.environ.update(environment)
    assert gc.get_freeze_count() == 0
