"""Compatibility: the emulator moved to :mod:`saga_local.stripe_emulator` (one module per concern).

Kept so that existing imports (``from saga_local.provider_emulator import ProviderEmulator``) and
``python -m saga_local.provider_emulator`` keep working; new code imports the package.
"""

from __future__ import annotations

from saga_local.stripe_emulator import (
    API_KEY_PREFIX,
    API_KEY_PREFIXES,
    ENDPOINTS,
    FAULT_KINDS,
    FORCEABLE_STATUSES,
    IDEMPOTENCY_TTL_SECONDS,
    MAX_AMOUNT,
    OTHER_TEST_CUSTOMER,
    SAVED_PAYMENT_METHOD,
    STRIPE_VERSION,
    TEST_CUSTOMER,
    Endpoint,
    FailureRate,
    FaultKind,
    LedgerEntry,
    Permission,
    ProviderEmulator,
    ProviderFault,
)
from saga_local.stripe_emulator.__main__ import main

__all__ = [
    "API_KEY_PREFIX",
    "API_KEY_PREFIXES",
    "ENDPOINTS",
    "FAULT_KINDS",
    "FORCEABLE_STATUSES",
    "IDEMPOTENCY_TTL_SECONDS",
    "MAX_AMOUNT",
    "OTHER_TEST_CUSTOMER",
    "SAVED_PAYMENT_METHOD",
    "STRIPE_VERSION",
    "TEST_CUSTOMER",
    "Endpoint",
    "FailureRate",
    "FaultKind",
    "LedgerEntry",
    "Permission",
    "ProviderEmulator",
    "ProviderFault",
    "main",
]

if __name__ == "__main__":
    main()
