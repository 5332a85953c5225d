"""`saga invoke`'s environment: resolved as SAM CLI resolves it for `sam local invoke --env-vars`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from saga_local.stack.local_invoke import (
    InvokeError,
    credentials_for,
    function_environment,
    read_env_vars_file,
)
from saga_local.template import FunctionSpec

if TYPE_CHECKING:
    from pathlib import Path

SPEC = FunctionSpec(
    logical_id="ClaimOrderFunction",
    handler="handlers.claim_order.handler",
    timeout=10,
    memory_mb=256,
    environment={
        "CLAIMS_TABLE_NAME": {"Ref": "ClaimsTable"},
        "CLAIM_LEASE_SECONDS": {"Ref": "ClaimLeaseSeconds"},
        "POWERTOOLS_SERVICE_NAME": "payment-saga",
        "POWERTOOLS_METRICS_NAMESPACE": {"Fn::Sub": "PaymentSaga/${AWS::StackName}"},
        "AWS_ENDPOINT_URL": "",
    },
    events={},
    code_uri="functions/",
)


def resolve(overrides: dict[str, Any], shell_values: dict[str, str] | None = None) -> dict[str, str]:
    return function_environment(
        SPEC,
        overrides,
        defaults={"ClaimLeaseSeconds": "900"},
        shell=shell_values or {},
        region="us-east-1",
        credentials={"key": "local", "secret": "local"},
    )


def test_the_function_section_wins_over_parameters_which_win_over_the_template() -> None:
    environment = resolve(
        {
            "Parameters": {"CLAIMS_TABLE_NAME": "from-parameters", "POWERTOOLS_SERVICE_NAME": "p"},
            "ClaimOrderFunction": {"CLAIMS_TABLE_NAME": "from-function"},
        }
    )

    assert environment["CLAIMS_TABLE_NAME"] == "from-function"
    assert environment["POWERTOOLS_SERVICE_NAME"] == "p"
    assert environment["CLAIM_LEASE_SECONDS"] == "900"  # a parameter's default, as SAM resolves it


def test_a_variable_the_function_does_not_declare_is_not_set_whatever_the_file_says() -> None:
    environment = resolve({"ClaimOrderFunction": {"PAYMENT_API_KEY": "sk_test_not_declared"}})

    assert "PAYMENT_API_KEY" not in environment


def test_an_unresolvable_reference_is_blank_and_the_shell_overrides_the_template_but_not_the_file() -> None:
    environment = resolve(
        {"ClaimOrderFunction": {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}},
        shell_values={"CLAIMS_TABLE_NAME": "from-shell", "AWS_ENDPOINT_URL": "http://elsewhere"},
    )

    assert environment["CLAIMS_TABLE_NAME"] == "from-shell"
    assert environment["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5000"
    assert resolve({})["CLAIMS_TABLE_NAME"] == ""


def test_the_stacks_metrics_namespace_is_the_one_sam_local_gives_not_a_deployed_stacks() -> None:
    """Blank, Powertools would publish no metric at all; SAM CLI names the local stack ``local``."""
    assert resolve({})["POWERTOOLS_METRICS_NAMESPACE"] == "PaymentSaga/local"
    assert (
        resolve({"Parameters": {"POWERTOOLS_METRICS_NAMESPACE": "PaymentSaga/mine"}})[
            "POWERTOOLS_METRICS_NAMESPACE"
        ]
        == "PaymentSaga/mine"
    )


def test_lambda_s_own_variables_are_set_as_sam_sets_them() -> None:
    environment = resolve({})

    assert environment["AWS_LAMBDA_FUNCTION_NAME"] == "ClaimOrderFunction"
    assert environment["AWS_LAMBDA_FUNCTION_TIMEOUT"] == "10"
    assert environment["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    assert environment["AWS_SAM_LOCAL"] == "true"
    assert environment["AWS_REGION"] == environment["AWS_DEFAULT_REGION"] == "us-east-1"


def test_a_local_endpoint_gets_local_credentials_never_the_caller_s() -> None:
    assert credentials_for("http://127.0.0.1:4566") == {"key": "local", "secret": "local"}


def test_an_env_vars_file_in_the_wrong_shape_is_refused_in_words(tmp_path: Path) -> None:
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"CLAIMS_TABLE_NAME": "t"}))  # SAM wants {"Function": {...}}

    with pytest.raises(InvokeError, match="must look like"):
        read_env_vars_file(flat)
    with pytest.raises(InvokeError, match="cannot read"):
        read_env_vars_file(tmp_path / "absent.json")
