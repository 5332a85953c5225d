"""The per-function blocks of the templates are what ``scripts/template_sections.py`` renders.

The functions' log groups, their throttle alarms and the names the operations' nested application takes
are written from ``scripts/template_sections.yaml``:
a hand edit inside a generated section, or a function added without its entry in the spec, fails here
instead of drifting.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from saga_local.template import load_template

ROOT = Path(__file__).resolve().parents[2]
SCRIPT_PATH = ROOT / "scripts" / "template_sections.py"
RUN = ".venv/bin/python scripts/template_sections.py"


@pytest.fixture(scope="module")
def sections() -> ModuleType:
    spec = importlib.util.spec_from_file_location("template_sections", SCRIPT_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_templates_are_what_the_spec_renders(sections: ModuleType) -> None:
    current = sections.read()
    rendered = sections.render(current, sections.load_spec())
    for name in ("template.yaml", "operations.yaml"):
        assert rendered[name] == current[name], (
            f"{name} differs from scripts/template_sections.yaml: edit the spec, then run `{RUN}`"
        )


def test_a_hand_edit_inside_a_generated_section_is_undone(sections: ModuleType) -> None:
    current = sections.read()
    edited = dict(
        current, **{"operations.yaml": current["operations.yaml"].replace("Period: 300", "Period: 60", 1)}
    )
    assert edited != current
    assert sections.render(edited, sections.load_spec()) == current


def test_a_new_function_gets_its_log_group_and_throttle_alarm_from_one_spec_entry(
    sections: ModuleType, tmp_path: Path
) -> None:
    """Adding a function: its resource plus a description in the spec; the rest is written for it."""
    current = sections.read()
    new_function = (
        "  RefundPaymentFunction:\n"
        "    Type: AWS::Serverless::Function\n"
        "    Properties:\n"
        "      Handler: handlers.refund_payment.handler\n\n"
    )
    template = current["template.yaml"].replace(
        "  OutcomeEventBus:\n", new_function + "  OutcomeEventBus:\n", 1
    )
    files = dict(current, **{"template.yaml": template})
    spec = sections.load_spec()

    with pytest.raises(sections.SpecError, match="RefundPaymentFunction"):
        sections.render(files, spec)

    spec["throttle_alarms"]["RefundPaymentFunction"] = {"description": "The refund Lambda is throttled."}
    for name, text in sections.render(files, spec).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    # Read as deployed: the alarm in the nested operations, reading the name the saga passes it.
    resources = load_template(tmp_path / "template.yaml")["Resources"]

    log_group = resources["RefundPaymentFunctionLogGroup"]["Properties"]
    stack_uuid = {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}
    create_id = {"CreateId": {"Fn::Select": [0, {"Fn::Split": ["-", stack_uuid]}]}}
    assert log_group["LogGroupName"] == {
        "Fn::Sub": ["/aws/lambda/${AWS::StackName}-RefundPaymentFunction-${CreateId}", create_id]
    }
    alarm = resources["RefundPaymentThrottlesAlarm"]["Properties"]
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": "RefundPaymentFunction"}}]
    assert alarm["AlarmName"] == {"Fn::Sub": "${AWS::StackName}-throttles-refund-payment"}
    assert alarm["AlarmDescription"] == "The refund Lambda is throttled."
    # Everything that was there before is still there, unchanged.
    assert {name: r for name, r in resources.items() if "RefundPayment" not in name} == load_template(
        ROOT / "template.yaml"
    )["Resources"]


def test_long_folded_text_reads_back_exactly(sections: ModuleType) -> None:
    """Wrapping never splits a word at a hyphen (a folded scalar would read the break back as a space)."""
    text = "account-level " * 20 + "ScalingConfig.MaximumConcurrency (*ThrottlesAlarm): done."
    lines = sections.folded("AlarmDescription", text, 4, 2)
    assert all(len(line) + 2 <= sections.WIDTH for line in lines)
    assert len(lines) > 3
    assert not any(re.search(r"-$", line) for line in lines[1:])
    assert yaml.safe_load("\n".join(lines)) == {"AlarmDescription": text}
