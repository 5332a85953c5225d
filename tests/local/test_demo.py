"""`make demo` (saga demo): the README's run command tells the seed-000 story as promised."""

from __future__ import annotations

import logging

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


def test_reading_the_roles_from_sam_s_transform_leaves_no_unpublished_metrics_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import gc

    from saga_local.aws.iam import sam_transform
    from saga_local.template import load_template, parameter_defaults

    template = load_template()
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:payment-saga/fake-AbC123"
    parameters = {
        **parameter_defaults(template),
        "PaymentApiKeySecretArn": secret,
        "WebhookSigningSecretArn": secret,
    }
    with caplog.at_level(logging.WARNING):
        # As the demo's second stack does: the second transform lets go of the first's metrics, which
        # warned when collected.
        sam_transform(template, parameters)
        sam_transform(template, parameters)
        gc.collect()

    assert "unpublished metrics" not in caplog.text
