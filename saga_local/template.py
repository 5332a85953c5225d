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


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The template as plain data, tags turned into their long form (``{"Ref": ...}``)."""
    return parse_template(path.read_text(encoding="utf-8"))


def parse_template(text: str) -> dict[str, Any]:
    """A template's text as plain data, tags turned into their long form (``{"Ref": ...}``)."""
    data: dict[str, Any] = yaml.load(text, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    return data


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
