"""The benchmarks run as ``make bench`` runs them, on a few orders: stdout is one JSON object
and nothing else (the handlers' log and metric lines must not reach it), and the figures it prints
agree with one another. The timings themselves are the benchmark's business, not a test's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from saga_local.template import ROOT
from tests.static.test_build_makefile import python313


def test_throughput_prints_one_json_object_whose_goal_follows_from_its_figures() -> None:
    options = ["--orders", "6", "--concurrency", "1", "2", "--repeat", "1"]
    command = [sys.executable, "bench/throughput.py", *options]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)  # noqa: S603

    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["benchmark"] == "throughput"
    assert result["promise_kept"] is True
    assert [row["concurrency"] for row in result["concurrency"]] == [1, 2]
    cpu = result["cpu_ms"]
    calls = sum(cpu.get(f"calls to {name}", 0.0) for name in ("dynamodb", "stripe", "sqs", "events"))
    assert cpu["calls to dynamodb"] > 0  # the accounting saw the calls
    assert cpu["calls to stripe"] > 0
    assert (
        abs(result["ratio_ceiling"] - cpu["bare_per_execution"] / (cpu["bare_per_execution"] + calls)) < 0.002
    )
    for row in result["concurrency"]:
        assert row["saga_orders_per_s"] > 0
        assert row["bare_executions_per_s"] > 0
        assert abs(row["ratio"] - row["saga_orders_per_s"] / row["bare_executions_per_s"]) < 0.002
        assert abs(row["of_ceiling"] - row["ratio"] / result["ratio_ceiling"]) < 0.01
    goal = result["goal"]
    assert goal["worst"] == min(row["of_ceiling"] for row in result["concurrency"])
    assert goal["met"] is (goal["worst"] >= goal["of_ceiling_at_least"])


def test_webhook_latency_prints_one_json_object_whose_ratio_follows_from_its_figures() -> None:
    command = [sys.executable, "bench/webhook_latency.py", "--orders", "2"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)  # noqa: S603

    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["benchmark"] == "webhook_latency"
    assert result["promise_kept"] is True  # every order charged once, by either path
    webhooks, sweeper = result["webhook_seconds"], result["sweeper_seconds"]
    assert result["ratio"] == round(sweeper["median"] / webhooks["median"])
    # The sweeper cannot act before the lease has run out, nor wait past one more sweep.
    lease, every = result["lease_seconds"], result["sweep_every_seconds"]
    assert lease < sweeper["min"] <= sweeper["max"] <= lease + every + 60
    assert 0 < webhooks["min"] <= webhooks["max"] < lease


def test_moto_speed_prints_one_json_object_whose_ratio_follows_from_its_figures() -> None:
    command = [sys.executable, "bench/moto_speed.py", "--claims", "5", "--repeat", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)  # noqa: S603

    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert result["benchmark"] == "moto_speed"
    assert result["every_claim_won"] is True  # each new order's claim won its write, patched or not
    cpu = result["update_item_cpu_ms"]
    assert cpu["moto"] > 0
    assert cpu["with_moto_speed"] > 0
    assert abs(result["ratio"] - cpu["moto"] / cpu["with_moto_speed"]) < 0.01 * result["ratio"] + 0.01


def test_cold_start_prints_one_json_object_whose_ratios_follow_from_its_figures() -> None:
    # Needs both builds (make sam-build, and bench/bare's as make bench makes it) and python3.13.
    builds = [
        ROOT / ".aws-sam" / "build-check" / "template.yaml",
        ROOT / ".aws-sam" / "bench-bare" / "template.yaml",
    ]
    if not all(path.is_file() for path in builds):
        pytest.skip("bench/cold_start.py needs make sam-build and bench/bare's build (make bench makes both)")
    command = [sys.executable, "bench/cold_start.py", "--python", python313(), "--runs", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)  # noqa: S603

    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()  # the handlers' own log lines stay in their processes
    result = json.loads(line)
    assert result["benchmark"] == "cold_start"
    plain = result["alternative"]["plain"]["cpu_ms"]
    rows = {**result["functions"], **result["alternative"], **result["baseline"]}
    for row in rows.values():
        assert abs(row["cpu_ms"] - row["import_cpu_ms"] - row["invoke_cpu_ms"]) < 0.2  # one run: no medians
        assert abs(row["x_alternative"] - row["cpu_ms"] / plain) < 0.01
    order = result["cold_order"]
    steps = sum(result["functions"][name]["cpu_ms"] for name in order["functions"])
    assert abs(order["cpu_ms"] - steps) < 0.5
    assert result["functions"]["ChargePaymentFunction"]["loaded"][0] == "stripe"
    assert "stripe" not in result["functions"]["ClaimOrderFunction"]["loaded"]
    goal = result["goal"]
    assert goal["met"] is (
        goal["order"] <= goal["order_x_alternative_at_most"]
        and goal["worst"] <= goal["function_x_alternative_at_most"]
    )
