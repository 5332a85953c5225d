"""The provider's key is read from its secret in the region the secret's ARN names (moto).

A deployment in a second region keeps using the first region's secret: a client of the function's
own region would answer ResourceNotFoundException and no order could be charged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest

from handlers import runtime as handler_runtime

KEY = "sk_test_not_a_real_key_for_region_checks"


@pytest.fixture
def fresh_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("PAYMENT_API_KEY", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # the function's own region
    handler_runtime.reset()
    yield
    handler_runtime.reset()


def test_the_key_is_read_in_the_secrets_region_not_the_functions(
    aws: None, fresh_runtime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = boto3.client("secretsmanager", region_name="eu-west-1").create_secret(
        Name="payment-saga/stripe", SecretString=json.dumps({"apiKey": KEY})
    )
    assert ":eu-west-1:" in secret["ARN"]
    monkeypatch.setenv("PAYMENT_API_KEY_SECRET_ARN", secret["ARN"])

    assert handler_runtime._api_key() == KEY


def test_the_same_secret_is_not_found_from_the_functions_region(aws: None) -> None:
    """Why it matters: the same ARN, asked of the function's region, is not there."""
    secret = boto3.client("secretsmanager", region_name="eu-west-1").create_secret(
        Name="payment-saga/stripe", SecretString=json.dumps({"apiKey": KEY})
    )
    local = boto3.client("secretsmanager", region_name="us-east-1")
    with pytest.raises(local.exceptions.ResourceNotFoundException):
        local.get_secret_value(SecretId=secret["ARN"])
