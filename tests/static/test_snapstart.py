"""SnapStart: a parameter, off by default, and every caller on the alias that can use it.

Lambda restores from a snapshot only a published version, or an alias that points at one: "You can use
SnapStart only on published function versions and aliases that point to versions. You can't use SnapStart
on a function's unpublished version ($LATEST)" (https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html).
Nothing local shows it (neither moto nor LocalStack restores from a snapshot), so these tests read what SAM's
transform makes of template.yaml (what ``sam deploy`` sends CloudFormation): a caller left on ``$LATEST``
would deploy and work, and silently never use the snapshot.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import pytest

from saga_local.aws.iam import as_list, role_statements, sam_transform
from saga_local.template import Resolver, parameter_defaults
from saga_local.template import load_template as read_template

SECRET = "arn:aws:secretsmanager:eu-central-1:123456789012:secret:payment-saga/stripe-api-key-AbC123"
WEBHOOK_SECRET = "arn:aws:secretsmanager:eu-central-1:123456789012:secret:payment-saga/stripe-webhook-DeF456"
STREAM = "arn:aws:dynamodb:eu-central-1:123456789012:table/{table}/stream/2026-01-01T00:00:00.000"
REQUIRED = {"PaymentApiKeySecretArn": SECRET, "WebhookSigningSecretArn": WEBHOOK_SECRET}
#: Another valid value for each parameter whose default cannot simply be changed by a number or an
#: AllowedValues entry.
OTHER_VALUES = {
    "PaymentApiBase": "https://api.stripe.com",
    "PaymentApiKeySecretArn": SECRET.replace("AbC123", "XyZ789"),
    "ExistingClaimsTableStreamArn": STREAM.format(table="payment-saga-ClaimsTable-1A2B3C4D5E6F"),
}
#: Lambda refuses a version description longer than this (AWS::Lambda::Version Description, Maximum 256).
DESCRIPTION_LIMIT = 256
#: The webhook receiver stays on $LATEST: its function URL would move with an alias (docs/deploy.md).
UNQUALIFIED = {"WebhookReceiverFunction"}


@functools.cache
def _template() -> dict[str, Any]:
    return read_template()


def load_template() -> dict[str, Any]:
    """template.yaml with operations.yaml inlined (read once; a copy each time)."""
    return copy.deepcopy(_template())


def deployed(**parameters: str) -> dict[str, Any]:
    """The transformed template's resources, for these parameter values over the defaults."""
    template = load_template()
    values = {**parameter_defaults(template), **REQUIRED, **parameters}
    resources: dict[str, Any] = sam_transform(template, values)["Resources"]
    return resources


def resolver(**parameters: str) -> Resolver:
    template = load_template()
    values = {**parameter_defaults(template), **REQUIRED, **parameters}
    return Resolver(parameters=values, conditions=template["Conditions"])


@pytest.fixture(scope="module")
def default_deploy() -> dict[str, Any]:
    return deployed()


def of_type(resources: dict[str, Any], type_name: str) -> dict[str, Any]:
    return {name: r for name, r in resources.items() if r["Type"] == type_name}


def alias_of(resources: dict[str, Any], value: Any) -> str | None:
    """The logical id of the ``AWS::Lambda::Alias`` whose ARN ``value`` is, else None: a ``Ref`` to it,
    or its function's ARN and its name (``!Sub "${X.Arn}:live"``)."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    aliases = of_type(resources, "AWS::Lambda::Alias")
    if "Ref" in value:
        return str(value["Ref"]) if value["Ref"] in aliases else None
    found = re.fullmatch(r"\$\{(\w+)\.Arn\}:(\w+)", str(value.get("Fn::Sub", "")))
    if not found:
        return None
    function, name = found.groups()
    matches = [
        logical
        for logical, alias in aliases.items()
        if alias["Properties"]["FunctionName"] == {"Ref": function} and alias["Properties"]["Name"] == name
    ]
    return matches[0] if matches else None


def is_alias(resources: dict[str, Any], value: Any) -> bool:
    return alias_of(resources, value) is not None


def dependencies(resources: dict[str, Any], logical_id: str) -> set[str]:
    """Every resource CloudFormation creates or updates before ``logical_id``: by ``DependsOn``, ``Ref``,
    ``GetAtt`` or ``Sub``, transitively."""
    found: set[str] = set()
    pending = [logical_id]
    while pending:
        resource = resources[pending.pop()]
        text = json.dumps(resource.get("Properties", {}))
        names = set(as_list(resource.get("DependsOn", [])))
        names |= set(re.findall(r'"Ref": "(\w+)"', text))
        names |= set(re.findall(r'"Fn::GetAtt": \["(\w+)"', text))
        names |= set(re.findall(r"\$\{(\w+)[.}]", text))
        for name in (names & set(resources)) - found:
            found.add(name)
            pending.append(name)
    return found


def names_a_function(resources: dict[str, Any], value: Any) -> bool:
    """``value`` is a ``Ref`` or ``GetAtt`` of an ``AWS::Lambda::Function`` ($LATEST, unqualified)."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((key, arg),) = value.items()
    logical = arg if key == "Ref" else arg[0] if key == "Fn::GetAtt" else None
    return isinstance(logical, str) and resources.get(logical, {}).get("Type") == "AWS::Lambda::Function"


def test_snapstart_is_a_parameter_that_defaults_to_off() -> None:
    parameter = load_template()["Parameters"]["SnapStart"]
    assert parameter["Default"] == "off"
    assert sorted(parameter["AllowedValues"]) == ["off", "on"]


@pytest.mark.parametrize(("value", "expected"), [("off", "None"), ("on", "PublishedVersions")])
def test_the_parameter_alone_decides_whether_snapshots_are_taken(value: str, expected: str) -> None:
    """Off: no function takes a snapshot (none is paid for). On: every function behind an alias does;
    the webhook receiver, on $LATEST, never could."""
    resources = deployed(SnapStart=value)
    applied = {
        name: resolver(SnapStart=value).resolve(
            function["Properties"].get("SnapStart", {}).get("ApplyOn", "None")
        )
        for name, function in of_type(resources, "AWS::Lambda::Function").items()
    }
    assert applied, "no function"
    for name, apply_on in applied.items():
        assert apply_on == ("None" if name in UNQUALIFIED else expected), name


def test_every_function_but_the_receiver_runs_behind_an_alias(default_deploy: dict[str, Any]) -> None:
    aliased = {
        a["Properties"]["FunctionName"]["Ref"] for a in of_type(default_deploy, "AWS::Lambda::Alias").values()
    }
    functions = set(of_type(default_deploy, "AWS::Lambda::Function"))
    assert aliased == functions - UNQUALIFIED


def test_every_task_of_the_state_machine_invokes_an_alias(default_deploy: dict[str, Any]) -> None:
    ((machine_id, machine),) = of_type(default_deploy, "AWS::StepFunctions::StateMachine").items()
    substitutions = machine["Properties"]["DefinitionSubstitutions"]
    functions = {key: value for key, value in substitutions.items() if key.endswith("FunctionArn")}
    assert len(functions) == 4, substitutions
    for key, value in substitutions.items():
        assert not names_a_function(default_deploy, value), f"{key} invokes $LATEST"
    for key, value in functions.items():
        alias = alias_of(default_deploy, value)
        assert alias is not None, f"{key} is not an alias: {value}"
        # On the update that first makes the aliases, the state machine must not invoke them before.
        assert alias in dependencies(default_deploy, machine_id), f"the state machine may precede {alias}"


def test_every_invoke_permission_is_on_an_alias(default_deploy: dict[str, Any]) -> None:
    """Every role's lambda:InvokeFunction (the state machine's, the schedules'), and every event source.

    The state machine's role also keeps each step's function unqualified, beside its alias: Step
    Functions runs an execution, and redrives it, on the definition it started with
    (https://docs.aws.amazon.com/step-functions/latest/dg/redrive-executions.html), so an execution
    started before the update that made the aliases invokes $LATEST until it ends. Nothing else may."""
    granted = 0
    for name, role in of_type(default_deploy, "AWS::IAM::Role").items():
        for _, statement in role_statements(role):
            if "lambda:InvokeFunction" in as_list(statement.get("Action", [])):
                resources = as_list(statement["Resource"])
                aliases = [resource for resource in resources if is_alias(default_deploy, resource)]
                assert len(aliases) == 1, f"{name} invokes {resources}"
                granted += 1
                latest = [resource for resource in resources if resource not in aliases]
                if latest:
                    assert name == "PaymentSagaStateMachineRole", f"{name} invokes {latest}"
                    (function,) = latest
                    assert names_a_function(default_deploy, function), function
                    alias = default_deploy[alias_of(default_deploy, aliases[0]) or ""]
                    assert alias["Properties"]["FunctionName"]["Ref"] == function["Fn::GetAtt"][0]
    assert granted >= 6, "the four steps and the sweeper's two schedules"
    for name, mapping in of_type(default_deploy, "AWS::Lambda::EventSourceMapping").items():
        assert is_alias(default_deploy, mapping["Properties"]["FunctionName"]), name
    for name, schedule in of_type(default_deploy, "AWS::Scheduler::Schedule").items():
        assert is_alias(default_deploy, schedule["Properties"]["Target"]["Arn"]), name
    for name, config in of_type(default_deploy, "AWS::Lambda::EventInvokeConfig").items():
        assert config["Properties"]["Qualifier"] == "live", name


def test_only_the_receivers_url_stays_on_latest(default_deploy: dict[str, Any]) -> None:
    """Its URL is the Stripe webhook endpoint: one that moved to an alias would leave the endpoint on a
    deleted URL after an upgrade (docs/deploy.md)."""
    urls = of_type(default_deploy, "AWS::Lambda::Url")
    assert {url["Properties"]["TargetFunctionArn"]["Ref"] for url in urls.values()} == UNQUALIFIED
    assert all("Qualifier" not in url["Properties"] for url in urls.values())


def read_parameters(value: Any, parameters: set[str]) -> set[str]:
    """The template parameters ``value`` reads, by ``!Ref`` or inside a ``!Sub``."""
    if isinstance(value, list):
        return set().union(*(read_parameters(item, parameters) for item in value)) if value else set()
    if not isinstance(value, dict):
        return set()
    found: set[str] = set()
    for key, arg in value.items():
        if key == "Ref" and arg in parameters:
            found.add(arg)
        elif key == "Fn::Sub":
            text = arg if isinstance(arg, str) else arg[0]
            found |= set(re.findall(r"\$\{([^}!.]+)\}", text)) & parameters
            found |= read_parameters(arg[1:] if isinstance(arg, list) else [], parameters)
        else:
            found |= read_parameters(arg, parameters)
    return found


def another_value(name: str, spec: dict[str, Any]) -> str:
    if name in OTHER_VALUES:
        return OTHER_VALUES[name]
    if "AllowedValues" in spec:
        return next(str(v) for v in spec["AllowedValues"] if str(v) != str(spec["Default"]))
    assert spec["Type"] == "Number", f"{name}: give it another value in OTHER_VALUES"
    return str(int(spec["Default"]) + 1)


def aliased_functions() -> list[str]:
    template = load_template()
    return sorted(
        name
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function" and "AutoPublishAlias" in resource["Properties"]
    )


@pytest.mark.parametrize("function", aliased_functions())
def test_a_parameter_change_publishes_a_new_version(function: str, default_deploy: dict[str, Any]) -> None:
    """SAM names a version by a hash of the template's text, not of parameter values: a deploy that only
    changes a parameter would leave the alias on a version with the old environment (a rotated secret's
    old ARN, the old mode, the old lease) and, with SnapStart turned on, without a snapshot. The version's
    Description holds each parameter the function reads; CloudFormation replaces a version whose
    Description changed (AWS::Lambda::Version, Description: "Update requires: Replacement"), which
    publishes a new one and moves the alias to it."""
    template = load_template()
    parameters = template["Parameters"]
    properties = {k: v for k, v in template["Resources"][function]["Properties"].items() if k != "Events"}
    reads = read_parameters([template["Globals"]["Function"], properties], set(parameters)) | {"SnapStart"}
    (version,) = (
        r
        for r in of_type(default_deploy, "AWS::Lambda::Version").values()
        if r["Properties"]["FunctionName"] == {"Ref": function}
    )
    description = version["Properties"]["Description"]
    before = resolver().resolve(description)
    for name in sorted(reads):
        after = resolver(**{name: another_value(name, parameters[name])}).resolve(description)
        assert after != before, f"{function}: a change of {name} publishes no new version"


@pytest.mark.parametrize("function", aliased_functions())
def test_the_version_description_fits_with_long_names(function: str, default_deploy: dict[str, Any]) -> None:
    """A description over 256 characters fails the deploy: room for a 60-character table and secret name."""
    (version,) = (
        r
        for r in of_type(default_deploy, "AWS::Lambda::Version").values()
        if r["Properties"]["FunctionName"] == {"Ref": function}
    )
    long_name = "n" * 53
    values = {
        "PaymentApiBase": "https://api.stripe.com/",
        "PaymentApiKeySecretArn": SECRET.replace("payment-saga/stripe-api-key", long_name),
        "ExistingClaimsTableStreamArn": STREAM.format(table="t" * 60),
        "LogLevel": "WARNING",
        "SnapStart": "off",
    }
    text = str(resolver(**values).resolve(version["Properties"]["Description"]))
    assert len(text) <= DESCRIPTION_LIMIT, (function, len(text))
