"""What the local tests of the installed ``saga`` entry point share: where it is, its subcommands, the
clean environment it runs in as a user's shell would give it, a mistake's one-line answer, and the
`saga up` they run against (one for the session: tests/local/conftest.py)."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, Any

import boto3

from saga_local.cli import build_parser
from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SAGA = ROOT / ".venv" / "bin" / "saga"


def subcommands() -> list[str]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.choices)


def clean_environment(state_dir: Path) -> dict[str, str]:
    return {
        "HOME": str(state_dir),
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "SAGA_STATE_DIR": str(state_dir),
    }


def assert_one_line(result: subprocess.CompletedProcess[str], says: str) -> None:
    lines = [line for line in (result.stderr or "").splitlines() if line.strip()]
    assert "Traceback" not in (result.stderr or ""), result.stderr
    assert result.returncode != 0, (result.stdout, result.stderr)
    assert len(lines) == 1, result.stderr
    assert says in lines[0], lines[0]


#: Credentials of no account, as the local stack's and moto's, and one attempt per call: for a command
#: sent to an endpoint with ``--endpoint-url`` alone (no ``AWS_ENDPOINT_URL`` in its environment).
LOCAL_AWS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_MAX_ATTEMPTS": "1"}


def saga(
    state_dir: Path, *args: str, timeout: float = 180, aws: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``saga ARGS`` from ``state_dir`` (outside the project), as a user types it; ``aws``: AWS
    settings in its environment besides (:data:`LOCAL_AWS`)."""
    return subprocess.run(  # noqa: S603 - the project's own entry point
        [str(SAGA), *args],
        cwd=state_dir,
        env={**clean_environment(state_dir), **(aws or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


class Running:
    """A `saga up` in the background, and what it wrote about itself."""

    def __init__(self, state_dir: Path, banner: str, state: dict[str, Any], printed: list[str]) -> None:
        self.state_dir = state_dir
        self.banner = banner
        self.state = state
        #: What it printed after its banner, so far.
        self.printed = printed

    def client(self, service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=self.state["endpoint"],
            region_name=self.state["region"],
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )


def serve_saga_up(state_dir: Path) -> Iterator[Running]:
    """`saga up` started in ``state_dir``, until the generator is closed (then stopped, and checked)."""
    process = subprocess.Popen(  # noqa: S603 - the project's own entry point
        [str(SAGA), "up", "--pollers", "2"],
        cwd=state_dir,
        env=clean_environment(state_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    state_file = state_dir / "stack.json"
    deadline = time.monotonic() + 180
    while not state_file.exists():
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        assert time.monotonic() < deadline, "saga up did not start in 180 s"
        time.sleep(0.5)
    banner: list[str] = []
    assert process.stdout is not None
    while not banner or "sam local invoke" not in banner[-1]:  # the banner's last line
        banner.append(process.stdout.readline())
        assert banner[-1], "saga up stopped printing before its banner ended"
    # What it prints while orders flow (each execution as it ends), read as it comes: a pipe nobody
    # reads would fill and stop it.
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(process.stdout or []), daemon=True)
    reader.start()
    try:
        yield Running(state_dir, "".join(banner), json.loads(state_file.read_text()), printed)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        reader.join(timeout=10)
    assert "stopped" in "".join(printed)
    assert not state_file.exists(), "saga up leaves no description of a stack that is gone"
    assert not (state_dir / "sam-env.json").exists()


def wait_for(predicate: Any, what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def provider_charges(running: Running, order_id: str) -> int:
    """How many times the emulator of `saga up` charged ``order_id`` (its admin route, with the token)."""
    url = f"{running.state['provider']}/_emulator/charges?orderId={order_id}"
    token = {"X-Emulator-Token": running.state["providerAdminToken"]}
    request = urllib.request.Request(url, headers=token)  # noqa: S310 - the local emulator
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the local emulator
        return len(json.loads(response.read())["data"])
