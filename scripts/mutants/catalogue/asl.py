"""The state machine's Retry and Catch: which failure is retried, how often, and where it ends.

A wrong rule here releases a claim whose charge may have landed (invariant 6), leaves a claim its own
execution cannot find again (a step that died after its write and was not retried), or turns a
decline into an alarm."""

from __future__ import annotations

from model import ASL_PATH, Catalogue, drop_error, drop_path, drop_rule, set_path, set_rule

STATIC = "tests/static/test_asl.py"
PATHS = "tests/statemachine/test_paths.py"
CRASHES = "tests/statemachine/test_crashes.py"
POLICIES = "tests/statemachine/test_retry_policies.py"
HOLES = "tests/statemachine/test_holes.py"
SETTLING = "tests/statemachine/test_settlement.py"
SETTLED_FIRST = "tests/statemachine/test_settled_first.py"
SETTLED_BEFORE_RETRY = "tests/statemachine/test_settled_before_charge_answer.py"
REQUEUES = "tests/statemachine/test_requeues.py"

ASL = Catalogue(ASL_PATH, (STATIC, PATHS, CRASHES))
m = ASL

CLAIM, CHARGE, COMPLETE, RELEASE = "Claim Order", "Charge Payment", "Mark Complete", "Release Claim"


def not_resent(id: str, choice: int, whose: str, ends: str, because: str = "") -> None:
    """A failed Claim step's branch of Why Released? (Choices[CHOICE]) ends in ENDS instead of going on
    to the re-send: nothing sends the order again."""
    m.asl(
        id,
        set_path(("States", "Why Released?", "Choices", choice, "Next"), ends),
        f"a failed Claim step whose {whose} ends as {ends}{because}, and nothing sends the order again",
        tests=(REQUEUES,),
    )


# -- Claim Order --
m.asl(
    "asl-claim-no-lambda-retry",
    drop_rule(CLAIM, "Retry", "Lambda.TooManyRequestsException"),
    "Claim Order without its Lambda.* retrier: throttling gets 3 tries instead of 6, then the order fails",
    tests=(POLICIES, STATIC),
)
m.asl(
    "asl-claim-throttle-not-retried",
    drop_error(CLAIM, "Retry", "Lambda.TooManyRequestsException"),
    "Claim Order retries the Lambda service errors but not throttling (only the catch-all does)",
    tests=(POLICIES, STATIC),
)
m.asl(
    "asl-claim-no-catch-all-retry",
    set_rule(CLAIM, "Retry", "States.ALL", MaxAttempts=0),
    "a Claim Order that died after its write is not retried: the claim it wrote is released unseen",
    tests=(CRASHES, PATHS),
)
m.asl(
    "asl-claim-conflict-retried",
    drop_error(CLAIM, "Retry", "OrderConflict"),
    "an OrderConflict is retried (three more conditional writes) before it fails",
    tests=(POLICIES,),
)
m.asl(
    "asl-claim-invalid-order-retried",
    drop_error(CLAIM, "Retry", "InvalidOrder"),
    "an InvalidOrder is retried, though no retry can make it valid",
    tests=(POLICIES,),
)
m.asl(
    "asl-claim-conflict-not-caught",
    drop_rule(CLAIM, "Catch", "OrderConflict"),
    "an OrderConflict goes to Release Claim and ends as Claim Failed, not Order Conflict",
    tests=(PATHS,),
)
m.asl(
    "asl-claim-failure-kept-unreleased",
    set_rule(CLAIM, "Catch", "States.ALL", Next="Needs Reconciliation"),
    "a Claim Order that keeps failing is sent to reconciliation instead of fencing/releasing its claim",
    tests=(PATHS,),
)
m.asl(
    "asl-claim-token-is-name",
    set_path(("States", CLAIM, "Parameters", "Payload", "claimToken.$"), "$$.Execution.Name"),
    "the claim is taken under the execution's name, the later steps fence on its id",
    tests=(PATHS,),
)
m.asl(
    "asl-duplicate-not-caught",
    drop_rule(CLAIM, "Catch", "DuplicateOrder"),
    "a duplicate is not caught into Duplicate Suppressed: it is fenced and ends as Claim Failed",
    tests=(PATHS,),
)
m.asl(
    "asl-duplicate-retried",
    drop_error(CLAIM, "Retry", "DuplicateOrder"),
    "a duplicate is retried three more times before it is suppressed",
    tests=(POLICIES,),
)
# -- Charge Payment --
m.asl(
    "asl-charge-no-lambda-retry",
    drop_rule(CHARGE, "Retry", "Lambda.TooManyRequestsException"),
    "Charge Payment without its Lambda.* retrier",
    tests=(POLICIES, STATIC),
)
m.asl(
    "asl-charge-unknown-not-retried",
    set_rule(CHARGE, "Retry", "PaymentOutcomeUnknown", MaxAttempts=0),
    "an unknown charge outcome (a lost answer) is not retried with the same key: reconciliation instead",
    tests=(PATHS,),
)
m.asl(
    "asl-charge-unknown-fewer-retries",
    drop_rule(CHARGE, "Retry", "PaymentOutcomeUnknown"),
    "an unknown charge outcome falls to the catch-all retrier (3 tries, shorter waits)",
    tests=(PATHS,),
)
m.asl(
    "asl-charge-not-attempted-retried",
    drop_error(CHARGE, "Retry", "ChargeNotAttempted"),
    "ChargeNotAttempted is retried: the retry cannot prove anything any more, so nothing is released",
    tests=(PATHS,),
)
m.asl(
    "asl-charge-declined-retried",
    drop_error(CHARGE, "Retry", "PaymentDeclined"),
    "a decline is retried (the provider is asked again, and replays the same decline)",
    tests=(POLICIES, PATHS),
)
m.asl(
    "asl-charge-claim-lost-retried",
    drop_error(CHARGE, "Retry", "ClaimLost"),
    "a Charge step that no longer holds its claim is retried",
    tests=(POLICIES,),
)
m.asl(
    "asl-charge-not-attempted-reconciled",
    drop_error(CHARGE, "Catch", "ChargeNotAttempted"),
    "a charge proven never sent is reconciled instead of released",
    tests=(PATHS,),
)
m.asl(
    "asl-charge-declined-reconciled",
    drop_error(CHARGE, "Catch", "PaymentDeclined"),
    "a decline goes to reconciliation instead of releasing the claim",
    tests=(PATHS,),
)
m.asl(
    "asl-charge-unknown-released",
    set_rule(CHARGE, "Catch", "States.ALL", Next=RELEASE),
    "an ambiguous charge failure is sent to Release Claim",
    tests=(PATHS, STATIC),
)
m.asl(
    "asl-charge-no-retry-count",
    drop_path(("States", CHARGE, "Parameters", "Payload", "retryCount.$")),
    "the Charge handler is not told it is a retry: a 401 on a retry counts as proof nothing was charged",
    tests=(PATHS, STATIC),
)
m.asl(
    "asl-charge-no-redrive-count",
    drop_path(("States", CHARGE, "Parameters", "Payload", "redriveCount.$")),
    "the Charge handler is not told the execution was redriven",
    tests=(STATIC,),
)
m.asl(
    "asl-charge-token-is-name",
    set_path(("States", CHARGE, "Parameters", "Payload", "claimToken.$"), "$$.Execution.Name"),
    "the Charge step checks the claim under the execution's name instead of its id",
    tests=(PATHS,),
)
# -- Mark Complete --
m.asl(
    "asl-complete-not-retried",
    set_rule(COMPLETE, "Retry", "States.ALL", MaxAttempts=0),
    "a Mark Complete that died after its write is not retried: a charged order ends in reconciliation",
    tests=(CRASHES,),
)
m.asl(
    "asl-complete-failure-released",
    set_rule(COMPLETE, "Catch", "States.ALL", Next=RELEASE),
    "a Mark Complete that keeps failing, after the money moved, is sent to Release Claim",
    tests=(PATHS, STATIC),
)
m.asl(
    "asl-complete-claim-lost-retried",
    drop_rule(COMPLETE, "Retry", "ClaimLost"),
    "a Mark Complete that lost its claim is retried",
    tests=(POLICIES,),
)
# -- Release Claim --
m.asl(
    "asl-release-not-retried",
    set_rule(RELEASE, "Retry", "States.ALL", MaxAttempts=0),
    "a Release Claim that died after its write is not retried: a decline ends as Release Failed",
    tests=(CRASHES,),
)
m.asl(
    "asl-release-refused-retried",
    drop_error(RELEASE, "Retry", "ReleaseRefused"),
    "a refused release (no proof) is retried",
    tests=(POLICIES,),
    equivalent="Release Claim is reached only from a decline, a ChargeNotAttempted or a failed Claim "
    "step (tests/static/test_asl.py holds the routing), and none of them raises ReleaseRefused: the "
    "rule only matters once that routing is broken",
)
m.asl(
    "asl-kept-claim-reported-failed",
    set_path(("States", "Why Released?", "Choices", 5, "Next"), "Claim Failed"),
    "a claim kept after a failed takeover ends as Claim Failed (send it again), not in reconciliation",
    tests=(HOLES, PATHS),
)
m.asl(
    "asl-busy-not-requeued",
    drop_rule(CLAIM, "Catch", "ClaimBusy"),
    "a payment attempt that finds another one open is not put back on the queue: the retry is lost",
    tests=(HOLES, PATHS),
)
not_resent("asl-resend-reported-failed", 4, "fence changed no status", "Claim Failed")
not_resent(
    "asl-failed-claim-and-release-not-resent",
    0,
    "release failed too",
    "Release Failed",
    ": no claim to sweep",
)
m.asl(
    "asl-busy-back-too-soon",
    set_path(("States", CLAIM, "Catch", 1, "Assign", "sendBack", "delaySeconds"), 300),
    "a payment attempt that finds another one open comes back in 5 minutes, while that attempt may "
    "still run: it is busy again and reaches the re-queue bound sooner",
    tests=(REQUEUES,),
)
m.asl(
    "asl-busy-pages",
    set_path(("States", CLAIM, "Catch", 1, "Assign", "sendBack", "error"), "ClaimRetriedLater"),
    "a customer's retry behind an open payment attempt ends as a failed Claim step, which pages",
    tests=(REQUEUES, HOLES),
)
m.asl(
    "asl-hand-started-not-requeued",
    drop_path(("States", "Requeue Allowed?", "Choices", 0)),
    "an execution started without a re-queue count is taken for one at the bound: its order is not "
    "sent back but handed to a person",
    tests=(REQUEUES, HOLES),
)
m.asl(
    "asl-why-released-swapped",
    set_path(("States", "Why Released?", "Choices", 2, "Next"), "Charge Not Attempted"),
    "a released decline is reported as Charge Not Attempted",
    tests=(PATHS,),
)
m.asl(
    "asl-why-released-unguarded",
    set_path(
        ("States", "Why Released?", "Choices", 2),
        {"Variable": "$.error.Error", "StringEquals": "PaymentDeclined", "Next": "Payment Declined"},
    ),
    "Why Released? reads $.error.Error without testing $.error first: a release after a failed Claim "
    "step (which has no $.error) fails the execution with States.Runtime, as AWS does, instead of "
    "ending Claim Failed (the local engine let the missing path through until it followed AWS)",
    tests=(PATHS,),
)
# -- the whole execution --
m.asl(
    "asl-execution-outlives-lease",
    set_path(("TimeoutSeconds",), 3600),
    "the execution may run for an hour, longer than the claim's 15-minute lease",
    tests=(
        "tests/static/test_template.py::test_a_claim_outlasts_every_execution_that_could_still_act_on_it",
    ),
)

# -- a payment that settles later --
m.asl(
    "asl-processing-goes-to-reconciliation",
    drop_rule(CHARGE, "Catch", "PaymentProcessing"),
    "a debit that settles later ends in Needs Reconciliation and pages, as every bank debit did before",
    tests=(SETTLING,),
)
m.asl(
    "asl-settled-before-await-pages",
    drop_rule("Await Settlement", "Catch", "SettledBeforeAwait"),
    "a debit the webhook settled before Await Settlement's write ends in Needs Reconciliation and pages",
    tests=(SETTLED_FIRST,),
)
m.asl(
    "asl-settled-before-charge-answer-pages",
    drop_rule(CHARGE, "Catch", "SettledBeforeChargeAnswer"),
    "a debit the webhook declined before Charge Payment's retry ends in Needs Reconciliation and pages",
    tests=(SETTLED_BEFORE_RETRY,),
)
m.asl(
    "asl-await-settlement-not-retried",
    drop_rule("Await Settlement", "Retry", "States.ALL"),
    "Await Settlement is not retried: a Lambda that died after its write pages for a debit that is fine",
    tests=(SETTLING,),
)
