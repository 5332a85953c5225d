"""Fixtures for the local tooling's tests: the state machine's stack, reused (fixtures in
tests/statemachine/conftest.py are only visible under that directory)."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from payment_saga.claims import ClaimsStore
from payment_saga.payments import StripeProvider
from payment_saga.reconcile import reconcile
from saga_local.aws.stack import LOCAL_API_KEY, REGION
from saga_local.stack.embedded import EmbeddedStack
from tests.local.entry_point_support import serve_saga_up
from tests.statemachine.conftest import provider_dedupe, saga  # noqa: F401

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.helpers import Saga
    from tests.local.entry_point_support import Running

# -- the sweeper (functions/payment_saga/reconcile.py) ----------------------------------------------

#: The sweeper's default wait before it trusts "the provider's search found nothing".
SEARCH_GRACE_SECONDS = 3600


def lease_seconds(stack: Saga) -> int:
    """The claim lease the functions run with (``CLAIM_LEASE_SECONDS``, from template.yaml)."""
    for _, environment in stack.stack.functions.values():
        if "CLAIM_LEASE_SECONDS" in environment:
            return int(environment["CLAIM_LEASE_SECONDS"])
    raise LookupError("no function has CLAIM_LEASE_SECONDS")


def sweep(stack: Saga, *, now: float | None = None) -> Any:
    """Run the sweeper with ``apply=True`` at a time past every lease and the search grace."""
    lease = lease_seconds(stack)
    at = now if now is not None else time.time() + lease + SEARCH_GRACE_SECONDS + 1
    store = ClaimsStore(
        stack.stack.table_name,
        client=boto3.client("dynamodb", region_name=REGION),
        clock=lambda: at,
        lease_seconds=lease,
    )
    provider = StripeProvider(LOCAL_API_KEY, api_base=stack.provider.url)
    return reconcile(store, provider, now=at, apply=True)


@pytest.fixture
def stack() -> Iterator[EmbeddedStack]:
    """An embedded stack with in-process handlers, for tests that drive it as a user would."""
    environment = dict(os.environ)
    try:
        with EmbeddedStack(runtime="inprocess") as embedded:
            yield embedded
    finally:
        # The in-process runtime installs the functions' environment in this process: put ours back.
        os.environ.clear()
        os.environ.update(environment)


@pytest.fixture
def deployed(saga: Saga) -> str:  # noqa: F811 - requests the imported fixture
    """A CloudFormation stack whose outputs name the provisioned resources, as `sam deploy` leaves it."""
    outputs = saga.stack.outputs
    template = {
        "Resources": {"Anchor": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="payment-saga", TemplateBody=json.dumps(template)
    )
    return "payment-saga"


# -- one `saga up` for every test of the installed entry point (tests/local/entry_point_support.py) ----


@pytest.fixture(scope="session")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A `saga up` in the background, shared by the session: each start costs seconds to a minute."""
    yield from serve_saga_up(tmp_path_factory.mktemp("saga-up"))
