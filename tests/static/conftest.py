"""What the static tests read: ``template.yaml``, the ASL it deploys, and the functions it invokes.

Helpers reach the tests as fixtures and their methods (a rootless ``conftest`` is not importable
by name while other test folders have their own).

The template is loaded by the same reader the local stack uses (``saga_local.template``), with
CloudFormation's short-form tags in their long form (``!Ref X`` -> ``{"Ref": "X"}``,
``!GetAtt A.B`` -> ``{"Fn::GetAtt": ["A", "B"]}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from saga_local.template import load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
FUNCTIONS_DIR = ROOT / "functions"
#: A function that sets no Timeout and whose Globals set none gets Lambda's default.
LAMBDA_DEFAULT_TIMEOUT = 3
SUBSTITUTION = re.compile(r"\$\{([^}]*)\}")


@dataclass(frozen=True)
class StateMachine:
    """A state machine of the template, with its definition file read as JSON and as text."""

    logical_id: str
    properties: dict[str, Any]
    path: Path
    text: str
    definition: dict[str, Any]

    @property
    def substitutions(self) -> dict[str, Any]:
        """``DefinitionSubstitutions``: name -> what the template puts there."""
        return dict(self.properties.get("DefinitionSubstitutions") or {})

    def substitutions_used(self) -> set[str]:
        """The names of every ``${...}`` in the definition file."""
        return set(SUBSTITUTION.findall(self.text))

    def states(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every state, those inside Parallel branches and Map processors included."""
        return iter_states(self.definition)

    def tasks(self) -> list[tuple[str, dict[str, Any]]]:
        return [(name, state) for name, state in self.states() if state["Type"] == "Task"]

    def fail_errors(self) -> set[str]:
        """Every error an execution can fail with in a Fail state: its ``Error``, or for an
        ``ErrorPath`` of a variable (``$sendBack.error``) every value an ``Assign`` gives it."""
        errors: set[str] = set()
        for _, state in self.states():
            if state["Type"] != "Fail":
                continue
            if "Error" in state:
                errors.add(state["Error"])
                continue
            name, _, field = str(state["ErrorPath"]).removeprefix("$").partition(".")
            assigned = [assign[name] for assign in assignments(self.definition) if name in assign]
            assert assigned, f"{state['ErrorPath']} is assigned nowhere"
            errors.update(str(value[field] if field else value) for value in assigned)
        return errors


def assignments(node: Any) -> Iterator[dict[str, Any]]:
    """Every ``Assign`` object in a definition (states, Catchers, Choice rules)."""
    if isinstance(node, dict):
        if isinstance(node.get("Assign"), dict):
            yield node["Assign"]
        for value in node.values():
            yield from assignments(value)
    elif isinstance(node, list):
        for value in node:
            yield from assignments(value)


@dataclass(frozen=True)
class Template:
    """``template.yaml`` as data, with the lookups the tests share."""

    data: dict[str, Any]

    @property
    def resources(self) -> dict[str, Any]:
        return dict(self.data["Resources"])

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self.data.get("Parameters") or {})

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        """Logical id -> Properties of every resource of ``resource_type``."""
        return {
            name: resource.get("Properties") or {}
            for name, resource in self.resources.items()
            if resource["Type"] == resource_type
        }

    @property
    def functions(self) -> dict[str, dict[str, Any]]:
        return self.of_type("AWS::Serverless::Function")

    def function_setting(self, logical_id: str, key: str) -> Any:
        """A function's property, else the Globals' (what SAM deploys)."""
        own = self.functions[logical_id]
        if key in own:
            return own[key]
        return ((self.data.get("Globals") or {}).get("Function") or {}).get(key)

    def function_statements(self, logical_id: str) -> list[dict[str, Any]]:
        """Every statement a function's role may grant: its own role's inline policies (a conditional one
        read as its granting branch), or the SAM ``Policies`` it would be generated from."""
        properties = self.functions[logical_id]
        policies = properties.get("Policies") or []
        role = referenced_resource(properties.get("Role"))
        if role is not None:
            policies = (self.resources[role].get("Properties") or {}).get("Policies") or []
        found: list[dict[str, Any]] = []
        for policy in policies:
            if isinstance(policy, dict) and set(policy) == {"Fn::If"}:
                policy = policy["Fn::If"][1]
            if isinstance(policy, dict):
                document = policy.get("PolicyDocument", policy)
                found += document.get("Statement") or []
        return found

    def function_timeout(self, logical_id: str) -> int:
        timeout = self.function_setting(logical_id, "Timeout")
        return LAMBDA_DEFAULT_TIMEOUT if timeout is None else int(timeout)

    def function_by_handler(self, handler: str) -> str:
        """The logical id of the one function whose code is ``handler`` (``handlers.claim_order.handler``)."""
        matches = [name for name in self.functions if self.function_setting(name, "Handler") == handler]
        assert len(matches) == 1, f"expected one function with Handler {handler}, found {matches}"
        return matches[0]

    @staticmethod
    def referenced_resource(value: Any) -> str | None:
        """The logical id a ``!Ref`` or ``!GetAtt`` points at, else None."""
        return referenced_resource(value)

    def state_machines(self) -> list[StateMachine]:
        machines = []
        for logical_id, properties in self.of_type("AWS::StepFunctions::StateMachine").items():
            path = ROOT / properties["DefinitionS3Location"]
            text = path.read_text(encoding="utf-8")
            machines.append(StateMachine(logical_id, properties, path, text, json.loads(text)))
        return machines


#: An alias's ARN as the template writes it: the function's ARN, then the alias's name.
ALIAS_ARN = re.compile(r"\$\{(\w+)\.Arn\}:(\w+)")


def referenced_resource(value: Any) -> str | None:
    """The logical id a ``!Ref`` or ``!GetAtt`` points at, else None.

    An ``!If [CreateX, <the resource made here>, <what the operator gave instead>]`` (the claims table or
    an adopted one, the alarm topic or a named one) points at the resource made here: what a stack
    deployed with the defaults uses. An alias's ARN, ``!Sub "${X.Arn}:live"``, points at the function
    ``X``."""
    if isinstance(value, dict) and len(value) == 1:
        if "Ref" in value:
            return str(value["Ref"])
        alias = ALIAS_ARN.fullmatch(str(value.get("Fn::Sub", "")))
        if alias:
            return alias.group(1)
        if "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
        if "Fn::If" in value:
            return referenced_resource(value["Fn::If"][1])
    return None


#: What every use of the claims table reads: the table made here (CreateClaimsTable, the default), or
#: the retained one whose stream ARN (arn:...:table/NAME/stream/LABEL) ExistingClaimsTableStreamArn gives.
_EXISTING_STREAM = {"Ref": "ExistingClaimsTableStreamArn"}
_EXISTING_PARTS = {"Fn::Split": ["/", _EXISTING_STREAM]}
CLAIMS_TABLE = {
    "Name": {"Fn::If": ["CreateClaimsTable", {"Ref": "ClaimsTable"}, {"Fn::Select": [1, _EXISTING_PARTS]}]},
    "Arn": {
        "Fn::If": [
            "CreateClaimsTable",
            {"Fn::GetAtt": ["ClaimsTable", "Arn"]},
            {"Fn::Join": ["/", [{"Fn::Select": [0, _EXISTING_PARTS]}, {"Fn::Select": [1, _EXISTING_PARTS]}]]},
        ]
    },
    "StreamArn": {
        "Fn::If": ["CreateClaimsTable", {"Fn::GetAtt": ["ClaimsTable", "StreamArn"]}, _EXISTING_STREAM]
    },
}


@pytest.fixture(scope="session")
def claims_table_value() -> dict[str, Any]:
    """``Name``/``Arn``/``StreamArn`` -> the expression every reference to the claims table must be."""
    return json.loads(json.dumps(CLAIMS_TABLE))


def iter_states(definition: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every state of a definition, those inside Parallel branches and Map processors included."""
    for name, state in definition["States"].items():
        yield name, state
        for branch in state.get("Branches", []):
            yield from iter_states(branch)
        for key in ("ItemProcessor", "Iterator"):
            if key in state:
                yield from iter_states(state[key])


@pytest.fixture(scope="session")
def template() -> Template:
    return Template(load_template(TEMPLATE_PATH))


@pytest.fixture(scope="session")
def saga(template: Template) -> StateMachine:
    """The payment saga: the template's one state machine."""
    machines = template.state_machines()
    assert len(machines) == 1, f"expected one state machine, found {[m.logical_id for m in machines]}"
    return machines[0]


@pytest.fixture(scope="session")
def task_functions(template: Template, saga: StateMachine) -> dict[str, str]:
    """Task state name -> logical id of the Lambda function it invokes (through its substitution)."""
    mapping: dict[str, str] = {}
    for name, state in saga.tasks():
        target = (state.get("Parameters") or {}).get("FunctionName", state.get("Resource", ""))
        found = SUBSTITUTION.fullmatch(str(target))
        if not found:
            continue
        function = referenced_resource(saga.substitutions.get(found.group(1)))
        if function in template.functions:
            mapping[name] = function
    return mapping
