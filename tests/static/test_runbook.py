"""Every alarm of template.yaml has a runbook section that names it and says what to run."""

from __future__ import annotations

import re

from saga_local.template import ROOT, load_template


def alarm_names() -> list[str]:
    resources = load_template()["Resources"]
    return [
        str(r["Properties"]["AlarmName"]["Fn::Sub"]).replace("${AWS::StackName}", "<stack>")
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
    ]


def sections() -> list[str]:
    text = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    return re.split(r"\n(?=##+ )", text)


def alarms_answered(section: str) -> str:
    """The paragraph where a section says which alarms it answers (``**Alarm:**`` or ``**Alarms:**``)."""
    found = re.search(r"\*\*Alarms?:\*\*.*?(?:\n\n|$)", section, flags=re.DOTALL)
    return found.group(0) if found else ""


def test_every_alarm_has_a_runbook_section_that_names_it_and_gives_its_commands() -> None:
    names = alarm_names()
    missing = []
    for name in names:
        owning = [s for s in sections() if f"`{name}`" in alarms_answered(s)]
        if not any(re.search(r"\n(saga|aws) |`saga ", s) for s in owning):
            missing.append(name)

    assert len(names) >= 21
    assert missing == []
