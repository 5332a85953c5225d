"""Every handler on its sample event from events/ (what `sam local invoke <Function> -e ...` and
`saga invoke <Function> -e ...` send).

The step samples run in order on a fresh stack: claim, charge, then mark complete for ORDER-101;
claim (a declined card), then release for ORDER-102. Their order ids are not the demo's or
`saga send`'s (ORDER-003, ORDER-004), so sending those first leaves the samples unaffected.
"""

from __future__ import annotations

import json
from typing import Any

from saga_local.template import ROOT
from tests.helpers import Saga

#: The step samples, in the order they run on a fresh stack.
STEP_SAMPLES = [
    ("ClaimOrderFunction", "claim_order.json"),
    ("ChargePaymentFunction", "charge_payment.json"),
    ("MarkCompleteFunction", "mark_complete.json"),
    ("ClaimOrderFunction", "claim_order_declined.json"),
    ("ReleaseClaimFunction", "release_claim.json"),
]


def sample(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "events" / name).read_text())


def invoke(saga: Saga, logical_id: str, event: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    response = saga.driver.lambda_client.invoke(
        FunctionName=saga.stack.function_name(logical_id), Payload=json.dumps(event)
    )
    return json.loads(response["Payload"].read()), response.get("FunctionError")


def test_step_handlers_on_their_sample_events_claim_charge_and_complete_once(saga: Saga) -> None:
    claimed, error = invoke(saga, "ClaimOrderFunction", sample("claim_order.json"))
    assert error is None, claimed
    assert (claimed["outcome"], claimed["attempt"], claimed["attemptOwner"]) == ("WON", 1, True)

    charge_event = sample("charge_payment.json")
    charged, error = invoke(saga, "ChargePaymentFunction", charge_event)
    assert error is None, charged
    again, _ = invoke(saga, "ChargePaymentFunction", charge_event)  # a retried step
    assert again["chargeId"] == charged["chargeId"]
    assert again["replayed"] is True
    assert saga.charges("ORDER-101") == 1

    completion = sample("mark_complete.json")
    # The sample holds the charge the provider (the emulator, on a fresh stack) issued for the sample
    # charge's key: what the state machine would pass on from the Charge step.
    assert completion["charge"]["chargeId"] == charged["chargeId"]
    completed, error = invoke(saga, "MarkCompleteFunction", completion)
    assert error is None, completed
    claim = saga.driver.claim("ORDER-101")
    assert claim is not None
    assert (claim["status"], claim["chargeId"]) == (
        "COMPLETED",
        saga.provider.charges_for("ORDER-101")[0].charge_id,
    )


def test_mark_complete_sample_without_a_claim_is_refused_as_claim_lost(saga: Saga) -> None:
    payload, error = invoke(saga, "MarkCompleteFunction", sample("mark_complete.json"))

    assert error == "Unhandled"
    assert payload["errorType"] == "ClaimLost"


def test_release_sample_releases_the_claim_of_the_declined_sample(saga: Saga) -> None:
    claimed, error = invoke(saga, "ClaimOrderFunction", sample("claim_order_declined.json"))
    assert error is None, claimed

    released, error = invoke(saga, "ReleaseClaimFunction", sample("release_claim.json"))

    assert error is None, released
    assert released == {"released": True, "reason": "DECLINED", "attempt": 1, "sendAgain": False}
    assert saga.driver.claim("ORDER-102")["status"] == "RELEASED"  # type: ignore[index]


def test_step_samples_run_in_order_after_the_orders_saga_send_and_the_demo_settle(saga: Saga) -> None:
    """A newcomer runs `saga send` (ORDER-003) and the declined order (ORDER-004) first: the step
    samples must still run in order, without a ClaimLost."""
    saga.driver.send(sample("order.json"))
    saga.driver.send(sample("order_declined.json"))
    saga.driver.pump()
    assert saga.driver.outcomes() == {"CHARGED": 1, "PaymentDeclined": 1}

    for logical_id, name in STEP_SAMPLES:
        payload, error = invoke(saga, logical_id, sample(name))
        assert error is None, (name, payload)

    assert saga.driver.claim("ORDER-101")["status"] == "COMPLETED"  # type: ignore[index]
    assert saga.driver.claim("ORDER-102")["status"] == "RELEASED"  # type: ignore[index]
    assert saga.charges("ORDER-101") == 1
    assert saga.charges("ORDER-102") == 0


def test_start_samples_start_one_execution_per_valid_message_and_reject_the_malformed(saga: Saga) -> None:
    for name in ("sqs_valid_order.json", "sqs_duplicate.json", "sqs_malformed.json"):
        response, error = invoke(saga, "StartExecutionFunction", sample(name))
        assert error is None, response
        assert response == {"batchItemFailures": []}

    saga.driver.pump()
    names = sorted(arn.rsplit(":", 1)[1] for arn in saga.driver.execution_arns())
    assert len(names) == 4  # 1 valid + 2 duplicates (new MessageIds) + ORDER-005
    # Not the ids `saga send` and the demo use (ORDER-003, ORDER-004), as the README says.
    assert {name.rsplit("-", 5)[0] for name in names} == {"ORDER-103", "ORDER-005"}
    dead = saga.driver.dead_letters()
    assert len(dead) == 1
    assert dead[0]["MessageAttributes"]["rejectionReason"]["StringValue"].startswith("body is not valid JSON")
