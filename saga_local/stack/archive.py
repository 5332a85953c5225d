"""Executions kept after their stack is gone, so that ``saga trace NAME`` still answers.

``saga demo`` runs on stacks that stop when it ends; it records each execution it prints (the
description, the history and the state machine's definition, exactly what ``saga trace`` reads
from Step Functions) under ``.saga/executions/NAME.json`` (see :mod:`saga_local.paths`).
``saga trace`` looks there when no running stack knows the name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from saga_local.paths import STATE_DIR
from saga_local.private_files import write_private_text

if TYPE_CHECKING:
    from pathlib import Path

ARCHIVE_DIR = STATE_DIR / "executions"
#: Step Functions execution names: letters, digits, ``-`` and ``_`` (80 at most).
_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")


@dataclass(frozen=True)
class RecordedExecution:
    """What ``saga trace`` renders: DescribeExecution, GetExecutionHistory, the ASL definition."""

    description: dict[str, Any]
    history: list[dict[str, Any]]
    definition: str


def _json_default(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot record a {type(value).__name__}")


def read_execution(sfn: Any, execution_arn: str) -> RecordedExecution:
    """Read one execution from Step Functions (raises the client's errors, e.g. ExecutionDoesNotExist)."""
    description = sfn.describe_execution(executionArn=execution_arn)
    history: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
        history.extend(page["events"])
    definition = sfn.describe_state_machine(stateMachineArn=description["stateMachineArn"])["definition"]
    description.pop("ResponseMetadata", None)
    return RecordedExecution(description, history, str(definition))


def record(execution: RecordedExecution, directory: Path | None = None) -> Path:
    """Write ``execution`` under ``directory`` (default :data:`ARCHIVE_DIR`) by its name; returns the file."""
    directory = directory or ARCHIVE_DIR
    name = str(execution.description["name"])
    # The name becomes a path: only what Step Functions allows in one (load checks the same).
    if not _NAME.fullmatch(name):
        raise ValueError("an execution name must be 1-80 letters, digits, - or _ to be recorded")
    path = directory / f"{name}.json"
    body = {
        "description": execution.description,
        "history": execution.history,
        "definition": execution.definition,
    }
    return write_private_text(path, json.dumps(body, default=_json_default))


def load(name: str, directory: Path | None = None) -> RecordedExecution | None:
    """The recorded execution called ``name`` (or whose ARN ends in it), if there is one."""
    directory = directory or ARCHIVE_DIR
    name = name.rsplit(":", 1)[-1]
    if not _NAME.fullmatch(name):
        return None
    path = directory / f"{name}.json"
    if not path.is_file():
        return None
    body = json.loads(path.read_text(encoding="utf-8"))
    return RecordedExecution(body["description"], body["history"], body["definition"])


def names(directory: Path | None = None, limit: int = 5) -> list[str]:
    """The most recently recorded execution names, newest first."""
    directory = directory or ARCHIVE_DIR
    if not directory.is_dir():
        return []
    files = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    return [path.stem for path in files[:limit]]
