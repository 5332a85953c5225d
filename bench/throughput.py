"""Orders per second through the local stack, against the bare engine, side by side in one run.

    python bench/throughput.py [--orders 200] [--concurrency 1 4 16] [--memory-orders 10000]

For each concurrency C:
* **saga**: C concurrent SQS pollers feeding the real start Lambda, the real ASL and the real
  handlers (in-process runtime), the Stripe emulator; each order delivered once.
* **bare engine**: the same moto Step Functions running a state machine with the same states
  (three Lambda tasks, a Choice, a Pass) whose Lambdas return at once, C concurrent starters.
The ratio saga/bare is what our code and the provider round trip cost on top of the engine.
Then memory: the process's RSS after ``--memory-orders`` orders against RSS after 1,000.

Timings on a shared 2-core machine are noisy: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

from saga_local.aws.embedded import EmbeddedStack
from saga_local.aws.moto_adapter import Invocation
from saga_local.commands import simulate


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


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--memory-orders", type=int, default=10_000)
    args = parser.parse_args()

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
        from saga_local.aws import moto_adapter

        # Route the noop function past the handlers: re-enter the patch with a composed runtime.
        stack._exit.enter_context(moto_adapter.patched_moto(NoopThenReal(stack.runtime, "bench-noop")))
        bare_arn = stack.client("stepfunctions").create_state_machine(
            name="bench-bare",
            definition=bare_definition(noop["FunctionArn"]),
            roleArn="arn:aws:iam::123456789012:role/bench",
        )["stateMachineArn"]
        for c in args.concurrency:
            bare = run_bare(stack, bare_arn, args.orders, c, tag=str(c))
            report = simulate.run(stack, orders=args.orders, copies=1, concurrency=c, seed=c, prefix=f"C{c}")
            saga = report.orders_per_second
            rows.append(
                {
                    "concurrency": c,
                    "saga_orders_per_s": saga,
                    "bare_executions_per_s": round(bare, 2),
                    "ratio": round(saga / bare, 3),
                    "promise_kept": report.promise_kept,
                }
            )
            print(json.dumps(rows[-1]), flush=True)

    memory: dict[str, Any] = {}
    if args.memory_orders:
        with EmbeddedStack(runtime="inprocess", visibility_timeout=120, quiet=True) as stack:
            first = simulate.run(stack, orders=1000, copies=1, concurrency=4, seed=1, prefix="M1")
            memory["rss_mb_after_1000"] = round(rss_mb(), 1)
            rest = simulate.run(
                stack, orders=args.memory_orders - 1000, copies=1, concurrency=4, seed=2, prefix="M2"
            )
            memory[f"rss_mb_after_{args.memory_orders}"] = round(rss_mb(), 1)
            memory["promise_kept"] = first.promise_kept and rest.promise_kept
            memory["orders_per_second"] = rest.orders_per_second
        print(json.dumps(memory), flush=True)
    print(json.dumps({"throughput": rows, "memory": memory}, indent=2))


if __name__ == "__main__":
    main()
