"""Files the local tooling writes under ``.saga/``: readable by their user only.

They hold what another user of the machine must not read or change: the stack file carries the
Stripe emulator's admin token, the SAM env-vars file the functions' configuration, the recorded
executions every order's payment method and customer, the logs every function's lines. So every
directory is 0700 and every file 0600, whatever the umask (which would otherwise leave them 0644).
"""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def private_directory(path: Path) -> Path:
    """``path`` (and missing parents) created, and ``path`` itself made 0700. Returns ``path``."""
    path.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    path.chmod(DIRECTORY_MODE)  # mkdir's mode is cut by the umask, and an existing one keeps its own
    return path


def write_private_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (UTF-8), a 0600 file in a 0700 directory. Returns ``path``."""
    private_directory(path.parent)
    descriptor = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def open_private_append(path: Path) -> IO[bytes]:
    """``path`` opened to append bytes (a log), the file created, or kept, 0600."""
    return os.fdopen(_open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")


def _open(path: Path, flags: int) -> int:
    descriptor = os.open(path, flags, FILE_MODE)
    os.fchmod(descriptor, FILE_MODE)  # an existing file keeps its own mode through os.open
    return descriptor
