"""Errors that cross into the state machine.

Lambda reports a handler's exception to Step Functions as ``Error`` = the exception's
class name, so the class names below are the API that ``statemachine/payment_saga.asl.json``
matches in ``ErrorEquals``. Rename one and the state machine silently stops catching it:
``tests/static/test_asl.py`` checks the two stay in step.
"""

from __future__ import annotations


class SagaError(Exception):
    """Base class of every error the saga raises on purpose."""


class DuplicateOrder(SagaError):
    """Another execution holds or finished this order, or this payment attempt was declined: no charge.

    Not a failure: the claim did its job. It is an error only so that the state machine can branch on
    it without a Choice state (Claim Order catches it into the Succeed state "Duplicate Suppressed":
    two state transitions per duplicate instead of three). Its message is JSON naming the holder's
    status, which the execution's output carries in ``duplicate.Cause``. It does count in the Claim
    function's ``Errors`` metric; the ``DuplicateSuppressed`` metric is the one to read and alarm on.
    """


class ClaimBusy(SagaError):
    """Another payment attempt of this order holds an open claim; this one is put back on the queue.

    Raised by Claim Order; the state machine sends the order back to the orders queue with a delay
    (state "Requeue Order") and ends in "Sent Back to Queue" with this error, which does not page.
    By the time it comes back the open attempt has ended (completed: then this one is a duplicate;
    released: then it gets its own attempt).
    """


class InvalidOrder(SagaError):
    """The order message is malformed or breaks the message contract. Never retried."""


class OrderConflict(SagaError):
    """The ``orderId`` is already claimed for another amount, currency or customer (invariant 8).

    Nothing is charged; the execution fails visibly so that someone looks at the producer.
    """


class PaymentDeclined(SagaError):
    """The provider definitively refused the payment (HTTP 402 ``card_error``): nothing was charged."""

    def __init__(
        self, message: str, *, decline_code: str | None = None, charge_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.decline_code = decline_code
        self.charge_id = charge_id


class PaymentOutcomeUnknown(SagaError):
    """The provider may or may not have applied the charge (timeout, 5xx, lost response).

    Safe to retry only because every charge carries the order's idempotency key (invariant 5);
    when retries run out the claim is kept and the order goes to reconciliation (invariant 6).
    """


class PaymentProcessing(PaymentOutcomeUnknown):
    """The provider accepted the payment for later settlement (``processing``: a SEPA or ACH debit).

    Not an unknown outcome: the provider says what happens next, days later, in a webhook
    (``payment_intent.succeeded`` or ``payment_intent.payment_failed``). Charge Payment raises it
    without retrying; the state machine records the wait on the claim (state "Await Settlement") and
    ends in "Awaiting Settlement". A subclass of :class:`PaymentOutcomeUnknown` so that any caller that
    does not know it still treats it as unknown (keeps the claim). Its message is JSON naming the
    PaymentIntent (``paymentIntentId``), which the state machine hands on in ``error.Cause``.
    """

    def __init__(self, message: str, *, payment_intent_id: str) -> None:
        super().__init__(message)
        self.payment_intent_id = payment_intent_id


class ChargeNotAttempted(SagaError):
    """Nothing was charged: the provider was not reached, or refused the request itself (an HTTP 4xx
    that created no payment), so the claim may be released."""


class ClaimLost(SagaError):
    """A fenced write found the claim held by someone else, or no longer ``CLAIMED`` (invariant 7)."""


class SettledBeforeAwait(ClaimLost):
    """Await Settlement found its attempt already settled: Stripe's webhook closed the claim first.

    Raised by the settlement write when its condition fails on a claim that this execution held at
    this attempt and that is now closed by the settlement of the very PaymentIntent it was to await:
    completed with it, or released ``DECLINED`` for it (``payment_saga.claims.settlement``). Not a
    failure: the order has its end and the outcome relay published it from the webhook's write. It is
    an error only so that the state machine can branch on it without a Choice state (Await Settlement
    catches it into "Settled Before Await", no page). A :class:`ClaimLost`, so that any other caller
    of the write still reads it as a write that did not land. Its message is JSON naming the
    PaymentIntent and how the claim was closed (``settled``: ``CHARGED`` or ``DECLINED``).
    """


class SettledBeforeChargeAnswer(ClaimLost):
    """A retried Charge Payment found its attempt already settled as declined: Stripe's webhook
    released the claim for this attempt's failed PaymentIntent before the retry ran.

    Raised by Charge Payment when the first request's answer was lost (the provider applied it) and
    the retry's re-check finds the claim it held at this attempt released ``DECLINED`` by the
    settlement of a PaymentIntent the row names (``payment_saga.claims.settlement``). Not a failure:
    nothing was charged, the order has its end and the outcome relay published it from the webhook's
    write. It is an error only so that the state machine can branch on it (Charge Payment catches it
    into "Settled Before Charge Answer", no page); a :class:`ClaimLost`, so that any other caller still
    reads it as a charge refused. Its message is JSON naming the PaymentIntent and how the claim was
    closed (``settled``: ``DECLINED``). A claim completed meanwhile is not this: its charge is handed
    on to Mark Complete, which finds its own completion.
    """


class ReleaseRefused(SagaError):
    """Release Claim was reached with an error that does not prove that nothing was charged.

    The claim is kept; its lease runs out and the sweeper asks the provider what happened.
    """


#: Names the state machine must treat as final (never retried), in ASL ``ErrorEquals`` form.
NON_RETRYABLE = (
    "ClaimBusy",
    "DuplicateOrder",
    "InvalidOrder",
    "OrderConflict",
    "PaymentDeclined",
    "PaymentProcessing",
    "ClaimLost",
    "SettledBeforeAwait",
    "SettledBeforeChargeAnswer",
    "ReleaseRefused",
)
