"""Handlers are thin: each parses its event, calls the domain with its collaborators, and shapes the
answer; the decisions live in ``payment_saga``, tested directly (as ``claims/claiming.py`` and
``charging.py`` are), not through events and AWS mocks.

Held here by two measures a reviewer can read at a glance: every handler module is under 90 lines,
and no function in it is above complexity 5 (McCabe, as ruff's C901 counts it: grade A).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = ROOT / "functions" / "handlers"
MAX_LINES = 89
MAX_COMPLEXITY = 5
#: What every handler imports from: the Lambda runtime's plumbing (clients, logger, metrics), no handler.
NOT_A_HANDLER = {"__init__.py", "runtime.py"}
C901 = re.compile(
    r"^(?P<path>[^:]+):\d+:\d+: C901 `(?P<name>[^`]+)` is too complex \((?P<score>\d+) > \d+\)$"
)


def handlers() -> list[Path]:
    return sorted(path for path in HANDLERS.glob("*.py") if path.name not in NOT_A_HANDLER)


def too_complex(paths: list[Path]) -> dict[str, list[str]]:
    """``{file name: ["function (complexity)", ...]}`` for every function above :data:`MAX_COMPLEXITY`."""
    completed = subprocess.run(  # noqa: S603 - this interpreter's ruff, fixed arguments
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--isolated",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity={MAX_COMPLEXITY}",
            "--output-format",
            "concise",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode in {0, 1}, completed.stderr
    found: dict[str, list[str]] = {}
    for line in completed.stdout.splitlines():
        match = C901.match(line)
        if match:
            found.setdefault(Path(match["path"]).name, []).append(f"{match['name']} ({match['score']})")
    return found


def too_long(paths: list[Path]) -> dict[str, int]:
    counts = {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in paths}
    return {name: lines for name, lines in counts.items() if lines > MAX_LINES}


def test_every_handler_is_short_and_every_function_in_it_simple() -> None:
    checked = handlers()

    assert len(checked) >= 6, "no handlers found: the check would be vacuous"
    assert too_long(checked) == {}, "move the decisions to payment_saga"
    assert too_complex(checked) == {}, "move the decisions to payment_saga"


def test_the_check_finds_a_long_handler_and_a_complex_function(tmp_path: Path) -> None:
    branches = "".join(f"    if event == {n}:\n        return {n}\n" for n in range(MAX_COMPLEXITY))
    planted = tmp_path / "planted.py"
    planted.write_text(
        f"def handler(event):\n{branches}    return None\n" + "\n" * MAX_LINES, encoding="utf-8"
    )

    assert too_long([planted]) == {"planted.py": MAX_LINES + 2 + 2 * MAX_COMPLEXITY}
    assert too_complex([planted]) == {"planted.py": [f"handler ({MAX_COMPLEXITY + 1})"]}
