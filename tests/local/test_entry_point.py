"""The installed `saga` command, run as a user runs it.

Every subcommand goes through ``.venv/bin/saga`` in a subprocess: a clean environment (no
PYTHONPATH, no AWS settings), started outside the project, so nothing pytest puts on the import
path can hide a command that is broken for users (``saga reconcile`` once failed on every run with
``ModuleNotFoundError: No module named 'payment_saga'``, and ``saga chaos`` refused its own options).
Each subcommand answers ``--help``, and each does a short real run. ``SAGA_STATE_DIR`` keeps this
test's `saga up` apart from any stack a developer is running.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from typing import TYPE_CHECKING

import pytest

from saga_local.cli import build_parser
from saga_local.stripe_emulator import SAVED_PAYMENT_METHOD, TEST_CUSTOMER
from saga_local.template import ROOT
from tests.local.doc_blocks import rehearsals
from tests.local.entry_point_support import (
    SAGA,
    Running,
    clean_environment,
    ok,
    provider_charges,
    saga,
    subcommands,
    wait_for,
)

if TYPE_CHECKING:
    from pathlib import Path

SAM_PYTHON = ROOT / ".venv-sam" / "bin" / "python"
pytestmark = pytest.mark.skipif(not SAGA.exists(), reason=f"{SAGA} is not installed (make install)")


@pytest.mark.parametrize("command", subcommands())
def test_every_subcommand_answers_help(command: str, tmp_path: Path) -> None:
    out = ok(saga(tmp_path, command, "--help", timeout=60))

    assert f"usage: saga {command}" in out


def test_up_s_help_says_where_its_state_goes_and_how_to_run_a_second_one(tmp_path: Path) -> None:
    out = " ".join(ok(saga(tmp_path, "up", "--help", timeout=60)).split())

    assert "SAGA_STATE_DIR" in out
    assert "SAGA_STATE_DIR=/tmp/other saga up" in out


def test_every_option_of_every_subcommand_has_a_help_line_that_shows_its_default() -> None:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    unexplained = []
    for name, parser in sorted(action.choices.items()):
        formatter = parser._get_formatter()
        for option in parser._actions:
            if isinstance(option, argparse._HelpAction) or option.help == argparse.SUPPRESS:
                continue
            shown = formatter._expand_help(option) if option.help else ""
            flag = isinstance(option, argparse._StoreTrueAction | argparse._StoreFalseAction)
            optional = bool(option.option_strings) and not option.required
            if not shown.strip() or (optional and not flag and "default" not in shown):
                unexplained.append(f"saga {name} {'/'.join(option.option_strings) or option.dest}: {shown!r}")

    assert unexplained == []


def test_chaos_takes_its_options_and_keeps_the_promise(tmp_path: Path) -> None:
    out = ok(
        saga(
            tmp_path, "chaos", "--orders", "3", "--copies", "2", "--concurrency", "1", "--seed", "5", "--json"
        )
    )

    report = json.loads(out)
    assert report["before"]["orders"] == 3
    assert report["promiseKept"] is True
    for error, names in report["recorded"]["byError"].items():  # kept for saga trace, stack gone
        assert "FAILED" in ok(saga(tmp_path, "trace", names[0])), error


def test_simulate_records_what_did_not_succeed_and_saga_trace_shows_it_afterwards(tmp_path: Path) -> None:
    out = ok(
        saga(
            tmp_path,
            "simulate",
            "--orders",
            "2",
            "--copies",
            "1",
            "--concurrency",
            "1",
            "--decline-rate",
            "1",
        )
    )

    found = re.search(r"PaymentDeclined\s+e\.g\. saga trace (\S+)", out)
    assert found is not None, out
    assert "Payment Declined" in ok(saga(tmp_path, "trace", found[1]))


def test_simulate_a_few_orders(tmp_path: Path) -> None:
    ok(saga(tmp_path, "simulate", "--orders", "3", "--copies", "2", "--concurrency", "1"))


def test_cost_fits_100_columns_and_prices_every_line(tmp_path: Path) -> None:
    out = ok(saga(tmp_path, "cost"))

    assert max(len(line) for line in out.splitlines()) <= 100
    for line in (
        "Step Functions Standard",
        "CloudWatch Logs: state machine",
        "X-Ray",
        "Secrets Manager",
        "Total",
    ):
        assert line in out
    assert "EventBridge Scheduler" in out


def test_cost_wide_fits_100_columns_with_each_line_s_share_and_full_unit_price(tmp_path: Path) -> None:
    out = ok(saga(tmp_path, "cost", "--wide"))

    assert max(len(line) for line in out.splitlines()) <= 100
    header = next(line for line in out.splitlines() if line.split()[:2] == ["happy", "share"])
    assert header.split() == ["happy", "share", "duplicate", "mix", "10%", "1", "Lambda"]
    total = next(line for line in out.splitlines() if line.startswith("Total"))
    assert total.split()[2] == "100%"
    assert "Step Functions Standard (transitions): $0.025 per 1,000 state transitions" in out


def test_cost_json_prices_what_the_stack_costs_by_existing_per_month(tmp_path: Path) -> None:
    document = json.loads(ok(saga(tmp_path, "cost", "--json")))

    per_month = document["per_month"]
    assert {"scheduler", "secret", "alarms", "dashboard", "custom_metrics", "kms_key", "pitr"} <= set(
        per_month
    )
    assert per_month["dashboard"] == 3.0
    assert per_month["alarms"] > 2
    # Stripe's API, per order: one create, and one read of the PaymentIntent per webhook that rings
    # (a card's succeeded; a debit's processing, then succeeded). Never a second create, no search.
    requests = document["stripe_requests_per_order"]
    assert requests["card"] == {"create": 1, "retrieve": 1, "search": 0, "list": 0, "cancel": 0}
    assert requests["debit"] == {"create": 1, "retrieve": 2, "search": 0, "list": 0, "cancel": 0}


def test_the_demo_prints_execution_names_that_saga_trace_shows_afterwards(tmp_path: Path) -> None:
    demo = saga(tmp_path, "demo", timeout=600)
    out = ok(demo)
    assert "unpublished metrics" not in out + demo.stderr, "no library's warning in the story"

    names = re.findall(r"^\s+(ORDER-\d+-[0-9a-f-]{36})$", out, flags=re.MULTILINE)
    assert len(names) == 9  # 4 deliveries without the claim, 4 with it, 1 declined card
    declined = next(name for name in names if name.startswith("ORDER-004-"))
    trace = ok(saga(tmp_path, "trace", declined))  # the demo's stacks are gone: it was recorded
    assert "Payment Declined" in trace


# -- against a running `saga up` (tests/local/conftest.py: one for the session) -----------------


def test_up_prints_commands_that_work_with_aws_cli_v1_and_v2_and_sam(running: Running) -> None:
    endpoint = running.state["endpoint"]
    queue = running.state["outputs"]["OrdersQueueUrl"]

    # AWS CLI v1 (and v2 before 2.13) ignore AWS_ENDPOINT_URL: every line names the endpoint.
    assert f"aws --endpoint-url {endpoint} sqs send-message --queue-url {queue}" in running.banner
    assert f"aws --endpoint-url {endpoint} stepfunctions list-executions" in running.banner
    assert f"export AWS_ENDPOINT_URL={endpoint}   # read by AWS CLI v2 (2.13+)" in running.banner
    assert "SweeperFunction schedule     every 50 s (rate(5 minutes) in template.yaml" in running.banner
    # The hourly settlement check runs the same function, compressed alike (rate(1 hour): 600 s).
    assert running.state["schedules"] == {"SweeperFunction": 50, "SweeperFunction/SettlementCheck": 600}
    sam_line = next(line for line in running.banner.splitlines() if "sam local invoke" in line)
    assert f"--env-vars {running.state['samEnvVars']}" in sam_line
    assert "--docker-network host" in sam_line


@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI is not installed")
def test_the_banner_s_aws_cli_lines_run_as_printed(running: Running) -> None:
    environment = {
        **clean_environment(running.state_dir),
        "PATH": os.environ["PATH"],  # wherever the AWS CLI is
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": running.state["region"],
    }
    lines = [line.strip() for line in running.banner.splitlines() if line.strip().startswith("aws ")]
    assert len(lines) == 2

    for line in lines:
        completed = subprocess.run(  # noqa: S603 - the banner's own command line
            shlex.split(line),
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert completed.returncode == 0, (line, completed.stderr)
        json.loads(completed.stdout)


def test_send_then_trace_the_names_it_prints(running: Running, tmp_path: Path) -> None:
    out = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-1", "--copies", "2"))
    names = re.findall(r"saga trace (\S+)", out)
    assert len(names) == 2

    def finished() -> str | None:
        result = saga(running.state_dir, "trace", names[0])
        done = result.returncode == 0 and ("SUCCEEDED" in result.stdout or "FAILED" in result.stdout)
        return result.stdout if done else None

    trace = wait_for(finished, "the execution to finish")
    assert "Claim Order" in trace
    page = tmp_path / "trace.html"
    ok(saga(running.state_dir, "trace", names[1], "--html", str(page)))
    assert "<svg" in page.read_text()


def test_trace_of_an_order_id_lists_each_execution_once_and_traces_the_latest_while_up_runs_and_after(
    running: Running, tmp_path: Path
) -> None:
    out = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-TRACE4", "--copies", "4", "--wait"))
    names = re.findall(r"saga trace (ORDER-EP-TRACE4-\S+)", out)
    assert len(names) == 4
    recorded = running.state_dir / "executions"
    wait_for(
        lambda: all((recorded / f"{name}.json").is_file() for name in names),
        "saga up to record the four executions",
    )

    while_up = ok(saga(running.state_dir, "trace", "ORDER-EP-TRACE4"))
    # After the stack has gone: only what it recorded (a state directory with no stack running).
    after = tmp_path / "after"
    shutil.copytree(recorded, after / "executions")
    gone = ok(saga(after, "trace", "ORDER-EP-TRACE4"))

    for printed in (while_up, gone):
        listing, _, traced = printed.partition("Tracing the latest, ")
        assert "4 executions start with 'ORDER-EP-TRACE4'" in listing, printed
        assert sorted(re.findall(r"ORDER-EP-TRACE4-\S+", listing)) == sorted(names), "each once"
        assert traced.split()[0] in names
        assert "Claim Order" in traced
    assert "(recorded)" not in while_up, "the running stack's executions are not listed twice"


def test_trace_of_an_unknown_execution_says_so_in_words(running: Running) -> None:
    result = saga(running.state_dir, "trace", "ORDER-NOPE-00000000")

    assert result.returncode != 0
    assert "no execution named 'ORDER-NOPE-00000000'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_rejected_body_is_reported_dead_lettered_then_redrive_says_what_happened(running: Running) -> None:
    out = ok(saga(running.state_dir, "send", "--body", "{not json"))
    assert "dead-lettered: body is not valid JSON" in out
    assert "saga trace" not in out
    sqs = running.client("sqs")
    dead = running.state["outputs"]["OrdersDeadLetterQueueUrl"]

    def in_dead_letter_queue() -> bool:
        attributes = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"]) >= 1

    wait_for(in_dead_letter_queue, "the malformed message in the dead-letter queue")

    surveyed = ok(saga(running.state_dir, "redrive"))
    assert "dry run, nothing moved" in surveyed
    assert "1 x body is not valid JSON" in surveyed
    redriven = ok(saga(running.state_dir, "redrive", "--apply"))
    # Every rejected message stays: this one, and any other test's on the session's stack.
    assert re.search(r"\d+ messages? left on the dead-letter queue", redriven), redriven
    assert "moved 0 messages" in redriven
    assert "body is not valid JSON" in redriven


def test_invoke_runs_the_step_samples_in_order_against_the_stack(running: Running) -> None:
    events = ROOT / "events"
    steps = [
        ("ClaimOrderFunction", "claim_order.json"),
        ("ChargePaymentFunction", "charge_payment.json"),
        ("MarkCompleteFunction", "mark_complete.json"),
        ("ClaimOrderFunction", "claim_order_declined.json"),
        ("ReleaseClaimFunction", "release_claim.json"),
    ]
    results = []
    for function, event in steps:
        result = saga(running.state_dir, "invoke", function, "-e", str(events / event))
        results.append(json.loads(ok(result)))
        assert "START RequestId" in result.stderr  # the function's logs go to stderr
        assert '"orderId"' in result.stderr

    assert results[0]["outcome"] == "WON"
    assert results[1]["status"] == "succeeded"
    assert results[4] == {"released": True, "reason": "DECLINED", "attempt": 1, "sendAgain": False}
    table = running.state["outputs"]["ClaimsTableName"]
    claim = running.client("dynamodb").get_item(
        TableName=table, Key={"orderId": {"S": "ORDER-101"}}, ConsistentRead=True
    )["Item"]
    assert claim["status"]["S"] == "COMPLETED"


def test_invoke_reports_a_function_error_as_lambda_does(running: Running, tmp_path: Path) -> None:
    event = tmp_path / "complete_unknown.json"
    sample = json.loads((ROOT / "events" / "mark_complete.json").read_text())
    event.write_text(json.dumps({**sample, "orderId": "ORDER-NEVER-CLAIMED"}))

    result = saga(running.state_dir, "invoke", "MarkCompleteFunction", "-e", str(event))

    assert result.returncode == 1
    assert json.loads(result.stdout)["errorType"] == "ClaimLost"


def test_reconcile_runs_from_the_entry_point(running: Running) -> None:
    out = ok(saga(running.state_dir, "reconcile", "--later", "2000"))

    assert "stale claims at" in out
    assert "total:" in out


@pytest.mark.skipif(not SAM_PYTHON.exists(), reason="the SAM CLI is not installed (make tools)")
def test_the_sam_env_vars_file_points_every_function_at_the_stack_through_sam_cli_s_own_reader(
    running: Running,
) -> None:
    completed = subprocess.run(  # noqa: S603 - SAM CLI's interpreter, our reader script
        [
            str(SAM_PYTHON),
            str(ROOT / "tests" / "local" / "sam_env_reader.py"),
            "template.yaml",
            running.state["samEnvVars"],
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(running.state_dir), "SAM_CLI_TELEMETRY": "0"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    environments = json.loads(completed.stdout)
    outputs = running.state["outputs"]

    assert set(environments) >= {"ClaimOrderFunction", "ChargePaymentFunction", "StartExecutionFunction"}
    for function, environment in environments.items():
        assert environment["AWS_ENDPOINT_URL"] == running.state["endpoint"], function
        if "CLAIMS_TABLE_NAME" in environment:
            assert environment["CLAIMS_TABLE_NAME"] == outputs["ClaimsTableName"], function
        if "PAYMENT_API_BASE" in environment:
            assert environment["PAYMENT_API_BASE"] == running.state["provider"], function
    assert (
        environments["StartExecutionFunction"]["STATE_MACHINE_ARN"] == outputs["PaymentSagaStateMachineArn"]
    )
    assert (
        environments["StartExecutionFunction"]["DEAD_LETTER_QUEUE_URL"] == outputs["OrdersDeadLetterQueueUrl"]
    )
    assert os.path.isabs(running.state["samEnvVars"])


@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI is not installed")
def test_the_runbook_s_get_items_of_a_claim_run_as_written(running: Running) -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    written = [
        line.strip() for line in runbook.splitlines() if line.strip().startswith("aws dynamodb get-item")
    ]
    ok(saga(running.state_dir, "send", "--order-id", "ORDER-RUNBOOK-1", "--wait"))
    table = running.state["outputs"]["ClaimsTableName"]
    environment = {
        **clean_environment(running.state_dir),
        "PATH": os.environ["PATH"],
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": running.state["region"],
    }
    answers = []
    for line in written:
        pasted = line.replace("<ClaimsTableName>", table).replace("<orderId>", "ORDER-RUNBOOK-1")
        completed = subprocess.run(  # noqa: S603 - the runbook's own command line
            [*shlex.split(pasted), "--endpoint-url", running.state["endpoint"]],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert completed.returncode == 0, (line, completed.stderr)
        answers.append(json.loads(completed.stdout))

    assert len(written) >= 2  # the order to send again; the status of an aborted execution's claim
    assert {"M": answers[0]["M"]} == answers[0]
    assert answers[0]["M"]["orderId"] == {"S": "ORDER-RUNBOOK-1"}
    assert {"S": "COMPLETED"} in answers[1:]


def test_logs_show_an_orders_events_across_its_functions_from_the_workers_files(running: Running) -> None:
    ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-LOGS"))

    def completed() -> str | None:
        out = ok(saga(running.state_dir, "logs", "--order-id", "ORDER-EP-LOGS"))
        return out if "claim_completed" in out else None

    out = wait_for(completed, "the order's completion in the logs")
    events = [line.split()[4] for line in out.splitlines()]
    assert events.index("claim_won") < events.index("charge_applied") < events.index("claim_completed")
    assert all("ORDER-EP-LOGS" in line for line in out.splitlines())
    only = ok(saga(running.state_dir, "logs", "ChargePayment", "--order-id", "ORDER-EP-LOGS"))
    assert {line.split()[2] for line in only.splitlines()} == {"ChargePaymentFunction"}


def test_send_wait_prints_each_executions_path_and_outcome_as_the_demo_does(running: Running) -> None:
    out = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-WAIT", "--copies", "2", "--wait"))

    assert "CHARGED pi_" in out
    assert "DUPLICATE" in out
    assert "Claim Order -> Charge Payment" in out


def test_send_a_saved_card_with_its_provider_customer_is_charged(running: Running) -> None:
    saved = ["--payment-method", SAVED_PAYMENT_METHOD, "--provider-customer-id", TEST_CUSTOMER]
    out = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-SAVED", *saved, "--wait"))

    assert "CHARGED pi_" in out


def test_a_provider_fault_on_the_running_stack_is_rehearsed_as_the_runbook_tells_it(running: Running) -> None:
    def charges(order_id: str) -> int:
        return provider_charges(running, order_id)

    assert "answer lost" in ok(saga(running.state_dir, "fault", "lost-answer", "--order-id", "ORDER-EP-LOST"))
    lost = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-LOST", "--wait"))
    assert "fails (HTTP 500" in ok(saga(running.state_dir, "fault", "outage"))
    try:
        down = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-OUTAGE", "--wait"))
    finally:
        assert "cleared" in ok(saga(running.state_dir, "fault", "clear"))
    back = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-BACK", "--wait"))

    assert "CHARGED pi_" in lost
    assert charges("ORDER-EP-LOST") == 1, "the retry replayed the charge: charged once"
    assert "NeedsReconciliation" in down  # the outcome is unknown: the claim is kept for the sweeper
    assert charges("ORDER-EP-OUTAGE") == 0
    assert "CHARGED pi_" in back


def test_a_charge_payment_that_crashes_after_the_charge_is_charged_once_and_closed_by_its_webhook(
    running: Running,
) -> None:
    # One crash more than the Charge step's retries of a dead Lambda (States.ALL, 3).
    crash = ("fault", "crash", "--function", "ChargePaymentFunction", "--point", "after:provider.charge")
    said = ok(saga(running.state_dir, *crash, "--order-id", "ORDER-EP-CRASH", "--times", "4"))
    crashed = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-CRASH", "--wait"))

    assert "Runtime.ExitError" in said
    assert provider_charges(running, "ORDER-EP-CRASH") == 1, "each retry replayed the one charge"
    # The charge landed and nothing it ran said so; Stripe's payment_intent.succeeded for it completes
    # the claim, before the execution gives up (it ends CHARGED) or after (Needs Reconciliation).
    assert "CHARGED pi_" in crashed or "Needs Reconciliation" in crashed, crashed
    deadline = time.monotonic() + 30
    events = ok(saga(running.state_dir, "events", "--order-id", "ORDER-EP-CRASH"))
    while "OrderCharged" not in events and time.monotonic() < deadline:
        time.sleep(0.5)
        events = ok(saga(running.state_dir, "events", "--order-id", "ORDER-EP-CRASH"))
    assert "OrderCharged" in events, events


def test_every_saga_line_of_the_runbook_runs_against_the_local_stack_as_pasted(running: Running) -> None:
    # Against `saga up` instead of a deployed stack: the same line without `--stack payment-saga`, its
    # placeholders filled in with an order that ran. --apply lines change nothing here that matters:
    # no claim is stale, and the dead-letter queue holds only rejected messages.
    out = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-RUNBOOK", "--wait"))
    execution = re.findall(r"saga trace (ORDER-EP-RUNBOOK-\S+)", out)[0]
    # The rehearsals' lines run in their own tests below, in order, with what they say checked.
    rehearsed = {command for block in rehearsals().values() for command, _ in block.commands()}
    runbook = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    lines = [line.split("  #")[0].strip() for line in runbook.splitlines() if line.startswith("saga ")]
    lines = [line for line in lines if line not in rehearsed]
    assert len(lines) >= 15

    for line in lines:
        pasted = (
            line.replace("--stack payment-saga", "")
            .replace("<orderId>", "ORDER-EP-RUNBOOK")
            .replace("ORDER-003-<MessageId>", execution)
            .replace("<execution name>", execution)
            .replace("ORDER-003", "ORDER-EP-RUNBOOK")
        )
        assert "<" not in pasted, f"a placeholder this test does not know: {line}"
        result = saga(running.state_dir, *shlex.split(pasted)[1:])
        assert result.returncode == 0, (line, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, line


def test_up_prints_each_execution_as_it_ends_and_records_it_for_saga_trace(running: Running) -> None:
    out = ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-SEEN", "--wait"))
    name = re.findall(r"saga trace (ORDER-EP-SEEN-\S+)", out)[0]

    wait_for(lambda: any(name in line for line in running.printed), "saga up to print the execution")
    at = next(i for i, line in enumerate(running.printed) if name in line)
    assert "CHARGED pi_" in running.printed[at + 1]
    assert (running.state_dir / "executions" / f"{name}.json").is_file()


def test_invoke_of_a_step_that_publishes_no_metric_prints_no_powertools_warning(
    running: Running, tmp_path: Path
) -> None:
    event = tmp_path / "release_unclaimed.json"
    sample = json.loads((ROOT / "events" / "release_claim.json").read_text())
    event.write_text(json.dumps({**sample, "orderId": "ORDER-NEVER-RELEASED"}))

    result = saga(running.state_dir, "invoke", "ReleaseClaimFunction", "-e", str(event))

    assert "START RequestId" in result.stderr  # the function ran, and its logs are there
    assert "No application metrics to publish" not in result.stderr
