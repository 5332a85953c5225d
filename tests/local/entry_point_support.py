"""What the local tests of the installed ``saga`` entry point share: where it is, its subcommands, the
clean environment it runs in as a user's shell would give it, and a mistake's one-line answer."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from saga_local.cli import build_parser
from saga_local.template import ROOT

if TYPE_CHECKING:
    import subprocess
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
