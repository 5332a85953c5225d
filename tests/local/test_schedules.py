"""The template's schedules run on the local stack: the sweeper sweeps under `saga up` without a person.

The sweeper's ``ScheduleV2`` event is read from template.yaml and fired through the Lambda API with
its Input, as EventBridge Scheduler does; the real handler resolves a claim whose lease ran out.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING

import pytest

from payment_saga.claims import ClaimsStore
from payment_saga.orders import Order
from saga_local.aws.schedule_source import rate_seconds
from saga_local.template import load_template
from tests.local.conftest import SEARCH_GRACE_SECONDS

if TYPE_CHECKING:
    from saga_local.stack.embedded import EmbeddedStack


def template_visibility_timeout() -> int:
    return int(load_template()["Resources"]["OrdersQueue"]["Properties"]["VisibilityTimeout"])


def test_the_sweeper_runs_on_its_schedule_compressed_as_the_queues_waits(
    stack: EmbeddedStack,
) -> None:
    compress = 30 / template_visibility_timeout()  # saga up's visibility timeout, for the template's

    sweep, check = stack.schedule_sources(compress=compress)

    assert (sweep.schedule.logical_id, sweep.schedule.event_name) == ("SweeperFunction", "Sweep")
    assert sweep.interval == pytest.approx(rate_seconds(sweep.schedule.expression) * compress)
    assert sweep.interval == pytest.approx(50)  # rate(5 minutes), 180 s -> 30 s
    # The hourly settlement check runs the same function with its own input, compressed alike.
    assert (check.schedule.logical_id, check.schedule.event_name) == ("SweeperFunction", "SettlementCheck")
    assert json.loads(check.event())["check"] == "settlements"
    assert check.interval == pytest.approx(600)  # rate(1 hour), 180 s -> 30 s


def test_a_claim_abandoned_before_its_charge_is_released_by_the_scheduled_sweep(stack: EmbeddedStack) -> None:
    # A Claim Order that won and then died: no charge, no execution left to finish it. Written far
    # enough back that its lease and the search grace have both run out.
    order = Order("ORDER-SCHED-1", 15000, "BRL", "cus_123", "pm_card_visa")
    long_ago = time.time() - 900 - SEARCH_GRACE_SECONDS - 60
    store = ClaimsStore(stack.stack.table_name, client=stack.client("dynamodb"), clock=lambda: long_ago)
    assert store.claim(order, token="arn:local:execution:abandoned").result.won
    source, _ = stack.schedule_sources(compress=30 / template_visibility_timeout())  # the sweep
    source.interval = 0.2
    stop = threading.Event()
    ticking = threading.Thread(target=source.run, args=(stop,), daemon=True)
    ticking.start()
    try:
        deadline = time.monotonic() + 60
        while (stack.driver.claim(order.order_id) or {}).get("status") == "CLAIMED":
            assert time.monotonic() < deadline, "no scheduled sweep resolved the claim"
            time.sleep(0.2)
    finally:
        stop.set()
        ticking.join()

    claim = stack.driver.claim(order.order_id) or {}
    assert (claim["status"], claim["releaseReason"]) == ("RELEASED", "NOT_CHARGED")
    assert stack.provider.charges_for(order.order_id) == []
    assert source.ticks >= 1
    assert source.errors == 0
