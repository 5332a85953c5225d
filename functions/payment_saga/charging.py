"""Charge Payment's decisions: create a PaymentIntent, follow the one recorded, or end on the claim.

The step runs once per try of the state machine's Charge Payment Task, and every try reads its claim
first (one strongly consistent read of the base table). What the row says decides what is sent:

======================================================  ==========================================
The claim, read at the start of the try                 What the step does
======================================================  ==========================================
``CLAIMED`` by this execution at this attempt, and it   **follow** that PaymentIntent: read it by
records the attempt's PaymentIntent                     id and map its status as a create's answer
(``settlementIntentId``: a debit awaiting settlement)   (never a create: after Stripe forgot the
                                                        key, 24 hours on, a create is a second
                                                        payment), whatever the lease says
``CLAIMED`` by this execution at this attempt, with     **create** the attempt's PaymentIntent,
more lease left than the step's own timeout             keyed by the order and the attempt
closed by this attempt's own settlement, under this     completed: **hand on** its charge, once
token (``settled_before_charge_answer``)                Stripe confirms it (a read by id: a row
                                                        is not trusted for money); released
                                                        declined: ``SettledBeforeChargeAnswer``
anything else (another holder, a lease about to run     **refuse** (``ClaimLost``): the order
out, another attempt, no row)                           needs reconciliation
======================================================  ==========================================

And after a create whose outcome stays unknown (a timeout, a 5xx, a lost answer, or a 401 on a
retry, which proves nothing about an earlier request), the claim is read again: Stripe's webhook
may have told it meanwhile. A wait recorded on this attempt's open claim answers
``PaymentProcessing`` (Await Settlement, no page); a claim this attempt's settlement closed ends as
the table above says (charged, or ``SettledBeforeChargeAnswer``), so a webhook that settles the
order during the step's last try does not page. Anything else stays unknown.

Why following is safe: the PaymentIntent read is the one the attempt's own create made (the claim
records it only from Stripe's own answer, read with the stack's key), it is checked to be this
order's and this attempt's, and a read by id cannot charge. A failure before the provider could be
reached while following proves nothing either (the create was sent long ago): unknown, never
``ChargeNotAttempted``, which would release a claim whose debit is still settling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from payment_saga.claims import (
    ClaimStatus,
    Settled,
    awaiting_before_charge_answer,
    settled_before_charge_answer,
)
from payment_saga.errors import (
    ChargeNotAttempted,
    ClaimLost,
    PaymentDeclined,
    PaymentOutcomeUnknown,
    PaymentProcessing,
    SettledBeforeChargeAnswer,
)
from payment_saga.payments import idempotency_key
from payment_saga.proof import first_request_of_attempt

if TYPE_CHECKING:
    from collections.abc import Callable

    from payment_saga.claims import Claim, ClaimsStore
    from payment_saga.orders import Order
    from payment_saga.payments import Charge

#: A charge is only created while the claim's lease has at least this long to run: longer than the
#: step's timeout, so the sweeper cannot decide about the attempt while the request is in flight.
LEASE_MARGIN_SECONDS = 60


class Journal(Protocol):
    """Where the step says what happened: one structured log event and one metric each."""

    def __call__(self, event: str, metric: str, *, level: str = "info", **fields: Any) -> None:
        """Log ``event`` (at ``level``) with ``fields`` and count ``metric``."""
        ...


class Provider(Protocol):
    """What the step needs from the payment provider."""

    def charge(self, order: Order, *, attempt: int, idempotency_key: str) -> Charge:
        """Create the attempt's PaymentIntent (see ``StripeProvider.charge``)."""
        ...

    def follow(self, order: Order, *, attempt: int, idempotency_key: str, payment_intent_id: str) -> Charge:
        """What a known PaymentIntent of the attempt says now (see ``StripeProvider.follow``)."""
        ...


@dataclass(frozen=True)
class ChargeTry:
    """One try of the Charge Payment step, as the state machine describes it."""

    order: Order
    attempt: int
    #: The execution's id: the claim token.
    token: str
    #: ``$$.State.RetryCount``, ``$$.Execution.RedriveCount``, and whether this execution started the
    #: attempt (no takeover): together, whether an earlier request with the attempt's key can exist.
    retry_count: int = 0
    redrive_count: int = 0
    attempt_owner: bool = False

    @property
    def key(self) -> str:
        """The attempt's idempotency key: a function of the order and the attempt only."""
        return idempotency_key(self.order.order_id, self.attempt)


def charge(
    step: ChargeTry, *, store: ClaimsStore, provider: Callable[[], Provider], journal: Journal
) -> Charge:
    """Run one try of Charge Payment (the module's table): the charge to hand on to Mark Complete.

    ``provider`` builds the provider (it may fail: then nothing was sent). Raises ``PaymentDeclined``,
    ``ChargeNotAttempted`` (proof nothing was charged), ``PaymentProcessing``, ``PaymentOutcomeUnknown``,
    ``SettledBeforeChargeAnswer`` or ``ClaimLost``, each already written to ``journal``.
    """
    claim = store.get(step.order.order_id)
    recorded = _recorded_intent(claim, step)
    if recorded is not None:
        return _follow(step, recorded, provider, journal, how="charge_followed")
    if claim is None or not store.still_held(
        claim, token=step.token, attempt=step.attempt, margin_seconds=LEASE_MARGIN_SECONDS
    ):
        return _closed_meanwhile(step, claim, provider, journal)
    try:
        built = _built(provider)
        charged = built.charge(step.order, attempt=step.attempt, idempotency_key=step.key)
    except ChargeNotAttempted as exc:
        if first_request_of_attempt(
            retry_count=step.retry_count, redrive_count=step.redrive_count, attempt_owner=step.attempt_owner
        ):
            journal("charge_not_attempted", "ChargeNotAttempted", reason=str(exc))
            raise
        # This request did not reach the provider, but an earlier one with the same key may have
        # (Stripe checks the API key before the idempotency key): no proof, so no release.
        unknown = PaymentOutcomeUnknown(f"not attempted on retry; an earlier request may have landed: {exc}")
        return _after_unknown(step, store, provider, journal, unknown)
    except PaymentDeclined as exc:
        journal("charge_declined", "ChargeDeclined", declineCode=exc.decline_code)
        raise
    except PaymentProcessing as exc:
        # Not unknown: the provider settles it later and says how in a webhook. The state machine
        # keeps the claim for it (Await Settlement); nothing to retry, nothing to page.
        journal("charge_processing", "ChargeProcessing", chargeId=exc.payment_intent_id)
        raise
    except PaymentOutcomeUnknown as exc:
        return _after_unknown(step, store, provider, journal, exc)
    journal(
        "charge_applied",
        "ChargeReplayed" if charged.replayed else "ChargeApplied",
        chargeId=charged.charge_id,
        replayed=charged.replayed,
        amount=charged.amount,
    )
    return charged


def _recorded_intent(claim: Claim | None, step: ChargeTry) -> str | None:
    """The attempt's PaymentIntent the open claim records, when this execution holds it at this attempt."""
    if claim is None or claim.status is not ClaimStatus.CLAIMED or not claim.held_by(step.token):
        return None
    if claim.attempt != step.attempt:
        return None
    return claim.settlement_intent_id


def _built(provider: Callable[[], Provider]) -> Provider:
    try:
        return provider()
    except ChargeNotAttempted:
        raise
    except Exception as exc:  # any failure here is before the provider was called
        raise ChargeNotAttempted(f"payment provider unavailable: {type(exc).__name__}") from exc


def _follow(
    step: ChargeTry, payment_intent_id: str, provider: Callable[[], Provider], journal: Journal, *, how: str
) -> Charge:
    """What the attempt's recorded PaymentIntent says now; never a create."""
    try:
        followed = _built(provider).follow(
            step.order, attempt=step.attempt, idempotency_key=step.key, payment_intent_id=payment_intent_id
        )
    except ChargeNotAttempted as exc:
        # Nothing was sent now, but the attempt's create was sent long ago: proof of nothing.
        journal("charge_outcome_unknown", "ChargeOutcomeUnknown", level="warning", reason=str(exc))
        raise PaymentOutcomeUnknown(f"cannot follow {payment_intent_id}: {exc}") from exc
    except PaymentProcessing:
        journal("charge_processing", "ChargeProcessing", chargeId=payment_intent_id, learnedFrom="claim")
        raise
    except PaymentDeclined as exc:
        journal("charge_declined", "ChargeDeclined", declineCode=exc.decline_code, chargeId=payment_intent_id)
        raise
    except PaymentOutcomeUnknown as exc:
        journal("charge_outcome_unknown", "ChargeOutcomeUnknown", level="warning", reason=str(exc))
        raise
    journal(how, "ChargeFollowed", chargeId=followed.charge_id)
    return followed


def _closed_meanwhile(
    step: ChargeTry, claim: Claim | None, provider: Callable[[], Provider], journal: Journal
) -> Charge:
    """The claim is no longer open for this try: hand on this attempt's own settlement, or refuse."""
    settled = (
        None if claim is None else settled_before_charge_answer(claim, token=step.token, attempt=step.attempt)
    )
    if claim is not None and settled is Settled.CHARGED:
        return _hand_on(step, claim, provider, journal)
    if claim is not None and settled is Settled.DECLINED:
        raise _settled_declined(step, claim, journal)
    state = "absent" if claim is None else f"{claim.status.value}, attempt {claim.attempt}"
    refused = ClaimLost(
        f"order {step.order.order_id}: attempt {step.attempt} is no longer held by this execution ({state})"
    )
    journal("charge_refused", "ChargeRefused", level="error", reason=str(refused))
    raise refused


def _hand_on(step: ChargeTry, claim: Claim, provider: Callable[[], Provider], journal: Journal) -> Charge:
    """A claim completed under this token at this attempt (Stripe's webhook, the sweeper): its charge is
    handed on to Mark Complete, which finds its own completion. Only once Stripe confirms it: succeeded,
    this order and attempt, this amount. A row that says otherwise is refused (reconciliation)."""
    assert claim.charge_id is not None
    try:
        confirmed = _built(provider).follow(
            step.order, attempt=step.attempt, idempotency_key=step.key, payment_intent_id=claim.charge_id
        )
    except (PaymentDeclined, PaymentProcessing) as exc:
        refused = ClaimLost(
            f"order {step.order.order_id}: the claim is completed with {claim.charge_id}, which Stripe"
            f" does not show succeeded: {exc}"
        )
        journal("charge_refused", "ChargeRefused", level="error", reason=str(refused))
        raise refused from exc
    except ChargeNotAttempted as exc:
        raise PaymentOutcomeUnknown(f"cannot confirm {claim.charge_id} with Stripe: {exc}") from exc
    journal("charge_completed_meanwhile", "ChargeCompletedMeanwhile", chargeId=confirmed.charge_id)
    return confirmed


def _settled_declined(step: ChargeTry, claim: Claim, journal: Journal) -> SettledBeforeChargeAnswer:
    """Stripe's webhook released the claim for this attempt's failed PaymentIntent: nothing was
    charged, and the relay published the decline from that write. Never charge again."""
    failed = claim.declined_intent_id or claim.settlement_intent_id
    journal("settled_before_charge_answer", "SettledBeforeChargeAnswer", chargeId=failed, settled="DECLINED")
    return SettledBeforeChargeAnswer(
        json.dumps(
            {
                "orderId": step.order.order_id,
                "attempt": step.attempt,
                "paymentIntentId": failed,
                "settled": Settled.DECLINED.value,
                "status": claim.status.value,
            },
            sort_keys=True,
        )
    )


def _after_unknown(
    step: ChargeTry,
    store: ClaimsStore,
    provider: Callable[[], Provider],
    journal: Journal,
    unknown: PaymentOutcomeUnknown,
) -> Charge:
    """What an unknown outcome becomes once the claim is read again (the module's last paragraph):
    the charge this attempt's settlement completed meanwhile, or the exception to end the try on."""
    try:
        claim = store.get(step.order.order_id)
    except Exception:  # noqa: BLE001 - a read that fails proves nothing: the outcome stays unknown
        claim = None
    if claim is not None:
        awaited = awaiting_before_charge_answer(claim, token=step.token, attempt=step.attempt)
        if awaited is not None:
            # The answer was lost, but Stripe's processing webhook recorded the wait on this very
            # attempt's claim: the provider said what the answer would have. Await Settlement, no page.
            journal(
                "charge_processing",
                "ChargeProcessing",
                chargeId=awaited,
                learnedFrom="webhook",
                reason=str(unknown),
            )
            raise PaymentProcessing(
                json.dumps(
                    {
                        "paymentIntentId": awaited,
                        "status": "processing",
                        "reason": f"payment for order {step.order.order_id} ({step.key}) settles later,"
                        " as Stripe's webhook said",
                    },
                    sort_keys=True,
                ),
                payment_intent_id=awaited,
            )
        settled = settled_before_charge_answer(claim, token=step.token, attempt=step.attempt)
        if settled is Settled.DECLINED:
            raise _settled_declined(step, claim, journal)
        if settled is Settled.CHARGED:
            return _hand_on(step, claim, provider, journal)
    journal("charge_outcome_unknown", "ChargeOutcomeUnknown", level="warning", reason=str(unknown))
    raise unknown
