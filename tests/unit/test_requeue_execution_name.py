"""A re-queued order's execution is named after its ``requeueEventId``: every copy of one re-queue
attaches to one execution, and no two re-queues share a name."""

from __future__ import annotations

import re

from payment_saga.execution_names import execution_name, requeue_execution_name

#: Step Functions' rule for execution names.
VALID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def test_every_copy_of_one_requeue_names_the_same_execution_whatever_its_message_id() -> None:
    requeue = "ORDER-003/attempt-1/requeued"

    names = {execution_name("ORDER-003", message_id, requeue) for message_id in ("m-1", "m-2")}

    assert names == {requeue_execution_name(requeue)}
    (name,) = names
    assert VALID.match(name)
    assert name.startswith("ORDER-003_attempt-1_requeued-"), "readable in the console"


def test_requeues_of_other_attempts_or_orders_that_sanitise_alike_name_other_executions() -> None:
    ids = [
        "A.B/attempt-1/requeued",
        "A_B/attempt-1/requeued",  # '.' and '/' both become '_'
        "A.B/attempt-2/requeued",
        "X" * 64 + "/attempt-1/requeued",  # too long: cut, and the digest still tells them apart
        "X" * 64 + "/attempt-2/requeued",
    ]

    names = [requeue_execution_name(i) for i in ids]

    assert len(set(names)) == len(ids)
    assert all(VALID.match(name) for name in names)


def test_a_message_the_relay_did_not_requeue_is_still_named_after_its_message_id() -> None:
    assert execution_name("ORDER-003", "5f1c-22") == "ORDER-003-5f1c-22"
    assert execution_name("ORDER-003", "5f1c-22", None) == "ORDER-003-5f1c-22"
