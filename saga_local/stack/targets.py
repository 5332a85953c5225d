"""Where a command sends and reads: the local stack `saga up` runs (its state file), or a deployed one."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga_local.paths import STATE_DIR
from saga_local.stack import running
from saga_local.template import ROOT

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


#: The running `saga up` stack's description (its endpoint, outputs and provider), written by `saga up`.
STATE_FILE = STATE_DIR / "stack.json"


#: Held by `saga up` while it runs (saga_local/stack/running.py): one stack per state directory.
LOCK_FILE = STATE_DIR / "up.lock"


@dataclass
class Target:
    """Where commands send and read: clients, and the stack's outputs (queue URL, state machine ARN...)."""

    clients: Callable[[str], Any]
    outputs: dict[str, str]
    where: str


def stack_outputs(cloudformation: Any, stack_name: str) -> dict[str, str]:
    """A deployed stack's outputs, by key (what `sam deploy` printed)."""
    stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def _gone_message(command: str, state: dict[str, Any]) -> str:
    return (
        f"saga {command}: the local stack at {state.get('endpoint')} ({running.describe(state)}) has gone"
        " without stopping cleanly: start it again with `saga up` (another terminal), or pass --stack NAME."
    )


def running_stack(command: str) -> dict[str, Any] | None:
    """The `saga up` stack's description read from its state file, or None when none was started.

    A stack that was started but has gone without stopping cleanly ends ``saga COMMAND`` with a
    SystemExit that says so and how to start it again.
    """
    state = running.read_state(STATE_FILE)
    if state is not None and running.gone(state):
        raise SystemExit(_gone_message(command, state))
    return state


def local_state() -> dict[str, Any] | None:
    """The description of the `saga up` stack that runs now, or None (none started, or it has gone)."""
    state = running.read_state(STATE_FILE)
    return None if state is None or running.gone(state) else state


def resolve_target(args: argparse.Namespace) -> Target:
    """The stack a command acts on: ``--stack NAME`` (deployed), else the running `saga up` stack."""
    import boto3

    if getattr(args, "stack", None):
        region, endpoint = args.region, args.endpoint_url

        def clients(service: str) -> Any:
            return boto3.client(service, region_name=region, endpoint_url=endpoint)  # type: ignore[call-overload]

        return Target(clients, stack_outputs(clients("cloudformation"), args.stack), f"stack {args.stack}")
    command = getattr(args, "command", None) or "saga"
    state = running_stack(command)
    if state is None:
        raise SystemExit(
            f"saga {command}: no local stack is running: start one with `saga up` (another terminal),"
            " or pass --stack NAME."
        )

    def local_clients(service: str) -> Any:
        return boto3.client(  # type: ignore[call-overload]
            service,
            endpoint_url=state["endpoint"],
            region_name=state["region"],
            aws_access_key_id="local",
            aws_secret_access_key="local",  # noqa: S106 - moto accepts any credentials
        )

    return Target(local_clients, state["outputs"], f"local stack at {state['endpoint']}")


def relative(path: Path) -> str:
    """``path`` relative to the project root when it is inside it (what a user can paste from there)."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
