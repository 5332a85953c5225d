"""``make mutants`` never reports a mutant as killed or survived unless it was really applied.

A mutant is an exact snippet (or an ASL transform); when the code it was written against moves on,
the mutant must come back as an error to rewrite, not be skipped or applied somewhere else.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "mutants"))

# The runner's directory is not a package: its modules are imported from it, after the path is set.
from model import (
    ASL_PATH,
    JsonEdit,
    Mutant,
    MutantError,
    TextEdit,
    drop_error,
    drop_rule,
    set_path,
    set_rule,
)
from run import PytestRun, first_failure, judge

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = (ROOT / ASL_PATH).read_text()


def text_mutant(old: str, new: str, equivalent: str = "") -> Mutant:
    return Mutant("m", "functions/x.py", "d", ("tests/x.py",), TextEdit(old, new), equivalent)


def test_a_snippet_is_replaced_only_where_it_occurs_exactly_once() -> None:
    mutant = text_mutant("a < b", "a <= b")

    assert mutant.mutate("if a < b:\n    pass\n") == "if a <= b:\n    pass\n"
    with pytest.raises(MutantError, match="not found"):
        mutant.mutate("if a <  b:\n    pass\n")
    with pytest.raises(MutantError, match="2 times"):
        mutant.mutate("x = a < b\ny = a < b\n")


def test_a_mutant_that_does_not_compile_is_an_error_not_a_kill() -> None:
    with pytest.raises(MutantError, match="does not compile"):
        text_mutant("return x", "return x)").mutate("def f(x):\n    return x\n")


@pytest.mark.parametrize(
    "edit",
    [
        drop_rule("Claim Order", "Retry", "NoSuchError"),
        drop_error("No Such State", "Catch", "States.ALL"),
        set_rule("Charge Payment", "Retry", "PaymentOutcomeUnknown", NoSuchField=1),
        set_path(("States", "Claim Order", "Parameters", "Payload", "noSuchKey.$"), "$"),
    ],
    ids=["rule", "state", "field", "path"],
)
def test_an_asl_transform_whose_target_is_gone_is_an_error(edit: object) -> None:
    with pytest.raises(MutantError):
        JsonEdit(edit).apply(DEFINITION)  # type: ignore[arg-type]


def test_an_asl_transform_changes_only_its_target() -> None:
    mutated = json.loads(
        JsonEdit(set_rule("Charge Payment", "Retry", "States.ALL", MaxAttempts=0)).apply(DEFINITION)
    )
    original = json.loads(DEFINITION)

    rules = mutated["States"]["Charge Payment"]["Retry"]
    assert [r.get("MaxAttempts") for r in rules if r["ErrorEquals"] == ["States.ALL"]] == [0]
    mutated["States"]["Charge Payment"]["Retry"] = original["States"]["Charge Payment"]["Retry"]
    assert mutated == original


def test_a_survivor_fails_the_run_unless_equivalent_and_a_killed_equivalent_fails_it_too() -> None:
    passed = PytestRun("passed", "", "", 1.0)
    failed = PytestRun("failed", "tests/x.py::test_y", "", 1.0)

    assert judge(text_mutant("a", "b"), passed).status == "SURVIVED"
    assert judge(text_mutant("a", "b"), failed).status == "killed"
    assert judge(text_mutant("a", "b", equivalent="why"), passed).status == "equivalent"
    assert judge(text_mutant("a", "b", equivalent="why"), failed).status == "STALE-EQUIVALENT"


def test_the_killing_test_is_read_from_the_summary_not_from_captured_log_lines() -> None:
    output = (
        "ERROR    payment-saga:charge_payment.py:54 charge_refused\n"
        "=========================== short test summary info ============================\n"
        "FAILED tests/statemachine/test_paths.py::test_happy - AssertionError: assert 2 == 1\n"
    )

    assert first_failure(output) == "tests/statemachine/test_paths.py::test_happy"


def test_every_mutant_of_the_catalogue_still_applies_to_the_code() -> None:
    """A refactor that moves a mutant's snippet silently shrinks ``make mutants``: the suite says so."""
    done = subprocess.run(  # noqa: S603 - this interpreter, the repository's own script
        [sys.executable, str(ROOT / "scripts" / "mutants" / "run.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
