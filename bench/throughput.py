"""Orders per second through the local stack, against the bare engine, side by side in one run.

    python bench/throughput.py [--orders 300] [--concurrency 1 4]

For each concurrency C:
* **saga**: C concurrent SQS pollers feeding the real start Lambda, the real ASL and the real
  handlers (in-process runtime), the Stripe emulator, the outcome relay; each order delivered once.
* **bare engine**: the same moto Step Functions running a state machine with the same states
  (three Lambda tasks, a Choice, a Pass) whose Lambdas return at once, C concurrent starters.
The ratio saga/bare is what our code, moto's other services and the provider round trip cost on
top of the engine.

stdout is one JSON object (``"benchmark": "throughput"``) and nothing else: the handlers' log and
metric lines (Powertools prints EMF to stdout) go to /dev/null, at the file descriptor, so that no
thread's print reaches it. Timings on a shared 2-core machine are noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from saga_local.aws import moto_adapter
from saga_local.aws.embedded import EmbeddedStack
from saga_local.aws.moto_adapter import Invocation
from saga_local.commands import simulate

if TYPE_CHECKING:
    from collections.abc import Iterator


def bare_definition(function_arn: str) -> str:
    task = {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke",
        "Parameters": {"FunctionName": function_arn, "Payload.$": "$"},
        "ResultPath": "$.last",
    }
    return json.dumps(
        {
            "StartAt": "One",
            "States": {
                "One": {**task, "Next": "Choose"},
                "Choose": {
                    "Type": "Choice",
                    "Choices": [{"Variable": "$.skip", "IsPresent": True, "Next": "Done"}],
                    "Default": "Two",
                },
                "Two": {**task, "Next": "Three"},
                "Three": {**task, "Next": "Done"},
                "Done": {"Type": "Pass", "End": True},
            },
        }
    )


class NoopThenReal:
    """The stack's runtime, plus a function that does nothing (the bare engine's Lambdas)."""

    def __init__(self, real: Any, noop_name: str) -> None:
        self.real = real
        self.noop_name = noop_name
        self.records = real.records
        self.faults = real.faults

    def invoke(self, function_name: str, payload: bytes) -> Invocation:
        if function_name == self.noop_name:
            return Invocation(b"{}")
        result: Invocation = self.real.invoke(function_name, payload)
        return result


def run_bare(stack: EmbeddedStack, arn: str, count: int, concurrency: int, tag: str) -> float:
    sfn = stack.client("stepfunctions")
    names = [f"bare-{tag}-{i}" for i in range(count)]
    began = time.monotonic()
    lock = threading.Lock()

    def starter() -> None:
        while True:
            with lock:
                if not names:
                    return
                name = names.pop()
            sfn.start_execution(stateMachineArn=arn, name=name, input="{}")

    threads = [threading.Thread(target=starter) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    while sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
        time.sleep(0.05)
    return count / (time.monotonic() - began)


@contextlib.contextmanager
def stdout_for_json_only() -> Iterator[TextIO]:
    """Yield a stream on the real stdout; meanwhile fd 1 and ``sys.stdout`` go to /dev/null."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    out = os.fdopen(saved, "w")
    try:
        with open(os.devnull, "w", encoding="utf-8") as sink, contextlib.redirect_stdout(sink):
            yield out
    finally:
        out.flush()
        os.dup2(saved, 1)
        out.close()


def measure(orders: int, concurrencies: list[int]) -> list[dict[str, Any]]:
    rows = []
    with EmbeddedStack(runtime="inprocess", visibility_timeout=120, max_workers=16, quiet=True) as stack:
        lam = stack.client("lambda")
        noop = lam.create_function(
            FunctionName="bench-noop",
            Runtime="python3.13",
            Role=f"arn:aws:iam::123456789012:role/{stack.stack.name}-functions",
            Handler="noop.handler",
            Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
        )
        # Route the noop function past the handlers: re-enter the patch with a composed runtime.
        stack._exit.enter_context(moto_adapter.patched_moto(NoopThenReal(stack.runtime, "bench-noop")))
        bare_arn = stack.client("stepfunctions").create_state_machine(
            name="bench-bare",
            definition=bare_definition(noop["FunctionArn"]),
            roleArn="arn:aws:iam::123456789012:role/bench",
        )["stateMachineArn"]
        for c in concurrencies:
            bare = run_bare(stack, bare_arn, orders, c, tag=str(c))
            report = simulate.run(stack, orders=orders, copies=1, concurrency=c, seed=c, prefix=f"C{c}")
            rows.append(
                {
                    "concurrency": c,
                    "saga_orders_per_s": report.orders_per_second,
                    "bare_executions_per_s": round(bare, 2),
                    "ratio": round(report.orders_per_second / bare, 3),
                    "promise_kept": report.promise_kept,
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    with stdout_for_json_only() as out:
        rows = measure(args.orders, args.concurrency)
        result = {
            "benchmark": "throughput",
            "orders": args.orders,
            "goal_ratio": 0.5,
            "concurrency": rows,
            "min_ratio": min(row["ratio"] for row in rows),
            "promise_kept": all(row["promise_kept"] for row in rows),
        }
        print(json.dumps(result), file=out)


if __name__ == "__main__":
    main()
