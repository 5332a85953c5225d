"""How ``template.yaml`` reads: its length, where the state machine starts, how much of it is operations.

The saga's template is read first by whoever inherits the saga, so it holds the saga: the queues, the
claims table, the state machine, the functions and their roles. The operations (the alarms, the
metric filters, the dashboard, the alarm topic) are a nested application of their own,
``operations.yaml``; what is left of them in ``template.yaml`` is the application's resource, the
parameters only it reads and the outputs it gives. :func:`measure` counts those lines, and
``tests/static/test_template_shape.py`` and the figures block ``template-shape`` of docs/design.md
read them from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from saga_local.template import ROOT, load_template, local_applications

TEMPLATE = "template.yaml"
#: What watches the saga rather than runs it: none of these belongs in template.yaml.
OPERATIONS_TYPES = frozenset(
    {
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::CompositeAlarm",
        "AWS::CloudWatch::Dashboard",
        "AWS::Logs::MetricFilter",
        "AWS::SNS::Topic",
        "AWS::SNS::TopicPolicy",
    }
)
_SECTION = re.compile(r"^[A-Z]\w*:")
_ENTRY = re.compile(r"^  (?P<name>[A-Za-z0-9:]+):")


@dataclass(frozen=True)
class Shape:
    """``template.yaml`` and its operations, counted."""

    lines: int
    #: The line ``PaymentSagaStateMachine:`` is on (1-based).
    state_machine_line: int
    #: Lines of template.yaml that are operations (each with the comments right above it).
    operations_lines: int
    #: The nested operations templates (path -> lines), and what they deploy.
    nested_lines: dict[str, int]
    alarms: int
    metric_filters: int
    dashboards: int
    #: Values template.yaml passes to its nested applications.
    passed: int

    @property
    def operations_share(self) -> float:
        return self.operations_lines / self.lines


def entries(text: str) -> dict[tuple[str, str], range]:
    """(section, name) -> the 0-based lines of each entry of a top-level section (``Resources``,
    ``Parameters``, ``Outputs``...), the comment lines right above it included."""
    lines = text.splitlines()
    found: dict[tuple[str, str], range] = {}
    section = ""
    current: tuple[tuple[str, str], int] | None = None

    def close(end: int) -> None:
        if current is not None:
            while end > current[1] and not lines[end - 1].strip():
                end -= 1  # the blank lines between entries belong to neither
            found[current[0]] = range(current[1], end)

    for index, line in enumerate(lines):
        entry = _ENTRY.match(line)
        if _SECTION.match(line) or entry:
            close(index)
            current = None
        if _SECTION.match(line):
            section = line.split(":", 1)[0]
        elif entry:
            start = index
            while start > 0 and lines[start - 1].startswith("  #"):
                start -= 1
            current = ((section, entry["name"]), start)
    close(len(lines))
    return found


def _references(value: Any) -> set[str]:
    """Every name a ``!Ref``, ``!GetAtt`` or ``!Sub`` in ``value`` reads."""
    if isinstance(value, list):
        return set().union(*(_references(item) for item in value)) if value else set()
    if not isinstance(value, dict):
        return set()
    found: set[str] = set()
    for key, arg in value.items():
        if key == "Ref" and isinstance(arg, str):
            found.add(arg)
        elif key == "Fn::GetAtt":
            found.add(str(arg[0] if isinstance(arg, list) else arg.split(".", 1)[0]))
        elif key == "Fn::Sub":
            text = arg if isinstance(arg, str) else arg[0]
            found |= {name.split(".", 1)[0] for name in re.findall(r"\$\{([^}!][^}]*)\}", text)}
            found |= _references(arg[1:] if isinstance(arg, list) else [])
        else:
            found |= _references(arg)
    return found


def operations_entries(template: dict[str, Any]) -> set[tuple[str, str]]:
    """(section, name) of what in ``template`` (read as one file) is operations: resources of an
    operations type (and a key only they use), the nested applications, the parameters nothing
    but them reads, the outputs that read nothing but them."""
    resources = template["Resources"]
    applications = set(local_applications(template))
    operations = {name for name, r in resources.items() if r["Type"] in OPERATIONS_TYPES} | applications
    # And a key only they use (the alarm topic's).
    saga = _references([r for name, r in resources.items() if name not in operations])
    watching = _references([resources[name] for name in operations - applications])
    operations |= {name for name in watching - saga if resources.get(name, {}).get("Type") == "AWS::KMS::Key"}
    found = {("Resources", name) for name in operations}
    rest = {name: r for name, r in resources.items() if name not in operations}
    read_by_the_saga = _references([rest, template.get("Globals"), template.get("Conditions")])
    read_by_operations = _references([resources[name] for name in operations])
    for name in template.get("Parameters") or {}:
        if name in read_by_operations and name not in read_by_the_saga:
            found.add(("Parameters", name))
    for name, output in (template.get("Outputs") or {}).items():
        if _references(output) and _references(output) <= operations:
            found.add(("Outputs", name))
    return found


def measure(root: Path = ROOT) -> Shape:
    path = root / TEMPLATE
    text = path.read_text(encoding="utf-8")
    parent = load_template(path, nested=False)
    blocks = entries(text)
    operations = sum(len(blocks[entry]) for entry in operations_entries(parent))
    applications = local_applications(parent)
    deployed = load_template(path)["Resources"].values()

    def count(type_name: str) -> int:
        return sum(1 for resource in deployed if resource["Type"] == type_name)

    return Shape(
        lines=len(text.splitlines()),
        state_machine_line=text.splitlines().index("  PaymentSagaStateMachine:") + 1,
        operations_lines=operations,
        nested_lines={
            location: len((root / location).read_text(encoding="utf-8").splitlines())
            for location in applications.values()
        },
        alarms=count("AWS::CloudWatch::Alarm"),
        metric_filters=count("AWS::Logs::MetricFilter"),
        dashboards=count("AWS::CloudWatch::Dashboard"),
        passed=sum(
            len(parent["Resources"][name]["Properties"].get("Parameters") or {}) for name in applications
        ),
    )
