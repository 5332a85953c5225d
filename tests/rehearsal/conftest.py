"""The deploy rehearsal: the real `sam deploy` against LocalStack's CloudFormation engine, on this host.

`make deploy-rehearsal` builds the functions (`make sam-build`), installs LocalStack's Python runtime
in `.venv-localstack`, and runs these tests (marker `rehearsal`; `make test` leaves them out). The
``localstack`` fixture starts LocalStack through scripts/rehearsal/localstack_host.py (its three
offline workarounds), on a free port of 127.0.0.1, with its state in a temporary folder, and stops it
at the end. Nothing here reaches AWS or the internet.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
LOCALSTACK_PYTHON = ROOT / ".venv-localstack" / "bin" / "python"
LOCALSTACK_HOST = ROOT / "scripts" / "rehearsal" / "localstack_host.py"
SAM = ROOT / ".venv-sam" / "bin" / "sam"
BUILT_TEMPLATE = ROOT / ".aws-sam" / "build-check" / "template.yaml"
#: The outputs the README promises a deployed stack has ("The stack's outputs: `A`, `B` (what it is), ...").
#: The README's list of the stack's outputs (generated from the template: saga_local/harness/figures.py).
README_OUTPUTS = re.compile(r"<!-- figures:outputs -->(.*?)<!-- /figures:outputs -->", re.DOTALL)
FIRST_REGION = "us-east-1"
SECOND_REGION = "eu-west-1"
#: Bounds, not timings: LocalStack is up in a few seconds and a deploy takes about 40 s here.
START_TIMEOUT_SECONDS = 120
COMMAND_TIMEOUT_SECONDS = 600


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def readme_outputs() -> list[str]:
    found = README_OUTPUTS.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert found, "README.md no longer lists the stack's outputs"
    # Every output a default deploy has: not those of a condition the defaults leave off.
    return re.findall(r"^\* `(\w+)`:", found.group(1), flags=re.MULTILINE)


@dataclass
class LocalStack:
    """A running LocalStack: clients for it, the real `sam deploy` against it, and a stack's delete."""

    endpoint: str
    process: subprocess.Popen[bytes]
    log: Path
    secrets: dict[str, str] = field(default_factory=dict)

    @property
    def environment(self) -> dict[str, str]:
        """What `sam` runs with: every AWS call to LocalStack, dummy credentials, no telemetry."""
        return {
            **os.environ,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_EC2_METADATA_DISABLED": "true",
            "SAM_CLI_TELEMETRY": "0",
        }

    def client(self, service: str, region: str = FIRST_REGION) -> Any:
        return boto3.client(  # type: ignore[call-overload]  # the service is named at run time
            service,
            region_name=region,
            endpoint_url=self.endpoint,
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    def secret_arn(self) -> str:
        """The provider key's secret, in the first region only: a second region's stack reads it there."""
        if FIRST_REGION not in self.secrets:
            created = self.client("secretsmanager").create_secret(
                Name="payment-saga/stripe", SecretString=json.dumps({"apiKey": "sk_test_rehearsal"})
            )
            self.secrets[FIRST_REGION] = created["ARN"]
        return self.secrets[FIRST_REGION]

    def webhook_secret_arn(self) -> str:
        """The webhook endpoint's signing secret (a placeholder: nothing is delivered), first region only."""
        key = f"{FIRST_REGION}/webhook"
        if key not in self.secrets:
            created = self.client("secretsmanager").create_secret(
                Name="payment-saga/stripe-webhook", SecretString="whsec_rehearsal"
            )
            self.secrets[key] = created["ARN"]
        return self.secrets[key]

    def artifacts_bucket(self, region: str) -> str:
        name = f"rehearsal-artifacts-{region}"
        s3 = self.client("s3", region)
        if name not in {bucket["Name"] for bucket in s3.list_buckets()["Buckets"]}:
            location = (
                {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            )
            s3.create_bucket(Bucket=name, **location)
        return name

    def sam(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(  # noqa: S603 - the project's own SAM CLI, fixed arguments
            [str(SAM), *arguments],
            cwd=ROOT,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        assert result.returncode == 0, (
            f"sam {arguments[0]} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
        return result

    def deploy(self, stack: str, region: str = FIRST_REGION, **parameters: str) -> dict[str, Any]:
        """`sam deploy` of the built template, as a user's first deploy; the stack as described after it."""
        overrides = {
            "PaymentApiKeySecretArn": self.secret_arn(),
            "WebhookSigningSecretArn": self.webhook_secret_arn(),
            **parameters,
        }
        self.sam(
            "deploy",
            "--template-file",
            str(BUILT_TEMPLATE),
            "--stack-name",
            stack,
            "--region",
            region,
            "--s3-bucket",
            self.artifacts_bucket(region),
            "--capabilities",
            "CAPABILITY_IAM",
            "CAPABILITY_AUTO_EXPAND",
            "--no-confirm-changeset",
            "--no-fail-on-empty-changeset",
            "--parameter-overrides",
            *(f"{key}={value}" for key, value in overrides.items()),
        )
        return self.describe(stack, region)

    def delete(self, stack: str, region: str = FIRST_REGION) -> None:
        """What `sam delete` does to the stack: CloudFormation's DeleteStack, to the end. Not `sam delete`
        itself: before deleting the stack it deletes the uploaded artifacts, and it reads the nested
        operations template's location back only as an AWS S3 URL (s3://, https://s3...), never as
        LocalStack's http://127.0.0.1:<port>/..., and stops there with a ValueError."""
        cloudformation = self.client("cloudformation", region)
        cloudformation.delete_stack(StackName=stack)
        cloudformation.get_waiter("stack_delete_complete").wait(
            StackName=stack, WaiterConfig={"Delay": 2, "MaxAttempts": COMMAND_TIMEOUT_SECONDS // 2}
        )

    def describe(self, stack: str, region: str = FIRST_REGION) -> dict[str, Any]:
        (description,) = self.client("cloudformation", region).describe_stacks(StackName=stack)["Stacks"]
        found: dict[str, Any] = description
        return found

    def physical_ids(self, stack: str, region: str = FIRST_REGION) -> dict[str, str]:
        resources = self.client("cloudformation", region).describe_stack_resources(StackName=stack)
        return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources["StackResources"]}


def _healthy(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/_localstack/health", timeout=2) as response:  # noqa: S310
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def localstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    for needed, how in ((LOCALSTACK_PYTHON, "make deploy-rehearsal"), (SAM, "make tools")):
        if not needed.exists():
            pytest.fail(f"{needed.relative_to(ROOT)} is missing: run {how}")
    if not BUILT_TEMPLATE.exists():
        pytest.fail(f"{BUILT_TEMPLATE.relative_to(ROOT)} is missing: run make sam-build")
    port = free_port()
    state = tmp_path_factory.mktemp("localstack")
    endpoint = f"http://127.0.0.1:{port}"
    environment = {
        **os.environ,
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "LOCALSTACK_HOST": f"127.0.0.1:{port}",
        "FILESYSTEM_ROOT": str(state),
        # The project's pinned moto (this interpreter's venv) stands in for DynamoDB Local.
        "SAGA_REHEARSAL_MOTO_SERVER": str(Path(sys.executable).parent / "moto_server"),
        "SQS_ENDPOINT_STRATEGY": "path",
        # No DNS server (it would bind port 53), no telemetry, no certificate download.
        "DNS_ADDRESS": "0",
        "DISABLE_EVENTS": "1",
        "SKIP_SSL_CERT_DOWNLOAD": "1",
    }
    log = state / "localstack.log"
    with log.open("wb") as output:
        process = subprocess.Popen(  # noqa: S603 - LocalStack's interpreter and the project's launcher
            [str(LOCALSTACK_PYTHON), str(LOCALSTACK_HOST)],
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: LocalStack and the moto server it starts
        )
    running = LocalStack(endpoint=endpoint, process=process, log=log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not _healthy(endpoint):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"LocalStack did not start:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.5)
        yield running
    finally:
        _stop_group(process)


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group LocalStack leads, then SIGKILL to whatever of it is left (the moto server)."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sent)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue
