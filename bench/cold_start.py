"""Cold start as shipped: each function's handler import, from its ``sam build`` package, against a bare
Powertools handler, side by side in one run. Prints one JSON object.

What is measured: import-to-ready, the time from ``import handlers.<module>`` to the handler being
importable and its module-level objects built (Logger, Metrics, Tracer, clients' configuration), in a
fresh ``python3.13`` process, median of ``--runs``. That is what a cold start adds to Lambda's own work
(download, unpack, runtime start), once per new execution environment. Interpreter start-up is the same
for every row and is left out.

The rows, each imported from a package ``sam build`` made:

* every function of ``template.yaml``, as shipped (``--functions``, default ``.aws-sam/build-check``,
  made by ``make sam-build``: functions/Makefile, bytecode for python3.13 included);
* ``bare_plain``: ``bench/bare/bare_powertools_handler.py`` (Logger, Metrics, Tracer, nothing else) as a
  plain ``sam build`` ships it, with sam's Python builder: no bytecode, so every module is compiled
  from source at each cold start (``/var/task`` is read-only). The goal's yardstick: every function at
  most ``GOAL_X_BARE_PLAIN`` times it;
* ``bare_bytecode``: the same handler built the way the functions are (``bench/bare/Makefile`` includes
  functions/Makefile): what the saga costs on top of Powertools, like for like.

(``--bare``, default ``.aws-sam/bench-bare``, made from ``bench/bare/template.yaml``; ``make bench``
builds both directories first.)

How the process looks like Lambda's: ``-S`` keeps the interpreter's own site-packages off the path, so
only the package and the standard library are importable (as ``/var/task`` and the runtime); no bytecode
is written (``PYTHONDONTWRITEBYTECODE``), so a package without it compiles at every run, as in Lambda;
``LAMBDA_TASK_ROOT`` is set, so the Tracer is enabled and patches the AWS SDK, requests and the rest at
import, as in a deployed function; the Powertools service and namespace are the template's. An unmeasured
first round warms the operating system's file cache (Lambda's cache is warm for the runtime, not for the
package: figures here are a floor). Rounds take every row in turn, so machine noise spreads over all.
On an x86_64 machine the arm64 packages' few C extensions (wrapt, charset_normalizer) do not load and
their pure-Python fallbacks are imported instead, for every row alike.

Two clocks per row: ``cpu_ms`` (the process's CPU time during the import) and ``wall_ms``. An import is
CPU-bound once the files are cached, so on an idle machine the two agree; on a shared one the wall clock
also counts the time other processes held the core. Ratios (``x_bare_plain``, ``x_bare_bytecode``) are
of CPU time, so that they hold on a busy machine too.

Each row also says which heavy SDKs the import loaded (``loaded``) and how many of the package's modules
it had to compile from source (``compiled_at_import``: 0 for a package with valid bytecode).

Usage (from the repository root; ``make bench`` runs it)::

    .venv/bin/python bench/cold_start.py --python "$(command -v python3.13)" [--runs 7] [--pretty] \
        [--record PATH]

``--record PATH`` also writes the JSON object, with ``measured_on`` (bench/recording.py), to PATH: the
recorded figures docs/performance.md's cold-start table is rendered from.

Timing belongs here, not in the tests: nothing asserts on these numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from recording import record  # type: ignore[import-not-found]  # bench/, this script's

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_BUILD = ROOT / ".aws-sam" / "build-check"
BARE_BUILD = ROOT / ".aws-sam" / "bench-bare"
BARE_DIR = ROOT / "bench" / "bare"
#: The bare handler's two builds in bench/bare/template.yaml, by the row they give.
BARE_ROWS = {"bare_plain": "BarePlainFunction", "bare_bytecode": "BareBytecodeFunction"}
BARE_MODULE = "bare_powertools_handler"
#: The goal: every function at most half a bare Powertools handler as a plain sam build ships it.
GOAL_X_BARE_PLAIN = 0.5
#: SDKs whose presence after the import says what a function pays for at every cold start.
WATCHED = ("stripe", "aws_xray_sdk", "boto3", "botocore", "requests")

#: Runs in the child: time the import, then report what it loaded and what it had to compile.
CHILD = """
import importlib, json, os, sys, time
cpu, wall = time.process_time(), time.perf_counter()
importlib.import_module(sys.argv[1])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
package = os.path.realpath(sys.argv[2]) + os.sep
ours = [m for m in list(sys.modules.values())
        if (getattr(m, "__file__", None) or "").startswith(package) and m.__file__.endswith(".py")]
compiled = [m.__name__ for m in ours if not (m.__cached__ and os.path.exists(m.__cached__))]
print(json.dumps({"cpu_ms": cpu * 1000, "wall_ms": wall * 1000, "modules": len(ours),
                  "compiled": len(compiled), "loaded": [n for n in sys.argv[3:] if n in sys.modules]}))
"""


def built_functions(build_dir: Path) -> dict[str, tuple[Path, str]]:
    """Function logical id -> (its package directory, its handler module), from sam's built template."""
    from saga_local.template import load_template  # the bench runs from the project's venv

    template_path = build_dir / "template.yaml"
    if not template_path.is_file():
        raise SystemExit(f"error: no {template_path}: build first (make bench, or make sam-build)")
    template = load_template(template_path)
    handler_default = (template.get("Globals", {}).get("Function") or {}).get("Handler")
    found = {}
    for logical_id, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        properties = resource.get("Properties") or {}
        handler = properties.get("Handler") or handler_default
        package = build_dir / str(properties["CodeUri"])
        found[logical_id] = (package, str(handler).rsplit(".", 1)[0])
    return found


def lambda_like_environment() -> dict[str, str]:
    """Lambda's variables that change what an import does, and nothing of this machine's Python set-up."""
    from saga_local.template import Resolver, load_template

    variables = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_LAMBDA_FUNCTION_NAME": "cold-start-bench",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": str(variables["POWERTOOLS_SERVICE_NAME"]),
        # A !Sub of the stack's name in the template: the bench's own stack name here.
        "POWERTOOLS_METRICS_NAMESPACE": str(
            Resolver(pseudo={"AWS::StackName": "cold-start-bench"}).resolve(
                variables["POWERTOOLS_METRICS_NAMESPACE"]
            )
        ),
    }


def pins(path: Path) -> dict[str, str]:
    """``name -> version`` of a requirements file's ``name[extras]==version`` lines."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s#;]+).*", line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def check_bare_pins() -> None:
    """The baseline ships the functions' own versions of what it shares with them, or the bench stops."""
    ours = pins(ROOT / "functions" / "requirements.txt")
    bare = pins(BARE_DIR / "requirements.txt")
    drift = {name: (version, ours.get(name)) for name, version in bare.items() if ours.get(name) != version}
    if drift:
        raise SystemExit(f"error: bench/bare/requirements.txt pins differ from functions/': {drift}")


def import_once(python: str, package: Path, module: str, env: dict[str, str]) -> dict[str, Any]:
    """One fresh interpreter: import ``module`` from ``package``; the child's report.

    ``env`` may carry a ``PYTHONPATH`` already (``--runtime-site``): it goes after the package, where
    Lambda puts the runtime's own site-packages.
    """
    path = os.pathsep.join(filter(None, [str(package), env.get("PYTHONPATH")]))
    completed = subprocess.run(  # noqa: S603 - fixed argv: the given interpreter, our own module names
        [python, "-S", "-c", CHILD, module, str(package), *WATCHED],
        # LAMBDA_TASK_ROOT is how Powertools' Tracer knows it runs in Lambda (else it patches nothing).
        env={**env, "PYTHONPATH": path, "LAMBDA_TASK_ROOT": str(package)},
        capture_output=True,
        text=True,
        check=False,
        cwd=package,
    )
    if completed.returncode != 0:
        raise SystemExit(f"error: importing {module} from {package} failed:\n{completed.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return report


def measure(
    python: str, rows: dict[str, tuple[Path, str]], env: dict[str, str], runs: int
) -> dict[str, list[dict[str, Any]]]:
    """``runs`` reports per row, taken round by round after one unmeasured round."""
    for package, module in rows.values():
        import_once(python, package, module, env)
    reports: dict[str, list[dict[str, Any]]] = {name: [] for name in rows}
    for _ in range(runs):
        for name, (package, module) in rows.items():
            reports[name].append(import_once(python, package, module, env))
    return reports


def summarize(reports: list[dict[str, Any]], module: str) -> dict[str, Any]:
    cpu = [report["cpu_ms"] for report in reports]
    wall = [report["wall_ms"] for report in reports]
    last = reports[-1]
    return {
        "module": module,
        "cpu_ms": round(statistics.median(cpu), 1),
        "cpu_ms_range": [round(min(cpu), 1), round(max(cpu), 1)],
        "wall_ms": round(statistics.median(wall), 1),
        "modules": last["modules"],
        "compiled_at_import": last["compiled"],
        "loaded": last["loaded"],
    }


def python_version(python: str) -> str:
    completed = subprocess.run(  # noqa: S603 - fixed argv
        [python, "-c", "import platform; print(platform.python_version(), platform.machine())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return completed.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--python", default="python3.13", help="the runtime's Python (default python3.13)")
    parser.add_argument("--runs", type=int, default=7, help="measured runs per row (default 7)")
    parser.add_argument("--functions", type=Path, default=FUNCTIONS_BUILD, help="sam build of template.yaml")
    parser.add_argument("--bare", type=Path, default=BARE_BUILD, help="sam build of bench/bare/template.yaml")
    parser.add_argument(
        "--runtime-site",
        type=Path,
        help="what the runtime provides, after the package on the path: boto3 (pip --target) for a package "
        "that does not ship its own, as sam's Python builder made them before functions/Makefile",
    )
    parser.add_argument("--pretty", action="store_true", help="indent the JSON (default: one line)")
    parser.add_argument(
        "--record", type=Path, metavar="PATH", help="also write the result, and the machine's facts, to PATH"
    )
    args = parser.parse_args(argv)

    version = python_version(args.python)
    if not version.startswith("3.13."):
        raise SystemExit(f"error: {args.python} is Python {version}; the functions' runtime is python3.13")
    check_bare_pins()
    bare = built_functions(args.bare.resolve())
    functions = built_functions(args.functions.resolve())
    rows = {row: bare[logical_id] for row, logical_id in BARE_ROWS.items()}
    rows.update(sorted(functions.items()))
    env = lambda_like_environment()
    if args.runtime_site:
        env["PYTHONPATH"] = str(args.runtime_site.resolve())
    reports = measure(args.python, rows, env, args.runs)
    results = {name: summarize(reports[name], rows[name][1]) for name in rows}
    plain = results["bare_plain"]["cpu_ms"]
    same_way = results["bare_bytecode"]["cpu_ms"]
    for row in results.values():
        row["x_bare_plain"] = round(row["cpu_ms"] / plain, 2)
        row["x_bare_bytecode"] = round(row["cpu_ms"] / same_way, 2)
    worst = max(results[name]["x_bare_plain"] for name in functions)
    output = {
        "benchmark": "cold_start",
        "python": version,
        "runs": args.runs,
        "measure": "import-to-ready of the handler module in a fresh process: median ms, ratios of CPU ms",
        "baseline": {name: results.pop(name) for name in BARE_ROWS},
        "functions": results,
        "goal": {
            "x_bare_plain_at_most": GOAL_X_BARE_PLAIN,
            "worst": worst,
            "met": worst <= GOAL_X_BARE_PLAIN,
        },
    }
    if args.record is not None:
        record(args.record, output)
    print(json.dumps(output, indent=2 if args.pretty else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
