"""saga_local reads top down: no module imports from a floor above its own, and no two import each other.

The floors (docs/design.md), top down: ``cli.py`` parses; ``commands/`` render and call, and only
``cli.py`` imports them; ``harness/`` runs orders through a stack and judges it; ``stack/`` is the
embedded stack, its driver, the archive and the outcome log; ``aws/`` (moto) over ``runtime/`` (the
local Lambda runtime); then the leaves (``stripe_emulator/``, ``trace/``, ``template.py`` and the
small helpers). Every import counts, lazy ones and those under ``TYPE_CHECKING`` too: a type named
from a floor above is still a dependency on it. Outside saga_local (tests/, bench/, scripts/) the
commands are used as people use them, through ``cli.py``: whatever a test needs of a command's
logic lives a floor down, where it imports it from.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from saga_local.template import ROOT

PACKAGE = ROOT / "saga_local"
#: Each floor's rank, top (0) down; a module not named here is a leaf.
FLOORS = {
    "saga_local.cli": 0,
    "saga_local.commands": 1,
    "saga_local.harness": 2,
    "saga_local.stack": 3,
    "saga_local.aws": 4,
    "saga_local.runtime": 5,
}
LEAVES = 6
#: Outside saga_local, what uses it only through cli.py or from below the commands.
CALLERS = ("tests", "bench", "scripts")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, root: Path = ROOT) -> set[str]:
    """Every saga_local module (or package) ``path`` imports, wherever the import statement sits."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # ``from saga_local.stack import driver`` imports the module saga_local.stack.driver,
                # ``from saga_local import commands`` the package saga_local.commands.
                name = f"{base}.{alias.name}"
                where = root / Path(*name.split("."))
                is_module = where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()
                found.add(name if is_module else base)
    return {name for name in found if name == "saga_local" or name.startswith("saga_local.")}


def floor(module: str) -> int:
    for prefix, rank in FLOORS.items():
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return LEAVES


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    return {
        module_name(path, root): imported(path, root) for path in sorted((root / "saga_local").rglob("*.py"))
    }


def upward(root: Path = ROOT) -> list[str]:
    """Each import of a saga_local module from a floor above the importer's, one line each."""
    return [
        f"{module} (floor {floor(module)}) imports {target} (floor {floor(target)})"
        for module, targets in graph(root).items()
        for target in sorted(targets)
        if floor(target) < floor(module)
    ]


def command_importers(root: Path, folder: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """Each import of a command module by a file under ``folder`` that is not cli.py (nor ``allowed``)."""
    return [
        f"{path.relative_to(root).as_posix()} imports {target}"
        for path in sorted((root / folder).rglob("*.py"))
        if floor(module_name(path, root)) > FLOORS["saga_local.commands"]
        and path.relative_to(root).as_posix() not in allowed
        for target in sorted(imported(path, root))
        if floor(target) == FLOORS["saga_local.commands"]
    ]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def package_of(module: str) -> str:
    """saga_local.X for a module of the subpackage X; a top-level module is its own package."""
    return ".".join(module.split(".")[:2])


def test_every_saga_local_module_is_found() -> None:
    modules = graph()
    assert "saga_local.cli" in modules
    assert {floor(m) for m in modules} == {*FLOORS.values(), LEAVES}


def test_no_module_imports_from_a_floor_above_its_own() -> None:
    assert upward() == []


def test_no_two_packages_import_each_other() -> None:
    edges: dict[str, set[str]] = {}
    for module, targets in graph().items():
        edges.setdefault(package_of(module), set()).update(
            package_of(t) for t in targets if package_of(t) != package_of(module)
        )
    assert cycles(edges) == []


def test_no_two_modules_import_each_other() -> None:
    # A package's __init__ re-exporting its modules is no cycle of the code: leave the package out.
    modules = graph()
    edges = {
        module: {t for t in targets if t in modules and not (PACKAGE / Path(*t.split(".")[1:])).is_dir()}
        for module, targets in modules.items()
    }
    assert cycles(edges) == []


@pytest.mark.parametrize("caller", ["saga_local", *CALLERS])
def test_only_the_cli_imports_the_commands(caller: str) -> None:
    assert command_importers(ROOT, caller) == []


def plant(root: Path, files: dict[str, str]) -> Path:
    """A tree of the given files (path -> source) with every package's ``__init__.py``, under ``root``."""
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        if name.startswith("saga_local/"):
            for package in path.relative_to(root).parents:
                if package != Path():
                    (root / package / "__init__.py").touch()
    return root


def test_an_import_from_a_floor_above_is_found_lazy_or_under_type_checking(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "saga_local/harness/engine.py": "def run() -> None:\n    from saga_local.commands import sweep\n",
            "saga_local/stack/driver.py": (
                "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                "    from saga_local.harness.engine import run\n"
            ),
            "saga_local/commands/sweep.py": "from saga_local.harness import engine\n",
        },
    )

    assert upward(root) == [
        "saga_local.harness.engine (floor 2) imports saga_local.commands.sweep (floor 1)",
        "saga_local.stack.driver (floor 3) imports saga_local.harness.engine (floor 2)",
    ]


@pytest.mark.parametrize(
    "source",
    [
        "from saga_local.commands.redrive import render\n",
        "from saga_local.commands import redrive\n",
        "import saga_local.commands.redrive\n",
        "def test_it() -> None:\n    from saga_local import commands\n",
    ],
)
def test_a_test_that_imports_a_command_is_found_unless_named_an_exception(
    tmp_path: Path, source: str
) -> None:
    root = plant(
        tmp_path,
        {
            "saga_local/cli.py": "from saga_local.commands.redrive import cmd_redrive\n",
            "saga_local/commands/redrive.py": "def render() -> str:\n    return ''\n",
            "tests/local/test_redrive.py": source,
            "tests/local/test_cli.py": "from saga_local import cli\n",
        },
    )

    (found,) = command_importers(root, "tests")
    assert found.startswith("tests/local/test_redrive.py imports saga_local.commands")
    assert command_importers(root, "saga_local") == [], "cli.py is the one that may"
    assert command_importers(root, "tests", frozenset({"tests/local/test_redrive.py"})) == []
