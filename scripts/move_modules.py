"""Move saga_local's modules to their floors and rewrite every reference to them.

The floors of saga_local/ (docs/design.md) were reached by moves, and other branches keep writing
code against the old paths while the moves wait to be merged. This script holds the mapping and
applies it: it ``git mv``s each module that is not yet at its new path, then rewrites every
reference in the tree (imports, ``-m`` module names, ``mock.patch`` strings, file paths in docs and
comments) from an old path to its new one. Re-running it is safe: nothing already moved moves again,
and a reference merged in since is rewritten. ``--check`` changes nothing and exits 1 if a move or a
rewrite is still due, listing each.

A module that is split keeps an entry: the names that leave it go to their own modules
(:attr:`Move.names`), so ``from old import a, b`` becomes one import per destination.

Usage: ``python scripts/move_modules.py [--check]`` from anywhere in the checkout.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Move:
    """Where a module goes.

    Attributes:
        new: the module's new dotted path; None when the module stays where it is and only some of
            its names leave it.
        names: names (classes, functions, constants) that go to another module than ``new``.
    """

    new: str | None
    names: dict[str, str] = field(default_factory=dict)


#: old module -> where it and its names live now (the floors of docs/design.md, top down:
#: cli, commands, harness, stack, aws above runtime, then the leaves).
MOVES: dict[str, Move] = {
    # stack/: the embedded stack, its driver, the execution archive, the outcome log.
    "saga_local.aws.archive": Move("saga_local.stack.archive"),
    "saga_local.aws.driver": Move("saga_local.stack.driver"),
    "saga_local.aws.embedded": Move("saga_local.stack.embedded"),
    "saga_local.commands.events": Move(
        "saga_local.stack.outcome_log",
        # What stayed when the command was carved back out of the outcome log.
        {
            "render": "saga_local.commands.events",
            "command": "saga_local.commands.events",
            "cmd_events": "saga_local.commands.events",
        },
    ),
    # harness/: what runs orders through a stack and judges it.
    "saga_local.commands.simulate": Move(
        "saga_local.harness.simulate", {"cmd_simulate": "saga_local.commands.simulate"}
    ),
    "saga_local.commands.sweep": Move(
        "saga_local.harness.sweep", {"cmd_reconcile": "saga_local.commands.sweep"}
    ),
    "saga_local.commands.cost": Move("saga_local.harness.cost", {"cmd_cost": "saga_local.commands.cost"}),
    "saga_local.commands.cost_measure": Move("saga_local.harness.cost_measure"),
    "saga_local.commands.usage": Move("saga_local.harness.usage"),
    # Where a command sends and reads (the running `saga up` stack, or a deployed one), and the
    # lock and description of `saga up` it reads: the harness and the stack's tools use them too.
    "saga_local.commands.targets": Move("saga_local.stack.targets"),
    "saga_local.commands.running": Move("saga_local.stack.running"),
    # One function on one event as `sam local invoke` runs it, and the env-vars file `saga up` writes.
    "saga_local.commands.invoke": Move(
        "saga_local.stack.local_invoke", {"cmd_invoke": "saga_local.commands.invoke"}
    ),
    # The functions' log events, read from `saga up`'s files or a deployed stack's log groups.
    "saga_local.commands.logs": Move(
        "saga_local.stack.function_logs", {"cmd_logs": "saga_local.commands.logs"}
    ),
    # Moving the dead-letter queue back to the orders queue drives a stack: the harness's.
    "saga_local.commands.redrive": Move(
        "saga_local.harness.redrive",
        # What stayed: the report in words, and the subcommand.
        {
            "render": "saga_local.commands.redrive",
            "render_survey": "saga_local.commands.redrive",
            "cmd_redrive": "saga_local.commands.redrive",
        },
    ),
    # The docs' figures, measured from `saga cost --json`: `make docs-figures`, no saga subcommand.
    "saga_local.commands.figures": Move("saga_local.harness.figures"),
    # The leaves: read by every floor.
    "saga_local.aws.template": Move("saga_local.template"),
    "saga_local.commands.output": Move("saga_local.output"),
    # Names that left a module that stays.
    "saga_local.cli": Move(
        None,
        {
            # cli.py parses; each subcommand's body, and what several share, live in commands/.
            "STATE_FILE": "saga_local.commands.targets",
            "LOCK_FILE": "saga_local.commands.targets",
            "Target": "saga_local.commands.targets",
            "stack_outputs": "saga_local.commands.targets",
            "local_state": "saga_local.commands.targets",
            "resolve_target": "saga_local.commands.targets",
            "cmd_up": "saga_local.commands.up",
            "up_banner": "saga_local.commands.up",
            "cmd_send": "saga_local.commands.send",
            "execution_arn": "saga_local.commands.trace",
            "find_execution": "saga_local.commands.trace",
            "cmd_trace": "saga_local.commands.trace",
            "cmd_executions": "saga_local.commands.executions",
            "cmd_events": "saga_local.commands.events",
            "cmd_simulate": "saga_local.commands.simulate",
            "cmd_reconcile": "saga_local.commands.sweep",
            "cmd_redrive": "saga_local.commands.redrive",
            "cmd_replay_parked": "saga_local.commands.replay",
            "cmd_logs": "saga_local.commands.logs",
            "cmd_fault": "saga_local.commands.fault",
            "cmd_invoke": "saga_local.commands.invoke",
            "cmd_cost": "saga_local.commands.cost",
            "cmd_demo": "saga_local.commands.demo",
        },
    ),
    "saga_local.stack.outcome_log": Move(
        None,
        {
            # The tally of a run's events against its orders judges a run: the harness's.
            "final_outcomes": "saga_local.harness.outcomes",
            "OutcomeTally": "saga_local.harness.outcomes",
            "tally": "saga_local.harness.outcomes",
            # Rendering for a person, and the subcommand: ``saga events``.
            "cmd_events": "saga_local.commands.events",
            "render": "saga_local.commands.events",
            "command": "saga_local.commands.events",
        },
    ),
    "saga_local.runtime.faults": Move(
        None,
        {
            # Redelivering a message drives a stack: the harness does it, not the runtime.
            "Redelivery": "saga_local.harness.redelivery",
            "redeliver": "saga_local.harness.redelivery",
        },
    ),
    "saga_local.aws.moto_adapter": Move(
        None,
        {
            # The local runtime's own types: the runtime is below aws/ and never imports it.
            "Invocation": "saga_local.runtime.api",
            "LambdaRuntime": "saga_local.runtime.api",
            "Throttled": "saga_local.runtime.api",
        },
    ),
}

#: Files that are not modules but move with one (old path -> new path, from the checkout's root).
DATA_FILES: dict[str, str] = {
    "saga_local/commands/prices.json": "saga_local/harness/prices.json",
}

#: The docstring of each package a move creates (its whole __init__.py).
PACKAGES: dict[str, str] = {
    "saga_local/harness": (
        '"""The harness: runs orders through a stack, injects faults and judges what came out."""\n'
    ),
    "saga_local/stack": (
        '"""The local stack: the embedded stack, its driver, the execution archive and the outcome log."""\n'
    ),
}

#: What is read for references: text files git knows of (tracked, or new and not ignored).
TEXT_SUFFIXES = frozenset(
    {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".txt", ".cfg", ".ini", ".sh", ".html"}
)
TEXT_NAMES = frozenset({"Makefile"})
#: The mapping names every old path on purpose.
SKIPPED = frozenset({"scripts/move_modules.py"})

_FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from[ \t]+(?P<module>saga_local[\w.]*)[ \t]+import[ \t]+"
    r"(?P<names>\([^)]*\)|[^\n#]*?)(?P<tail>[ \t]*(?:#[^\n]*)?)$",
    re.MULTILINE,
)
_DOTTED = re.compile(r"(?<![\w.])saga_local(?:\.\w+)+")
_PATH = re.compile(r"(?<![\w/.])saga_local(?:/\w+)+(?:\.py)?")


def module_file(module: str, root: Path = ROOT) -> Path:
    """The file of a dotted module path (a package's ``__init__.py`` if it is a package)."""
    base = root.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _exists(module: str, root: Path) -> bool:
    return module_file(module, root).is_file()


def destination(moves: dict[str, Move], module: str, name: str) -> str:
    """The module that holds ``name`` of ``module`` after the moves (``module`` itself if it stays).

    Followed through every entry it leads to (a module moved, then split). A name pinned to its own
    module stays there: a split can re-create an old path (a command carved back out of an engine
    that moved down), and the names it keeps are listed under the old path as staying.
    """
    seen = [module]
    while module in moves:
        move = moves[module]
        after = move.names.get(name) or move.new
        if after is None or after in seen:
            return module
        seen.append(after)
        module = after
    return module


def _split_names(names: str) -> list[tuple[str, str | None]]:
    items = []
    for raw in names.strip().strip("()").replace("\n", " ").split(","):
        item = raw.strip()
        if not item:
            continue
        name, _, alias = item.partition(" as ")
        items.append((name.strip(), alias.strip() or None))
    return items


def _rewrite_from_import(match: re.Match[str], moves: dict[str, Move], root: Path) -> str:
    indent, module = match["indent"], match["module"]
    groups: dict[str, list[str]] = {}
    changed = False
    for name, alias in _split_names(match["names"]):
        source, imported, local = module, name, alias
        if module in moves:
            source = destination(moves, module, name)
        elif f"{module}.{name}" in moves and not _exists(f"{module}.{name}", root):
            # ``from saga_local.aws import driver``: the module itself is imported; keep its local name.
            new = moves[f"{module}.{name}"].new
            if new is not None:
                source, imported = new.rsplit(".", 1)
                local = alias or (name if imported != name else None)
        changed = changed or (source, imported, local) != (module, name, alias)
        groups.setdefault(source, []).append(f"{imported} as {local}" if local else imported)
    if not changed:
        return match[0]
    lines = [f"{indent}from {source} import {', '.join(names)}" for source, names in groups.items()]
    lines[0] += match["tail"]
    return "\n".join(lines)


def _rewrite_dotted(text: str, moves: dict[str, Move], root: Path) -> str:
    def one(match: re.Match[str]) -> str:
        parts = match[0].split(".")
        for end in range(len(parts), 1, -1):
            module = ".".join(parts[:end])
            if module not in moves:
                continue
            rest = parts[end:]
            if rest:
                new = destination(moves, module, rest[0])
            else:
                new = moves[module].new or module
                if _exists(module, root):
                    return match[0]  # the old path holds a module again (what stayed after a split)
            return ".".join([new, *rest])
        return match[0]

    return _DOTTED.sub(one, text)


def _rewrite_paths(text: str, moves: dict[str, Move], data_files: dict[str, str], root: Path) -> str:
    paths = {
        old.replace(".", "/"): move.new.replace(".", "/")
        for old, move in moves.items()
        if move.new is not None and not _exists(old, root)
    }

    def one(match: re.Match[str]) -> str:
        found = match[0]
        if found in data_files:
            return data_files[found]
        stem, suffix = (found[:-3], ".py") if found.endswith(".py") else (found, "")
        return paths[stem] + suffix if stem in paths else found

    text = _PATH.sub(one, text)
    for old, new in data_files.items():
        text = text.replace(old, new)
        old_package, _, filename = old.rpartition("/")
        new_package = new.rpartition("/")[0]
        # pyproject.toml's package-data table: the file ships with the package it moved to.
        text = text.replace(
            f'"{old_package.replace("/", ".")}" = ["{filename}"]',
            f'"{new_package.replace("/", ".")}" = ["{filename}"]',
        )
    return text


def rewrite(
    text: str, moves: dict[str, Move] = MOVES, data_files: dict[str, str] = DATA_FILES, root: Path = ROOT
) -> str:
    """``text`` with every reference to an old module path, or to a name that left its module,
    pointing at where it lives now."""
    text = _FROM_IMPORT.sub(lambda m: _rewrite_from_import(m, moves, root), text)
    text = _rewrite_dotted(text, moves, root)
    return _rewrite_paths(text, moves, data_files, root)


def pending_moves(
    moves: dict[str, Move] = MOVES, data_files: dict[str, str] = DATA_FILES, root: Path = ROOT
) -> list[tuple[Path, Path]]:
    """Each (old file, new file) still to move: the old one exists and the new one does not yet."""
    pending = []
    for old, move in moves.items():
        if move.new is None:
            continue
        src, dst = module_file(old, root), root.joinpath(*move.new.split(".")).with_suffix(".py")
        if src.is_file() and not dst.exists():
            pending.append((src, dst))
    for old_path, new_path in data_files.items():
        src, dst = root / old_path, root / new_path
        if src.is_file() and not dst.exists():
            pending.append((src, dst))
    return pending


def _git(*args: str, root: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout  # noqa: S603, S607


def text_files(root: Path = ROOT) -> list[Path]:
    """The files scanned for references: git's tracked and new unignored text files."""
    listed = _git("ls-files", "--cached", "--others", "--exclude-standard", "-z", root=root).split("\0")
    found = []
    for name in sorted(set(listed)):
        path = root / name
        if not name or name in SKIPPED or not path.is_file() or path.is_symlink():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            found.append(path)
    return found


def _ensure_package(directory: Path, root: Path) -> None:
    while directory != root and not (directory / "__init__.py").exists():
        init = directory / "__init__.py"
        relative = directory.relative_to(root).as_posix()
        if relative not in PACKAGES:
            raise SystemExit(f"{relative}/ is a new package: give its docstring in PACKAGES")
        directory.mkdir(parents=True, exist_ok=True)
        init.write_text(PACKAGES[relative], encoding="utf-8")
        _git("add", init.relative_to(root).as_posix(), root=root)
        directory = directory.parent


def apply(root: Path = ROOT) -> list[Path]:
    """Move what is due and rewrite every reference; returns the files rewritten."""
    for src, dst in pending_moves(root=root):
        _ensure_package(dst.parent, root)
        _git("mv", src.relative_to(root).as_posix(), dst.relative_to(root).as_posix(), root=root)
        print(f"moved {src.relative_to(root)} -> {dst.relative_to(root)}")
    changed = []
    for path in text_files(root):
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, root=root)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
            print(f"rewrote {path.relative_to(root)}")
    python = [str(p) for p in changed if p.suffix == ".py"]
    if python:
        # A rewritten import can land out of isort's order or past the line length: let ruff put it
        # where ruff check and ruff format expect it, and nothing else.
        ruff = root / ".venv" / "bin" / "ruff"
        command = str(ruff) if ruff.exists() else "ruff"
        fix = [command, "check", "--quiet", "--select", "I", "--fix", *python]
        subprocess.run(fix, cwd=root, check=False)  # noqa: S603
        subprocess.run([command, "format", "--quiet", *python], cwd=root, check=False)  # noqa: S603
    return changed


def check(root: Path = ROOT) -> list[str]:
    """What is still due, one line each: a move not made, a reference to an old path."""
    problems = [
        f"not moved yet: {s.relative_to(root)} -> {d.relative_to(root)}" for s, d in pending_moves(root=root)
    ]
    for path in text_files(root):
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, root=root)
        if new == text:
            continue
        relative = path.relative_to(root)
        for line in difflib.unified_diff(text.splitlines(), new.splitlines(), lineterm="", n=0):
            if line.startswith("-") and not line.startswith("---"):
                problems.append(f"{relative}: {line[1:].strip()}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Apply the moves, or with ``--check`` list what is still due (exit 1 if anything is)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a move or rewrite is due"
    )
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    apply()
    return 0


if __name__ == "__main__":
    sys.exit(main())
