"""Shared fixtures. AWS is moto (in-process), the claims table is built from template.yaml."""

from __future__ import annotations

import copy
import os
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
import pytest
from moto import mock_aws
from moto.kms import models as moto_kms
from moto.kms import utils as moto_kms_utils

from saga_local.aws.moto_adapter import SFN_CONFIG
from saga_local.aws.stack import REGION, table_request
from saga_local.template import load_template
from tests.helpers import FakeClock

if TYPE_CHECKING:
    from collections.abc import Iterator

    from botocore.loaders import Loader

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


@pytest.fixture(scope="session", autouse=True)
def kms_symmetric_keys_share_their_unused_rsa_key() -> Iterator[None]:
    """moto makes an RSA key pair for every KMS key, symmetric ones too, and uses it only to sign and
    verify, which a symmetric key never does. A table encrypted at rest (the claims table) makes
    DynamoDB's default key afresh in every test, and the RSA key was most of a table's set-up: the
    symmetric keys share one, every other key spec gets its own as before."""
    generate = moto_kms_utils.generate_private_key
    shared = generate("SYMMETRIC_DEFAULT")

    def private_key(key_spec: str) -> Any:
        return shared if key_spec == "SYMMETRIC_DEFAULT" else generate(key_spec)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(moto_kms, "generate_private_key", private_key)
        yield


@pytest.fixture(scope="session")
def botocore_loader() -> Loader:
    """botocore's loader of service models, shared by the session's tests: it only reads files and
    caches what it read, and loading a service's models again is most of a new client's cost."""
    loader: Loader = botocore.session.get_session().get_component("data_loader")
    return loader


@pytest.fixture
def aws(botocore_loader: Loader) -> Iterator[None]:
    """moto for every AWS call in the test, Step Functions executing state machines."""
    with mock_aws(config=SFN_CONFIG):
        # moto gives each test a new default boto3 session, so that no test sees the event hooks
        # another registered; it is given one here that reads the models through the shared loader
        # (a client then takes milliseconds, not a tenth of a second), its hooks still its own.
        core = botocore.session.get_session()
        core.register_component("data_loader", botocore_loader)
        boto3.DEFAULT_SESSION = boto3.Session(botocore_session=core)
        # boto3 adds its own data folder to the loader's search path with every session: keep one.
        botocore_loader.search_paths[:] = list(dict.fromkeys(botocore_loader.search_paths))
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
