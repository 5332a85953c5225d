"""Just enough of Amazon States Language to run ``statemachine/payment_saga.asl.json`` step by step.

The model does not copy the saga's Retry and Catch rules: it reads them from the real definition, so
a change there (a retrier removed, a Catch routed elsewhere) changes what the model explores. What is
supported is what the definition uses -- Task (``lambda:invoke``, ``Parameters``, ``ResultSelector``,
``ResultPath``, ``Retry``, ``Catch``; other integrations -- the outcome events' ``events:putEvents``,
the re-queues' ``sqs:sendMessage`` -- succeed at once, their resolved ``Parameters`` handed to the
model's ``integration`` callback, ``States.Format`` included),
Choice (``StringEquals``, ``BooleanEquals``, ``NumericEquals``, ``IsPresent``, ``And``, ``Or``,
``Not``), Pass, Succeed and Fail (``Error`` and ``Cause``, or ``ErrorPath`` and ``CausePath``), and
workflow variables (``Assign`` in a Catch or a Choice rule, read as ``$name.field``) -- and anything
else raises :class:`Unsupported` instead of being guessed at.

An execution is plain data (:class:`Execution`), so the explorer can copy, hash and restore it. Only a
Task is a step of the model (one Lambda invocation); the Choice, Pass and Fail states after it run at
once, since nothing outside the execution can observe them.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    #: ``(execution, state name, Resource, resolved Parameters)`` of a Task that is not a Lambda.
    Integration = Callable[["Execution", str, str, dict[str, Any]], None]

RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"

#: ``States.ALL`` matches every error but these (ASL specification, "Error names").
_NOT_MATCHED_BY_ALL = frozenset({"States.Runtime", "States.DataLimitExceeded"})


class Unsupported(Exception):
    """The definition uses an ASL feature this interpreter does not implement."""


@dataclass
class TaskFailure(Exception):
    """What a Lambda invocation reported instead of a result: ``Error`` and ``Cause``."""

    error: str
    cause: str = ""


@dataclass
class Execution:
    """One Step Functions execution: where it is, its state document and its counters."""

    arn: str
    state: str
    data: dict[str, Any]
    started_at: int
    status: str = RUNNING
    #: The terminal state's name (``Order Charged``, ``Claim Failed``...) or ``error`` of a Fail state.
    end: str | None = None
    error: str | None = None
    redrive_count: int = 0
    retry_count: int = 0
    #: Per retrier of the current state: how many retries it granted.
    retriers: list[int] = field(default_factory=list)
    #: The workflow variables ``Assign`` set so far.
    variables: dict[str, Any] = field(default_factory=dict)
    #: What the execution was started with (``$$.Execution.Input``).
    execution_input: dict[str, Any] = field(default_factory=dict)

    def key(self) -> tuple[Any, ...]:
        """Everything that decides what the execution does next (for the explorer's state hash).

        An execution that ended for good (succeeded, or failed in a Fail state) does nothing more: only
        how it ended, and the charge it reports, still count.
        """
        if self.status in (SUCCEEDED, FAILED):
            return (self.status, self.end, self.error, self.data.get("chargeId"))
        return (
            self.status,
            self.state,
            self.end,
            self.error,
            self.redrive_count,
            self.retry_count,
            tuple(self.retriers),
            self.started_at,
            json.dumps(self.data, sort_keys=True, separators=(",", ":")),
            json.dumps(self.variables, sort_keys=True, separators=(",", ":")),
        )


class StateMachine:
    """A parsed definition. ``function_of(Parameters.FunctionName)`` names the Lambda a Task invokes."""

    def __init__(
        self,
        definition: dict[str, Any],
        *,
        integration: Integration | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.definition = definition
        self.integration = integration
        self.clock = clock
        self.states: dict[str, dict[str, Any]] = definition["States"]
        self.start_at: str = definition["StartAt"]
        self.timeout_seconds: int = int(definition.get("TimeoutSeconds", 0))
        for name, state in self.states.items():
            if state["Type"] not in {"Task", "Choice", "Pass", "Succeed", "Fail"}:
                raise Unsupported(f"state {name!r}: type {state['Type']}")
            if "Assign" in state:
                raise Unsupported(f"state {name!r}: Assign on the state (only in a Catch or a Choice rule)")

    def start(self, arn: str, execution_input: dict[str, Any], now: int) -> Execution:
        execution = Execution(
            arn=arn,
            state=self.start_at,
            data=copy.deepcopy(execution_input),
            started_at=now,
            execution_input=copy.deepcopy(execution_input),
        )
        self._settle(execution)
        return execution

    def task_function(self, execution: Execution) -> str:
        """The ``FunctionName`` the execution's current Task invokes (a ``${...}`` substitution)."""
        state = self.states[execution.state]
        return str(state["Parameters"]["FunctionName"])

    def task_payload(self, execution: Execution) -> dict[str, Any]:
        """The Lambda payload of the current Task (``Parameters.Payload`` resolved)."""
        state = self.states[execution.state]
        resource = state.get("Resource", "")
        if not resource.endswith(":states:::lambda:invoke"):
            raise Unsupported(f"state {execution.state!r}: resource {resource}")
        document = _select(execution.data, state.get("InputPath", "$"))
        payload: dict[str, Any] = _parameters(
            state["Parameters"]["Payload"], document, self._context(execution), execution.variables
        )
        return payload

    def after_task(self, execution: Execution, outcome: dict[str, Any] | TaskFailure) -> None:
        """Apply a Task's result (or failure) to the execution, then run on to the next Task or the end."""
        state = self.states[execution.state]
        if isinstance(outcome, TaskFailure):
            if self._retry(execution, state, outcome.error):
                return
            catcher = next(
                (c for c in state.get("Catch", []) if _matches(c["ErrorEquals"], outcome.error)), None
            )
            if catcher is None:
                execution.status, execution.end, execution.error = FAILED, execution.state, outcome.error
                return
            error_output = {"Error": outcome.error, "Cause": outcome.cause}
            # A Catch's Assign reads the error output as ``$``.
            self._assign(execution, catcher, error_output)
            execution.data = _put(execution.data, catcher.get("ResultPath", "$"), error_output)
            self._enter(execution, catcher["Next"])
            return
        result: Any = {"Payload": outcome, "StatusCode": 200}
        if "ResultSelector" in state:
            result = _parameters(
                state["ResultSelector"], result, self._context(execution), execution.variables
            )
        execution.data = _put(execution.data, state.get("ResultPath", "$"), result)
        execution.data = _select(execution.data, state.get("OutputPath", "$"))
        self._next(execution, state)

    def retried(self, execution: Execution, error: str) -> bool:
        """Whether the current Task's Retry would retry ``error`` now (its last try when not)."""
        retriers = self.states[execution.state].get("Retry", [])
        granted = execution.retriers or [0] * len(retriers)
        for index, retrier in enumerate(retriers):
            if _matches(retrier["ErrorEquals"], error):
                return granted[index] < int(retrier.get("MaxAttempts", 3))
        return False

    def time_out(self, execution: Execution) -> None:
        """The execution outlived its ``TimeoutSeconds``: it stops where it is (a Task may be redriven)."""
        execution.status, execution.error = TIMED_OUT, "States.Timeout"

    def redrive(self, execution: Execution, now: int) -> None:
        """Step Functions redrive: rerun the unsuccessful Task with the same state, counters reset."""
        if execution.status not in (TIMED_OUT, FAILED) or self.states[execution.state]["Type"] != "Task":
            raise ValueError(f"{execution.arn} cannot be redriven from {execution.state}")
        execution.status, execution.error, execution.end = RUNNING, None, None
        execution.redrive_count += 1
        execution.retry_count, execution.retriers = 0, []
        execution.started_at = now

    # -- internals ------------------------------------------------------------------------------

    def _context(self, execution: Execution) -> dict[str, Any]:
        now = self.clock() if self.clock is not None else float(execution.started_at)
        entered = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return {
            "Execution": {
                "Id": execution.arn,
                "Name": execution.arn.rsplit(":", 1)[-1],
                "RedriveCount": execution.redrive_count,
                "Input": execution.execution_input,
            },
            "State": {"Name": execution.state, "RetryCount": execution.retry_count, "EnteredTime": entered},
        }

    def _retry(self, execution: Execution, state: dict[str, Any], error: str) -> bool:
        retriers = state.get("Retry", [])
        if not execution.retriers:
            execution.retriers = [0] * len(retriers)
        for index, retrier in enumerate(retriers):
            if not _matches(retrier["ErrorEquals"], error):
                continue
            if execution.retriers[index] >= int(retrier.get("MaxAttempts", 3)):
                return False
            execution.retriers[index] += 1
            execution.retry_count += 1
            return True
        return False

    def _next(self, execution: Execution, state: dict[str, Any]) -> None:
        if state.get("End"):
            execution.status, execution.end = SUCCEEDED, execution.state
            return
        self._enter(execution, state["Next"])

    def _enter(self, execution: Execution, name: str) -> None:
        execution.state, execution.retry_count, execution.retriers = name, 0, []
        self._settle(execution)

    def _settle(self, execution: Execution) -> None:
        """Run the states that are not Tasks until a Task (a model step) or the end."""
        while execution.status == RUNNING:
            state = self.states[execution.state]
            kind = state["Type"]
            if kind == "Task" and is_lambda(state):
                return
            if kind == "Task":
                # Another integration (EventBridge putEvents: an outcome event; SQS sendMessage: the
                # order sent back to the queue) succeeds at once, its result discarded; the model
                # gets what it sends (its bus and its orders queue).
                if state.get("ResultPath", "$") is not None or "ResultSelector" in state:
                    raise Unsupported(f"state {execution.state!r}: a non-Lambda Task whose result is kept")
                if self.integration is not None:
                    document = _select(execution.data, state.get("InputPath", "$"))
                    parameters = _parameters(
                        state.get("Parameters", {}), document, self._context(execution), execution.variables
                    )
                    self.integration(execution, execution.state, str(state["Resource"]), parameters)
                self._next(execution, state)
                continue
            if kind == "Fail":
                execution.status, execution.end = FAILED, execution.state
                error = state.get("Error")
                if "ErrorPath" in state:
                    error = _reference(
                        state["ErrorPath"], execution.data, self._context(execution), execution.variables
                    )
                execution.error = error
                return
            if kind == "Succeed":
                execution.status, execution.end = SUCCEEDED, execution.state
                return
            if kind == "Pass":
                self._pass(execution, state)
                continue
            execution.state = self._choose(execution, state)

    def _assign(self, execution: Execution, where: dict[str, Any], document: Any) -> None:
        """``Assign`` (of a Catch or a Choice rule): every value is resolved, then all are set at once."""
        if "Assign" in where:
            assigned = _parameters(where["Assign"], document, self._context(execution), execution.variables)
            execution.variables = {**execution.variables, **assigned}

    def _pass(self, execution: Execution, state: dict[str, Any]) -> None:
        if "Parameters" in state:
            result = _parameters(
                state["Parameters"], execution.data, self._context(execution), execution.variables
            )
        else:
            result = state.get("Result", execution.data)
        execution.data = _put(execution.data, state.get("ResultPath", "$"), result)
        self._next(execution, state)

    def _choose(self, execution: Execution, state: dict[str, Any]) -> str:
        for rule in state.get("Choices", []):
            if _rule(rule, execution.data):
                self._assign(execution, rule, execution.data)
                return str(rule["Next"])
        if "Default" not in state:
            raise Unsupported(f"state {execution.state!r}: no choice matched and there is no Default")
        return str(state["Default"])


def is_lambda(state: dict[str, Any]) -> bool:
    """Whether a Task invokes a Lambda function (the model's steps); others run at once."""
    return str(state.get("Resource", "")).endswith(":states:::lambda:invoke")


def _matches(names: list[str], error: str) -> bool:
    if error in names:
        return True
    if "States.ALL" in names and error not in _NOT_MATCHED_BY_ALL:
        return True
    return "States.TaskFailed" in names and error != "States.Timeout" and not error.startswith("States.")


_MISSING = object()


def _path(document: Any, path: str) -> Any:
    """A JSONPath of the simple form ``$``, ``$.a.b`` (what the definition uses); ``_MISSING`` if absent."""
    if path == "$":
        return document
    if not path.startswith("$.") or any(ch in path for ch in "[]*?@"):
        raise Unsupported(f"JSONPath {path!r}")
    node = document
    for part in path[2:].split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _select(document: Any, path: str | None) -> Any:
    if path is None:
        return {}
    value = _path(document, path)
    if value is _MISSING:
        raise Unsupported(f"path {path!r} is absent (States.Runtime)")
    return value


def _put(document: Any, path: str | None, value: Any) -> Any:
    """``ResultPath``: null discards the result, ``$`` replaces the document, ``$.a.b`` sets a field."""
    if path is None:
        return document
    if path == "$":
        return copy.deepcopy(value)
    if not path.startswith("$."):
        raise Unsupported(f"ResultPath {path!r}")
    result = copy.deepcopy(document)
    node = result
    parts = path[2:].split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = copy.deepcopy(value)
    return result


def _parameters(template: Any, document: Any, context: dict[str, Any], variables: dict[str, Any]) -> Any:
    """Resolve a ``Parameters`` / ``ResultSelector`` / ``Assign`` template (``key.$`` fields are paths)."""
    if isinstance(template, list):
        return [_parameters(item, document, context, variables) for item in template]
    if not isinstance(template, dict):
        return template
    resolved: dict[str, Any] = {}
    for key, value in template.items():
        if not key.endswith(".$"):
            resolved[key] = _parameters(value, document, context, variables)
            continue
        if not isinstance(value, str):
            raise Unsupported(f"non-path value for {key!r}: {value!r}")
        if value.startswith("States."):
            resolved[key[:-2]] = _intrinsic(value, document, context, variables)
            continue
        resolved[key[:-2]] = copy.deepcopy(_reference(value, document, context, variables))
    return resolved


def _reference(value: str, document: Any, context: dict[str, Any], variables: dict[str, Any]) -> Any:
    """A path into the document (``$.a``), the context object (``$$.Execution.Name``) or a workflow
    variable (``$name.a``)."""
    if value.startswith("$$."):
        source, path = context, value[1:]
    elif value == "$" or value.startswith("$."):
        source, path = document, value
    else:
        name, dot, rest = value[1:].partition(".")
        if name not in variables:
            raise Unsupported(f"variable {name!r} was never assigned (States.Runtime)")
        source, path = variables[name], "$" + dot + rest
    found = _path(source, path)
    if found is _MISSING:
        raise Unsupported(f"path {value!r} is absent (States.Runtime)")
    return found


_FORMAT = re.compile(r"^States\.Format\('((?:[^'\\]|\\.)*)'((?:\s*,\s*\$[^,)]*)*)\)$")


def _intrinsic(value: str, document: Any, context: dict[str, Any], variables: dict[str, Any]) -> Any:
    """``States.Format('{}/x/{}', $.a, $$.b)`` with path arguments: what the definition uses."""
    match = _FORMAT.match(value)
    if match is None:
        raise Unsupported(f"intrinsic function {value!r}")
    template = match.group(1)
    arguments = [
        _reference(argument.strip(), document, context, variables)
        for argument in match.group(2).split(",")
        if argument.strip()
    ]
    pieces = template.split("{}")
    if len(pieces) != len(arguments) + 1:
        raise Unsupported(f"States.Format with {len(arguments)} argument(s) for {len(pieces) - 1}: {value!r}")
    text = pieces[0]
    for argument, piece in zip(arguments, pieces[1:], strict=True):
        text += (argument if isinstance(argument, str) else json.dumps(argument)) + piece
    return text


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "StringEquals": lambda actual, expected: isinstance(actual, str) and actual == expected,
    "BooleanEquals": lambda actual, expected: isinstance(actual, bool) and actual == expected,
    "NumericEquals": lambda actual, expected: (
        isinstance(actual, (int, float)) and not isinstance(actual, bool) and actual == expected
    ),
}


def _rule(rule: dict[str, Any], document: Any) -> bool:
    if "And" in rule:
        return all(_rule(inner, document) for inner in rule["And"])
    if "Or" in rule:
        return any(_rule(inner, document) for inner in rule["Or"])
    if "Not" in rule:
        return not _rule(rule["Not"], document)
    actual = _path(document, rule["Variable"])
    if "IsPresent" in rule:
        return (actual is not _MISSING) == bool(rule["IsPresent"])
    for name, compare in _COMPARISONS.items():
        if name in rule:
            return actual is not _MISSING and compare(actual, rule[name])
    raise Unsupported(f"choice rule {sorted(rule)}")
