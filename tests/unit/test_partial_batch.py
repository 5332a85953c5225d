"""The SQS functions' partial batch response: a message that fails is retried alone, never its neighbours.

The start function and the webhook consumer hand each message of a batch to ``runtime.each_message``.
SQS deletes every message the response does not name, so a failure must be named (or the message is
lost) and a success must not be (or it is processed again); a batch that failed whole is an error
Lambda counts, as it was with Powertools' batch utility.
"""

from __future__ import annotations

from typing import Any

import pytest

from handlers.runtime import BatchFailed, each_message


def batch(*bodies: str) -> dict[str, Any]:
    return {"Records": [{"messageId": f"m-{i}", "body": body} for i, body in enumerate(bodies)]}


def handle(record: dict[str, Any]) -> None:
    if record["body"] == "poison":
        raise ValueError(f"cannot read {record['messageId']}")
    handled.append(record["messageId"])


handled: list[str] = []


@pytest.fixture(autouse=True)
def _forget() -> None:
    handled.clear()


def test_a_poison_message_is_reported_alone_and_its_neighbours_go_through() -> None:
    response = each_message(batch("ok", "poison", "ok", "poison"), handle)
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}, {"itemIdentifier": "m-3"}]}
    assert handled == ["m-0", "m-2"]  # the messages after a failure are handled, not held back


def test_a_batch_that_went_through_reports_nothing_to_retry() -> None:
    assert each_message(batch("ok", "ok"), handle) == {"batchItemFailures": []}
    assert handled == ["m-0", "m-1"]


def test_a_batch_that_failed_whole_fails_the_invocation_with_its_last_error() -> None:
    with pytest.raises(BatchFailed, match=r"every message of the batch failed \(2\)") as failed:
        each_message(batch("poison", "poison"), handle)
    assert isinstance(failed.value.__cause__, ValueError)
    assert "m-1" in str(failed.value.__cause__)


def test_an_empty_event_is_not_a_failure() -> None:
    assert each_message({"Records": []}, handle) == {"batchItemFailures": []}
    assert each_message({}, handle) == {"batchItemFailures": []}
