"""saga_local reads top down: no module imports from a floor above its own, and no two import each other.

The floors (docs/design.md), top down: ``cli.py`` parses; ``commands/`` render and call, and only
``cli.py`` imports them; ``harness/`` runs orders through a stack and judges it; ``stack/`` is the
embedded stack, its driver, the archive and the outcome log; ``aws/`` (moto) over ``runtime/`` (the
local Lambda runtime); then the leaves (``stripe_emulator/``, ``trace/``, ``template.py`` and the
small helpers). Every import counts, lazy ones and those under ``TYPE_CHECKING`` too: a type named
from a floor above is still a dependency on it.
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
#: Outside saga_local, what may use it only from below the commands: the benchmark. (The tests of a
#: few commands still import the command they test: the rule does not reach tests/ yet.)
CALLERS = ("bench",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every saga_local module (or package) ``path`` imports, wherever the import statement sits."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
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
                # ``from saga_local.stack import driver`` imports the module saga_local.stack.driver.
                name = f"{base}.{alias.name}"
                is_module = (ROOT / Path(*name.split("."))).with_suffix(".py").is_file()
                found.add(name if is_module else base)
    return {name for name in found if name == "saga_local" or name.startswith("saga_local.")}


def floor(module: str) -> int:
    for prefix, rank in FLOORS.items():
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return LEAVES


def graph() -> dict[str, set[str]]:
    return {module_name(path): imported(path) for path in sorted(PACKAGE.rglob("*.py"))}


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
    upward = [
        f"{module} (floor {floor(module)}) imports {target} (floor {floor(target)})"
        for module, targets in graph().items()
        for target in sorted(targets)
        if floor(target) < floor(module)
    ]
    assert upward == []


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
    importers = [
        f"{path.relative_to(ROOT)} imports {target}"
        for path in sorted((ROOT / caller).rglob("*.py"))
        if floor(module_name(path)) > FLOORS["saga_local.commands"]
        for target in sorted(imported(path))
        if floor(target) == FLOORS["saga_local.commands"]
    ]
    assert importers == []
