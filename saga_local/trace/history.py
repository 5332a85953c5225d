"""Fold what the engine recorded (``GetExecutionHistory``) into one :class:`Step` per state entered.

Nothing here formats anything: the terminal (:mod:`saga_local.trace.text`) and the page
(:mod:`saga_local.trace.html`) both read the steps this module folds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Iterable

StepStatus = Literal["succeeded", "failed", "caught", "retried", "running"]

#: Events that start an attempt of a task (one per try, retries included).
ATTEMPT_EVENTS = frozenset(
    {
        "TaskScheduled",
        "LambdaFunctionScheduled",
        "LambdaFunctionScheduleFailed",
        "ActivityScheduled",
        "ActivityScheduleFailed",
    }
)
#: Events that end an attempt (or a Map/Parallel state) in failure; they carry ``error``/``cause``.
FAILURE_EVENTS = frozenset(
    {
        "TaskFailed",
        "TaskTimedOut",
        "TaskStartFailed",
        "TaskSubmitFailed",
        "LambdaFunctionFailed",
        "LambdaFunctionTimedOut",
        "LambdaFunctionStartFailed",
        "LambdaFunctionScheduleFailed",
        "ActivityFailed",
        "ActivityTimedOut",
        "ActivityScheduleFailed",
        "MapStateFailed",
        "ParallelStateFailed",
    }
)
SUCCESS_EVENTS = frozenset(
    {
        "TaskSucceeded",
        "LambdaFunctionSucceeded",
        "ActivitySucceeded",
        "MapStateSucceeded",
        "ParallelStateSucceeded",
    }
)
EXECUTION_END = frozenset({"ExecutionSucceeded", "ExecutionFailed", "ExecutionTimedOut", "ExecutionAborted"})
#: The execution's end events that are not a success.
EXECUTION_FAILURES = EXECUTION_END - {"ExecutionSucceeded"}
#: State types that end the execution themselves (their "errors" are the execution's, not attempts).
TERMINAL_TYPES = frozenset({"Succeed", "Fail"})


def load_definition(text: str) -> dict[str, Any]:
    """Parse an ASL definition (JSON; YAML is accepted too, as SAM allows ``.asl.yaml``)."""
    try:
        definition = json.loads(text)
    except json.JSONDecodeError as json_error:
        import yaml  # only for YAML definitions

        try:
            definition = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ValueError(f"not an ASL definition (invalid JSON: {json_error})") from json_error
    if not isinstance(definition, dict) or not isinstance(definition.get("States"), dict):
        raise ValueError("not an ASL definition: no 'States' object")
    if definition.get("StartAt") not in definition["States"]:
        raise ValueError(f"not an ASL definition: StartAt {definition.get('StartAt')!r} names no state")
    return definition


@dataclass
class Step:
    """One state entered, as the history tells it.

    ``attempts`` counts the tries of a task (1 plus its retries; 1 for states that call nothing).
    ``errors`` holds ``(error, cause)`` for every failed attempt, the retried ones included, in
    order. ``status`` is ``retried`` when an attempt failed and a later one succeeded, ``caught``
    when the last attempt failed and a Catch routed the error to ``next``, ``failed`` when the
    execution ended in this state, ``running`` while it is still in it.
    """

    name: str
    type: str
    status: StepStatus = "running"
    attempts: int = 1
    errors: list[tuple[str, str]] = field(default_factory=list)
    input: str | None = None
    output: str | None = None
    entered: datetime | None = None
    exited: datetime | None = None
    #: The state entered after this one.
    next: str | None = None
    #: When caught: the position of the Catch rule that matched in the state's ``Catch`` list.
    catch_index: int | None = None
    #: When caught: that rule's ``ErrorEquals``.
    catch_errors: list[str] | None = None
    #: History event ids that belong to this state, in order.
    event_ids: list[int] = field(default_factory=list)

    @property
    def retries(self) -> int:
        """How many times the state was retried (attempts after the first)."""
        return max(0, self.attempts - 1)

    @property
    def retried_errors(self) -> list[tuple[str, str]]:
        """The errors that were retried: all of them, but the last one when the state ended failed."""
        return self.errors[: self.retries]

    @property
    def duration(self) -> float | None:
        """Seconds from entered to exited, if both are known."""
        if self.entered is None or self.exited is None:
            return None
        return (self.exited - self.entered).total_seconds()


def when(value: Any) -> datetime | None:
    """A history timestamp as an aware datetime (boto3 gives datetimes; JSON dumps give strings)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def details(event: dict[str, Any]) -> dict[str, Any]:
    """The ``...EventDetails`` of an event (``TaskFailed`` -> ``taskFailedEventDetails``)."""
    kind = str(event.get("type", ""))
    key = kind[:1].lower() + kind[1:] + "EventDetails"
    found = event.get(key)
    if isinstance(found, dict):
        return found
    for name, value in event.items():  # tolerate a renamed key: any single *EventDetails
        if name.endswith("EventDetails") and isinstance(value, dict):
            return value
    return {}


def event_id(event: dict[str, Any]) -> int:
    """An event's id (0 when missing): the order the engine recorded events in."""
    return int(event.get("id", 0))


def in_order(history: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events by id: the order the engine recorded them in, whatever order they were read in."""
    return sorted(history, key=event_id)


def matches(error: str, error_equals: Iterable[str]) -> bool:
    """Whether a Retry/Catch ``ErrorEquals`` list matches ``error`` (as the engine decides)."""
    for candidate in error_equals:
        if candidate == error or candidate == "States.ALL":
            return True
        # States.TaskFailed matches every task failure but a timeout.
        if candidate == "States.TaskFailed" and error != "States.Timeout":
            return True
    return False


def trace_steps(history: list[dict[str, Any]], definition: dict[str, Any]) -> list[Step]:
    """One :class:`Step` per state entered, in the order the states were entered.

    Events are attributed to a state by following ``previousEventId`` (so a Parallel or Map
    state's branches do not mix); an event whose predecessor is unknown belongs to the state most
    recently entered and not yet exited.
    """
    states: dict[str, Any] = definition.get("States") or {}
    fold = _Fold(states)
    for event in in_order(history):
        fold.add(event)
    return fold.settle()


class _Fold:
    """The history read so far: the steps, which are still open, and which event belongs to which."""

    def __init__(self, states: dict[str, Any]) -> None:
        self.states = states
        self.steps: list[Step] = []
        #: Event id -> index of the step it belongs to.
        self.owner: dict[int, int] = {}
        #: ``StateExited`` event id -> index of the step it closed (the next entry follows from it).
        self.exit_event: dict[int, int] = {}
        self.open: list[int] = []
        self.last_failed: dict[int, bool] = {}
        self.scheduled: dict[int, int] = {}
        self.ended: dict[str, Any] | None = None

    def add(self, event: dict[str, Any]) -> None:
        """Attribute one event (in id order) to the state it belongs to."""
        kind = str(event.get("type", ""))
        number = event_id(event)
        previous = int(event.get("previousEventId", 0) or 0)
        found = details(event)
        if kind.endswith("StateEntered"):
            index: int | None = self._enter(kind, found, previous, when(event.get("timestamp")))
        elif kind.endswith("StateExited"):
            index = self._exit(number, found, when(event.get("timestamp")))
        elif kind in EXECUTION_END:
            self.ended = event
            if self.open:
                self.owner[number] = self.open[-1]
            return
        else:
            index = self._inside(kind, found, previous)
        if index is None:
            return  # ExecutionStarted and the like belong to no state
        self.owner[number] = index
        self.steps[index].event_ids.append(number)

    def _enter(self, kind: str, found: dict[str, Any], previous: int, moment: datetime | None) -> int:
        name = str(found.get("name", "?"))
        state_type = kind[: -len("StateEntered")] or str((self.states.get(name) or {}).get("Type", "?"))
        self.steps.append(Step(name=name, type=state_type, input=found.get("input"), entered=moment))
        index = len(self.steps) - 1
        self.open.append(index)
        if previous in self.exit_event:
            self.steps[self.exit_event[previous]].next = name
        return index

    def _exit(self, number: int, found: dict[str, Any], moment: datetime | None) -> int | None:
        name = str(found.get("name", "?"))
        candidates = [i for i in self.open if self.steps[i].name == name]
        if not candidates:
            return None
        index = candidates[-1]
        self.open.remove(index)
        self.steps[index].output = found.get("output")
        self.steps[index].exited = moment
        self.exit_event[number] = index
        return index

    def _inside(self, kind: str, found: dict[str, Any], previous: int) -> int | None:
        """An event within a state: an attempt started, failed or succeeded, or anything else."""
        index = self.owner.get(previous)
        if index is None or index not in self.open:
            index = self.open[-1] if self.open else None
        if index is None:
            return None
        step = self.steps[index]
        if kind in ATTEMPT_EVENTS:
            # A ScheduleFailed replaces the Scheduled event: either one starts an attempt.
            self.scheduled[index] = self.scheduled.get(index, 0) + 1
            step.attempts = self.scheduled[index]
        if kind in FAILURE_EVENTS:
            step.errors.append((str(found.get("error", kind)), str(found.get("cause", ""))))
            self.last_failed[index] = True
        elif kind in SUCCESS_EVENTS:
            self.last_failed[index] = False
        return index

    def settle(self) -> list[Step]:
        """Each step's status, where it went next, and which Catch sent it there."""
        steps = self.steps
        for position, step in enumerate(steps):
            if step.exited is not None:
                step.status = _exit_status(step, failed_last=bool(self.last_failed.get(position)))
                if step.next is None and position + 1 < len(steps):
                    step.next = steps[position + 1].name
            elif self.ended is not None:
                _close_with_execution(step, self.ended)
            if step.status == "caught" and step.next is not None:
                _find_catch(step, self.states.get(step.name) or {})
        return steps


def _exit_status(step: Step, *, failed_last: bool) -> StepStatus:
    """A state that was exited: its last attempt failed (and was caught), or it got past its errors."""
    if step.errors and failed_last:
        return "caught"
    return "retried" if step.errors else "succeeded"


def _close_with_execution(step: Step, ended: dict[str, Any]) -> None:
    """A state the execution ended in: it has no exit event, the execution's end tells its fate."""
    found = details(ended)
    step.exited = when(ended.get("timestamp"))
    kind = ended.get("type")
    if kind == "ExecutionSucceeded":
        step.status = "succeeded"
        return
    step.status = "failed"
    error = found.get("error") or {"ExecutionTimedOut": "States.Timeout"}.get(str(kind), str(kind))
    if step.type == "Fail" or not step.errors or step.errors[-1][0] != error:
        step.errors.append((str(error), str(found.get("cause", ""))))


def _find_catch(step: Step, state: dict[str, Any]) -> None:
    """The Catch rule that routed the step's last error to ``step.next`` (the first that matches)."""
    error = step.errors[-1][0] if step.errors else ""
    catchers = [c for c in state.get("Catch") or [] if isinstance(c, dict)]
    ranked = [i for i, c in enumerate(catchers) if c.get("Next") == step.next]
    for index in ranked:
        if matches(error, catchers[index].get("ErrorEquals") or []):
            step.catch_index = index
            break
    else:
        step.catch_index = ranked[0] if ranked else None
    if step.catch_index is not None:
        step.catch_errors = [str(e) for e in catchers[step.catch_index].get("ErrorEquals") or []]


def execution_error(description: dict[str, Any], history: list[dict[str, Any]]) -> tuple[str, str]:
    """The execution's ``(error, cause)``: from ``DescribeExecution``, else from its end event."""
    error = description.get("error")
    cause = description.get("cause")
    if error is None:
        for event in reversed(history):
            if event.get("type") in EXECUTION_FAILURES:
                found = details(event)
                error, cause = found.get("error"), found.get("cause")
                break
    return str(error or ""), str(cause or "")


def execution_duration(description: dict[str, Any]) -> float | None:
    """Seconds from the execution's start to its stop, once it stopped."""
    start, stop = when(description.get("startDate")), when(description.get("stopDate"))
    return (stop - start).total_seconds() if start and stop else None
