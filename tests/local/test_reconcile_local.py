"""``saga reconcile`` by hand: on the embedded local stack, and against a "deployed" stack found
through CloudFormation (moto), reading the provider key from the stack's secret as the sweeper does."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from payment_saga.api_keys import KeyModeMismatch, UnsafeApiBase
from payment_saga.claims import ClaimsStore, ClaimStatus
from payment_saga.orders import Order
from payment_saga.payments import Charge, StripeProvider, idempotency_key
from payment_saga.reconcile import ReconcileOutcome
from saga_local import cli
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.harness.sweep import deployed_stack, not_due, reconcile_deployed, reconcile_stack, render
from saga_local.stack.embedded import EmbeddedStack
from saga_local.stripe_emulator import ENDPOINTS, ProviderEmulator
from saga_local.template import load_template
from tests.local.entry_point_support import LOCAL_AWS, SAGA, saga

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LEASE = 900
ORDER = Order("ORDER-003", 15000, "BRL", "cus_123", "pm_card_visa")


def test_local_reconcile_is_a_dry_run_until_applied(stack: EmbeddedStack) -> None:
    # The charge lands but every answer is a 500: the execution ends in Needs Reconciliation.
    stack.provider.inject("fail_after_apply_replayed", order_id=ORDER.order_id)
    stack.driver.send(ORDER.to_message())
    stack.driver.pump()
    assert stack.driver.outcome_counts() == {"NeedsReconciliation": 1}
    later = time.time() + LEASE + 1

    dry = reconcile_stack(stack, apply=False, now=later)

    (decision,) = dry.decisions
    (landed,) = stack.provider.charges_for(ORDER.order_id)
    assert (decision.outcome, decision.charge_id, decision.applied) == (
        ReconcileOutcome.COMPLETED,
        landed.charge_id,
        False,
    )
    assert (stack.driver.claim(ORDER.order_id) or {})["status"] == "CLAIMED"
    assert "dry run" in render(dry)
    assert "would be completed" in render(dry)

    applied = reconcile_stack(stack, apply=True, now=later)

    assert [d.outcome for d in applied.decisions] == [ReconcileOutcome.COMPLETED]
    claim = stack.driver.claim(ORDER.order_id) or {}
    assert (claim["status"], claim["chargeId"]) == ("COMPLETED", landed.charge_id)
    assert len(stack.provider.charges_for(ORDER.order_id)) == 1
    assert reconcile_stack(stack, apply=True, now=later).decisions == []


def test_local_reconcile_without_a_time_leaves_live_claims_alone(stack: EmbeddedStack) -> None:
    stack.provider.inject("fail_after_apply_replayed", order_id=ORDER.order_id)
    stack.driver.send(ORDER.to_message())
    stack.driver.pump()

    report = reconcile_stack(stack, apply=True)  # now: the lease has 15 minutes to go

    assert report.decisions == []
    assert (stack.driver.claim(ORDER.order_id) or {})["status"] == "CLAIMED"
    assert "none" in render(report)


# -- a deployed stack, through CloudFormation ---------------------------------------------------


def create_deployed_stack(
    api_base: str,
    *,
    retention_days: str | None = "45",
    api_key: str = LOCAL_API_KEY,
    secret_account: str | None = None,
    api_mode: str | None = None,
) -> str:
    """A stack with what reconciliation reads: the claims table as template.yaml declares it, its
    ``ClaimsTableName`` output, the provider parameters, with the key in Secrets Manager, and the
    retention of closed claims (``None``: a stack deployed before it was a parameter).
    ``secret_account`` names the secret's ARN in another account than the stack's; ``api_mode`` is the
    stack's ``PaymentApiMode`` (``None``: left to its default)."""
    secret = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="payment-saga/stripe", SecretString=json.dumps({"apiKey": api_key})
    )
    if secret_account is not None:
        parts = secret["ARN"].split(":")
        secret = {**secret, "ARN": ":".join([*parts[:4], secret_account, *parts[5:]])}
    template = load_template()
    body = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Parameters": {
            name: template["Parameters"][name]
            for name in (
                "PaymentApiBase",
                "PaymentApiKeySecretArn",
                "ClaimRetentionDays",
                "ExistingClaimsTableStreamArn",
                "PaymentApiMode",
            )
            if retention_days is not None or name != "ClaimRetentionDays"
        },
        # The table made here (ExistingClaimsTableStreamArn empty), as a first deploy makes it.
        "Conditions": {"CreateClaimsTable": template["Conditions"]["CreateClaimsTable"]},
        "Resources": {"ClaimsTable": template["Resources"]["ClaimsTable"]},
        "Outputs": {"ClaimsTableName": template["Outputs"]["ClaimsTableName"]},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="payment-saga",
        TemplateBody=json.dumps(body),
        Parameters=[
            {"ParameterKey": "PaymentApiKeySecretArn", "ParameterValue": secret["ARN"]},
            {"ParameterKey": "PaymentApiBase", "ParameterValue": api_base},
            *(
                []
                if retention_days is None
                else [{"ParameterKey": "ClaimRetentionDays", "ParameterValue": retention_days}]
            ),
            *([] if api_mode is None else [{"ParameterKey": "PaymentApiMode", "ParameterValue": api_mode}]),
        ],
    )
    return "payment-saga"


def test_the_deployed_stack_is_found_by_its_outputs_and_parameters(aws: None) -> None:
    name = create_deployed_stack("https://payments.example")

    found = deployed_stack(boto3.client("cloudformation", region_name=REGION), name)

    assert found.table_name.startswith("payment-saga-ClaimsTable")
    assert found.secret_arn.startswith("arn:aws:secretsmanager:")
    assert found.api_base == "https://payments.example"
    assert found.retention_seconds == 45 * 24 * 3600


def test_a_stack_deployed_without_the_retention_parameter_is_refused_not_given_a_default(aws: None) -> None:
    """Closing a claim with a retention shorter than the stack's could let it expire while a copy of
    its order is still in a queue: a redelivered copy would then be charged again."""
    name = create_deployed_stack("https://payments.example", retention_days=None)

    with pytest.raises(LookupError, match="ClaimRetentionDays"):
        reconcile_deployed(name, apply=True, region=REGION)


def test_a_stack_that_is_not_a_payment_saga_is_refused(aws: None) -> None:
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="other",
        TemplateBody=json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}}),
    )

    with pytest.raises(LookupError, match="ClaimsTableName"):
        deployed_stack(boto3.client("cloudformation", region_name=REGION), "other")


def stale_charged_claim(emulator: ProviderEmulator) -> tuple[str, str, Any, Charge]:
    """A deployed stack whose claim of ORDER was taken 2,000 s ago (lease 900 s), charged at the
    emulator, and never completed: its name, its claims table, a DynamoDB client and the charge."""
    name = create_deployed_stack(emulator.url)
    table = deployed_stack(boto3.client("cloudformation", region_name=REGION), name).table_name
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    ClaimsStore(table, client=dynamodb, clock=lambda: time.time() - 2000).claim(ORDER, token="exec-A")
    provider = StripeProvider(LOCAL_API_KEY, api_base=emulator.url)
    landed = provider.charge(ORDER, attempt=1, idempotency_key=idempotency_key(ORDER.order_id, 1))
    provider.close()
    return name, table, dynamodb, landed


def test_reconcile_deployed_resolves_stale_claims_with_the_key_from_the_stacks_secret(aws: None) -> None:
    with ProviderEmulator() as emulator:
        name, table, dynamodb, landed = stale_charged_claim(emulator)

        dry = reconcile_deployed(name, apply=False, region=REGION)
        applied = reconcile_deployed(name, apply=True, region=REGION)

    assert [(d.outcome, d.applied) for d in dry.decisions] == [(ReconcileOutcome.COMPLETED, False)]
    assert [(d.outcome, d.charge_id) for d in applied.decisions] == [
        (ReconcileOutcome.COMPLETED, landed.charge_id)
    ]
    claim = ClaimsStore(table, client=dynamodb).get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, landed.charge_id)
    assert len(emulator.charges_for(ORDER.order_id)) == 1
    # The completed claim is kept as long as the stack's parameter says (45 days), not the library's 30.
    item = dynamodb.get_item(TableName=table, Key={"orderId": {"S": ORDER.order_id}}, ConsistentRead=True)
    assert int(item["Item"]["expiresAt"]["N"]) - time.time() > 44 * 24 * 3600


# -- the stack's parameters do not decide where the operator's key goes ------------------------------

#: A live-mode key, built so that no string here looks like one to a scanner (no account's key).
LIVE_KEY = "_".join(("sk", "live", "operator", "laptop"))


@pytest.mark.parametrize(
    ("api_base", "key"),
    [
        ("https://api.stripe.com.attacker.example", LIVE_KEY),  # a live key, any host but Stripe's
        ("https://203.0.113.7:8443/collect", LIVE_KEY),
        ("http://203.0.113.7/collect", LOCAL_API_KEY),  # plain http, before the secret is even read
    ],
)
def test_reconcile_of_a_deployed_stack_refuses_a_redirected_base_url(
    aws: None, api_base: str, key: str
) -> None:
    # The stack's mode matches its key: what is refused is where the key would go.
    name = create_deployed_stack(api_base, api_key=key, api_mode="live" if key == LIVE_KEY else None)

    with pytest.raises(UnsafeApiBase) as refused:
        reconcile_deployed(name, apply=True, region=REGION)

    assert key not in str(refused.value)


def test_reconcile_of_a_deployed_stack_refuses_a_secret_in_another_account(aws: None) -> None:
    name = create_deployed_stack("", secret_account="999999999999")

    with pytest.raises(LookupError, match="another account"):
        reconcile_deployed(name, apply=True, region=REGION)


def test_a_reconcile_with_nothing_due_says_which_claims_wait_and_until_when(stack: EmbeddedStack) -> None:
    # The charge lands but every answer is a 500: the claim stays open, its lease 15 minutes to go.
    stack.provider.inject("fail_after_apply_replayed", order_id=ORDER.order_id)
    stack.driver.send(ORDER.to_message())
    stack.driver.pump()
    now = time.time()
    store = ClaimsStore(stack.stack.table_name, client=stack.client("dynamodb"), clock=lambda: now)

    report = reconcile_stack(stack, apply=False, now=now)
    waiting = not_due(store, now)
    text = render(report, waiting=waiting)

    assert report.decisions == []
    assert [claim.order_id for claim in waiting] == [ORDER.order_id]
    assert "none: no claim's lease has ended yet" in text
    (line,) = [line for line in text.splitlines() if ORDER.order_id in line]
    assert "open, lease ends" in line
    assert 0 < float(line.split("(in ")[1].split(" s)")[0].replace(",", "")) <= LEASE
    assert not_due(store, now + LEASE + 1) == []  # once the lease ended, it is the sweep's to decide


def test_reconcile_of_a_deployed_stack_with_nothing_due_says_which_claims_wait_and_until_when(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with ProviderEmulator() as emulator:
        name = create_deployed_stack(emulator.url)
        table = deployed_stack(boto3.client("cloudformation", region_name=REGION), name).table_name
        # Claimed just now: its lease runs 15 more minutes, so the sweep has nothing to decide yet.
        ClaimsStore(table, client=boto3.client("dynamodb", region_name=REGION)).claim(ORDER, token="exec-A")

        assert cli.main(["reconcile", "--stack", name, "--region", REGION]) == 0

    text = capsys.readouterr().out
    assert "none: no claim's lease has ended yet" in text
    (line,) = [line for line in text.splitlines() if ORDER.order_id in line]
    assert "open, lease ends" in line
    assert 0 < float(line.split("(in ")[1].split(" s)")[0].replace(",", "")) <= LEASE


def test_reconcile_of_a_deployed_stack_refuses_a_key_of_the_other_mode_and_touches_no_claim(
    aws: None,
) -> None:
    """The stack says live (its webhooks accept only live events) and its secret holds a test key: the
    deployed sweeper refuses to sweep, so reconciling by hand must refuse too, before any request."""
    with ProviderEmulator() as emulator:
        name = create_deployed_stack(emulator.url, api_mode="live")
        table = deployed_stack(boto3.client("cloudformation", region_name=REGION), name).table_name
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        ClaimsStore(table, client=dynamodb, clock=lambda: time.time() - 2000).claim(ORDER, token="exec-A")

        with pytest.raises(KeyModeMismatch, match="test-mode key") as refused:
            reconcile_deployed(name, apply=True, region=REGION)
        requests = sum(emulator.request_count(endpoint) for endpoint in ENDPOINTS)

    assert LOCAL_API_KEY not in str(refused.value)
    assert requests == 0  # nothing was sent to the provider
    claim = ClaimsStore(table, client=dynamodb).get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.claim_token) == (ClaimStatus.CLAIMED, "exec-A")


@pytest.mark.parametrize(
    ("stack", "says"),
    [
        ("mode", "test-mode key and the stack's PaymentApiMode is live"),
        ("retention", "no ClaimRetentionDays parameter"),
        ("base", "PaymentApiBase is refused: plain http"),
    ],
)
def test_saga_reconcile_answers_a_stack_it_refuses_in_one_line(
    aws: None, capsys: pytest.CaptureFixture[str], stack: str, says: str
) -> None:
    name = {
        "mode": lambda: create_deployed_stack("", api_mode="live"),
        "retention": lambda: create_deployed_stack("", retention_days=None),
        "base": lambda: create_deployed_stack("http://203.0.113.7/collect"),
    }[stack]()

    with pytest.raises(SystemExit) as refused:
        cli.main(["reconcile", "--stack", name, "--region", REGION])

    message = str(refused.value.code)
    assert message.startswith("saga reconcile: ")
    assert says in message
    assert "\n" not in message
    assert LOCAL_API_KEY not in message


# -- through the installed entry point, at a stack behind --endpoint-url --------------------------


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A moto server on a free loopback port, which this process's clients reach (AWS_ENDPOINT_URL)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    for name, value in {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
    }.items():
        monkeypatch.setenv(name, value)
    try:
        yield url
    finally:
        server.stop()


@pytest.mark.skipif(not SAGA.exists(), reason=f"{SAGA} is not installed (make install)")
def test_saga_reconcile_of_a_stack_behind_an_endpoint_reads_and_writes_it_there(
    moto_server: str, tmp_path: Path
) -> None:
    """``--endpoint-url`` reaches the stack, its secret and its claims table: none of them at AWS."""
    with ProviderEmulator() as emulator:
        name, table, dynamodb, landed = stale_charged_claim(emulator)

        target = ["--stack", name, "--region", REGION, "--endpoint-url", moto_server]
        # No AWS_ENDPOINT_URL: the option alone says where the stack is.
        result = saga(tmp_path, "reconcile", "--apply", *target, timeout=120, aws=LOCAL_AWS)

    assert (result.returncode, result.stderr) == (0, "")
    (line,) = [line for line in result.stdout.splitlines() if ORDER.order_id in line]
    assert f"completed {landed.charge_id}" in line
    claim = ClaimsStore(table, client=dynamodb).get(ORDER.order_id)
    assert claim is not None
    assert (claim.status, claim.charge_id) == (ClaimStatus.COMPLETED, landed.charge_id)
