"""The three field reports of docs/field-reports.md (000, 001, 003), replayed through SQS, the start
Lambda and the real ASL."""

from __future__ import annotations

import json

import pytest

from tests.helpers import Saga, order


@pytest.mark.parametrize(
    "provider_dedupe", [False, True], ids=["provider-not-deduplicating", "provider-dedupes"]
)
def test_seed_000_four_deliveries_of_one_order_charge_once(saga: Saga, provider_dedupe: bool) -> None:
    """Four copies of ORDER-003 (150.00 BRL) sent at once: the lab billed 600 BRL. We bill 150."""
    saga.driver.send(order(), copies=4)

    saga.driver.pump(pollers=4)

    charges = saga.provider.charges_for("ORDER-003")
    assert len(charges) == 1, "the claim alone must stop the duplicates, whatever the provider does"
    assert sum(c.amount for c in charges) == 15000
    outcomes = saga.driver.outcomes()
    assert outcomes == {"CHARGED": 1, "DUPLICATE": 3}
    assert saga.driver.claim("ORDER-003")["status"] == "COMPLETED"  # type: ignore[index]


def test_seed_000_malformed_bodies_go_to_the_dead_letter_queue_and_block_nobody(saga: Saga) -> None:
    """The lab processed bad bodies as orderId "unparseable", and the first one swallowed the rest."""
    saga.driver.send("{not json", copies=2)
    saga.driver.send(json.dumps(order("ORDER-GOOD-1")))
    saga.driver.send(json.dumps({"orderId": "ORDER-BAD", "amount": 150.0, "currency": "BRL"}))
    saga.driver.send(json.dumps(order("ORDER-GOOD-2")))

    saga.driver.pump()

    assert saga.charges("ORDER-GOOD-1") == saga.charges("ORDER-GOOD-2") == 1
    dead = saga.driver.dead_letters()
    reasons = sorted(m["MessageAttributes"]["rejectionReason"]["StringValue"] for m in dead)
    assert len(dead) == 3
    assert reasons[0].startswith("amount must be an integer")
    assert all("not valid JSON" in r for r in reasons[1:])
    # A malformed message writes no claim: nothing is left that a later message could collide with.
    assert saga.driver.claim("unparseable") is None
    assert saga.driver.claim("ORDER-BAD") is None
    assert saga.driver.outcomes() == {"CHARGED": 2}


def test_seed_000_claimed_row_left_by_a_crash_does_not_make_every_retry_skip(saga: Saga) -> None:
    """A worker died between claim and charge; with a plain marker every later retry skipped the order."""
    # The Claim step dies right after its write on every attempt of this execution: a stuck CLAIMED row.
    from saga_local.runtime.faults import Fault

    saga.faults.add(Fault("ClaimOrderFunction", "after:dynamodb.UpdateItem", "die", times=4))
    first = saga.driver.wait(saga.driver.start(order(), name="crashed"))
    assert first.error == "ClaimFailed"  # visible, and its own claim was released (nothing charged)

    retry = saga.driver.wait(saga.driver.start(order(), name="retried"))

    assert retry.outcome == "CHARGED"
    assert saga.charges("ORDER-003") == 1


def test_seed_001_a_succeeded_invocation_delivered_again_does_not_charge_again(saga: Saga) -> None:
    """At-least-once delivery: the same SQS message handed to the start Lambda twice."""
    saga.driver.send(order())
    saga.driver.pump()
    # Redeliver the very same envelope (same MessageId) as Lambda's event source may.
    execution = saga.driver.results()[0]
    message_id = json.loads(saga.driver.sfn.describe_execution(executionArn=execution.arn)["input"])[
        "messageId"
    ]
    event = {
        "Records": [
            {
                "messageId": message_id,
                "receiptHandle": "again",
                "body": json.dumps(order()),
                "attributes": {"ApproximateReceiveCount": "2"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
                "awsRegion": "us-east-1",
            }
        ]
    }
    response = saga.driver.lambda_client.invoke(
        FunctionName=saga.stack.function_name("StartExecutionFunction"), Payload=json.dumps(event)
    )

    assert json.loads(response["Payload"].read()) == {"batchItemFailures": []}
    assert len(saga.driver.execution_arns()) == 1  # ExecutionAlreadyExists: already handled
    assert saga.charges("ORDER-003") == 1


def test_seed_003_concurrent_duplicates_race_on_the_base_table_not_an_index(saga: Saga) -> None:
    """1,400 duplicates got through a GSI check; 20 racing executions of one order charge once."""
    arns = [saga.driver.start(order("ORDER-RACE"), name=f"race-{i}") for i in range(20)]

    results = [saga.driver.wait(arn) for arn in arns]

    assert sorted(r.outcome for r in results).count("CHARGED") == 1
    assert saga.charges("ORDER-RACE") == 1
