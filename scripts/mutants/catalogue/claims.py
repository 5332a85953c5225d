"""The claims package: the conditional writes that admit a charge, and what a lost write's returned row means.

A wrong condition here lets a second execution charge (a takeover too early, a declined attempt
claimed again, a fenced execution's late write landing), or leaves an order no one can charge."""

from __future__ import annotations

from model import Catalogue

from catalogue.outbox import SWEEPER_TESTS

PROTOCOL = "tests/functional/test_claim_protocol.py"
CLAIMS_TESTS = "tests/functional/test_claims.py"
HOLES = "tests/statemachine/test_holes.py"
TAKEOVER = "tests/statemachine/test_takeover.py"
PATHS = "tests/statemachine/test_paths.py"
DECLINED = "tests/functional/test_declined_attempts.py"
EDGES = "tests/statemachine/test_gate_edges.py"
PROPERTIES = "tests/local/test_properties.py"
WEBHOOK_WRITES = "tests/functional/test_webhook_writes.py"
SETTLING = "tests/statemachine/test_settlement.py"
SETTLED_ROWS = "tests/unit/test_settled_before_await.py"
SETTLED_FIRST = "tests/statemachine/test_settled_first.py"
SETTLED_CHARGE_ROWS = "tests/unit/test_settled_before_charge_answer.py"
SETTLED_BEFORE_RETRY = "tests/statemachine/test_settled_before_charge_answer.py"
AWAITING_ROWS = "tests/unit/test_awaiting_before_charge_answer.py"
AWAITING_BEFORE_ANSWER = "tests/statemachine/test_processing_before_charge_answer.py"

_DEFAULT_TESTS = (PROTOCOL, CLAIMS_TESTS, HOLES, TAKEOVER)
_PACKAGE = "functions/payment_saga/claims"
#: One catalogue per module of the claims package: the row, the claim write, the table's reads, and
#: the closing writes.
ROWS = Catalogue(f"{_PACKAGE}/rows.py", _DEFAULT_TESTS)
WRITES = Catalogue(f"{_PACKAGE}/claiming.py", _DEFAULT_TESTS)
TABLE = Catalogue(f"{_PACKAGE}/table.py", _DEFAULT_TESTS)
CLOSING = Catalogue(f"{_PACKAGE}/closing.py", _DEFAULT_TESTS)
SETTLEMENT = Catalogue(f"{_PACKAGE}/settlement.py", (WEBHOOK_WRITES, SETTLING))
CLAIMS = (ROWS, WRITES, TABLE, CLOSING, SETTLEMENT)

# -- what a lost write's returned row says --
WRITES.text(
    "claims-conflict-not-detected",
    "if holder.fingerprint != order.fingerprint:\n            raise OrderConflict(",
    "if False:\n            raise OrderConflict(",
    "the same orderId with another amount is not reported as a conflict",
)
WRITES.text(
    "claims-own-resent-write-is-duplicate",
    "if holder.held_by(token):\n            # Our own write",
    "if False:\n            # Our own write",
    "a claim write sent again after its answer was lost finds its own row and calls it a duplicate",
)
WRITES.text(
    "claims-reclaim-resend-is-duplicate",
    "if holder.held_by(token):\n            # Our own write",
    "if holder.held_by(token) and tried is not ClaimResult.NEW_ATTEMPT:\n            # Our own write",
    "a customer's retry re-claims after the decline's release, the answer is lost, and the resend finds"
    " its own CLAIMED row: called a duplicate, the order is never charged (hole 1, only that form)",
    # The property test kills it at once with its KNOWN schedule of hole 1; with that left out
    # (SAGA_PROPERTY_SAMPLING_ONLY=1) sampling finds it too, but then shrinking takes minutes.
    tests=(PROPERTIES, HOLES),
)
WRITES.text(
    "claims-fence-not-read",
    "if token in holder.fenced_tokens:\n            raise ClaimLost(",
    "if False:\n            raise ClaimLost(",
    "a fenced execution's claim learns it was fenced only by losing every write",
    equivalent="every claim write is conditional on NOT contains(fencedTokens, :token) "
    "(claims-not-fenced-anywhere is killed), so a fenced execution never wins the order; this early "
    "exit only turns what would be a DUPLICATE, or ClaimLost after a few more lost writes, into "
    "ClaimLost at once, and a token is fenced only after its execution left Claim Order",
)
ROWS.text(
    "claims-lease-expired-at-its-last-second",
    "return self.lease_expires_at < now",
    "return self.lease_expires_at <= now",
    "a lease counts as run out during its last second (a live holder is taken over)",
)
WRITES.text(
    "claims-takeover-ignores-horizon",
    "return holder.lease_expired(now) and holder.attempt_started_at > now - self.replay_horizon_seconds",
    "return holder.lease_expired(now)",
    "an attempt older than the provider's 24-hour key memory is taken over (its key may be forgotten)",
)
ROWS.text(
    "claims-declined-attempts-forgotten",
    "return payment_attempt in self.declined_attempts or (",
    "return False and payment_attempt in self.declined_attempts or (",
    "only the latest declined payment attempt is remembered (hole 2: an earlier one is charged again)",
)
WRITES.text(
    "claims-declined-not-a-duplicate",
    "if holder.declined(order.payment_attempt):\n            # This payment attempt was declined",
    "if False:\n            # This payment attempt was declined",
    "a redelivery of a declined payment attempt is not answered as a duplicate (it tries to claim)",
)
WRITES.text(
    "claims-busy-not-told",
    "if holder.status is ClaimStatus.CLAIMED and holder.payment_attempt != order.payment_attempt:",
    "if False:",
    "a customer's retry that finds another payment attempt open is a duplicate, not BUSY (it is lost)",
)
ROWS.text(
    "claims-one-write-short",
    "MAX_CLAIM_WRITES = 4",
    "MAX_CLAIM_WRITES = 3",
    "the claim gives up one write short: two lost re-claim races in a row fail the order",
)
# -- the writes --
WRITES.text(
    "claims-not-fenced-anywhere",
    '_NOT_FENCED = "NOT contains(fencedTokens, :token)"',
    '_NOT_FENCED = "NOT contains(fencedTokens, :pa)"',
    "no claim write checks the fence: a fenced execution's late write lands after the release",
)
WRITES.text(
    "claims-first-claim-takes-anyones-row",
    'ours_already = "(#status = :claimed AND claimToken = :token AND fingerprint = :fp)"',
    'ours_already = "(#status = :claimed AND fingerprint = :fp)"',
    "the first-claim write takes a row CLAIMED by another execution",
)
WRITES.text(
    "claims-first-claim-without-fingerprint",
    'ours_already = "(#status = :claimed AND claimToken = :token AND fingerprint = :fp)"',
    'ours_already = "(#status = :claimed AND claimToken = :token)"',
    "the re-entrant claim write does not check the order's fingerprint",
    equivalent="the token is the execution id and an execution's input (the order) never changes, "
    "redrives included, so a row CLAIMED under this token always carries this order's fingerprint",
)
WRITES.text(
    "claims-reentrant-resets-attempt",
    "attempt = if_not_exists(attempt, :one),",
    "attempt = :one,",
    "a retried Claim step after a takeover of attempt 2 resets it to attempt 1 (another key: charged twice)",
    tests=(EDGES, PROTOCOL, HOLES),
)
WRITES.text(
    "claims-reentrant-restores-ownership",
    "attemptStartedBy = if_not_exists(attemptStartedBy, :token),",
    "attemptStartedBy = :token,",
    "a retried Claim step of a takeover makes the taker the attempt's owner (hole 4a)",
)
WRITES.text(
    "claims-takeover-keeps-ownership",
    '":no_owner": {"S": NO_OWNER},',
    '":no_owner": {"S": token},',
    "a takeover makes the taker the attempt's owner: its 401 or failed claim 'proves' nothing was charged",
)
WRITES.text(
    "claims-takeover-of-a-live-lease",
    'lease_run_out = "leaseExpiresAt < :now"',
    'lease_run_out = "leaseExpiresAt > :now"',
    "the takeover write requires a live lease instead of an expired one",
)
WRITES.text(
    "claims-takeover-lease-le",
    'lease_run_out = "leaseExpiresAt < :now"',
    'lease_run_out = "leaseExpiresAt <= :now"',
    "the takeover write accepts a lease in its last second",
    equivalent="the write is only sent when Claim.lease_expired(now) held for the row it lost to, with "
    "the same now; the write is fenced on that row's token, attempt and lease, so the row it lands on "
    "has leaseExpiresAt < now and the <= can never make the difference",
)
WRITES.text(
    "claims-reclaim-any-attempt",
    'released_at_seen_attempt = "#status = :released AND attempt = :seen"',
    'released_at_seen_attempt = "#status = :released"',
    "a re-claim after a release is not fenced on the attempt it saw: racing re-claims reuse an attempt",
)
WRITES.text(
    "claims-reclaim-declined-in-write",
    '"NOT contains(declinedAttempts, :pa) AND (releaseReason',
    '"(releaseReason',
    "the re-claim write only checks the latest decline, not every declined payment attempt",
    equivalent="the write is sent only when Claim.declined() found the payment attempt undeclined "
    "in the row it lost to, and it is fenced on that row's status and attempt; while a row stays "
    "RELEASED at one attempt, declinedAttempts can only gain its own paymentAttempt (a resent "
    "DECLINED release), which declined() already counts through releaseReason",
)
WRITES.text(
    "claims-reclaim-keeps-ttl",
    '" REMOVE releaseReason, releasedAt, expiresAt,"',
    '" REMOVE releaseReason, releasedAt,"',
    "a re-claimed row keeps its release's TTL: DynamoDB deletes an open claim (hole 3)",
)
WRITES.text(
    "claims-reclaim-same-attempt",
    '":next": {"N": str(seen_attempt + 1)},',
    '":next": {"N": str(seen_attempt)},',
    "a claim after a release keeps the attempt number (the key replays the declined or failed request)",
)
# -- the charge's re-check --
TABLE.text(
    "claims-check-held-no-margin",
    "and claim.lease_expires_at >= self.now() + margin_seconds",
    "and claim.lease_expires_at >= self.now()",
    "a charge is sent with seconds left on the lease (the sweeper may decide about it mid-request)",
    tests=(PROTOCOL, "tests/statemachine/test_gate_edges.py"),
)
TABLE.text(
    "claims-check-held-any-attempt",
    "and claim.attempt == attempt\n",
    "\n",
    "a charge for an attempt the claim no longer is at (a zombie of an attempt since released) is sent",
    tests=("tests/statemachine/test_gate_edges.py", PROTOCOL, TAKEOVER),
)
# -- complete and release --
CLOSING.text(
    "claims-complete-not-fenced",
    '"ConditionExpression": "claimToken = :token AND (#status = :claimed"\n'
    '                " OR (#status = :completed AND chargeId = :charge))",',
    '"ConditionExpression": "(#status = :claimed"\n'
    '                " OR (#status = :completed AND chargeId = :charge))",',
    "an execution that lost its claim still completes it",
)
CLOSING.text(
    "claims-release-not-fenced",
    '"ConditionExpression": "claimToken = :token AND paymentAttempt = :pa AND (#status = :claimed"',
    '"ConditionExpression": "paymentAttempt = :pa AND (#status = :claimed"',
    "an execution that lost its claim still releases it (another execution's charge is forgotten)",
)
CLOSING.text(
    "claims-decline-not-remembered",
    "declined = reason is ReleaseReason.DECLINED\n        won, item = self._update(",
    "declined = False\n        won, item = self._update(",
    "a declined release does not add the payment attempt to declinedAttempts",
)
CLOSING.text(
    "claims-release-log-ignored",
    'if not won and item and entry in _string_set(item, "releaseLog"):',
    "if False:",
    "a release whose answer was lost, then re-claimed by another execution, is taken as lost (hole 4f)",
)
CLOSING.text(
    "claims-sweeper-decline-not-remembered",
    "declined = reason is ReleaseReason.DECLINED\n        return self._resolve_stale(",
    "declined = False\n        return self._resolve_stale(",
    "a decline found by the sweeper is not remembered: a redelivery of it reaches the provider",
    tests=(DECLINED, PROTOCOL, *SWEEPER_TESTS),
)
# -- the fence after a failed Claim step --
CLOSING.text(
    "claims-fence-over-own-claim",
    '"ConditionExpression": "attribute_exists(orderId) AND NOT"\n'
    '                    " (#status = :claimed AND claimToken = :token)",',
    '"ConditionExpression": "attribute_exists(orderId)",',
    "the fence lands over the execution's own landed claim: it is never released, the order waits",
    tests=(PROTOCOL, HOLES, PATHS),
)
CLOSING.text(
    "claims-fence-no-tombstone",
    "if old is None:\n                won, old = self._put_tombstone(order, token, now)",
    "if False:\n                won, old = self._put_tombstone(order, token, now)",
    "a failed claim that never landed is not fenced by a tombstone: its late write can still land",
    tests=(PROTOCOL, HOLES, PATHS),
)
CLOSING.text(
    "claims-tombstone-resend-not-recognised",
    'if old is not None and token in _string_set(old, "fencedTokens"):\n'
    "                return True, None  # our own tombstone",
    "if False:\n                return True, None  # our own tombstone",
    "a tombstone put again after its answer was lost does not recognise itself",
    tests=(PROTOCOL, HOLES),
    equivalent="the resend then fails its condition and returns our tombstone; the next pass of "
    "fence_failed_claim ADDs the token to fencedTokens (already there) and wins: one write more, "
    "the same fence and the same answer (None)",
)

# -- the wait for a payment that settles later --
SETTLEMENT.text(
    "claims-await-settlement-not-fenced",
    '"#status = :claimed AND claimToken = :token AND attempt = :attempt"\n'
    '                " AND attribute_not_exists(chargeId)"',
    '"#status = :claimed AND attempt = :attempt"\n                " AND attribute_not_exists(chargeId)"',
    "another execution's write keeps a claim it does not hold open for weeks (invariant 7)",
)
SETTLEMENT.text(
    "claims-await-settlement-any-attempt",
    '"#status = :claimed AND claimToken = :token AND attempt = :attempt"',
    '"#status = :claimed AND claimToken = :token"',
    "a late Await Settlement of an earlier attempt moves the lease of the attempt that followed",
)
SETTLEMENT.text(
    "claims-await-settlement-reopens-a-closed-claim",
    '"#status = :claimed AND claimToken = :token AND attempt = :attempt"',
    '"claimToken = :token AND attempt = :attempt"',
    "a claim the webhook released as declined first is marked awaiting settlement again",
)
SETTLEMENT.text(
    "claims-await-settlement-any-intent",
    '" AND (attribute_not_exists(settlementIntentId) OR settlementIntentId = :pi)"',
    '""',
    "a claim awaiting one PaymentIntent is made to await another (the first one's failure then"
    " releases nothing, its success is a duplicate charge)",
)
SETTLEMENT.text(
    "claims-await-settlement-keeps-the-lease",
    '"SET leaseExpiresAt = :settle_by, settleBy = :settle_by,',
    '"SET settleBy = :settle_by,',
    "the lease is not moved to the settle-by deadline: the claim is taken over and re-charged, and the"
    " sweeper polls it from the next hour on",
    tests=(WEBHOOK_WRITES, SETTLING),
)
# -- a settlement write that lands after the webhook settled the attempt --
SETTLEMENT.text(
    "claims-settled-before-await-any-token",
    "if claim.claim_token != token or claim.attempt != attempt:",
    "if claim.attempt != attempt:",
    "another execution's settled claim ends this one as settled: a zombie of a taken-over attempt"
    " reports the taker's end as its own",
    tests=(SETTLED_ROWS, SETTLED_FIRST),
)
SETTLEMENT.text(
    "claims-settled-before-await-any-attempt",
    "if claim.claim_token != token or claim.attempt != attempt:",
    "if claim.claim_token != token:",
    "a claim closed at another attempt ends this execution as settled, with no page",
    tests=(SETTLED_ROWS, SETTLED_FIRST),
)
SETTLEMENT.text(
    "claims-settled-before-await-any-charge",
    "if claim.status is ClaimStatus.COMPLETED and claim.charge_id == payment_intent_id:",
    "if claim.status is ClaimStatus.COMPLETED:",
    "a claim completed with another charge (two charges for one attempt) ends as settled, with no page",
    tests=(SETTLED_ROWS, SETTLED_FIRST),
)
SETTLEMENT.text(
    "claims-settled-before-await-any-release",
    "if claim.status is ClaimStatus.RELEASED and claim.release_reason is ReleaseReason.DECLINED:",
    "if claim.status is ClaimStatus.RELEASED:",
    "a claim released NOT_CHARGED under the awaited PaymentIntent ends as settled: a debit that may"
    " still succeed is reported as decided",
    tests=(SETTLED_ROWS, SETTLED_FIRST),
)
SETTLEMENT.text(
    "claims-settled-before-await-declined-for-any-intent",
    "if released_for == payment_intent_id:",
    "if True:",
    "a release declined for another PaymentIntent (or naming none) ends this attempt as settled",
    tests=(SETTLED_ROWS, SETTLED_FIRST),
)
SETTLEMENT.text(
    "claims-settled-before-await-never",
    "if settled is not None:",
    "if False:",
    "a debit the webhook settled before the execution recorded the wait pages once, for an order that"
    " is fine",
    tests=(SETTLED_FIRST, SETTLED_ROWS),
)
# -- a retried charge that finds the webhook settled its attempt after its answer was lost --
SETTLEMENT.text(
    "claims-settled-before-charge-answer-any-token",
    "if (claim.claim_token, claim.attempt) != (token, attempt):",
    "if claim.attempt != attempt:",
    "a retried charge takes another execution's settled claim as its own attempt's end: a zombie of a"
    " taken-over attempt reports the taker's end, with no page",
    tests=(SETTLED_CHARGE_ROWS, SETTLED_BEFORE_RETRY),
)
SETTLEMENT.text(
    "claims-settled-before-charge-answer-any-attempt",
    "if (claim.claim_token, claim.attempt) != (token, attempt):",
    "if claim.claim_token != token:",
    "a retried charge takes a claim closed at another attempt as settled, with no page",
    tests=(SETTLED_CHARGE_ROWS, SETTLED_BEFORE_RETRY),
)
SETTLEMENT.text(
    "claims-settled-before-charge-answer-completed-without-charge",
    "if claim.status is ClaimStatus.COMPLETED and claim.charge_id is not None:",
    "if claim.status is ClaimStatus.COMPLETED:",
    "a completed claim that names no charge is handed on as this attempt's charge (with no id)",
    tests=(SETTLED_CHARGE_ROWS, SETTLED_BEFORE_RETRY),
)
SETTLEMENT.text(
    "claims-settled-before-charge-answer-any-release",
    "and claim.release_reason is ReleaseReason.DECLINED and named:",
    "and named:",
    "a claim released NOT_CHARGED ends the retried charge as settled declined: a charge that may have"
    " landed is reported as declined, with no page",
    tests=(SETTLED_CHARGE_ROWS, SETTLED_BEFORE_RETRY),
)
SETTLEMENT.text(
    "claims-settled-before-charge-answer-release-naming-none",
    "    named = claim.declined_intent_id or claim.settlement_intent_id\n",
    '    named = "any"\n',
    "a declined release that names no PaymentIntent (not the webhook's proof of this attempt's failure)"
    " ends the retried charge as settled, with no page",
    tests=(SETTLED_CHARGE_ROWS, SETTLED_BEFORE_RETRY),
)
SETTLEMENT.text(
    "claims-settled-before-charge-answer-never-declined",
    "        return Settled.DECLINED\n    return None\n\n\ndef awaiting_before_charge_answer",
    "        return None\n    return None\n\n\ndef awaiting_before_charge_answer",
    "a debit whose failed webhook beat the charge's retry pages once, for an order already declined",
    tests=(SETTLED_BEFORE_RETRY, SETTLED_CHARGE_ROWS),
)
# -- a charge whose answer never arrives, after the webhook recorded the wait --
SETTLEMENT.text(
    "claims-awaiting-before-charge-answer-any-token",
    "if (claim.claim_token, claim.attempt) != (token, attempt) or claim.status is not ClaimStatus.CLAIMED:",
    "if claim.attempt != attempt or claim.status is not ClaimStatus.CLAIMED:",
    "a zombie execution of a taken-over attempt reads the taker's wait as its own answer",
    tests=(AWAITING_ROWS, AWAITING_BEFORE_ANSWER),
)
SETTLEMENT.text(
    "claims-awaiting-before-charge-answer-any-attempt",
    "if (claim.claim_token, claim.attempt) != (token, attempt) or claim.status is not ClaimStatus.CLAIMED:",
    "if claim.claim_token != token or claim.status is not ClaimStatus.CLAIMED:",
    "a charge whose outcome is unknown reads a wait recorded for another attempt as its own answer",
    tests=(AWAITING_ROWS, AWAITING_BEFORE_ANSWER),
)
SETTLEMENT.text(
    "claims-awaiting-before-charge-answer-closed-claim",
    "if (claim.claim_token, claim.attempt) != (token, attempt) or claim.status is not ClaimStatus.CLAIMED:",
    "if (claim.claim_token, claim.attempt) != (token, attempt):",
    "a claim already closed is read as still awaiting settlement: the execution ends awaiting a"
    " payment that was settled",
    tests=(AWAITING_ROWS, AWAITING_BEFORE_ANSWER),
)
SETTLEMENT.text(
    "claims-awaiting-before-charge-answer-never",
    "    return claim.settlement_intent_id\n",
    "    return None\n",
    "a debit whose processing webhook was recorded still pages when its Charge answer never arrives",
    tests=(AWAITING_ROWS, AWAITING_BEFORE_ANSWER),
)
CLOSING.text(
    "claims-declined-release-names-no-intent",
    "declined_intent = payment_intent_id if reason is ReleaseReason.DECLINED else None",
    "declined_intent = None",
    "the webhook's declined release does not say which PaymentIntent failed: an Await Settlement"
    " that lands after it cannot tell its attempt settled, and pages",
    tests=(SETTLED_FIRST,),
)
WRITES.text(
    "claims-reclaim-keeps-the-settlement",
    '" settlementIntentId, awaitingSettlementSince, awaitingSettlementAt, settleBy"',
    '" awaitingSettlementAt"',
    "a new attempt after a released debit still looks like it awaits the old PaymentIntent",
    tests=(WEBHOOK_WRITES,),
)
