"""A user's first `sam deploy`, rehearsed on LocalStack's CloudFormation engine.

Each scenario is one way a first deploy goes wrong in the field: two stacks of the template in one
account and region (staging and production), the same stack in a second region, and a stack deleted
while a Lambda still writes its logs, then deployed again under the same name and given back its
claims table. Each asserts the stack's status, that its nested operations stack (operations.yaml)
was created with every alarm under the saga's name, and that every output the README lists names a
resource that exists. LocalStack checks no IAM, creates no metric filter or dashboard and no
table's deletion protection: those are checked by tests/static and listed in docs/deploy.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from saga_local.template import load_template, resources_of_type
from tests.rehearsal.conftest import FIRST_REGION, SECOND_REGION, readme_outputs

if TYPE_CHECKING:
    from tests.rehearsal.conftest import LocalStack

pytestmark = pytest.mark.rehearsal


def outputs_of(stack: dict[str, Any]) -> dict[str, str]:
    return {output["OutputKey"]: output["OutputValue"] for output in stack.get("Outputs", [])}


def assert_deployed(localstack: LocalStack, stack: dict[str, Any], region: str) -> dict[str, str]:
    """CREATE_COMPLETE, and each output the README lists names a live resource of that region."""
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
    outputs = outputs_of(stack)
    listed = readme_outputs()
    assert set(listed) <= set(outputs), f"missing outputs: {set(listed) - set(outputs)}"
    sqs = localstack.client("sqs", region)
    for queue in ("OrdersQueueUrl", "OrdersDeadLetterQueueUrl"):
        assert sqs.get_queue_attributes(QueueUrl=outputs[queue], AttributeNames=["QueueArn"])["Attributes"]
    machine = localstack.client("stepfunctions", region).describe_state_machine(
        stateMachineArn=outputs["PaymentSagaStateMachineArn"]
    )
    assert machine["status"] == "ACTIVE"
    assert machine["type"] == "STANDARD"
    # Not its encryptionConfiguration: LocalStack's state machine provider passes only the name, role,
    # type, logging and definition on (tests/static/test_security.py checks the key in the template).
    table = localstack.client("dynamodb", region).describe_table(TableName=outputs["ClaimsTableName"])[
        "Table"
    ]
    assert table["TableStatus"] == "ACTIVE"
    # Not DeletionProtectionEnabled: LocalStack's table provider drops it (tests/static checks it).
    assert table["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"
    topic = localstack.client("sns", region).get_topic_attributes(TopicArn=outputs["AlarmTopicArn"])
    assert f":{region}:" in topic["Attributes"]["TopicArn"]
    assert_operations_deployed(localstack, stack["StackName"], region)
    return outputs


def assert_operations_deployed(localstack: LocalStack, stack: str, region: str) -> None:
    """The nested operations stack is complete, and every alarm of operations.yaml is there, named
    after the saga's stack (not the nested stack's own name, which the alarm topic's key would refuse)."""
    nested = localstack.physical_ids(stack, region)["Operations"]
    (operations,) = localstack.client("cloudformation", region).describe_stacks(StackName=nested)["Stacks"]
    assert operations["StackStatus"] == "CREATE_COMPLETE", operations.get("StackStatusReason")
    wanted = {
        alarm["Properties"]["AlarmName"]["Fn::Sub"].replace("${AWS::StackName}", stack)
        for alarm in resources_of_type(load_template(), "AWS::CloudWatch::Alarm").values()
    }
    pages = localstack.client("cloudwatch", region).get_paginator("describe_alarms")
    found = {
        alarm["AlarmName"]
        for page in pages.paginate(AlarmNamePrefix=f"{stack}-")
        for alarm in page["MetricAlarms"]
    }
    assert found == wanted, f"missing: {sorted(wanted - found)}; unexpected: {sorted(found - wanted)}"


def test_two_stacks_of_the_template_live_side_by_side_in_one_region(localstack: LocalStack) -> None:
    staging = assert_deployed(localstack, localstack.deploy("saga-staging"), FIRST_REGION)
    production = assert_deployed(localstack, localstack.deploy("saga-production"), FIRST_REGION)
    for name in readme_outputs():
        assert staging[name] != production[name], f"both stacks share {name}: {staging[name]}"


def test_the_same_stack_deploys_in_a_second_region(localstack: LocalStack) -> None:
    first = assert_deployed(localstack, localstack.deploy("saga-regions", FIRST_REGION), FIRST_REGION)
    second = assert_deployed(localstack, localstack.deploy("saga-regions", SECOND_REGION), SECOND_REGION)
    assert f":{SECOND_REGION}:" in second["PaymentSagaStateMachineArn"]
    assert first["PaymentSagaStateMachineArn"] != second["PaymentSagaStateMachineArn"]


def test_a_deleted_stack_redeploys_under_its_name_and_adopts_its_claims_table_with_its_rows(
    localstack: LocalStack,
) -> None:
    stack = "saga-redeploy"
    first = assert_deployed(localstack, localstack.deploy(stack), FIRST_REGION)
    dynamodb = localstack.client("dynamodb")
    table = first["ClaimsTableName"]
    charged = {"orderId": {"S": "ORDER-REHEARSAL-1"}, "status": {"S": "COMPLETED"}, "attempt": {"N": "1"}}
    dynamodb.put_item(TableName=table, Item=charged)
    stream_arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    groups = {
        name: physical
        for name, physical in localstack.physical_ids(stack).items()
        if name.endswith("LogGroup")
    }
    assert len(groups) == len(resources_of_type(load_template(), "AWS::Logs::LogGroup"))

    localstack.delete(stack)
    # The table survives the delete (Retain, deletion protection); a Lambda still running during the
    # delete writes its logs again, which recreates its log group outside any stack.
    assert dynamodb.describe_table(TableName=table)["Table"]["TableStatus"] == "ACTIVE"
    logs = localstack.client("logs")
    logs.create_log_group(logGroupName=groups["ClaimOrderFunctionLogGroup"])

    again = localstack.deploy(stack, ExistingClaimsTableStreamArn=stream_arn)
    outputs = assert_deployed(localstack, again, FIRST_REGION)
    assert outputs["ClaimsTableName"] == table
    assert (
        dynamodb.get_item(TableName=table, Key={"orderId": charged["orderId"]}, ConsistentRead=True)["Item"]
        == charged
    )
    resources = localstack.physical_ids(stack)
    assert "ClaimsTable" not in resources, "the stack created a table of its own beside the adopted one"
    assert resources["ClaimOrderFunctionLogGroup"] != groups["ClaimOrderFunctionLogGroup"]
    mappings = localstack.client("lambda").list_event_source_mappings(
        FunctionName=resources["OutcomeRelayFunction"]
    )
    assert [m["EventSourceArn"] for m in mappings["EventSourceMappings"]] == [stream_arn]
