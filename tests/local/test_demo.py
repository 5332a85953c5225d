"""`make demo` (saga demo): the README's run command tells the seed-000 story as promised."""

from __future__ import annotations

import pytest

from saga_local import cli


def test_demo_shows_four_charges_without_the_claim_then_one_then_a_declined_card_released(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["demo"]) == 0

    out = capsys.readouterr().out
    assert "provider charges for ORDER-003: 4 -> 600.00 BRL billed for a 150.00 BRL order" in out
    assert "provider charges for ORDER-003: 1 -> 150.00 BRL billed for a 150.00 BRL order" in out
    assert "claim ORDER-004: status RELEASED (DECLINED), charges 0" in out
    assert "as promised" in out
