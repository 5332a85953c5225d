"""No Python module of the repository grows past what a reader holds in mind at once: 700 lines.

A module that long has more than one concern in it (the Stripe emulator's front class had grown to
800 lines before its test controls moved out); splitting it along the seam a reader would name
keeps each one readable. The few modules still over the limit are listed, each with its length at
the time, so that none grows further and the list only shrinks: a listed module that has been split
below the limit must leave the list.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Where the repository's Python lives (the functions, the local stack, the benchmark, the tools,
#: the tests).
ROOTS = ("saga_local", "functions", "bench", "scripts", "tests")
MAX_LINES = 700
#: Modules over the limit before it was checked, and the length they may not grow past. Each is a
#: test module or test model of its own area, to be split there.
OVER_THE_LIMIT: dict[str, int] = {}


def line_count(relative: str) -> int:
    """How many lines the module at ``relative`` (to the repository's root) has."""
    return len((ROOT / relative).read_text(encoding="utf-8").splitlines())


def modules() -> list[str]:
    """Every Python module under :data:`ROOTS`, relative to the repository's root."""
    return sorted(str(path.relative_to(ROOT)) for root in ROOTS for path in (ROOT / root).rglob("*.py"))


def test_the_modules_are_found() -> None:
    found = modules()
    assert "saga_local/stripe_emulator/emulator.py" in found
    assert {module.split("/", 1)[0] for module in found} == set(ROOTS)


def test_no_module_is_longer_than_the_limit() -> None:
    too_long = {
        module: lines
        for module in modules()
        if module not in OVER_THE_LIMIT and (lines := line_count(module)) > MAX_LINES
    }
    assert too_long == {}, f"split these along a seam a reader would name: {too_long}"


@pytest.mark.parametrize("module", sorted(OVER_THE_LIMIT))
def test_a_module_still_over_the_limit_does_not_grow_and_leaves_the_list_once_split(module: str) -> None:
    lines = line_count(module)
    assert lines > MAX_LINES, f"{module} has {lines} lines now: take it out of OVER_THE_LIMIT"
    assert lines <= OVER_THE_LIMIT[module], f"{module} grew to {lines} lines: split it instead"
