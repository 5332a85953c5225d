"""Mutation testing of the code that decides money: are the tests strong enough to notice a wrong gate?

Usage (from the repository root; ``make mutants`` runs it with the project's venv)::

    python scripts/mutants/run.py                 # every mutant of the catalogue
    python scripts/mutants/run.py --only 'asl-*'  # some (glob on ids; comma-separated)
    python scripts/mutants/run.py --list          # print the catalogue, run nothing
    python scripts/mutants/run.py --check         # does every mutant still apply? (no tests)

Each mutant (see ``catalogue/``) is one deliberate bug: an exact snippet of the claims package, payments.py, a
handler, replaced by another, or a transform of the state machine's Retry and Catch. The runner

1. copies the working tree (or ``--rev``'s files) to a temporary directory: the checkout itself is
   never written, so an interrupted run leaves nothing mutated behind, and others may keep editing;
2. checks that every mutant still applies (a snippet that is not in the file exactly once is an
   ERROR: the code moved on and the mutant must be rewritten, never skipped);
3. runs the mutants' tests on the unmutated copy (they must pass, or a "kill" means nothing);
4. for each mutant: writes it into the copy, runs its tests (``pytest -x``) with a timeout, and puts
   the original file back;
5. prints one row per mutant (killed, by which test; survived; equivalent, and why) and the kill
   rate: killed / (mutants - equivalent).

Exits 0 only when every mutant is killed or survives as declared equivalent; 1 when a mutant
survives, an "equivalent" one is killed (its reason was wrong) or a mutant could not be applied;
2 when the baseline fails.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from catalogue import ALL
from model import Mutant, MutantError

ROOT = Path(__file__).resolve().parents[2]
#: Never copied: version control, virtualenvs, build output, caches, local stack state.
_SKIP = {".git", ".venv", ".venv-sam", ".venv-checkov", "node_modules", ".aws-sam", ".saga", "build", "dist"}
_SKIP_PATTERNS = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", "*.egg-info")
PYTEST = ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider")

KILLED = "killed"
SURVIVED = "SURVIVED"
EQUIVALENT = "equivalent"
STALE = "STALE-EQUIVALENT"  # declared equivalent, yet a test killed it: the reason is wrong
ERROR = "ERROR"


@dataclass
class Result:
    id: str
    path: str
    description: str
    status: str
    seconds: float
    detail: str  # the killing test, the equivalence reason, or the error


@dataclass
class PytestRun:
    outcome: str  # passed, failed, timeout, error
    first_failure: str
    output: str
    seconds: float


class Runner:
    """Runs pytest in one copy of the tree; a Ctrl-C kills every pytest still running."""

    running: ClassVar[set[subprocess.Popen[str]]] = set()
    lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, root: Path, timeout: float) -> None:
        self.root = root
        self.timeout = timeout

    def pytest(self, tests: Sequence[str]) -> PytestRun:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
        started = time.monotonic()
        with subprocess.Popen(  # noqa: S603 - our own interpreter, our own arguments
            [sys.executable, *PYTEST, *tests],
            cwd=self.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        ) as process:
            with self.lock:
                self.running.add(process)
            try:
                output, _ = process.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                kill(process)
                output, _ = process.communicate()
                return PytestRun("timeout", f"timed out after {self.timeout:g} s", output, self.timeout)
            finally:
                with self.lock:
                    self.running.discard(process)
        seconds = time.monotonic() - started
        if process.returncode == 0:
            return PytestRun("passed", "", output, seconds)
        if process.returncode == 1:
            return PytestRun("failed", first_failure(output), output, seconds)
        # 2: interrupted or collection errors, 3: internal error, 4: usage, 5: no tests collected.
        return PytestRun("error", f"pytest exited {process.returncode}: {last_line(output)}", output, seconds)

    def run(self, mutant: Mutant) -> Result:
        target = self.root / mutant.path
        original = target.read_text()
        try:
            mutated = mutant.mutate(original)
        except MutantError as exc:
            return Result(mutant.id, mutant.path, mutant.description, ERROR, 0.0, str(exc))
        target.write_text(mutated)
        try:
            run = self.pytest(mutant.tests)
        finally:
            target.write_text(original)
        return judge(mutant, run)


def judge(mutant: Mutant, run: PytestRun) -> Result:
    def result(status: str, detail: str) -> Result:
        return Result(mutant.id, mutant.path, mutant.description, status, run.seconds, detail)

    if run.outcome == "error":
        return result(ERROR, run.first_failure)
    if run.outcome in ("failed", "timeout"):
        if mutant.equivalent:
            return result(STALE, f"declared equivalent, but killed by {run.first_failure}")
        return result(KILLED, run.first_failure)
    if mutant.equivalent:
        return result(EQUIVALENT, mutant.equivalent)
    return result(SURVIVED, "no test noticed: " + " ".join(mutant.tests))


def kill(process: subprocess.Popen[str]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def first_failure(output: str) -> str:
    """The first ``FAILED tests/...::test`` of pytest's short summary (``-ra``), without its message.

    Only the summary is read: captured log lines also start with ``ERROR``.
    """
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "short test summary info" in line), len(lines))
    for line in lines[start:]:
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ", 1)[0]
    return last_line(output)


def last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


# -- the copy of the tree -------------------------------------------------------------------------


def _ignore(directory: str, names: list[str]) -> set[str]:
    skipped = {name for name in names if any(fnmatch.fnmatch(name, p) for p in _SKIP_PATTERNS)}
    if Path(directory).resolve() == ROOT:
        skipped |= _SKIP & set(names)
    return skipped


@contextmanager
def workspaces(count: int, rev: str | None, keep: bool) -> Iterator[list[Path]]:
    """``count`` copies of the tree in a temporary directory, removed afterwards (unless ``keep``)."""
    base = Path(tempfile.mkdtemp(prefix="mutants-"))
    try:
        roots = []
        for index in range(count):
            root = base / f"tree-{index}"
            if rev is None:
                shutil.copytree(ROOT, root, ignore=_ignore, symlinks=True)
            else:
                root.mkdir()
                archive = subprocess.run(  # noqa: S603
                    ["git", "-C", str(ROOT), "archive", "--format=tar", rev],  # noqa: S607
                    check=True,
                    capture_output=True,
                )
                subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)  # noqa: S603, S607
            if (ROOT / "node_modules").is_dir():
                (root / "node_modules").symlink_to(ROOT / "node_modules")
            roots.append(root)
        yield roots
    finally:
        if keep:
            print(f"kept the copies in {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


# -- selection and report -------------------------------------------------------------------------


def select(mutants: Sequence[Mutant], only: str | None) -> list[Mutant]:
    ids = [m.id for m in mutants]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise SystemExit(f"duplicate mutant ids: {duplicates}")
    if not only:
        return list(mutants)
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    chosen = [m for m in mutants if any(fnmatch.fnmatchcase(m.id, p) for p in patterns)]
    if not chosen:
        raise SystemExit(f"no mutant id matches {only!r}")
    return chosen


def preflight(root: Path, mutants: Sequence[Mutant]) -> list[Result]:
    """Every mutant that cannot be applied to this tree, as an ERROR row (before any test runs)."""
    errors = []
    for mutant in mutants:
        try:
            mutant.mutate((root / mutant.path).read_text())
        except (MutantError, OSError) as exc:
            errors.append(Result(mutant.id, mutant.path, mutant.description, ERROR, 0.0, str(exc)))
    return errors


def report(results: Sequence[Result], seconds: float) -> str:
    lines = []
    width = max((len(r.id) for r in results), default=10)
    for r in results:
        lines.append(f"{r.id:<{width}}  {r.status:<16} {r.seconds:6.1f}s  {r.path}")
        lines.append(f"{'':<{width}}    {r.description}")
        label = {KILLED: "by", EQUIVALENT: "because", SURVIVED: "!!", STALE: "!!", ERROR: "!!"}[r.status]
        lines.append(f"{'':<{width}}    {label} {r.detail}")
    counts = {s: sum(r.status == s for r in results) for s in (KILLED, EQUIVALENT, SURVIVED, STALE, ERROR)}
    scored = len(results) - counts[EQUIVALENT]
    rate = 100.0 * counts[KILLED] / scored if scored else 100.0
    lines += [
        "",
        f"{len(results)} mutants: {counts[KILLED]} killed, {counts[EQUIVALENT]} equivalent, "
        f"{counts[SURVIVED]} survived, {counts[STALE]} wrongly declared equivalent, {counts[ERROR]} errors",
        f"kill rate: {counts[KILLED]}/{scored} non-equivalent mutants = {rate:.1f}%   ({seconds:.0f} s)",
    ]
    return "\n".join(lines)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--only", help="comma-separated globs on mutant ids (default: all)")
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    parser.add_argument("--check", action="store_true", help="check that every mutant applies; run nothing")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once, one tree copy each")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's tests")
    parser.add_argument("--rev", help="test this git revision's files instead of the working tree")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--keep", action="store_true", help="keep the tree copies (to debug a mutant)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    return parser.parse_args(argv)


def run_all(mutants: Sequence[Mutant], roots: Sequence[Path], timeout: float) -> list[Result]:
    runners = [Runner(root, timeout) for root in roots]
    free = list(runners)
    free_lock = threading.Lock()
    by_id: dict[str, Result] = {}

    def one(mutant: Mutant) -> Result:
        with free_lock:
            runner = free.pop()
        try:
            return runner.run(mutant)
        finally:
            with free_lock:
                free.append(runner)

    with ThreadPoolExecutor(max_workers=len(runners)) as pool:
        futures = {pool.submit(one, m): m for m in mutants}
        try:
            for future in as_completed(futures):
                result = future.result()
                by_id[result.id] = result
                print(f"  {result.status:<16} {result.id}", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            with Runner.lock:
                for process in list(Runner.running):
                    kill(process)
            raise
    return [by_id[m.id] for m in mutants]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    mutants = select(ALL, args.only)
    if args.list:
        for m in mutants:
            suffix = f"   [equivalent: {m.equivalent}]" if m.equivalent else ""
            print(f"{m.id:<28} {m.path}\n{'':<28} {m.description}{suffix}\n{'':<28} {' '.join(m.tests)}")
        return 0
    if args.check:
        errors = preflight(ROOT, mutants)
        for r in errors:
            print(f"{r.id}: {r.path}: {r.detail}")
        print(f"{len(mutants) - len(errors)}/{len(mutants)} mutants apply to the working tree")
        return 1 if errors else 0
    started = time.monotonic()
    with workspaces(max(1, args.jobs), args.rev, args.keep) as roots:
        errors = preflight(roots[0], mutants)
        failing = {r.id for r in errors}
        runnable = [m for m in mutants if m.id not in failing]
        if runnable and not args.no_baseline:
            tests = sorted({t for m in runnable for t in m.tests})
            print(f"baseline: {len(tests)} test paths on the unmutated tree", file=sys.stderr, flush=True)
            baseline = Runner(roots[0], args.timeout * 4).pytest(tests)
            if baseline.outcome != "passed":
                print(baseline.output[-6000:], file=sys.stderr)
                print(f"error: the tests fail without any mutant ({baseline.first_failure})", file=sys.stderr)
                return 2
        print(f"running {len(runnable)} mutants ({len(errors)} do not apply)", file=sys.stderr, flush=True)
        done = {r.id: r for r in run_all(runnable, roots, args.timeout) + errors}
    results = [done[m.id] for m in mutants]
    print(report(results, time.monotonic() - started))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0 if all(r.status in (KILLED, EQUIVALENT) for r in results) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the checkout was never modified; the copies are removed", file=sys.stderr)
        sys.exit(130)
