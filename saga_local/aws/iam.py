"""The template's IAM roles as CloudFormation creates them (SAM's transform applied)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

#: What the AWS managed policies that SAM attaches grant (AWS publishes each policy's document in
#: the IAM console and the "AWS managed policy reference"). A managed policy missing here fails
#: ``test_every_managed_policy_is_known``: read it, then add its statements.
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


class _NoManagedPolicies:
    """SAM's managed-policy loader, offline: SAM still attaches the ARNs it knows by heart
    (``AWSLambdaBasicExecutionRole``, X-Ray, SQS polling), which is what ``MANAGED_POLICIES`` reads."""

    def load(self) -> dict[str, str]:
        return {}


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
