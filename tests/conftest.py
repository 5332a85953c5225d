"""Shared fixtures. AWS is moto (in-process), the claims table is built from template.yaml."""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from moto import mock_aws

from saga_local.aws.moto_adapter import SFN_CONFIG
from saga_local.aws.stack import REGION, table_request
from saga_local.template import load_template
from tests.helpers import FakeClock

if TYPE_CHECKING:
    from collections.abc import Iterator

# Never reach a real account from a test, whatever the developer's shell holds.
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
    os.environ.pop(_name, None)
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_SERVICE_NAME": "payment-saga",
        "POWERTOOLS_METRICS_NAMESPACE": "PaymentSaga/payment-saga",
    }
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def aws() -> Iterator[None]:
    """moto for every AWS call in the test, Step Functions executing state machines."""
    with mock_aws(config=SFN_CONFIG):
        yield


@pytest.fixture
def dynamodb(aws: None) -> Any:
    return boto3.client("dynamodb", region_name=REGION)


@pytest.fixture(scope="session")
def claims_table_properties() -> dict[str, Any]:
    """The claims table's properties in template.yaml, read once a session: parsing the template
    is most of a claims table's setup, and hundreds of tests make one."""
    properties: dict[str, Any] = load_template()["Resources"]["ClaimsTable"]["Properties"]
    return properties


@pytest.fixture
def claims_table(dynamodb: Any, claims_table_properties: dict[str, Any]) -> str:
    """The claims table exactly as template.yaml declares it (key, index, TTL)."""
    # A copy: the request shares the template's lists, and no test may change the next one's table.
    dynamodb.create_table(**table_request(copy.deepcopy(claims_table_properties), "claims"))
    return "claims"
