"""Every block of the users' docs that runs against a local stack is a rehearsal, run as written.

Without a stack: each block that looks local is marked, each rehearsal has a test below that checks
what it says, and each of its ``saga`` lines is one the parser takes. Then each rehearsal runs line by
line in bash through the installed ``saga``, against the session's `saga up` (tests/local/conftest.py),
and what its comments say is asserted: a doc that drifts from the code fails here.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import urllib.request
from typing import TYPE_CHECKING, Any

import pytest

from saga_local.cli import build_parser
from tests.local.doc_blocks import DOCS, blocks, markers, rehearsals
from tests.local.entry_point_support import (
    SAGA,
    Running,
    assert_one_line,
    clean_environment,
    ok,
    provider_charges,
    saga,
    wait_for,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: Each rehearsal a doc marks, and the test below that runs it: a doc's rehearsal that is not here,
#: or a name here that no doc has, fails test_each_rehearsal_is_run_by_a_test_that_checks_what_it_says.
REHEARSED = ("adoption", "crash", "duplicate-charge", "throttle", "webhook-trigger")


@pytest.mark.parametrize("doc", DOCS)
def test_every_block_that_runs_against_the_local_stack_is_marked(doc: str) -> None:
    unmarked = [f"docs/{doc}:{b.line}" for b in blocks(doc) if b.local and b.marker is None]

    assert not unmarked, f"mark each with <!-- rehearsal: NAME --> (and check it in a test): {unmarked}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_marker_stands_right_before_a_block(doc: str) -> None:
    marked = {b.line - 1 for b in blocks(doc) if b.marker is not None}

    assert [line for line, _ in markers(doc) if line not in marked] == []


def test_each_rehearsal_is_run_by_a_test_that_checks_what_it_says() -> None:
    names = [b.name for doc in DOCS for b in blocks(doc) if b.marker == "rehearsal"]

    assert len(names) == len(set(names)), "two rehearsals of one name"
    assert set(names) == set(REHEARSED)
    assert len(names) >= 5


@pytest.mark.parametrize("name", sorted(REHEARSED))
def test_each_saga_line_of_a_rehearsal_is_one_the_parser_takes(name: str) -> None:
    parser = build_parser()
    lines = [command for command, _ in rehearsals()[name].commands() if command.startswith("saga ")]

    for line in lines:
        words = [w for w in shlex.split(line)[1:] if "<" not in w]
        if words[0] == "chaos":
            continue
        parser.parse_args(words)  # exits 2 on an option the command does not have


# -- the rehearsals, run against the session's `saga up` ----------------------------------------------

needs_saga = pytest.mark.skipif(not SAGA.exists(), reason=f"{SAGA} is not installed (make install)")


def rehearse(
    running: Running,
    name: str,
    tmp_path: Path,
    *,
    fill: Callable[[str, list[str]], str] | None = None,
    after: dict[int, Callable[[str], None]] | None = None,
) -> list[tuple[str, str, str]]:
    """Run the rehearsal ``name`` line by line in bash, as a person pastes it from a checkout whose
    ``.saga/`` is the running stack's, with the installed ``saga`` on the PATH. ``fill`` puts in a
    placeholder from what the lines before printed; ``after[i]`` checks the stack right after line i.
    Each line (command, its comment, what it printed)."""
    checkout = tmp_path / f"checkout-{name}"
    checkout.mkdir()
    (checkout / ".saga").symlink_to(running.state_dir)
    environment = {**clean_environment(running.state_dir), "PATH": f"{SAGA.parent}:/usr/bin:/bin"}
    assignments: list[str] = []
    ran: list[tuple[str, str, str]] = []
    for index, (command, comment) in enumerate(rehearsals()[name].commands()):
        pasted = fill(command, [out for _, _, out in ran]) if fill else command
        assert "<" not in pasted.replace("<<", ""), f"a placeholder the test does not fill: {command}"
        completed = subprocess.run(  # noqa: S603 - the doc's own lines, in bash as a person pastes them
            ["/bin/bash", "-c", "\n".join([*assignments, pasted])],
            cwd=checkout,
            env=environment,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert completed.returncode == 0, (command, completed.stdout, completed.stderr)
        assert "Traceback" not in completed.stderr, (command, completed.stderr)
        if re.match(r"^[A-Z_]+=", pasted):
            assignments.append(pasted)
        ran.append((command, comment, completed.stdout))
        if after and index in after:
            after[index](completed.stdout)
    return ran


def again(running: Running, command: str, until: str) -> str:
    """``command`` (a rehearsal's ``saga`` line) run again until it prints ``until``: the outcome
    archive and the logs lag the write that made them by a moment."""
    return str(
        wait_for(
            lambda: until in (out := ok(saga(running.state_dir, *shlex.split(command)[1:]))) and out,
            f"{until!r} from {command}",
            seconds=30,
        )
    )


def faults(running: Running) -> list[dict[str, Any]]:
    """The functions' faults armed on `saga up`, with how often each fired (its fault control)."""
    control = running.state["faultControl"]
    request = urllib.request.Request(  # noqa: S310 - the local fault control
        f"{control['url']}/faults", headers={"X-Saga-Token": control["token"]}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the local fault control
        return list(json.loads(response.read())["faults"])


@needs_saga
def test_the_crash_rehearsal_ends_in_needs_reconciliation_and_the_sweeper_completes_it(
    running: Running, tmp_path: Path
) -> None:
    def all_crashes_fired(_: str) -> None:
        (crash,) = [f for f in faults(running) if "ORDER-REHEARSE-CRASH" in f["fault"]]
        assert crash["fired"] == 4, "no crash is left armed"

    def charged_once_and_kept(_: str) -> None:
        assert provider_charges(running, "ORDER-REHEARSE-CRASH") == 1

    ran = rehearse(running, "crash", tmp_path, after={2: all_crashes_fired, 3: charged_once_and_kept})
    outage, crash, sent, not_due, later, moved, events, late, sent_late, cleared = [out for _, _, out in ran]

    assert "no Stripe webhook event reaches the stack" in outage
    assert "Runtime.ExitError" in crash
    assert "-> Needs Reconciliation" in sent, sent
    assert "lease ends" in not_due, not_due
    assert "total: nothing to do" in not_due, not_due
    assert "would be completed pi_" in later, later
    assert "SweeperFunction ran on the new time: 1 completed" in moved, moved
    events = again(running, ran[6][0], "OrderCharged")
    kinds = [line.split()[1] for line in events.splitlines() if "ORDER-REHEARSE-CRASH" in line]
    assert kinds == ["OrderNeedsReconciliation", "OrderCharged"], events
    assert "(sweeper)" in events
    # The logs are on the stack's clock too: the last minute of it holds the sweep, not the crash.
    last_minute = ok(saga(running.state_dir, "logs", "--order-id", "ORDER-REHEARSE-CRASH", "--since", "1m"))
    assert "reconciliation_completed" in last_minute, last_minute
    assert "claim_won" not in last_minute, last_minute
    assert "lands after" in late
    assert "CHARGED pi_" in sent_late
    assert provider_charges(running, "ORDER-REHEARSE-LATE") == 1
    assert "every webhook delivered" in cleared
    assert faults(running) == []
    # Moving the clock is how the decisions are written later: never stamped ahead of the stack's clock.
    assert_one_line(
        saga(running.state_dir, "reconcile", "--later", "4500", "--apply"), "saga clock advance 4500"
    )


@needs_saga
def test_the_throttle_rehearsal_fails_the_claim_then_charges_the_re_queued_order(
    running: Running, tmp_path: Path
) -> None:
    def nothing_charged(_: str) -> None:
        assert provider_charges(running, "ORDER-REHEARSE-THROTTLE") == 0

    ran = rehearse(running, "throttle", tmp_path, after={1: nothing_charged})
    throttled, sent, cleared, moved, events = [out for _, _, out in ran]

    assert "TooManyRequestsException" in throttled
    assert "Claim Failed" in sent, sent
    assert "function faults cleared" in cleared
    assert "moved on 5 min" in moved
    events = again(running, ran[-1][0], "OrderCharged")
    kinds = [line.split()[1] for line in events.splitlines() if "ORDER-REHEARSE-THROTTLE" in line]
    assert kinds[:2] == ["OrderReleased", "OrderRequeued"], events
    assert kinds[-1] == "OrderCharged", events
    assert provider_charges(running, "ORDER-REHEARSE-THROTTLE") == 1


@needs_saga
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_duplicate_charge_rehearsal_finds_and_refunds_a_charge_once(
    running: Running, tmp_path: Path
) -> None:
    ok(saga(running.state_dir, "send", "--order-id", "ORDER-EP-REFUND", "--wait"))

    def fill(command: str, printed: list[str]) -> str:
        command = command.replace("<orderId>", "ORDER-EP-REFUND")
        if "<PaymentIntent>" in command:
            (intent,) = json.loads(printed[1])["data"]
            command = command.replace("<PaymentIntent>", intent["id"])
        return command

    ran = rehearse(running, "duplicate-charge", tmp_path, fill=fill)
    found, listed, refunded = (json.loads(out) for _, _, out in ran[1:])
    # The refund line pasted twice: one Idempotency-Key, one refund.
    provider_line, refund_line = ran[0][0], fill(ran[-1][0], [out for _, _, out in ran])
    twice = subprocess.run(  # noqa: S603 - the runbook's own lines
        ["/bin/bash", "-c", f"{provider_line}\n{refund_line}"],
        cwd=tmp_path / "checkout-duplicate-charge",
        env={**clean_environment(running.state_dir), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (intent,) = found["data"]

    assert intent["status"] == "succeeded"
    assert intent["id"] in [i["id"] for i in listed["data"]]
    assert (refunded["object"], refunded["amount"], refunded["status"]) == (
        "refund",
        intent["amount"],
        "succeeded",
    )
    assert json.loads(twice.stdout)["id"] == refunded["id"]


@needs_saga
def test_the_adoption_guide_s_cases_end_as_its_comments_say(running: Running, tmp_path: Path) -> None:
    ran = rehearse(running, "adoption", tmp_path)
    charged, again_sent, conflict, malformed, _ = [out for _, _, out in ran]

    assert "CHARGED pi_" in charged
    assert "DUPLICATE" in again_sent
    assert "OrderConflict" in conflict
    assert "dead-lettered: currency is required" in malformed
    events = again(running, ran[-1][0], "OrderConflict")
    assert "OrderCharged" in events
    assert provider_charges(running, "ORDER-ADOPT-1") == 1


@needs_saga
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_webhook_trigger_resends_an_order_s_event_and_the_consumer_leaves_it(
    running: Running, tmp_path: Path
) -> None:
    ran = rehearse(running, "webhook-trigger", tmp_path)
    sent, _, _, triggered, _ = [out for _, _, out in ran]

    assert "CHARGED pi_" in sent
    event = json.loads(triggered)
    assert event["id"].startswith("evt_")
    assert event["type"] == "payment_intent.succeeded"
    assert event["data"]["object"]["metadata"]["orderId"] == "ORDER-WEBHOOK"
    logs = again(running, ran[-1][0], "webhook_left")
    assert "webhook_received" in logs
    assert provider_charges(running, "ORDER-WEBHOOK") == 1
