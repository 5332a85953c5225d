"""The saga command against a deployed stack (`--stack NAME` reads its CloudFormation outputs), on moto."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from saga_local import cli
from saga_local.aws.stack import REGION
from saga_local.runtime.faults import Fault
from saga_local.stack import targets
from tests.helpers import Saga, deliver_webhook, failed_receives, order


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


def test_send_counts_what_it_sent_in_words_one_message_or_several(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["send", "--stack", deployed, "--region", REGION]) == 0
    one = capsys.readouterr().out
    assert cli.main(["send", "--stack", deployed, "--region", REGION, "--copies", "2"]) == 0
    two = capsys.readouterr().out

    assert one.splitlines()[0] == f"sent 1 message to stack {deployed}"
    assert two.splitlines()[0] == f"sent 2 messages to stack {deployed}"


def test_send_rejects_a_missing_local_stack_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setattr(targets, "STATE_FILE", tmp_path / "absent.json")

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


def test_send_prints_the_names_the_start_function_gives_an_order_id_it_must_cut_and_clean(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # "." and ":" are not allowed in an execution name, and 61 characters leave no room for the
    # MessageId: saga send, the driver's reports and the start function must all apply one rule.
    order_id = "ORDER.2026:" + "x" * 50
    args = ["send", "--stack", deployed, "--region", REGION, "--order-id", order_id, "--copies", "2"]
    assert cli.main(args) == 0
    printed = {
        line.split("saga trace ")[1].strip()
        for line in capsys.readouterr().out.splitlines()
        if "saga trace " in line
    }

    saga.driver.pump()

    started = {e.name for e in saga.driver.executions(order_ids=[order_id])}
    assert len(printed) == 2
    assert printed == started
    assert saga.charges(order_id) == 1


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

    assert cli.main(["redrive", "--stack", deployed, "--region", REGION, "--apply"]) == 0
    saga.driver.pump()

    assert saga.charges("ORDER-DLQ") == 1
    assert saga.driver.dead_letters() == []


def test_trace_of_an_unknown_execution_is_answered_in_words(
    saga: Saga, deployed: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from saga_local.stack import archive

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
    from saga_local.stack import archive

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
    monkeypatch.setattr(targets, "STATE_FILE", tmp_path / "no-stack-running.json")

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

    from saga_local.stack import archive
    from saga_local.stack.local_invoke import write_sam_env_file

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
    from saga_local.stack import archive

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

    from saga_local.stack import archive

    saga.driver.send(order_body("ORDER-REDACT"))
    saga.driver.pump()
    (result,) = saga.driver.results()
    archive.record(archive.read_execution(saga.driver.sfn, result.arn), tmp_path)
    monkeypatch.setattr(archive, "ARCHIVE_DIR", tmp_path)
    monkeypatch.setattr(targets, "STATE_FILE", tmp_path / "no-stack-running.json")
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


def _dead_letter_a_valid_order_and_a_rejected_one(saga: Saga) -> None:
    """A valid order on the dead-letter queue (it failed until the redrive policy moved it) and a
    body the start function rejected there itself, with its rejectionReason."""
    sqs = boto3.client("sqs", region_name=REGION)
    valid = {
        "orderId": "ORDER-RD",
        "amount": 500,
        "currency": "USD",
        "customerId": "c",
        "paymentMethod": "pm_card_visa",
    }
    failed_receives(sqs, saga.stack.dead_letter_queue_url, json.dumps(valid), copies=1)
    saga.driver.send("{not json")
    saga.driver.pump()
    assert len(saga.driver.dead_letters()) == 2


def test_redrive_leaves_a_valid_order_nothing_shows_came_through_the_orders_queue(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sqs = boto3.client("sqs", region_name=REGION)
    valid = {
        "orderId": "ORDER-INJECTED",
        "amount": 500,
        "currency": "USD",
        "customerId": "c",
        "paymentMethod": "pm_card_visa",
    }
    sqs.send_message(QueueUrl=saga.stack.dead_letter_queue_url, MessageBody=json.dumps(valid))

    # Nothing shows the valid order came through the orders queue (on AWS SQS would have stamped its
    # DeadLetterQueueSourceArn): it stays, and the redrive fails so that a person looks.
    assert cli.main(["redrive", "--stack", deployed, "--region", REGION, "--apply"]) == 1
    saga.driver.pump()

    out = capsys.readouterr().out
    assert "1 valid order left on the dead-letter queue" in out
    assert saga.charges("ORDER-INJECTED") == 0
    assert len(saga.driver.dead_letters()) == 1


def rejected_events(saga: Saga) -> int:
    assert saga.driver.outcome_log is not None
    return sum(1 for e in saga.driver.outcome_log.events() if e.detail_type == "OrderRejected")


def test_redrive_is_a_dry_run_by_default_that_says_what_would_move_and_moves_nothing(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _dead_letter_a_valid_order_and_a_rejected_one(saga)

    assert cli.main(["redrive", "--stack", deployed, "--region", REGION]) == 0

    out = capsys.readouterr().out
    assert "dry run, nothing moved" in out
    assert "1 order would run again" in out
    assert "1 message would stay where they are" in out
    assert "1 x body is not valid JSON (line 1)" in out
    assert "saga redrive --apply" in out
    saga.driver.pump()
    assert len(saga.driver.dead_letters()) == 2
    assert saga.charges("ORDER-RD") == 0


def test_redrive_apply_leaves_a_rejected_message_where_it_is_and_runs_the_valid_order(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _dead_letter_a_valid_order_and_a_rejected_one(saga)

    assert cli.main(["redrive", "--stack", deployed, "--region", REGION, "--apply"]) == 0
    saga.driver.pump()

    out = capsys.readouterr().out
    assert "moved 1 message from the dead-letter queue to the orders queue" in out
    assert "1 order will run again" in out
    assert "1 message left on the dead-letter queue" in out
    assert "1 x body is not valid JSON (line 1)" in out
    assert "RedriveReport(" not in out  # words, not a repr
    assert saga.charges("ORDER-RD") == 1
    (left,) = saga.driver.dead_letters()
    assert left["Body"] == "{not json"
    assert rejected_events(saga) == 1, "no second lap, so no second final OrderRejected"


def test_redrive_apply_include_rejected_sends_the_rejected_message_round_too(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _dead_letter_a_valid_order_and_a_rejected_one(saga)

    assert (
        cli.main(["redrive", "--stack", deployed, "--region", REGION, "--apply", "--include-rejected"]) == 0
    )
    saga.driver.pump()

    out = capsys.readouterr().out
    assert "moved 2 messages" in out
    assert "1 message will be rejected again" in out
    assert saga.charges("ORDER-RD") == 1
    assert rejected_events(saga) == 2  # what the default spares: a new lap, a new final event


def _order(order_id: str, **fields: object) -> str:
    body = {
        "orderId": order_id,
        "amount": 500,
        "currency": "USD",
        "customerId": "c",
        "paymentMethod": "pm_card_visa",
    }
    return json.dumps({**body, **fields})


def test_executions_lists_a_stacks_executions_by_status_and_order_with_how_they_failed(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saga.driver.send(_order("ORDER-EX-1"), copies=2)
    saga.driver.send(_order("ORDER-EX-2", paymentMethod="pm_card_chargeDeclined"))
    saga.driver.send(_order("ORDER-EX-10"))
    saga.driver.pump()
    target = ["--stack", deployed, "--region", REGION]

    assert cli.main(["executions", *target]) == 0
    every = capsys.readouterr().out.splitlines()
    assert cli.main(["executions", *target, "--status", "FAILED"]) == 0
    failed = capsys.readouterr().out.splitlines()
    assert cli.main(["executions", *target, "--order-id", "ORDER-EX-1"]) == 0
    of_one = capsys.readouterr().out.splitlines()

    assert every[-1].startswith("4 executions")
    assert "1 FAILED, 3 SUCCEEDED" in every[-1]
    (declined,) = [line for line in failed if "ORDER-EX-2-" in line]
    assert "PaymentDeclined" in declined
    assert all("FAILED" in line for line in failed[:-2])
    assert len([line for line in of_one if "ORDER-EX-1-" in line]) == 2  # its two deliveries
    assert not any("ORDER-EX-10-" in line for line in of_one), "another order whose id starts the same"


def test_trace_takes_an_order_id_and_traces_the_latest_of_several_after_listing_them(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saga.driver.send(_order("ORDER-TR-1", paymentMethod="pm_card_chargeDeclined"))
    saga.driver.send(_order("ORDER-TR-2"), copies=2)
    saga.driver.pump()
    target = ["--stack", deployed, "--region", REGION]

    assert cli.main(["trace", "ORDER-TR-1", *target]) == 0
    only = capsys.readouterr().out
    assert "Payment Declined" in only
    assert "executions start with" not in only, "one execution: traced, no list"
    assert cli.main(["trace", "ORDER-TR-2", *target]) == 0

    listing, _, traced = capsys.readouterr().out.partition("Tracing the latest, ")
    lines = listing.strip().splitlines()
    assert "2 executions start with 'ORDER-TR-2'" in lines[0]
    assert len(lines) == 3
    assert all("SUCCEEDED" in line and "ORDER-TR-2-" in line for line in lines[1:])
    newest = lines[1].split()[-1]
    assert traced.startswith(f"{newest} (saga trace NAME traces another):")
    assert "Claim Order" in traced


def test_trace_and_events_say_when_a_webhook_closed_the_claim_after_the_executions_steps(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saga.faults.add(Fault("MarkCompleteFunction", "start", "die", times=100))
    result = saga.driver.wait(saga.driver.start(order(), name="lost-answer"))
    assert result.error == "NeedsReconciliation"
    deliver_webhook(saga, "ORDER-003", "succeeded")
    saga.driver.relay()
    (landed,) = saga.provider.charges_for("ORDER-003")

    assert cli.main(["trace", "lost-answer", "--stack", deployed, "--region", REGION]) == 0
    steps, _, afterwards = capsys.readouterr().out.partition("Besides its steps")
    assert "Mark Complete" in steps
    assert "OrderCharged by a Stripe webhook" in afterwards
    assert landed.charge_id in afterwards
    assert cli.main(["events", "--stack", deployed, "--region", REGION, "--order-id", "ORDER-003"]) == 0
    printed = capsys.readouterr().out.splitlines()
    (charged,) = [line for line in printed if "OrderCharged" in line and "ORDER-003" in line]
    assert "(webhook)" in charged
