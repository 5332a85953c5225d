"""The test controls of :class:`~.emulator.ProviderEmulator`: what a test reads and steers.

Reading: the clock, the ledger of charges, the PaymentIntents, how many requests reached each
endpoint. Steering: an account's history, keys' permissions, accounts and revocation, faults,
failure rates and forced outcomes, how a processing payment settles, a PaymentIntent moved on by
hand, and a webhook event sent as ``stripe trigger`` sends it. They are a mixin of the one front
class, so that they work on its state under its lock; :mod:`.admin` serves them over HTTP.
"""

from __future__ import annotations

import copy
import threading
from typing import TYPE_CHECKING, Any, get_args

from saga_local.stripe_emulator import admin, intents, webhooks
from saga_local.stripe_emulator.responses import Permission

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga_local.stripe_emulator.admin import FailureRate, FaultKind, ProviderFault
    from saga_local.stripe_emulator.intents import ForcedOutcome, LedgerEntry
    from saga_local.stripe_emulator.search import Versions
    from saga_local.stripe_emulator.server import Endpoint
    from saga_local.stripe_emulator.webhooks import WebhookSender

#: The account of every API key not given another one (``ProviderEmulator.assign_key``).
DEFAULT_ACCOUNT = "acct_emulator"


class EmulatorControls:
    """The test controls, on the state :class:`~.emulator.ProviderEmulator` holds (see the module)."""

    # The front class's state these controls work on (it sets them all in its __init__).
    _lock: threading.Lock
    _clock: Callable[[], float]
    _clock_offset: float
    webhooks: WebhookSender
    settle_outcome: str
    _settlements: set[threading.Timer]
    _key_permissions: dict[str, Permission]
    _revoked: set[str]
    _key_accounts: dict[str, str]
    _intents: dict[str, dict[str, Any]]
    _intent_info: dict[str, dict[str, Any]]
    _versions: Versions
    _ledger: list[LedgerEntry]
    _faults: list[ProviderFault]
    _rates: list[FailureRate]
    _forced: list[ForcedOutcome]
    _requests: dict[str, int]
    _settle_as: dict[str, str]
    # The front class's state changes these controls make (called with the lock held).
    _reset_state: Callable[[], None]
    _publish: Callable[..., None]
    _transition: Callable[[dict[str, Any], str], None]

    # -- test controls -----------------------------------------------------------------------

    def now(self) -> float:
        """The emulator's clock: ``clock()`` plus whatever :meth:`advance_clock` added."""
        return self._clock() + self._clock_offset

    def advance_clock(self, seconds: float) -> float:
        """Move the emulator's clock on (idempotency keys expire, searches catch up). Returns ``now()``."""
        with self._lock:
            self._clock_offset += seconds
        return self.now()

    def charges(self) -> list[LedgerEntry]:
        """Every charge applied so far, oldest first."""
        with self._lock:
            return list(self._ledger)

    def charges_for(self, order_id: str) -> list[LedgerEntry]:
        """The charges applied for one order (by ``metadata[orderId]``)."""
        return [entry for entry in self.charges() if entry.order_id == order_id]

    def payment_intent(self, intent_id: str) -> dict[str, Any] | None:
        """A PaymentIntent as the API would return it, or None."""
        with self._lock:
            intent = self._intents.get(intent_id)
            return copy.deepcopy(intent) if intent is not None else None

    def payment_intents(self, order_id: str | None = None) -> list[dict[str, Any]]:
        """Every PaymentIntent (of ``order_id``, if set), oldest first, as the API would return them."""
        with self._lock:
            return [
                copy.deepcopy(intent)
                for intent in self._intents.values()
                if order_id is None or intent["metadata"].get("orderId") == order_id
            ]

    def add_history(
        self,
        count: int,
        *,
        created_from: int,
        created_to: int,
        customer: str | None = None,
        status: str = "succeeded",
        amount: int = 2500,
        currency: str = "usd",
    ) -> list[str]:
        """Give the account ``count`` PaymentIntents of other orders, straight into the state.

        An account's volume for a test (a hundred thousand in a few seconds): no request is sent or
        counted, no idempotency key saved, no charge added to the ledger (they are not charges of
        this run). Their ``created`` is spread evenly over ``[created_from, created_to]``; each
        names its own order (``metadata[orderId]`` ``HISTORY-<n>``, attempt 1) and ``customer``, if
        given, and is in ``status``. The search has indexed them as of their ``created``; the list
        and retrieve see them at once. Returns their ids, oldest first.
        """
        if count < 0 or created_from > created_to:
            raise ValueError("count must not be negative, nor created_from after created_to")
        if status not in {"succeeded", "requires_payment_method", "canceled", "processing"}:
            raise ValueError(f"cannot add PaymentIntents in {status!r}")
        span = created_to - created_from
        with self._lock:
            first = len(self._intents)
        made = [
            intents.settled_intent(
                amount=amount,
                currency=currency.lower(),
                created=created_from + (span * n) // max(count - 1, 1),
                customer=customer,
                metadata={"orderId": f"HISTORY-{first + n}", "attempt": "1"},
                status=status,
            )
            for n in range(count)
        ]
        with self._lock:
            for intent in made:
                self._intents[intent["id"]] = intent
                # Indexed as of its creation. A shallow copy is the published state: the state
                # changes replace top-level fields only, never the nested ones it shares.
                self._versions[intent["id"]] = [(float(intent["created"]), dict(intent))]
        return [intent["id"] for intent in made]

    def add_foreign_intent(
        self, *, account: str, order_id: str, attempt: int, amount: int, currency: str
    ) -> str:
        """A succeeded PaymentIntent of another Stripe account (a connected one, say) whose metadata
        names one of our orders: what a forged webhook could point at. It is in no ledger of ours and
        no key of our account reads it (retrieve answers 404), as on Stripe. Returns its id."""
        if not account.startswith("acct_") or account == DEFAULT_ACCOUNT:
            raise ValueError("another account's id starts with acct_ and is not ours")
        intent = intents.settled_intent(
            amount=amount,
            currency=currency.lower(),
            created=int(self.now()),
            customer=None,
            metadata={"orderId": order_id, "attempt": str(attempt)},
            status="succeeded",
        )
        with self._lock:
            self._intents[intent["id"]] = intent
            self._intent_info[intent["id"]] = {"account": account}
        return str(intent["id"])

    def request_count(self, endpoint: Endpoint) -> int:
        """How many authenticated requests reached ``endpoint`` (replays and 409s excluded)."""
        with self._lock:
            return self._requests[endpoint]

    def restrict_key(self, api_key: str, *, payment_intents: Permission) -> None:
        """Give the restricted key ``api_key`` (``rk_...``) this permission on PaymentIntents.

        ``write`` allows every endpoint, ``read`` retrieve, search and list only, ``none`` nothing:
        a request the key may not make is a 403, answered before parameters are validated or the
        idempotency key is looked at (nothing is applied or saved). A restricted key never
        configured here may write.
        """
        if not api_key.startswith(("rk_test_", "rk_live_")):
            raise ValueError("only a restricted key (rk_test_... or rk_live_...) has permissions")
        if payment_intents not in get_args(Permission):
            raise ValueError(f"payment_intents must be one of {get_args(Permission)}")
        with self._lock:
            self._key_permissions[api_key] = payment_intents

    def assign_key(self, api_key: str, account: str) -> None:
        """Make ``api_key`` a key of ``account`` (every key not assigned is one of
        :data:`DEFAULT_ACCOUNT`). Idempotency keys are the account's, in the API key's mode: keys of
        one account share them (a rolled key and its successor), keys of two accounts do not."""
        if not account.startswith("acct_"):
            raise ValueError("an account id starts with acct_")
        with self._lock:
            self._key_accounts[api_key] = account

    def revoke_key(self, api_key: str) -> None:
        """Make ``api_key`` invalid from now on (a rolled or deleted key): every request is a 401."""
        with self._lock:
            self._revoked.add(api_key)

    def reset(self) -> None:
        """Forget every PaymentIntent, charge, idempotency key, fault and forced outcome.

        Settings (``dedupe``, ``latency``, ``search_lag_seconds``, key permissions, revoked keys and
        keys' accounts) and the clock are kept.
        """
        with self._lock:
            self._reset_state()
        self.webhooks.reset()

    def settle_as(self, order_id: str, outcome: str) -> None:
        """How ``order_id``'s processing payment settles after ``settle_seconds``: ``succeeded`` or
        ``failed`` (instead of :attr:`settle_outcome`)."""
        if outcome not in ("succeeded", "failed"):
            raise ValueError("a payment settles succeeded or failed")
        with self._lock:
            self._settle_as[order_id] = outcome

    def inject(
        self,
        kind: FaultKind,
        *,
        order_id: str | None = None,
        endpoint: Endpoint = "create",
        times: int = 1,
        seconds: float | None = None,
    ) -> ProviderFault:
        """Queue a fault for the next ``times`` matching requests. See :data:`FAULT_KINDS`."""
        fault = admin.ProviderFault(
            kind=admin.check_kind(kind),
            order_id=order_id,
            endpoint=admin.check_endpoint(endpoint),
            times=times,
            seconds=seconds,
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def set_failure_rate(
        self,
        kind: FaultKind,
        probability: float,
        *,
        order_id: str | None = None,
        endpoint: Endpoint = "create",
        seconds: float | None = None,
    ) -> FailureRate:
        """Fire ``kind`` on each matching request with ``probability`` (0 removes the rule)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError("probability must be between 0 and 1")
        rate = admin.FailureRate(
            admin.check_kind(kind), probability, order_id, admin.check_endpoint(endpoint), seconds
        )
        with self._lock:
            self._rates = [
                r for r in self._rates if (r.kind, r.order_id, r.endpoint) != (kind, order_id, endpoint)
            ]
            if probability > 0:
                self._rates.append(rate)
        return rate

    def clear_faults(self) -> None:
        """Drop every queued fault, failure rate and forced outcome."""
        with self._lock:
            self._faults.clear()
            self._rates.clear()
            self._forced.clear()

    def force_outcome(self, status: str, *, order_id: str | None = None, times: int = 1) -> None:
        """Make the next ``times`` confirms (of ``order_id``, if set) end in ``status`` instead.

        ``processing`` stands for a payment that settles later; ``requires_action`` for a
        confirmation that needs the customer (see :meth:`set_status` to settle either).
        """
        if status not in intents.FORCEABLE_STATUSES:
            raise ValueError(f"status must be one of {sorted(intents.FORCEABLE_STATUSES)}")
        with self._lock:
            self._forced.append(intents.ForcedOutcome(status, order_id, times))

    def set_status(self, intent_id: str, status: str) -> dict[str, Any]:
        """Move a PaymentIntent on, as Stripe does when a payment settles (``succeeded`` records a charge)."""
        if status not in {
            "succeeded",
            "requires_payment_method",
            "canceled",
            "processing",
            "requires_action",
        }:
            raise ValueError(f"cannot move a PaymentIntent to {status!r}")
        with self._lock:
            intent = self._intents.get(intent_id)
            if intent is None:
                raise KeyError(intent_id)
            if status == "requires_payment_method" and intent["status"] == "processing":
                # A debit that fails to settle: Stripe records why, as it does for a declined card.
                intent["last_payment_error"] = intents.settlement_failure()
            self._transition(intent, status)
            self._publish(intent)
            return copy.deepcopy(intent)

    def trigger(
        self, event_type: str, *, intent_id: str | None = None, order_id: str | None = None
    ) -> dict[str, Any]:
        """Send ``event_type`` for a PaymentIntent (``intent_id``, or the latest of ``order_id``), as
        ``stripe trigger`` and the dashboard's "Resend" do: the event of that type it already sent is
        sent again, as it was (a duplicate, or a late one); otherwise the PaymentIntent is moved to that
        event's status (a payment settled, failed, cancelled), which sends it. Returns the event."""
        status = webhooks.EVENT_STATUSES.get(event_type)
        if status is None:
            raise ValueError(f"event must be one of {sorted(webhooks.EVENT_STATUSES)}")
        if intent_id is None:
            mine = self.payment_intents(order_id) if order_id else []
            if not mine:
                raise KeyError(f"no PaymentIntent for order {order_id!r}")
            intent_id = mine[-1]["id"]
        sent = [e for e in self.webhooks.events(intent_id) if e["type"] == event_type]
        if sent:
            return self.webhooks.resend(sent[-1]["id"])
        self.set_status(intent_id, status)
        sent = [e for e in self.webhooks.events(intent_id) if e["type"] == event_type]
        if not sent:
            raise ValueError("no webhook endpoint is registered for that event: nothing was sent")
        return sent[-1]

    def _settle(self, intent_id: str, timer: threading.Timer) -> None:
        with self._lock:
            self._settlements.discard(timer)
            intent = self._intents.get(intent_id)
            if intent is None or intent["status"] != "processing":
                return  # cancelled, reset, or moved on by hand meanwhile
            order_id = intent["metadata"].get("orderId")
            outcome = self._settle_as.get(order_id, self.settle_outcome)
        self.set_status(intent_id, "succeeded" if outcome == "succeeded" else "requires_payment_method")
