"""``saga logs``: the functions' log events by function, order and text, locally and from CloudWatch Logs.

Locally the lines are the ones the real handlers wrote in worker processes (`saga up`'s
``.saga/logs/``, through the installed entry point in test_entry_point.py); here, the reading:
merged in time, picked by order, followed as they are written, and read back from a deployed
stack's log groups (moto's CloudWatch Logs), as template.yaml names them.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import boto3
import pytest

from saga_local import cli
from saga_local.aws.stack import REGION
from saga_local.stack import function_logs as logs

if TYPE_CHECKING:
    from pathlib import Path

    from tests.helpers import Saga

AT = "2026-12-01 10:00:01,000+0000"
METRIC = json.dumps({"_aws": {"Timestamp": 1796140605589, "CloudWatchMetrics": []}, "ClaimWon": [1.0]})


def event(order_id: str, name: str, at: str = AT) -> str:
    """One log event as Powertools writes it (the fields the handlers' log_event gives every line)."""
    return json.dumps({"level": "INFO", "message": name, "event": name, "timestamp": at, "orderId": order_id})


def test_local_logs_are_merged_in_time_picked_by_order_and_followed_as_written(tmp_path: Path) -> None:
    (tmp_path / "ClaimOrderFunction.log").write_text(
        event("ORDER-L-1", "claim_won", "2026-12-01 10:00:01,000+0000") + "\n" + METRIC + "\n"
    )
    (tmp_path / "ChargePaymentFunction.log").write_text(
        event("ORDER-L-1", "charge_applied", "2026-12-01 10:00:02,000+0000")
        + "\n"
        + event("ORDER-L-2", "charge_applied", "2026-12-01 10:00:00,500+0000")
        + "\n"
    )
    source = logs.LocalLogs(tmp_path, logs.resolve_functions([]))
    shown: list[str] = []

    logs.follow(source, shown.append, order_id="ORDER-L-1", text=None, metrics=False, raw=False, tail=False)

    assert [line.split()[4] for line in shown] == ["claim_won", "charge_applied"]
    assert all("ORDER-L-1" in line for line in shown)
    with (tmp_path / "ClaimOrderFunction.log").open("a") as later:
        later.write(event("ORDER-L-1", "claim_released", "2026-12-01 10:00:03,000+0000") + "\n")
    followed: list[str] = []
    reads = iter([False, True])
    logs.follow(
        source,
        followed.append,
        order_id="ORDER-L-1",
        text="released",
        metrics=False,
        raw=True,
        tail=True,
        poll_seconds=0,
        stop=lambda: next(reads),
    )
    assert [json.loads(line)["event"] for line in followed] == ["claim_released"]  # only what is new


def test_a_function_is_named_as_the_template_does_or_shorter_and_an_unknown_one_is_refused() -> None:
    assert logs.resolve_functions(["ClaimOrder", "chargepaymentfunction"]) == [
        "ClaimOrderFunction",
        "ChargePaymentFunction",
    ]
    with pytest.raises(logs.LogsError, match=r"the functions: .*ClaimOrderFunction"):
        logs.resolve_functions(["Nope"])


def test_saga_logs_reads_a_deployed_stacks_log_groups_as_the_template_names_them(
    saga: Saga, deployed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cloudwatch = boto3.client("logs", region_name=REGION)
    group = logs.log_group_names(deployed, ["ClaimOrderFunction"])["ClaimOrderFunction"]
    assert group == f"/aws/lambda/{deployed}-ClaimOrderFunction"
    stream = "2026/12/01/[$LATEST]abc"
    cloudwatch.create_log_group(logGroupName=group)
    cloudwatch.create_log_stream(logGroupName=group, logStreamName=stream)
    now = int(time.time() * 1000)
    cloudwatch.put_log_events(
        logGroupName=group,
        logStreamName=stream,
        logEvents=[
            {"timestamp": now - 2000, "message": event("ORDER-CW-1", "claim_won")},
            {"timestamp": now - 1000, "message": event("ORDER-CW-2", "claim_won")},
        ],
    )
    command = ["logs", "ClaimOrder", "--stack", deployed, "--region", REGION, "--order-id", "ORDER-CW-1"]

    assert cli.main(command) == 0

    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert "ClaimOrderFunction" in lines[0]
    assert "claim_won" in lines[0]
    assert "ORDER-CW-1" in lines[0]
