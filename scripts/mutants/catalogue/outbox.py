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

# -- retention and the handlers' configuration ----------------------------------------------------

RETENTION_TESTS = ("tests/static/test_template.py", "tests/functional/test_sweeper.py")

RETENTION = Catalogue("template.yaml", RETENTION_TESTS)
RETENTION.text(
    "retention-default-3-days",
    "  ClaimRetentionDays:\n    Type: Number\n    Default: 30\n",
    "  ClaimRetentionDays:\n    Type: Number\n    Default: 3\n",
    "closed claims expire after 3 days: a copy of a charged order redriven from the dead-letter queue"
    " (kept 14 days) is claimed afresh at attempt 1 and charged again",
)
RETENTION.text(
    "retention-min-value-3-days",
    "    MinValue: 19\n",
    "    MinValue: 3\n",
    "a deploy may set 3 days of retention, shorter than a copy of the order can still arrive",
)

RUNTIME = Catalogue(
    "functions/handlers/runtime.py",
    ("tests/functional/test_sweeper.py", "tests/statemachine/test_observability.py"),
)
RUNTIME.text(
    "runtime-retention-silent-default",
    'retention_seconds=int(env("CLAIM_RETENTION_DAYS")) * SECONDS_PER_DAY,',
    'retention_seconds=int(env("CLAIM_RETENTION_DAYS", "3")) * SECONDS_PER_DAY,',
    "a function deployed without CLAIM_RETENTION_DAYS keeps closed claims 3 days instead of refusing",
)
