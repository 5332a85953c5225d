"""The real ASL executed by moto's Step Functions, the real handlers in-process, a Stripe emulator.

Everything a test of the state machine needs comes from ``template.yaml`` through
``saga_local.stack.provision``: no second list of resources to drift from what is deployed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import boto3
import pytest

from saga_local.driver import Driver
from saga_local.faults import FaultPlan
from saga_local.lambda_runtime import InProcessRuntime
from saga_local.moto_adapter import EngineHooks, patched_moto
from saga_local.provider_emulator import ProviderEmulator
from saga_local.stack import LOCAL_API_KEY, REGION, Stack, provision

if TYPE_CHECKING:
    from collections.abc import Iterator


class Saga:
    """One provisioned stack, its runtime and provider, and a driver."""

    def __init__(
        self, stack: Stack, runtime: InProcessRuntime, provider: ProviderEmulator, hooks: EngineHooks
    ) -> None:
        self.stack = stack
        self.runtime = runtime
        self.provider = provider
        self.hooks = hooks
        self.faults: FaultPlan = runtime.faults
        self.driver = Driver(lambda service: boto3.client(service, region_name=REGION), stack)

    def charges(self, order_id: str) -> int:
        return len(self.provider.charges_for(order_id))

    def invocations(self, function: str | None = None, order_id: str | None = None) -> int:
        return sum(
            1
            for r in self.runtime.records
            if (function is None or r.function == function) and (order_id is None or r.order_id == order_id)
        )


def order(order_id: str = "ORDER-003", **overrides: Any) -> dict[str, Any]:
    """The seed-000 order (150.00 BRL) unless told otherwise."""
    return {
        "orderId": order_id,
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_123",
        "paymentMethod": "pm_card_visa",
        **overrides,
    }


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
        runtime = InProcessRuntime(stack.functions)
        with patched_moto(runtime) as hooks:
            yield Saga(stack, runtime, provider, hooks)
