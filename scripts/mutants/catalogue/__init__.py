"""Every mutant, file by file (the claims package, payments.py, the charge and release handlers, the ASL,
the template's IAM grants, the sweeper, its Lambda, the outcome relay, the order message and the currency
table)."""

from __future__ import annotations

from model import Mutant

from catalogue.asl import ASL
from catalogue.claims import CLAIMS
from catalogue.currencies import CURRENCIES
from catalogue.handlers import CHARGE, CLAIM, CONSUMER, DOORBELL, PROOF, RELEASE
from catalogue.orders import ORDERS
from catalogue.outbox import (
    OUTCOMES,
    RECONCILE,
    RELAYING,
    RETENTION,
    RUNTIME,
    SWEEPER_HANDLER,
    SWEEPER_SAYS,
)
from catalogue.payments import API_KEYS, PAYMENTS
from catalogue.template import TEMPLATE_GRANTS

CATALOGUES = (
    *CLAIMS,
    PROOF,
    CHARGE,
    RELEASE,
    CLAIM,
    CONSUMER,
    DOORBELL,
    PAYMENTS,
    API_KEYS,
    ASL,
    TEMPLATE_GRANTS,
    RECONCILE,
    OUTCOMES,
    RELAYING,
    RETENTION,
    RUNTIME,
    SWEEPER_HANDLER,
    SWEEPER_SAYS,
    ORDERS,
    CURRENCIES,
)
ALL: tuple[Mutant, ...] = tuple(mutant for c in CATALOGUES for mutant in c.mutants)
