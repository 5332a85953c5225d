"""No Python module of the repository grows past what a reader holds in mind at once: 700 lines.

A module that long has more than one concern in it (the Stripe emulator's front class had grown to
800 lines before its test controls moved out); splitting it along the seam a reader would name
keeps each one readable. Every module is under it now, the tests too: there is no list of
exceptions to grow.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Where the repository's Python lives (the functions, the local stack, the benchmark, the tools,
#: the tests).
ROOTS = ("saga_local", "functions", "bench", "scripts", "tests")
MAX_LINES = 700


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
    too_long = {module: lines for module in modules() if (lines := line_count(module)) > MAX_LINES}
    assert too_long == {}, f"split these along a seam a reader would name: {too_long}"
