"""A claim's conditional ``UpdateItem`` in moto, with and without saga_local.aws.moto_speed, in one run.

    python bench/moto_speed.py [--claims 200] [--repeat 3] [--record PATH]

Every claim, completion and release is one conditional ``UpdateItem``; ``moto_speed.patches()``
makes moto parse and lex each expression once, check its validators root first, answer its tree
walks once per node class and serialise responses from plain dicts. This times what that changes:
``--claims`` new orders claimed through the real ``ClaimsStore`` (each claim of a new order is one
conditional write, the gate), against a fresh moto DynamoDB table made from template.yaml's
``ClaimsTable``, once as moto 5.2.5 ships and once with the patches applied. The two run in turn,
``--repeat`` times each, and each figure is the least CPU per claim of its passes (a busy spell
only ever adds CPU). The CPU is the process's: botocore's client side is in both alike.

``ratio`` is moto's figure over the patched one. stdout is one JSON object
(``"benchmark": "moto_speed"``). ``--record PATH`` also writes it, with ``measured_on``
(bench/recording.py), to PATH: the figures docs/performance.md is rendered from.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "functions"))

import boto3
from moto import mock_aws
from recording import record  # type: ignore[import-not-found]  # bench/, this script's

from payment_saga.claims import ClaimResult, ClaimsStore
from payment_saga.orders import order_from_message
from saga_local.aws import moto_speed
from saga_local.aws.stack import REGION, table_request
from saga_local.template import load_template


def an_order(order_id: str) -> dict[str, Any]:
    return {
        "orderId": order_id,
        "amount": 15000,
        "currency": "BRL",
        "customerId": "cus_123",
        "paymentMethod": "pm_card_visa",
    }


def cpu_per_claim(claims: int, *, patched: bool, tag: str) -> tuple[float, int]:
    """CPU seconds per claim of ``claims`` new orders, and how many of the claims were won."""
    with contextlib.ExitStack() as stack:
        if patched:
            for owner, name, value in moto_speed.patches():
                stack.enter_context(mock.patch.object(owner, name, value))
        stack.enter_context(mock_aws())
        client = boto3.client("dynamodb", region_name=REGION)
        props = load_template()["Resources"]["ClaimsTable"]["Properties"]
        client.create_table(**table_request(props, "claims"))
        store = ClaimsStore("claims", client=client, clock=lambda: 1_790_000_000.0)
        orders = [order_from_message(an_order(f"BENCH-{tag}-{n}")) for n in range(claims)]
        # The table's first write sets up what every later one reuses: not what a claim costs.
        store.claim(order_from_message(an_order(f"WARM-{tag}")), token="warm-up")  # noqa: S106 - an execution id
        began = time.process_time()
        outcomes = [store.claim(order, token=f"exec-{order.order_id}") for order in orders]
        spent = time.process_time() - began
        won = sum(1 for outcome in outcomes if outcome.result is ClaimResult.NEW)
        return spent / claims, won


def measure(claims: int, repeat: int) -> dict[str, Any]:
    """The least CPU per claim of each side over ``repeat`` alternated passes."""
    plain, patched, won = [], [], []
    for attempt in range(repeat):
        seconds, count = cpu_per_claim(claims, patched=False, tag=f"P{attempt}")
        plain.append(seconds)
        won.append(count)
        seconds, count = cpu_per_claim(claims, patched=True, tag=f"F{attempt}")
        patched.append(seconds)
        won.append(count)
    return {
        "benchmark": "moto_speed",
        "claims": claims,
        "repeat": repeat,
        "update_item_cpu_ms": {
            "moto": round(min(plain) * 1000, 2),
            "with_moto_speed": round(min(patched) * 1000, 2),
        },
        "ratio": round(min(plain) / min(patched), 2),
        "every_claim_won": all(count == claims for count in won),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="passes of each, alternated; the least counts")
    parser.add_argument(
        "--record", type=Path, metavar="PATH", help="also write the result, and the machine's facts, to PATH"
    )
    args = parser.parse_args()
    measured = measure(args.claims, args.repeat)
    if args.record is not None:
        record(args.record, measured)
    print(json.dumps(measured))


if __name__ == "__main__":
    main()
