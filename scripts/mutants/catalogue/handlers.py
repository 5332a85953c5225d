"""proof.py and the Claim, Charge and Release steps: when a failure proves nothing was charged.

A wrong rule here releases a claim whose charge may have landed (the next delivery charges again),
or keeps one that provably charged nothing (the order is never charged)."""

from __future__ import annotations

from model import Catalogue

EDGES = "tests/statemachine/test_gate_edges.py"
PATHS = "tests/statemachine/test_paths.py"
TAKEOVER = "tests/statemachine/test_takeover.py"
HOLES = "tests/statemachine/test_holes.py"
DEFAULT = (EDGES, PATHS, TAKEOVER, HOLES)

PROOF = Catalogue("functions/payment_saga/proof.py", DEFAULT)
PROOF.text(
    "proof-redrive-ignored-by-charge",
    "return retry_count == 0 and redrive_count == 0 and attempt_owner",
    "return retry_count == 0 and attempt_owner",
    "a redriven Charge step takes a 401 as proof nothing was charged (an earlier run may have charged)",
)
PROOF.text(
    "proof-retry-ignored-by-charge",
    "return retry_count == 0 and redrive_count == 0 and attempt_owner",
    "return redrive_count == 0 and attempt_owner",
    "a retried Charge step takes a 401 as proof (the first try's request may have landed)",
)
PROOF.text(
    "proof-ownership-ignored-by-charge",
    "return retry_count == 0 and redrive_count == 0 and attempt_owner",
    "return retry_count == 0 and redrive_count == 0",
    "a Charge step of a taken-over attempt takes a 401 as proof (the dead holder may have charged)",
)
PROOF.text(
    "proof-redrive-ignored-by-release",
    "return attempt_started_by == token and redrive_count == 0",
    "return attempt_started_by == token",
    "a redriven execution whose Claim step failed releases a claim its earlier run may have charged under",
)
PROOF.text(
    "proof-ownership-ignored-by-release",
    "return attempt_started_by == token and redrive_count == 0",
    "return redrive_count == 0",
    "a taker whose Claim step failed releases an attempt its dead holder may have charged",
)
PROOF.text(
    "proof-decline-released-not-charged",
    '"PaymentDeclined": ReleaseReason.DECLINED,',
    '"PaymentDeclined": ReleaseReason.NOT_CHARGED,',
    "a decline is released NOT_CHARGED: a redelivery of the declined attempt charges the card again",
)
PROOF.text(
    "proof-any-error-releases",
    "return PROOF_BY_ERROR.get(error_name)",
    "return PROOF_BY_ERROR.get(error_name, ReleaseReason.NOT_CHARGED)",
    "Release Claim releases on any error, an unknown charge outcome included",
)

CHARGE = Catalogue("functions/payment_saga/charging.py", DEFAULT)
CHARGING = "tests/functional/test_charging.py"
CHARGE.text(
    "charge-no-lease-margin",
    "LEASE_MARGIN_SECONDS = 60",
    "LEASE_MARGIN_SECONDS = 0",
    "a charge is sent with seconds left on the lease",
)
CHARGE.text(
    "charge-no-recheck",
    "    if claim is None or not store.still_held(\n",
    "    if claim is None or False and not store.still_held(\n",
    "the Charge step does not re-check that it still holds its attempt (a zombie charges)",
)
CHARGE.text(
    "charge-retry-401-is-proof",
    '        unknown = PaymentOutcomeUnknown(f"not attempted on retry',
    '        raise exc\n        unknown = PaymentOutcomeUnknown(f"not attempted on retry',
    "a 401 on a retry is reported as ChargeNotAttempted: the claim is released",
)
CHARGE.text(
    "charge-provider-unavailable-unknown",
    'raise ChargeNotAttempted(f"payment provider unavailable',
    'raise PaymentOutcomeUnknown(f"payment provider unavailable',
    "a provider that cannot be built (no key) is an unknown outcome: the claim is never released",
)
CHARGE.text(
    "charge-key-from-input-attempt-plus-one",
    "return idempotency_key(self.order.order_id, self.attempt)",
    "return idempotency_key(self.order.order_id, self.attempt + 1)",
    "the charge's key is not the attempt's (the sweeper and a takeover look for another key)",
)
CHARGE.text(
    "charge-settled-declined-meanwhile-refused",
    "    if claim is not None and settled is Settled.DECLINED:\n        raise _settled_declined",
    "    if False:\n        raise _settled_declined",
    "a retried charge whose claim the webhook released declined for its attempt is refused: the order"
    " already declined ends in Needs Reconciliation and pages",
    tests=("tests/statemachine/test_settled_before_charge_answer.py",),
)
CHARGE.text(
    "charge-completed-meanwhile-refused",
    "    if claim is not None and settled is Settled.CHARGED:\n",
    "    if False:\n",
    "a retried charge whose claim the webhook completed with its attempt's charge is refused: the order"
    " charged once ends in Needs Reconciliation and pages",
    tests=("tests/statemachine/test_settled_before_charge_answer.py", "tests/statemachine/test_webhooks.py"),
)
CHARGE.text(
    "charge-recorded-intent-not-followed",
    "    return claim.settlement_intent_id\n",
    "    return None\n",
    "a claim that records the attempt's PaymentIntent is charged by a create again: after the key"
    " expired (a redrive days later), a second debit",
    tests=(CHARGING,),
)
CHARGE.text(
    "charge-completed-row-trusted",
    "    assert claim.charge_id is not None\n    try:\n",
    "    assert claim.charge_id is not None\n"
    '    return __import__("payment_saga.payments").payments.Charge(\n'
    '        claim.charge_id, "succeeded", step.order.amount, step.order.currency, True\n'
    "    )\n"
    "    try:\n",
    "a completed row is handed on without Stripe confirming its PaymentIntent: a row another writer"
    " made ends the order charged with no money taken",
    tests=(CHARGING,),
)
CHARGE.text(
    "charge-last-try-ignores-the-claim",
    "        if settled is Settled.CHARGED:\n            return _hand_on(",
    "        if False:\n            return _hand_on(",
    "a webhook that completes the claim during the last try still pages (Needs Reconciliation)",
    tests=(CHARGING,),
)

RELEASING = "tests/functional/test_releasing.py"
RELEASE = Catalogue("functions/payment_saga/releasing.py", (*DEFAULT, RELEASING))
RELEASE.text(
    "release-failed-claim-released-blind",
    "    if not may_release_failed_claim(\n",
    "    if False and may_release_failed_claim(\n",
    "after a failed Claim step, a claim that landed is released whoever started its attempt",
)
RELEASE.text(
    "release-fenced-claim-released",
    "    if fence.result is not FenceResult.HELD or held is None:\n",
    "    if held is None and False:\n",
    "after a failed Claim step that never landed, Release Claim still tries to release",
)
RELEASE.text(
    "release-refusal-dropped",
    "    if reason is None:\n        raise ReleaseRefused(",
    "    if reason is None:\n        reason = ReleaseReason.NOT_CHARGED\n"
    "    if False:\n        raise ReleaseRefused(",
    "Release Claim releases on an error that proves nothing",
)
RELEASE.text(
    "release-wrong-payment-attempt",
    "order.order_id, token=token, reason=reason, payment_attempt=order.payment_attempt",
    'order.order_id, token=token, reason=reason, payment_attempt="initial"',
    "a decline is recorded against the default payment attempt, not the order's",
)

CLAIM = Catalogue("functions/handlers/claim_order.py", DEFAULT)
CLAIM.text(
    "claim-always-owner",
    '"attemptOwner": claim.attempt_started_by == token,',
    '"attemptOwner": True,',
    "Claim Order reports every winner as the attempt's owner, takers included",
)
CLAIM.text(
    "claim-duplicate-charged",
    "    if not outcome.result.won:\n",
    "    if False:\n",
    "a duplicate is not raised as DuplicateOrder: the second execution goes on to charge",
)

WEBHOOK_ENDPOINT = "tests/functional/test_webhook_endpoint.py"
CONSUMER = Catalogue("functions/handlers/webhook_consumer.py", (WEBHOOK_ENDPOINT,))
CONSUMER.text(
    "consumer-trusts-the-queued-body",
    "    decision = answer_doorbell(claims_store(), provider(), bell, livemode=livemode)\n",
    "    body = json.loads(record.body)\n"
    "    webhooks = __import__('payment_saga.webhooks').webhooks\n"
    "    decision = (\n"
    "        webhooks.handle_event(claims_store(), webhooks.parse_event(body), livemode=livemode)\n"
    "        if 'data' in body\n"
    "        else answer_doorbell(claims_store(), provider(), bell, livemode=livemode)\n"
    "    )\n",
    "the consumer skips its read of Stripe and believes a queued event's body: a forged 'succeeded'"
    " planted on the queue completes an order with no money taken",
)
DOORBELL = Catalogue("functions/payment_saga/webhooks.py", (WEBHOOK_ENDPOINT,))
DOORBELL.text(
    "doorbell-not-found-believed",
    "    reading = reader.retrieve_intent(bell.payment_intent_id)\n    if reading is None:\n",
    "    reading = reader.retrieve_intent(bell.payment_intent_id)\n    if reading is None and False:\n",
    "a doorbell naming a PaymentIntent Stripe does not have here (forged, another account's) is decided"
    " on anyway",
)
