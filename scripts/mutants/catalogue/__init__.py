"""Every mutant, file by file (claims.py, payments.py, the charge and release handlers, the ASL)."""

from __future__ import annotations

from model import Mutant

from catalogue.asl import ASL
from catalogue.claims import CLAIMS
from catalogue.handlers import CHARGE, CLAIM, PROOF, RELEASE
from catalogue.payments import PAYMENTS

ALL: tuple[Mutant, ...] = tuple(
    mutant for c in (CLAIMS, PROOF, CHARGE, RELEASE, CLAIM, PAYMENTS, ASL) for mutant in c.mutants
)
