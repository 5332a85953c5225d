"""Exhaustive exploration of the model: depth-first over every interleaving, with state hashing.

From each state, every enabled action is tried (each delivery's next step with no fault and with
every fault the budget still allows, a write landing, the clock, the sweeper, a redrive, a re-send);
a state seen before (same table row, same provider state up to ids, same executions, same budget) is
not explored again. After every step the invariants are checked; every complete schedule (all
deliveries sent and ended, no write in flight) is also run to its end -- a sweep past the grace, a
re-send of an order released ``NOT_CHARGED`` -- and must end with the order charged once, or declined.

A violation is reported with its schedule, shrunk: steps are dropped one at a time, replaying from
the start, as long as the same invariant still breaks.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.model.invariants import KNOWN_FINDINGS
from tests.model.protocol import World
from tests.model.state import is_fault

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tests.model.state import Scope, Snapshot, StepResult


@dataclass
class Counterexample:
    invariant: str
    actions: list[tuple[Any, ...]]
    trace: list[str]


@dataclass
class Report:
    scope: Scope
    states: int = 0
    transitions: int = 0
    schedules: int = 0
    seconds: float = 0.0
    max_depth: int = 0
    complete: bool = True
    counterexamples: dict[str, Counterexample] = field(default_factory=dict)
    #: Violations of ``invariants.KNOWN_FINDINGS``: expected until the product's fix lands, not failures.
    known: dict[str, Counterexample] = field(default_factory=dict)
    memo_hits: int = 0
    memo_misses: int = 0

    def summary(self) -> str:
        lines = [
            f"scope {self.scope.name}: {len(self.scope.deliveries)} deliveries, up to {self.scope.max_faults}"
            f" fault(s), {self.scope.redrives} redrive(s), {self.scope.requeues} re-send(s)",
            f"  {self.states} states, {self.transitions} transitions, {self.schedules} complete schedules"
            f" checked to the end, depth {self.max_depth}, {self.seconds:.1f} s"
            f" (DynamoDB answers memoised: {self.memo_hits} hits, {self.memo_misses} asked of moto)"
            + ("" if self.complete else " -- STOPPED at the state limit, not exhaustive"),
        ]
        if not self.counterexamples:
            lines.append("  every invariant held" + (" but the known findings below" if self.known else ""))
        for example in self.counterexamples.values():
            lines.append(f"  VIOLATED: {example.invariant}")
            lines.extend(f"    {number}. {step}" for number, step in enumerate(example.trace, 1))
        for key, example in self.known.items():
            lines.append(f"  KNOWN FINDING {KNOWN_FINDINGS[key]}: {example.invariant}")
            lines.extend(f"    {number}. {step}" for number, step in enumerate(example.trace, 1))
        return "\n".join(lines)


def _kind(violation: str) -> str:
    """The invariant a violation message breaks (its text up to the first detail)."""
    for marker in (":", " ("):
        violation = violation.split(marker, 1)[0]
    words = violation.split()
    if words and words[0] in {"d1", "d2", "d3", "r1", "r2", "r3"}:
        words = words[1:]
    return " ".join(words)


class Explorer:
    def __init__(self, scope: Scope, *, max_states: int = 2_000_000, shrink: bool = True) -> None:
        self.scope = scope
        self.max_states = max_states
        self.shrink = shrink
        self.report = Report(scope)
        self._seen: set[bytes] = set()

    def run(self) -> Report:
        started = time.perf_counter()
        with World(self.scope) as world:
            self.world = world
            self._root = world.snapshot()
            self._visit(world.snapshot(), [])
            if self.shrink:
                for found in (self.report.counterexamples, self.report.known):
                    for key, example in found.items():
                        found[key] = self._shrink(example)
            self.report.memo_hits, self.report.memo_misses = world.table.hits, world.table.misses
        self.report.seconds = time.perf_counter() - started
        return self.report

    # -- depth-first search -----------------------------------------------------------------------

    def _visit(self, snapshot: Snapshot, path: list[tuple[Any, ...]]) -> None:
        world = self.world
        digest = hashlib.blake2b(world.fingerprint().encode(), digest_size=16).digest()
        if digest in self._seen:
            return
        if len(self._seen) >= self.max_states:
            self.report.complete = False
            return
        self._seen.add(digest)
        self.report.states += 1
        self.report.max_depth = max(self.report.max_depth, len(path))
        if world.settled():
            self.report.schedules += 1
            _, found = world.finish()
            for violation in found:
                self._record(violation, [*path, ("finish",)])
            world.restore(snapshot)
        faults_used = world.state.faults
        for action in list(world.actions()):
            result = self._try(snapshot, path, action)
            for variant in list(world.variants(action, result, faults_used)):
                self._try(snapshot, path, variant)

    def _try(self, snapshot: Snapshot, path: list[tuple[Any, ...]], action: tuple[Any, ...]) -> StepResult:
        world = self.world
        world.restore(snapshot)
        result = world.apply(action)
        self.report.transitions += 1
        if not result.fired:
            return result  # a fault planned for a call the step never made: the same as no fault
        found = world.violations()
        for violation in found:
            self._record(violation, [*path, action])
        # Explore on past a violation: one broken invariant must not hide another further on.
        self._visit(world.snapshot(), [*path, action])
        return result

    def _record(self, violation: str, actions: list[tuple[Any, ...]]) -> None:
        key = _kind(violation)
        found = self.report.known if key in KNOWN_FINDINGS else self.report.counterexamples
        known = found.get(key)
        if known is None or len(actions) < len(known.actions):
            found[key] = Counterexample(violation, actions, [])

    # -- counterexamples --------------------------------------------------------------------------

    def replay(self, actions: Sequence[tuple[Any, ...]]) -> tuple[list[str], list[str]] | None:
        """Run ``actions`` from the start: (trace, every violation met), or None if one is not enabled."""
        world = self.world
        world.restore(self._root)
        trace: list[str] = []
        seen: list[str] = []
        for action in actions:
            if action == ("finish",):
                if not world.quiescent():
                    return None
                done, found = world.finish()
                return [*trace, *done], [*seen, *found]
            base = action if action[0] not in ("start", "run", "sweep", "relay") else (*action[:-1], None)
            if base not in list(world.actions()):
                return None
            if action != base and is_fault(action[-1]) and world.state.faults >= self.scope.max_faults:
                return None
            result = world.apply(action)
            if not result.fired:
                return None
            trace.append(result.label)
            seen.extend(world.violations())
        return trace, seen

    def _shrink(self, example: Counterexample) -> Counterexample:
        key = _kind(example.invariant)
        actions = list(example.actions)
        index = 0
        while index < len(actions):
            candidate = actions[:index] + actions[index + 1 :]
            replayed = self.replay(candidate)
            if replayed is not None and any(_kind(v) == key for v in replayed[1]):
                actions = candidate
            else:
                index += 1
        replayed = self.replay(actions)
        assert replayed is not None
        trace, found = replayed
        invariant = next((v for v in found if _kind(v) == key), example.invariant)
        return Counterexample(invariant, actions, trace)
