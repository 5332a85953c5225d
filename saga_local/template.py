"""Read ``template.yaml`` so the local stack and the tests build exactly what ``sam deploy`` ships.

There is no second, hand-written list of resources: queues, the claims table, the functions (their
handlers, timeouts and environments) and the state machine definition all come from the template,
with ``!Ref``, ``!GetAtt`` and ``!Sub`` resolved to the local resources' physical ids.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import saga_local

#: The checkout: the folder that holds the saga_local package (found from the package, not from this
#: module's own depth, so the module can move between saga_local's floors).
ROOT = Path(saga_local.__file__).resolve().parents[1]
TEMPLATE_PATH = ROOT / "template.yaml"
#: Pseudo parameters that have one value wherever the local stack runs (the ``aws`` partition).
LOCAL_PSEUDO = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com"}


class _CfnLoader(yaml.SafeLoader):
    """A YAML loader that understands CloudFormation's short-form tags."""


def _tag(name: str) -> Any:
    def construct(loader: _CfnLoader, node: yaml.Node) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
            if name == "Fn::GetAtt":
                value = value.split(".", 1)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
        return {name: value}

    return construct


for _short, _long in {
    "Ref": "Ref",
    "GetAtt": "Fn::GetAtt",
    "Sub": "Fn::Sub",
    "Join": "Fn::Join",
    "If": "Fn::If",
    "Equals": "Fn::Equals",
    "Not": "Fn::Not",
    "Select": "Fn::Select",
    "Split": "Fn::Split",
    "GetAZs": "Fn::GetAZs",
    "ImportValue": "Fn::ImportValue",
    "FindInMap": "Fn::FindInMap",
    "Condition": "Condition",
}.items():
    _CfnLoader.add_constructor(f"!{_short}", _tag(_long))


def load_template(path: Path = TEMPLATE_PATH, *, nested: bool = True) -> dict[str, Any]:
    """The template as plain data, tags turned into their long form (``{"Ref": ...}``).

    With ``nested`` (the default), what the stack deploys as one: each nested application whose
    ``Location`` is a local template (the operations, ``operations.yaml``) read in by
    ``inline_applications``. ``nested=False`` reads the one file."""
    data = parse_template(path.read_text(encoding="utf-8"))
    return inline_applications(data, path.parent) if nested else data


def parse_template(text: str) -> dict[str, Any]:
    """A template's text as plain data, tags turned into their long form (``{"Ref": ...}``)."""
    data: dict[str, Any] = yaml.load(text, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    return data


def local_applications(template: dict[str, Any]) -> dict[str, str]:
    """Logical id -> the local template (a path relative to the parent) of each nested application that
    ``sam build`` and ``sam deploy`` package from this checkout (not one of the Serverless Application
    Repository's, nor an S3 URL)."""
    found = {}
    for logical_id, resource in template["Resources"].items():
        location = (resource.get("Properties") or {}).get("Location")
        local = isinstance(location, str) and not location.startswith(("s3://", "https://"))
        if resource["Type"] == "AWS::Serverless::Application" and local:
            found[logical_id] = str(location)
    return found


def inline_applications(parent: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``parent`` with each local nested application in place of its resource, as if written there.

    The child's resources and conditions join the parent's; each of its parameters is replaced by what
    the parent passes (``!Ref StartExecutionFunction``, ``!GetAtt OrdersQueue.QueueName``, ``!Ref
    AWS::StackName``...), in ``!Ref`` and inside ``!Sub``; the parent's ``!GetAtt App.Outputs.X`` by the
    child's output ``X``. What the local stack runs and what the static tests check is therefore the
    whole deployment, and a parameter the parent passes wrong reads wrong here too. A logical id both
    define is refused: CloudFormation would keep both, this view could not."""
    merged: dict[str, Any] = json.loads(json.dumps(parent))
    outputs: dict[str, dict[str, Any]] = {}
    for logical_id, location in local_applications(parent).items():
        child = parse_template((folder / location).read_text(encoding="utf-8"))
        passed = dict(parent["Resources"][logical_id]["Properties"].get("Parameters") or {})
        for name, spec in (child.get("Parameters") or {}).items():
            if name not in passed:
                if "Default" not in spec:
                    raise ValueError(
                        f"{location}: parameter {name} is neither passed by {logical_id} nor defaulted"
                    )
                passed[name] = spec["Default"]
        unknown = set(passed) - set(child.get("Parameters") or {})
        if unknown:
            raise ValueError(f"{logical_id} passes {sorted(unknown)}, which {location} does not declare")
        del merged["Resources"][logical_id]
        for section in ("Conditions", "Resources"):
            for name, value in (child.get(section) or {}).items():
                if name in (merged.get(section) or {}):
                    raise ValueError(f"{location}: {section} {name} is the parent's too")
                merged.setdefault(section, {})[name] = _with_parameters(value, passed)
        outputs[logical_id] = {
            name: _with_parameters(output["Value"], passed)
            for name, output in (child.get("Outputs") or {}).items()
        }
    if outputs:
        merged = _with_outputs(merged, outputs)
    return merged


def _with_parameters(value: Any, passed: dict[str, Any]) -> Any:
    """``value`` with every reference to a parameter in ``passed`` replaced by what is passed."""
    if isinstance(value, list):
        return [_with_parameters(item, passed) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref" and arg in passed:
            return json.loads(json.dumps(passed[arg]))
        if key == "Fn::Sub":
            return _sub_with_parameters(arg, passed)
    return {key: _with_parameters(item, passed) for key, item in value.items()}


def _sub_with_parameters(arg: Any, passed: dict[str, Any]) -> dict[str, Any]:
    """A ``!Sub`` whose ``${Parameter}`` read what the parent passes: ``${Resource}`` for a ``!Ref``,
    ``${Resource.Attribute}`` for a ``!GetAtt``, the text of a literal, a variable of the ``!Sub`` else."""
    text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], dict(arg[1]))
    variables = {name: _with_parameters(item, passed) for name, item in variables.items()}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in variables or name not in passed:
            return match.group(0)
        value = passed[name]
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, dict) and set(value) == {"Ref"}:
            return "${" + str(value["Ref"]) + "}"
        if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
            logical, attribute = value["Fn::GetAtt"]
            return "${" + f"{logical}.{attribute}" + "}"
        variables[name] = value
        return match.group(0)

    text = re.sub(r"\$\{([^}!.][^}.]*)\}", replace, text)
    return {"Fn::Sub": [text, variables] if variables else text}


def _with_outputs(value: Any, outputs: dict[str, dict[str, Any]]) -> Any:
    """``value`` with every ``!GetAtt App.Outputs.X`` of an inlined application replaced by its output."""
    if isinstance(value, list):
        return [_with_outputs(item, outputs) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Fn::GetAtt"}:
        logical, attribute = value["Fn::GetAtt"]
        if logical in outputs and attribute.startswith("Outputs."):
            return outputs[logical][attribute.removeprefix("Outputs.")]
    return {key: _with_outputs(item, outputs) for key, item in value.items()}


#: What ``!Ref AWS::NoValue`` resolves to: the item or property it stands for is left out.
_NO_VALUE: Any = object()


@dataclass
class Resolver:
    """Resolves intrinsic functions against the physical ids of resources that exist locally.

    ``refs`` maps a logical id to what ``!Ref`` gives; ``attrs`` maps ``(logical id, attribute)``
    to what ``!GetAtt`` gives; ``parameters`` holds parameter values (defaults filled in).
    """

    refs: dict[str, str] = field(default_factory=dict)
    attrs: dict[tuple[str, str], str] = field(default_factory=dict)
    parameters: dict[str, str] = field(default_factory=dict)
    pseudo: dict[str, str] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)

    def condition(self, name: str) -> bool:
        """Evaluate a template condition (``Fn::Equals``/``Not``/``And``/``Or``/``Condition``)."""
        return self._truth(self.conditions[name])

    def _truth(self, expr: Any) -> bool:
        ((key, arg),) = expr.items()
        if key == "Fn::Equals":
            left, right = (self.resolve(a) for a in arg)
            return bool(left == right)
        if key == "Fn::Not":
            return not self._truth(arg[0])
        if key == "Fn::And":
            return all(self._truth(a) for a in arg)
        if key == "Fn::Or":
            return any(self._truth(a) for a in arg)
        if key == "Condition":
            return self.condition(arg)
        raise ValueError(f"unsupported condition {key}")

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            # AWS::NoValue (usually chosen by an Fn::If) removes the item, as CloudFormation does.
            return [item for item in (self.resolve(v) for v in value) if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref" and arg == "AWS::NoValue":
                return _NO_VALUE
            if key == "Ref":
                return self._ref(arg)
            if key == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                try:
                    return self.attrs[(logical, attribute)]
                except KeyError:
                    raise KeyError(f"!GetAtt {logical}.{attribute} has no local value") from None
            if key == "Fn::Sub":
                return self._sub(arg)
            if key == "Fn::If":
                name, if_true, if_false = arg
                return self.resolve(if_true if self.condition(name) else if_false)
            if key == "Fn::Join":
                sep, parts = arg
                # Resolved as a list: an AWS::NoValue item is left out, as CloudFormation leaves it out.
                return sep.join(str(p) for p in self.resolve(parts))
            if key == "Fn::Split":
                sep, text = arg
                return str(self.resolve(text)).split(sep)
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items)[int(index)]
        resolved = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    def _ref(self, name: str) -> str:
        for table in (self.parameters, self.refs, self.pseudo, LOCAL_PSEUDO):
            if name in table:
                return table[name]
        raise KeyError(f"!Ref {name} has no local value")

    def _sub(self, arg: Any) -> str:
        text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in extra:
                return str(self.resolve(extra[name]))
            if "." in name:
                logical, attribute = name.split(".", 1)
                return self.attrs[(logical, attribute)]
            return str(self._ref(name))

        return re.sub(r"\$\{([^}!][^}]*)\}", replace, text)


@dataclass(frozen=True)
class FunctionSpec:
    """One ``AWS::Serverless::Function`` with Globals applied (what Lambda would run)."""

    logical_id: str
    handler: str
    timeout: int
    memory_mb: int
    environment: dict[str, Any]
    events: dict[str, Any]
    code_uri: str
    #: Whether the function has a function URL (``FunctionUrlConfig``).
    function_url: bool = False
    #: The alias each deploy moves to the version it publishes (``AutoPublishAlias``), if any.
    alias: str | None = None


def parameter_defaults(template: dict[str, Any]) -> dict[str, str]:
    return {
        name: str(spec["Default"])
        for name, spec in template.get("Parameters", {}).items()
        if "Default" in spec
    }


def validate_parameters(template: dict[str, Any], values: dict[str, str]) -> None:
    """Refuse parameter values CloudFormation would refuse: ``AllowedPattern`` (the whole value must
    match), ``AllowedValues``, and ``MinValue``/``MaxValue`` for numbers. Raises ``ValueError``."""
    for name, spec in template.get("Parameters", {}).items():
        if name not in values:
            continue
        value = str(values[name])
        pattern = spec.get("AllowedPattern")
        if pattern is not None and not re.fullmatch(pattern, value):
            why = spec.get("ConstraintDescription", f"must match {pattern}")
            raise ValueError(f"parameter {name}={value!r}: {why}")
        allowed = spec.get("AllowedValues")
        if allowed is not None and value not in {str(option) for option in allowed}:
            raise ValueError(f"parameter {name}={value!r}: must be one of {allowed}")
        if spec.get("Type") == "Number":
            number = float(value)
            if "MinValue" in spec and number < float(spec["MinValue"]):
                raise ValueError(f"parameter {name}={value}: below its MinValue {spec['MinValue']}")
            if "MaxValue" in spec and number > float(spec["MaxValue"]):
                raise ValueError(f"parameter {name}={value}: above its MaxValue {spec['MaxValue']}")


def functions(template: dict[str, Any]) -> dict[str, FunctionSpec]:
    """Every serverless function, keyed by logical id, Globals merged in."""
    glob = template.get("Globals", {}).get("Function", {})
    global_env = glob.get("Environment", {}).get("Variables", {})
    specs = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        props = resource["Properties"]
        env = {**global_env, **props.get("Environment", {}).get("Variables", {})}
        specs[logical_id] = FunctionSpec(
            logical_id=logical_id,
            handler=props.get("Handler", glob.get("Handler")),
            timeout=int(props.get("Timeout", glob.get("Timeout", 3))),
            memory_mb=int(props.get("MemorySize", glob.get("MemorySize", 128))),
            environment=env,
            events=props.get("Events", {}),
            code_uri=props.get("CodeUri", glob.get("CodeUri", ".")),
            function_url="FunctionUrlConfig" in props,
            alias=props.get("AutoPublishAlias", glob.get("AutoPublishAlias")),
        )
    return specs


def resources_of_type(template: dict[str, Any], type_name: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_name}


def state_machine_definition(template: dict[str, Any], logical_id: str, resolver: Resolver) -> str:
    """The ASL with its ``DefinitionSubstitutions`` applied, as Step Functions would receive it."""
    props = template["Resources"][logical_id]["Properties"]
    # A local path, which sam build / sam package upload to S3 and replace with the object's location.
    text: str = (ROOT / props["DefinitionS3Location"]).read_text(encoding="utf-8")
    for key, value in props.get("DefinitionSubstitutions", {}).items():
        text = text.replace("${" + key + "}", str(resolver.resolve(value)))
    leftover = re.findall(r"\$\{[^}]+\}", text)
    if leftover:
        raise ValueError(f"unresolved substitutions in {props['DefinitionS3Location']}: {leftover}")
    json.loads(text)  # fail here, not inside the engine
    return text
