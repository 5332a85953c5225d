"""The order message at the door: the real start Lambda, SQS, the real ASL and the Stripe emulator.

A bad body goes to the dead-letter queue with its reason on its first receipt, writes no claim and
blocks nobody; a saved card is charged in the name of its Stripe Customer, and refused without it.
"""

from __future__ import annotations

import json
from typing import Any

from saga_local.stripe_emulator import SAVED_PAYMENT_METHOD, TEST_CUSTOMER
from tests.helpers import Saga, order

#: Bodies that can never become an order, and the start of the reason each is dead-lettered with.
BAD_BODIES = {
    "[" * 10_240: "body nests arrays or objects more than 32 levels deep",
    json.dumps(order("ORDER-NL\n")): "orderId must not contain control",
    json.dumps(order("ORDER-BRL-NL", currency="BRL\n")): "currency must not contain control",
    json.dumps(order("ORDER-NUL", customerId="cus\x00123")): "customerId must not contain control",
    json.dumps(order("ORDER-XXX", currency="XXX")): "currency is not one the payment provider charges in",
    json.dumps(
        order("ORDER-TINY", amount=49, currency="USD")
    ): "amount is below the payment provider's minimum",
    json.dumps(order("ORDER-KWD", amount=5125, currency="KWD")): "amount must be a multiple of 10",
    json.dumps(order("ORDER-FLOAT", amount=15000.0)): "amount must be an integer in minor units",
    json.dumps(order("ORDER-BOOL", amount=True)): "amount must be an integer in minor units",
    '{"orderId": "ORDER-TWICE", "amount": 100, "amount": 15000}': "field amount appears twice",
}
#: Card numbers where an id belongs: they must never reach Stripe metadata, the claims table, the
#: execution history or an outcome event (kept apart: the dead-letter queue is read 10 at a time).
CARD_SHAPED_BODIES = {
    json.dumps(order("ORDER-PAN-1", customerId="4242424242424242")): "customerId must not hold a card number",
    json.dumps(
        order("ORDER-PAN-2", paymentAttempt="4000 0566 5566 5556")
    ): "paymentAttempt must not hold a card number",
    json.dumps(order("ORDER-ATTEMPT", paymentAttempt="retry #2")): "paymentAttempt must be 1-64 characters",
    json.dumps(order("4242424242424242")): "orderId must not hold a card number",
    json.dumps(order("4242-4242-4242-4242")): "orderId must not hold a card number",
    json.dumps(order("4242 4242 4242 4242")): "orderId must not hold a card number",
}


def sqs_event(bodies: list[str]) -> dict[str, Any]:
    """One batch as the SQS event source delivers it: every message on its first receipt."""
    return {
        "Records": [
            {
                "messageId": f"00000000-0000-4000-8000-{i:012d}",
                "receiptHandle": f"first-receipt-{i}",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1796000000000",
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": "1796000000001",
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payment-saga-OrdersQueue",
                "awsRegion": "us-east-1",
            }
            for i, body in enumerate(bodies)
        ]
    }


def rejections(saga: Saga) -> dict[str, str]:
    """Dead-lettered body -> its rejection reason (a message SQS redrove on its own has none)."""
    return {
        m["Body"]: m.get("MessageAttributes", {}).get("rejectionReason", {}).get("StringValue", "")
        for m in saga.driver.dead_letters()
    }


def test_bad_bodies_are_dead_lettered_with_their_reason_on_first_receipt_and_the_good_one_is_charged(
    saga: Saga,
) -> None:
    good = json.dumps(order("ORDER-GOOD"))
    batch = [*list(BAD_BODIES)[:4], good, *list(BAD_BODIES)[4:]]

    response = saga.driver.lambda_client.invoke(
        FunctionName=saga.stack.function_name("StartExecutionFunction"), Payload=json.dumps(sqs_event(batch))
    )
    payload = json.loads(response["Payload"].read())

    # No record failed: none of them comes back to be received a second time.
    assert response.get("FunctionError") is None, payload
    assert payload == {"batchItemFailures": []}
    saga.driver.pump()
    dead = rejections(saga)
    assert set(dead) == set(BAD_BODIES)
    for body, expected in BAD_BODIES.items():
        assert dead[body].startswith(expected), (expected, dead[body])
    assert saga.charges("ORDER-GOOD") == 1
    assert saga.driver.outcomes() == {"CHARGED": 1}
    # A rejected message writes no claim, under its own id or a cleaned-up one.
    assert set(saga.driver.claims()) == {"ORDER-GOOD"}


def test_bad_bodies_sent_through_the_queue_leave_it_at_once_with_their_reasons(saga: Saga) -> None:
    for body in BAD_BODIES:
        saga.driver.send(body)
    saga.driver.send(order("ORDER-GOOD"))

    saga.driver.pump()

    dead = rejections(saga)
    assert len(saga.driver.dead_letters()) == len(BAD_BODIES)  # each once: none was retried
    assert all(dead[body].startswith(expected) for body, expected in BAD_BODIES.items())
    assert saga.driver.queue_depth() == 0
    assert saga.charges("ORDER-GOOD") == 1
    assert set(saga.driver.claims()) == {"ORDER-GOOD"}


def test_an_order_in_lev_is_dead_lettered_saying_to_charge_in_euro_and_reaches_no_claim_or_provider(
    saga: Saga,
) -> None:
    lev = json.dumps(order("ORDER-BGN", currency="BGN"))
    saga.driver.send(lev)

    saga.driver.pump()

    assert rejections(saga) == {
        lev: "currency is no longer issued: Bulgaria adopted the euro on 1 January 2026, replacing the lev"
        " (BGN): charge in EUR"
    }
    assert saga.driver.claims() == {}
    assert saga.provider.payment_intents("ORDER-BGN") == []


def test_card_shaped_values_are_dead_lettered_with_their_reason_and_reach_no_claim_or_provider(
    saga: Saga,
) -> None:
    for body in CARD_SHAPED_BODIES:
        saga.driver.send(body)

    saga.driver.pump()

    dead = rejections(saga)
    assert set(dead) == set(CARD_SHAPED_BODIES)
    for body, expected in CARD_SHAPED_BODIES.items():
        assert dead[body].startswith(expected), (expected, dead[body])
        assert "4242" not in dead[body], "the reason never quotes the value"
        assert "4000" not in dead[body], "the reason never quotes the value"
    assert saga.driver.claims() == {}
    assert saga.driver.execution_arns() == []
    assert saga.provider.payment_intents("ORDER-PAN-1") == []
    # The key is the one value copied everywhere: not even the rejection's event may carry it.
    log = saga.driver.outcome_log
    assert log is not None
    rejected = [e for e in log.collect() if e.detail_type == "OrderRejected"]
    assert len(rejected) == len(CARD_SHAPED_BODIES)
    assert not [e for e in rejected if "4242" in json.dumps(e.detail)]


def test_a_saved_card_is_charged_with_its_customer_and_refused_without_it(saga: Saga) -> None:
    saga.driver.send(
        order("ORDER-SAVED", paymentMethod=SAVED_PAYMENT_METHOD, providerCustomerId=TEST_CUSTOMER)
    )
    saga.driver.send(order("ORDER-NO-CUSTOMER", paymentMethod=SAVED_PAYMENT_METHOD))

    saga.driver.pump()

    results = {r.order_id: r for r in saga.driver.results()}
    assert results["ORDER-SAVED"].outcome == "CHARGED"
    assert saga.charges("ORDER-SAVED") == 1
    [intent] = saga.provider.payment_intents("ORDER-SAVED")
    assert intent["customer"] == TEST_CUSTOMER
    # Without its customer Stripe refuses the saved card before charging: visible, released, not lost.
    assert results["ORDER-NO-CUSTOMER"].outcome == "ChargeNotAttempted"
    assert saga.charges("ORDER-NO-CUSTOMER") == 0
    assert saga.driver.claim("ORDER-NO-CUSTOMER")["status"] == "RELEASED"  # type: ignore[index]
