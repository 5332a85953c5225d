"""Provision ``template.yaml``'s resources into moto (in-process mock or server) and wire them up.

The result is what ``sam deploy`` would create, by the same names the template gives: the queues
with their redrive policy, the claims table with its index and TTL, the functions with their
environments (intrinsics resolved to the local resources), and the state machine with its
``DefinitionSubstitutions`` applied; the claims table's stream, the outcome event bus and its rules.

Two parameters differ locally unless the caller sets them (:data:`LOCAL_PARAMETERS`): the outcome
archive is on, so that the events land in a queue a test and a person can read (``saga events``),
and a re-queued order is not delayed (the local stack compresses time, as it does Retry waits).
"""

from __future__ import annotations

import io
import json
import secrets
import zipfile
from dataclasses import dataclass, field
from typing import Any

from saga_local.aws.iam import Authorizer, resource_denies, roles
from saga_local.template import (
    FunctionSpec,
    Resolver,
    functions,
    load_template,
    parameter_defaults,
    resources_of_type,
    state_machine_definition,
    validate_parameters,
)

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
#: The local provider key: the emulator accepts any ``sk_test_`` key. Not a secret.
LOCAL_API_KEY = "sk_test_local_emulator"
STATE_MACHINE_ID = "PaymentSagaStateMachine"
#: Parameters the local stack sets unless told otherwise (see the module's docstring).
LOCAL_PARAMETERS = {"OutcomeArchive": "Enabled", "RequeueBaseDelaySeconds": "0"}

_QUEUE_ATTRIBUTES = {
    "VisibilityTimeout": "VisibilityTimeout",
    "MessageRetentionPeriod": "MessageRetentionPeriod",
    "MaximumMessageSize": "MaximumMessageSize",
    "DelaySeconds": "DelaySeconds",
    "ReceiveMessageWaitTimeSeconds": "ReceiveMessageWaitTimeSeconds",
    "SqsManagedSseEnabled": "SqsManagedSseEnabled",
}


@dataclass
class Stack:
    """The provisioned stack: physical ids, the template outputs and each function's runtime config."""

    name: str
    outputs: dict[str, str]
    resolver: Resolver
    functions: dict[str, tuple[FunctionSpec, dict[str, str]]] = field(default_factory=dict)
    #: Each function's and the state machine's role as deployed: every local runtime checks the
    #: calls of what it runs against it (see ``saga_local.aws.iam``).
    iam: Authorizer | None = None

    @property
    def queue_url(self) -> str:
        return self.outputs["OrdersQueueUrl"]

    @property
    def dead_letter_queue_url(self) -> str:
        return self.outputs["OrdersDeadLetterQueueUrl"]

    @property
    def state_machine_arn(self) -> str:
        return self.outputs["PaymentSagaStateMachineArn"]

    @property
    def table_name(self) -> str:
        return self.outputs["ClaimsTableName"]

    @property
    def outcome_archive_queue_url(self) -> str | None:
        """Where every outcome event lands (``OutcomeArchive=Enabled``), or None."""
        return self.outputs.get("OutcomeArchiveQueueUrl")

    def function_name(self, logical_id: str) -> str:
        return self.resolver.refs[logical_id]

    def logical_id(self, function_name: str) -> str:
        return self.functions[function_name][0].logical_id


def provision(
    clients: Any,
    *,
    stack_name: str = "payment-saga",
    parameters: dict[str, str] | None = None,
    extra_environment: dict[str, str] | None = None,
    visibility_timeout: int | None = None,
) -> Stack:
    """Create the template's resources through ``clients`` (a callable: service name -> boto3 client).

    ``extra_environment`` is added to every function's environment: the local stack uses it for
    ``PAYMENT_API_BASE`` / ``PAYMENT_API_KEY`` (so no secret is read) and Powertools settings.
    ``visibility_timeout`` compresses the queues' visibility timeout (seconds) so that a failed
    message comes back, and reaches the dead-letter queue, within a local run.
    """
    template = load_template()
    resolver = Resolver(
        parameters={**parameter_defaults(template), **LOCAL_PARAMETERS, **(parameters or {})},
        pseudo={
            "AWS::StackName": stack_name,
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::Partition": "aws",
        },
        conditions=template.get("Conditions", {}),
    )
    if "PaymentApiKeySecretArn" not in resolver.parameters:
        secret = clients("secretsmanager").create_secret(
            Name=f"{stack_name}/payment-api-key", SecretString=json.dumps({"apiKey": LOCAL_API_KEY})
        )
        resolver.parameters["PaymentApiKeySecretArn"] = secret["ARN"]
    if "WebhookSigningSecretArn" not in resolver.parameters:
        # Made up for this stack, never written down: whoever signs a local delivery reads it from the
        # secret, as the receiver does (tests: tests/helpers.py webhook_signing_secret).
        secret = clients("secretsmanager").create_secret(
            Name=f"{stack_name}/webhook-signing-secret", SecretString=f"whsec_{secrets.token_hex(24)}"
        )
        resolver.parameters["WebhookSigningSecretArn"] = secret["ARN"]
    # As CloudFormation would: the emulator's http URL reaches the functions through
    # extra_environment, never through PaymentApiBase (Stripe's host only).
    validate_parameters(template, resolver.parameters)

    _create_queues(clients("sqs"), template, resolver, stack_name, visibility_timeout)
    _create_tables(clients("dynamodb"), template, resolver, stack_name)
    _create_event_buses(clients("events"), template, resolver, stack_name)
    _name_unemulated(template, resolver, stack_name)
    specs = functions(template)
    _create_functions(clients("iam"), clients("lambda"), specs, resolver, stack_name)
    #: State machine ARN -> its customer managed key (moto does not encrypt; the IAM check asks for it).
    keys: dict[str, str] = {}
    for logical_id in resources_of_type(template, "AWS::StepFunctions::StateMachine"):
        definition = state_machine_definition(template, logical_id, resolver)
        response = clients("stepfunctions").create_state_machine(
            name=f"{stack_name}-{logical_id}",
            definition=definition,
            roleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/{stack_name}-states",
            type=template["Resources"][logical_id]["Properties"].get("StateMachineType", "STANDARD"),
        )
        resolver.refs[logical_id] = response["stateMachineArn"]
        resolver.attrs[(logical_id, "Arn")] = response["stateMachineArn"]
        resolver.attrs[(logical_id, "Name")] = f"{stack_name}-{logical_id}"
        encryption = template["Resources"][logical_id]["Properties"].get("EncryptionConfiguration") or {}
        if encryption.get("Type") == "CUSTOMER_MANAGED_KMS_KEY":
            keys[response["stateMachineArn"]] = str(resolver.resolve(encryption["KmsKeyId"]))

    stack = Stack(
        name=stack_name,
        outputs={
            k: str(resolver.resolve(v["Value"]))
            for k, v in template.get("Outputs", {}).items()
            if "Condition" not in v or resolver.condition(v["Condition"])
        },
        resolver=resolver,
        iam=Authorizer(
            roles(template, resolver), REGION, ACCOUNT_ID, keys, resource_denies(template, resolver)
        ),
    )
    for logical_id, spec in specs.items():
        env = {k: str(resolver.resolve(v)) for k, v in spec.environment.items()}
        env.update(extra_environment or {})
        stack.functions[resolver.refs[logical_id]] = (spec, env)
    return stack


#: Resources the local stack does not run (operations, not the saga): named so references resolve.
_UNEMULATED = {
    "AWS::Logs::LogGroup": "arn:aws:logs:{region}:{account}:log-group:{name}:*",
    "AWS::SNS::Topic": "arn:aws:sns:{region}:{account}:{name}",
    "AWS::KMS::Key": "arn:aws:kms:{region}:{account}:key/{name}",
    "AWS::CloudWatch::Alarm": "arn:aws:cloudwatch:{region}:{account}:alarm:{name}",
    "AWS::CloudWatch::Dashboard": "{name}",
    "AWS::Logs::MetricFilter": "{name}",
    "AWS::SQS::QueuePolicy": "{name}",
    "AWS::Events::EventBusPolicy": "{name}",
    # Named as CloudFormation names a role: the queues' and the bus's policies name the roles' ARNs.
    "AWS::IAM::Role": "arn:aws:iam::{account}:role/{name}",
}


def _name_unemulated(template: dict[str, Any], resolver: Resolver, stack_name: str) -> None:
    for logical_id, resource in template["Resources"].items():
        pattern = _UNEMULATED.get(resource["Type"])
        if pattern is None:
            continue
        name = f"{stack_name}-{logical_id}"
        arn = pattern.format(region=REGION, account=ACCOUNT_ID, name=name)
        resolver.refs[logical_id] = arn if resource["Type"] == "AWS::SNS::Topic" else name
        resolver.attrs[(logical_id, "Arn")] = arn


def _created(resource: dict[str, Any], resolver: Resolver) -> bool:
    """Whether CloudFormation would create ``resource`` (its ``Condition``, if any, holds)."""
    return "Condition" not in resource or resolver.condition(resource["Condition"])


def _create_event_buses(events: Any, template: dict[str, Any], resolver: Resolver, stack_name: str) -> None:
    """The custom event buses, then the rules on them with their targets (queues only, locally)."""
    for logical_id, resource in resources_of_type(template, "AWS::Events::EventBus").items():
        name = str(resolver.resolve(resource["Properties"].get("Name", f"{stack_name}-{logical_id}")))
        arn = events.create_event_bus(Name=name)["EventBusArn"]
        resolver.refs[logical_id] = name
        resolver.attrs[(logical_id, "Arn")] = arn
        resolver.attrs[(logical_id, "Name")] = name
    for logical_id, resource in resources_of_type(template, "AWS::Events::Rule").items():
        if not _created(resource, resolver):
            continue
        props = resolver.resolve(resource["Properties"])
        name = f"{stack_name}-{logical_id}"
        bus = props.get("EventBusName", "default")
        arn = events.put_rule(
            Name=name, EventBusName=bus, EventPattern=json.dumps(props["EventPattern"]), State="ENABLED"
        )["RuleArn"]
        events.put_targets(
            Rule=name, EventBusName=bus, Targets=[{"Id": t["Id"], "Arn": t["Arn"]} for t in props["Targets"]]
        )
        resolver.refs[logical_id] = name
        resolver.attrs[(logical_id, "Arn")] = arn


def _create_queues(
    sqs: Any, template: dict[str, Any], resolver: Resolver, stack_name: str, visibility_timeout: int | None
) -> None:
    pending = {
        logical_id: resource
        for logical_id, resource in resources_of_type(template, "AWS::SQS::Queue").items()
        if _created(resource, resolver)
    }
    while pending:
        progressed = False
        for logical_id, resource in list(pending.items()):
            props = resource.get("Properties", {})
            try:
                redrive = resolver.resolve(props["RedrivePolicy"]) if "RedrivePolicy" in props else None
            except KeyError:
                continue  # its dead-letter queue does not exist yet
            attributes = {
                name: str(props[key]).lower() if isinstance(props[key], bool) else str(props[key])
                for key, name in _QUEUE_ATTRIBUTES.items()
                if key in props
            }
            if redrive:
                attributes["RedrivePolicy"] = json.dumps(redrive)
            if visibility_timeout is not None:
                attributes["VisibilityTimeout"] = str(visibility_timeout)
            name = props.get("QueueName", f"{stack_name}-{logical_id}")
            url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
            resolver.refs[logical_id] = url
            resolver.attrs[(logical_id, "Arn")] = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}"
            resolver.attrs[(logical_id, "QueueName")] = name
            resolver.attrs[(logical_id, "QueueUrl")] = url
            del pending[logical_id]
            progressed = True
        if not progressed:
            raise ValueError(f"queues with unresolvable redrive policies: {sorted(pending)}")


def table_request(properties: dict[str, Any], table_name: str) -> dict[str, Any]:
    """``CreateTable`` arguments from an ``AWS::DynamoDB::Table``'s properties (tests use this too)."""
    request: dict[str, Any] = {
        "TableName": table_name,
        "AttributeDefinitions": properties["AttributeDefinitions"],
        "KeySchema": properties["KeySchema"],
        "BillingMode": properties.get("BillingMode", "PROVISIONED"),
    }
    if "GlobalSecondaryIndexes" in properties:
        request["GlobalSecondaryIndexes"] = properties["GlobalSecondaryIndexes"]
    if properties.get("SSESpecification", {}).get("SSEEnabled"):
        request["SSESpecification"] = {"Enabled": True}
    if "StreamSpecification" in properties:
        request["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": properties["StreamSpecification"]["StreamViewType"],
        }
    return request


def _create_tables(dynamodb: Any, template: dict[str, Any], resolver: Resolver, stack_name: str) -> None:
    for logical_id, resource in resources_of_type(template, "AWS::DynamoDB::Table").items():
        props = resource["Properties"]
        name = props.get("TableName", f"{stack_name}-{logical_id}")
        response = dynamodb.create_table(**table_request(props, name))
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            dynamodb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
            )
        resolver.refs[logical_id] = name
        resolver.attrs[(logical_id, "Arn")] = response["TableDescription"]["TableArn"]
        if "LatestStreamArn" in response["TableDescription"]:
            resolver.attrs[(logical_id, "StreamArn")] = response["TableDescription"]["LatestStreamArn"]


def _create_functions(
    iam: Any, lambda_client: Any, specs: dict[str, FunctionSpec], resolver: Resolver, stack_name: str
) -> None:
    role = iam.create_role(
        RoleName=f"{stack_name}-functions",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    # The code runs from functions/ through our runtime; moto only needs a package to register.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README.txt", "code is served from functions/ by saga_local")
    for logical_id, spec in specs.items():
        name = f"{stack_name}-{logical_id}"
        response = lambda_client.create_function(
            FunctionName=name,
            Runtime="python3.13",
            Role=role,
            Handler=spec.handler,
            Code={"ZipFile": buffer.getvalue()},
            Timeout=spec.timeout,
            MemorySize=spec.memory_mb,
        )
        resolver.refs[logical_id] = name
        resolver.attrs[(logical_id, "Arn")] = response["FunctionArn"]
        if spec.alias:
            # What SAM makes of AutoPublishAlias: a version and the alias on it. The state machine
            # invokes the alias by its ARN (the function's, then :live), as on AWS.
            version = lambda_client.publish_version(FunctionName=name)["Version"]
            lambda_client.create_alias(FunctionName=name, Name=spec.alias, FunctionVersion=version)
        if spec.function_url:
            # The name AWS gives a function URL (SAM's <LogicalId>Url resource). The embedded stack
            # serves it on loopback when asked to (EmbeddedStack(webhooks=True), saga_local.aws.function_url)
            # and puts that URL in the outputs instead.
            resolver.attrs[(f"{logical_id}Url", "FunctionUrl")] = (
                f"https://{name}.lambda-url.{REGION}.on.aws/"
            )
