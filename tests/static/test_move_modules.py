"""saga_local's modules sit on their floors, and the script that moved them can move code merged later.

``scripts/move_modules.py`` holds the mapping from each old module path to its new one. After a
branch written against the old paths is merged, running the script again rewrites that branch's
references; ``--check`` fails while any is left. The rewriting rules are shown here on made-up
module names, so that these tests name no old path themselves.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from saga_local.template import ROOT

SCRIPT_PATH = ROOT / "scripts" / "move_modules.py"


@pytest.fixture(scope="module")
def moves() -> ModuleType:
    spec = importlib.util.spec_from_file_location("move_modules", SCRIPT_PATH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["move_modules"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_no_module_is_left_to_move_and_no_reference_to_an_old_path_remains() -> None:
    result = subprocess.run(  # noqa: S603 - this interpreter, the repository's own script
        [sys.executable, str(SCRIPT_PATH), "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, (
        f"run `.venv/bin/python scripts/move_modules.py` to move and rewrite these:\n{result.stdout}"
    )


def test_an_import_of_names_that_went_to_different_modules_becomes_one_import_each(
    moves: ModuleType, tmp_path: Path
) -> None:
    mapping = {
        "saga_local.old.engine": moves.Move("saga_local.lower.engine", {"judge": "saga_local.lower.verdicts"})
    }
    text = "    from saga_local.old.engine import run, judge as verdict  # lazily\n"

    assert moves.rewrite(text, mapping, {}, tmp_path) == (
        "    from saga_local.lower.engine import run  # lazily\n"
        "    from saga_local.lower.verdicts import judge as verdict\n"
    )


def test_a_moved_module_imported_from_its_package_keeps_the_name_the_code_uses(
    moves: ModuleType, tmp_path: Path
) -> None:
    mapping = {"saga_local.old.events": moves.Move("saga_local.lower.outcome_log")}

    rewritten = moves.rewrite("from saga_local.old import events, other\n", mapping, {}, tmp_path)

    assert (
        rewritten == "from saga_local.lower import outcome_log as events\nfrom saga_local.old import other\n"
    )


def test_patch_strings_module_names_and_file_paths_follow_the_move(moves: ModuleType, tmp_path: Path) -> None:
    mapping = {"saga_local.old.engine": moves.Move("saga_local.lower.engine")}
    text = (
        'mock.patch("saga_local.old.engine.time")\n'
        "python -m saga_local.old.engine --orders 5\n"
        "see saga_local/old/engine.py and saga_local/old/engine_notes.py\n"
    )

    assert moves.rewrite(text, mapping, {}, tmp_path) == (
        'mock.patch("saga_local.lower.engine.time")\n'
        "python -m saga_local.lower.engine --orders 5\n"
        "see saga_local/lower/engine.py and saga_local/old/engine_notes.py\n"
    )


def test_what_a_split_kept_at_the_old_path_stays_there_and_the_rest_follows_the_move(
    moves: ModuleType, tmp_path: Path
) -> None:
    # The command was carved back out of the engine that moved down, at the engine's old path.
    (tmp_path / "saga_local" / "old").mkdir(parents=True)
    (tmp_path / "saga_local" / "old" / "events.py").write_text('"""the command"""\n', encoding="utf-8")
    mapping = {
        "saga_local.old.events": moves.Move("saga_local.lower.log", {"command": "saga_local.old.events"}),
        "saga_local.lower.log": moves.Move(
            None, {"command": "saga_local.old.events", "tally": "saga_local.judge"}
        ),
    }
    text = (
        "from saga_local.old.events import Event, command, tally\n"
        "from saga_local.lower.log import command\n"
        "python -m saga_local.old.events\n"
    )

    assert moves.rewrite(text, mapping, {}, tmp_path) == (
        "from saga_local.lower.log import Event\n"
        "from saga_local.old.events import command\n"
        "from saga_local.judge import tally\n"
        "from saga_local.old.events import command\n"
        "python -m saga_local.old.events\n"
    )


def test_a_module_already_at_its_new_path_is_not_moved_again(moves: ModuleType, tmp_path: Path) -> None:
    for path in ("saga_local/old/engine.py", "saga_local/lower/engine.py", "saga_local/old/cost.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text('"""a module"""\n', encoding="utf-8")
    mapping = {
        "saga_local.old.engine": moves.Move("saga_local.lower.engine"),
        "saga_local.old.cost": moves.Move("saga_local.lower.cost"),
    }

    pending = moves.pending_moves(mapping, {}, tmp_path)

    assert [(s.relative_to(tmp_path).as_posix(), d.relative_to(tmp_path).as_posix()) for s, d in pending] == [
        ("saga_local/old/cost.py", "saga_local/lower/cost.py")
    ]
