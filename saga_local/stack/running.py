"""Whether the local stack of `saga up` runs: its lock, its description, and whether it still answers.

`saga up` holds an exclusive lock on ``up.lock`` in the state directory for as long as it runs, and
writes ``stack.json`` (its endpoint, port and PID) once the stack answers. A second `saga up` in the
same state directory cannot take the lock and refuses, naming the first: it would otherwise write its
own ``stack.json`` over the first's and delete it on exit, leaving the first running but unreachable
by ``saga send``. The lock is the kernel's (``flock``), so a `saga up` killed with SIGKILL leaves no
lock behind; it does leave ``stack.json``, which :func:`gone` recognises (its process has exited, or
its port no longer answers), so the other commands say the stack went away instead of failing on a
connection that nobody answers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from saga_local.private_files import private_directory

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class AlreadyRunning(Exception):
    """Another `saga up` holds the state directory's lock."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def endpoint_answers(url: str, *, timeout: float = 1.0) -> bool:
    """Whether something accepts a TCP connection at ``url``'s host and port."""
    parts = urlsplit(url)
    if not parts.hostname or parts.port is None:
        return False
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout):
            return True
    except OSError:
        return False


def read_state(state_file: Path) -> dict[str, Any] | None:
    """The running stack's description, or None when there is none (or it is unreadable)."""
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def gone(state: dict[str, Any]) -> bool:
    """Whether the stack ``state`` describes has stopped without removing its description."""
    pid = state.get("pid")
    if isinstance(pid, int) and not pid_alive(pid):
        return True
    return not endpoint_answers(str(state.get("endpoint", "")))


def describe(state: dict[str, Any] | None) -> str:
    """'PID 123, port 4566' for a person, from what is known of a stack."""
    if not state:
        return "still starting"
    port = urlsplit(str(state.get("endpoint", ""))).port
    return f"PID {state.get('pid', '?')}, port {port if port is not None else '?'}"


@contextlib.contextmanager
def exclusive(lock_file: Path, state_file: Path) -> Iterator[None]:
    """Hold the state directory's `saga up` lock; raise :class:`AlreadyRunning` if another holds it."""
    private_directory(lock_file.parent)
    with open(lock_file, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            state = read_state(state_file)
            where = f" at {state['endpoint']}" if state and "endpoint" in state else ""
            what = describe(state) if state else f"PID {holder}, still starting"
            raise AlreadyRunning(
                f"a local stack is already running from {state_file.parent}{where} ({what}):"
                " stop it (Ctrl-C in its terminal) or set SAGA_STATE_DIR to run a second one elsewhere"
            ) from None
        # Who holds it, for the refusal a second `saga up` prints before the first wrote stack.json.
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
