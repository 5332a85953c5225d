"""The local Step Functions engine (moto's interpreter, patched by ``saga_local.aws.moto_adapter``).

The statemachine tests run the saga's own definition on this engine; the tests here pin the rules of
it the saga relies on to what AWS documents, so an engine that drifts from AWS fails here first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from saga_local.aws.moto_adapter import patched_moto
from tests.conformance.engine import Engine, StandIns

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def engine(aws: None) -> Iterator[Engine]:
    stand_ins = StandIns()
    with patched_moto(stand_ins) as hooks:
        yield Engine(stand_ins, hooks)
