"""A cold start as users feel it: each function's handler import and first invocation, from its
``sam build`` package, and one cold order's four functions in a row, against the one Lambda a team would
otherwise write, side by side in one run. Prints one JSON object.

What is measured, in a fresh ``python3.13`` process per function per round, CPU time of that process:

* ``import_cpu_ms``: from ``import handlers.<module>`` to the handler being importable, its module-level
  objects built (Logger, Metrics, Tracer, configuration);
* ``invoke_cpu_ms``: the first invocation, right after: the clients built, the secret read, the first
  DynamoDB, Step Functions, SQS, EventBridge and Stripe calls (the client side: the endpoints are moto's
  server and the Stripe emulator on loopback, in the bench's own process: bench/cold_invocations.py);
* ``cpu_ms``: the two together, what a cold start adds to Lambda's own work (download, unpack, runtime
  start), once per new execution environment. Interpreter start-up is the same for every row and is
  left out.

Each round walks one order through Start, Claim, Charge and Mark Complete, each function in its own
fresh process, the output of one the input of the next, as on a cold stack: ``cold_order`` is the
median over rounds of the four functions' sum. Every other function gets a first invocation that does
its usual work (a release, a stream record relayed, a sweep, a webhook received and consumed).

The yardstick, ``alternative``: ``bench/bare/idempotent_charge_handler.py``, Powertools' ``@idempotent``
on DynamoDB charging through the ``stripe`` SDK, with Logger, Metrics and Tracer, charging an order of
its own in each round:

* ``plain``: as a plain ``sam build`` ships it, with sam's Python builder: no bytecode, so every module
  is compiled from source at each cold start (``/var/task`` is read-only). The goal: one cold order
  at most ``GOAL_ORDER_X_ALTERNATIVE`` times its cold invocation, each function at most
  ``GOAL_FUNCTION_X_ALTERNATIVE``;
* ``bytecode``: the same handler built the way the functions are (``bench/bare/Makefile`` includes
  functions/Makefile): like for like.

``levers``: the Claim function again, each round, with one of the cold-start levers undone at a time
(``LEVERS``: the full botocore data, boto3 imported, tracing off), reported as the least of the rounds
against the shipped function's least (a lever is worth tens of milliseconds, and a busy machine only
ever adds to a process's CPU time). ``consumer_levers``: the webhook consumer again, answering the same
doorbell, with what one of its own levers saved imported before its handler (``CONSUMER_LEVERS``:
Powertools' batch utility, the PaymentIntent's object classes), against the consumer's least.

``baseline`` adds a bare Powertools handler (``bench/bare/bare_powertools_handler.py``: Logger, Metrics,
Tracer, nothing else), built both ways: what Powertools alone costs.

(``--bare``, default ``.aws-sam/bench-bare``, made from ``bench/bare/template.yaml``; ``--functions``,
default ``.aws-sam/build-check``, made by ``make sam-build``. ``make bench`` builds both first.)

How the process looks like Lambda's: ``-S`` keeps the interpreter's own site-packages off the path, so
only the package and the standard library are importable (as ``/var/task`` and the runtime); no bytecode
is written (``PYTHONDONTWRITEBYTECODE``), so a package without it compiles at every run, as in Lambda;
``LAMBDA_TASK_ROOT`` is set and the invocation carries a sampled ``_X_AMZN_TRACE_ID``, so the Tracer is
on, patches at import and records the invocation's subsegments, as in a deployed function (sent by UDP
to a daemon that is not there); the environment is the template's. An unmeasured first round warms the
operating system's file cache (Lambda's cache is warm for the runtime, not for the package: figures
here are a floor). Rounds take every row in turn, so machine noise spreads over all. On an x86_64
machine the arm64 packages' few C extensions (wrapt, charset_normalizer) do not load and their
pure-Python fallbacks are imported instead, for every row alike.

CPU time, not wall time, carries the ratios: an import is CPU-bound once the files are cached, and the
endpoints' answers are another process's work; on a shared machine the wall clock also counts the
time other processes held the core (``wall_ms`` is reported beside it).

Each row also says which heavy SDKs were loaded (``loaded``, after the invocation) and how many of the
package's modules it had to compile from source (``compiled_at_import``: 0 for a package with valid
bytecode).

Usage (from the repository root; ``make bench`` runs it)::

    .venv/bin/python bench/cold_start.py --python "$(command -v python3.13)" [--runs 5] [--pretty] \
        [--record PATH]

``--record PATH`` also writes the JSON object, with ``measured_on`` (bench/recording.py), to PATH: the
recorded figures docs/performance.md's cold-start tables are rendered from.

Timing belongs here, not in the tests: nothing asserts on these numbers.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from cold_invocations import (  # type: ignore[import-not-found]  # bench/, this script's
    COLD_ORDER,
    Endpoints,
    alternative_event,
    cold_order,
    new_order,
    other_functions,
    token_of,
)
from recording import record  # type: ignore[import-not-found]  # bench/, this script's

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_BUILD = ROOT / ".aws-sam" / "build-check"
BARE_BUILD = ROOT / ".aws-sam" / "bench-bare"
BARE_DIR = ROOT / "bench" / "bare"
#: The yardstick's two builds in bench/bare/template.yaml, by the row they give.
ALTERNATIVE_ROWS = {"plain": "AlternativePlainFunction", "bytecode": "AlternativeBytecodeFunction"}
#: The bare Powertools handler's two builds, likewise.
BARE_ROWS = {"bare_plain": "BarePlainFunction", "bare_bytecode": "BareBytecodeFunction"}
#: The goal: one cold order's four functions together at most the alternative's one cold invocation
#: (plain sam build), and each function at most this share of it.
GOAL_ORDER_X_ALTERNATIVE = 1.0
GOAL_FUNCTION_X_ALTERNATIVE = 0.3
#: What each lever is measured on: the Claim function, as shipped and with one lever undone.
LEVER_FUNCTION = "ClaimOrderFunction"
#: Lever -> what undoing it means, for the record.
LEVERS = {
    "botocore_data_untrimmed": "the package with botocore's data for every service, as pip installs it",
    "boto3_imported": "boto3 imported with the handler, as when the clients were boto3's",
    "tracing_off": "POWERTOOLS_TRACE_DISABLED=true: no X-Ray SDK imported, nothing patched or sent",
}
#: The webhook consumer's own levers, measured on it the same way (its doorbell answered again): each
#: puts back, by importing them before the handler, the modules a lever saved -> (what that means, the
#: modules).
CONSUMER_LEVER_FUNCTION = "WebhookConsumerFunction"
CONSUMER_LEVERS = {
    "batch_utility_imported": (
        "Powertools' batch utility imported, as when the SQS functions used it",
        "aws_lambda_powertools.utilities.batch",
    ),
    "payment_intent_objects": (
        "the PaymentIntent's object classes imported, as the SDK's typed read imports them",
        "stripe._payment_intent stripe._object_classes",
    ),
}
#: SDKs whose presence after the first invocation says what a function pays for at every cold start.
WATCHED = ("stripe", "aws_xray_sdk", "boto3", "botocore", "requests", "asyncio")
#: Marks the child's report among the handler's own log lines (stdout, as in Lambda).
REPORT = "COLD-START-REPORT "
#: A sampled trace header, as Lambda sets it for an invocation of a function with active tracing.
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"

#: Runs in the child: time the import, then the first invocation of the event read from stdin.
CHILD = """
import importlib, json, os, sys, time
REPORT = REPORT_MARK
module, attribute, package = sys.argv[1:4]
event = json.loads(sys.stdin.read())
class Context:
    function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + function_name
    memory_limit_in_mb = 256
    aws_request_id = "cold-start-bench-request"
    log_group_name = "/aws/lambda/" + function_name
    log_stream_name = "cold-start-bench"
    def get_remaining_time_in_millis(self):
        return 10000
cpu, wall = time.process_time(), time.perf_counter()
for name in os.environ.get("COLD_START_PRELOAD", "").split():
    importlib.import_module(name)
handler = getattr(importlib.import_module(module), attribute)
import_cpu, import_wall = time.process_time() - cpu, time.perf_counter() - wall
os.environ["_X_AMZN_TRACE_ID"] = sys.argv[4]
cpu, wall = time.process_time(), time.perf_counter()
result = handler(event, Context())
invoke_cpu, invoke_wall = time.process_time() - cpu, time.perf_counter() - wall
package = os.path.realpath(package) + os.sep
ours = [m for m in list(sys.modules.values())
        if (getattr(m, "__file__", None) or "").startswith(package) and m.__file__.endswith(".py")]
compiled = [m.__name__ for m in ours if not (m.__cached__ and os.path.exists(m.__cached__))]
print(REPORT + json.dumps({"import_cpu_ms": import_cpu * 1000, "import_wall_ms": import_wall * 1000,
                  "invoke_cpu_ms": invoke_cpu * 1000, "invoke_wall_ms": invoke_wall * 1000,
                  "modules": len(ours), "compiled": len(compiled),
                  "loaded": [n for n in sys.argv[5:] if n in sys.modules], "result": result}))
""".replace("REPORT_MARK", repr(REPORT))


def built_functions(build_dir: Path) -> dict[str, tuple[Path, str]]:
    """Function logical id -> (its package directory, its handler), from sam's built template."""
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
        found[logical_id] = (package, str(handler))
    return found


def lambda_like_environment(function_name: str) -> dict[str, str]:
    """Lambda's own variables that change what an import does, and nothing of this machine's Python."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_LAMBDA_FUNCTION_NAME": function_name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
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
    """The yardsticks ship the functions' own versions of what they share, or the bench stops (boto3,
    which Powertools' idempotency and parameters utilities need, the functions do not ship)."""
    ours = pins(ROOT / "functions" / "requirements.txt")
    bare = pins(BARE_DIR / "requirements.txt")
    drift = {
        name: (version, ours[name])
        for name, version in bare.items()
        if name in ours and ours[name] != version
    }
    if drift:
        raise SystemExit(f"error: bench/bare/requirements.txt pins differ from functions/': {drift}")


class Bench:
    """Runs rows in fresh processes and keeps their reports, round by round."""

    def __init__(
        self, python: str, rows: dict[str, tuple[Path, str]], environments: dict[str, dict[str, str]]
    ) -> None:
        self.python = python
        self.rows = rows
        self.environments = environments
        self.reports: dict[str, list[dict[str, Any]]] = {name: [] for name in rows}
        self.keep = True

    def invoke(self, name: str, event: dict[str, Any]) -> Any:
        """One fresh interpreter: import ``name``'s handler from its package, invoke it with ``event``."""
        package, handler = self.rows[name]
        module, attribute = handler.rsplit(".", 1)
        env = {
            **lambda_like_environment(name),
            **self.environments[name],
            "PYTHONPATH": str(package),
            # How Powertools' Tracer and the X-Ray SDK know they run in Lambda (else they trace nothing).
            "LAMBDA_TASK_ROOT": str(package),
        }
        completed = subprocess.run(  # noqa: S603 - fixed argv: the given interpreter, our own module names
            [self.python, "-S", "-c", CHILD, module, attribute, str(package), TRACE_HEADER, *WATCHED],
            input=json.dumps(event),
            env=env,
            capture_output=True,
            text=True,
            check=False,
            cwd=package,
        )
        lines = [line for line in completed.stdout.splitlines() if line.startswith(REPORT)]
        if completed.returncode != 0 or not lines:
            raise SystemExit(
                f"error: {name} ({handler} from {package}) failed:\n{completed.stderr[-3000:]}"
                f"\n{completed.stdout[-2000:]}"
            )
        report: dict[str, Any] = json.loads(lines[-1].removeprefix(REPORT))
        if self.keep:
            self.reports[name].append(report)
        return report.pop("result")

    def round(self, endpoints: Endpoints) -> None:
        """Every row once: the yardsticks, one cold order, every other function, then the levers."""
        for name in (*ALTERNATIVE_ROWS, *BARE_ROWS):
            self.invoke(name, alternative_event() if name in ALTERNATIVE_ROWS else {})
        done = cold_order(self.invoke)
        doorbell = other_functions(endpoints, self.invoke, done["order"], done["charge"]["chargeId"])
        for lever in LEVERS:
            order = {**new_order("LEVER"), "paymentAttempt": "initial"}
            self.invoke(lever, {"order": order, "claimToken": token_of(order["orderId"])})
        for lever in CONSUMER_LEVERS:
            self.invoke(lever, doorbell)  # the consumer's first invocation again: the same read, the same row


def variant(package: Path, scratch: Path, name: str, replaced: dict[str, Path]) -> Path:
    """``package`` as links in ``scratch/name``, each path of ``replaced`` (relative to the package)
    linked to another file or folder instead, or added where the package has none."""
    copy = scratch / name
    copy.mkdir()
    for entry in package.iterdir():
        (copy / entry.name).symlink_to(entry)
    for relative, source in replaced.items():
        *folders, leaf = Path(relative).parts
        where = copy
        for folder in folders:
            where = where / folder
            if where.is_symlink():  # a linked folder to change inside: link its entries one by one
                linked = where.resolve()
                where.unlink()
                where.mkdir()
                for entry in linked.iterdir():
                    (where / entry.name).symlink_to(entry)
        target = where / leaf
        if target.is_symlink():
            target.unlink()
        target.symlink_to(source)
    return copy


def summarize(reports: list[dict[str, Any]], handler: str) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(float(statistics.median(report[key] for report in reports)), 1)

    cold = [report["import_cpu_ms"] + report["invoke_cpu_ms"] for report in reports]
    last = reports[-1]
    return {
        "handler": handler,
        "cpu_ms": round(statistics.median(cold), 1),
        "cpu_ms_range": [round(min(cold), 1), round(max(cold), 1)],
        "import_cpu_ms": median("import_cpu_ms"),
        "invoke_cpu_ms": median("invoke_cpu_ms"),
        "wall_ms": round(statistics.median(r["import_wall_ms"] + r["invoke_wall_ms"] for r in reports), 1),
        "modules": last["modules"],
        "compiled_at_import": last["compiled"],
        "loaded": last["loaded"],
    }


def lever_rows(results: dict[str, Any], function: str, levers: dict[str, str]) -> dict[str, Any]:
    """Each lever's row taken out of ``results``, against ``function``'s as shipped."""
    shipped = results[function]["cpu_ms_range"][0]
    rows: dict[str, Any] = {"function": function, "shipped_least_cpu_ms": shipped}
    for lever, undone in levers.items():
        row = results.pop(lever)
        least = row["cpu_ms_range"][0]
        rows[lever] = {
            "undone": undone,
            "cpu_ms": row["cpu_ms"],
            "import_cpu_ms": row["import_cpu_ms"],
            "invoke_cpu_ms": row["invoke_cpu_ms"],
            "x_alternative": row["x_alternative"],
            "least_cpu_ms": least,
            # The least of the rounds, against the shipped function's least: a lever's effect is tens of
            # milliseconds, and a busy machine only ever adds to a process's CPU time.
            "least_against_shipped_ms": round(least - shipped, 1),
            "loaded": row["loaded"],
        }
    return rows


def python_version(python: str) -> str:
    completed = subprocess.run(  # noqa: S603 - fixed argv
        [python, "-c", "import platform; print(platform.python_version(), platform.machine())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return completed.stdout.strip()


def cold_order_row(reports: dict[str, list[dict[str, Any]]], plain: float) -> dict[str, Any]:
    """The four functions of one order, summed round by round: the median, and its share of each."""
    rounds = len(reports[COLD_ORDER[0]])
    sums = [
        sum(reports[name][i]["import_cpu_ms"] + reports[name][i]["invoke_cpu_ms"] for name in COLD_ORDER)
        for i in range(rounds)
    ]
    imports = [sum(reports[name][i]["import_cpu_ms"] for name in COLD_ORDER) for i in range(rounds)]
    cpu = round(statistics.median(sums), 1)
    return {
        "functions": list(COLD_ORDER),
        "cpu_ms": cpu,
        "cpu_ms_range": [round(min(sums), 1), round(max(sums), 1)],
        "import_cpu_ms": round(statistics.median(imports), 1),
        "x_alternative": round(cpu / plain, 2),
    }


def source_commit() -> str:
    """The commit the functions were built from (``+dirty`` when functions/ or template.yaml had changes)."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run(  # noqa: S603 - fixed argv
        [*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(  # noqa: S603 - fixed argv
        [*git, "status", "--porcelain", "--", "functions", "template.yaml"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{head or 'unknown'}{'+dirty' if dirty else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--python", default="python3.13", help="the runtime's Python (default python3.13)")
    parser.add_argument("--runs", type=int, default=5, help="measured rounds (default 5)")
    parser.add_argument("--functions", type=Path, default=FUNCTIONS_BUILD, help="sam build of template.yaml")
    parser.add_argument("--bare", type=Path, default=BARE_BUILD, help="sam build of bench/bare/template.yaml")
    parser.add_argument("--pretty", action="store_true", help="indent the JSON (default: one line)")
    parser.add_argument(
        "--record", type=Path, metavar="PATH", help="also write the result, and the machine's facts, to PATH"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="cold-start-") as scratch:
        output = run(args, Path(scratch))
    if args.record is not None:
        record(args.record, output)
    print(json.dumps(output, indent=2 if args.pretty else None))
    return 0


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """Every round, and the figures they give."""
    version = python_version(args.python)
    if not version.startswith("3.13."):
        raise SystemExit(f"error: {args.python} is Python {version}; the functions' runtime is python3.13")
    check_bare_pins()
    bare = built_functions(args.bare.resolve())
    functions = built_functions(args.functions.resolve())
    rows = {row: bare[logical_id] for row, logical_id in {**ALTERNATIVE_ROWS, **BARE_ROWS}.items()}
    rows.update(sorted(functions.items()))
    package, handler = functions[LEVER_FUNCTION]
    # What the package held before: botocore's data for every service, boto3 and s3transfer. The plain
    # build of the alternative has them, of the same pinned versions.
    plain = bare[ALTERNATIVE_ROWS["plain"]][0]
    untrimmed = variant(
        package, scratch, "botocore-data-untrimmed", {"botocore/data": plain / "botocore" / "data"}
    )
    with_boto3 = variant(package, scratch, "boto3", {name: plain / name for name in ("boto3", "s3transfer")})
    rows.update(
        {
            "botocore_data_untrimmed": (untrimmed, handler),
            "boto3_imported": (with_boto3, handler),
            "tracing_off": (package, handler),
        }
    )
    rows.update(dict.fromkeys(CONSUMER_LEVERS, functions[CONSUMER_LEVER_FUNCTION]))
    with Endpoints() as endpoints:
        environments = {name: endpoints.function_environment(name) for name in functions}
        environments.update({name: endpoints.alternative_environment() for name in ALTERNATIVE_ROWS})
        environments.update({name: endpoints.yardstick_environment() for name in BARE_ROWS})
        claim = environments[LEVER_FUNCTION]
        environments["botocore_data_untrimmed"] = claim
        environments["boto3_imported"] = {**claim, "COLD_START_PRELOAD": "boto3"}
        environments["tracing_off"] = {**claim, "POWERTOOLS_TRACE_DISABLED": "true"}
        consumer = environments[CONSUMER_LEVER_FUNCTION]
        for lever, (_, modules) in CONSUMER_LEVERS.items():
            environments[lever] = {**consumer, "COLD_START_PRELOAD": modules}
        bench = Bench(args.python, rows, environments)
        bench.keep = False  # the first round warms the file cache
        bench.round(endpoints)
        bench.keep = True
        for _ in range(args.runs):
            bench.round(endpoints)
    results = {name: summarize(bench.reports[name], rows[name][1]) for name in rows}
    plain = results["plain"]["cpu_ms"]
    for row in results.values():
        row["x_alternative"] = round(row["cpu_ms"] / plain, 2)
    order = cold_order_row(bench.reports, plain)
    levers = lever_rows(results, LEVER_FUNCTION, LEVERS)
    consumer_levers = lever_rows(
        results, CONSUMER_LEVER_FUNCTION, {lever: undone for lever, (undone, _) in CONSUMER_LEVERS.items()}
    )
    worst = max(functions, key=lambda name: results[name]["x_alternative"])
    output = {
        "benchmark": "cold_start",
        "python": version,
        "commit": source_commit(),
        "runs": args.runs,
        "measure": (
            "import + first invocation of the handler in a fresh process: median CPU ms, ratios of CPU ms"
        ),
        "alternative": {name: results.pop(name) for name in ALTERNATIVE_ROWS},
        "baseline": {name: results.pop(name) for name in BARE_ROWS},
        "functions": results,
        "cold_order": order,
        "levers": levers,
        "consumer_levers": consumer_levers,
        "goal": {
            "order_x_alternative_at_most": GOAL_ORDER_X_ALTERNATIVE,
            "function_x_alternative_at_most": GOAL_FUNCTION_X_ALTERNATIVE,
            "order": order["x_alternative"],
            "worst_function": worst,
            "worst": results[worst]["x_alternative"],
            "met": order["x_alternative"] <= GOAL_ORDER_X_ALTERNATIVE
            and results[worst]["x_alternative"] <= GOAL_FUNCTION_X_ALTERNATIVE,
        },
    }
    return output


if __name__ == "__main__":
    sys.exit(main())
