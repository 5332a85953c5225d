"""Every ``saga`` subcommand, through the installed entry point, answers each ordinary mistake in one line.

A person who mistypes a file name, passes a negative count, forgets the region or pipes the output
into ``head`` gets one line on stderr naming the mistake, a non-zero exit, and no traceback. Each case
runs ``.venv/bin/saga`` in a subprocess from a clean environment, as test_entry_point.py does, and
starts no stack unless the mistake needs one: "no stack" is an empty state directory, "a stack that
went away" is the ``stack.json`` a killed `saga up` leaves behind, "already running" is the lock and
description a live `saga up` holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from saga_local.stack import archive
from saga_local.template import ROOT
from tests.helpers import order
from tests.local.entry_point_support import (
    LOCAL_AWS,
    SAGA,
    assert_one_line,
    clean_environment,
    saga,
    subcommands,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.helpers import Saga

pytestmark = pytest.mark.skipif(not SAGA.exists(), reason=f"{SAGA} is not installed (make install)")

EVENTS = ROOT / "events"
#: The subcommands that read or write a stack (the local one of `saga up`, or --stack NAME).
STACK_COMMANDS = {
    "send": ["send"],
    "trace": ["trace", "ORDER-003-00000000-0000-0000-0000-000000000000"],
    "events": ["events"],
    "invoke": ["invoke", "ClaimOrderFunction", "-e", str(EVENTS / "claim_order.json")],
    "reconcile": ["reconcile"],
    "redrive": ["redrive"],
    "replay-parked": ["replay-parked"],
}
#: Those that read a deployed stack with --stack, besides the ones above.
STACK_ONLY_COMMANDS = {"logs": ["logs"], "executions": ["executions"]}


@dataclass(frozen=True)
class Mistake:
    """``saga ARGS`` in a state directory prepared as ``setup`` says, and the words its line must hold."""

    args: list[str]
    says: str
    setup: str = "empty"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _dead_pid() -> int:
    child = subprocess.Popen(["/bin/true"])  # a process that has exited
    child.wait()
    return child.pid


MISTAKES: dict[str, Mistake] = {
    # a missing file
    "send a missing file": Mistake(["send", "events/nope.json"], "cannot read events/nope.json"),
    "invoke a missing event": Mistake(
        ["invoke", "ClaimOrderFunction", "-e", "nope.json", "--env-vars", "env.json"], "cannot read the event"
    ),
    "invoke a missing env-vars file": Mistake(
        ["invoke", "ClaimOrderFunction", "-e", str(EVENTS / "claim_order.json"), "--env-vars", "nope.json"],
        "cannot read the env-vars file",
    ),
    "trace into a folder that does not exist": Mistake(
        ["trace", "{recorded}", "--html", "/nonexistent/x.html"],
        "cannot write /nonexistent/x.html",
        "recorded",
    ),
    "simulate a report into a folder that does not exist": Mistake(
        ["simulate", "--html", "/nonexistent/report.html"], "cannot write /nonexistent/report.html"
    ),
    "chaos a report into a folder that does not exist": Mistake(
        ["chaos", "--html", "/nonexistent/report.html"], "cannot write /nonexistent/report.html"
    ),
    # bad JSON
    "send bad JSON": Mistake(["send", "bad.json"], "bad.json is not valid JSON"),
    "send JSON that is not an order": Mistake(["send", "list.json"], "holds no order"),
    "invoke a bad event": Mistake(
        ["invoke", "ClaimOrderFunction", "-e", "bad.json", "--env-vars", "env.json"], "is not valid JSON"
    ),
    # a negative or zero count, a share outside 0..1
    "send -1 copies": Mistake(["send", "--copies", "-1"], "--copies: must be at least 1, not -1"),
    "simulate 0 copies": Mistake(["simulate", "--copies", "0"], "--copies: must be at least 1, not 0"),
    "simulate 0 orders": Mistake(["simulate", "--orders", "0"], "--orders: must be at least 1"),
    "simulate a decline rate of 2": Mistake(["simulate", "--decline-rate", "2"], "between 0 and 1"),
    "chaos 0 orders": Mistake(["chaos", "--orders", "0"], "--orders: must be at least 1"),
    "chaos a negative outage": Mistake(["chaos", "--outage-seconds", "-5"], "zero or more seconds"),
    "cost a duplicate share of 1.5": Mistake(["cost", "--duplicate-share", "1.5"], "between 0 and 1"),
    "cost a negative X-Ray sampling": Mistake(["cost", "--xray-sampling", "-1"], "--xray-sampling"),
    "cost cold starts as a word": Mistake(["cost", "--cold-starts", "some"], "'some' is not a number"),
    "up with no pollers": Mistake(["up", "--pollers", "0"], "--pollers: must be at least 1"),
    "up on a port that cannot be": Mistake(["up", "--port", "70000"], "must be a TCP port"),
    "reconcile earlier than now": Mistake(["reconcile", "--later", "-5"], "zero or more seconds"),
    "reconcile a negative grace": Mistake(["reconcile", "--grace", "-1"], "--grace: must be at least 0"),
    # an unknown name
    "an unknown subcommand": Mistake(["frobnicate"], "invalid choice: 'frobnicate'"),
    "invoke an unknown function": Mistake(
        ["invoke", "NopeFunction", "-e", str(EVENTS / "claim_order.json"), "--env-vars", "env.json"],
        "no function 'NopeFunction'",
    ),
    "trace an unknown execution": Mistake(["trace", "ORDER-NOPE"], "no execution named 'ORDER-NOPE'"),
    "logs of an unknown function": Mistake(["logs", "NopeFunction"], "no function 'NopeFunction'"),
    "logs with no stack ever run": Mistake(["logs"], "no function logs in"),
    "logs since a time that is not one": Mistake(["logs", "--since", "yesterday"], "is not a duration"),
    "executions of an unknown status": Mistake(["executions", "--status", "DONE"], "invalid choice: 'DONE'"),
    "fault with no stack": Mistake(["fault", "outage"], "no local stack is running"),
    "fault of an unknown kind": Mistake(["fault", "meteor"], "invalid choice: 'meteor'"),
    "fault when the stack went away": Mistake(["fault", "clear"], "has gone", "gone"),
    "an emulator fault on Stripe's test mode": Mistake(
        ["fault", "outage"], "this `saga up` runs on Stripe's test mode", "test-mode"
    ),
    "up on Stripe's test mode without a key": Mistake(
        ["up", "--stripe-test"], "--stripe-test needs your Stripe test key in STRIPE_API_KEY"
    ),
    "throttle with no stack": Mistake(
        ["fault", "throttle", "--function", "ClaimOrderFunction"], "no local stack is running"
    ),
    "throttle when the stack went away": Mistake(
        ["fault", "throttle", "--function", "ClaimOrderFunction"], "has gone", "gone"
    ),
    "crash of an unknown function": Mistake(
        ["fault", "crash", "--function", "NopeFunction"],
        "no function 'NopeFunction' in template.yaml; name one of: ChargePayment, ClaimOrder, MarkComplete,",
    ),
    "throttle of no function": Mistake(["fault", "throttle"], "throttle needs --function NAME"),
    "throttle for negative seconds": Mistake(
        ["fault", "throttle", "--function", "ClaimOrderFunction", "--seconds", "-5"], "zero or more seconds"
    ),
    "throttle for no time": Mistake(
        ["fault", "throttle", "--function", "ClaimOrderFunction", "--seconds", "0"], "more than 0 seconds"
    ),
    "crash at a point the function never reaches": Mistake(
        ["fault", "crash", "--function", "ClaimOrderFunction", "--point", "after:sqs.SendMessage"],
        "never reaches point 'after:sqs.SendMessage'",
    ),
    "late write at a read": Mistake(
        ["fault", "late-write", "--function", "SweeperFunction", "--point", "after:dynamodb.Query"],
        "late_write needs a write",
    ),
    "clock with no stack": Mistake(["clock", "advance", "75m"], "no local stack is running"),
    "clock advanced by nothing": Mistake(["clock", "advance"], "say how long to let pass"),
    "clock advanced by a word": Mistake(["clock", "advance", "soon"], "is not a duration"),
    "clock of Stripe's test mode": Mistake(["clock", "advance", "1h"], "has no clock to move", "test-mode"),
    "demo an unknown runtime": Mistake(["demo", "--runtime", "docker"], "invalid choice: 'docker'"),
    "an unknown option": Mistake(["events", "--since-forever"], "unrecognized arguments: --since-forever"),
    # the short name `saga logs` takes: past the name, to the stack (which is gone)
    "invoke by its short name a stack that went away": Mistake(
        ["invoke", "ClaimOrder", "-e", str(EVENTS / "claim_order.json"), "--env-vars", "dead.json"],
        "nothing answers at http://127.0.0.1:",
    ),
    "invoke against an env-vars file whose stack went away": Mistake(
        ["invoke", "ClaimOrderFunction", "-e", str(EVENTS / "claim_order.json"), "--env-vars", "dead.json"],
        "nothing answers at http://127.0.0.1:",
    ),
    # a second `saga up` while one runs from the same folder
    "up while another runs": Mistake(["up"], "already running", "running"),
    # no stack, a stack that went away, no region for a deployed one
    **{
        f"{name} with no stack": Mistake(args, "no execution named" if name == "trace" else "no local stack")
        for name, args in STACK_COMMANDS.items()
    },
    **{
        f"{name} when the stack went away": Mistake(args, "has gone", "gone")
        for name, args in STACK_COMMANDS.items()
    },
    **{
        f"{name} --stack with no region": Mistake([*args, "--stack", "payment-saga"], "no AWS region")
        for name, args in {**STACK_COMMANDS, **STACK_ONLY_COMMANDS}.items()
        if name != "invoke"  # a function's region comes from its env-vars file, SAM's default else
    },
}


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A state directory (SAGA_STATE_DIR), also the working directory, with the files the cases name."""
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "env.json").write_text("{}")
    dead = {"Parameters": {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port()}"}}
    (tmp_path / "dead.json").write_text(json.dumps(dead))
    return tmp_path


@pytest.fixture
def recorded(saga: Saga, state_dir: Path) -> str:
    """A declined order's execution, run through the real state machine and recorded as `saga demo` does."""
    saga.driver.send(json.dumps(order("ORDER-MISTAKE", paymentMethod="pm_card_chargeDeclined")))
    saga.driver.pump()
    (result,) = saga.driver.results()
    return archive.record(archive.read_execution(saga.driver.sfn, result.arn), state_dir / "executions").stem


@contextlib.contextmanager
def gone(state_dir: Path) -> Iterator[None]:
    """What a `saga up` killed with SIGKILL leaves behind: its description, no process, no port."""
    endpoint = f"http://127.0.0.1:{_free_port()}"
    (state_dir / "stack.json").write_text(
        json.dumps({"endpoint": endpoint, "region": "us-east-1", "outputs": {}, "pid": _dead_pid()})
    )
    (state_dir / "sam-env.json").write_text("{}")
    yield


@contextlib.contextmanager
def up_running(state_dir: Path, *, stripe_test_mode: bool = False) -> Iterator[str]:
    """A live `saga up` as the others see it: its lock held, its port open, its description written
    (``stripe_test_mode``: as `saga up --stripe-test` writes it)."""
    with socket.socket() as listener, open(state_dir / "up.lock", "w", encoding="utf-8") as lock:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write(str(os.getpid()))
        lock.flush()
        state = {"endpoint": endpoint, "pid": os.getpid(), "stripeTestMode": stripe_test_mode}
        (state_dir / "stack.json").write_text(json.dumps(state))
        yield endpoint


def run(state_dir: Path, args: list[str], **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - the project's own entry point
        [str(SAGA), *args],
        cwd=state_dir,
        env=clean_environment(state_dir),
        capture_output="stdout" not in options,
        text=True,
        timeout=120,
        check=False,
        **options,  # type: ignore[call-overload]
    )


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_mistake_is_answered_in_one_line_with_a_non_zero_exit(
    case: str, state_dir: Path, request: pytest.FixtureRequest
) -> None:
    mistake = MISTAKES[case]
    with contextlib.ExitStack() as setup:
        args = mistake.args
        if mistake.setup == "gone":
            setup.enter_context(gone(state_dir))
        elif mistake.setup == "running":
            setup.enter_context(up_running(state_dir))
        elif mistake.setup == "test-mode":
            setup.enter_context(up_running(state_dir, stripe_test_mode=True))
        elif mistake.setup == "recorded":
            name = request.getfixturevalue("recorded")
            args = [name if arg == "{recorded}" else arg for arg in args]
        result = run(state_dir, args)

    assert_one_line(result, mistake.says)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["fault", "outage", "--seconds", "5"], "outage takes no --seconds (for throttle): leave it out"),
        (
            ["fault", "throttle", "--function", "ClaimOrderFunction", "--times", "3"],
            "throttle takes no --times (for lost-answer, crash and late-write): leave it out",
        ),
        (
            ["fault", "clear", "--function", "ClaimOrderFunction", "--order-id", "ORDER-1"],
            "clear takes no --function (for throttle, crash and late-write) or --order-id",
        ),
        (
            ["fault", "lost-answer", "--point", "start"],
            "lost-answer takes no --point (for crash and late-write)",
        ),
    ],
)
def test_a_fault_option_its_kind_would_ignore_is_refused_as_a_usage_mistake(
    args: list[str], says: str, state_dir: Path
) -> None:
    """Refused before any stack is looked for (none runs here), with argparse's exit status."""
    result = run(state_dir, args)

    assert_one_line(result, says)
    assert result.returncode == 2
    assert "see saga fault --help" in result.stderr


def test_every_option_a_fault_kind_takes_is_accepted(state_dir: Path) -> None:
    args = ["fault", "crash", "--function", "ClaimOrderFunction", "--point", "start"]
    result = run(state_dir, [*args, "--times", "2", "--order-id", "ORDER-1"])

    assert_one_line(result, "no local stack is running")  # past the options, to the stack it needs
    assert result.returncode == 1


@pytest.mark.parametrize("name", ["ClaimOrder", "claimorder", "CLAIMORDERFUNCTION", "Sweeper"])
def test_a_fault_takes_a_function_by_the_short_name_saga_logs_takes(name: str, state_dir: Path) -> None:
    # `saga logs ClaimOrder`, `saga invoke ClaimOrder`: the same name breaks it, at a point it reaches.
    result = run(state_dir, ["fault", "late-write", "--function", name])

    assert_one_line(result, "no local stack is running")  # past the name, to the stack it needs


@pytest.mark.parametrize(
    # Not invoke: its stack is its env-vars file's.
    "command",
    sorted(name for name in {**STACK_COMMANDS, **STACK_ONLY_COMMANDS} if name != "invoke"),
)
def test_a_deployed_stack_out_of_reach_is_answered_about_the_stack_not_saga_up(
    command: str, state_dir: Path
) -> None:
    nowhere = f"http://127.0.0.1:{_free_port()}"  # as a network that answers nothing (no DNS, no route)
    args = [*{**STACK_COMMANDS, **STACK_ONLY_COMMANDS}[command], "--stack", "payment-saga"]
    # The local stack's credentials: nothing is reached to send them to.
    result = saga(
        state_dir, *args, "--region", "eu-west-1", "--endpoint-url", nowhere, timeout=120, aws=LOCAL_AWS
    )

    assert_one_line(result, f"cannot reach AWS at {nowhere}")
    assert "for stack payment-saga" in result.stderr
    assert "saga up" not in result.stderr
    assert "eu-west-1" in result.stderr


def _into_a_closed_pipe(state_dir: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte, as `| head` is after its lines
    try:
        return run(state_dir, args, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("command", subcommands())
def test_help_into_a_closed_pipe_says_nothing_and_exits_as_sigpipe(command: str, state_dir: Path) -> None:
    result = _into_a_closed_pipe(state_dir, [command, "--help"])

    assert result.stderr == "", "a reader that has what it wanted is no mistake to report"
    assert result.returncode == 128 + signal.SIGPIPE


def test_a_trace_piped_into_a_reader_that_went_away_says_nothing(state_dir: Path, recorded: str) -> None:
    result = _into_a_closed_pipe(state_dir, ["trace", recorded])

    assert result.stderr == ""
    assert result.returncode == 128 + signal.SIGPIPE


def test_logs_piped_into_head_print_no_broken_pipe_line(state_dir: Path) -> None:
    logs = state_dir / "logs"
    logs.mkdir()
    line = {"level": "INFO", "message": "claim_won", "timestamp": "2026-12-02 11:40:05,989+0000"}
    lines = [json.dumps({**line, "orderId": f"ORDER-{n}"}) for n in range(20000)]
    (logs / "ClaimOrderFunction.log").write_text("\n".join(lines) + "\n")

    piped = subprocess.run(  # noqa: S602 - the shell's pipe is what is tested; the entry point is ours
        f"'{SAGA}' logs | head -3",
        shell=True,
        cwd=state_dir,
        env=clean_environment(state_dir),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert len(piped.stdout.splitlines()) == 3
    assert piped.stderr == "", piped.stderr


def test_a_second_up_names_the_running_ones_port_and_pid(state_dir: Path) -> None:
    with up_running(state_dir) as endpoint:
        result = run(state_dir, ["up"])

        assert_one_line(result, f"PID {os.getpid()}, port {endpoint.rsplit(':', 1)[1]}")
        assert (state_dir / "stack.json").exists(), "the running stack's description is left alone"
