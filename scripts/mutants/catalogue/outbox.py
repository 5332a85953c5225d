"""The sweeper's decisions and the outcome relay: the parts around the steps that keep the promise.

A wrong rule in the sweeper releases an attempt whose charge may still land or be unsearchable (the
next attempt charges again), or lists too little to prove anything; a wrong rule in the relay
publishes an order's outcomes out of order, re-queues what was charged, or never re-queues what
was not."""

from __future__ import annotations

from model import Catalogue

#: The sweeper's functional tests, one module per concern: its decisions, at an account's volume,
#: its races with the saga, and its Lambda.
SWEEPER_TESTS = (
    "tests/functional/test_sweeper.py",
    "tests/functional/test_sweeper_volume.py",
    "tests/functional/test_sweeper_races.py",
    "tests/functional/test_sweeper_lambda.py",
)
SWEEPER = (
    *SWEEPER_TESTS,
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
    "reconcile-unusable-key-swallowed",
    "    except ProviderUnavailable:\n        raise\n",
    "",
    "a key the sweeper cannot use fails each claim and the sweep still beats: the heartbeat hides it",
    tests=("tests/functional/test_sweeper_key_mode.py",),
)
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

#: The relay's batch: in stream order, stopping at the first failure.
RELAYING = Catalogue("functions/payment_saga/relaying.py", ("tests/unit/test_relaying.py", *RELAY))
RELAYING.text(
    "relay-reports-only-the-failed-record",
    "for later in records[index:]",
    "for later in records[index : index + 1]",
    "a failed record is reported alone: Lambda retries from it anyway (its rule: every record after"
    " the lowest reported one is retried), but the relay's answer no longer says what it left untouched",
)
RELAYING.text(
    "relay-goes-on-after-a-failure",
    "            stalled(record, len(records) - index)\n            return [",
    "            stalled(record, len(records) - index)\n            continue\n            return [",
    "the relay goes on past a failed record: a later outcome of the order is published before it",
)

# -- retention and the handlers' configuration ----------------------------------------------------

RETENTION_TESTS = ("tests/static/test_template.py", *SWEEPER_TESTS)

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
    (*SWEEPER_TESTS, "tests/statemachine/test_observability.py"),
)
RUNTIME.text(
    "runtime-retention-silent-default",
    'retention_seconds=int(env("CLAIM_RETENTION_DAYS")) * SECONDS_PER_DAY,',
    'retention_seconds=int(env("CLAIM_RETENTION_DAYS", "3")) * SECONDS_PER_DAY,',
    "a function deployed without CLAIM_RETENTION_DAYS keeps closed claims 3 days instead of refusing",
)

# -- the sweeper's Lambda: one sweep at a time, within its time, seen when it fails -----------------

SWEEPER_LAMBDA = (*SWEEPER_TESTS, "tests/functional/test_sweep_lock.py")

SWEEPER_HANDLER = Catalogue("functions/handlers/sweeper.py", SWEEPER_LAMBDA)
SWEEPER_HANDLER.text(
    "sweeper-no-lock",
    "    if not lease.acquired:\n",
    "    if False:\n",
    "a tick that overlaps a running sweep sweeps too: two sweepers decide one claim at once",
)
SWEEPER_HANDLER.text(
    "sweeper-lock-kept",
    "        lock.release(context.aws_request_id)\n",
    "        pass\n",
    "a finished sweep keeps the lease: the next ticks skip until it runs out",
)
SWEEPER_HANDLER.text(
    "sweeper-lease-shorter-than-the-sweep",
    "lease_seconds = lease_for(context.get_remaining_time_in_millis())",
    "lease_seconds = lease_for(0)",
    "the lease runs out long before the sweep may: the next tick starts a second sweep beside it",
    tests=("tests/functional/test_sweep_lock.py", *SWEEPER_TESTS),
)
SWEEPER_HANDLER.text(
    "sweeper-ignores-its-time-budget",
    "on_decision=record_decision,\n"
    "        keep_going=lambda: context.get_remaining_time_in_millis() > RESERVE_MILLIS,",
    "on_decision=record_decision,\n        keep_going=lambda: True,",
    "the sweep starts claims with no time left to finish them: Lambda kills it mid-claim, no metric",
)
SWEEPER_HANDLER.text(
    "sweeper-dry-run",
    "        apply=True,\n        search_grace_seconds=",
    "        apply=False,\n        search_grace_seconds=",
    "the scheduled sweeper decides but never writes: every stale claim stays CLAIMED",
)
SWEEPER_HANDLER.text(
    "sweeper-grace-not-configurable",
    'search_grace_seconds=int(env("CLAIM_SEARCH_GRACE_SECONDS", str(DEFAULT_SEARCH_GRACE_SECONDS))),',
    "search_grace_seconds=DEFAULT_SEARCH_GRACE_SECONDS,",
    "the deployed CLAIM_SEARCH_GRACE_SECONDS is ignored: a stack that sets a longer grace (a search"
    " that lags more) is released on the default",
)
SWEEPER_HANDLER.text(
    "sweeper-failure-not-raised",
    '    if counts["failed"]:\n',
    "    if False:\n",
    "a claim the sweep could not reconcile shows in no Errors metric: the function looks healthy",
)
SWEEPER_HANDLER.text(
    "sweeper-no-heartbeat",
    '    count("SweepCompleted", FunctionName=context.function_name)\n',
    "",
    "a sweep that ran publishes no heartbeat: the missing-heartbeat alarm fires on a healthy sweeper",
)
SWEEPER_HANDLER.text(
    "sweeper-heartbeat-on-skip",
    '        count("SweepSkipped")\n',
    '        count("SweepSkipped")\n        count("SweepCompleted", FunctionName=context.function_name)\n',
    "a tick that skipped beats: a sweep stuck holding the lease never raises the heartbeat alarm",
)
SWEEPER_HANDLER.text(
    "sweeper-no-oldest-age",
    '    measure("OldestUnresolvedClaimAge", age, MetricUnit.Seconds, FunctionName=context.function_name)\n',
    "",
    "the age of the oldest pending claim is never published: the pending alarm has nothing to read",
)
# What the sweeper tells about each decision (the alarms' metrics), decided in payment_saga/sweeping.py.
SWEEPER_SAYS = Catalogue(
    "functions/payment_saga/sweeping.py", ("tests/unit/test_sweeping.py", *SWEEPER_LAMBDA)
)
SWEEPER_SAYS.text(
    "sweeper-charge-on-released-silent",
    '(Count("ChargeOnReleasedClaim"),)',
    "()",
    "a charge found for a released claim (a double charge in the making) raises no alarm",
)
SWEEPER_SAYS.text(
    "sweeper-duplicate-charges-counted-once",
    'tuple(Count("DuplicateCharge") for _ in decision.extra_charge_ids)',
    '(Count("DuplicateCharge"),)',
    "two extra charges for one attempt count as one: a refund is missed",
)
SWEEPER_SAYS.text(
    "sweeper-duplicates-not-reported",
    "said = [_duplicates(decision)] if decision.extra_charge_ids else []",
    "said: list[Said] = []",
    "more than one succeeded PaymentIntent for an attempt is neither logged nor counted",
)
SWEEPER_SAYS.text(
    "sweeper-pending-not-counted",
    'counts = [Count("ReconciliationPending")]',
    "counts: list[Count] = []",
    "a claim left pending is not counted",
)
SWEEPER_SAYS.text(
    "sweeper-list-cap-not-counted",
    '    if decision.list_cap_reached:\n        counts.append(Count("ReconciliationListCapped"))\n',
    "",
    "a claim the list cap leaves for a person is not counted: nobody is told to decide it",
)
SWEEPER_SAYS.text(
    "sweeper-failed-not-counted",
    '(Count("ReconciliationFailed"),)',
    "()",
    "a claim the sweep could not reconcile is not counted (the ReconciliationFailed alarm)",
)
SWEEPER_SAYS.text(
    "sweeper-decline-logged-without-reason",
    "reason = decision.release_reason.value if decision.release_reason else None",
    "reason = None",
    "a release's log line loses its releaseReason: a decline reads like a proven never-charged",
)
