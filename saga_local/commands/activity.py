"""What `saga up` prints while orders flow: each execution as it ends, recorded for ``saga trace``.

`saga demo` prints every execution it runs with its path and outcome, and records it
(``.saga/executions/``) so that ``saga trace NAME`` still shows it after its stack is gone.
:class:`Activity` does the same for the stack of `saga up`: it polls the state machine's newest
executions, and prints and records each one once it has ended.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.output import Out
    from saga_local.stack.embedded import EmbeddedStack

#: The newest executions read per poll (one ListExecutions page).
PAGE = 100


@dataclass
class Activity:
    """Prints (``out``) and records every execution of ``stack`` once it ends, every ``interval`` s."""

    stack: EmbeddedStack
    out: Out
    interval: float = 1.0
    record: Callable[[Any], Any] | None = None
    seen: set[str] = field(default_factory=set)

    def poll(self) -> int:
        """Print and record the executions that ended since the last poll; how many."""
        from saga_local.commands.demo import describe_path
        from saga_local.stack import archive

        driver = self.stack.driver
        listed = driver.sfn.list_executions(
            stateMachineArn=self.stack.stack.state_machine_arn, maxResults=PAGE
        ).get("executions", [])
        ended = [e for e in listed if e["status"] != "RUNNING" and e["executionArn"] not in self.seen]
        for execution in sorted(ended, key=lambda e: e.get("stopDate") or e["startDate"]):
            self.seen.add(execution["executionArn"])
            result = driver.result(execution["executionArn"])
            (self.record or archive.record)(archive.read_execution(driver.sfn, execution["executionArn"]))
            self.out(f"  {result.name}")
            self.out(f"    {describe_path(self.out, result)}")
        return len(ended)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # noqa: BLE001, S112 - a poll that failed is redone by the next one
                continue
