"""The template's IAM roles as CloudFormation creates them, enforced on the AWS calls of a local run.

moto answers every call whoever makes it, and its own access control checks DynamoDB actions against
resource ``*``: a role that lacks an action would pass every local test and fail every order on AWS.
So the local stack reads each role the way ``sam deploy`` creates it -- the template through SAM's own
translator (policy templates, event-source permissions and the managed policies SAM attaches
included) -- resolves its resources to the local stack's ARNs, and checks every call a handler (or the
state machine, for its service integrations) makes against the role of who makes it: the IAM action
and the resource ARN the call names. A call the role does not allow fails as it fails on AWS, with
``AccessDeniedException`` (``AccessDenied`` for SQS), before anything is sent.

A call on a state machine encrypted with a customer managed key needs the key as well: Step Functions
asks KMS with the caller's permissions (a data key to encrypt an execution's input as it starts, a
decrypt to read an execution or its history back), so such a call is also checked for those KMS
actions on the machine's key (:data:`KEY_ACTIONS`), as AWS refuses it without them.

The Deny statements of the queues' and the bus's resource policies are evaluated too (an explicit Deny
there binds the account's own roles, which is what those policies rely on): a call an identity policy
allows is refused when such a Deny applies to it (:class:`ResourceDeny`; its conditions on
``aws:PrincipalArn`` are evaluated against the caller's role ARN, ``aws:SecureTransport`` as true, as
every AWS SDK call is over TLS).

What is evaluated: Allow and Deny statements, ``Action``/``NotAction``, ``Resource``/``NotResource``
with IAM's ``*`` and ``?`` wildcards (actions case-insensitively). What is not: ``Condition`` blocks
of identity policies (only KMS grants carry one: the encryption context or the service a key is used
through), the Allow statements of resource policies, permission boundaries and SCPs. An identity
statement with a condition is read as if it held: more lenient than AWS in that one place, never
stricter.

Every decision is recorded (:attr:`Authorizer.used`), so a run can tell which grants it exercised.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from saga_local.template import Resolver

#: What the AWS managed policies that SAM attaches grant (AWS publishes each policy's document in
#: the IAM console and the "AWS managed policy reference"). A managed policy missing here fails
#: ``tests/static/test_security.py``'s ``test_every_managed_policy_is_known``: read it, then add it.
MANAGED_POLICIES: dict[str, list[dict[str, Any]]] = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": [
        {
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": "*",
        }
    ],
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess": [
        {
            "Effect": "Allow",
            "Action": [
                "xray:PutTraceSegments",
                "xray:PutTelemetryRecords",
                "xray:GetSamplingRules",
                "xray:GetSamplingTargets",
                "xray:GetSamplingStatisticSummaries",
            ],
            "Resource": ["*"],
        }
    ],
    # What StartExecutionFunctionRole attaches for tracing (the same grants as the above).
    "arn:aws:iam::aws:policy/AWSXRayDaemonWriteAccess": [
        {
            "Effect": "Allow",
            "Action": [
                "xray:PutTraceSegments",
                "xray:PutTelemetryRecords",
                "xray:GetSamplingRules",
                "xray:GetSamplingTargets",
                "xray:GetSamplingStatisticSummaries",
            ],
            "Resource": ["*"],
        }
    ],
    # SAM attaches this to a function with an SQS event source: receive and delete on every queue.
    "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole": [
        {
            "Effect": "Allow",
            "Action": [
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "logs:CreateLogGroup",
                "logs:CreateLogStream",
                "logs:PutLogEvents",
            ],
            "Resource": "*",
        }
    ],
}

#: Where ``sam package`` would have uploaded the code: the translator insists on an S3 URI. (The state
#: machine is CloudFormation's own resource, which the translator passes through as it is.)
_ARTIFACT = "s3://artifacts/functions.zip"


class _NoManagedPolicies:
    """SAM's managed-policy loader, offline: SAM still attaches the ARNs it knows by heart
    (``AWSLambdaBasicExecutionRole``, X-Ray, SQS polling), which is what ``MANAGED_POLICIES`` reads."""

    def load(self) -> dict[str, str]:
        return {}


def sam_transform(template: dict[str, Any], parameters: dict[str, str], region: str = "us-east-1") -> Any:
    """The template as CloudFormation receives it after SAM's transform (what ``sam deploy`` sends).

    ``samtranslator``'s own ``transform()`` with a session for ``region``: the translator reads the
    region from a boto session, which would otherwise come from the caller's environment.
    """
    import boto3
    from samtranslator.metrics.metrics import Metrics
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator
    from samtranslator.utils.py27hash_fix import (
        to_py27_compatible_template,
        undo_mark_unicode_str_in_template,
    )

    sam = copy.deepcopy(template)
    sam.setdefault("Globals", {}).setdefault("Function", {})["CodeUri"] = _ARTIFACT
    for resource in sam["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function" and "CodeUri" in resource.get("Properties", {}):
            resource["Properties"]["CodeUri"] = _ARTIFACT
    values = dict(parameters)
    to_py27_compatible_template(sam, values)
    # The translator counts what it did in a Metrics object of its own and, never told to publish them,
    # warns "There are unpublished metrics" when the object is collected: in the middle of `saga demo`'s
    # output. Its publisher here is the offline one, which drops them: publish, so nothing is left.
    metrics = Metrics()
    translator = Translator(None, Parser(), boto_session=boto3.Session(region_name=region), metrics=metrics)
    try:
        transformed = translator.translate(
            sam, parameter_values=values, get_managed_policy_map=_NoManagedPolicies().load
        )
    finally:
        metrics.publish()
    return undo_mark_unicode_str_in_template(transformed)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def unconditional(policies: list[Any]) -> Iterator[Any]:
    """Each policy of a role, a conditional one (``Fn::If [cond, policy, AWS::NoValue]``, as SAM passes
    a conditional entry of ``Policies`` on) read as both of its branches: what a deploy may grant."""
    for policy in policies:
        if isinstance(policy, dict) and set(policy) == {"Fn::If"}:
            _, if_true, if_false = policy["Fn::If"]
            yield from unconditional([b for b in (if_true, if_false) if b != {"Ref": "AWS::NoValue"}])
        else:
            yield policy


def role_statements(role: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, statement) for every statement a role carries: inline and managed."""
    properties = role["Properties"]
    for policy in unconditional(properties.get("Policies") or []):
        for statement in as_list(policy["PolicyDocument"]["Statement"]):
            yield policy["PolicyName"], statement
    for arn in properties.get("ManagedPolicyArns") or []:
        for statement in MANAGED_POLICIES.get(managed_arn(arn), []):
            yield managed_arn(arn).rsplit("/", 1)[-1], statement


def managed_arn(arn: Any) -> str:
    """A managed policy ARN, ``!Sub arn:${AWS::Partition}:...`` read in the aws partition."""
    if isinstance(arn, dict) and "Fn::Sub" in arn:
        return str(arn["Fn::Sub"]).replace("${AWS::Partition}", "aws")
    return str(arn)


# -- evaluation ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _pattern(glob: str, *, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards (``*`` any run, ``?`` one character) as a regex; nothing else is special."""
    return re.compile(fnmatch.translate(glob), re.IGNORECASE if ignore_case else 0)


def _matches(patterns: tuple[str, ...], value: str, *, ignore_case: bool) -> bool:
    # fnmatch's [seq] is not IAM syntax: escape brackets so that they match themselves.
    return any(_pattern(p.replace("[", "[[]"), ignore_case=ignore_case).fullmatch(value) for p in patterns)


@dataclass(frozen=True)
class Statement:
    """One IAM statement with its resources resolved to ARNs."""

    effect: str
    actions: tuple[str, ...] = ()
    not_actions: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    not_resources: tuple[str, ...] = ()
    where: str = ""

    def applies(self, action: str, resource: str) -> bool:
        if self.not_actions:
            action_ok = not _matches(self.not_actions, action, ignore_case=True)
        else:
            action_ok = _matches(self.actions, action, ignore_case=True)
        if not action_ok:
            return False
        if self.not_resources:
            return not _matches(self.not_resources, resource, ignore_case=False)
        return _matches(self.resources, resource, ignore_case=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "effect": self.effect,
            "actions": list(self.actions),
            "not_actions": list(self.not_actions),
            "resources": list(self.resources),
            "not_resources": list(self.not_resources),
            "where": self.where,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Statement:
        return cls(
            effect=data["effect"],
            actions=tuple(data["actions"]),
            not_actions=tuple(data["not_actions"]),
            resources=tuple(data["resources"]),
            not_resources=tuple(data["not_resources"]),
            where=data["where"],
        )


#: The condition operators a resource policy's Deny may use here, on the keys below.
_ARN_OPERATORS = {"ArnEquals", "ArnNotEquals", "ArnLike", "ArnNotLike"}
_CONDITION_KEYS = {"aws:PrincipalArn", "aws:SecureTransport"}


@dataclass(frozen=True)
class ResourceDeny:
    """A Deny statement of a resource's own policy (``Principal: "*"``), its values resolved."""

    actions: tuple[str, ...]
    resources: tuple[str, ...]
    #: (operator, key, values): every one must hold for the Deny to apply.
    conditions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    where: str = ""

    def applies(self, action: str, resource: str, principal_arn: str) -> bool:
        if not (
            _matches(self.actions, action, ignore_case=True)
            and _matches(self.resources, resource, ignore_case=False)
        ):
            return False
        return all(self._holds(op, key, values, principal_arn) for op, key, values in self.conditions)

    @staticmethod
    def _holds(operator: str, key: str, values: tuple[str, ...], principal_arn: str) -> bool:
        if key == "aws:SecureTransport":
            # Bool: the SDKs call over TLS, so only a condition on "true" holds.
            return "true" in {v.lower() for v in values}
        # IAM matches ArnEquals as ArnLike: wildcards in each part of the ARN.
        found = _matches(values, principal_arn, ignore_case=False)
        return found if operator in {"ArnEquals", "ArnLike"} else not found

    def to_dict(self) -> dict[str, Any]:
        return {
            "actions": list(self.actions),
            "resources": list(self.resources),
            "conditions": [[op, key, list(values)] for op, key, values in self.conditions],
            "where": self.where,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResourceDeny:
        conditions = tuple((op, key, tuple(values)) for op, key, values in data["conditions"])
        return cls(tuple(data["actions"]), tuple(data["resources"]), conditions, data["where"])


def resource_denies(template: dict[str, Any], resolver: Resolver) -> list[ResourceDeny]:
    """The Deny statements of every queue and bus policy the stack creates, resolved.

    A condition this evaluator does not know fails here, loudly, rather than being read as holding."""
    found = []
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] not in {"AWS::SQS::QueuePolicy", "AWS::Events::EventBusPolicy"}:
            continue
        if "Condition" in resource and not resolver.condition(resource["Condition"]):
            continue
        properties = resource["Properties"]
        raw = properties.get("PolicyDocument", {}).get("Statement") or properties.get("Statement")
        for statement in resolver.resolve(as_list(raw)):
            if statement.get("Effect") != "Deny":
                continue
            if statement.get("Principal") != "*":
                who = statement.get("Principal")
                raise ValueError(f"{logical_id}: a Deny for {who} is not evaluated here")
            conditions = []
            for operator, keys in (statement.get("Condition") or {}).items():
                for key, values in keys.items():
                    if key not in _CONDITION_KEYS or (operator not in _ARN_OPERATORS and operator != "Bool"):
                        raise ValueError(f"{logical_id}: condition {operator} {key} is not evaluated here")
                    conditions.append((operator, key, tuple(str(v) for v in as_list(values))))
            found.append(
                ResourceDeny(
                    actions=tuple(str(a) for a in as_list(statement["Action"])),
                    resources=tuple(str(r) for r in as_list(statement["Resource"])),
                    conditions=tuple(conditions),
                    where=f"{logical_id} {statement.get('Sid', '')}".strip(),
                )
            )
    return found


@dataclass(frozen=True)
class Role:
    """A principal's role: who (the function's or state machine's logical id) and what it may do."""

    principal: str
    name: str
    statements: tuple[Statement, ...]
    #: Who assumes it: ``lambda`` (a function) or ``states`` (a state machine).
    service: str = "lambda"
    #: The role's ARN, which a resource policy's ``aws:PrincipalArn`` condition reads.
    arn: str = ""

    def allows(self, action: str, resource: str) -> bool:
        """IAM's rule for one identity policy set: an explicit Deny wins, else some Allow must apply."""
        if any(s.effect == "Deny" and s.applies(action, resource) for s in self.statements):
            return False
        return any(s.effect == "Allow" and s.applies(action, resource) for s in self.statements)

    def without(self, action: str) -> Role:
        """This role with ``action`` taken out of every statement that names it exactly (for the
        check that each grant is needed: a role one action short must fail some run)."""
        statements = []
        for statement in self.statements:
            kept = tuple(a for a in statement.actions if a.lower() != action.lower())
            if kept or not statement.actions:
                statements.append(
                    Statement(
                        statement.effect,
                        kept,
                        statement.not_actions,
                        statement.resources,
                        statement.not_resources,
                        statement.where,
                    )
                )
        return Role(self.principal, self.name, tuple(statements), self.service, self.arn)

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "name": self.name,
            "statements": [s.to_dict() for s in self.statements],
            "service": self.service,
            "arn": self.arn,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Role:
        statements = tuple(Statement.from_dict(s) for s in data["statements"])
        return cls(data["principal"], data["name"], statements, data["service"], data.get("arn", ""))


def _strings(value: Any, resolver: Resolver) -> tuple[str, ...]:
    return tuple(str(resolver.resolve(item)) for item in as_list(value))


def _statement(where: str, raw: dict[str, Any], resolver: Resolver) -> Statement:
    return Statement(
        effect=str(raw.get("Effect", "Allow")),
        actions=tuple(str(a) for a in as_list(raw.get("Action", []))),
        not_actions=tuple(str(a) for a in as_list(raw.get("NotAction", []))),
        resources=_strings(raw.get("Resource", []), resolver),
        not_resources=_strings(raw.get("NotResource", []), resolver),
        where=where,
    )


def _deployed_policies(policies: list[Any], resolver: Resolver) -> Iterator[dict[str, Any]]:
    """The policies a deploy with these parameters grants: a conditional one by its condition."""
    for policy in policies:
        if isinstance(policy, dict) and set(policy) == {"Fn::If"}:
            name, if_true, if_false = policy["Fn::If"]
            chosen = if_true if resolver.condition(name) else if_false
            if chosen != {"Ref": "AWS::NoValue"}:
                yield from _deployed_policies([chosen], resolver)
        else:
            yield policy


def roles(template: dict[str, Any], resolver: Resolver) -> dict[str, Role]:
    """The role of every function and state machine (by logical id), as deployed with the resolver's
    parameters, its resources resolved to the local stack's ARNs."""
    parameters = {key: str(value) for key, value in resolver.parameters.items()}
    region = resolver.pseudo.get("AWS::Region", "us-east-1")
    deployed = sam_transform(template, parameters, region)
    resources = deployed["Resources"]
    found: dict[str, Role] = {}
    for logical_id, resource in resources.items():
        reference = {
            "AWS::Lambda::Function": "Role",
            "AWS::StepFunctions::StateMachine": "RoleArn",
        }.get(resource["Type"])
        if reference is None:
            continue
        role_id = resource["Properties"][reference]["Fn::GetAtt"][0]
        properties = resources[role_id]["Properties"]
        statements = [
            _statement(policy["PolicyName"], raw, resolver)
            for policy in _deployed_policies(properties.get("Policies") or [], resolver)
            for raw in as_list(policy["PolicyDocument"]["Statement"])
        ]
        for arn in properties.get("ManagedPolicyArns") or []:
            for raw in MANAGED_POLICIES.get(managed_arn(arn), []):
                statements.append(_statement(managed_arn(arn).rsplit("/", 1)[-1], raw, resolver))
        service = "states" if reference == "RoleArn" else "lambda"
        arn = str(resolver.attrs.get((role_id, "Arn"), ""))
        found[logical_id] = Role(logical_id, role_id, tuple(statements), service, arn)
    return found


# -- calls: the action and the resources each one names --------------------------------------------

#: botocore operation names whose IAM action is spelled otherwise.
_ACTION_NAMES = {
    ("lambda", "Invoke"): "InvokeFunction",
    # A batch call is authorized as its single form (IAM has no batch actions for these).
    ("sqs", "DeleteMessageBatch"): "DeleteMessage",
    ("sqs", "ChangeMessageVisibilityBatch"): "ChangeMessageVisibility",
    ("sqs", "SendMessageBatch"): "SendMessage",
}


def iam_action(model: Any) -> str:
    """``dynamodb:UpdateItem``: the IAM action of a botocore operation model."""
    prefix = model.service_model.signing_name
    name = _ACTION_NAMES.get((prefix, model.name), model.name)
    return f"{prefix}:{name}"


def call_resources(action: str, params: dict[str, Any], *, region: str, account: str) -> list[str]:
    """The ARNs a call acts on (IAM checks each); ``*`` for a call that names no resource."""
    service = action.partition(":")[0]
    arn = f"arn:aws:{service}:{region}:{account}"
    if service == "dynamodb":
        if "TableName" in params:
            table = f"{arn}:table/{params['TableName']}"
            return [f"{table}/index/{params['IndexName']}" if params.get("IndexName") else table]
        if "StreamArn" in params:
            return [str(params["StreamArn"])]
        tables = params.get("RequestItems") or {}
        return [f"{arn}:table/{name}" for name in tables] or ["*"]
    if service == "sqs":
        if "QueueUrl" in params:
            owner, _, name = str(params["QueueUrl"]).rstrip("/").rpartition("/")
            return [f"arn:aws:sqs:{region}:{owner.rpartition('/')[2] or account}:{name}"]
        if "QueueName" in params:
            return [f"{arn}:{params['QueueName']}"]
    if service == "events" and "Entries" in params:
        return sorted({_bus_arn(entry.get("EventBusName"), arn) for entry in params["Entries"]})
    if service == "states":
        for key in ("stateMachineArn", "executionArn"):
            if key in params:
                return [str(params[key])]
    if service == "secretsmanager" and "SecretId" in params:
        secret = str(params["SecretId"])
        return [secret if secret.startswith("arn:") else f"{arn}:secret:{secret}"]
    if service == "lambda" and "FunctionName" in params:
        function = str(params["FunctionName"])
        return [function if function.startswith("arn:") else f"{arn}:function:{function}"]
    return ["*"]


def _bus_arn(name: Any, arn: str) -> str:
    if isinstance(name, str) and name.startswith("arn:"):
        return name
    return f"{arn}:event-bus/{name or 'default'}"


#: The KMS actions a Step Functions call needs on an encrypted state machine's key, besides its own.
KEY_ACTIONS: dict[str, tuple[str, ...]] = {
    "states:StartExecution": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:StartSyncExecution": ("kms:GenerateDataKey", "kms:Decrypt"),
    "states:DescribeExecution": ("kms:Decrypt",),
    "states:GetExecutionHistory": ("kms:Decrypt",),
    "states:DescribeStateMachine": ("kms:Decrypt",),
}


def state_machine_of(arn: str) -> str:
    """The state machine an execution ARN (``...:execution:<machine>:<name>``) belongs to; a state
    machine's ARN as it is."""
    head, kind, rest = arn.partition(":execution:")
    if not kind:
        return arn
    return f"{head}:stateMachine:{rest.rpartition(':')[0]}"


# -- enforcement -----------------------------------------------------------------------------------


def access_denied(
    model: Any, role: Role, action: str, resource: str, *, account: str, deny: str = ""
) -> Exception:
    """The error AWS answers a call its caller's role does not allow (the client's modelled class);
    ``deny``: the resource policy statement whose explicit Deny refuses it."""
    import boto3
    from botocore.exceptions import ClientError

    code = "AccessDenied" if action.startswith("sqs:") else "AccessDeniedException"
    if action.startswith("kms:") and model.service_model.signing_name == "states":
        # What Step Functions answers when the caller may not use the state machine's key.
        code = "KmsAccessDeniedException"
    message = (
        f"User: arn:aws:sts::{account}:assumed-role/{role.name}/{role.principal} is not authorized to"
        f" perform: {action} on resource: {resource} because no identity-based policy allows the"
        f" {action} action"
    )
    if deny:
        message = (
            f"User: arn:aws:sts::{account}:assumed-role/{role.name}/{role.principal} is not authorized to"
            f" perform: {action} on resource: {resource} with an explicit deny in a resource-based policy"
            f" ({deny})"
        )
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400, "HTTPHeaders": {}, "RetryAttempts": 0},
    }
    session = boto3._get_default_session()._session
    factory = session._get_internal_component("exceptions_factory")  # type: ignore[attr-defined]
    cls: type[Exception] = factory.create_client_exceptions(model.service_model).from_code(code)
    return cls(response, model.name) if cls is not ClientError else ClientError(response, model.name)


@dataclass
class Authorizer:
    """Checks calls against the roles, and counts what each role was allowed and refused.

    Args:
        roles: principal (logical id) -> its role.
        region, account: the stack's, for the ARNs of calls that name a resource by name or URL.
        keys: state machine ARN -> the ARN of the customer managed key that encrypts it.
    """

    roles: dict[str, Role]
    region: str
    account: str
    keys: dict[str, str] = field(default_factory=dict)
    #: The Deny statements of the resources' own policies (queues, the bus).
    denies: list[ResourceDeny] = field(default_factory=list)
    #: (principal, action, resource) -> allowed calls.
    used: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    #: (principal, action, resource) -> refused calls.
    denied: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(
        self, principal: str, model: Any, params: dict[str, Any], *, stream_arn: str | None = None
    ) -> None:
        """Raise what AWS raises when ``principal``'s role may not make this call.

        ``stream_arn``: the stream a ``GetRecords`` reads (its shard iterator is opaque).
        """
        role = self.roles.get(principal)
        if role is None:
            raise KeyError(f"{principal} has no role in the template: cannot authorize its calls")
        action = iam_action(model)
        if stream_arn is not None and "ShardIterator" in params:
            params = {**params, "StreamArn": stream_arn}
        for resource in call_resources(action, params, region=self.region, account=self.account):
            needed = [(action, resource)]
            key = self.keys.get(state_machine_of(resource))
            if key is not None:
                needed += [(kms_action, key) for kms_action in KEY_ACTIONS.get(action, ())]
            for wanted, on in needed:
                allowed = role.allows(wanted, on)
                refusal = next((d for d in self.denies if d.applies(wanted, on, role.arn)), None)
                with self._lock:
                    (self.used if allowed and refusal is None else self.denied)[(principal, wanted, on)] += 1
                if not allowed:
                    raise access_denied(model, role, wanted, on, account=self.account)
                if refusal is not None:
                    raise access_denied(model, role, wanted, on, account=self.account, deny=refusal.where)

    def state_machine(self) -> str | None:
        """The principal of the stack's state machine (whose role its service integrations use)."""
        machines = [p for p, role in self.roles.items() if role.service == "states"]
        if len(machines) > 1:
            raise ValueError(f"more than one state machine ({machines}): say whose calls these are")
        return machines[0] if machines else None

    def hook(self, principal: str, *, stream_arn: str | None = None) -> Any:
        """A botocore ``before-parameter-build`` handler that checks every call as ``principal``."""

        def before_parameter_build(params: dict[str, Any], model: Any, **_: Any) -> None:
            self.check(principal, model, params, stream_arn=stream_arn)

        return before_parameter_build

    def act_as(self, client: Any, principal: str, *, stream_arn: str | None = None) -> Any:
        """``client``, its calls checked as ``principal``'s (Lambda's event source mappings poll with
        the function's role). Returns the client."""
        client.meta.events.register("before-parameter-build", self.hook(principal, stream_arn=stream_arn))
        return client

    def role_json(self, principal: str) -> str:
        """One role, for a worker process (it checks its own calls)."""
        return json.dumps(
            {
                "role": self.roles[principal].to_dict(),
                "region": self.region,
                "account": self.account,
                "keys": self.keys,
                "denies": [d.to_dict() for d in self.denies],
            }
        )

    def worker_hook_path(self) -> str:
        """Where a worker process finds :func:`worker_hook` (it imports it by this name)."""
        return f"{worker_hook.__module__}:{worker_hook.__qualname__}"


def worker_hook(role_json: str) -> Any:
    """The ``before-parameter-build`` handler of a worker process, from :meth:`Authorizer.role_json`."""
    data = json.loads(role_json)
    role = Role.from_dict(data["role"])
    denies = [ResourceDeny.from_dict(d) for d in data.get("denies") or []]
    keys = data.get("keys") or {}
    authorizer = Authorizer({role.principal: role}, data["region"], data["account"], keys, denies)
    return authorizer.hook(role.principal)
