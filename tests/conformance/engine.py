"""Small hand-written definitions run on the local engine, their Lambdas scripted stand-ins."""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3

from saga_local.aws.moto_adapter import EngineHooks, redrive_execution
from saga_local.aws.stack import REGION
from saga_local.runtime.api import Invocation

#: A stand-in's script: called with the event, it returns the answer or raises :class:`LambdaError`.
StandIn = Callable[[dict[str, Any]], Any]
TERMINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}


class LambdaError(Exception):
    """A stand-in's failure, answered as Lambda answers a function's error: ``Error`` is ``error_type``."""

    def __init__(self, error_type: str, message: str = "scripted") -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass
class StandIns:
    """A ``LambdaRuntime`` whose functions are Python callables, with every event they were given."""

    scripts: dict[str, StandIn] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    answered: threading.Event = field(default_factory=threading.Event)

    def invoke(self, function_name: str, payload: bytes) -> Invocation:
        event = json.loads(payload or b"{}")
        self.events.setdefault(function_name, []).append(event)
        try:
            answer = self.scripts[function_name](event)
        except LambdaError as error:
            body = {"errorType": error.error_type, "errorMessage": str(error)}
            return Invocation(json.dumps(body).encode(), function_error="Unhandled")
        finally:
            self.answered.set()
        return Invocation(json.dumps(answer).encode())


@dataclass(frozen=True)
class Run:
    """How an execution ended, and its history."""

    arn: str
    status: str
    error: str | None
    cause: str | None
    output: Any
    history: list[dict[str, Any]]

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.history if event["type"] == kind]

    def entered(self) -> list[str]:
        return [e["stateEnteredEventDetails"]["name"] for e in self.events_ending("StateEntered")]

    def events_ending(self, suffix: str) -> list[dict[str, Any]]:
        return [event for event in self.history if event["type"].endswith(suffix)]


class Engine:
    """Creates stand-in functions and state machines on moto, runs executions to their end."""

    def __init__(self, stand_ins: StandIns, hooks: EngineHooks) -> None:
        self.stand_ins = stand_ins
        self.hooks = hooks
        self._lambda = boto3.client("lambda", region_name=REGION)
        self._sfn = boto3.client("stepfunctions", region_name=REGION)
        self._role = boto3.client("iam", region_name=REGION).create_role(
            RoleName="conformance",
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
        )["Role"]["Arn"]
        self._machines = 0

    def function(self, name: str, script: StandIn) -> str:
        """A Lambda function answered by ``script``; returns its ARN, for ``Parameters.FunctionName``."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("README.txt", "answered by a stand-in")
        arn: str = self._lambda.create_function(
            FunctionName=name,
            Runtime="python3.13",
            Role=self._role,
            Handler="stand_in.handler",
            Code={"ZipFile": buffer.getvalue()},
        )["FunctionArn"]
        self.stand_ins.scripts[name] = script
        return arn

    def run(self, definition: dict[str, Any], execution_input: Any = None, *, timeout: float = 30.0) -> Run:
        self._machines += 1
        machine = self._sfn.create_state_machine(
            name=f"conformance-{self._machines}", definition=json.dumps(definition), roleArn=self._role
        )["stateMachineArn"]
        arn = self._sfn.start_execution(
            stateMachineArn=machine, input=json.dumps({} if execution_input is None else execution_input)
        )["executionArn"]
        return self._wait(arn, timeout)

    def redrive(self, run: Run, *, timeout: float = 30.0) -> Run:
        """RedriveExecution (the adapter's: moto has none), then the redriven run to its end."""
        redrive_execution(run.arn)
        return self._wait(run.arn, timeout)

    def _wait(self, arn: str, timeout: float) -> Run:
        deadline = time.monotonic() + timeout
        while (described := self._sfn.describe_execution(executionArn=arn))["status"] not in TERMINAL:
            assert time.monotonic() < deadline, f"{arn} still running after {timeout} s"
            time.sleep(0.01)
        return Run(
            arn,
            described["status"],
            described.get("error"),
            described.get("cause"),
            json.loads(described["output"]) if described.get("output") else None,
            self.history(arn),
        )

    def history(self, arn: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for page in self._sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
            events.extend(dict(event) for event in page["events"])
        return events


def task(function_arn: str, **fields: Any) -> dict[str, Any]:
    """A Lambda Task as the saga writes them (the ``lambda:invoke`` integration), ``fields`` added."""
    state: dict[str, Any] = {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke",
        "Parameters": {"FunctionName": function_arn, "Payload.$": "$"},
    }
    state.update(fields)
    if "Next" not in state:
        state["End"] = True
    return state


def machine(start: str, **states: dict[str, Any]) -> dict[str, Any]:
    """A definition; each keyword is a state (underscores in its name read as spaces)."""
    return {"StartAt": start, "States": {name.replace("_", " "): state for name, state in states.items()}}


def failing(*errors: str, then: Any = None) -> StandIn:
    """A stand-in that fails with ``errors`` in turn, then answers ``then`` (or fails again)."""
    remaining = list(errors)

    def script(_: dict[str, Any]) -> Any:
        if remaining:
            raise LambdaError(remaining.pop(0))
        if then is None:
            raise LambdaError(errors[-1])
        return then

    return script


FAIL = {"Type": "Fail", "Error": "Caught"}
SUCCEED = {"Type": "Succeed"}
