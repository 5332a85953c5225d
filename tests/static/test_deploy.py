"""The first deploy, and the second region, checked offline.

Each test is one way a real deploy failed or would fail, read against the CloudFormation, SAM and
service documentation: a reservation a small account refuses, a dashboard name taken in another
region, an orphaned table after a failed first create, a secret read in the wrong region or with a
partial ARN, a partition hardcoded in the state machine, an alarm topic in another region, log
groups nobody declared, a plain-http payment API, a CI deploy that waits for a prompt.

The template is read as YAML (``template``) and, where SAM changes what CloudFormation receives,
as SAM's own transform produces it (``deployed``, from ``test_security``).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from samtranslator.translator.transform import transform

from payment_saga.orders import ORDER_ID_PATTERN
from payment_saga.sweep_lock import SWEEP_LOCK_KEY
from saga_local.aws.stack import ACCOUNT_ID, REGION, provision
from saga_local.template import Resolver, state_machine_definition, validate_parameters

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.static.conftest import StateMachine, Template

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "deploy.md"
#: A new account's Lambda concurrency quota, and what Lambda keeps unreserved in it.
SMALL_ACCOUNT_QUOTA = 10
#: CloudWatch Logs' accepted retention periods (PutRetentionPolicy).
LOG_RETENTION_DAYS = {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731}
LOG_RETENTION_DAYS |= {1096, 1827, 2192, 2557, 2922, 3288, 3653}
SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:payment-saga/stripe-AbCdEf"
KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
NO_VALUE = {"Ref": "AWS::NoValue"}
#: A log group as the docs write it: ``/aws/lambda/<stack>-SweeperFunction``.
LOG_GROUP_IN_DOCS = re.compile(r"/aws/[a-z/]+/<stack>-[A-Za-z0-9][A-Za-z0-9.*-]*(?:<create id>)?")


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


@pytest.fixture(scope="module")
def deployed(template: Template) -> dict[str, Any]:
    """What ``sam deploy`` sends CloudFormation, with a customer managed key on the secret."""
    sam = json.loads(json.dumps(template.data))
    sam["Globals"]["Function"]["CodeUri"] = "s3://artifacts/functions.zip"
    parameters = {"PaymentApiKeySecretArn": SECRET_ARN, "PaymentApiKeySecretKmsKeyArn": KEY_ARN}
    result: dict[str, Any] = transform(sam, parameters, _NoManagedPolicies())
    return result


def allowed(template: Template, parameter: str, value: str) -> bool:
    """Whether CloudFormation would take ``value`` for ``parameter`` (the local stack's own check)."""
    try:
        validate_parameters(template.data, {parameter: value})
    except ValueError:
        return False
    return True


# -- concurrency: no reservation by default, the sweeper single-flight by a lease row ----------------

#: The receiver's reservation as the template writes it: the parameter's value, or none at all.
RECEIVER_RESERVATION = {
    "Fn::If": ["BoundWebhookReceiver", {"Ref": "WebhookReceiverMaxConcurrency"}, NO_VALUE]
}


def reservation(template: Template, parameters: dict[str, str]) -> dict[str, Any]:
    """Function -> the ReservedConcurrentExecutions CloudFormation receives with these parameters."""
    resolver = Resolver(
        parameters={**{k: str(v.get("Default", "")) for k, v in template.parameters.items()}, **parameters},
        conditions=template.data["Conditions"],
    )
    found = {}
    for name in template.functions:
        setting = template.function_setting(name, "ReservedConcurrentExecutions")
        if setting is None:
            continue
        condition, if_true, if_false = setting["Fn::If"]
        chosen = if_true if resolver.condition(condition) else if_false
        if chosen != NO_VALUE:
            found[name] = resolver.resolve(chosen)
    return found


def test_no_function_reserves_concurrency_by_default(template: Template, deployed: dict[str, Any]) -> None:
    """An account whose quota is 10 refuses any reservation ("decreases account's
    UnreservedConcurrentExecution below its minimum value of [10]"): the defaults reserve nothing."""
    assert reservation(template, {}) == {}
    for name in template.functions:
        if name != "WebhookReceiverFunction":
            assert template.function_setting(name, "ReservedConcurrentExecutions") is None, name
    for name, resource in deployed["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function" and name != "WebhookReceiverFunction":
            assert "ReservedConcurrentExecutions" not in resource["Properties"], name


def test_the_public_urls_receiver_is_bounded_by_its_parameter_where_the_quota_allows(
    template: Template,
) -> None:
    """Only the receiver faces the internet: with WebhookReceiverMaxConcurrency set, a flood of requests to
    its URL is throttled at that bound and leaves the rest of the quota to the charge path. 0 is no
    reservation (Lambda's 0 would refuse every delivery)."""
    parameter = template.parameters["WebhookReceiverMaxConcurrency"]
    assert (parameter["Default"], parameter["MinValue"]) == (0, 0)
    assert (
        template.functions["WebhookReceiverFunction"]["ReservedConcurrentExecutions"] == RECEIVER_RESERVATION
    )
    assert template.functions["WebhookReceiverFunction"]["FunctionUrlConfig"]["AuthType"] == "NONE"

    assert reservation(template, {"WebhookReceiverMaxConcurrency": "10"}) == {"WebhookReceiverFunction": "10"}
    assert reservation(template, {"WebhookReceiverMaxConcurrency": "0"}) == {}
    docs = DOCS.read_text(encoding="utf-8")
    assert "| `WebhookReceiverMaxConcurrency` | 0 |" in docs


def test_the_sweeper_takes_the_lease_row_before_it_sweeps(
    template: Template, claims_table_value: dict[str, Any]
) -> None:
    """One sweep at a time: the handler takes the lease (one conditional write on the claims table, which
    its role may update) before anything else, releases it, and skips when another sweep holds it."""
    tree = ast.parse((ROOT / "functions" / "handlers" / "sweeper.py").read_text(encoding="utf-8"))
    (handler,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "handler"]
    calls = [
        node.func.attr
        for node in ast.walk(handler)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    ]
    assert "acquire" in calls
    assert "release" in calls
    assert calls.index("acquire") < calls.index("release")
    sweeper = template.function_by_handler("handlers.sweeper.handler")
    grants = [
        statement
        for statement in template.function_statements(sweeper)
        if "dynamodb:UpdateItem" in statement["Action"]
    ]
    table = template.functions[sweeper]["Environment"]["Variables"]["CLAIMS_TABLE_NAME"]
    assert table == claims_table_value["Name"]
    assert [g["Resource"] for g in grants] == [claims_table_value["Arn"]]
    # The row shares the claims table: no producer's order id can be its key.
    assert not ORDER_ID_PATTERN.match(SWEEP_LOCK_KEY)


def test_the_orders_queue_concurrency_is_a_parameter_sized_for_a_small_account(template: Template) -> None:
    sources = [
        event["Properties"]
        for properties in template.functions.values()
        for event in (properties.get("Events") or {}).values()
        if event["Type"] == "SQS" and event["Properties"]["Queue"] == {"Fn::GetAtt": ["OrdersQueue", "Arn"]}
    ]
    assert len(sources) == 1
    for source in sources:
        reference = source["ScalingConfig"]["MaximumConcurrency"]
        parameter = template.parameters[reference["Ref"]]
        # The event source's own range (Lambda API ScalingConfig: 2 to 1000).
        assert (parameter["MinValue"], parameter["MaxValue"]) == (2, 1000)
        # docs/deploy.md's arithmetic, N + steps + 1 (sweeper) + R (relay, one shard) <= Q, in a new
        # account (Q = 10): the default leaves the steps the most the event source allows, and at
        # least as many Lambdas as executions one start Lambda's batch can hand them at once, less the
        # few that the state machine's Retry of Lambda.TooManyRequestsException absorbs.
        default = int(parameter["Default"])
        assert default == parameter["MinValue"]
        steps = SMALL_ACCOUNT_QUOTA - default - 1 - 1
        assert steps >= source["BatchSize"] // 2 + 1
        docs = DOCS.read_text(encoding="utf-8")
        assert f"| `{reference['Ref']}` | {default} |" in docs, "docs/deploy.md gives another default"


def test_the_deploy_guide_lists_every_parameter_with_its_default(template: Template) -> None:
    """The guided deploy asks for each parameter by name: the guide says what each one sets."""
    rows = dict(
        re.findall(r"^\| `(\w+)` \| ([^|]+) \|", DOCS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    )
    for name, spec in template.parameters.items():
        assert name in rows, f"docs/deploy.md's parameter table lacks {name}"
        default = spec.get("Default")
        shown = rows[name].strip()
        if default is None:
            assert shown == "(required)", name
        elif default == "":
            assert shown == "empty", name
        else:
            assert shown == str(default), f"{name}: the guide says {shown}, the template {default}"


def test_the_log_groups_the_docs_name_are_the_ones_the_template_declares(template: Template) -> None:
    """A runbook step that searches a log group by a name it does not have finds nothing."""
    declared = set()
    for properties in template.of_type("AWS::Logs::LogGroup").values():
        name = properties["LogGroupName"]["Fn::Sub"]
        name = name[0] if isinstance(name, list) else name  # the list form names its variables after it
        declared.add(str(name).replace("${AWS::StackName}", "<stack>").replace("${CreateId}", "<create id>"))
    named = {
        (path.name, found)
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for found in LOG_GROUP_IN_DOCS.findall(path.read_text(encoding="utf-8"))
    }
    assert named
    for document, name in named:
        assert name in declared, (
            f"{document} names the log group {name}; the template's are {sorted(declared)}"
        )


# -- names that must not collide across regions -------------------------------------------------------


def test_the_dashboard_name_differs_per_region(template: Template) -> None:
    """Dashboards are global to the account: a second region's stack of the same name would fail
    with "already exists"."""
    for name, properties in template.of_type("AWS::CloudWatch::Dashboard").items():
        if "DashboardName" not in properties:
            continue  # CloudFormation makes a unique one
        text = properties["DashboardName"]["Fn::Sub"]
        assert "${AWS::Region}" in text, name
        assert "${AWS::StackName}" in text, name


def test_nothing_else_is_named_for_the_account_alone(template: Template) -> None:
    """Global names (dashboards) carry the region; other named resources are regional by nature."""
    global_types = {"AWS::CloudWatch::Dashboard", "AWS::IAM::Role", "AWS::IAM::ManagedPolicy"}
    for name, resource in template.resources.items():
        if resource["Type"] not in global_types:
            continue
        explicit = {key: value for key, value in resource["Properties"].items() if key.endswith("Name")}
        for value in explicit.values():
            assert "${AWS::Region}" in json.dumps(value), f"{name}: a global name without the region"


# -- the claims table: no stack operation starts an empty one ------------------------------------------

STACK_POLICY = ROOT / "stack-policy.json"
STREAM_ARN = (
    "arn:aws:dynamodb:eu-west-1:123456789012:table/payment-saga-ClaimsTable-1A2B3C/stream/2026-12-01T15:26:13"
)


def test_no_stack_operation_deletes_the_claims_table(deployed: dict[str, Any]) -> None:
    """A delete, a replacement or a rolled-back first create leaves the table (Retain: with deletion
    protection, RetainExceptOnCreate's delete would fail the rollback), and DynamoDB refuses to delete it."""
    tables = [r for r in deployed["Resources"].values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert len(tables) == 1
    (table,) = tables
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"
    assert table["Properties"]["DeletionProtectionEnabled"] is True


def test_the_stack_policy_denies_replacing_or_deleting_the_claims_table_and_nothing_else() -> None:
    policy = json.loads(STACK_POLICY.read_text(encoding="utf-8"))
    denies = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
    assert denies == [
        {
            "Effect": "Deny",
            "Principal": "*",
            "Action": ["Update:Replace", "Update:Delete"],
            "Resource": "LogicalResourceId/ClaimsTable",
        }
    ]
    # A stack policy denies every update it does not allow: the rest of the stack stays deployable.
    assert {"Effect": "Allow", "Principal": "*", "Action": "Update:*", "Resource": "*"} in policy["Statement"]
    docs = DOCS.read_text(encoding="utf-8")
    command = "aws cloudformation set-stack-policy --stack-name payment-saga"
    assert f"{command} --stack-policy-body file://stack-policy.json" in docs


def _references_to(value: Any, logical_id: str, path: str) -> Iterator[str]:
    """Where ``value`` uses ``logical_id`` (``!Ref``, ``!GetAtt``, ``${...}`` in ``!Sub``), by path."""
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from _references_to(item, logical_id, f"{path}[{index}]")
    elif isinstance(value, str):
        if re.search(r"\$\{" + logical_id + r"[.}]", value):
            yield path
    elif isinstance(value, dict):
        if value.get("Ref") == logical_id or (value.get("Fn::GetAtt") or [None])[0] == logical_id:
            yield path
        for key, item in value.items():
            yield from _references_to(item, logical_id, f"{path}.{key}")


def test_every_use_of_the_claims_table_follows_an_adopted_one(
    template: Template, claims_table_value: dict[str, Any]
) -> None:
    """With ExistingClaimsTableStreamArn set, no ClaimsTable exists: a reference left outside the
    !If would fail the deploy, or worse, point a function at nothing."""
    forms = [json.dumps(form, sort_keys=True) for form in claims_table_value.values()]
    uses = 0
    sections = {"Resources": template.resources, "Outputs": template.data["Outputs"]}
    for section, entries in sections.items():
        for name, entry in entries.items():
            if name == "ClaimsTable":
                continue
            text = json.dumps(entry, sort_keys=True)
            for form in forms:
                uses += text.count(form)
                text = text.replace(form, "null")
            assert not list(_references_to(json.loads(text), "ClaimsTable", f"{section}.{name}")), (
                f"{section}.{name} uses ClaimsTable outside the !If on CreateClaimsTable"
            )
    assert uses >= 15, "the check found too few uses of the claims table to mean anything"


def test_an_adopted_table_is_named_and_granted_from_its_stream_arn(
    claims_table_value: dict[str, Any],
) -> None:
    given = {"ExistingClaimsTableStreamArn": STREAM_ARN}
    adopted = {key: _evaluate(form["Fn::If"][2], given) for key, form in claims_table_value.items()}
    assert adopted == {
        "Name": "payment-saga-ClaimsTable-1A2B3C",
        "Arn": "arn:aws:dynamodb:eu-west-1:123456789012:table/payment-saga-ClaimsTable-1A2B3C",
        "StreamArn": STREAM_ARN,
    }


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        (STREAM_ARN, True),
        ("arn:aws-cn:dynamodb:cn-north-1:123456789012:table/claims/stream/2026-01-01T00:00:00.000", True),
        ("arn:aws:dynamodb:eu-west-1:123456789012:table/payment-saga-ClaimsTable-1A2B3C", False),  # a table
        ("payment-saga-ClaimsTable-1A2B3C", False),  # a name: the stream's label cannot be derived from it
    ],
)
def test_the_adoption_parameter_takes_only_a_stream_arn(template: Template, value: str, ok: bool) -> None:
    assert allowed(template, "ExistingClaimsTableStreamArn", value) is ok


# -- the provider's secret -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (SECRET_ARN, True),
        ("arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:stripe_key-a1B2c3", True),
        ("arn:aws:secretsmanager:eu-west-1:123456789012:secret:payment-saga/stripe", False),  # partial
        ("payment-saga/stripe", False),
        ("arn:aws:ssm:eu-west-1:123456789012:parameter/stripe-AbCdEf", False),
        ("", False),
    ],
)
def test_the_secret_parameter_takes_only_a_full_secret_arn(template: Template, value: str, ok: bool) -> None:
    """IAM matches a secret by its full ARN: a partial one deploys, then every read is denied."""
    assert allowed(template, "PaymentApiKeySecretArn", value) is ok


def test_the_secret_is_read_only_from_the_stacks_own_account(aws: None) -> None:
    """No pattern can know the account, so the grant rebuilds the parameter's ARN with the stack's
    own account: whoever sets PaymentApiKeySecretArn to another account's secret (one that grants
    this account a read, with a key they hold) gets a role that IAM refuses the read."""
    clients = functools.partial(boto3.client, region_name=REGION)
    own = f"arn:aws:secretsmanager:eu-west-1:{ACCOUNT_ID}:secret:payment-saga/stripe-AbCdEf"
    foreign = own.replace(ACCOUNT_ID, "999999999999")
    for name, arn, allowed in (("own", own, True), ("foreign", foreign, False)):
        stack = provision(clients, stack_name=name, parameters={"PaymentApiKeySecretArn": arn})
        assert stack.iam is not None
        for reader in ("ChargePaymentFunction", "SweeperFunction"):
            role = stack.iam.roles[reader]
            assert role.allows("secretsmanager:GetSecretValue", arn) is allowed, (name, reader)
            # The only secret either role may read is the one of this name in its own account.
            assert role.allows("secretsmanager:GetSecretValue", own), (name, reader)


def test_the_webhook_signing_secret_is_read_only_from_the_stacks_own_account(aws: None) -> None:
    """Whoever holds the signing secret can sign events the receiver accepts: a WebhookSigningSecretArn
    naming another account's secret (one shared with this account) deploys, and IAM refuses the read."""
    clients = functools.partial(boto3.client, region_name=REGION)
    own = f"arn:aws:secretsmanager:eu-west-1:{ACCOUNT_ID}:secret:payment-saga/webhook-AbCdEf"
    foreign = own.replace(ACCOUNT_ID, "999999999999")
    for name, arn, allowed in (("own", own, True), ("foreign", foreign, False)):
        stack = provision(clients, stack_name=name, parameters={"WebhookSigningSecretArn": arn})
        assert stack.iam is not None
        role = stack.iam.roles["WebhookReceiverFunction"]
        assert role.allows("secretsmanager:GetSecretValue", arn) is allowed, name
        assert role.allows("secretsmanager:GetSecretValue", own), name
        readers = {p for p, r in stack.iam.roles.items() if r.allows("secretsmanager:GetSecretValue", own)}
        assert readers == {"WebhookReceiverFunction"}, "only the receiver reads the signing secret"


def kms_grants(deployed: dict[str, Any], role: str) -> list[tuple[str, dict[str, Any]]]:
    """(condition, statement) for each kms statement of ``role`` (condition "" when unconditional) on
    any key but the state machine's own (tests/static/test_security.py checks those)."""
    found = []
    for policy in deployed["Resources"][role]["Properties"].get("Policies") or []:
        condition, document = "", policy
        if set(policy) == {"Fn::If"}:
            condition, document, otherwise = policy["Fn::If"]
            assert otherwise == NO_VALUE
        for statement in document["PolicyDocument"]["Statement"]:
            if "kms" in json.dumps(statement["Action"]) and "PaymentSagaStateMachineKey" not in json.dumps(
                statement["Resource"]
            ):
                found.append((condition, statement))
    return found


def test_decrypt_is_granted_with_a_customer_key_only_through_secrets_manager_for_this_secret(
    template: Template, deployed: dict[str, Any]
) -> None:
    readers = [
        name
        for name, properties in template.functions.items()
        if "PAYMENT_API_KEY_SECRET_ARN" in json.dumps(properties.get("Environment") or {})
    ]
    assert sorted(readers) == ["ChargePaymentFunction", "SweeperFunction", "WebhookConsumerFunction"]
    for role in [f"{name}Role" for name in template.functions] + ["PaymentSagaStateMachineRole"]:
        grants = kms_grants(deployed, role)
        if role.removesuffix("Role") not in readers:
            assert grants == [], role
            continue
        ((condition, statement),) = grants
        assert template.data["Conditions"][condition] == {
            "Fn::Not": [{"Fn::Equals": [{"Ref": "PaymentApiKeySecretKmsKeyArn"}, ""]}]
        }
        assert statement["Action"] == "kms:Decrypt"
        assert statement["Resource"] == {"Ref": "PaymentApiKeySecretKmsKeyArn"}
        equals = statement["Condition"]["StringEquals"]
        assert equals["kms:EncryptionContext:SecretARN"] == {"Ref": "PaymentApiKeySecretArn"}
        via, names = equals["kms:ViaService"]["Fn::Sub"]
        assert via == "secretsmanager.${SecretRegion}.${AWS::URLSuffix}"
        assert names["SecretRegion"] == {
            "Fn::Select": [3, {"Fn::Split": [":", {"Ref": "PaymentApiKeySecretArn"}]}]
        }
        # The region Fn::Select picks is the secret's: field 3 of the ARN.
        assert SECRET_ARN.split(":")[3] == "eu-west-1"


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        (KEY_ARN, True),
        ("arn:aws:kms:eu-west-1:123456789012:alias/stripe", False),
        ("alias/x", False),
    ],
)
def test_the_key_parameter_takes_a_key_arn_not_an_alias(template: Template, value: str, ok: bool) -> None:
    """An IAM policy grants kms:Decrypt on a key ARN; an alias ARN in Resource matches no key."""
    assert allowed(template, "PaymentApiKeySecretKmsKeyArn", value) is ok


# -- the partition -----------------------------------------------------------------------------------


def test_the_state_machine_takes_its_partition_from_the_stack(
    saga: StateMachine, deployed: dict[str, Any]
) -> None:
    """In aws-cn and aws-us-gov an arn:aws: resource fails every execution."""
    assert "arn:aws:" not in saga.text, "a hardcoded partition in the definition"
    partition_keys = [key for key, value in saga.substitutions.items() if value == {"Ref": "AWS::Partition"}]
    assert partition_keys, "no DefinitionSubstitutions entry carries AWS::Partition"
    for _, state in saga.tasks():
        resource = state["Resource"]
        if resource.startswith("arn:"):
            assert resource.split(":")[1] in {f"${{{key}}}" for key in partition_keys}, resource
    (machine,) = [
        r for r in deployed["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"
    ]
    substitutions = machine["Properties"]["DefinitionSubstitutions"]
    assert all(substitutions[key] == {"Ref": "AWS::Partition"} for key in partition_keys)


def test_the_local_stack_fills_the_partition_in_as_aws(template: Template, saga: StateMachine) -> None:
    resolver = Resolver(
        attrs={
            (name, "Arn"): f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
            for name in template.functions
        },
        refs={
            "OutcomeEventBus": "payment-saga-outcomes",
            "OrdersQueue": "https://sqs.us-east-1.amazonaws.com/123456789012/payment-saga-orders",
        },
    )
    definition = json.loads(state_machine_definition(template.data, saga.logical_id, resolver))
    resources = {state["Resource"] for state in definition["States"].values() if state["Type"] == "Task"}
    assert resources, "no task"
    assert all(resource.startswith("arn:aws:states:::") for resource in resources), resources


# -- the alarm topic -----------------------------------------------------------------------------------


def test_alarms_can_only_notify_a_topic_in_the_stacks_region(template: Template) -> None:
    """CloudWatch refuses a topic in another region (every alarm fails and the stack rolls back), so the
    operator names a topic and the template builds its ARN in the stack's region and account."""
    for name, spec in template.parameters.items():
        assert ":sns:" not in str(spec.get("AllowedPattern", "")), f"{name} takes an SNS ARN"
    assert not allowed(template, "AlarmTopicName", "arn:aws:sns:eu-west-1:123456789012:oncall")
    assert allowed(template, "AlarmTopicName", "oncall-payments")
    assert allowed(template, "AlarmTopicName", "")
    given = {"Fn::Sub": "arn:${AWS::Partition}:sns:${AWS::Region}:${AWS::AccountId}:${AlarmTopicName}"}
    alarms = template.of_type("AWS::CloudWatch::Alarm")
    assert alarms
    for name, properties in alarms.items():
        # A ticket-level alarm notifies nobody (tests/static/test_operations.py lists them).
        for actions in (properties.get("AlarmActions", []), properties.get("OKActions", [])):
            if not actions:
                continue
            ((condition, made_here, otherwise),) = [action["Fn::If"] for action in actions]
            assert (condition, made_here, otherwise) == ("CreateAlarmTopic", {"Ref": "AlarmTopic"}, given), (
                name
            )


# -- log groups ----------------------------------------------------------------------------------------


def test_every_function_logs_to_a_declared_log_group_with_a_retention(
    template: Template, deployed: dict[str, Any]
) -> None:
    """Lambda's own /aws/lambda/<name> group has no retention and outlives the stack."""
    retention = template.parameters["LogRetentionDays"]
    assert set(retention["AllowedValues"]) <= LOG_RETENTION_DAYS
    groups = template.of_type("AWS::Logs::LogGroup")
    used: list[str] = []
    for name in template.functions:
        config = template.function_setting(name, "LoggingConfig") or {}
        group = template.referenced_resource(config.get("LogGroup"))
        assert group in groups, f"{name} logs to no declared log group"
        assert groups[group]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, group
        group_name, _ = groups[group]["LogGroupName"]["Fn::Sub"]
        assert group_name.startswith("/aws/lambda/${AWS::StackName}-"), group
        used.append(group)
        assert deployed["Resources"][name]["Properties"]["LoggingConfig"] == {"LogGroup": {"Ref": group}}
    assert len(set(used)) == len(used), "two functions share a log group"
    for group, properties in groups.items():
        assert "RetentionInDays" in properties, f"{group} keeps its events forever"
        assert template.resources[group].get("DeletionPolicy", "Delete") == "Delete", group


def _evaluate(value: Any, parameters: dict[str, str]) -> Any:
    """Fn::Select/Split/Join and Ref of a parameter, as CloudFormation evaluates them."""
    if isinstance(value, list):
        return [_evaluate(item, parameters) for item in value]
    if not isinstance(value, dict):
        return value
    ((key, argument),) = value.items()
    if key == "Ref":
        return parameters[argument]
    index_or_separator, operand = _evaluate(argument[0], parameters), _evaluate(argument[1], parameters)
    if key == "Fn::Select":
        return operand[int(index_or_separator)]
    if key == "Fn::Split":
        return operand.split(index_or_separator)
    assert key == "Fn::Join", key
    return index_or_separator.join(operand)


def test_a_log_group_left_by_a_deleted_stack_never_blocks_the_next_create_of_its_name(
    template: Template,
) -> None:
    """A Lambda still running while `sam delete` removes its log group writes again and recreates it: a
    group named for the stack alone then fails the next create of that stack name ("already exists").
    Each name carries the create id (the first block of the stack id's UUID): new on every create, the
    same for every update, so an update keeps its groups."""
    stack_id = "arn:aws:cloudformation:us-east-1:123456789012:stack/payment-saga/51af3dc0-da77-11e4-872e-123"
    groups = template.of_type("AWS::Logs::LogGroup")
    assert len(groups) == len(template.functions) + 1  # and the state machine's
    for group, properties in groups.items():
        name, variables = properties["LogGroupName"]["Fn::Sub"]
        prefixes = ("/aws/lambda/${AWS::StackName}-", "/aws/vendedlogs/states/${AWS::StackName}-")
        assert name.startswith(prefixes), group
        assert name.endswith("-${CreateId}"), group
        assert _evaluate(variables["CreateId"], {"AWS::StackId": stack_id}) == "51af3dc0", group


# -- the payment API's base URL -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", True),
        ("https://api.stripe.com", True),
        ("https://api.stripe.com/", True),
        ("https://payments.example:8443/v1/", False),
        ("https://api.stripe.com.attacker.example", False),
        ("https://203.0.113.7:8443/collect", False),
        ("https://api.stripe.com:8443", False),
        ("https://apixstripe.com", False),
        ("http://api.stripe.com", False),
        ("http://127.0.0.1:12111", False),
        ("ftp://api.stripe.com", False),
        ("https://user@evil.example", False),
        ("api.stripe.com", False),
    ],
)
def test_the_payment_api_base_is_stripes_own_host_only(template: Template, value: str, ok: bool) -> None:
    """Whoever sets the stack's parameters must not send the live key anywhere but Stripe: not over
    plain http, not to a look-alike host, another port or an address."""
    assert allowed(template, "PaymentApiBase", value) is ok


def test_the_local_stack_refuses_http_through_the_parameter_and_takes_it_through_the_environment(
    aws: None,
) -> None:
    """The embedded stack's emulator speaks http. The local stack validates parameters as CloudFormation
    does, so that URL reaches the functions through their environment (``extra_environment``, what
    ``saga_local.stack.embedded`` passes), never through PaymentApiBase."""
    clients = functools.partial(boto3.client, region_name=REGION)
    emulator = "http://127.0.0.1:12111"
    with pytest.raises(ValueError, match="PaymentApiBase"):
        provision(clients, stack_name="refused", parameters={"PaymentApiBase": emulator})

    stack = provision(clients, stack_name="local", extra_environment={"PAYMENT_API_BASE": emulator})

    readers = [env for _, env in stack.functions.values() if "PAYMENT_API_KEY_SECRET_ARN" in env]
    assert readers
    assert all(env["PAYMENT_API_BASE"] == emulator for env in readers)


# -- samconfig.toml ------------------------------------------------------------------------------------

SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"


@pytest.mark.skipif(not SAM_PYTHON.exists(), reason="SAM CLI not installed (make tools installs it)")
def test_a_ci_deploy_needs_no_answer() -> None:
    """Read by SAM CLI's own reader: ``sam deploy --config-env ci`` deploys without the changeset prompt."""
    script = (
        "import json, sys\n"
        "from samcli.lib.config.samconfig import SamConfig\n"
        "config = SamConfig(sys.argv[1], 'samconfig.toml')\n"
        "envs = ('default', 'ci')\n"
        "print(json.dumps({env: config.get_all(['deploy'], 'parameters', env=env) for env in envs}))\n"
    )
    output = subprocess.run(  # noqa: S603 - our own interpreter, our own script
        [str(SAM_PYTHON), "-c", script, str(ROOT)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    deploy = json.loads(output)
    assert deploy["ci"]["confirm_changeset"] is False  # = --no-confirm-changeset
    assert deploy["ci"]["fail_on_empty_changeset"] is False
    assert deploy["ci"]["capabilities"] == deploy["default"]["capabilities"]
    assert deploy["ci"]["stack_name"] == deploy["default"]["stack_name"]
    assert deploy["default"]["confirm_changeset"] is True, "people still confirm their own deploys"
    assert "sam deploy --config-env ci" in DOCS.read_text(encoding="utf-8")
