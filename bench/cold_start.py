"""Cold start, offline: how long each handler takes to import, and how big each function's package is.

Import time is what a cold start adds on top of Lambda's own work (download, unpack, runtime start):
every module-level import and object of the handler runs once per new container. For each handler
module in ``functions/handlers`` (``runtime`` aside: every handler imports it), and for a bare
Powertools handler (``bench/bare_powertools_handler.py``: Logger, Metrics, Tracer and nothing else),
this runs ``python -X importtime -c "import <module>"`` in a fresh interpreter several times and
reports the median of the import's cumulative time, its ratio to the bare handler, and the packages
whose own (self) import time weighs most.

The environment looks like Lambda's where it matters: ``AWS_LAMBDA_FUNCTION_NAME`` is set, so the
Tracer is enabled and patches the AWS SDK at import, as it does in a deployed function; the Powertools
service and namespace are the template's. One unmeasured run first writes the ``.pyc`` caches (pip
compiles installed packages when it installs them, in Lambda too).

Package size: the unpacked and zipped size of each function under ``.aws-sam/build-check`` (made by
``make sam-build``) when it exists; otherwise the package is built here, into a temporary directory,
as Lambda gets it: ``functions/requirements.txt`` for arm64 / CPython 3.13, plus ``functions/``.

Usage (from the repository root)::

    .venv/bin/python bench/cold_start.py [--runs 7] [--python PATH --packages DIR] [--json]

``--python``/``--packages`` time the imports under another interpreter (the runtime's python3.13, say)
with its packages installed in ``DIR`` (``pip install --target DIR -r functions/requirements.txt``).
``--as-packaged .aws-sam/build-check/<Function>`` imports the built package instead, writing no
bytecode: ``sam build`` ships no ``.pyc`` and ``/var/task`` is read-only, so Lambda compiles every
module of the package at each cold start, which a warm ``__pycache__`` hides.
Timing belongs here, not in the tests: nothing asserts on these numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = ROOT / "functions"
HANDLERS_DIR = FUNCTIONS_DIR / "handlers"
BENCH_DIR = ROOT / "bench"
BUILD_DIR = ROOT / ".aws-sam" / "build-check"
BARE = "bare_powertools_handler"
#: Handler modules that are not handlers: imported by every handler, measured through them.
NOT_HANDLERS = {"__init__", "runtime"}


@dataclass
class Profile:
    """One import, measured: cumulative µs of the import, wall ms of the process, self µs by package."""

    import_us: int
    wall_ms: float
    self_us_by_package: dict[str, int] = field(default_factory=dict)


def handler_modules() -> list[str]:
    """``handlers.<name>`` for every handler module (``runtime`` and ``__init__`` aside)."""
    return sorted(
        f"handlers.{path.stem}" for path in HANDLERS_DIR.glob("*.py") if path.stem not in NOT_HANDLERS
    )


def lambda_like_environment(packages: Path | None, as_packaged: Path | None = None) -> dict[str, str]:
    """The parent's environment, with Lambda's variables that change what an import does.

    ``as_packaged``: import the handlers from a built function package (``sam build`` output) instead of
    ``functions/``, and write no bytecode, as in Lambda, where ``/var/task`` is read-only and the
    package ships no ``.pyc``: every module of the package is compiled from source at each cold start.
    """
    from saga_local.template import load_template  # the bench runs from the project's venv

    variables = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "POWERTOOLS_"))}
    code = [str(as_packaged)] if as_packaged else [str(FUNCTIONS_DIR)]
    path = [*code, str(BENCH_DIR)] + ([str(packages)] if packages else [])
    env.update(
        PYTHONPATH=os.pathsep.join(path),
        AWS_LAMBDA_FUNCTION_NAME="cold-start-bench",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        POWERTOOLS_SERVICE_NAME=str(variables["POWERTOOLS_SERVICE_NAME"]),
        POWERTOOLS_METRICS_NAMESPACE=str(variables["POWERTOOLS_METRICS_NAMESPACE"]),
    )
    if as_packaged:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def parse_importtime(stderr: str, startup: set[str]) -> tuple[int, dict[str, int]]:
    """(cumulative µs of what ``-c`` imported, self µs by top-level package) from ``-X importtime``.

    Lines read ``import time: <self> | <cumulative> | <indent><module>``; a top-level import has one
    space of indent. Children print before their parent, so the import's own lines are those after
    the last top-level line of interpreter startup (``startup``: the top-level names of ``-c pass``).
    """
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        own, cumulative, module = line[len("import time:") :].split("|", 2)
        depth = len(module) - len(module.lstrip(" "))
        rows.append((int(own), int(cumulative), module.strip(), depth))
    last_startup = max(
        (index for index, (_, _, name, depth) in enumerate(rows) if depth == 1 and name in startup),
        default=-1,
    )
    ours = rows[last_startup + 1 :]
    total = sum(cumulative for _, cumulative, _, depth in ours if depth == 1)
    by_package: dict[str, int] = defaultdict(int)
    for own_us, _, name, _ in ours:
        by_package[name.split(".", 1)[0]] += own_us
    return total, dict(by_package)


def run_import(python: str, statement: str, env: dict[str, str]) -> tuple[str, float]:
    """Run ``python -X importtime -c statement`` fresh; (stderr, wall ms)."""
    started = time.perf_counter()
    completed = subprocess.run(  # noqa: S603 - fixed argv: our interpreter, our module names
        [python, "-X", "importtime", "-c", statement],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    wall_ms = (time.perf_counter() - started) * 1000
    if completed.returncode != 0:
        raise RuntimeError(f"{statement!r} failed under {python}:\n{completed.stderr[-2000:]}")
    return completed.stderr, wall_ms


def startup_modules(python: str, env: dict[str, str]) -> tuple[set[str], float]:
    """Top-level modules the interpreter imports before ``-c`` runs, and its median bare start (ms)."""
    names: set[str] = set()
    walls = []
    for _ in range(3):
        stderr, wall_ms = run_import(python, "pass", env)
        walls.append(wall_ms)
        for line in stderr.splitlines():
            if line.startswith("import time:") and "imported package" not in line:
                name = line.split("|", 2)[2]
                if len(name) - len(name.lstrip(" ")) == 1:
                    names.add(name.strip())
    return names, statistics.median(walls)


def measure(
    python: str, modules: list[str], env: dict[str, str], startup: set[str], runs: int
) -> dict[str, list[Profile]]:
    """``runs`` profiles of each module, taken in turns so that a burst of machine noise spreads
    over every module instead of landing on one."""
    for module in modules:
        run_import(python, f"import {module}", env)  # writes the .pyc caches; not measured
    profiles: dict[str, list[Profile]] = {module: [] for module in modules}
    for _ in range(runs):
        for module in modules:
            stderr, wall_ms = run_import(python, f"import {module}", env)
            total, by_package = parse_importtime(stderr, startup)
            profiles[module].append(Profile(total, wall_ms, by_package))
    return profiles


def summarize(profiles: list[Profile], bare_start_ms: float) -> dict[str, Any]:
    packages = {name for profile in profiles for name in profile.self_us_by_package}
    return {
        "import_ms": statistics.median(p.import_us for p in profiles) / 1000,
        "import_ms_min": min(p.import_us for p in profiles) / 1000,
        "import_ms_max": max(p.import_us for p in profiles) / 1000,
        "process_ms": statistics.median(p.wall_ms for p in profiles) - bare_start_ms,
        "self_ms_by_package": {
            name: statistics.median(p.self_us_by_package.get(name, 0) for p in profiles) / 1000
            for name in packages
        },
    }


# -- package size ----------------------------------------------------------------------------------


def tree_size(root: Path) -> tuple[int, int]:
    """(bytes, files) under ``root``."""
    files = [path for path in root.rglob("*") if path.is_file()]
    return sum(path.stat().st_size for path in files), len(files)


def zipped_size(root: Path) -> int:
    """Bytes of ``root`` zipped with deflate, as ``sam package`` uploads it."""
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "package.zip"
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    zipped.write(path, path.relative_to(root))
        return archive.stat().st_size


def largest_entries(root: Path, top: int) -> list[tuple[str, int]]:
    """The ``top`` largest top-level entries (packages) of a function's package, in bytes."""
    sizes = []
    for entry in root.iterdir():
        size = tree_size(entry)[0] if entry.is_dir() else entry.stat().st_size
        sizes.append((entry.name, size))
    return sorted(sizes, key=lambda item: -item[1])[:top]


def build_package(target: Path) -> None:
    """What ``sam build`` puts in a function's package: requirements for arm64/3.13, then ``functions/``."""
    subprocess.run(  # noqa: S603 - fixed argv
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(target),
            "--platform",
            "manylinux2014_aarch64",
            "--implementation",
            "cp",
            "--python-version",
            "3.13",
            "--only-binary=:all:",
            "-r",
            str(FUNCTIONS_DIR / "requirements.txt"),
        ],
        check=True,
    )
    for entry in FUNCTIONS_DIR.iterdir():
        if entry.is_dir() and entry.name != "__pycache__":
            shutil.copytree(entry, target / entry.name, ignore=shutil.ignore_patterns("__pycache__"))


def package_sizes(build_dir: Path, top: int) -> tuple[str, dict[str, dict[str, Any]]]:
    """(where the packages came from, function -> sizes)."""
    functions = sorted(path for path in build_dir.iterdir() if path.is_dir()) if build_dir.is_dir() else []
    if functions:
        source = f"{build_dir.relative_to(ROOT)} (sam build)"
        packages = {path.name: path for path in functions}
        return source, {name: _sizes(path, top) for name, path in packages.items()}
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / "package"
        build_package(target)
        source = "built here: pip --target (manylinux2014_aarch64, cp313) + functions/ (one CodeUri for all)"
        return source, {"every function (one CodeUri)": _sizes(target, top)}


def _sizes(root: Path, top: int) -> dict[str, Any]:
    size, files = tree_size(root)
    return {
        "unpacked_kb": size / 1024,
        "zipped_kb": zipped_size(root) / 1024,
        "files": files,
        "largest_kb": {name: entry / 1024 for name, entry in largest_entries(root, top)},
    }


# -- report ----------------------------------------------------------------------------------------


def report(results: dict[str, Any]) -> str:
    timing = results["imports"]
    bare = timing[BARE]["import_ms"]
    width = max(len(name) for name in timing)
    out = [
        f"Import time in a fresh interpreter ({results['python']}), median of {results['runs']} runs, "
        "Tracer enabled as in Lambda",
        f"Code imported from {results['code']}",
        "",
        f"{'module':<{width}}  {'import ms':>9}  {'min-max':>13}  {'x bare':>6}  {'process ms':>10}  "
        "heaviest (self ms)",
    ]
    for name, row in timing.items():
        heavy = sorted(row["self_ms_by_package"].items(), key=lambda item: -item[1])[: results["top"]]
        out.append(
            f"{name:<{width}}  {row['import_ms']:>9.1f}  "
            f"{row['import_ms_min']:>6.1f}-{row['import_ms_max']:<6.1f}  {row['import_ms'] / bare:>6.2f}  "
            f"{row['process_ms']:>10.1f}  " + ", ".join(f"{pkg} {ms:.1f}" for pkg, ms in heavy)
        )
    out += [
        "",
        "process ms: wall time of 'python -c import <module>' minus that of 'python -c pass'.",
        "",
        f"Package size, from {results['packages_source']}",
        "",
    ]
    for name, row in results["packages"].items():
        largest = ", ".join(f"{entry} {kb:,.0f}" for entry, kb in row["largest_kb"].items())
        out.append(
            f"  {name:<28} unpacked {row['unpacked_kb']:>9,.0f} KB  zipped {row['zipped_kb']:>8,.0f} KB  "
            f"{row['files']:>5} files   largest (KB): {largest}"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=7, help="measured runs per module (default 7)")
    parser.add_argument("--python", default=sys.executable, help="interpreter to time (default: this one)")
    parser.add_argument("--packages", type=Path, help="directory holding --python's packages (pip --target)")
    parser.add_argument(
        "--as-packaged",
        type=Path,
        help="import from this built function package, without bytecode, as Lambda does "
        "(e.g. .aws-sam/build-check/ClaimOrderFunction, with --python python3.13 and --packages for boto3)",
    )
    parser.add_argument("--build-dir", type=Path, default=BUILD_DIR, help="sam build output to size")
    parser.add_argument("--top", type=int, default=5, help="heaviest packages to list")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    env = lambda_like_environment(args.packages, args.as_packaged)
    startup, bare_start_ms = startup_modules(args.python, env)
    profiles = measure(args.python, [BARE, *handler_modules()], env, startup, args.runs)
    imports = {module: summarize(runs, bare_start_ms) for module, runs in profiles.items()}
    source, packages = package_sizes(args.build_dir.resolve(), args.top)
    results = {
        "python": subprocess.run(  # noqa: S603 - fixed argv
            [args.python, "-c", "import platform; print(platform.python_version(), platform.machine())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip(),
        "runs": args.runs,
        "code": f"{args.as_packaged} (no bytecode, as in Lambda)" if args.as_packaged else "functions/",
        "top": args.top,
        "imports": imports,
        "packages_source": source,
        "packages": packages,
    }
    print(json.dumps(results, indent=2) if args.json else report(results), end="" if not args.json else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
