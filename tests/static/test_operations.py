"""The alarms and the dashboard in ``operations.yaml`` watch what the code really emits.

They are read as deployed: ``template.yaml`` with its nested operations application read in
(``saga_local.template.load_template``), each parameter replaced by what the saga passes it.

A dashboard or an alarm on a metric name nobody publishes shows a flat line forever and never
fires: these tests tie every metric they read to its source (the handlers' ``count()`` calls, the
metric filters on the state machine's log group, or an AWS namespace), check the dashboard body is
JSON once ``!Sub`` has filled it in, and that each metric filter matches the log event Step Functions
writes with ``IncludeExecutionData: false``.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from saga_local.aws.stack import REGION, provision

if TYPE_CHECKING:
    from saga_local.aws.stack import Stack
    from tests.static.conftest import StateMachine, Template

HANDLERS_DIR = Path(__file__).resolve().parents[2] / "functions" / "handlers"
CHARGING = HANDLERS_DIR.parent / "payment_saga" / "charging.py"
SWEEPING = HANDLERS_DIR.parent / "payment_saga" / "sweeping.py"
PSEUDO_PARAMETERS = {"AWS::Region", "AWS::AccountId", "AWS::StackName", "AWS::Partition", "AWS::URLSuffix"}
AWS_NAMESPACES = {"AWS/SQS", "AWS/States", "AWS/Lambda", "AWS/DynamoDB"}
#: The stack's own namespace: what the handlers publish into (Powertools) and the metric filters too.
STACK_NAMESPACE = {"Fn::Sub": "PaymentSaga/${AWS::StackName}"}
#: The dashboard's grid is 24 columns wide.
GRID_WIDTH = 24
#: A topic the operator names, in the stack's own region and account (CloudWatch notifies no other).
ALARM_TOPIC_IN_THIS_REGION = {
    "Fn::Sub": "arn:${AWS::Partition}:sns:${AWS::Region}:${AWS::AccountId}:${AlarmTopicName}"
}

#: An ExecutionFailed event as Step Functions logs it with IncludeExecutionData false: input and output
#: are left out, the error and its cause are kept (LocalStack's logging tests, recorded against AWS).
LOGGED_EXECUTION_FAILED: dict[str, Any] = {
    "id": "12",
    "type": "ExecutionFailed",
    "details": {"cause": "The charge may have happened.", "error": "NeedsReconciliation"},
    "previous_event_id": "11",
    "event_timestamp": "1790000000000",
    "execution_arn": "arn:aws:states:us-east-1:123456789012:execution:saga:ORDER-003-abc",
    "redrive_count": "0",
}


def emitted_metrics() -> set[tuple[str, frozenset[str]]]:
    """(name, dimension names besides ``service``) for every ``count(...)`` and ``measure(...)`` call
    in the handlers.

    ``count("X", Layer=...)`` emits X twice: the plain total, and X broken down by Layer.
    ``measure("X", value, unit, FunctionName=...)`` emits X broken down only.
    """
    found: set[tuple[str, frozenset[str]]] = set()
    for path in HANDLERS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"count", "measure"}
            ):
                continue
            if node.func.id == "measure":
                name = node.args[0]
                assert isinstance(name, ast.Constant), f"{path.name}:{node.lineno}: name is not a literal"
                found.add((str(name.value), frozenset(k.arg for k in node.keywords if k.arg)))
                continue
            names: list[ast.expr] = [node.args[0]] if isinstance(node.args[0], ast.Constant) else []
            if isinstance(node.args[0], ast.IfExp):  # count("A" if replayed else "B")
                names = [node.args[0].body, node.args[0].orelse]
            dimensions = frozenset(keyword.arg for keyword in node.keywords if keyword.arg)
            for name in names:
                assert isinstance(name, ast.Constant), (
                    f"{path.name}:{node.lineno}: metric name is not a literal"
                )
                found.add((str(name.value), frozenset()))
                if dimensions:
                    found.add((str(name.value), dimensions))
    # The charge step's decisions live in the domain, which says what happened through the handler's
    # journal: ``journal("event", "Metric", ...)``, counted by the handler.
    for node in ast.walk(ast.parse(CHARGING.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "journal":
            metric = node.args[1]
            metrics = [metric.body, metric.orelse] if isinstance(metric, ast.IfExp) else [metric]
            for name in metrics:
                assert isinstance(name, ast.Constant), f"charging.py:{node.lineno}: metric is not a literal"
                found.add((str(name.value), frozenset()))
    found |= counted_by_the_sweeper()
    return found


def counted_by_the_sweeper() -> set[tuple[str, frozenset[str]]]:
    """What the sweeper's decisions count: ``Count("Metric")`` or ``Count("Metric", (("Dimension", v),))``
    in payment_saga/sweeping.py, counted by the handler (``runtime.tell``) as ``count`` would: the total,
    and the breakdown."""
    found: set[tuple[str, frozenset[str]]] = set()
    for node in ast.walk(ast.parse(SWEEPING.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Count"):
            continue
        if not isinstance(node.args[0], ast.Constant):
            continue  # a metric named in a table above it, whose names the handlers also count
        found.add((str(node.args[0].value), frozenset()))
        pairs = node.args[1].elts if len(node.args) > 1 and isinstance(node.args[1], ast.Tuple) else []
        dimensions = frozenset(
            str(pair.elts[0].value)
            for pair in pairs
            if isinstance(pair, ast.Tuple) and isinstance(pair.elts[0], ast.Constant)
        )
        if dimensions:
            found.add((str(node.args[0].value), dimensions))
    return found


def powertools_settings(template: Template) -> tuple[dict[str, str], str]:
    """The handlers' metrics namespace (a ``!Sub`` naming the stack) and Powertools' service name."""
    variables = template.data["Globals"]["Function"]["Environment"]["Variables"]
    return variables["POWERTOOLS_METRICS_NAMESPACE"], variables["POWERTOOLS_SERVICE_NAME"]


def as_in_the_dashboard(namespace: dict[str, str]) -> str:
    """The namespace's ``!Sub`` string as it reads in the substituted dashboard body (``SUB_<name>``)."""
    return re.sub(r"\$\{([^}!][^}]*)\}", lambda match: f"SUB_{match.group(1)}", namespace["Fn::Sub"])


def metric_filters(template: Template) -> dict[str, dict[str, Any]]:
    return template.of_type("AWS::Logs::MetricFilter")


def filter_metrics(template: Template) -> set[tuple[str, str]]:
    """(namespace's ``!Sub`` string, name) of every metric a metric filter publishes."""
    return {
        (transformation["MetricNamespace"]["Fn::Sub"], transformation["MetricName"])
        for properties in metric_filters(template).values()
        for transformation in properties["MetricTransformations"]
    }


def substituted_dashboard(template: Template) -> tuple[dict[str, Any], set[str]]:
    """The dashboard body after ``!Sub`` (names filled with placeholders), and the names it used."""
    dashboards = template.of_type("AWS::CloudWatch::Dashboard")
    assert len(dashboards) == 1
    (properties,) = dashboards.values()
    # One !Sub string, with the claims table's name (the one made here, or an adopted one) as its variable:
    # read as the table made here, what a stack deployed with the defaults shows.
    body, variables = properties["DashboardBody"]["Fn::Sub"]
    assert isinstance(body, str), "DashboardBody should be one !Sub string"
    assert set(variables) == {"ClaimsTableName"}
    assert variables["ClaimsTableName"]["Fn::If"][:2] == ["CreateClaimsTable", {"Ref": "ClaimsTable"}]
    body = body.replace("${ClaimsTableName}", "${ClaimsTable}")
    used = set(re.findall(r"\$\{([^}!][^}]*)\}", body))
    filled = re.sub(r"\$\{([^}!][^}]*)\}", lambda match: f"SUB_{match.group(1)}", body)
    filled = filled.replace("${!", "${")
    return json.loads(filled), used


def dashboard_metrics(template: Template) -> list[list[Any]]:
    body, _ = substituted_dashboard(template)
    return [
        metric
        for widget in body["widgets"]
        if widget["type"] == "metric"
        for metric in widget["properties"]["metrics"]
    ]


def split_metric(metric: list[Any]) -> tuple[str, str, dict[str, str]]:
    """``[namespace, name, dim, value, ..., {options}]`` -> (namespace, name, dimensions)."""
    parts = [part for part in metric if not isinstance(part, dict)]
    assert len(parts) % 2 == 0, f"dimension without a value: {metric}"
    return parts[0], parts[1], dict(zip(parts[2::2], parts[3::2], strict=True))


# -- one stack's metrics: two stacks in one account never read each other's ---------------------------


def is_aws_namespace(space: Any) -> bool:
    """One of AWS's own namespaces (a plain string); the stack's own is a ``!Sub``."""
    return isinstance(space, str) and space in AWS_NAMESPACES


def reads_this_stacks_resource(template: Template, value: Any) -> bool:
    """A dimension value that names a resource of this stack (``!Ref X``, ``!GetAtt X.Attr``)."""
    return template.referenced_resource(value) in template.resources


def test_the_handlers_and_the_metric_filters_publish_into_the_stacks_own_namespace(
    template: Template,
) -> None:
    """Staging's DuplicateCharge must not page production: the namespace carries the stack's name.

    A namespace, not a dimension: a metric filter takes a dimension's value only from a field of the
    log event, and the state machine's events name no stack.
    """
    namespace, _ = powertools_settings(template)
    assert namespace == STACK_NAMESPACE
    transformations = [t for f in metric_filters(template).values() for t in f["MetricTransformations"]]
    assert transformations
    for transformation in transformations:
        assert transformation["MetricNamespace"] == namespace, transformation["MetricName"]
        assert not transformation.get("Dimensions"), transformation["MetricName"]


def test_each_alarm_reads_only_its_own_stacks_metrics(template: Template) -> None:
    namespace, _ = powertools_settings(template)
    emitted = {name for name, _ in emitted_metrics()}
    from_filters = {name for _, name in filter_metrics(template)}
    alarms = template.of_type("AWS::CloudWatch::Alarm")
    for name, properties in alarms.items():
        for space, metric, dimensions in alarm_metrics(properties):
            if is_aws_namespace(space):
                # An AWS metric is this stack's only through a dimension that names one of its resources
                # (the others, Operation say, narrow it down).
                assert any(reads_this_stacks_resource(template, value) for value in dimensions.values()), (
                    f"{name}: {metric} {dimensions} names no resource of this stack"
                )
                continue
            assert space == namespace, f"{name}: reads {space}, not this stack's namespace"
            assert metric in emitted | from_filters, f"{name}: nothing of this stack publishes {metric}"


def test_no_dashboard_widget_reads_another_stacks_metrics(template: Template) -> None:
    namespace, _ = powertools_settings(template)
    own = as_in_the_dashboard(namespace)
    assert "SUB_AWS::StackName" in own
    for metric in dashboard_metrics(template):
        space, _, dimensions = split_metric(metric)
        if is_aws_namespace(space):
            resources = {
                str(value)[4:].split(".")[0] for value in dimensions.values() if str(value).startswith("SUB_")
            }
            assert resources, f"{metric}: no dimension names a resource of this stack"
            assert resources <= set(template.resources), metric
            continue
        assert space == own, f"{metric}: {space} is not this stack's namespace"


def test_two_local_stacks_in_one_account_publish_into_two_namespaces(aws: None) -> None:
    """What CloudFormation gives each stack's functions: the namespace resolved with the stack's name."""
    clients = functools.partial(boto3.client, region_name=REGION)
    staging = provision(clients, stack_name="staging")
    production = provision(clients, stack_name="production")

    def namespaces(stack: Stack) -> set[str]:
        return {env["POWERTOOLS_METRICS_NAMESPACE"] for _, env in stack.functions.values()}

    assert namespaces(staging) == {"PaymentSaga/staging"}
    assert namespaces(production) == {"PaymentSaga/production"}


# -- the dashboard ---------------------------------------------------------------------------------


def test_the_dashboard_body_is_json_once_substituted(template: Template) -> None:
    body, used = substituted_dashboard(template)
    assert body["widgets"]
    for name in used:
        logical_id = name.split(".", 1)[0]
        assert name in PSEUDO_PARAMETERS or logical_id in template.resources or name in template.parameters, (
            f"${{{name}}} names nothing in the template"
        )


def test_the_dashboard_widgets_fit_the_grid_and_do_not_overlap(template: Template) -> None:
    body, _ = substituted_dashboard(template)
    cells: set[tuple[int, int]] = set()
    for widget in body["widgets"]:
        assert widget["x"] + widget["width"] <= GRID_WIDTH, widget
        area = {
            (x, y)
            for x in range(widget["x"], widget["x"] + widget["width"])
            for y in range(widget["y"], widget["y"] + widget["height"])
        }
        assert not area & cells, f"overlaps: {widget.get('properties', {}).get('title')}"
        cells |= area


def test_every_dashboard_metric_is_one_something_publishes(template: Template) -> None:
    namespace, service = powertools_settings(template)
    emitted = emitted_metrics()
    from_filters = filter_metrics(template)
    for metric in dashboard_metrics(template):
        space, name, dimensions = split_metric(metric)
        if is_aws_namespace(space):
            for value in dimensions.values():
                assert not value.startswith("SUB_") or value.split(".")[0][4:] in template.resources, metric
            continue
        assert space == as_in_the_dashboard(namespace), metric
        if (namespace["Fn::Sub"], name) in from_filters and not dimensions:
            continue
        # Powertools adds service=<POWERTOOLS_SERVICE_NAME> to every metric it publishes.
        assert dimensions.pop("service", None) == service, f"{metric}: Powertools publishes service={service}"
        assert (name, frozenset(dimensions)) in emitted, f"{metric}: no handler emits it"


def test_every_metric_the_handlers_emit_is_on_the_dashboard(template: Template) -> None:
    namespace, _ = powertools_settings(template)
    shown = set()
    for metric in dashboard_metrics(template):
        space, name, shown_dimensions = split_metric(metric)
        if space == as_in_the_dashboard(namespace):
            shown_dimensions.pop("service", None)
            shown.add((name, frozenset(shown_dimensions)))
    broken_down = {name for name, dimensions in emitted_metrics() if dimensions}
    for name, dimensions in emitted_metrics():
        if not dimensions and name in broken_down:
            continue  # its breakdown is shown instead (the total is what alarms read)
        assert (name, dimensions) in shown, f"{name} {sorted(dimensions)} is emitted but not shown"


def test_the_dashboard_lists_every_alarm(template: Template) -> None:
    body, _ = substituted_dashboard(template)
    listed = {
        alarm
        for widget in body["widgets"]
        if widget["type"] == "alarm"
        for alarm in widget["properties"]["alarms"]
    }
    assert listed == {f"SUB_{name}.Arn" for name in template.of_type("AWS::CloudWatch::Alarm")}


# -- the alarms ------------------------------------------------------------------------------------


def alarm_metrics(properties: dict[str, Any]) -> list[tuple[Any, str, dict[str, Any]]]:
    """(namespace, name, dimensions) of every metric an alarm reads; a namespace is AWS's (a string)
    or this stack's (a ``!Sub``)."""
    if "MetricName" in properties:
        dimensions = {d["Name"]: d["Value"] for d in properties.get("Dimensions") or []}
        return [(properties["Namespace"], properties["MetricName"], dimensions)]
    found = []
    for query in properties["Metrics"]:
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions") or []}
            found.append((metric["Namespace"], metric["MetricName"], dimensions))
    return found


#: Ticket-level alarms: on the dashboard's alarm widget, notifying nobody, because anyone on the internet
#: can raise them (the webhook receiver's function URL is public): nothing an anonymous request causes
#: may page a person. Each one's description says so.
TICKET_LEVEL = {"WebhookReceiverThrottlesAlarm"}
#: The metrics only anonymous requests move (the receiver's refusals): no paging alarm may read them.
ANONYMOUS_METRICS = {"WebhookRejected", "WebhookSignatureRejected"}


def test_every_alarm_says_what_to_do_and_notifies_the_topic(template: Template) -> None:
    alarms = template.of_type("AWS::CloudWatch::Alarm")
    assert len(alarms) >= 6
    topic = {"Fn::If": ["CreateAlarmTopic", {"Ref": "AlarmTopic"}, ALARM_TOPIC_IN_THIS_REGION]}
    for name, properties in alarms.items():
        description = properties["AlarmDescription"]
        text = description if isinstance(description, str) else json.dumps(description)
        assert len(text.split()) >= 30, f"{name}: the description is the runbook"
        if name in TICKET_LEVEL:
            assert "AlarmActions" not in properties, f"{name}: anyone can raise it, so it notifies nobody"
            assert "OKActions" not in properties, name
            assert "Ticket-level" in text, f"{name}: its description says it pages nobody"
            continue
        assert properties["AlarmActions"] == [topic], name
        assert properties["OKActions"] == [topic], name
        if name == "SweeperHeartbeatAlarm":
            continue  # its missing data is the failure it watches for (test_the_sweeper_heartbeat_...)
        assert properties.get("TreatMissingData") in {"notBreaching", "ignore"}, name


def test_alarm_names_match_what_the_topic_key_lets_publish(template: Template) -> None:
    """The key policy admits alarms named ``<stack>-*`` only: an alarm named otherwise never notifies."""
    key = template.of_type("AWS::KMS::Key")["AlarmTopicKey"]
    conditions = [
        statement["Condition"]
        for statement in key["KeyPolicy"]["Statement"]
        if statement.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com"
    ]
    assert conditions[0]["ArnLike"]["aws:SourceArn"]["Fn::Sub"].endswith(":alarm:${AWS::StackName}-*")
    for name, properties in template.of_type("AWS::CloudWatch::Alarm").items():
        assert properties["AlarmName"]["Fn::Sub"].startswith("${AWS::StackName}-"), name


def test_every_alarm_reads_a_metric_something_publishes(template: Template) -> None:
    namespace, service = powertools_settings(template)
    emitted = {name for name, dimensions in emitted_metrics() if not dimensions}
    by_function = {name for name, dimensions in emitted_metrics() if dimensions == {"FunctionName"}}
    from_filters = filter_metrics(template)
    for name, properties in template.of_type("AWS::CloudWatch::Alarm").items():
        for space, metric, dimensions in alarm_metrics(properties):
            if is_aws_namespace(space):
                assert dimensions, f"{name}: {metric} without dimensions reads the whole account"
                continue
            assert space == namespace, name
            if (space["Fn::Sub"], metric) in from_filters:
                assert not dimensions, name
            elif "FunctionName" in dimensions:
                # Published by FunctionName so that each stack's alarm reads its own function.
                assert metric in by_function, f"{name}: no handler emits {metric} by FunctionName"
                function = template.referenced_resource(dimensions.pop("FunctionName"))
                assert function in template.functions, name
                assert dimensions == {"service": service}, f"{name}: Powertools publishes service={service}"
            else:
                assert metric in emitted, f"{name}: no handler emits {metric}"
                assert dimensions == {"service": service}, f"{name}: Powertools publishes service={service}"


def test_no_request_to_the_public_url_can_page_anyone(template: Template) -> None:
    """The receiver's refusals are counted (on the dashboard) and alarmed nowhere that notifies; its
    throttles, which a flood causes by design once it is bounded, are ticket-level. Stripe's deliveries
    kept out still page, as silence: charges landing and no *verified* event received."""
    receiver = {"Ref": "WebhookReceiverFunction"}
    paging = {
        name: properties
        for name, properties in template.of_type("AWS::CloudWatch::Alarm").items()
        if properties.get("AlarmActions")
    }
    for name, properties in paging.items():
        for _, metric, dimensions in alarm_metrics(properties):
            assert metric not in ANONYMOUS_METRICS, f"{name} pages on {metric}: anyone can send those"
            if dimensions.get("FunctionName") == receiver:
                assert metric == "Errors", f"{name}: the receiver's {metric} is no page"
    silence = paging["WebhookSilenceAlarm"]
    assert {metric for _, metric, _ in alarm_metrics(silence)} == {"ChargeApplied", "WebhookReceived"}


def test_every_function_has_a_throttle_alarm(template: Template) -> None:
    watched = {
        template.referenced_resource(dimensions["FunctionName"])
        for properties in template.of_type("AWS::CloudWatch::Alarm").values()
        for space, metric, dimensions in alarm_metrics(properties)
        if (space, metric) == ("AWS/Lambda", "Throttles")
    }
    assert watched == set(template.functions)


def test_the_duplicate_spike_alarm_watches_the_mechanism(template: Template) -> None:
    """Seed 003: alarm on duplicates being suppressed (both layers), over one minute, at the threshold."""
    alarm = template.of_type("AWS::CloudWatch::Alarm")["DuplicateSpikeAlarm"]
    assert alarm_metrics(alarm) == [(STACK_NAMESPACE, "DuplicateSuppressed", {"service": "payment-saga"})]
    assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 60)
    assert alarm["Threshold"] == {"Ref": "DuplicateSpikeThreshold"}
    assert template.parameters["DuplicateSpikeThreshold"]["Default"] == 50


def silence_breaches(expression: str, charges: float | None, received: float | None) -> bool:
    """Evaluate the silence alarm's metric math for one hour's sums (None: no data point), as
    CloudWatch does for the functions it uses: FILL, IF, AND, comparisons."""
    python = re.sub(r"FILL\((\w+), 0\)", r"(\1 if \1 is not None else 0)", expression)
    python = re.sub(r"IF\((.+), 1, 0\)$", r"(1 if (\1) else 0)", python).replace(" AND ", " and ")
    assert set(re.findall(r"[A-Za-z_]+", python)) <= {
        "charges",
        "received",
        "if",
        "is",
        "not",
        "None",
        "else",
        "and",
    }
    value = eval(python, {}, {"charges": charges, "received": received})  # noqa: S307 - the template's own expression
    return bool(value > 0)


def test_the_webhook_silence_alarm_pages_on_charges_that_no_webhook_followed(template: Template) -> None:
    """A delivery that never reaches AWS raises no receiver alarm: charges landing with no webhook do."""
    alarm = template.of_type("AWS::CloudWatch::Alarm")["WebhookSilenceAlarm"]
    assert alarm_metrics(alarm) == [
        (STACK_NAMESPACE, "ChargeApplied", {"service": "payment-saga"}),
        (STACK_NAMESPACE, "WebhookReceived", {"service": "payment-saga"}),
    ]
    queries = {query["Id"]: query for query in alarm["Metrics"]}
    assert {query["MetricStat"]["Period"] for query in queries.values() if "MetricStat" in query} == {3600}
    (returned,) = [query for query in queries.values() if query.get("ReturnData", True)]
    breaches = functools.partial(silence_breaches, returned["Expression"])
    assert breaches(5, 0)
    assert breaches(40, None)  # no delivery at all in the hour: no data point
    assert not breaches(40, 1)  # one delivery arrived: Stripe reaches the stack
    assert not breaches(4, 0)  # a quiet hour
    assert not breaches(None, None)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def test_the_sweeper_throttle_alarm_waits_longer_than_a_throttled_tick_is_retried(template: Template) -> None:
    """A throttled tick is retried by Lambda (MaximumEventAgeInSeconds): one throttled period only delays
    a sweep. The alarm wants sweeps throttled period after period."""
    sweeper = template.function_by_handler("handlers.sweeper.handler")
    retried_for = template.functions[sweeper]["EventInvokeConfig"]["MaximumEventAgeInSeconds"]
    (alarm,) = [
        properties
        for properties in template.of_type("AWS::CloudWatch::Alarm").values()
        if alarm_metrics(properties) == [("AWS/Lambda", "Throttles", {"FunctionName": {"Ref": sweeper}})]
    ]
    assert alarm["DatapointsToAlarm"] == alarm["EvaluationPeriods"] > 1
    assert alarm["Period"] * alarm["DatapointsToAlarm"] > sweep_interval_seconds(template) + retried_for


def sweep_interval_seconds(template: Template) -> int:
    sweeper = template.function_by_handler("handlers.sweeper.handler")
    # The sweep's own schedule (the other is the hourly settlement backstop, which takes no sweep lock).
    event = template.functions[sweeper]["Events"]["Sweep"]
    parsed = re.fullmatch(r"rate\((\d+) minutes?\)", event["Properties"]["ScheduleExpression"])
    assert parsed, event
    return int(parsed.group(1)) * 60


def test_the_pending_alarm_waits_longer_than_an_ordinary_stale_claim_stays_pending(
    template: Template,
) -> None:
    """A claim whose search finds nothing is pending, sweep after sweep, until the search grace ends.

    Its attempt started a lease before any sweep sees it (the lease must run out first), then the
    sweeper waits the grace before it asks the list, and the sweep that resolves it may come one
    interval later: an age past lease + grace + interval is a claim the sweeper cannot resolve. The
    parameter's default and its least allowed value both wait longer than that, and the alarm reads
    the age of its own stack's sweeper.
    """
    alarm = template.of_type("AWS::CloudWatch::Alarm")["ReconciliationPendingAlarm"]
    sweeper = template.function_by_handler("handlers.sweeper.handler")
    assert alarm_metrics(alarm) == [
        (
            STACK_NAMESPACE,
            "OldestUnresolvedClaimAge",
            {"FunctionName": {"Ref": sweeper}, "service": "payment-saga"},
        )
    ]
    assert (alarm["Statistic"], alarm["ComparisonOperator"]) == ("Maximum", "GreaterThanThreshold")
    assert alarm["Threshold"] == {"Ref": "ReconciliationPendingAgeSeconds"}
    interval = sweep_interval_seconds(template)
    grace = int(template.functions[sweeper]["Environment"]["Variables"]["CLAIM_SEARCH_GRACE_SECONDS"])
    lease = template.parameters["ClaimLeaseSeconds"]["Default"]
    threshold = template.parameters["ReconciliationPendingAgeSeconds"]
    for bound in (threshold["Default"], threshold["MinValue"]):
        assert bound >= lease + grace + interval
    assert threshold["Default"] >= 2 * 3600


def test_a_skipped_sweep_does_not_reset_the_pending_alarm(template: Template) -> None:
    """A tick that skips (the lease held) or lands late leaves a period without a reading: the alarm
    must not need a reading in every period of its window (18 of 18 reset on one gap)."""
    alarm = template.of_type("AWS::CloudWatch::Alarm")["ReconciliationPendingAlarm"]
    assert alarm["Period"] == sweep_interval_seconds(template)
    assert alarm["DatapointsToAlarm"] < alarm["EvaluationPeriods"]
    assert alarm["TreatMissingData"] == "notBreaching"


def test_the_sweeper_heartbeat_alarms_when_no_sweep_completed_for_three_periods(template: Template) -> None:
    """Missing data is the failure: a sweeper that never starts or always dies publishes nothing.

    A sweep runs at most its timeout, so with one skipped tick between two sweeps they complete less
    than the alarm's window apart: an ordinary long sweep never pages.
    """
    alarm = template.of_type("AWS::CloudWatch::Alarm")["SweeperHeartbeatAlarm"]
    sweeper = template.function_by_handler("handlers.sweeper.handler")
    assert alarm_metrics(alarm) == [
        (STACK_NAMESPACE, "SweepCompleted", {"FunctionName": {"Ref": sweeper}, "service": "payment-saga"})
    ]
    assert alarm["TreatMissingData"] == "breaching"
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Sum",
        1,
        "LessThanThreshold",
    )
    interval = sweep_interval_seconds(template)
    assert alarm["Period"] == interval
    assert alarm["DatapointsToAlarm"] == alarm["EvaluationPeriods"] == 3
    timeout = template.functions[sweeper]["Timeout"]
    assert alarm["Period"] * alarm["EvaluationPeriods"] > interval + timeout


def test_the_sweepers_own_errors_are_alarmed(template: Template) -> None:
    """What fails before the first claim (the secret, the sweep lock, the index) shows only as Errors."""
    sweeper = template.function_by_handler("handlers.sweeper.handler")
    (alarm,) = [
        properties
        for properties in template.of_type("AWS::CloudWatch::Alarm").values()
        if alarm_metrics(properties) == [("AWS/Lambda", "Errors", {"FunctionName": {"Ref": sweeper}})]
    ]
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Sum",
        0,
        "GreaterThanThreshold",
    )
    assert alarm["Period"] == sweep_interval_seconds(template)


def test_the_failed_executions_alarm_leaves_out_declines_and_busy_claims_only(
    template: Template, saga: StateMachine
) -> None:
    """Failures and declines are told apart by one source: the same ExecutionFailed log event. So is a
    delivery put back on the queue behind another open payment attempt (ClaimBusy): expected, not
    a page.

    Subtracting declines counted from the logs from Step Functions' own ExecutionsFailed metric mixed
    two sources; log delivery is best effort and lags, so a late decline paged as a failure. A late
    event now delays the alarm and never turns a decline into a page.
    """
    alarm = template.of_type("AWS::CloudWatch::Alarm")["ExecutionsFailedAlarm"]
    ((namespace, metric, dimensions),) = alarm_metrics(alarm)
    assert "Metrics" not in alarm, "no metric math: one metric, one source"
    (pattern,) = [
        properties["FilterPattern"]
        for properties in metric_filters(template).values()
        if (
            properties["MetricTransformations"][0]["MetricNamespace"],
            properties["MetricTransformations"][0]["MetricName"],
        )
        == (namespace, metric)
    ]
    assert not dimensions
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Sum",
        0,
        "GreaterThanThreshold",
    )
    fail_errors = saga.fail_errors()
    expected = {"PaymentDeclined", "ClaimBusy"}
    assert expected <= fail_errors
    assert "ClaimRetriedLater" in fail_errors, "a failed Claim step sent back pages"
    for error in fail_errors | {"States.Runtime", "States.Timeout"}:
        event = {**LOGGED_EXECUTION_FAILED, "details": {"error": error}}
        assert filter_matches(pattern, event) is (error not in expected), error
        assert not filter_matches(pattern, {**event, "type": "TaskFailed"}), error


# -- metric filters --------------------------------------------------------------------------------

_CLAUSE = re.compile(r'\$\.([A-Za-z_.]+)\s*(=|!=)\s*"([^"]*)"')


def filter_matches(pattern: str, event: dict[str, Any]) -> bool:
    """Evaluate a CloudWatch Logs JSON filter made of ``$.path = "text"`` clauses joined by ``&&``."""
    body = pattern.strip()
    assert body.startswith("{"), pattern
    assert body.endswith("}"), pattern
    clauses = [clause.strip() for clause in body[1:-1].split("&&")]
    for clause in clauses:
        parsed = _CLAUSE.fullmatch(clause)
        assert parsed, f"clause this evaluator does not know: {clause!r}"
        path, operator, expected = parsed.groups()
        value: Any = event
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if (value == expected) != (operator == "="):
            return False
    return True


def test_the_metric_filters_read_the_state_machines_log_group(template: Template, saga: StateMachine) -> None:
    destinations = saga.properties["LoggingConfiguration"]["Destinations"]
    log_group = template.referenced_resource(destinations[0]["CloudWatchLogsLogGroup"]["LogGroupArn"])
    filters = metric_filters(template)
    assert filters
    for name, properties in filters.items():
        assert template.referenced_resource(properties["LogGroupName"]) == log_group, name


@pytest.mark.parametrize(
    ("error", "matches"),
    [("NeedsReconciliation", True), ("PaymentDeclined", False), ("ClaimFailed", False)],
)
def test_needs_reconciliation_is_counted_from_the_failed_execution_event(
    template: Template, error: str, matches: bool
) -> None:
    (pattern,) = [
        properties["FilterPattern"]
        for properties in metric_filters(template).values()
        if properties["MetricTransformations"][0]["MetricName"] == "NeedsReconciliation"
    ]
    event = {**LOGGED_EXECUTION_FAILED, "details": {**LOGGED_EXECUTION_FAILED["details"], "error": error}}
    assert filter_matches(pattern, event) is matches
    # Other events of the same execution (a failed task, say) never count.
    assert not filter_matches(pattern, {**event, "type": "TaskFailed"})


def test_the_filtered_error_names_are_fail_states_of_the_saga(template: Template, saga: StateMachine) -> None:
    fail_errors = saga.fail_errors()
    for name, properties in metric_filters(template).items():
        errors = set(re.findall(r'\$\.details\.error\s*!?=\s*"([^"]*)"', properties["FilterPattern"]))
        assert errors, name
        assert errors <= fail_errors, f"{name}: {errors - fail_errors} is no Fail state's Error"
