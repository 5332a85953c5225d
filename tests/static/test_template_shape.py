"""``template.yaml`` reads as the saga; the operations are a nested application that deploys with it.

Whoever inherits the saga opens ``template.yaml`` first. It holds the saga (queues, claims table, state
machine, functions, roles), the state machine in its first half; the alarms, metric filters, dashboard
and alarm topic are ``operations.yaml``, which ``sam build`` and ``sam deploy`` package and deploy as
the nested stack ``Operations``. The other static tests read the two as deployed (``load_template``
inlines the application), so each alarm is still checked where it is written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from saga_local.harness.template_shape import OPERATIONS_TYPES, entries, measure, operations_entries
from saga_local.template import inline_applications, load_template, local_applications, parse_template

ROOT = Path(__file__).resolve().parents[2]
#: It was 3,061 lines with the operations in it, 1,995 with the checkov skips every function shares.
MOST_LINES = 1_900
MOST_OPERATIONS_SHARE = 0.10


def test_the_template_is_short_enough_to_read_as_the_saga() -> None:
    shape = measure(ROOT)
    assert shape.lines <= MOST_LINES, f"template.yaml is {shape.lines} lines"


def test_the_state_machine_is_in_the_first_half_of_the_template() -> None:
    shape = measure(ROOT)
    assert shape.state_machine_line <= shape.lines / 2, (
        f"PaymentSagaStateMachine starts at line {shape.state_machine_line} of {shape.lines}"
    )


def test_operations_are_under_a_tenth_of_the_template() -> None:
    shape = measure(ROOT)
    assert shape.operations_share < MOST_OPERATIONS_SHARE, (
        f"{shape.operations_lines} of template.yaml's {shape.lines} lines are operations"
    )


def test_no_alarm_filter_dashboard_or_topic_is_written_in_the_template() -> None:
    parent = load_template(ROOT / "template.yaml", nested=False)
    written = {name for name, r in parent["Resources"].items() if r["Type"] in OPERATIONS_TYPES}
    assert not written, (
        f"operations written in template.yaml: {sorted(written)} (they belong in operations.yaml)"
    )


def test_the_operations_application_deploys_every_alarm_filter_and_the_dashboard() -> None:
    parent = load_template(ROOT / "template.yaml", nested=False)
    assert local_applications(parent) == {"Operations": "operations.yaml"}
    deployed = load_template(ROOT / "template.yaml")["Resources"]
    child = parse_template((ROOT / "operations.yaml").read_text(encoding="utf-8"))["Resources"]
    kinds = {r["Type"] for r in child.values()}
    assert {"AWS::CloudWatch::Alarm", "AWS::Logs::MetricFilter", "AWS::CloudWatch::Dashboard"} <= kinds
    assert set(child) <= set(deployed), "the deployed view left some of operations.yaml out"


def test_the_saga_passes_exactly_the_parameters_operations_declares() -> None:
    parent = load_template(ROOT / "template.yaml", nested=False)
    passed = parent["Resources"]["Operations"]["Properties"]["Parameters"]
    declared = parse_template((ROOT / "operations.yaml").read_text(encoding="utf-8"))["Parameters"]
    assert set(passed) == set(declared)


def test_operations_never_read_their_own_stack_name() -> None:
    """A nested stack's AWS::StackName is its own (saga-Operations-1A2B3C...), not the saga's: an alarm
    named after it is refused by the alarm topic's key, and a metric read from PaymentSaga/<it> is a
    namespace nothing publishes to, so the alarm never fires. The saga's name comes in as SagaStackName."""
    written = json.dumps(parse_template((ROOT / "operations.yaml").read_text(encoding="utf-8")))
    assert not re.findall(r"AWS::Stack(?:Name|Id)", written)
    assert "${SagaStackName}" in written


def test_a_parameter_passed_wrong_reads_wrong_in_the_deployed_view() -> None:
    """The other static tests check the operations through the deployed view: a name the saga passes
    wrong must reach them, not be papered over by the merge."""
    parent = load_template(ROOT / "template.yaml", nested=False)
    parent["Resources"]["Operations"]["Properties"]["Parameters"]["ClaimOrderFunction"] = {
        "Ref": "SweeperFunction"
    }
    deployed = inline_applications(parent, ROOT)
    dimensions = deployed["Resources"]["ClaimOrderThrottlesAlarm"]["Properties"]["Dimensions"]
    assert dimensions == [{"Name": "FunctionName", "Value": {"Ref": "SweeperFunction"}}]
    del parent["Resources"]["Operations"]["Properties"]["Parameters"]["ClaimOrderFunction"]
    with pytest.raises(ValueError, match="ClaimOrderFunction"):
        inline_applications(parent, ROOT)


def test_the_counted_operations_are_the_application_and_what_only_it_reads() -> None:
    parent = load_template(ROOT / "template.yaml", nested=False)
    counted = operations_entries(parent)
    assert ("Resources", "Operations") in counted
    assert ("Outputs", "AlarmTopicArn") in counted
    # Read by the sweeper too: the saga's, though the alarms quote it.
    assert ("Parameters", "SettlementWindowDays") not in counted
    blocks = entries((ROOT / "template.yaml").read_text(encoding="utf-8"))
    assert set(counted) <= set(blocks)
