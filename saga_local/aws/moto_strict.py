"""AWS Step Functions' documented error rules, which moto's interpreter does not follow.

Patches :mod:`saga_local.aws.moto_adapter` applies to moto's Step Functions interpreter (its
``patched_moto`` wires them in), each checked by ``tests/conformance`` against the AWS page and
sentence it encodes:

* Retry and Catch's error matching (:func:`error_equals`): a ``States.Runtime`` error is never
  retried nor caught, and ``States.DataLimitExceeded`` only by a retrier or catcher that names it,
  not by ``States.ALL``. moto lets ``States.ALL`` match both, so a definition that reads a path its
  input may lack (a ``ResultSelector`` over a Lambda's answer) was retried and caught locally where
  AWS fails the execution.
* a Choice rule comparing a field that is absent (:func:`absent_variable_fails`): ``States.Runtime``
  ("Invalid path ...: The choice state's condition path references an invalid value"), as AWS fails
  it; moto takes it for no match and moves on. Only ``IsPresent`` may test a field that is not there.
* a Task's input after ``Parameters`` (:func:`parameters_within_quota`): held to the payload quota
  (256 KiB); AWS fails such a state with ``States.DataLimitExceeded``, moto checked results and
  outputs only.
* a Task's success after its ``TimeoutSeconds`` (:func:`no_late_success`): not recorded. moto left
  the timed-out call running and recorded its late ``TaskSucceeded`` after the ``TaskTimedOut``; on
  AWS the abandoned call's answer is discarded.
* a workflow variable read in a JSONPath state (:func:`jsonpath_variable_sample`): ``$name`` or
  ``$name.field`` in a ``.$`` field or a Fail state's ``ErrorPath``/``CausePath`` is the value
  ``Assign`` gave it ("To reference a variable, prepend the name with a dollar sign"). moto samples
  it through a JSONata evaluator that it does not ship, so every such read failed with
  ``States.Runtime``.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from moto.stepfunctions.parser.api import (
    ExecutionFailedEventDetails,
    HistoryEventType,
    TaskFailedEventDetails,
)
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.component.state.choice.comparison.comparison_operator_type import (
    ComparisonOperatorType,
)
from moto.stepfunctions.parser.asl.component.state.choice.comparison.variable import NoSuchVariable
from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails
from moto.stepfunctions.parser.quotas import is_within_size_quota

#: Never retried nor caught, whatever a retrier or catcher names (AWS: "A States.Runtime error isn't
#: retriable, and will always cause the execution to fail").
RUNTIME_ERROR = "States.Runtime"
#: Caught or retried only where named: "A terminal error which cannot be caught by the States.ALL
#: error type."
DATA_LIMIT_ERROR = "States.DataLimitExceeded"


def _failure(
    env: Any, error: StatesErrorNameType, event_type: HistoryEventType, details: EventDetails
) -> FailureEventException:
    """What moto's interpreter raises to fail a state or the execution: ``error``, recorded in the
    history as an ``event_type`` event with ``details``."""
    return FailureEventException(
        failure_event=FailureEvent(
            env=env, error_name=StatesErrorName(typ=error), event_type=event_type, event_details=details
        )
    )


def error_equals(original: Any) -> Any:
    """``ErrorEqualsDecl._eval_body`` (one retrier's or catcher's match) with AWS's two exceptions."""

    @functools.wraps(original)
    def eval_body(self: Any, env: Any) -> None:
        error_name = env.stack[-1]
        name = getattr(error_name, "error_name", None)
        if name == RUNTIME_ERROR:
            env.stack.pop()
            env.stack.append(False)
        elif name == DATA_LIMIT_ERROR:
            env.stack.pop()
            env.stack.append(any(named.error_name == DATA_LIMIT_ERROR for named in self.error_names))
        else:
            original(self, env)

    return eval_body


#: The cause AWS gives a Choice rule whose Variable finds nothing.
_ABSENT_VARIABLE = "The choice state's condition path references an invalid value."


def absent_variable_fails(original: Any) -> Any:
    """``ComparisonVariable._eval_body`` (one Choice rule's ``Variable`` and its test), failing with
    States.Runtime when the Variable finds nothing and the test is not ``IsPresent``."""

    @functools.wraps(original)
    def eval_body(self: Any, env: Any) -> None:
        if self.comparison_function.operator_type != ComparisonOperatorType.IsPresent:
            self.variable.eval(env)
            sampled = env.stack.pop()
            if isinstance(sampled, NoSuchVariable):
                path = self.variable.string_sampler.literal_value
                error = StatesErrorNameType.StatesRuntime
                cause = f"Invalid path '{path}': {_ABSENT_VARIABLE}"
                details = ExecutionFailedEventDetails(error=error.to_name(), cause=cause)
                raise _failure(
                    env,
                    error,
                    HistoryEventType.ExecutionFailed,
                    EventDetails(executionFailedEventDetails=details),
                )
        original(self, env)

    return eval_body


def parameters_within_quota(original: Any) -> Any:
    """``StateTask._eval_parameters`` (a Task's effective input), failing with States.DataLimitExceeded
    over the payload quota: "After Parameters processing, the input of a state is larger than the
    payload size quota" is one of the conditions AWS's error-handling guide lists for it."""

    @functools.wraps(original)
    def eval_parameters(self: Any, env: Any) -> Any:
        parameters = original(self, env)
        if is_within_size_quota(parameters):
            return parameters
        error = StatesErrorNameType.StatesStatesDataLimitExceeded
        cause = f"The state '{self.name}' has an input, after Parameters, over the payload size quota."
        details = TaskFailedEventDetails(error=error.to_name(), cause=cause)
        raise _failure(env, error, HistoryEventType.TaskFailed, EventDetails(taskFailedEventDetails=details))

    return eval_parameters


def no_late_success(original: Any) -> Any:
    """``StateTaskService._after_eval_execution`` (the size check and ``TaskSucceeded``), skipped for
    a call that answered after its state's ``TimeoutSeconds``: moto ends that call's frame when the
    timeout fires, and carries on with ``States.Timeout`` while the call runs to its end."""

    @functools.wraps(original)
    def after_eval_execution(self: Any, env: Any, *args: Any, **kwargs: Any) -> None:
        with env._state_mutex:  # the timeout ends the frame under this lock
            if not env.is_running():
                return
            original(self, env, *args, **kwargs)

    return after_eval_execution


def jsonpath_variable_sample(original: Any) -> Any:
    """``StringVariableSample._eval_body`` in a JSONPath state: the variable from the execution's store,
    then each ``.field`` of it. A JSONata state (or any other form) keeps moto's own evaluation."""

    @functools.wraps(original)
    def eval_body(self: Any, env: Any) -> None:
        name, *fields = self.expression[1:].split(".")
        if self.query_language_mode.name != "JSONPath" or not name.isidentifier():
            original(self, env)
            return
        value = env.variable_store.get(name)  # NoSuchVariable: a States.Runtime failure, as on AWS
        for key in fields:
            value = value[key]
        env.stack.append(copy.deepcopy(value))

    return eval_body
