"""The saga command against a deployed stack (`--stack NAME` reads its CloudFormation outputs), on moto."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from saga_local import cli
from saga_local.aws.stack import REGION
from tests.helpers import Saga, failed_receives


def test_send_and_trace_against_a_deployed_stack(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["send", "--stack", deployed, "--region", REGION, "--copies", "2"]) == 0
    sent = capsys.readouterr().out
    names = [line.split("saga trace ")[1].strip() for line in sent.splitlines() if "saga trace " in line]
    assert len(names) == 2

    saga.driver.pump()
    assert saga.charges("ORDER-003") == 1
    assert cli.main(["trace", names[0], "--stack", deployed, "--region", REGION]) == 0
    trace = capsys.readouterr().out
    assert "Claim Order" in trace
    assert ("Mark Complete" in trace) or ("Duplicate Suppressed" in trace)


def test_send_rejects_a_missing_local_stack_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(cli, "STATE_FILE", tmp_path / "absent.json")

    with pytest.raises(SystemExit, match="saga up"):
        cli.main(["send"])


def test_send_builds_the_order_from_flags(saga: Saga, deployed: str) -> None:
    cli.main(
        [
            "send",
            "--stack",
            deployed,
            "--region",
            REGION,
            "--order-id",
            "ORDER-FLAGS",
            "--amount",
            "999",
            "--payment-method",
            "pm_card_chargeDeclined",
        ]
    )

    saga.driver.pump()

    claim = saga.driver.claim("ORDER-FLAGS")
    assert claim is not None
    assert (claim["releaseReason"], claim["amount"], claim["currency"]) == ("DECLINED", "999", "BRL")


def test_redrive_against_a_deployed_stack_charges_each_order_once(saga: Saga, deployed: str) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    # A dead-letter queue full of duplicates of one order, each moved there after its failed receives.
    body = {
        "orderId": "ORDER-DLQ",
        "amount": 500,
        "currency": "USD",
        "customerId": "c",
        "paymentMethod": "pm_card_visa",
    }
    failed_receives(sqs, saga.stack.dead_letter_queue_url, json.dumps(body), copies=3)

    assert cli.main(["redrive", "--stack", deployed, "--region", REGION]) == 0
    saga.driver.pump()

    assert saga.charges("ORDER-DLQ") == 1
    assert saga.driver.dead_letters() == []


def test_trace_of_an_unknown_execution_is_answered_in_words(
    saga: Saga, deployed: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from saga_local.aws import archive

    monkeypatch.setattr(archive, "ARCHIVE_DIR", tmp_path)
    saga.driver.send(
        json.dumps(
            {
                "orderId": "ORDER-KNOWN",
                "amount": 500,
                "currency": "USD",
                "customerId": "c",
                "paymentMethod": "pm_card_visa",
            }
        )
    )
    saga.driver.pump()

    with pytest.raises(SystemExit) as stopped:
        cli.main(["trace", "ORDER-NOPE", "--stack", deployed, "--region", REGION])

    message = str(stopped.value.code)
    assert "no execution named 'ORDER-NOPE'" in message
    assert "ORDER-KNOWN-" in message  # the latest executions, to paste instead


def test_trace_reads_an_execution_recorded_after_its_stack_is_gone(
    saga: Saga, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from saga_local.aws import archive

    saga.driver.send(
        json.dumps(
            {
                "orderId": "ORDER-REC",
                "amount": 500,
                "currency": "USD",
                "customerId": "c",
                "paymentMethod": "pm_card_chargeDeclined",
            }
        )
    )
    saga.driver.pump()
    (result,) = saga.driver.results()
    archive.record(archive.read_execution(saga.driver.sfn, result.arn), tmp_path)
    monkeypatch.setattr(archive, "ARCHIVE_DIR", tmp_path)
    monkeypatch.setattr(cli, "STATE_FILE", tmp_path / "no-stack-running.json")

    assert cli.main(["trace", result.name]) == 0

    out = capsys.readouterr().out
    assert "Claim Order" in out
    assert "Payment Declined" in out


def test_what_the_cli_records_under_its_state_directory_is_private_to_its_user(
    saga: Saga, tmp_path: Any
) -> None:
    """Recorded executions hold every order's payment method and customer, the SAM env-vars file the
    functions' configuration: 0600 files in 0700 directories, whatever the umask."""
    import os
    import stat

    from saga_local.aws import archive
    from saga_local.commands.invoke import write_sam_env_file

    saga.driver.send(order_body("ORDER-MODE"))
    saga.driver.pump()
    (result,) = saga.driver.results()
    previous = os.umask(0o022)  # the usual umask, which left them 0644
    try:
        recorded = archive.record(
            archive.read_execution(saga.driver.sfn, result.arn), tmp_path / "executions"
        )
        env_file = write_sam_env_file(saga.stack, "http://127.0.0.1:1", tmp_path / "state" / "sam-env.json")
    finally:
        os.umask(previous)

    for path in (recorded, env_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700, path.parent


def test_an_execution_name_that_is_not_one_is_never_made_a_path(saga: Saga, tmp_path: Any) -> None:
    from saga_local.aws import archive

    saga.driver.send(order_body("ORDER-NAME"))
    saga.driver.pump()
    (result,) = saga.driver.results()
    execution = archive.read_execution(saga.driver.sfn, result.arn)
    execution.description["name"] = "nested/elsewhere"

    with pytest.raises(ValueError, match="execution name"):
        archive.record(execution, tmp_path / "executions")
    assert list(tmp_path.rglob("*.json")) == []


def test_a_trace_page_shows_who_pays_and_with_what_only_when_asked(
    saga: Saga, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace page is made to be shared: the payment method and customers are redacted unless --io,
    and its CSP leaves an injected <base> or <form> nowhere to point."""
    import html

    from saga_local.aws import archive

    saga.driver.send(order_body("ORDER-REDACT"))
    saga.driver.pump()
    (result,) = saga.driver.results()
    archive.record(archive.read_execution(saga.driver.sfn, result.arn), tmp_path)
    monkeypatch.setattr(archive, "ARCHIVE_DIR", tmp_path)
    monkeypatch.setattr(cli, "STATE_FILE", tmp_path / "no-stack-running.json")
    shared, full = tmp_path / "shared.html", tmp_path / "full.html"

    assert cli.main(["trace", result.name, "--html", str(shared)]) == 0
    assert cli.main(["trace", result.name, "--html", str(full), "--io"]) == 0
    assert cli.main(["trace", result.name, "--io"]) == 0

    page = html.unescape(shared.read_text(encoding="utf-8"))
    assert "pm_card_visa" not in page
    assert "<redacted>" in page
    assert "ORDER-REDACT" in page, "the order itself is still shown"
    assert "base-uri 'none'; form-action 'none'" in page
    assert "pm_card_visa" in html.unescape(full.read_text(encoding="utf-8"))
    assert "pm_card_visa" in capsys.readouterr().out


def order_body(order_id: str) -> str:
    return json.dumps(
        {
            "orderId": order_id,
            "amount": 500,
            "currency": "USD",
            "customerId": "c",
            "paymentMethod": "pm_card_visa",
        }
    )


def test_send_of_a_body_the_start_function_rejects_says_dead_lettered_and_why(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.main(["send", "--stack", deployed, "--region", REGION, "--body", '{"orderId": "X", "amount": 1.5}'])

    out = capsys.readouterr().out
    assert "dead-lettered: amount must be an integer" in out
    assert "saga trace" not in out  # no execution starts: there is nothing to trace
    saga.driver.pump()
    (dead,) = saga.driver.dead_letters()
    assert dead["MessageAttributes"]["rejectionReason"]["StringValue"].startswith("amount must be an integer")


def test_redrive_answers_in_words_what_moved_and_what_will_be_rejected_again(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    valid = {
        "orderId": "ORDER-RD",
        "amount": 500,
        "currency": "USD",
        "customerId": "c",
        "paymentMethod": "pm_card_visa",
    }
    sqs.send_message(QueueUrl=saga.stack.dead_letter_queue_url, MessageBody=json.dumps(valid))
    sqs.send_message(QueueUrl=saga.stack.dead_letter_queue_url, MessageBody="{not json")

    # Nothing shows the valid order came through the orders queue (on AWS SQS would have stamped its
    # DeadLetterQueueSourceArn): it stays, and the redrive fails so that a person looks.
    assert cli.main(["redrive", "--stack", deployed, "--region", REGION]) == 1

    out = capsys.readouterr().out
    assert "moved 1 message from the dead-letter queue to the orders queue" in out
    assert "1 valid order left on the dead-letter queue" in out
    assert "1 message will be rejected again" in out
    assert "1 x body is not valid JSON (line 1)" in out
    assert "RedriveReport(" not in out  # words, not a repr
