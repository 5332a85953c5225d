"""Security properties of what ``template.yaml`` deploys, checked offline.

* IAM: the template is expanded the way CloudFormation will see it (SAM's own translator, as
  ``sam deploy`` does), so policy templates (``LambdaInvokePolicy``), event-source permissions and
  the managed policies SAM attaches (tracing, SQS polling) are checked with the inline statements.
  No wildcard action, and no wildcard resource on a data service, except the statements listed in
  ``ALLOWED_WILDCARDS`` with the reason each one has to be that wide.
* Data at rest: queues, the claims table and the alarm topic are encrypted; the execution history
  with a customer managed key that serves the state machine and its callers only.
* The provider's key: only in Secrets Manager, never in a function's environment.
* The orders queue caps message size; the state machine's logs leave execution data out.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from saga_local.aws.iam import MANAGED_POLICIES, as_list, managed_arn, role_statements, sam_transform
from saga_local.template import load_template

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.static.conftest import Template

ROOT = Path(__file__).resolve().parents[2]
HANDLERS_DIR = ROOT / "functions" / "handlers"

#: Services whose data a wildcard resource would expose (or let be changed, or decrypted).
DATA_SERVICES = frozenset({"dynamodb", "sqs", "secretsmanager", "states", "s3", "kms", "sns"})
#: SQS refuses larger messages; the orders queue must not accept more than this.
MAX_ORDER_MESSAGE_BYTES = 256 * 1024
#: A value that satisfies the template's required parameter (a Secrets Manager ARN).
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:payment-saga/stripe-AbCdEf"


@dataclass(frozen=True)
class Wildcard:
    """A statement allowed to use ``*``, and why it has to."""

    actions: frozenset[str]
    why: str


#: The statements that may name ``*``: matched by their exact set of actions.
ALLOWED_WILDCARDS = (
    Wildcard(
        frozenset(
            {
                "logs:CreateLogDelivery",
                "logs:GetLogDelivery",
                "logs:UpdateLogDelivery",
                "logs:DeleteLogDelivery",
                "logs:ListLogDeliveries",
                "logs:PutResourcePolicy",
                "logs:DescribeResourcePolicies",
                "logs:DescribeLogGroups",
            }
        ),
        "Step Functions' vended log delivery: CloudWatch Logs supports no resource-level permission for "
        "these actions (the Step Functions developer guide's logging policy grants them on *).",
    ),
    Wildcard(
        frozenset(
            {
                "xray:PutTraceSegments",
                "xray:PutTelemetryRecords",
                "xray:GetSamplingRules",
                "xray:GetSamplingTargets",
                "xray:GetSamplingStatisticSummaries",
            }
        ),
        "Tracing: Active (functions) and the state machine's TracingConfiguration: AWSXrayWriteOnlyAccess; "
        "X-Ray has no resource-level permissions for writing segments or reading sampling rules.",
    ),
    Wildcard(
        frozenset({"xray:PutTraceSegments", "xray:PutTelemetryRecords"}),
        "Lambda's active tracing (each function's own role): X-Ray has no resource-level permissions for "
        "writing segments.",
    ),
)


@pytest.fixture(scope="module")
def deployed(template: Template) -> dict[str, Any]:
    """The template as CloudFormation receives it after SAM's transform (what ``sam deploy`` sends)."""
    result: dict[str, Any] = sam_transform(template.data, {"PaymentApiKeySecretArn": SECRET_ARN})
    return result


def identity_policies(deployed: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Role or policy logical id -> its statements (roles, and any standalone IAM policies)."""
    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name, resource in deployed["Resources"].items():
        if resource["Type"] == "AWS::IAM::Role":
            found[name] = list(role_statements(resource))
        elif resource["Type"] in {"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"}:
            document = resource["Properties"]["PolicyDocument"]
            found[name] = [(name, statement) for statement in as_list(document["Statement"])]
    return found


def wildcard_findings(statements: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Why each Allow statement breaks the rule (empty: none does)."""
    findings = []
    for where, statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        actions = [str(action) for action in as_list(statement.get("Action", []))]
        resources = as_list(statement.get("Resource", []))
        if "NotAction" in statement or "NotResource" in statement:
            findings.append(f"{where}: NotAction/NotResource in an Allow grants everything else")
            continue
        if any(allowed.actions == frozenset(actions) for allowed in ALLOWED_WILDCARDS):
            continue
        for action in actions:
            service, _, verb = action.partition(":")
            if "*" in action and (action == "*" or verb == "*" or service in DATA_SERVICES):
                findings.append(f"{where}: wildcard action {action}")
        data_actions = [action for action in actions if action.partition(":")[0] in DATA_SERVICES]
        for resource in resources:
            if data_actions and resource_is_wildcard(resource):
                findings.append(f"{where}: {data_actions} on {resource}")
    return findings


def resource_is_wildcard(resource: Any) -> bool:
    """``*``, or an ARN whose resource part is a pattern rather than a name (``table/*``)."""
    text = json.dumps(resource) if not isinstance(resource, str) else resource
    if text == "*":
        return True
    # A !Sub or an ARN: a '*' anywhere in the part that names the resource makes it a pattern.
    return bool(re.search(r"(:|/)\*", text)) or text.rstrip('"').endswith("*")


def test_the_transform_produces_a_role_for_every_function_and_the_state_machine(
    template: Template, deployed: dict[str, Any]
) -> None:
    roles = {name for name, r in deployed["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    expected = {f"{name}Role" for name in template.functions}
    expected |= {f"{name}Role" for name in template.of_type("AWS::StepFunctions::StateMachine")}
    assert expected <= roles, f"missing roles: {sorted(expected - roles)}"


def test_every_managed_policy_is_known(deployed: dict[str, Any]) -> None:
    """An unknown managed policy would slip past the wildcard check: its grants must be listed."""
    for name, resource in deployed["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for arn in resource["Properties"].get("ManagedPolicyArns") or []:
            assert managed_arn(arn) in MANAGED_POLICIES, f"{name}: {arn} is not in MANAGED_POLICIES"


def principal_roles() -> list[str]:
    """The role of each function and state machine (``<LogicalId>Role``: SAM's, or the template's own)."""
    resources = load_template()["Resources"]
    return [
        f"{name}Role"
        for name, resource in resources.items()
        if resource["Type"] in {"AWS::Serverless::Function", "AWS::StepFunctions::StateMachine"}
    ]


@pytest.mark.parametrize("role", principal_roles())
def test_no_role_grants_a_wildcard_action_or_a_wildcard_data_resource(
    role: str, deployed: dict[str, Any]
) -> None:
    statements = identity_policies(deployed)[role]
    assert statements, f"{role} has no statement: the check would pass on anything"
    assert wildcard_findings(statements) == []


def test_no_standalone_iam_policy_grants_wildcards(deployed: dict[str, Any]) -> None:
    for name, statements in identity_policies(deployed).items():
        if deployed["Resources"][name]["Type"] != "AWS::IAM::Role":
            assert wildcard_findings(statements) == [], name


def test_the_check_catches_wildcards_it_is_meant_to_catch() -> None:
    """The rule itself: each of these would be a finding, the allow-listed ones would not."""
    bad: list[dict[str, Any]] = [
        {"Effect": "Allow", "Action": "*", "Resource": {"Fn::GetAtt": ["ClaimsTable", "Arn"]}},
        {"Effect": "Allow", "Action": "dynamodb:*", "Resource": {"Fn::GetAtt": ["ClaimsTable", "Arn"]}},
        {"Effect": "Allow", "Action": "dynamodb:UpdateItem", "Resource": "*"},
        {
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": "arn:aws:secretsmanager:*",
        },
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": {"Fn::Sub": "${Bucket.Arn}/*"}},
        {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"},
        {"Effect": "Allow", "Action": "dynamodb:*Item", "Resource": {"Fn::GetAtt": ["ClaimsTable", "Arn"]}},
    ]
    for statement in bad:
        assert wildcard_findings([("test", statement)]), statement
    for allowed in ALLOWED_WILDCARDS:
        assert (
            wildcard_findings(
                [("test", {"Effect": "Allow", "Action": sorted(allowed.actions), "Resource": "*"})]
            )
            == []
        )
    deny = {"Effect": "Deny", "Action": "sqs:*", "Resource": "*"}
    assert wildcard_findings([("test", deny)]) == []


def test_the_sqs_wildcard_finding_stays_fixed_by_the_start_functions_own_role(
    deployed: dict[str, Any],
) -> None:
    """The one finding this check ever recorded (as a strict xfail, now removed), and its fix.

    SAM's generated role for StartExecutionFunction carried AWSLambdaSQSQueueExecutionRole for its SQS
    event: receive and delete on every queue of the account. StartExecutionFunctionRole replaced it,
    with the same grants on the orders queue alone; no role may bring the managed policy back.
    """
    function = deployed["Resources"]["StartExecutionFunction"]["Properties"]
    assert function["Role"] == {"Fn::GetAtt": ["StartExecutionFunctionRole", "Arn"]}
    sqs_poller = "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole"
    for name, resource in deployed["Resources"].items():
        if resource["Type"] == "AWS::IAM::Role":
            arns = [managed_arn(arn) for arn in resource["Properties"].get("ManagedPolicyArns") or []]
            assert sqs_poller not in arns, name
    statements = identity_policies(deployed)["StartExecutionFunctionRole"]
    receive = [s for _, s in statements if "sqs:ReceiveMessage" in as_list(s.get("Action", []))]
    assert [s["Resource"] for s in receive] == [{"Fn::GetAtt": ["OrdersQueue", "Arn"]}]
    assert wildcard_findings(statements) == []


#: What Lambda's event source mappings read with the function's role (the Lambda developer guide's
#: execution-role permissions for a DynamoDB stream and an SQS queue). Locally the SQS event source
#: polls under the role (tests/statemachine/test_iam.py); the stream source reads moto's shard directly.
STREAM_MAPPING_ACTIONS = {
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
}


def test_the_relay_role_grants_what_lambdas_stream_mapping_reads_the_stream_with(
    deployed: dict[str, Any], claims_table_value: dict[str, Any]
) -> None:
    statements = identity_policies(deployed)["OutcomeRelayFunctionRole"]
    granted = {
        action
        for _, statement in statements
        if statement.get("Resource") == claims_table_value["StreamArn"]
        for action in as_list(statement.get("Action", []))
    }
    assert granted == STREAM_MAPPING_ACTIONS


# -- data at rest ----------------------------------------------------------------------------------


def test_queues_are_encrypted_at_rest(template: Template) -> None:
    queues = template.of_type("AWS::SQS::Queue")
    assert len(queues) >= 2, "the orders queue and its dead-letter queue"
    for name, properties in queues.items():
        assert properties.get("SqsManagedSseEnabled") is True or properties.get("KmsMasterKeyId"), name
        assert properties.get("SqsManagedSseEnabled") is not False, f"{name}: SSE-SQS switched off"


def test_the_claims_table_is_encrypted_at_rest(template: Template) -> None:
    tables = template.of_type("AWS::DynamoDB::Table")
    assert tables
    for name, properties in tables.items():
        assert properties.get("SSESpecification", {}).get("SSEEnabled") is True, name


def test_the_alarm_topic_is_encrypted_with_a_key_cloudwatch_may_use(template: Template) -> None:
    """A topic encrypted with alias/aws/sns silently drops every alarm: CloudWatch may not use that key."""
    topics = template.of_type("AWS::SNS::Topic")
    assert topics
    for name, properties in topics.items():
        key = template.referenced_resource(properties.get("KmsMasterKeyId"))
        assert key in template.of_type("AWS::KMS::Key"), f"{name}: not encrypted with a key of this stack"
        policy = template.resources[key]["Properties"]["KeyPolicy"]
        grants = [
            statement
            for statement in policy["Statement"]
            if statement.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"
        ]
        assert grants, f"{key}: CloudWatch may not use the key"
        assert {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(as_list(grants[0]["Action"]))


# -- the provider's key ----------------------------------------------------------------------------


def environments(template: Template) -> Iterator[tuple[str, dict[str, Any]]]:
    glob = ((template.data.get("Globals") or {}).get("Function") or {}).get("Environment") or {}
    yield "Globals", dict(glob.get("Variables") or {})
    for name, properties in template.functions.items():
        yield name, dict((properties.get("Environment") or {}).get("Variables") or {})


def test_no_function_environment_holds_the_provider_key(template: Template) -> None:
    for where, variables in environments(template):
        assert "PAYMENT_API_KEY" not in variables, f"{where}: the key would sit in the function configuration"
        for name, value in variables.items():
            assert not re.search(r"\b[sr]k_(live|test)_", json.dumps(value)), f"{where}: {name} holds a key"


#: The functions that may read the provider's key: Charge Payment charges with it, the sweeper
#: searches the provider with it (``find_charge``; it never charges), the webhook consumer reads the
#: PaymentIntent each event names (a webhook is a doorbell: Stripe's answer is the news).
SECRET_READERS = (
    "handlers.charge_payment.handler",
    "handlers.sweeper.handler",
    "handlers.webhook_consumer.handler",
)


def in_own_account(parameter: str) -> dict[str, Any]:
    """The grant's resource: the secret the parameter names, rebuilt in the stack's own account."""
    return {
        "Fn::Sub": [
            "arn:${AWS::Partition}:secretsmanager:${SecretRegion}:${AWS::AccountId}:secret:${SecretName}",
            {
                "SecretRegion": {"Fn::Select": [3, {"Fn::Split": [":", {"Ref": parameter}]}]},
                "SecretName": {"Fn::Select": [6, {"Fn::Split": [":", {"Ref": parameter}]}]},
            },
        ]
    }


def test_the_key_is_read_from_the_secret_only_by_the_functions_that_call_the_provider(
    template: Template, deployed: dict[str, Any]
) -> None:
    readers = {template.function_by_handler(handler) for handler in SECRET_READERS}
    assert readers == {"ChargePaymentFunction", "SweeperFunction", "WebhookConsumerFunction"}
    parameters = set()
    for reader in sorted(readers):
        variables = template.functions[reader]["Environment"]["Variables"]
        parameter = template.referenced_resource(variables["PAYMENT_API_KEY_SECRET_ARN"])
        assert parameter is not None, reader
        parameters.add(parameter)
        grants = [
            statement
            for statement in template.function_statements(reader)
            if any(str(action).startswith("secretsmanager:") for action in as_list(statement["Action"]))
        ]
        assert [(statement["Action"], statement["Resource"]) for statement in grants] == [
            ("secretsmanager:GetSecretValue", in_own_account(parameter))
        ], f"{reader}: reads the secret it is given, in the stack's own account, and only that"
    # One secret, named by a required parameter with no default.
    (parameter,) = parameters
    assert parameter in template.parameters
    assert template.parameters[parameter]["AllowedPattern"].startswith("^arn:aws[a-z-]*:secretsmanager:")
    assert "Default" not in template.parameters[parameter], "a default would be someone's secret"
    # And no other function may touch Secrets Manager, in its template policies or its deployed role,
    # but the webhook receiver, which reads the endpoint's signing secret (and only that, in the stack's
    # own account too: whoever holds it signs events the endpoint accepts).
    receiver = template.function_by_handler("handlers.webhook_receiver.handler")
    assert [
        (statement["Action"], statement["Resource"])
        for statement in template.function_statements(receiver)
        if "secretsmanager" in json.dumps(statement)
    ] == [("secretsmanager:GetSecretValue", in_own_account("WebhookSigningSecretArn"))]
    assert "Default" not in template.parameters["WebhookSigningSecretArn"], (
        "a default would be someone's secret"
    )
    for name, properties in template.functions.items():
        if name == receiver:
            assert "PAYMENT_API_KEY_SECRET_ARN" not in json.dumps(properties.get("Environment") or {}), name
        elif name not in readers:
            assert "secretsmanager" not in json.dumps(template.function_statements(name)), name
            assert "PAYMENT_API_KEY_SECRET_ARN" not in json.dumps(properties.get("Environment") or {}), name
    for name, statements in identity_policies(deployed).items():
        if name not in {f"{reader}Role" for reader in (*readers, receiver)}:
            assert "secretsmanager" not in json.dumps([statement for _, statement in statements]), name


def test_the_code_takes_the_key_from_the_secret_when_no_key_is_given() -> None:
    """runtime.py reads PAYMENT_API_KEY_SECRET_ARN (the name the template sets) to fetch the secret."""
    tree = ast.parse((HANDLERS_DIR / "runtime.py").read_text(encoding="utf-8"))
    names = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert "PAYMENT_API_KEY_SECRET_ARN" in names
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert "get_secret_value" in calls


# -- messages and logs -----------------------------------------------------------------------------


def test_the_orders_queue_caps_the_message_size(template: Template) -> None:
    sources = [
        template.referenced_resource(event["Properties"]["Queue"])
        for properties in template.functions.values()
        for event in (properties.get("Events") or {}).values()
        if event["Type"] == "SQS" and event["Properties"]["Queue"] == {"Fn::GetAtt": ["OrdersQueue", "Arn"]}
    ]
    assert sources, "no function reads an orders queue"
    for queue in sources:
        assert queue is not None
        size = template.resources[queue]["Properties"].get("MaximumMessageSize")
        assert size is not None, (
            f"{queue}: no MaximumMessageSize (SQS's default is larger than an order needs)"
        )
        assert 1024 <= int(size) <= MAX_ORDER_MESSAGE_BYTES, f"{queue}: {size}"


def test_state_machine_logs_leave_execution_data_out(template: Template) -> None:
    """Execution input holds the payment method: logs record events, never data."""
    machines = template.of_type("AWS::StepFunctions::StateMachine")
    assert machines
    for name, properties in machines.items():
        logging = properties.get("LoggingConfiguration")
        assert logging, f"{name}: no logging"
        assert logging.get("IncludeExecutionData") is False, name
        assert logging.get("Level") in {"ALL", "ERROR", "FATAL"}, name


# -- the state machine's key -----------------------------------------------------------------------------


def state_machine_key(template: Template) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(logical id of the key, the state machine's properties, the key's properties)."""
    ((name, machine),) = template.of_type("AWS::StepFunctions::StateMachine").items()
    encryption = machine.get("EncryptionConfiguration") or {}
    assert encryption.get("Type") == "CUSTOMER_MANAGED_KMS_KEY", f"{name}: history under AWS's key only"
    key = template.referenced_resource(encryption["KmsKeyId"])
    assert key is not None, encryption
    assert template.resources[key]["Type"] == "AWS::KMS::Key", encryption
    return key, machine, template.resources[key]["Properties"]


def test_the_execution_history_is_encrypted_with_a_rotating_key_of_its_own(template: Template) -> None:
    """The history keeps the payment method and customer ids for 90 days: a customer managed key,
    rotated, used by nothing else in the template."""
    key, machine, properties = state_machine_key(template)
    assert properties["EnableKeyRotation"] is True
    reuse = int(machine["EncryptionConfiguration"]["KmsDataKeyReusePeriodSeconds"])
    assert 60 <= reuse <= 900, "Step Functions' bounds"
    users = [
        name
        for name, resource in template.resources.items()
        if f'"{key}"' in json.dumps(resource.get("Properties") or {}) and name != key
    ]
    assert sorted(users) == sorted(
        ["PaymentSagaStateMachine", "PaymentSagaStateMachineRole", "StartExecutionFunctionRole"]
    ), users


def test_the_key_policy_lets_step_functions_use_it_for_this_state_machine_only(template: Template) -> None:
    key, machine, properties = state_machine_key(template)
    statements = {s["Sid"]: s for s in properties["KeyPolicy"]["Statement"]}
    root = statements.pop("AccountAdministersTheKey")
    assert root["Principal"] == {"AWS": {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}}
    states = statements.pop("StepFunctionsUsesItForThisStateMachineOnly")
    assert states["Principal"] == {"Service": "states.amazonaws.com"}
    assert sorted(as_list(states["Action"])) == ["kms:Decrypt", "kms:GenerateDataKey"]
    arn, names = states["Condition"]["StringEquals"][CONTEXT]["Fn::Sub"]
    name, name_names = machine["StateMachineName"]["Fn::Sub"]
    # The ARN of the state machine as it is named: the same name, built the same way.
    assert arn.endswith(":stateMachine:" + name), arn
    assert names == name_names
    delivery = statements.pop("LogDeliveryDecryptsForTheStateMachinesLog")
    assert delivery["Principal"] == {"Service": "delivery.logs.amazonaws.com"}
    assert as_list(delivery["Action"]) == ["kms:Decrypt"]
    # Only the data key the execution role generates for its log delivery (the same context).
    role = template.resources["PaymentSagaStateMachineRole"]["Properties"]["Policies"]
    contexts = [
        s["Condition"]["StringEquals"]["kms:EncryptionContext:SourceArn"]
        for policy in role
        for s in policy["PolicyDocument"]["Statement"]
        if as_list(s["Action"]) == ["kms:GenerateDataKey"]
    ]
    assert contexts == [delivery["Condition"]["StringEquals"]["kms:EncryptionContext:SourceArn"]]
    assert statements == {}, f"{key}: a principal no one reviewed: {sorted(statements)}"


#: The encryption context that names the state machine a key operation is for.
CONTEXT = "kms:EncryptionContext:aws:states:stateMachineArn"
#: Step Functions calls on an encrypted state machine, and the key actions each needs of its caller.
STATES_KEY_ACTIONS = {
    "states:StartExecution": {"kms:GenerateDataKey", "kms:Decrypt"},
    "states:DescribeExecution": {"kms:Decrypt"},
    "states:GetExecutionHistory": {"kms:Decrypt"},
}


def test_every_role_that_starts_or_reads_executions_may_use_the_key_for_this_state_machine_only(
    template: Template, deployed: dict[str, Any]
) -> None:
    key, _, _ = state_machine_key(template)
    callers = 0
    for role, statements in identity_policies(deployed).items():
        allowed = [s for _, s in statements if s.get("Effect") == "Allow"]
        granted = {action for s in allowed for action in as_list(s.get("Action", []))}
        needed = set().union(*(STATES_KEY_ACTIONS.get(action, set()) for action in granted))
        on_key = [s for _, s in statements if key in json.dumps(s.get("Resource")) and "kms" in json.dumps(s)]
        if role == "PaymentSagaStateMachineRole":
            continue  # its own grants: tests/static/test_security.py's key policy test and the template
        if not needed:
            assert on_key == [], f"{role} uses the state machine's key without calling it"
            continue
        callers += 1
        actions = {a for s in on_key for a in as_list(s["Action"])}
        assert needed <= actions, f"{role}: needs {sorted(needed - actions)} on {key}"
        for statement in on_key:
            assert statement["Condition"]["StringEquals"][CONTEXT] == {"Ref": "PaymentSagaStateMachine"}, role
    assert callers >= 1, "the start function starts executions: the check would pass on anything"


# -- logs: each function writes its own log group only ------------------------------------------------


def test_no_role_carries_a_managed_policy_that_writes_every_log_group(deployed: dict[str, Any]) -> None:
    """AWSLambdaBasicExecutionRole (which SAM attaches to each role it generates) grants the logs
    actions on ``*``: every role is the template's own, and carries no managed policy but X-Ray's."""
    for name, resource in deployed["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for arn in resource["Properties"].get("ManagedPolicyArns") or []:
            granted = {a for s in MANAGED_POLICIES[managed_arn(arn)] for a in as_list(s["Action"])}
            assert {a.partition(":")[0] for a in granted} == {"xray"}, f"{name}: {arn}"


def test_no_role_grants_an_action_on_every_resource_where_it_could_name_one(deployed: dict[str, Any]) -> None:
    """``*`` only for the actions that name no resource (the allow-listed statements above)."""
    unnameable = frozenset().union(*(allowed.actions for allowed in ALLOWED_WILDCARDS))
    checked = 0
    for role in principal_roles():
        for where, statement in identity_policies(deployed)[role]:
            if statement.get("Effect") != "Allow" or "*" not in as_list(statement.get("Resource", [])):
                continue
            checked += 1
            named = set(as_list(statement["Action"])) - unnameable
            assert not named, f"{role} ({where}): {sorted(named)} on *"
    assert checked, "no statement on *: X-Ray's at least"


def test_each_functions_logs_statement_names_only_its_own_log_group(
    template: Template, deployed: dict[str, Any]
) -> None:
    for function in template.functions:
        log_group = template.referenced_resource(template.functions[function]["LoggingConfig"]["LogGroup"])
        assert log_group is not None, f"{function}: its LoggingConfig names no log group of the template"
        assert template.resources[log_group]["Type"] == "AWS::Logs::LogGroup", function
        logs = [
            statement
            for _, statement in identity_policies(deployed)[f"{function}Role"]
            if any(str(a).startswith("logs:") for a in as_list(statement["Action"]))
        ]
        assert len(logs) == 1, f"{function}: {logs}"
        (statement,) = logs
        assert sorted(as_list(statement["Action"])) == ["logs:CreateLogStream", "logs:PutLogEvents"], function
        assert as_list(statement["Resource"]) == [{"Fn::GetAtt": [log_group, "Arn"]}], function
