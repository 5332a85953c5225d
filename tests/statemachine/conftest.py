"""The real ASL executed by moto's Step Functions, the real handlers in-process, a Stripe emulator.

Everything a test of the state machine needs comes from ``template.yaml`` through
``saga_local.aws.stack.provision``: no second list of resources to drift from what is deployed.
"""

from __future__ import annotations

import io
import logging
from typing import TYPE_CHECKING

import boto3
import pytest

from handlers import runtime as handler_runtime
from saga_local.aws.moto_adapter import patched_moto
from saga_local.aws.stack import LOCAL_API_KEY, REGION, provision
from saga_local.runtime.runtimes import InProcessRuntime
from saga_local.stripe_emulator import ProviderEmulator
from tests.helpers import Saga
from tests.network import Network
from tests.statemachine.observability_support import Captured

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def provider_dedupe() -> bool:
    """Override to ``False`` to prove what the claim alone prevents."""
    return True


@pytest.fixture
def saga(aws: None, provider_dedupe: bool) -> Iterator[Saga]:
    with ProviderEmulator(dedupe=provider_dedupe) as provider:
        stack = provision(
            lambda service: boto3.client(service, region_name=REGION),
            extra_environment={
                "PAYMENT_API_BASE": provider.url,
                "PAYMENT_API_KEY": LOCAL_API_KEY,
                "PAYMENT_API_TIMEOUT_SECONDS": "2",
                "POWERTOOLS_TRACE_DISABLED": "true",
            },
            visibility_timeout=1,
        )
        runtime = InProcessRuntime(stack.functions, iam=stack.iam)
        with patched_moto(runtime) as hooks:
            yield Saga(stack, runtime, provider, hooks)


@pytest.fixture
def network(saga: Saga) -> Iterator[Network]:
    """The handlers' claims store, behind a network that misbehaves on plan (``tests.network``)."""
    store = handler_runtime.claims_store()
    real = store._client
    network = Network(real)
    store._client = network  # type: ignore[assignment]
    yield network
    store._client = real


@pytest.fixture
def captured(capsys: pytest.CaptureFixture[str]) -> Iterator[Captured]:
    """Powertools' handler keeps the stdout it found at import: add one of ours, same formatter."""
    import handlers.runtime  # noqa: F401 - creates the service's logger

    logger = logging.getLogger("payment-saga")
    original = next(h for h in logger.handlers if isinstance(h, logging.StreamHandler))
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(original.formatter)
    logger.addHandler(handler)
    yield Captured(buffer, capsys)
    logger.removeHandler(handler)
