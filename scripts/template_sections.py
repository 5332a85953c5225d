"""Write the per-function blocks of the templates from a short spec: a new function is not 60 lines.

Some blocks are the same for every function of ``template.yaml`` but for a name and a few words: the
functions' log groups there; in ``operations.yaml`` (the operations' nested application) the functions'
throttle alarms, and the function names it takes as parameters, which ``template.yaml`` passes to it.
``scripts/template_sections.yaml`` holds what differs; this script renders the blocks, in plain
CloudFormation, between markers in the templates::

    # BEGIN GENERATED throttle-alarms (scripts/template_sections.py)
    ...
    # END GENERATED throttle-alarms

so that what people read, lint and deploy stays the explicit template (no macro, no transform), and
``tests/static/test_template_sections.py`` fails while the two differ.

Usage: ``.venv/bin/python scripts/template_sections.py`` rewrites the blocks; ``--check`` only
reports (exit 1) a template that differs from what it would write.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "template.yaml"
OPERATIONS = "operations.yaml"
SPEC_PATH = Path(__file__).with_suffix(".yaml")
#: Folded text is wrapped to this many columns, indentation included.
WIDTH = 112

SECTION = re.compile(
    r"^(?P<indent> *)# BEGIN GENERATED (?P<name>[a-z-]+)\b[^\n]*\n"
    r"(?P<body>.*?)"
    r"^(?P=indent)# END GENERATED (?P=name)\n",
    re.MULTILINE | re.DOTALL,
)
FUNCTION = re.compile(r"^  (\w+):\n    Type: AWS::Serverless::Function$", re.MULTILINE)
#: The first 8 hex digits of the stack's id (arn:...:stack/NAME/UUID): new on every create of a stack, the
#: same for each of its updates. A log group named with it cannot collide with one a Lambda recreated while
#: the previous stack of the same name was being deleted.
CREATE_ID = '!Select [0, !Split ["-", !Select [2, !Split ["/", !Ref AWS::StackId]]]]'
#: The sections each template must hold. The checkov skips every function or log group shares are not
#: written into the template: they are in scripts/checkov.yaml.
SECTIONS = {
    TEMPLATE: ("function-log-groups", "operations-functions"),
    OPERATIONS: ("function-parameters", "throttle-alarms"),
}
ALARM_TOPIC = (
    '[!If [CreateAlarmTopic, !Ref AlarmTopic, !Sub "arn:${AWS::Partition}:sns:${AWS::Region}:'
    '${AWS::AccountId}:${AlarmTopicName}"]]'
)


class SpecError(Exception):
    """The spec and the template disagree (a function without its alarm, an alarm without its function)."""


def folded(key: str, text: str, indent: int, base: int) -> list[str]:
    """``key: >-`` and ``text`` wrapped under it (to ``WIDTH`` once indented by ``base``): YAML that
    reads back as exactly ``text``."""
    pad = " " * (indent + 2)
    lines = textwrap.wrap(text, WIDTH - base - len(pad), break_long_words=False, break_on_hyphens=False)
    rendered = [f"{' ' * indent}{key}: >-", *(pad + line for line in lines)]
    if yaml.safe_load("\n".join(rendered)) != {key: text}:
        raise SpecError(f"{key}: {text!r} does not survive a folded scalar")
    return rendered


def comment(text: str, base: int) -> list[str]:
    return ["# " + line for line in textwrap.wrap(text, WIDTH - base - 2, break_on_hyphens=False)]


def log_group(function: str) -> list[str]:
    return [
        f"{function}LogGroup:",
        "  Type: AWS::Logs::LogGroup",
        "  Properties:",
        "    LogGroupName: !Sub",
        f"      - /aws/lambda/${{AWS::StackName}}-{function}-${{CreateId}}",
        f"      - CreateId: {CREATE_ID}",
        "    RetentionInDays: !Ref LogRetentionDays",
    ]


def throttle_alarm(function: str, alarm: dict[str, Any], base: int) -> list[str]:
    """``<Name>ThrottlesAlarm``: the function's Throttles above 0, over its window (one minute by default)."""
    name = function.removesuffix("Function")
    kebab = re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
    window = [
        f"    Period: {alarm.get('period', 60)}",
        f"    EvaluationPeriods: {alarm.get('evaluation_periods', 1)}",
    ]
    if "datapoints_to_alarm" in alarm:
        window.append(f"    DatapointsToAlarm: {alarm['datapoints_to_alarm']}")
    return [
        *comment(alarm.get("comment", ""), base),
        f"{name}ThrottlesAlarm:",
        "  Type: AWS::CloudWatch::Alarm",
        "  Properties:",
        # The operations' own AWS::StackName is the nested stack's: the saga's name is SagaStackName.
        f"    AlarmName: !Sub ${{SagaStackName}}-throttles-{kebab}",
        *folded("AlarmDescription", alarm["description"], 4, base),
        "    Namespace: AWS/Lambda",
        "    MetricName: Throttles",
        "    Dimensions:",
        "      - Name: FunctionName",
        f"        Value: !Ref {function}",
        "    Statistic: Sum",
        *window,
        "    Threshold: 0",
        "    ComparisonOperator: GreaterThanThreshold",
        "    TreatMissingData: notBreaching",
        # A ticket-level alarm (notify: false) notifies nobody: its state is on the dashboard only.
        *(
            [f"    AlarmActions: {ALARM_TOPIC}", f"    OKActions: {ALARM_TOPIC}"]
            if alarm.get("notify", True)
            else []
        ),
    ]


def blocks(resources: list[list[str]]) -> str:
    """Resources one blank line apart, as in the rest of the template."""
    return "\n\n".join("\n".join(lines) for lines in resources) + "\n"


def section(name: str, functions: list[str], spec: dict[str, Any], base: int) -> str:
    """The text between the markers of section ``name``, to be indented by ``base`` spaces."""
    alarms: dict[str, Any] = spec["throttle_alarms"]
    if name == "function-log-groups":
        return blocks([log_group(function) for function in functions])
    if name == "throttle-alarms":
        return blocks([throttle_alarm(function, alarms[function], base) for function in functions])
    # Each function's name, passed by the saga's Operations application (its !Ref is the name) and
    # taken by operations.yaml as a parameter of the same name: its alarms read !Ref <Function> there too.
    if name == "operations-functions":
        return "".join(f"{function}: !Ref {function}\n" for function in functions)
    if name == "function-parameters":
        return "".join(f"{function}:\n  Type: String\n" for function in functions)
    raise SpecError(f"unknown generated section {name!r}")


def render(files: dict[str, str], spec: dict[str, Any]) -> dict[str, str]:
    """``files`` (``template.yaml`` and ``operations.yaml``: name -> text) with every generated section
    rewritten from ``spec`` and the functions of ``template.yaml``."""
    functions = FUNCTION.findall(files[TEMPLATE])
    alarms = set(spec["throttle_alarms"])
    if alarms != set(functions):
        missing, unknown = sorted(set(functions) - alarms), sorted(alarms - set(functions))
        raise SpecError(f"throttle_alarms: no entry for {missing}; not a function of the template: {unknown}")

    def replace(match: re.Match[str]) -> str:
        indent = match["indent"]
        body = section(match["name"], functions, spec, len(indent))
        body = textwrap.indent(body, indent, lambda line: line.strip() != "")
        begin, _, _ = match.group(0).partition("\n")
        return f"{begin}\n{body}{indent}# END GENERATED {match['name']}\n"

    rendered = {}
    for name, sections in SECTIONS.items():
        found = {match["name"] for match in SECTION.finditer(files[name])}
        if found != set(sections):
            raise SpecError(f"{name} has generated sections {sorted(found)}, expected {sorted(sections)}")
        rendered[name] = SECTION.sub(replace, files[name])
    return rendered


def read(root: Path = ROOT) -> dict[str, str]:
    """The templates the sections live in, as text."""
    return {name: (root / name).read_text(encoding="utf-8") for name in SECTIONS}


def load_spec(path: Path = SPEC_PATH) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report a template that differs (exit 1)")
    args = parser.parse_args(argv)
    current = read()
    wanted = render(current, load_spec())
    changed = [name for name in current if wanted[name] != current[name]]
    if args.check:
        for name in changed:
            diff = difflib.unified_diff(
                current[name].splitlines(keepends=True),
                wanted[name].splitlines(keepends=True),
                name,
                "rendered",
            )
            sys.stdout.writelines(diff)
        return 1 if changed else 0
    for name in changed:
        (ROOT / name).write_text(wanted[name], encoding="utf-8")
        print(f"{name}: generated sections rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
