"""The local stack under load, and what `saga simulate` reports of it.

* a report counts only its own run, on a stack that ran other orders before;
* a batch slower than the (compressed) visibility timeout is not delivered twice, nor dead-lettered;
* every lost order comes with its reason;
* retired executions leave moto, keep their names and still count in the report;
* a lost order names the execution to trace, and the run records it for ``saga trace``;
* ``--html``: the report page names the run's counts and links a trace page for each execution
  that did not succeed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import TYPE_CHECKING

import pytest
from moto.dynamodb.models.dynamo_type import Item
from moto.stepfunctions.models import StateMachine
from moto.stepfunctions.parser import utils as engine_utils

from saga_local import output
from saga_local.harness import simulate
from saga_local.runtime.faults import START_FUNCTION, Fault, FaultPlan
from saga_local.stack import archive
from saga_local.stack.embedded import EmbeddedStack
from saga_local.stripe_emulator import SAVED_PAYMENT_METHOD
from tests.local.chromium_support import CHROMIUM, chromium

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="module")
def stack() -> Iterator[EmbeddedStack]:
    with (
        output.handlers_quiet(),
        EmbeddedStack(runtime="inprocess", visibility_timeout=30, quiet=True) as running,
    ):
        yield running


def test_a_report_counts_only_its_own_run(stack: EmbeddedStack) -> None:
    with output.handlers_quiet():
        first = simulate.run(stack, orders=12, copies=2, concurrency=2, seed=1, prefix="OWN1")
        second = simulate.run(stack, orders=20, copies=1, concurrency=2, seed=2, prefix="OWN2")
    assert first.executions == 24
    assert first.duplicates_suppressed == {"start": 0, "claim": 12}
    # Fresh orders delivered once: 20 executions, nothing stopped, whatever ran on the stack before.
    assert second.executions == 20
    assert second.duplicates_suppressed == {"start": 0, "claim": 0}
    assert second.execution_outcomes == {"SUCCEEDED": 20}
    assert second.charges == second.charged == 20
    assert sum(m.billed for m in second.money) == sum(o["amount"] for o in simulate.make_orders(20, seed=2))
    assert second.promise_kept


def test_retired_executions_leave_moto_keep_their_names_and_still_count(stack: EmbeddedStack) -> None:
    tracked = (len(StateMachine.instances_tracked), len(Item.instances_tracked))  # type: ignore[attr-defined]
    with output.handlers_quiet():
        report = simulate.run(stack, orders=6, copies=1, concurrency=2, seed=3, prefix="RET")
    driver = stack.driver
    listed_before = len(driver.execution_arns())
    assert driver.retire_executions(closed_for=0) >= 6
    assert len(driver.execution_arns()) < listed_before
    name = next(e.name for e in driver.executions(order_ids=["ORDER-RET-000000"]))
    # Step Functions refuses a closed execution's name: a redelivery is still stopped at the start.
    with pytest.raises(driver.sfn.exceptions.ExecutionAlreadyExists):
        driver.sfn.start_execution(stateMachineArn=stack.stack.state_machine_arn, name=name, input="{}")
    # Nothing else keeps a retired execution alive: not moto's model registry (its state machine
    # copy, its items' versions), not the engine's list of the threads it started.
    assert len(StateMachine.instances_tracked) == tracked[0]  # type: ignore[attr-defined]
    assert len(Item.instances_tracked) == tracked[1]  # type: ignore[attr-defined]
    assert all(thread.is_alive() for thread in engine_utils.TMP_THREADS)
    orders = simulate.make_orders(6, seed=3, prefix="RET")
    again = simulate.measure(stack, orders, deliveries=6, wall_seconds=1.0)
    assert again.executions == report.executions == 6
    assert again.execution_outcomes == {"SUCCEEDED": 6}
    assert again.charged == 6


def test_every_lost_order_comes_with_its_reason(stack: EmbeddedStack) -> None:
    # An order never sent, and one whose delivery the start function always fails until SQS
    # dead-letters it (maxReceiveCount 5).
    never = {**simulate.make_orders(1, seed=4, prefix="NEVER")[0]}
    doomed = simulate.make_orders(1, seed=5, prefix="DOOM")[0]
    stack.faults.add(Fault(START_FUNCTION, "start", "die", times=10))  # only its delivery runs meanwhile
    sqs = stack.driver.sqs
    sqs.set_queue_attributes(QueueUrl=stack.stack.queue_url, Attributes={"VisibilityTimeout": "1"})
    stack.driver.event_source.visibility_timeout = 1
    try:
        stack.driver.send(doomed)
        with output.handlers_quiet():
            simulate.settle(stack, pollers=1, timeout=60)
    finally:
        sqs.set_queue_attributes(QueueUrl=stack.stack.queue_url, Attributes={"VisibilityTimeout": "30"})
        stack.driver.event_source.visibility_timeout = None
        stack.faults.clear()
    report = simulate.measure(stack, [never, doomed], deliveries=2, wall_seconds=1.0)
    assert report.lost_orders == 2
    assert report.dead_lettered == 1
    assert report.lost_reasons == {
        "no claim; no execution: its delivery never started one": 1,
        "no claim; dead-lettered: every receive failed, redriven by the queue": 1,
    }
    assert all("lost (no claim;" in problem for problem in report.problems)
    assert "lost, by reason" in simulate.render(report)


def test_a_batch_slower_than_the_visibility_timeout_is_delivered_once() -> None:
    # Every start invocation takes 2.5 s against a 1 s visibility timeout, with a second poller
    # waiting: the batch must not come back while it runs (received again, it would be
    # dead-lettered after 5 receives on a busier machine).
    slow = FaultPlan([Fault(START_FUNCTION, "start", "delay", times=100, seconds=2.5)])
    with (
        output.handlers_quiet(),
        EmbeddedStack(runtime="inprocess", visibility_timeout=1, faults=slow, quiet=True) as running,
    ):
        orders = simulate.make_orders(3, seed=6, prefix="SLOW")
        for order in orders:
            running.driver.send(order)
        simulate.settle(running, pollers=2, timeout=60)
        stats = running.driver.event_source.stats
        report = simulate.measure(running, orders, deliveries=3, wall_seconds=1.0)
    assert stats.messages == 3, f"received {stats.messages} times: a batch came back while it ran"
    assert stats.extended >= 1
    assert report.charged == 3
    assert report.dead_lettered == 0
    assert report.promise_kept
    assert json.loads(json.dumps(report.to_dict()))["lost_reasons"] == {}


def test_a_lost_order_names_the_execution_to_trace_and_the_run_records_it(tmp_path: Path) -> None:
    # A saved card sent without its customer: refused by the provider every time, never charged,
    # re-queued up to its bound: the order is not charged, so the report counts it lost. Its own
    # stack: an in-process stack started after the module's points the functions elsewhere.
    lost = {**simulate.make_orders(1, seed=8, prefix="TRACE")[0], "paymentMethod": SAVED_PAYMENT_METHOD}
    environment = dict(os.environ)
    try:
        with (
            output.handlers_quiet(),
            EmbeddedStack(runtime="inprocess", visibility_timeout=30, quiet=True) as running,
        ):
            running.driver.send(lost)
            simulate.settle(running, pollers=1, timeout=180)
            report = simulate.measure(running, [lost], deliveries=1, wall_seconds=1.0)
            recorded = simulate.record_unhappy(running, directory=tmp_path)
    finally:
        os.environ.clear()
        os.environ.update(environment)

    (problem,) = report.problems
    name = problem.split("saga trace ")[1].split()[0]
    assert name.startswith(lost["orderId"] + "-")
    assert "(ChargeNotAttempted)" in problem
    assert name in recorded.by_error["ChargeNotAttempted"]
    assert f"e.g. saga trace {recorded.by_error['ChargeNotAttempted'][0]}" in "\n".join(
        simulate.render_recorded(recorded)
    )
    kept = archive.load(name, tmp_path)  # what `saga trace NAME` reads once the stack is gone
    assert kept is not None
    assert kept.description["status"] == "FAILED"


class ReportPage(HTMLParser):
    """What the report page says: its figures and endings (by their data attributes), its links."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.figures: dict[str, str] = {}
        self.endings: dict[str, str] = {}
        self.money: dict[str, list[str]] = {}
        self.links: dict[str, str] = {}
        self._row: tuple[dict[str, str], str] | None = None
        self._cells: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "tr":
            self._row, self._cells = (values, ""), []
        elif tag == "td" and self._row is not None:
            self._cells.append("")
        elif tag == "a":
            self.links[values["data-execution"]] = values["href"]

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._cells:
            self._cells[-1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag != "tr" or self._row is None:
            return
        attrs, _ = self._row
        if "data-figure" in attrs:
            self.figures[attrs["data-figure"]] = self._cells[1]
        elif "data-ending" in attrs:
            self.endings[attrs["data-ending"]] = self._cells[1]
        elif "data-currency" in attrs:
            self.money[attrs["data-currency"]] = self._cells[1:6]
        self._row = None


@dataclass(frozen=True)
class PageRun:
    """A small simulate run with declines, written as ``saga simulate --html run.html`` writes it."""

    report: simulate.Report
    recorded: simulate.Recorded
    page: Path


@pytest.fixture(scope="module")
def page_run(tmp_path_factory: pytest.TempPathFactory) -> PageRun:
    # Its own stack, as saga simulate runs one: the module's may point at a stack a test above started.
    folder = tmp_path_factory.mktemp("page-run")
    environment = dict(os.environ)
    try:
        with (
            output.handlers_quiet(),
            EmbeddedStack(runtime="inprocess", visibility_timeout=30, quiet=True) as running,
        ):
            report = simulate.run(
                running, orders=8, copies=2, concurrency=2, decline_rate=0.5, seed=9, prefix="PAGE"
            )
            recorded = simulate.record_unhappy(running, directory=folder)
    finally:
        os.environ.clear()
        os.environ.update(environment)
    assert report.declined > 0, "no declined order: nothing for the page to link"
    written = simulate.write_html_report(folder / "run.html", report.to_dict(), recorded, kind="simulate")
    return PageRun(report, recorded, written)


def test_the_html_report_names_the_run_s_counts_and_links_each_unhappy_execution_s_trace(
    page_run: PageRun,
) -> None:
    report, recorded, written = page_run.report, page_run.recorded, page_run.page
    page = ReportPage()
    page.feed(written.read_text(encoding="utf-8"))
    assert page.figures["orders"] == "8"
    assert page.figures["deliveries"] == str(report.deliveries) == "16"
    assert page.figures["charges"] == str(report.charges)
    assert page.figures["declined"] == str(report.declined)
    assert page.figures["duplicates stopped at the claim"] == str(report.duplicates_suppressed["claim"])
    assert page.endings == {name: str(n) for name, n in report.order_endings.items()}
    for entry in report.money:
        assert page.money[entry.currency] == [
            output.money(amount, entry.currency)
            for amount in (entry.ordered, entry.billed, entry.declined, entry.not_billed, entry.billed_twice)
        ]
    # Every execution that did not succeed, linked to its own trace page, written beside the report.
    names = {name for names in recorded.by_error.values() for name in names}
    assert set(recorded.by_error) >= {"PaymentDeclined"}
    assert set(page.links) == names
    for name, href in page.links.items():
        trace_page = (written.parent / href).resolve()
        assert trace_page.parent == (written.parent / "run-traces").resolve()
        text = trace_page.read_text(encoding="utf-8")
        assert f"<title>{name} · " in text
        assert "pm_card_chargeDeclined" not in text  # redacted, as saga trace --html is without --io


#: Writes the window's width and the page's into <body data-widths>.
FIT_PROBE = (
    "var root = document.documentElement;"
    " document.body.setAttribute('data-widths', root.clientWidth + ' ' + root.scrollWidth);"
)


@pytest.mark.chromium
@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"needs Debian's chromium at {CHROMIUM}")
def test_the_html_report_fits_a_900_px_window_in_chromium(page_run: PageRun, tmp_path: Path) -> None:
    # The page runs no script: this copy allows one probe, by its hash, to measure what was laid out.
    digest = base64.b64encode(hashlib.sha256(FIT_PROBE.encode("utf-8")).digest()).decode("ascii")
    page_html = page_run.page.read_text(encoding="utf-8")
    page_html = page_html.replace(
        "default-src &#x27;none&#x27;;",
        f"default-src &#x27;none&#x27;; script-src &#x27;sha256-{digest}&#x27;;",
        1,
    )
    probed = tmp_path / "run.html"
    probed.write_text(
        page_html.replace("</body>", f"<script>{FIT_PROBE}</script></body>", 1), encoding="utf-8"
    )

    dom = chromium(tmp_path / "profile", "--dump-dom", probed.as_uri(), width=900).stdout
    found = re.search(r'data-widths="(\d+) (\d+)"', dom)
    assert found, "the probe did not run"
    viewport, page_width = int(found.group(1)), int(found.group(2))
    assert viewport == 900
    assert page_width <= viewport, "the report scrolls sideways"
