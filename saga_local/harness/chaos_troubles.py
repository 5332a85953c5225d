"""What chaos does to a stack while orders run: SQS redelivering, the provider down, Lambda throttled."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, get_args

from saga_local.harness.redelivery import redeliver
from saga_local.runtime.faults import Fault
from saga_local.stripe_emulator import Endpoint

if TYPE_CHECKING:
    from saga_local.stack.embedded import EmbeddedStack
    from saga_local.stripe_emulator import ProviderEmulator

#: Every endpoint the provider emulator serves: an outage fails them all.
PROVIDER_ENDPOINTS: tuple[Endpoint, ...] = get_args(Endpoint)


# -- redeliveries ------------------------------------------------------------------------------


class Redeliverer:
    """SQS delivering messages again: same MessageId, same body, while or after their execution runs."""

    def __init__(self, stack: EmbeddedStack, orders: list[dict[str, Any]], *, budget: int, seed: int) -> None:
        self.stack = stack
        self.bodies = {order["orderId"]: json.dumps(order) for order in orders}  # as send_all sends them
        self.budget_running = budget - budget // 2
        self.budget_after = budget // 2
        self.counts: Counter[str] = Counter()
        self._done: set[str] = set()
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._while_running, name="chaos-redeliveries", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _while_running(self) -> None:
        sfn = self.stack.driver.sfn
        arn = self.stack.stack.state_machine_arn
        while self.counts["while running"] < self.budget_running and not self._stop.wait(0.25):
            running = sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
            for execution in self._rng.sample(running, min(2, len(running))):
                self._redeliver(execution["executionArn"], "while running")

    def after_the_end(self) -> None:
        arns = [a for a in self.stack.driver.execution_arns() if a not in self._done]
        for arn in self._rng.sample(arns, min(self.budget_after, len(arns))):
            self._redeliver(arn, "after the end")

    def _redeliver(self, arn: str, when: str) -> None:
        if arn in self._done:
            return
        self._done.add(arn)
        execution = json.loads(self.stack.driver.sfn.describe_execution(executionArn=arn)["input"])
        if execution["order"]["orderId"] not in self.bodies:
            return
        # The message as the start function read it: the same order gives the same execution input.
        body = json.dumps(execution["order"])
        result = redeliver(self.stack.driver, execution["messageId"], body)
        self.counts[when] += 1
        if result.failed:
            self.counts["failed (SQS would deliver again)"] += 1


# -- the provider's outage ---------------------------------------------------------------------


class Outage:
    """The provider down for a window of wall time: every call to every endpoint fails.

    From ``start_after`` seconds after :meth:`start` for ``seconds``, a failure rate of 1 on each
    endpoint the emulator serves (``fail_before_apply``: a 500, nothing applied, as when Stripe's
    API is down); then the rates are removed again, leaving every other fault of the run in place.
    ``calls_failed`` counts the requests that reached the provider meanwhile (each one failed,
    unless a fault aimed at its order was due first). An outage that has not begun when the run
    is over never happens (:meth:`finish`); one under way lasts its whole window.
    """

    def __init__(self, provider: ProviderEmulator, *, start_after: float, seconds: float) -> None:
        self.provider = provider
        self.start_after = start_after
        self.seconds = seconds
        self.began: float | None = None  # seconds after start()
        self.ended: float | None = None
        self.calls_failed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="chaos-provider-outage", daemon=True)
        self._clock = time.monotonic()

    def start(self) -> None:
        if self.seconds > 0:
            self._clock = time.monotonic()
            self._thread.start()

    def finish(self) -> None:
        """Wait until the outage is over (it lasts its whole window, even past the last order); one
        that has not begun yet is called off."""
        with self._lock:
            if self.began is None:
                self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def abort(self) -> None:
        """End the outage now (the run failed)."""
        self._stop.set()
        self.finish()

    def _run(self) -> None:
        if self._stop.wait(self.start_after):
            return
        with self._lock:
            if self._stop.is_set():  # called off meanwhile
                return
            before = self._requests()
            self.began = time.monotonic() - self._clock
            for endpoint in PROVIDER_ENDPOINTS:
                self.provider.set_failure_rate("fail_before_apply", 1.0, endpoint=endpoint)
        try:
            self._stop.wait(self.seconds)
        finally:
            for endpoint in PROVIDER_ENDPOINTS:
                self.provider.set_failure_rate("fail_before_apply", 0.0, endpoint=endpoint)
            self.ended = time.monotonic() - self._clock
            self.calls_failed = self._requests() - before

    def _requests(self) -> int:
        return sum(self.provider.request_count(endpoint) for endpoint in PROVIDER_ENDPOINTS)

    def to_dict(self) -> dict[str, Any]:
        return {
            "startAfterSeconds": self.start_after,
            "seconds": self.seconds,
            "began": None if self.began is None else round(self.began, 1),
            "ended": None if self.ended is None else round(self.ended, 1),
            "callsFailed": self.calls_failed,
        }

    def line(self) -> str:
        if self.seconds <= 0:
            return "provider outage      none"
        if self.began is None or self.ended is None:
            return (
                f"provider outage      never began: the run ended before its start, {self.start_after:g} s in"
                " (--outage-start sooner, or more --orders)"
            )
        return (
            f"provider outage      {self.ended - self.began:.0f} s, from {self.began:.0f} s to"
            f" {self.ended:.0f} s into the run: every call failed (500 before applying),"
            f" {self.calls_failed} calls"
        )


# -- Lambda's concurrency exhausted ------------------------------------------------------------

#: The functions a throttle window hits together: a Claim step that fails, and the step that would
#: fence it, so that nothing is written (the small-account case docs/deploy.md sizes for).
THROTTLED_TOGETHER = ("ClaimOrderFunction", "ReleaseClaimFunction")


class LambdaThrottle:
    """Every invocation of :data:`THROTTLED_TOGETHER` throttled for a window of wall time.

    From ``start_after`` seconds after :meth:`start` for ``seconds``, one ``throttle`` fault per
    function, at ``start``, for any order and any number of times, that stops firing when the window
    ends (``Fault.until``). A window that has not begun when the run is over never happens.
    """

    def __init__(self, stack: Any, *, start_after: float, seconds: float) -> None:
        self.stack = stack
        self.start_after = start_after
        self.seconds = seconds
        self.began: float | None = None
        self.faults: list[Fault] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._clock = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="chaos-lambda-throttle", daemon=True)

    def start(self) -> None:
        if self.seconds > 0:
            self._clock = time.monotonic()
            self._thread.start()

    def finish(self) -> None:
        """Call off a window that has not begun; one under way runs out by itself."""
        with self._lock:
            self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def wait_out(self) -> None:
        """Until a window under way has run out (one that never began is over already)."""
        with self._lock:
            until = max((fault.until or 0.0 for fault in self.faults), default=0.0)
        time.sleep(max(0.0, until - time.monotonic()))

    def _run(self) -> None:
        if self._stop.wait(self.start_after):
            return
        with self._lock:
            if self._stop.is_set():
                return
            self.began = time.monotonic() - self._clock
            until = time.monotonic() + self.seconds
            self.faults = [
                Fault(function, "start", "throttle", times=10**9, until=until)
                for function in THROTTLED_TOGETHER
            ]
            self.stack.faults.extend(self.faults)

    @property
    def throttles(self) -> int:
        return sum(fault.fired for fault in self.faults)

    def to_dict(self) -> dict[str, Any]:
        return {
            "functions": list(THROTTLED_TOGETHER),
            "startAfterSeconds": self.start_after,
            "seconds": self.seconds,
            "began": None if self.began is None else round(self.began, 1),
            "throttles": self.throttles,
        }

    def line(self) -> str:
        if self.seconds <= 0:
            return "lambda throttled     none"
        if self.began is None:
            return (
                f"lambda throttled     never began: the run ended before its start, {self.start_after:g} s in"
                " (--throttle-start sooner, or more --orders)"
            )
        return (
            f"lambda throttled     {self.seconds:.0f} s from {self.began:.0f} s into the run:"
            f" {' and '.join(THROTTLED_TOGETHER)}, {self.throttles} invocations refused"
        )
