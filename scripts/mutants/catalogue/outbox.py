"""The sweeper's decisions and the outcome relay: the parts around the steps that keep the promise.

A wrong rule in the sweeper releases an attempt whose charge may still land or be unsearchable (the
next attempt charges again), or lists too little to prove anything; a wrong rule in the relay
publishes an order's outcomes out of order, re-queues what was charged, or never re-queues what
was not."""

from __future__ import annotations

from model import Catalogue

SWEEPER = (
    "tests/functional/test_sweeper.py",
    "tests/statemachine/test_sweeper.py",
    "tests/local/test_reconcile_local.py",
)
RELAY = (
    "tests/unit/test_outcomes.py",
    "tests/local/test_outcome_events.py",
    "tests/statemachine/test_requeues.py",
)

RECONCILE = Catalogue("functions/payment_saga/reconcile.py", SWEEPER)
RECONCILE.text(
    "reconcile-grace-boundary",
    "if now - quiet_since < grace:",
    "if now - quiet_since <= grace:",
    "the sweeper waits one second longer than the grace before it lists (harmless, but the boundary"
    " is the rule: the grace is exactly search_grace_seconds)",
)
RECONCILE.text(
    "reconcile-no-grace",
    "if now - quiet_since < grace:",
    "if now - quiet_since < 0:",
    "the sweeper lists at once after the lease, before a request still in flight can have landed",
)
RECONCILE.text(
    "reconcile-window-from-the-lease",
    "return claim.attempt_started_at - CLOCK_MARGIN_SECONDS, sent_until + CLOCK_MARGIN_SECONDS",
    "return sent_until - CLOCK_MARGIN_SECONDS, sent_until + CLOCK_MARGIN_SECONDS",
    "the list starts at the end of the lease: a charge made early in the attempt is never seen",
)
RECONCILE.text(
    "reconcile-window-no-margin",
    "return claim.attempt_started_at - CLOCK_MARGIN_SECONDS, sent_until + CLOCK_MARGIN_SECONDS",
    "return claim.attempt_started_at, sent_until",
    "no margin for the clocks: a charge stamped a second before the claim's start is missed",
)
RECONCILE.text(
    "reconcile-customer-after-takeover",
    "    if claim.attempt_started_by == NO_OWNER:\n        return None\n",
    "",
    "a taken-over attempt is listed by the taker's customer: the first holder's charge is missed",
)

OUTCOMES = Catalogue("functions/payment_saga/outcomes.py", RELAY)
OUTCOMES.text(
    "outcomes-requeue-one-more",
    "return attempt < self.max_attempts",
    "return attempt <= self.max_attempts",
    "an order proven never charged is tried MaxRequeueAttempts + 1 times",
)
OUTCOMES.text(
    "outcomes-resent-write-closes",
    "return _status(old) != status",
    "return True",
    "a write that leaves the status as it was (a resent complete) publishes and re-queues again",
)

RELAY_HANDLER = Catalogue("functions/handlers/outcome_relay.py", RELAY)
RELAY_HANDLER.text(
    "relay-reports-only-the-failed-record",
    "for later in records[index:]",
    "for later in records[index : index + 1]",
    "a failed record is reported alone: Lambda retries from it, but the records after it were never"
    " handled (Lambda's rule: every record after the lowest reported one is retried anyway)",
    equivalent="Lambda retries from the lowest sequence number reported, so the records after it are"
    " retried whether or not they are listed; the local stream source follows that rule",
)
RELAY_HANDLER.text(
    "relay-goes-on-after-a-failure",
    '            count("OutcomeRelayStalled")\n            return {',
    '            count("OutcomeRelayStalled")\n            continue\n            return {',
    "the relay goes on past a failed record: a later outcome of the order is published before it",
)
