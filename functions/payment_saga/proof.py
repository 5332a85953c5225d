"""What proves that nothing was charged: the rules Release Claim and Charge Payment live by (invariant 6).

A claim may be released only on proof that the charge did not happen. The proof is the failure that
ended the attempt, and only some failures are proof:

======================================================  ==========================================
What happened                                            Proof?
======================================================  ==========================================
the provider declined the payment (``PaymentDeclined``)  yes: ``DECLINED`` (the key replays the
                                                         decline; nothing was charged under it)
the charge failed before the provider was called         yes, ``NOT_CHARGED``, but only on the
(``ChargeNotAttempted``) on the attempt's *first*        first request of an attempt this
request                                                  execution started and was never redriven
the Claim step failed                                    only once ``fence_failed_claim`` made sure
                                                         no claim of this execution can land, and
                                                         then only if this execution started the
                                                         attempt and was never redriven
anything else (unknown outcome, timeouts, ClaimLost...)  no: the claim is kept for the sweeper
======================================================  ==========================================

Why "first request": Stripe checks the API key and rate limits before its idempotency layer, so a
401 on a retry says nothing about an earlier request with the same key that may have landed. Why
"started the attempt": a takeover continues an attempt whose first holder may have charged. Why
"never redriven": a redriven execution re-runs steps whose earlier runs may have charged, and its
ownership of the attempt may have been taken over and handed back in between.
"""

from __future__ import annotations

from payment_saga.claims import ReleaseReason

#: Error names (from the Charge step's Catch) that can prove nothing was charged.
PROOF_BY_ERROR = {"PaymentDeclined": ReleaseReason.DECLINED, "ChargeNotAttempted": ReleaseReason.NOT_CHARGED}


def first_request_of_attempt(*, retry_count: int, redrive_count: int, attempt_owner: bool) -> bool:
    """Whether no earlier charge request with this attempt's idempotency key can exist.

    True only on the first try of the Charge step (``$$.State.RetryCount`` 0), in an execution that
    was never redriven (``$$.Execution.RedriveCount`` 0), for an attempt this execution started.
    """
    return retry_count == 0 and redrive_count == 0 and attempt_owner


def may_release_failed_claim(*, attempt_started_by: str, token: str, redrive_count: int) -> bool:
    """Whether an execution whose Claim step failed, yet whose claim landed, may release it.

    Its charge step never ran in this run; the attempt is provably uncharged only if this execution
    started it (no takeover) and never ran before (no redrive).
    """
    return attempt_started_by == token and redrive_count == 0


def release_reason(error_name: str | None) -> ReleaseReason | None:
    """The release reason an error from the Charge step proves, or None when it proves nothing."""
    if error_name is None:
        return None
    return PROOF_BY_ERROR.get(error_name)
