"""The outcome events in ``template.yaml`` and the ASL: an outbox that cannot drop an outcome silently.

* the claims table streams both images; the relay's event source reports partial failures, bisects,
  bounds its retries and sends what it gives up on to a queue that is alarmed;
* its filter lets through exactly the writes that close a claim (checked by evaluating the
  template's patterns, with moto's EventBridge matcher, on records shaped as the stream sends them);
* the happy path publishes nothing from the state machine (its transitions stay 3), and every
  ``events:putEvents`` task goes to the outcome bus and on to the Fail state it was put before;
* who may put events on the bus, and the re-queue's bound and alarm.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from moto.events.models import EventPattern
from samtranslator.translator.transform import transform

from payment_saga.outcomes import DEFAULT_MAX_REQUEUE_ATTEMPTS, DEFAULT_REQUEUE_BASE_DELAY_SECONDS
from saga_local.template import functions, load_template

if TYPE_CHECKING:
    from tests.static.conftest import StateMachine, Template

SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:payment-saga/stripe-AbCdEf"
RELAY = "OutcomeRelayFunction"
BUS = {"Fn::GetAtt": ["OutcomeEventBus", "Arn"]}


def relay_event(template: Template) -> dict[str, Any]:
    (event,) = template.functions[RELAY]["Events"].values()
    assert event["Type"] == "DynamoDB"
    properties: dict[str, Any] = event["Properties"]
    return properties


def stream_record(event_name: str, old: str | None, new: str | None) -> dict[str, Any]:
    """A stream record as Lambda's filter sees it (statuses only; the rest of the row is beside the point)."""
    change: dict[str, Any] = {"Keys": {"orderId": {"S": "ORDER-1"}}, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    if old is not None:
        change["OldImage"] = {"orderId": {"S": "ORDER-1"}, "status": {"S": old}}
    if new is not None:
        change["NewImage"] = {"orderId": {"S": "ORDER-1"}, "status": {"S": new}}
    return {"eventName": event_name, "eventSource": "aws:dynamodb", "dynamodb": change}


def awaiting(record: dict[str, Any], *, old: bool = False, new: bool = False) -> dict[str, Any]:
    """``record`` with the mark of a claim awaiting settlement in its old and/or new image."""
    for image, marked in (("OldImage", old), ("NewImage", new)):
        if marked:
            record["dynamodb"][image]["settlementIntentId"] = {"S": "pi_settles_later"}
    return record


# -- the outbox -------------------------------------------------------------------------------------


def test_the_claims_table_streams_both_images(template: Template, claims_table_value: dict[str, Any]) -> None:
    table = template.of_type("AWS::DynamoDB::Table")["ClaimsTable"]
    assert table["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert relay_event(template)["Stream"] == claims_table_value["StreamArn"]


def test_the_relay_stalls_on_a_failing_record_instead_of_shedding_it(template: Template) -> None:
    event = relay_event(template)
    assert event["FunctionResponseTypes"] == ["ReportBatchItemFailures"], "retried from the failing record"
    assert event["MaximumRetryAttempts"] == -1, "retried without limit: an outage stalls, never sheds"
    assert event["MaximumRecordAgeInSeconds"] == -1, "no record is discarded for its age"
    assert event.get("BisectBatchOnFunctionError", False) is False, "the function names the failing record"
    assert "DestinationConfig" not in event, "with no limit, an on-failure destination never receives"
    (age_alarm,) = [
        alarm
        for alarm in template.of_type("AWS::CloudWatch::Alarm").values()
        if alarm.get("Namespace") == "AWS/Lambda"
        and alarm.get("MetricName") == "IteratorAge"
        and [template.referenced_resource(d["Value"]) for d in alarm["Dimensions"]]
        == ["OutcomeRelayFunction"]
    ]
    assert age_alarm["Statistic"] == "Maximum"
    window_ms = age_alarm["Period"] * age_alarm["EvaluationPeriods"] * 1000
    assert age_alarm["Threshold"] + window_ms < 24 * 3600 * 1000, "it fires long before the stream trims"


def test_the_relay_parks_what_it_can_never_read_on_an_alarmed_queue(template: Template) -> None:
    relay = template.of_type("AWS::Serverless::Function")["OutcomeRelayFunction"]
    parking = template.referenced_resource(relay["Environment"]["Variables"]["PARKED_RECORDS_QUEUE_URL"])
    assert parking in template.of_type("AWS::SQS::Queue")
    assert template.of_type("AWS::SQS::Queue")[parking]["MessageRetentionPeriod"] == 1209600
    watched = [
        alarm
        for alarm in template.of_type("AWS::CloudWatch::Alarm").values()
        if alarm.get("Namespace") == "AWS/SQS"
        and any(template.referenced_resource(d["Value"]) == parking for d in alarm.get("Dimensions", []))
    ]
    assert watched, "the parking queue is alarmed"
    event = relay_event(template)
    assert event.get("ParallelizationFactor", 1) == 1, "an order's changes are published in order"
    assert event["StartingPosition"] == "TRIM_HORIZON"


@pytest.mark.parametrize(
    ("record", "relayed"),
    [
        (stream_record("MODIFY", "CLAIMED", "COMPLETED"), True),
        (stream_record("MODIFY", "CLAIMED", "RELEASED"), True),
        (stream_record("MODIFY", "RELEASED", "COMPLETED"), True),  # a late charge found by the sweeper
        (stream_record("INSERT", None, "RELEASED"), True),  # the tombstone of a fenced claim
        (stream_record("MODIFY", "COMPLETED", "COMPLETED"), False),  # a resent complete
        (stream_record("MODIFY", "RELEASED", "RELEASED"), False),  # a fence added to a released row
        (stream_record("INSERT", None, "CLAIMED"), False),
        (stream_record("MODIFY", "RELEASED", "CLAIMED"), False),
        (stream_record("MODIFY", "CLAIMED", "CLAIMED"), False),  # a takeover, a lease renewed
        (awaiting(stream_record("MODIFY", "CLAIMED", "CLAIMED"), new=True), True),  # awaits settlement
        (awaiting(stream_record("MODIFY", "CLAIMED", "CLAIMED"), old=True, new=True), False),  # resent
        (awaiting(stream_record("MODIFY", "CLAIMED", "COMPLETED"), old=True), True),  # settled
        (stream_record("REMOVE", "COMPLETED", None), False),  # TTL
        (stream_record("INSERT", None, None) | {"dynamodb": {"NewImage": {"holder": {"S": "x"}}}}, False),
    ],
)
def test_the_filter_lets_through_exactly_the_writes_that_close_a_claim(
    template: Template, record: dict[str, Any], relayed: bool
) -> None:
    patterns = [
        EventPattern.load(item["Pattern"]) for item in relay_event(template)["FilterCriteria"]["Filters"]
    ]
    assert any(pattern.matches_event(record) for pattern in patterns) is relayed  # type: ignore[arg-type]


def test_the_relay_reads_the_settings_the_template_gives_it(template: Template) -> None:
    spec = functions(load_template())[RELAY]
    assert spec.handler == "handlers.outcome_relay.handler"
    env = spec.environment
    assert env["OUTCOME_EVENT_BUS_NAME"] == {"Ref": "OutcomeEventBus"}
    assert env["ORDERS_QUEUE_URL"] == {"Ref": "OrdersQueue"}
    assert env["MAX_REQUEUE_ATTEMPTS"] == {"Ref": "MaxRequeueAttempts"}
    assert env["REQUEUE_BASE_DELAY_SECONDS"] == {"Ref": "RequeueBaseDelaySeconds"}
    parameters = template.parameters
    assert parameters["MaxRequeueAttempts"]["Default"] == DEFAULT_MAX_REQUEUE_ATTEMPTS
    assert parameters["RequeueBaseDelaySeconds"]["Default"] == DEFAULT_REQUEUE_BASE_DELAY_SECONDS
    assert parameters["RequeueBaseDelaySeconds"]["MaxValue"] == 900, "SQS's longest DelaySeconds"


def test_an_exhausted_re_queue_pages_someone(template: Template) -> None:
    alarm = template.of_type("AWS::CloudWatch::Alarm")["RequeueExhaustedAlarm"]
    assert alarm["MetricName"] == "RequeueExhausted"
    assert alarm["Threshold"] == 0
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["EvaluationPeriods"] == 1


def test_the_archive_is_off_unless_asked_for(template: Template) -> None:
    assert template.parameters["OutcomeArchive"]["Default"] == "Disabled"
    for name in ("OutcomeArchiveQueue", "OutcomeArchiveRule"):
        assert template.resources[name]["Condition"] == "CreateOutcomeArchive"
    rule = template.of_type("AWS::Events::Rule")["OutcomeArchiveRule"]
    assert rule["EventBusName"] == {"Ref": "OutcomeEventBus"}
    assert rule["EventPattern"] == {"source": ["payment-saga"]}


# -- the state machine's own events -------------------------------------------------------------------


def event_tasks(saga: StateMachine) -> dict[str, dict[str, Any]]:
    return {
        name: state
        for name, state in saga.states()
        if state["Type"] == "Task" and str(state["Resource"]).endswith(":states:::events:putEvents")
    }


def test_the_happy_path_publishes_nothing_from_the_state_machine(saga: StateMachine) -> None:
    states = saga.definition["States"]
    path, name = [], saga.definition["StartAt"]
    while name is not None:
        path.append(name)
        name = states[name].get("Next")
    assert path == ["Claim Order", "Charge Payment", "Mark Complete"], "three transitions, no event task"
    assert not set(path) & set(event_tasks(saga))


def test_each_event_task_goes_to_the_bus_and_on_to_its_fail_state_whatever_happens(
    saga: StateMachine,
) -> None:
    states = saga.definition["States"]
    tasks = event_tasks(saga)
    published = {}
    for name, state in tasks.items():
        (entry,) = state["Parameters"]["Entries"]
        assert entry["EventBusName"] == "${OutcomeEventBusName}"
        assert entry["Source"] == "payment-saga"
        detail = entry["Detail"]
        assert "eventId.$" in detail, f"{name}: a stable event id for consumers to deduplicate on"
        published[entry["DetailType"]] = name
        assert state["ResultPath"] is None, f"{name}: the error being reported must reach the Fail state"
        assert states[state["Next"]]["Type"] == "Fail"
        assert {catcher["Next"] for catcher in state["Catch"]} == {state["Next"]}
        assert state["Catch"][-1]["ErrorEquals"] == ["States.ALL"]
        paths = [v for k, v in detail.items() if k.endswith(".$") and str(v).startswith("$.")]
        readable = {"order", "claim", "error"} | ({"requeue"} if only_with_requeue(states, name) else set())
        assert all(v.split(".")[1] in readable for v in paths), paths
    assert set(published) == {"OrderConflict", "OrderNeedsReconciliation", "OrderNeedsAttention"}
    assert states[published["OrderConflict"]]["Next"] == "Order Conflict"
    assert states[published["OrderNeedsReconciliation"]]["Next"] == "Needs Reconciliation"
    assert states[published["OrderNeedsAttention"]]["Next"] == "Resends Exhausted"


def only_with_requeue(states: dict[str, Any], target: str) -> bool:
    """Whether every way into ``target`` is the Default of a Choice that first sends an input without
    ``$.requeue`` elsewhere (an execution started by hand has none: reading it would be States.Runtime)."""
    ways_in = [
        (name, state)
        for name, state in states.items()
        if target
        in {state.get("Next"), state.get("Default")}
        | {rule.get("Next") for rule in state.get("Choices", [])}
        | {catcher["Next"] for catcher in state.get("Catch", [])}
    ]
    absent = {"Not": {"Variable": "$.requeue", "IsPresent": True}}
    return bool(ways_in) and all(
        state["Type"] == "Choice"
        and state["Default"] == target
        and {key: state["Choices"][0][key] for key in ("Not",) if key in state["Choices"][0]} == absent
        and all(rule["Next"] != target for rule in state["Choices"])
        for _, state in ways_in
    )


# -- who may publish -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployed(template: Template) -> dict[str, Any]:
    sam = copy.deepcopy(template.data)
    sam["Globals"]["Function"]["CodeUri"] = "s3://artifacts/functions.zip"
    result: dict[str, Any] = transform(sam, {"PaymentApiKeySecretArn": SECRET_ARN}, _NoManagedPolicies())
    return result


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


def statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    """Every statement in a role's inline policies, both branches of a conditional one included."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "Effect" in node and ("Action" in node or "NotAction" in node):
                found.append(node)
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(role["Properties"].get("Policies") or [])
    return found


def actions(statement: dict[str, Any]) -> list[str]:
    value = statement.get("Action", [])
    return value if isinstance(value, list) else [value]


def put_events_resources(role: dict[str, Any]) -> list[Any]:
    return [s["Resource"] for s in statements(role) if "events:PutEvents" in actions(s)]


def test_only_the_publishers_may_put_events_and_only_on_the_outcome_bus(deployed: dict[str, Any]) -> None:
    roles = {name: r for name, r in deployed["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    publishers = {name for name, role in roles.items() if put_events_resources(role)}
    assert publishers == {
        "StartExecutionFunctionRole",
        "OutcomeRelayFunctionRole",
        "PaymentSagaStateMachineRole",
    }
    for name in publishers:
        assert put_events_resources(roles[name]) == [BUS], name


def test_the_relay_reads_only_the_claims_stream_and_sends_only_to_its_queues(
    deployed: dict[str, Any], claims_table_value: dict[str, Any]
) -> None:
    role = deployed["Resources"]["OutcomeRelayFunctionRole"]
    grants = {
        (action, json.dumps(statement["Resource"], sort_keys=True))
        for statement in statements(role)
        for action in actions(statement)
    }
    stream = json.dumps(claims_table_value["StreamArn"], sort_keys=True)
    assert {resource for action, resource in grants if action.startswith("dynamodb:")} == {stream}
    assert {resource for action, resource in grants if action == "sqs:SendMessage"} == {
        json.dumps({"Fn::GetAtt": ["OrdersQueue", "Arn"]}),
        json.dumps({"Fn::GetAtt": ["OutcomeRelayFailureQueue", "Arn"]}),
    }
    (mapping,) = [
        r["Properties"]
        for r in deployed["Resources"].values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and r["Properties"]["EventSourceArn"] == claims_table_value["StreamArn"]
    ]
    assert len(mapping["FilterCriteria"]["Filters"]) == 4, "SAM passes the filter on to Lambda"
    assert mapping["MaximumRetryAttempts"] == -1, "SAM passes the unbounded retries on to Lambda"


def test_the_mapping_whose_replacement_replays_a_day_is_the_one_the_docs_name(
    deployed: dict[str, Any],
) -> None:
    """docs/outcome-events.md tells people to look for this logical id in a change set: it must exist."""
    mappings = {
        name: resource["Properties"]
        for name, resource in deployed["Resources"].items()
        if resource["Type"] == "AWS::Lambda::EventSourceMapping"
        and "StreamArn" in json.dumps(resource["Properties"]["EventSourceArn"])
    }
    ((name, properties),) = mappings.items()
    assert properties["StartingPosition"] == "TRIM_HORIZON"
    docs = (Path(__file__).resolve().parents[2] / "docs" / "outcome-events.md").read_text(encoding="utf-8")
    assert "`Replacement: True`" in docs
    assert f"`{name}`" in docs
