"""What the sweeper says about what it found, and the provider it builds only when a claim needs one.

The sweeper's Lambda (``handlers.sweeper``) takes the sweep lock, runs
:func:`payment_saga.reconcile.reconcile` (or, hourly, :func:`check_settlements`) and tells what they
decided. What it tells is decided here, one :class:`Said` per log event, each with the metrics that
count it, since the alarms read those (docs/runbook.md):

* every reconciliation decision is a structured log event with ``orderId`` (``reconciliation_completed``,
  ``reconciliation_released`` with its ``releaseReason`` NOT_CHARGED or DECLINED,
  ``reconciliation_pending``, ``reconciliation_changed``, ``reconciliation_failed``) and a metric:
  ``ReconciliationResolved`` by ``Outcome``, ``ReconciliationPending``, ``ReconciliationListCapped``
  (pending because the attempt's window holds more PaymentIntents than the list may read: it stays so
  until a person decides), ``SettlementOverdue`` (a debit unsettled past its settle-by date),
  ``ReconciliationChanged`` and ``ReconciliationFailed``;
* two findings are money taken wrongly, logged at ERROR and counted for an alarm each:
  ``charge_on_released_claim`` / ``ChargeOnReleasedClaim`` (the provider shows a succeeded charge for an
  attempt whose claim was released, or re-claimed under a later attempt, since: the claim is now
  COMPLETED with that charge, but a later attempt may already have charged: check for a second charge
  and refund it) and ``duplicate_charge`` / ``DuplicateCharge``, one per extra charge (more than one
  succeeded PaymentIntent for one attempt: the oldest is the order's charge, refund the others);
* each settlement the hourly check asked Stripe about is ``settlement_checked`` (``SettlementChecked`` by
  ``Outcome``), or, for the same findings the webhook consumer alarms on, ``duplicate_charge``,
  ``charge_on_released_claim`` or ``webhook_mismatch`` at ERROR with their alarm's metric too; a claim it
  could not ask about is ``settlement_check_failed`` (``SettlementCheckFailed``).

The provider on first use (:class:`ProviderOnFirstUse`): most sweeps find no stale claim and no claim
awaiting a settlement, and need no key and no Stripe client; reading the key (a Secrets Manager client
and a call) and building the client (the Stripe SDK, with requests and urllib3) was two fifths of the
sweeper's cold start (bench/cold_start.py). A key the sweeper cannot use still stops the sweep before
it decides anything, at its first claim that needs Stripe, unheartbeaten (docs/runbook.md); a stack
with nothing stale reads no key, and Charge Payment or the webhook consumer meets a bad key first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from payment_saga.backstop import check_awaiting_settlements
from payment_saga.intents import IntentReader
from payment_saga.payments import AttemptReader
from payment_saga.reconcile import ProviderUnavailable, ReconcileOutcome
from payment_saga.webhooks import WebhookOutcome

if TYPE_CHECKING:
    from collections.abc import Callable

    from payment_saga.claims import ClaimsStore
    from payment_saga.reconcile import ReconcileDecision
    from payment_saga.webhooks import WebhookDecision

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Count:
    """One metric to add 1 to: ``name``, also broken down by ``dimensions`` when there are any."""

    name: str
    dimensions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Said:
    """One structured log event (``event``, at ``level``, with ``fields``) and the metrics that count it."""

    event: str
    fields: dict[str, Any]
    counts: tuple[Count, ...] = ()
    level: str = "info"


def said_of_decision(decision: ReconcileDecision) -> list[Said]:
    """What the sweeper tells about one reconciliation decision: its duplicates first, then its outcome."""
    said = [_duplicates(decision)] if decision.extra_charge_ids else []
    said.append(_OUTCOMES[decision.outcome](decision, _fields(decision)))
    return said


def _fields(decision: ReconcileDecision) -> dict[str, Any]:
    return {
        "orderId": decision.order_id,
        "attempt": decision.attempt,
        "claimToken": decision.claim_token,
        "reason": decision.reason,
    }


def _resolved(decision: ReconcileDecision) -> Count:
    return Count("ReconciliationResolved", (("Outcome", decision.outcome.value),))


def _completed(decision: ReconcileDecision, fields: dict[str, Any]) -> Said:
    return Said(
        "reconciliation_completed", {**fields, "chargeId": decision.charge_id}, (_resolved(decision),)
    )


def _released(decision: ReconcileDecision, fields: dict[str, Any]) -> Said:
    reason = decision.release_reason.value if decision.release_reason else None
    return Said("reconciliation_released", {**fields, "releaseReason": reason}, (_resolved(decision),))


def _charge_on_released(decision: ReconcileDecision, fields: dict[str, Any]) -> Said:
    # A release (or a later attempt) rested on "nothing was charged", and the provider shows
    # otherwise: a double charge in the making, or made. A person must look now.
    extra = {"chargeId": decision.charge_id, "applied": decision.applied}
    return Said("charge_on_released_claim", {**fields, **extra}, (Count("ChargeOnReleasedClaim"),), "error")


def _pending(decision: ReconcileDecision, fields: dict[str, Any]) -> Said:
    counts = [Count("ReconciliationPending")]
    if decision.list_cap_reached:
        counts.append(Count("ReconciliationListCapped"))
    if decision.settlement_overdue:
        # A debit still unsettled past the window its payment method allows: SettlementOverdueAlarm.
        counts.append(Count("SettlementOverdue"))
    extra = {"listCapReached": decision.list_cap_reached, "settlementOverdue": decision.settlement_overdue}
    return Said("reconciliation_pending", {**fields, **extra}, tuple(counts))


def _changed(decision: ReconcileDecision, fields: dict[str, Any]) -> Said:
    # Someone else moved the claim on between discovery and the write: not an error.
    return Said("reconciliation_changed", fields, (Count("ReconciliationChanged"),))


def _failed(decision: ReconcileDecision, fields: dict[str, Any]) -> Said:
    return Said("reconciliation_failed", fields, (Count("ReconciliationFailed"),), "error")


_OUTCOMES: dict[ReconcileOutcome, Callable[[ReconcileDecision, dict[str, Any]], Said]] = {
    ReconcileOutcome.COMPLETED: _completed,
    ReconcileOutcome.RELEASED: _released,
    ReconcileOutcome.CHARGE_ON_RELEASED: _charge_on_released,
    ReconcileOutcome.PENDING: _pending,
    ReconcileOutcome.CHANGED: _changed,
    ReconcileOutcome.FAILED: _failed,
}


def _duplicates(decision: ReconcileDecision) -> Said:
    """More than one succeeded PaymentIntent for one attempt: invariant 1 broken, refund the extras."""
    fields = {
        "orderId": decision.order_id,
        "attempt": decision.attempt,
        "chargeId": decision.charge_id,
        "duplicateChargeIds": list(decision.extra_charge_ids),
    }
    return Said(
        "duplicate_charge",
        fields,
        tuple(Count("DuplicateCharge") for _ in decision.extra_charge_ids),
        "error",
    )


#: What the settlement check can find that is money taken wrongly: logged at ERROR, on the sweeper's alarms.
_SETTLEMENT_ALARMS = {
    WebhookOutcome.DUPLICATE_CHARGE: ("duplicate_charge", "DuplicateCharge"),
    WebhookOutcome.CHARGE_ON_RELEASED: ("charge_on_released_claim", "ChargeOnReleasedClaim"),
    WebhookOutcome.MISMATCH: ("webhook_mismatch", "WebhookMismatch"),
}


def said_of_settlement(found: WebhookDecision | Exception) -> Said:
    """What the sweeper tells about one claim the settlement check asked Stripe about (or could not)."""
    if isinstance(found, Exception):
        return Said(
            "settlement_check_failed", {"reason": str(found)}, (Count("SettlementCheckFailed"),), "warning"
        )
    fields = {
        "orderId": found.order_id,
        "attempt": found.attempt,
        "paymentIntentId": found.payment_intent_id,
        "outcome": found.outcome.value,
        "reason": found.reason,
        "applied": found.applied,
    }
    checked = Count("SettlementChecked", (("Outcome", found.outcome.value),))
    if found.outcome not in _SETTLEMENT_ALARMS:
        return Said("settlement_checked", fields, (checked,))
    event, metric = _SETTLEMENT_ALARMS[found.outcome]
    return Said(event, fields, (Count(metric), checked), "error")


def check_settlements(
    store: ClaimsStore,
    reader: IntentReader,
    *,
    livemode: bool,
    check_id: str,
    keep_going: Callable[[], bool],
    tell: Callable[[Said], None],
) -> SettlementTally:
    """The settlement backstop (:func:`payment_saga.backstop.check_awaiting_settlements`), each claim told."""
    tally = SettlementTally()
    for found in check_awaiting_settlements(
        store, reader, livemode=livemode, check_id=check_id, keep_going=keep_going
    ):
        tally.add(found)
        tell(said_of_settlement(found))
    return tally


@dataclass
class SettlementTally:
    """How one settlement check ended: its outcomes counted, and the claims it could not ask about."""

    outcomes: dict[str, int] = field(default_factory=dict)
    failed: int = 0

    def add(self, found: WebhookDecision | Exception) -> None:
        if isinstance(found, Exception):
            self.failed += 1
            return
        self.outcomes[found.outcome.value] = self.outcomes.get(found.outcome.value, 0) + 1


class _Reader(AttemptReader, IntentReader, Protocol):
    """What the sweeper asks the provider: the attempt's PaymentIntents, or one by id. Never a charge."""


def _on_first_use(
    method: Callable[Concatenate[_Reader, P], R],
) -> Callable[Concatenate[ProviderOnFirstUse, P], R]:
    """``method`` of :class:`_Reader`, asked of the provider :class:`ProviderOnFirstUse` builds at this
    first call: the same parameters and answer, so mypy holds the forwarding to the protocol."""
    name = method.__name__

    def forwarded(self: ProviderOnFirstUse, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast("Callable[P, R]", getattr(self._provider(), name))(*args, **kwargs)

    return forwarded


class ProviderOnFirstUse:
    """The provider ``build`` makes, made at the first question a claim asks of it, then kept.

    A sweep that finds nothing to ask Stripe about builds none: no key read, no Stripe SDK imported. A
    ``build`` that fails (the key unreadable, or of the other mode) raises :class:`ProviderUnavailable`,
    which stops the sweep there: no claim can be asked about, and each is left as it was.
    """

    def __init__(self, build: Callable[[], _Reader]) -> None:
        self._build = build
        self._built: _Reader | None = None

    def _provider(self) -> _Reader:
        if self._built is None:
            try:
                self._built = self._build()
            except Exception as exc:
                raise ProviderUnavailable(f"the payment provider could not be built: {exc}") from exc
        return self._built

    search_attempt = _on_first_use(_Reader.search_attempt)
    list_attempt = _on_first_use(_Reader.list_attempt)
    retrieve_intent = _on_first_use(_Reader.retrieve_intent)
